"""Convolution, pooling, batch norm, dynamic slices, one-hot, conditionals and random ops against numpy."""

import numpy as np
import popxl
import popxl.ops as ops

from conftest import run

RNG = np.random.default_rng(4)


def conv2d_ref(x, w, stride=1, pad=0):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return out


def test_conv():
    x = RNG.standard_normal((2, 3, 6, 5)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    got = run(lambda x, w: (ops.conv(x, w), ops.conv(x, w, stride=(2, 2), padding=(1, 1, 1, 1))), x, w)
    np.testing.assert_allclose(got[0], conv2d_ref(x, w), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], conv2d_ref(x, w, 2, 1), rtol=1e-4, atol=1e-4)


def test_pools():
    x = RNG.standard_normal((1, 2, 4, 6)).astype(np.float32)
    got = run(lambda x: (ops.max_pool(x, (2, 2), stride=(2, 2)), ops.average_pool(x, (2, 2), stride=(2, 2))), x)
    blocks = x.reshape(1, 2, 2, 2, 3, 2).transpose(0, 1, 2, 4, 3, 5)
    np.testing.assert_allclose(got[0], blocks.max(axis=(4, 5)))
    np.testing.assert_allclose(got[1], blocks.mean(axis=(4, 5)), rtol=1e-6)


def test_batch_norm_inference():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    scale, bias, mean = (RNG.standard_normal(3).astype(np.float32) for _ in range(3))
    var = (RNG.random(3) + 0.5).astype(np.float32)
    got = run(lambda *a: ops.batch_norm_inference(*a, epsilon=1e-3), x, scale, bias, mean, var)
    c = lambda v: v[None, :, None]  # noqa: E731
    np.testing.assert_allclose(got, c(scale) * (x - c(mean)) / np.sqrt(c(var) + 1e-3) + c(bias), rtol=1e-4, atol=1e-5)


def test_isnan_isinf_isfinite():
    x = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    got = run(lambda x: (ops.isnan(x), ops.isinf(x), ops.isfinite(x)), x)
    np.testing.assert_equal(got, [np.isnan(x), np.isinf(x), np.isfinite(x)])


def test_dynamic_slice_and_update():
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    u = RNG.standard_normal((2, 3)).astype(np.float32)
    i = np.array([2], np.uint32)
    got = run(lambda x, u, i: (ops.dynamic_slice(x, i, [0], [2], True), ops.dynamic_update(x, i, u, [0], [2], True)), x, u, i)
    np.testing.assert_equal(got[0], x[2:4])
    want = x.copy()
    want[2:4] = u
    np.testing.assert_equal(got[1], want)


def test_onehot_and_subsample():
    labels = np.array([0, 2, 1], np.int32)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)

    def build(l, x):
        n = popxl.constant(np.array(3, np.int32))
        values = popxl.constant(np.array([0.0, 1.0], np.float32))
        return ops.onehot(l, n, values, axis=-1), ops.subsample(x, [2, 3])

    got = run(build, labels, x)
    np.testing.assert_equal(got[0], np.eye(3, dtype=np.float32)[labels])
    np.testing.assert_equal(got[1], x[::2, ::3])


def test_conditional():
    def plus_one(x):
        return x + 1.0

    def times_two(x):
        return x * 2.0

    x_np = np.array([1.0, 2.0], np.float32)
    for flag in (True, False):
        ir = popxl.Ir()
        with ir.main_graph:
            x = popxl.constant(x_np)
            c = popxl.constant(flag)
            g1 = ir.create_graph(plus_one, x)
            g2 = ir.create_graph(times_two, x)
            (o,) = ops.conditional(c, g1, g2, [x], [x])
            out = popxl.d2h_stream(o.shape, o.dtype)
            ops.host_store(out, o)
        with popxl.Session(ir, "cpu") as s:
            res = s.run()
        np.testing.assert_equal(res[out], x_np + 1 if flag else x_np * 2)


def test_random_uniform_statistics():
    seed = np.array([7, 11], np.uint32)
    got = run(lambda s: (ops.random_uniform(s, (20000,), low=-1.0, high=3.0), ops.random_normal(s, (20000,), mean=2.0, std=0.5)), seed)
    u, n = got
    assert u.min() >= -1 and u.max() <= 3
    assert abs(u.mean() - 1.0) < 0.05
    assert abs(n.mean() - 2.0) < 0.02 and abs(n.std() - 0.5) < 0.02


def test_scatter_histogram_lamb_square():
    x = np.zeros((4, 3), np.float32)
    idx = np.array([[1, 0, 2], [3, 2, 0]], np.int32)
    vals = RNG.standard_normal((2, 3)).astype(np.float32)
    y = RNG.standard_normal(50).astype(np.float32)
    got = run(lambda x, i, v, y: (ops.scatter(x, i, v, axis=0), ops.histogram(y, [-0.5, 0.5], True), ops.lamb_square(y)), x, idx, vals, y)
    want = x.copy()
    for r in range(2):
        for c in range(3):
            want[idx[r, c], c] = vals[r, c]
    np.testing.assert_equal(got[0], want)
    a = np.abs(y)
    np.testing.assert_equal(got[1], [(a < -0.5).sum(), ((a >= -0.5) & (a < 0.5)).sum(), (a >= 0.5).sum()])
    np.testing.assert_allclose(got[2], (y.astype(np.float64) ** 2).sum(), rtol=1e-5)


def test_shaped_dropout_keeps_or_zeroes_whole_rows():
    x = np.ones((6, 8), np.float32)
    seed = np.array([3, 9], np.uint32)
    got = run(lambda x, s: ops.shaped_dropout(x, s, (6, 1), 0.5), x, seed)
    for row in got:
        assert np.all(row == 0) or np.allclose(row, 2.0)
