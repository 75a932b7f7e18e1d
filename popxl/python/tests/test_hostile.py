"""Hostile arguments at the Python boundary: every case must raise a Python exception
(never crash the interpreter). Cases that could crash run in a subprocess, which must
exit normally having caught the expected exception."""

import gc
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import popxl
import popxl.ops as ops


def add_one_program(shape=(4,), dtype=popxl.float32):
    ir = popxl.Ir()
    with ir.main_graph:
        x_in = popxl.h2d_stream(shape, dtype, "x")
        y = ops.host_load(x_in) + 1
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    return ir, x_in, out


# ---------------------------------------------------------------- wrong types


@pytest.mark.parametrize(
    "call",
    [
        lambda: popxl.Session("not an ir"),
        lambda: popxl.Session(popxl.Ir(), 3),
        lambda: popxl.h2d_stream("abc", popxl.float32),
        lambda: popxl.h2d_stream((2, 2), "not a dtype"),
        lambda: popxl.h2d_stream((2, 2), object()),
        lambda: popxl.d2h_stream([1.5, 2], popxl.float32),
    ],
)
def test_wrong_types_raise(call):
    with pytest.raises((TypeError, ValueError)):
        call()


def test_wrong_types_in_graphs_and_runs():
    ir, x_in, out = add_one_program()
    with ir.main_graph:
        with pytest.raises(TypeError):
            popxl.variable(object())
        with pytest.raises(TypeError):
            ops.add(x_in, 1)  # a stream is not a tensor
        with pytest.raises(TypeError):
            ops.host_load("x")
        with pytest.raises((TypeError, ValueError)):
            ops.reshape(popxl.variable(np.ones(4, np.float32)), "ab")
    with popxl.Session(ir, "cpu") as s:
        with pytest.raises(TypeError):
            s.run([1, 2, 3, 4])
        with pytest.raises(TypeError):
            s.run({"x": np.ones(4, np.float32)})
        with pytest.raises(TypeError):
            s.run({x_in: np.array([object()] * 4)})
        with pytest.raises(TypeError):
            s.run({x_in: np.array(["a", "b", "c", "d"])})
        with pytest.raises(TypeError):
            s.run({x_in: np.ones(4, np.int32)})  # arrays keep their dtype
        with pytest.raises(TypeError):
            s.get_tensor_data("W")
        with pytest.raises(TypeError):
            s.write_variables_data([1, 2])
        # Still usable.
        np.testing.assert_array_equal(s.run({x_in: np.arange(4, dtype=np.float32)})[out], np.arange(4) + 1)


# ---------------------------------------------------------------- wrong shapes and huge sizes


