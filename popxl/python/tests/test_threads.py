"""popxl objects used from several Python threads (as PopXL allows): an IR built on
one thread and run on another, handles passed between threads, sessions used
concurrently. Results are checked against numpy; no call may end in PyO3's
``PanicException`` (a ``BaseException``, which ``except Exception`` misses)."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import popxl
import popxl.ops as ops

RNG = np.random.default_rng(7)
X = RNG.standard_normal((4, 3)).astype(np.float32)
W = RNG.standard_normal((3, 5)).astype(np.float32)


def in_thread(f, *args):
    """Run ``f(*args)`` on a new ``threading.Thread``; return its result or raise its error."""
    out = {}

    def body():
        try:
            out["value"] = f(*args)
        except BaseException as e:  # noqa: B036 - a PanicException must fail the test too
            out["error"] = e

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def build_linear(scale=1.0):
    """``relu(x @ w) * scale + 1`` with ``w`` a variable: (ir, x stream, y stream, w)."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x_h2d = popxl.h2d_stream(X.shape, popxl.float32, name="x")
        w = popxl.variable(W, name="w")
        y = ops.relu(ops.matmul(ops.host_load(x_h2d), w)) * scale + 1.0
        y_d2h = popxl.d2h_stream(y.shape, y.dtype, name="y")
        ops.host_store(y_d2h, y)
    return ir, x_h2d, y_d2h, w


def linear_ref(x, scale=1.0):
    return np.maximum(x.astype(np.float64) @ W, 0) * scale + 1.0


def test_ir_built_on_one_thread_runs_on_another():
    ir, x_h2d, y_d2h, w = in_thread(build_linear)
    with popxl.Session(ir, "cpu") as session:
        got = session.run({x_h2d: X})[y_d2h]
        np.testing.assert_allclose(got, linear_ref(X), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(session.get_tensor_data(w), W)
    # And the other way round: built here, prepared and run by a pool worker.
    ir, x_h2d, y_d2h, w = build_linear(2.0)

    def run_there():
        with popxl.Session(ir, "cpu") as session:
            return session.run({x_h2d: X})[y_d2h]

    with ThreadPoolExecutor(1) as pool:
        got = pool.submit(run_there).result()
    np.testing.assert_allclose(got, linear_ref(X, 2.0), rtol=1e-5, atol=1e-6)


def test_handles_cross_threads():
    """Graphs and tensors made here are read and built on in a thread; the session
    made there is run, read and written here."""
    ir = popxl.Ir()
    main = ir.main_graph
    with main:
        x_h2d = popxl.h2d_stream(X.shape, popxl.float32, name="x")
        x = ops.host_load(x_h2d)
        w = popxl.variable(W, name="w")

    def extend():
        assert (x.shape, x.dtype, w.name) == (X.shape, popxl.float32, "w")
        with main:
            y = ops.matmul(x, w) - 0.5
            y_d2h = popxl.d2h_stream(y.shape, y.dtype, name="y")
            ops.host_store(y_d2h, y)
        return y_d2h, popxl.Session(ir, "cpu")

    y_d2h, session = in_thread(extend)
    assert y_d2h.shape == (4, 5)
    with session:
        np.testing.assert_allclose(session.run({x_h2d: X})[y_d2h], X @ W - 0.5, rtol=1e-5, atol=1e-6)
        session.write_variable_data(w, 2 * W)
        got = in_thread(lambda: session.run({x_h2d: X})[y_d2h])
        np.testing.assert_allclose(got, X @ (2 * W) - 0.5, rtol=1e-5, atol=1e-6)
    # The session (and the IR it holds) may be released on another thread.
    in_thread(lambda s: s.__repr__(), session)
    del session


def test_concurrent_builds_and_runs():
    """Four workers each build an IR and run it several times while the others do."""

    def work(k):
        ir, x_h2d, y_d2h, _ = build_linear(float(k))
        xs = [RNG_K.standard_normal(X.shape).astype(np.float32) for _ in range(5)]
        with popxl.Session(ir, "cpu") as session:
            return [(x, session.run({x_h2d: x})[y_d2h]) for x in xs], k

    RNG_K = np.random.default_rng(11)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(1, 9)))
    for pairs, k in results:
        for x, got in pairs:
            np.testing.assert_allclose(got, linear_ref(x, float(k)), rtol=1e-5, atol=1e-5)


def test_one_session_from_two_threads():
    """Two threads run one session at once: the calls take turns, each gets its own result."""
    ir, x_h2d, y_d2h, w = build_linear()
    inputs = [np.full(X.shape, k, np.float32) + X for k in range(40)]
    with popxl.Session(ir, "cpu") as session:

        def work(ks):
            return [(k, session.run({x_h2d: inputs[k]})[y_d2h]) for k in ks]

        with ThreadPoolExecutor(2) as pool:
            parts = list(pool.map(work, [range(0, 40, 2), range(1, 40, 2)]))
        # Meanwhile-safe reads from this thread.
        np.testing.assert_array_equal(session.get_tensor_data(w), W)
    for part in parts:
        for k, got in part:
            np.testing.assert_allclose(got, linear_ref(inputs[k]), rtol=1e-5, atol=1e-5)


def test_building_context_is_per_thread():
    """``with graph:`` applies to the thread that enters it; exiting it on another
    thread is a RuntimeError naming the scope, and leaves the context intact."""
    ir = popxl.Ir()
    g = ir.main_graph
    g.__enter__()
    try:
        with pytest.raises(RuntimeError, match="with graph"):
            in_thread(lambda: g.__exit__(None, None, None))
        with pytest.raises(RuntimeError, match="in_sequence"):
            seq = popxl.in_sequence()
            seq.__enter__()
            try:
                in_thread(lambda: seq.__exit__(None, None, None))
            finally:
                seq.__exit__(None, None, None)
        # Still current here: ops go into the main graph.
        c = popxl.constant(np.ones(2, np.float32), name="c")
        assert c in g.tensors
        # Another thread has its own (empty) context: a typed error, not a panic.
        with pytest.raises(RuntimeError, match="current graph"):
            in_thread(lambda: popxl.constant(np.ones(2, np.float32)))
        # It may enter the graph itself.
        d = in_thread(lambda: _const_in(g))
        assert d.name == "d"
    finally:
        g.__exit__(None, None, None)


def _const_in(g):
    with g:
        return popxl.constant(np.zeros(2, np.float32), name="d")
