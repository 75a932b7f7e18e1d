"""Hostile arguments become Python exceptions (PopXL's types), never a crash."""

import gc

import numpy as np
import pytest
import popxl
import popxl.ops as ops
import popxl.transforms as transforms


def small_ir():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.ones(3, np.float32), name="v")
        x_in = popxl.h2d_stream((3,), popxl.float32, "x")
        x = ops.host_load(x_in)
        y = x + v
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    return ir, v, x_in, out, y


def test_wrong_argument_types():
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.constant(np.ones(3, np.float32))
        with pytest.raises(TypeError):
            ops.relu("not a tensor")
        with pytest.raises(TypeError):
            ops.concat(t)
        with pytest.raises(TypeError):
            ops.host_load(t)
        with pytest.raises(TypeError):
            popxl.h2d_stream("abc", popxl.float32)
        with pytest.raises(TypeError):
            popxl.h2d_stream((2,), object())
        with pytest.raises(TypeError):
            t + object()
        with pytest.raises(TypeError):
            ops.call(t)
        with pytest.raises(TypeError):
            transforms.autodiff(t)
        with pytest.raises(TypeError):
            popxl.Session("not an ir", "cpu")
        with pytest.raises(TypeError):
            popxl.variable(np.array(["a", "b"]))


def test_iteration_len_and_truth_value():
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.constant(np.ones((2, 3), np.float32))
        s = popxl.constant(1.0)
        assert len(t) == 2
        with pytest.raises(ValueError):
            len(s)
        with pytest.raises(TypeError):
            iter(t)
        with pytest.raises(TypeError):
            1.0 in t
        with pytest.raises(TypeError):
            bool(t)


def test_wrong_shapes_and_indices():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.constant(np.ones((2, 3), np.float32))
        b = popxl.constant(np.ones((4, 5), np.float32))
        with pytest.raises(ValueError):
            a + b
        with pytest.raises(ValueError):
            a @ a
        with pytest.raises(ValueError):
            ops.reshape(a, (7,))
        with pytest.raises((ValueError, IndexError)):
            a[5]
        with pytest.raises(IndexError):
            a[0, 0, 0]
        with pytest.raises(ValueError):
            ops.softmax(a, axis=4)
        out = popxl.d2h_stream((3, 2), popxl.float32)
        with pytest.raises(ValueError):
            ops.host_store(out, a)
        with pytest.raises(ValueError):
            popxl.h2d_stream((-1, 2), popxl.float32)


def test_huge_sizes():
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(ValueError):
            popxl.h2d_stream((2**40, 2**40, 2**40), popxl.float32)
        with pytest.raises(OverflowError):
            popxl.h2d_stream((2**70,), popxl.float32)
        a = popxl.constant(np.ones(2, np.float32))
        with pytest.raises(ValueError):
            ops.reshape(a, (2**62, 4))


def test_variable_in_subgraph_and_no_context():
    ir = popxl.Ir()
    g = ir.create_empty_graph("sub")
    with g:
        with pytest.raises(ValueError, match="variable"):
            popxl.variable(1.0)
    with pytest.raises(RuntimeError):
        popxl.gcg()
    with ir.main_graph:
        assert popxl.gcg() == ir.main_graph
        assert popxl.gir() == ir


def test_foreign_ir():
    ir1 = popxl.Ir()
    ir2 = popxl.Ir()
    with ir1.main_graph:
        a = popxl.constant(np.ones(2, np.float32))
    with ir2.main_graph:
        b = popxl.constant(np.ones(2, np.float32))
        with pytest.raises(ValueError):
            ops.add(a, b)
        g = ir2.create_graph(lambda x: x * 2, b)
    with ir1.main_graph:
        with pytest.raises(ValueError):
            ops.call(g, a)


def test_call_input_mistakes():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.constant(np.ones(2, np.float32))
        g = ir.create_graph(lambda x, y: x + y, a, a)
        with pytest.raises(ValueError):
            ops.call(g, a)  # missing input
        with pytest.raises(ValueError):
            ops.call(g, a, a, a)  # too many
        with pytest.raises(ValueError):
            ops.repeat(g, -1, a, a)