def test_wrong_shapes_raise_value_error():
    ir, x_in, out = add_one_program((2, 3))
    with popxl.Session(ir, "cpu") as s:
        for bad in [np.ones((3, 2), np.float32), np.ones((2, 3, 2), np.float32), np.ones((6,), np.float32),
                    np.ones((0, 3), np.float32), np.float32(1.0)]:
            with pytest.raises(ValueError):
                s.run({x_in: bad})
        with pytest.raises(ValueError):
            s.run({})
        res = s.run({x_in: np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(res[out], np.full((2, 3), 2, np.float32))


@pytest.mark.parametrize(
    "shape", [(2**62, 2**62), (-1, 3), (2**63,), (2**70,), (1 << 40, 1 << 30), (3, -5)]
)
def test_huge_and_negative_stream_shapes(shape):
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises((ValueError, OverflowError, MemoryError)):
            popxl.h2d_stream(shape, popxl.float32, "x")


@pytest.mark.parametrize(
    "body, expect",
    [
        # A stream whose host array would take 4 TiB: refused when the session is made or run.
        (
            """
            ir = popxl.Ir()
            with ir.main_graph:
                x = popxl.h2d_stream((1 << 40,), popxl.float32, "x")
                t = ops.host_load(x)
                o = popxl.d2h_stream(t.shape, t.dtype, "o")
                ops.host_store(o, t)
            with popxl.Session(ir, "cpu") as s:
                s.run({x: np.zeros(1, np.float32)})
            """,
            "(ValueError|MemoryError|RuntimeError)",
        ),
        (
            """
            ir = popxl.Ir()
            with ir.main_graph:
                v = popxl.variable(np.ones(4, np.float32))
                v.reshape((2**62, 2**62))
            """,
            "(ValueError|OverflowError)",
        ),
        (
            """
            ir = popxl.Ir()
            with ir.main_graph:
                popxl.graph_input((2**62, 2**62), popxl.float32)
            """,
            "(ValueError|OverflowError|RuntimeError)",
        ),
        (
            """
            ir = popxl.Ir()
            ir.num_host_transfers = 2**62
            with ir.main_graph:
                x = popxl.h2d_stream((1 << 20,), popxl.float32, "x")
                o = popxl.d2h_stream((1 << 20,), popxl.float32, "o")
                ops.host_store(o, ops.host_load(x))
            with popxl.Session(ir, "cpu") as s:
                s.run({x: np.zeros((4, 1 << 20), np.float32)})
            """,
            "(ValueError|MemoryError|RuntimeError|OverflowError)",
        ),
        (
            """
            ir = popxl.Ir()
            ir.replication_factor = 2**40
            with ir.main_graph:
                v = popxl.variable(np.ones(4, np.float32))
                o = popxl.d2h_stream(v.shape, v.dtype, "o")
                ops.host_store(o, v)
            popxl.Session(ir, "cpu")
            """,
            "(ValueError|RuntimeError|OverflowError)",
        ),
    ],
)
def test_huge_sizes_raise_in_a_subprocess(body, expect):
    import re

    out = _isolated_any(body)
    assert re.search(rf"RAISED {expect} ", out), out


def _isolated_any(body, allow_panic_message=False):
    code = textwrap.dedent(
        """
        import numpy as np, popxl, popxl.ops as ops
        try:
        {body}
        except BaseException as e:
            print("RAISED", type(e).__name__, "|", str(e)[:300])
        else:
            print("NO EXCEPTION")
        """
    ).replace("{body}", textwrap.indent(textwrap.dedent(body), "    "))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"the interpreter died (exit {r.returncode}): {r.stderr[-2000:]}"
    assert allow_panic_message or "panicked" not in r.stderr, r.stderr[-2000:]
    return r.stdout


# ---------------------------------------------------------------- objects of another IR


def test_tensors_and_streams_of_another_ir():
    ir1, x1, out1 = add_one_program()
    ir2, x2, out2 = add_one_program()
    with ir1.main_graph:
        a = popxl.variable(np.ones(4, np.float32), name="a")
    with ir2.main_graph:
        b = popxl.variable(np.ones(4, np.float32), name="b")
        with pytest.raises(ValueError):
            ops.add(a, b)
        with pytest.raises(ValueError):
            ops.host_store(out1, b)
    g = ir1.create_empty_graph("g")
    with g:
        with pytest.raises(ValueError):
            ops.add(b, b)
    with popxl.Session(ir1, "cpu") as s:
        with pytest.raises(ValueError):
            s.run({x2: np.ones(4, np.float32)})
        with pytest.raises(ValueError):
            s.run({x1: np.ones(4, np.float32), x2: np.ones(4, np.float32)})
        with pytest.raises((ValueError, TypeError)):
            s.get_tensor_data(b)
        with pytest.raises((ValueError, TypeError)):
            s.write_variable_data(b, np.zeros(4, np.float32))
        np.testing.assert_array_equal(s.get_tensor_data(a), np.ones(4, np.float32))


# ---------------------------------------------------------------- lifetimes


def test_session_outlives_its_ir_handle_and_tensors():
    def make():
        ir, x_in, out = add_one_program()
        return popxl.Session(ir, "cpu"), x_in, out

    s, x_in, out = make()
    gc.collect()
    with s:
        np.testing.assert_array_equal(s.run({x_in: np.zeros(4, np.float32)})[out], np.ones(4, np.float32))
    assert s.ir is not None

    def tensor_only():
        ir = popxl.Ir()
        with ir.main_graph:
            return popxl.variable(np.ones(3, np.float32), name="v")

    t = tensor_only()
    gc.collect()
    assert t.shape == (3,) and t.dtype == popxl.float32
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(ValueError):
            ops.add(t, t)


def test_session_after_exit_and_double_exit():
    ir, x_in, out = add_one_program()
    s = popxl.Session(ir, "cpu")
    with s:
        s.run({x_in: np.zeros(4, np.float32)})
    with pytest.raises(ValueError):
        s.run({x_in: np.zeros(4, np.float32)})
    with pytest.raises((ValueError, RuntimeError)):
        s.__exit__(None, None, None)
    with pytest.raises(ValueError):
        s.weights_to_host()
    # Re-entering works.
    with s:
        np.testing.assert_array_equal(s.run({x_in: np.zeros(4, np.float32)})[out], np.ones(4, np.float32))


def test_two_sessions_of_one_ir():
    ir, x_in, out = add_one_program()
    s1 = popxl.Session(ir, "cpu")
    s2 = popxl.Session(ir, "cpu")
    with s1, s2:
        r1 = s1.run({x_in: np.zeros(4, np.float32)})[out]
        r2 = s2.run({x_in: np.ones(4, np.float32)})[out]
    np.testing.assert_array_equal(r1, np.ones(4))
    np.testing.assert_array_equal(r2, np.full(4, 2.0))


def test_objects_used_from_another_thread_raise():
    """popxl objects belong to the thread that made them; another thread gets an exception, not a
    crash. (PyO3's check of `unsendable` classes raises `pyo3_runtime.PanicException`, a
    BaseException, and prints the panic message: the interpreter carries on.)"""
    out = _isolated_any(
        """
        import threading
        ir = popxl.Ir()
        with ir.main_graph:
            v = popxl.variable(np.ones(2, np.float32))
        errors = []
        def use():
            try:
                v.shape
            except BaseException as e:
                errors.append(type(e).__name__)
        th = threading.Thread(target=use)
        th.start(); th.join()
        raise RuntimeError("thread raised " + ",".join(errors))
        """,
        allow_panic_message=True,
    )
    assert "thread raised" in out and "thread raised |" not in out, out


# ---------------------------------------------------------------- numpy layouts and dtypes


def test_non_contiguous_and_foreign_layout_inputs_give_the_same_results():
    ir, x_in, out = add_one_program((3, 4))
    base = np.arange(24, dtype=np.float32).reshape(3, 8)
    want = base[:, ::2] + 1
    cases = {
        "strided": base[:, ::2],
        "fortran": np.asfortranarray(base[:, ::2]),
        "transposed": np.ascontiguousarray(want.T - 1).T,
        "big-endian": base[:, ::2].astype(">f4"),
        "reversed": base[::-1, 6::-2][::-1, ::-1],
        "unaligned": np.frombuffer(b"\0" + base[:, ::2].tobytes(), dtype=np.float32, offset=1).reshape(3, 4),
        "list": base[:, ::2].tolist(),
        "float64": base[:, ::2].astype(np.float64),
        "readonly": np.frombuffer(base[:, ::2].tobytes(), np.float32).reshape(3, 4),
    }
    with popxl.Session(ir, "cpu") as s:
        for name, arr in cases.items():
            np.testing.assert_array_equal(s.run({x_in: arr})[out], want, err_msg=name)
    assert cases["strided"].flags.c_contiguous is False


def test_wrongly_typed_inputs():
    ir, x_in, out = add_one_program((4,))
    ir_b, b_in, b_out = add_one_program((4,), popxl.int32)
    with popxl.Session(ir, "cpu") as s:
        with pytest.raises(TypeError):
            s.run({x_in: np.ones(4, np.int64)})
        with pytest.raises(TypeError):
            s.run({x_in: np.ones(4, np.float16)})
        with pytest.raises(ValueError):
            s.run({x_in: np.array([1e300, 0, 0, 0])})  # float64 that float32 cannot hold
        with pytest.raises(TypeError):
            s.run({x_in: np.ones(4, np.complex64)})
        with pytest.raises(TypeError):
            s.run({x_in: np.ones(4, np.float64)}, downcast_inputs=False)
    with popxl.Session(ir_b, "cpu") as s:
        with pytest.raises(ValueError):
            s.run({b_in: np.array([2**40, 0, 0, 0], np.int64)})
        np.testing.assert_array_equal(s.run({b_in: np.array([5, 6, 7, 8], np.int64)})[b_out], [6, 7, 8, 9])


def test_bool_inputs_must_hold_0_or_1():
    ir = popxl.Ir()
    with ir.main_graph:
        c_in = popxl.h2d_stream((4,), popxl.bool, "c")
        t = ops.logical_not(ops.host_load(c_in))
        out = popxl.d2h_stream(t.shape, t.dtype, "o")
        ops.host_store(out, t)
    with popxl.Session(ir, "cpu") as s:
        bad = np.array([0, 1, 2, 255], np.uint8).view(np.bool_)
        with pytest.raises(ValueError):
            s.run({c_in: bad})
        np.testing.assert_array_equal(s.run({c_in: np.array([True, False, True, False])})[out], [False, True, False, True])
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(ValueError):
            popxl.variable(bad)
        with pytest.raises(ValueError):
            popxl.constant(bad)
        v = popxl.variable(np.array([True, False, True, False]), name="v")
        ops.host_store(popxl.d2h_stream(v.shape, v.dtype, "v_out"), v)
    with popxl.Session(ir, "cpu") as s:
        with pytest.raises(ValueError):
            s.write_variable_data(v, bad)
        np.testing.assert_array_equal(s.get_tensor_data(v), [True, False, True, False])


# ---------------------------------------------------------------- the GIL


def _ticking_thread():
    """A thread that notes the time every 1000 loop iterations (pure Python: it needs the GIL)."""
    state = {"n": 0, "stop": False, "ticks": []}

    def count():
        while not state["stop"]:
            state["n"] += 1
            if state["n"] % 1000 == 0:
                state["ticks"].append(time.perf_counter())

    th = threading.Thread(target=count, daemon=True)
    th.start()
    return state, th


def _longest_gap(ticks, t0, t1):
    inside = [t for t in ticks if t0 < t < t1]
    return float(np.max(np.diff([t0, *inside, t1])))


def test_other_threads_run_while_a_session_prepares_and_runs():
    """A Python thread keeps running while ``Session(...)`` compiles and while ``run`` runs: the
    GIL is released. Held by a thread inside Rust, the GIL is never handed over, and the other
    thread would stand still for the whole call (its longest pause = the call's duration)."""
    n, depth = 64, 3000
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x_in = popxl.h2d_stream((n, n), popxl.float32, "x")
        x = ops.host_load(x_in)
        w = popxl.variable(np.eye(n, dtype=np.float32), name="w")
        for _ in range(depth):
            x = ops.tanh(x @ w)
        out = popxl.d2h_stream(x.shape, x.dtype, "y")
        ops.host_store(out, x)
    # A short switch interval: around the call the other thread gets at most 0.1 ms slices.
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    state, th = _ticking_thread()
    try:
        time.sleep(0.02)
        t0 = time.perf_counter()
        session = popxl.Session(ir, "cpu")
        t1 = time.perf_counter()
        with session:
            t2 = time.perf_counter()
            res = session.run({x_in: np.ones((n, n), np.float32)})
            t3 = time.perf_counter()
    finally:
        state["stop"] = True
        th.join()
        sys.setswitchinterval(old_interval)
    want = 1.0
    for _ in range(depth):
        want = np.tanh(want)  # every element: x @ I = x
    np.testing.assert_allclose(res[out], np.full((n, n), want), rtol=1e-4)
    prep, run = t1 - t0, t3 - t2
    gap_prep, gap_run = _longest_gap(state["ticks"], t0, t1), _longest_gap(state["ticks"], t2, t3)
    assert prep > 0.01 and run > 0.01, (prep, run)
    # Released, the longest pause is the scheduler's (the machine may be busy): well under half the call.
    assert gap_prep < 0.5 * prep, f"the other thread stood still for {gap_prep * 1e3:.1f} of {prep * 1e3:.1f} ms"
    assert gap_run < 0.5 * run, f"the other thread stood still for {gap_run * 1e3:.1f} of {run * 1e3:.1f} ms"


# ---------------------------------------------------------------- copies


def test_inputs_cross_without_a_copy_or_with_exactly_one():
    """The peak memory of a run with a 64 MiB input: a C-contiguous float32 array is read in
    place (no growth), a strided one is copied once (one input's worth), float64 downcast once
    (half its size)."""
    out = _isolated_any(
        """
        import resource
        mib = 64
        n = mib * 2**20 // 4
        ir = popxl.Ir()
        with ir.main_graph:
            x = popxl.h2d_stream((n,), popxl.float32, "x")
            o = popxl.d2h_stream((), popxl.float32, "o")
            ops.host_store(o, ops.sum(ops.host_load(x)))
        s = popxl.Session(ir, "cpu")
        contiguous = np.ones(n, np.float32)
        strided = np.ones(2 * n, np.float32)[::2]
        wide = np.ones(n, np.float64)
        def peak_growth(a):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            with s:
                r = float(s.run({x: a})[o])
            assert r == n, r
            return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        peak_growth(contiguous)  # the first run touches the session's own buffers
        growth = [peak_growth(a) for a in (contiguous, strided, wide)]
        raise RuntimeError("growth MiB " + " ".join(f"{g:.1f}" for g in growth))
        """
    )
    growth = [float(g) for g in out.split("growth MiB ")[1].split("|")[0].split()]
    assert growth[0] < 8, out  # read in place
    assert 48 < growth[1] < 100, out  # one copy of 64 MiB
    assert growth[2] < 100, out  # float64 (128 MiB) downcast into one float32 copy
