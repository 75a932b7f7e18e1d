"""Ops and Tensor operators against numpy."""

import math

import numpy as np
import pytest
import popxl
import popxl.ops as ops

from conftest import run

RNG = np.random.default_rng(3)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((3, 4)).astype(np.float32)
POS = (np.abs(A) + 0.5).astype(np.float32)

_erf = np.vectorize(math.erf)

UNARY = [
    (ops.abs, np.abs, A),
    (ops.exp, np.exp, A),
    (ops.log, np.log, POS),
    (ops.log2, np.log2, POS),
    (ops.sqrt, np.sqrt, POS),
    (ops.negate, np.negative, A),
    (ops.relu, lambda x: np.maximum(x, 0), A),
    (ops.tanh, np.tanh, A),
    (ops.sigmoid, lambda x: 1 / (1 + np.exp(-x)), A),
    (ops.sin, np.sin, A),
    (ops.cos, np.cos, A),
    (ops.floor, np.floor, A),
    (ops.ceil, np.ceil, A),
    (ops.swish, lambda x: x / (1 + np.exp(-x)), A),
    (ops.geluerf, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))), A),
    (ops.gelu, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))), A),
]


@pytest.mark.parametrize("op,ref,x", UNARY, ids=[u[0].__name__ for u in UNARY])
def test_unary(op, ref, x):
    np.testing.assert_allclose(run(op, x), ref(x.astype(np.float64)), rtol=1e-4, atol=1e-5)


BINARY = [
    (ops.add, np.add, B),
    (ops.sub, np.subtract, B),
    (ops.mul, np.multiply, B),
    (ops.div, np.divide, POS),
    (ops.pow, np.power, B),
    (ops.fmod, np.fmod, POS),
]


@pytest.mark.parametrize("op,ref,y", BINARY, ids=[b[0].__name__ for b in BINARY])
def test_binary(op, ref, y):
    x = POS if op is ops.pow else A
    np.testing.assert_allclose(run(op, x, y), ref(x.astype(np.float64), y), rtol=1e-4, atol=1e-5)


def test_binary_broadcasts():
    row = B[0]
    np.testing.assert_allclose(run(ops.add, A, row), A + row, rtol=1e-6)


def test_operators_with_tensors_arrays_and_scalars():
    def build(x, y):
        return (x + y, x - 2.0, 3 - x, x * y, 2 * x, x / 4, 1 / (x + 10), (x + 10) ** 2, 2 ** x,
                x @ y.T, x @ np.ones((4, 2), np.float32), -x, (x + 10) % 3, x + np.ones(4, np.float32))

    got = run(build, A, B)
    want = [A + B, A - 2, 3 - A, A * B, 2 * A, A / 4, 1 / (A + 10), (A + 10) ** 2, 2**A, A @ B.T,
            A @ np.ones((4, 2)), -A, np.fmod(A + 10, 3), A + 1]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_scalar_operand_takes_the_tensor_dtype():
    got = run(lambda x: x * 2.5, np.array([1, 2, 3], np.int32))
    assert got.dtype == np.int32
    np.testing.assert_equal(got, [2, 4, 6])  # the constant is int32(2.5) = 2


def test_logical_operators():
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    got = run(lambda x, y: (x & y, x | y, ~x), a, b)
    np.testing.assert_equal(got[0], a & b)
    np.testing.assert_equal(got[1], a | b)
    np.testing.assert_equal(got[2], ~a)


def test_iadd_keeps_the_handle_and_writes_the_variable():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros(3, np.float32), name="v")
        handle = v
        v += np.array([1.0, 2.0, 3.0], np.float32)
        assert v is handle
    with popxl.Session(ir, "cpu") as s:
        s.run()
    np.testing.assert_equal(s.get_tensor_data(v), [1, 2, 3])


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "logsumexp", "sumsquare", "l1", "l2"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (1, True), ([0, 1], False)])
def test_reduce(name, axis, keepdims):
    ref = {
        "sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod,
        "logsumexp": lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims)),
        "sumsquare": lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims),
        "l1": lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims),
        "l2": lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
    }[name]
    ax = tuple(axis) if isinstance(axis, list) else axis
    got = run(lambda x: getattr(ops, name)(x, axis=axis, keepdims=keepdims), A)
    np.testing.assert_allclose(got, ref(A.astype(np.float64), axis=ax, keepdims=keepdims), rtol=1e-4, atol=1e-5)


def test_matmul_and_softmax():
    w = RNG.standard_normal((4, 5)).astype(np.float32)
    got = run(lambda x, w: ops.softmax(ops.matmul(x, w), axis=-1), A, w)
    z = A @ w
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_shape_ops():
    got = run(lambda x: (ops.reshape(x, (2, -1)), ops.transpose(x), ops.transpose(x, (1, 0)), x.T,
                         ops.slice(x, start=1, stop=3, axis=1), ops.slice(x, start=[0, 1], stop=[2, 4], step=[1, 2]),
                         ops.concat([x, x], axis=1), ops.flatten(x), x.reshape((4, 3)), ops.squeeze(ops.reshape(x, (1, 3, 4)), [0])), A)
    want = [A.reshape(2, -1), A.T, A.T, A.T, A[:, 1:3], A[0:2, 1:4:2], np.concatenate([A, A], 1), A.reshape(-1),
            A.reshape(4, 3), A]
    for g, w in zip(got, want):
        np.testing.assert_equal(g, w)


