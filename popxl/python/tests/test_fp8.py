"""PopXL's float8 API through ``import popxl``, against an independent numpy
model of the two formats written here: decode from the bit fields, encode by
exhaustive nearest-value search over the 255 finite codes (ties to the even
mantissa; at or beyond the largest magnitude plus half its step: NaN with
``nan_on_overflow``, else saturation; NaN and infinities: the NaN code 0x80)."""

import math

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from popxl.dtypes import np_dtype_float8_143, np_dtype_float8_152
from popxl.fp8_utils import (
    host_fp8_mse_scale,
    host_fp8_mse_scale_pb,
    host_pow2scale_cast_from_fp8,
    host_pow2scale_cast_to_fp8,
)

FORMATS = {popxl.float8_143: (4, 3, 8), popxl.float8_152: (5, 2, 16)}
NP = {popxl.float8_143: np_dtype_float8_143, popxl.float8_152: np_dtype_float8_152}
SCALES = [-32, -4, -1, 0, 1, 4, 31]
# The references cast to float16 where values overflow it, on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")


def decode(fmt):
    e_bits, m_bits, bias = FORMATS[fmt]
    c = np.arange(256)
    e = (c >> m_bits) & ((1 << e_bits) - 1)
    m = (c & ((1 << m_bits) - 1)) / 2.0**m_bits
    mag = np.where(e == 0, m * 2.0 ** (1 - bias), (1 + m) * 2.0 ** (e - bias))
    v = np.where(c >> 7, -mag, mag)
    v[0x80] = np.nan
    return v


def encode(fmt, x, log2_scale, nan_on_overflow):
    vals = decode(fmt)
    codes = np.array([c for c in range(256) if c != 0x80])
    finite = vals[codes]
    top = finite.max()
    half = (top - finite[finite < top].max()) / 2
    xf = np.asarray(x, np.float64).reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        y = xf * 2.0**log2_scale
        d = np.abs(finite[None, :] - y[:, None])
        tie = d == d.min(axis=1, keepdims=True)
        out = codes[np.argmax(np.where(tie & ((codes & 1) == 0)[None, :], 2, tie.astype(int)), axis=1)].astype(np.uint8)
        over = np.abs(y) >= top + half
        out[over] = 0x80 if nan_on_overflow else np.where(y[over] < 0, 0xFF, 0x7F)
        out[~np.isfinite(xf)] = 0x80
    return out.reshape(np.shape(x))


def sweep(rng):
    xs = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e30]
    for fmt in FORMATS:
        v = decode(fmt)[:128]
        v = np.sort(v[np.isfinite(v)])
        mids = (v[1:] + v[:-1]) / 2
        for b in (v, mids, mids * (1 + 2.0**-12), mids * (1 - 2.0**-12), [v[-1] + (v[-1] - v[-2]) / 2]):
            xs.extend(b)
            xs.extend(-np.asarray(b))
    xs.extend(rng.standard_normal(300) * 10.0 ** rng.integers(-6, 6, 300))
    return np.array(xs, np.float32)


def same(a, b):
    return np.array_equal(np.asarray(a, np.float64), np.asarray(b, np.float64), equal_nan=True)


def run(build):
    """Build in a fresh IR's main graph, store the single result, run on cpu."""
    ir = popxl.Ir()
    with ir.main_graph:
        y = build()
        d2h = popxl.d2h_stream(y.shape, y.dtype, name="y")
        ops.host_store(d2h, y)
    with popxl.Session(ir, "cpu") as session:
        return session.run()[d2h]


def test_dtypes():
    for fmt in FORMATS:
        assert fmt.is_floating_point and fmt.is_signed and not fmt.is_int
        assert fmt.as_numpy() == NP[fmt]
        assert popxl.dtype.as_dtype(NP[fmt]) is fmt
        assert popxl.dtype.from_name(fmt.name) is fmt
    assert popxl.float8_143 is popxl.dtypes.float8_143


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("log2_scale", SCALES)
@pytest.mark.parametrize("nan_on_overflow", [False, True])
def test_host_cast_to_fp8_matches_numpy(fmt, log2_scale, nan_on_overflow):
    x = sweep(np.random.default_rng(1))
    for src in (x, x.astype(np.float64), x.astype(np.float16)):
        got = host_pow2scale_cast_to_fp8(src, fmt, log2_scale, nan_on_overflow)
        assert got.dtype == NP[fmt] and got.shape == src.shape
        np.testing.assert_array_equal(got.view(np.uint8), encode(fmt, src, log2_scale, nan_on_overflow))


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("log2_scale", SCALES)
def test_host_cast_from_fp8_decodes_every_code(fmt, log2_scale):
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16).view(NP[fmt])
    for to, npt in ((popxl.float64, np.float64), (popxl.float32, np.float32), (popxl.float16, np.float16)):
        got = host_pow2scale_cast_from_fp8(codes, to, log2_scale)
        assert got.dtype == npt and got.shape == (16, 16)
        assert same(got.reshape(-1), (decode(fmt) * 2.0**log2_scale).astype(npt))