def test_session_errors():
    ir, v, x_in, out, y = small_ir()
    with pytest.raises(ValueError):
        popxl.Session(ir, "tpu")
    s = popxl.Session(ir, "cpu")
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="attached"):
        s.run({x_in: x})
    with s:
        with pytest.raises(ValueError):
            s.run({})  # missing input
        with pytest.raises(ValueError):
            s.run({x_in: np.ones(4, np.float32)})  # wrong shape
        with pytest.raises(TypeError):
            s.run({x_in: np.ones(3, np.int32)})  # wrong dtype
        with pytest.raises(TypeError):
            s.run({"x": x})
        with pytest.raises(TypeError):
            s.run(5)
        res = s.run({x_in: np.arange(3, dtype=np.float64)})  # 64-bit inputs are downcast
        np.testing.assert_equal(res[out], np.arange(3) + 1)
    with pytest.raises(TypeError):
        s.get_tensor_data(y)
    with pytest.raises(TypeError):
        s.write_variable_data(y, x)
    with pytest.raises(ValueError):
        s.write_variable_data(v, np.ones(4, np.float32))
    with pytest.raises(RuntimeError):
        ir.replication_factor = 2
    empty = popxl.Ir()
    with pytest.raises(RuntimeError):
        popxl.Session(empty, "cpu")
    with pytest.raises(RuntimeError):
        popxl.Session(popxl.Ir(), "ipu_hw")


def test_building_after_session_is_refused():
    ir, v, x_in, out, y = small_ir()
    popxl.Session(ir, "cpu")
    with ir.main_graph:
        with pytest.raises(RuntimeError):
            popxl.constant(1.0)


def test_session_outlives_its_ir():
    ir, v, x_in, out, y = small_ir()
    s = popxl.Session(ir, "cpu")
    del ir
    gc.collect()
    with s:
        res = s.run({x_in: np.full(3, 2.0, np.float32)})
    np.testing.assert_equal(res[out], [3, 3, 3])
    np.testing.assert_equal(s.get_tensor_data(v), [1, 1, 1])
    # A tensor handle of a dropped IR: properties still work, building refuses.
    ir2 = popxl.Ir()
    with ir2.main_graph:
        t = popxl.constant(np.ones(2, np.float32))
    g = ir2.main_graph
    del ir2, g
    gc.collect()
    assert t.shape == (2,)


def test_undefined_value():
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.constant(np.ones(2, np.float32))
        with pytest.raises(popxl.errors.UndefinedValue):
            t.ipu


def test_session_releases_the_gil():
    import threading

    ir, v, x_in, out, y = small_ir()
    s = popxl.Session(ir, "cpu")
    seen = []
    worker = threading.Thread(target=lambda: seen.append(sum(range(1000))))
    with s:
        worker.start()
        for _ in range(50):
            s.run({x_in: np.ones(3, np.float32)})
        worker.join()
    assert seen == [499500]


def test_run_with_outputs_and_explicit_weight_transfers():
    ir, v, x_in, out, y = small_ir()
    s = popxl.Session(ir, "cpu")
    with s:
        outs = s.create_host_outputs()
        assert list(outs) == [out] and outs[out].shape == (3,)
        target = outs[out]
        s.run_with_outputs({x_in: np.full(3, 4.0, np.float32)}, outs)
        np.testing.assert_equal(target, [5, 5, 5])  # written into the caller's array
        s.write_variable_data(v, np.full(3, 10.0, np.float32))  # attached: device updated too
        res = s.run({x_in: np.zeros(3, np.float32)})
        np.testing.assert_equal(res[out], [10, 10, 10])
        s.weights_to_host()
        s.weights_from_host()
    with pytest.raises(ValueError, match="attached"):
        s.weights_from_host()
    with pytest.raises(ValueError, match="attached"):
        s.run_with_outputs({x_in: np.zeros(3, np.float32)}, s.create_host_outputs())