def test_split_and_gather():
    idx = np.array([2, 0], np.int32)
    got = run(lambda x, i: tuple(ops.split(x, 2, axis=1)) + (ops.gather(x, i),), A, idx)
    np.testing.assert_equal(got[0], A[:, :2])
    np.testing.assert_equal(got[1], A[:, 2:])
    np.testing.assert_equal(got[2], A[idx])


@pytest.mark.parametrize("key", [0, -1, (1, 2), slice(1, 3), (slice(None), 2), (slice(None, None, -1), slice(0, 4, 2)), (2, slice(1, None))])
def test_getitem_basic(key):
    np.testing.assert_equal(run(lambda x: x[key], A), A[key])


def test_getitem_with_int_array_and_bool_mask():
    got = run(lambda x: (x[np.array([2, 0])], x[A > 0]), A)
    np.testing.assert_equal(got[0], A[[2, 0]])
    np.testing.assert_equal(got[1], np.where(A > 0, A, 0))


@pytest.mark.parametrize("dtype", [popxl.int32, popxl.float16, popxl.bool, popxl.uint32])
def test_cast(dtype):
    x = np.abs(A) * 3 if dtype is popxl.uint32 else A * 3  # float -> unsigned of a negative is undefined
    got = run(lambda x: ops.cast(x, dtype), x)
    assert got.dtype == dtype.as_numpy()
    np.testing.assert_equal(got, x.astype(dtype.as_numpy()))


def test_comparisons_where_and_clip():
    got = run(lambda x, y: (ops.greater(x, y), ops.equal(x, x), ops.where(ops.greater(x, y), x, y), ops.clip(x, -0.5, 0.5),
                            ops.maximum(x, y), ops.argmax(x, 1)), A, B)
    np.testing.assert_equal(got[0], A > B)
    assert got[1].all()
    np.testing.assert_equal(got[2], np.maximum(A, B))
    np.testing.assert_equal(got[3], np.clip(A, -0.5, 0.5))
    np.testing.assert_equal(got[4], np.maximum(A, B))
    np.testing.assert_equal(got[5], A.argmax(1))


def test_var_updates():
    x = np.array([1.0, -2.0, 3.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        a = popxl.variable(np.zeros(3, np.float32), name="a")
        b = popxl.variable(np.ones(3, np.float32), name="b")
        c = popxl.variable(np.full(3, 4.0, np.float32), name="c")
        d = popxl.variable(np.full(3, 2.0, np.float32), name="d")
        xt = popxl.constant(x, name="x")
        ops.var_updates.accumulate_(a, xt, 0.5)
        ops.var_updates.accumulate_square_(b, xt)
        ops.var_updates.accumulate_moving_average_(c, xt, 0.25)
        ops.var_updates.accumulator_scale_(d, 3.0)
    with popxl.Session(ir, "cpu") as s:
        s.run()
    data = s.get_tensors_data([a, b, c, d])
    np.testing.assert_allclose(data[a], 0.5 * x)
    np.testing.assert_allclose(data[b], 1 + x * x)
    np.testing.assert_allclose(data[c], 0.25 * 4 + 0.75 * x)
    np.testing.assert_allclose(data[d], 6.0)


def test_float16_and_downcast_of_64_bit_data():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.arange(3, dtype=np.float64), name="v")
        i = popxl.variable(np.arange(3, dtype=np.int64), name="i")
        h = popxl.variable(np.arange(3), popxl.float16, name="h")
        keep = popxl.constant(np.arange(3, dtype=np.float64), downcast=False, name="keep")
    assert (v.dtype, i.dtype, h.dtype, keep.dtype) == (popxl.float32, popxl.int32, popxl.float16, popxl.float64)
    got = run(lambda x: x * 2, np.array([1.5, 2.5], np.float16))
    assert got.dtype == np.float16
    np.testing.assert_equal(got, [3, 5])


def test_dtypes():
    assert popxl.float32.as_numpy() == np.float32
    assert popxl.dtype.as_dtype(np.int32) is popxl.int32
    assert popxl.dtype.from_name("half") is popxl.float16
    assert popxl.float32.is_floating_point and not popxl.int32.is_floating_point
    assert popxl.int32.is_int and popxl.int32.is_signed and not popxl.uint32.is_signed
    with pytest.raises(ValueError):
        popxl.dtype.from_name("float7")


def test_views_and_aliases():
    got = run(lambda x, y: (ops.slice_(x, start=1, stop=3, axis=0), ops.concat_([x, y], axis=0), ops.clamp(x, -0.2, 0.3),
                            ops.rename(x, "renamed"), ops.detach_(x)), A, B)
    np.testing.assert_equal(got[0], A[1:3])
    np.testing.assert_equal(got[1], np.concatenate([A, B]))
    np.testing.assert_equal(got[2], np.clip(A, -0.2, 0.3))
    np.testing.assert_equal(got[3], A)
    np.testing.assert_equal(got[4], A)


def test_print_tensor_writes_to_stderr(capfd):
    x = np.array([1.5, -2.0], np.float32)
    got = run(lambda x: ops.print_tensor(x, title="my_values"), x)
    np.testing.assert_equal(got, x)
    err = capfd.readouterr().err
    assert "my_values" in err and "1.5" in err


def test_graph_context_helpers():
    ir = popxl.Ir()
    with ir.main_graph:
        assert popxl.get_current_graph() == ir.main_graph == popxl.get_main_graph()
        assert popxl.get_ir() == ir
        with popxl.io_tiles():
            t = popxl.constant(1.0)
            u = t + 1.0
        assert u.shape == ()