# PopXL's own examples (tests/unittests/python/popxl/test_fp8_utils.py).
@pytest.mark.parametrize("src,fmt,s,nan,want", [
    (0.75, popxl.float8_143, 0, False, 0b00111100),
    (0.75, popxl.float8_143, -2, False, 0b00101100),
    (0.75, popxl.float8_143, 1, False, 0b01000100),
    (0.25, popxl.float8_152, 0, False, 0b00111000),
    (0.25, popxl.float8_152, -3, False, 0b00101100),
    (250.0, popxl.float8_143, 0, False, 0b01111111),
    (250.0, popxl.float8_143, 0, True, 0b10000000),
    (70000.0, popxl.float8_152, 0, False, 0b01111111),
    (70000.0, popxl.float8_152, 0, True, 0b10000000),
])
def test_popxl_examples(src, fmt, s, nan, want):
    for t in (np.float32, np.float64):
        got = host_pow2scale_cast_to_fp8(np.array([src], t), fmt, s, nan)
        assert np.array_equal(got, np.array([want], np.uint8).view(NP[fmt]))
    # float16 70000 is infinite: NaN either way, as PopXL.
    if src == 70000.0:
        assert host_pow2scale_cast_to_fp8(np.array([src], np.float16), fmt, s, False).view(np.uint8)[0] == 0x80


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("log2_scale", [-4, -1, 0, 1, 4])
def test_cast_ops_on_cpu_match_numpy(fmt, log2_scale):
    x = sweep(np.random.default_rng(2))
    for src_t in (popxl.float32, popxl.float16):
        src = x.astype(src_t.as_numpy())
        got = run(lambda: ops.pow2scale_cast_to_fp8(
            popxl.constant(src, src_t), popxl.constant(log2_scale, popxl.int32), fmt))
        assert got.dtype == NP[fmt]
        np.testing.assert_array_equal(got.view(np.uint8), encode(fmt, src, log2_scale, True))
    codes = np.arange(256, dtype=np.uint8).view(NP[fmt])
    for to in (popxl.float32, popxl.float16):
        got = run(lambda: ops.pow2scale_cast_from_fp8(
            popxl.constant(codes, fmt), popxl.constant(log2_scale, popxl.int32), to))
        assert same(got, (decode(fmt) * 2.0**log2_scale).astype(to.as_numpy()))


def random_codes(rng, shape, fmt):
    c = rng.integers(0, 256, size=shape).astype(np.uint8)
    c[c == 0x80] = 0
    return c.view(NP[fmt])


def close_f16(got, want):
    """Within one float16 rounding of the float64 value (sums are in float32); inf where it overflows."""
    assert got.dtype == np.float16 and got.shape == want.shape
    with np.errstate(over="ignore"):
        inf = np.isinf(want.astype(np.float16))
    np.testing.assert_array_equal(got[inf], want[inf].astype(np.float16))
    g, w = got[~inf].astype(np.float64), want[~inf]
    assert np.all(np.abs(g - w) <= np.abs(w) * 2.0**-10 + 2.0**-24)


@pytest.mark.parametrize("fa,fb,sa,sb,s", [
    (popxl.float8_143, popxl.float8_143, (3, 5), (5, 4), 0),
    (popxl.float8_143, popxl.float8_152, (2, 4, 16), (16, 3), -3),
    (popxl.float8_152, popxl.float8_152, (7,), (7, 2), 2),
])
def test_matmul_pow2scaled_against_float64(fa, fb, sa, sb, s):
    rng = np.random.default_rng(3)
    a, b = random_codes(rng, sa, fa), random_codes(rng, sb, fb)
    # Streams and variables: float8 data crosses the session as structured arrays.
    ir = popxl.Ir()
    with ir.main_graph:
        a_h2d = popxl.h2d_stream(sa, fa, name="a")
        bt = popxl.variable(b, fb, name="b")
        y = ops.matmul_pow2scaled(ops.host_load(a_h2d), bt, popxl.variable(s, popxl.int32))
        d2h = popxl.d2h_stream(y.shape, y.dtype, name="y")
        ops.host_store(d2h, y)
    with popxl.Session(ir, "cpu") as session:
        got = session.run({a_h2d: a})[d2h]
        assert session.get_tensor_data(bt).dtype == NP[fb]
        assert np.array_equal(session.get_tensor_data(bt).view(np.uint8), b.view(np.uint8))
    want = np.matmul(decode(fa)[a.view(np.uint8)], decode(fb)[b.view(np.uint8)]) * 2.0**s
    close_f16(got, want)


def conv_ref(x, w, stride, pads, groups):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = (xp.shape[2] - kh) // stride[0] + 1, (xp.shape[3] - kw) // stride[1] + 1
    y = np.zeros((n, m, oh, ow))
    for o in range(m):
        g = o // (m // groups)
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg, i * stride[0]:i * stride[0] + kh, j * stride[1]:j * stride[1] + kw]
                y[:, o, i, j] = np.sum(patch * w[o], axis=(1, 2, 3))
    return y


def test_conv_pow2scaled_against_float64():
    rng = np.random.default_rng(4)
    x, w = random_codes(rng, (2, 4, 6, 5), popxl.float8_152), random_codes(rng, (6, 2, 3, 3), popxl.float8_143)
    # Float data for a float8 variable is converted as PopXL does (log2_scale 0, NaN on overflow).
    xf = decode(popxl.float8_152)[x.view(np.uint8)].astype(np.float32)
    got = run(lambda: ops.conv_pow2scaled(
        popxl.variable(xf, popxl.float8_152), popxl.constant(w, popxl.float8_143),
        popxl.constant(-2, popxl.int32), stride=(2, 1), padding=(1, 0, 1, 1), groups=2))
    want = conv_ref(decode(popxl.float8_152)[x.view(np.uint8)], decode(popxl.float8_143)[w.view(np.uint8)],
                    (2, 1), (1, 0, 1, 1), 2) * 2.0**-2
    close_f16(got, want)


def conv_transpose_ref(x, w, stride, pads, groups, output_padding=(0, 0)):
    """ONNX ConvTranspose: each input pixel scatters ``x · w[c]`` into the full output,
    which is then cropped by the pads (``output_padding`` only adds room at the end)."""
    n, cin, h, wd = x.shape
    _, cog, kh, kw = w.shape
    full = np.zeros((n, cog * groups, stride[0] * (h - 1) + kh + output_padding[0],
                     stride[1] * (wd - 1) + kw + output_padding[1]))
    for c in range(cin):
        g = c // (cin // groups)
        for i in range(h):
            for j in range(wd):
                full[:, g * cog:(g + 1) * cog, i * stride[0]:i * stride[0] + kh, j * stride[1]:j * stride[1] + kw] += \
                    x[:, c, i, j][:, None, None, None] * w[c][None]
    return full[:, :, pads[0]:full.shape[2] - pads[2], pads[1]:full.shape[3] - pads[3]]


@pytest.mark.parametrize("fx,fw,stride,pads,groups,out_pad,s", [
    (popxl.float8_143, popxl.float8_143, (1, 1), (0, 0, 0, 0), 1, (0, 0), 0),
    (popxl.float8_152, popxl.float8_143, (2, 1), (1, 0, 1, 1), 2, (1, 0), -3),
    (popxl.float8_143, popxl.float8_152, (2, 3), (0, 1, 0, 0), 1, (1, 2), 2),
])
def test_conv_transpose_pow2scaled_against_float64(fx, fw, stride, pads, groups, out_pad, s):
    rng = np.random.default_rng(5)
    x, w = random_codes(rng, (2, 4, 3, 4), fx), random_codes(rng, (4, 3, 3, 2), fw)
    got = run(lambda: ops.conv_transpose_pow2scaled(
        popxl.constant(x, fx), popxl.constant(w, fw), popxl.constant(s, popxl.int32),
        stride=stride, padding=pads, groups=groups, output_padding=out_pad))
    want = conv_transpose_ref(decode(fx)[x.view(np.uint8)], decode(fw)[w.view(np.uint8)],
                              stride, pads, groups, out_pad) * 2.0**s
    close_f16(got, want)


def test_conv_transpose_pow2scaled_output_shape():
    """An explicit ``output_shape`` derives the padding: the same values as the padding it implies."""
    rng = np.random.default_rng(6)
    x, w = random_codes(rng, (1, 2, 3, 3), popxl.float8_143), random_codes(rng, (2, 2, 3, 3), popxl.float8_143)
    got = run(lambda: ops.conv_transpose_pow2scaled(
        popxl.constant(x, popxl.float8_143), popxl.constant(w, popxl.float8_143), popxl.constant(0, popxl.int32),
        stride=(2, 2), output_shape=(5, 5)))
    assert got.shape == (1, 2, 5, 5)
    full = conv_transpose_ref(decode(popxl.float8_143)[x.view(np.uint8)], decode(popxl.float8_143)[w.view(np.uint8)],
                              (2, 2), (0, 0, 0, 0), 1)
    # Full size 7: two cells of padding, split evenly (ONNX's rule when not same_lower).
    close_f16(got, full[:, :, 1:6, 1:6])


def mse_scale_reference(x, fmt):
    """PopXL's MSE model written over numpy arrays: ``(error, scale)`` for every
    bias, the least error, the median bias among equal ones, the scale its negation."""
    a = np.abs(np.asarray(x, np.float64)).reshape(-1)
    with np.errstate(invalid="ignore"):
        _, e = np.frexp(a)
        bins = np.where(a < 2.0**-126, 0, np.where(a > 2.0**126, 253, e + 126))
    h = np.bincount(bins, minlength=254) / a.size
    e_bits, m_bits, bias = FORMATS[fmt]
    lowest = 1 - bias - m_bits  # binade exponents of the format, denormals included
    span = (2**e_bits - 1 - bias) - lowest + 1
    q = 2.0 ** (-2 * ((23 if x.dtype == np.float32 else 10) - m_bits))
    k = np.arange(-126, 127)  # binade [2^k, 2^(k+1)) holds h[k + 127]
    edges, weights = 2.0**k, h[1:]
    errors = {}
    for b in range(-31, 32):
        under, inside = k < lowest + b, (k >= lowest + b) & (k < lowest + b + span)
        top = edges[b + 31 + span - 1]  # PopXL's index of the top edge (by bias)
        terms = np.where(under, edges**2 * weights, np.where(inside, edges**2 * weights * q, (top - edges)**2 * weights))
        errors[b] = math.fsum([2.0**-254, *terms])
    best = min(errors.values())
    tied = sorted(b for b, err in errors.items() if err == best)
    return best, -tied[len(tied) // 2]


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("np_t", [np.float32, np.float16])
def test_host_fp8_mse_scale_against_numpy(fmt, np_t):
    rng = np.random.default_rng(8)
    cases = [
        # Wider than either format: under- and overflow trade off.
        rng.standard_normal(2000) * 10.0 ** rng.uniform(-6, 6, 2000),
        rng.standard_normal((8, 16)) * 1e-3,
        rng.uniform(2**5, 2**6, 1000),  # near the top: a negative scale (PopXL's example)
        rng.uniform(2**-6, 2**-5, 1000),  # near the bottom: a positive one
        np.array([1.0]),  # one binade: every bias that holds it ties, the median wins
        np.array([0.0, 0.5, 3.0, np.inf, -np.inf, np.nan, -1e-30, 7e4]),
    ]
    for x in cases:
        with np.errstate(over="ignore"):
            x = x.astype(np_t)
        err, s = host_fp8_mse_scale(x, fmt)
        want_err, want_s = mse_scale_reference(x, fmt)
        assert isinstance(s, int) and -31 <= s <= 31
        assert s == want_s, (x[:4], s, want_s)
        assert err == pytest.approx(want_err, rel=1e-12)
        assert host_fp8_mse_scale_pb(x, fmt) == s
    # PopXL's examples: data that fits the format unscaled keeps scale 0.
    assert host_fp8_mse_scale(np.array([0.00098, 240], np_t), popxl.float8_143)[1] == 0
    assert host_fp8_mse_scale(np.array([2.0**-17, 57344], np.float32), popxl.float8_152)[1] == 0
    assert host_fp8_mse_scale(rng.uniform(2**5, 2**6, 100).astype(np_t), popxl.float8_143)[1] < 0
    assert host_fp8_mse_scale(rng.uniform(2**-6, 2**-5, 100).astype(np_t), popxl.float8_143)[1] > 0


def test_host_fp8_mse_scale_arguments():
    x = np.linspace(-3, 3, 50, dtype=np.float32)
    # PopXL's default format is float8_143; the shape does not matter.
    assert host_fp8_mse_scale(x) == host_fp8_mse_scale(x.reshape(5, 10), popxl.float8_143)
    assert host_fp8_mse_scale(list(x)) == host_fp8_mse_scale(x)
    with pytest.raises(RuntimeError, match="float64"):
        host_fp8_mse_scale(x.astype(np.float64))
    with pytest.raises(RuntimeError, match="float64"):
        host_fp8_mse_scale_pb(x.astype(np.float64), popxl.float8_143)
    with pytest.raises(RuntimeError):
        host_fp8_mse_scale_pb(x, popxl.float16)
    with pytest.raises(RuntimeError):
        host_fp8_mse_scale_pb(x)
    with pytest.raises(ValueError, match="empty"):
        host_fp8_mse_scale(np.zeros(0, np.float32))


def test_errors():
    ir = popxl.Ir()
    with ir.main_graph:
        f = popxl.constant(np.ones(3, np.float32))
        f8 = popxl.constant(np.ones(3, np.float32), popxl.float8_143)
        s = popxl.constant(0, popxl.int32)
        with pytest.raises(TypeError):
            ops.pow2scale_cast_to_fp8(f, s, popxl.float16)
        with pytest.raises(TypeError):
            ops.pow2scale_cast_to_fp8(f, popxl.constant(0, popxl.int8), popxl.float8_143)
        with pytest.raises(ValueError):
            ops.pow2scale_cast_to_fp8(f, popxl.constant([0], popxl.int32), popxl.float8_143)
        with pytest.raises(TypeError):
            ops.pow2scale_cast_from_fp8(f8, s, popxl.float64)
        with pytest.raises(ValueError):
            ops.pow2scale_cast_from_fp8(f, s, popxl.float16)  # input not float8
        with pytest.raises(TypeError):
            ops.matmul_pow2scaled(f, f8, s)
        with pytest.raises(TypeError):
            ops.conv_pow2scaled(f8, f, s)
        for fmt in FORMATS:
            with pytest.raises(TypeError, match="pow2scale_cast_to_fp8"):
                ops.cast(f, fmt)
        with pytest.raises(TypeError):
            ops.conv_transpose_pow2scaled(f, f8, s)
    with pytest.raises(RuntimeError):
        host_pow2scale_cast_to_fp8(np.ones(2, np.float32), popxl.float16)
    with pytest.raises(RuntimeError):
        host_pow2scale_cast_to_fp8(np.ones(2, np.int32), popxl.float8_143)
    with pytest.raises(ValueError):
        host_pow2scale_cast_to_fp8(np.ones(2, np.float32), popxl.float8_143, log2_scale=32)
    with pytest.raises(RuntimeError):
        host_pow2scale_cast_from_fp8(np.ones(2, np.uint8), popxl.float32)
    with pytest.raises(ValueError):
        host_pow2scale_cast_from_fp8(np.ones(2, np.uint8).view(np_dtype_float8_143), popxl.float32, log2_scale=-33)
    # A log2 scale out of [-32, 32) at run time.
    with pytest.raises(RuntimeError, match="log2 scale 40"):
        run(lambda: ops.pow2scale_cast_to_fp8(popxl.constant(np.ones(2, np.float32)), popxl.constant(40, popxl.int32),
                                              popxl.float8_143))


def test_variable_and_constant_take_log2_scale_and_nan_on_overflow():
    """PopXL's float8 keywords of ``variable``/``constant``: float data times 2^log2_scale,
    rounded to the format; overflow is NaN (0x80) by default, the largest value without it."""
    data = np.array([0.75, 1.5, 300.0, -0.25], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(data, popxl.float8_143, name="v", log2_scale=1)
        c = popxl.constant(data, popxl.float8_143, name="c", log2_scale=-1, nan_on_overflow=False)
        d = popxl.variable(data, popxl.float8_143, name="d")
        with pytest.raises(ValueError, match="log2_scale 40"):
            popxl.variable(data, popxl.float8_143, log2_scale=40)
        out = popxl.d2h_stream(c.shape, c.dtype, name="out")
        ops.host_store(out, c)  # a session needs an op
    session = popxl.Session(ir, "cpu")
    fmt = popxl.float8_143
    expect = {v: encode(fmt, data, 1, True), c: encode(fmt, data, -1, False), d: encode(fmt, data, 0, True)}
    for t, want in expect.items():
        got = np.asarray(session.get_tensor_data(t)).view(np.uint8)
        np.testing.assert_array_equal(got, want, err_msg=t.name)
