//! The float8 types and ops against an independent numpy model of the formats
//! (`tests/fixtures/float8_gen.py` writes `float8.npz`): all 256 decodes of
//! both formats, encodes of a sweep (every value, every tie, just off the ties,
//! subnormals, overflow, NaN, infinities, random values) at several
//! `log2_scale`s with and without `nan_on_overflow`, every float16 through the
//! cast op, and `matmul_pow2scaled` / `conv_pow2scaled` against float64
//! products of the decoded operands (`conv_transpose_pow2scaled` against a
//! float64 scatter loop written here). Then the typed errors.

use std::fs::File;

use ndarray::{ArrayD, Dimension, IxDyn};
use ndarray_npy::NpzReader;
use popart_ir::float8::{Float8Format, Float8_143, Float8_152};
use popxl::ops::{self, ConvOptions, ConvTransposeOptions};
use popxl::{DataType, HostArray, Ir, PopXlError};
use popxl_session::{Session, SessionError};

const SCALES: [i32; 7] = [-32, -5, -1, 0, 1, 3, 31];
const FORMATS: [(&str, DataType); 2] = [("143", DataType::Float8_143), ("152", DataType::Float8_152)];

fn npz() -> NpzReader<File> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/float8.npz");
    NpzReader::new(File::open(path).expect("fixture float8.npz")).expect("npz")
}

fn f64s(npz: &mut NpzReader<File>, key: &str) -> ArrayD<f64> {
    npz.by_name(key).unwrap_or_else(|e| panic!("{key}: {e}"))
}

fn u8s(npz: &mut NpzReader<File>, key: &str) -> ArrayD<u8> {
    npz.by_name(key).unwrap_or_else(|e| panic!("{key}: {e}"))
}

/// Codes as a host array of `dtype`.
fn codes(a: &ArrayD<u8>, dtype: DataType) -> HostArray {
    match dtype {
        DataType::Float8_143 => HostArray::from(a.mapv(Float8_143)),
        _ => HostArray::from(a.mapv(Float8_152)),
    }
}

fn code_bytes(h: &HostArray) -> Vec<u8> {
    h.to_host_tensor().bytes
}

fn same(got: f64, want: f64) -> bool {
    got == want || (got.is_nan() && want.is_nan())
}

/// Runs `build` (which makes its inputs from host arrays as constants) in a
/// session and returns its single output.
fn run1(build: impl FnOnce() -> popxl::Result<popxl::Tensor>) -> Result<HostArray, SessionError> {
    let ir = Ir::new();
    let out = {
        let _g = ir.main_graph().enter();
        let y = build().unwrap();
        let d2h = popxl::d2h_stream(y.shape(), y.dtype(), "y").unwrap();
        ops::host_store(&d2h, &y).unwrap();
        d2h
    };
    let mut session = Session::new(ir, "cpu").unwrap();
    let mut outs = session.scope(|s| s.run(&Default::default()))?;
    Ok(outs.remove(&out).unwrap())
}

#[test]
fn every_code_decodes_as_numpy_on_host_and_through_the_cast_op() {
    let mut z = npz();
    let all: ArrayD<u8> = ArrayD::from_shape_vec(IxDyn(&[256]), (0..=255u8).collect()).unwrap();
    for (name, dt) in FORMATS {
        let want = f64s(&mut z, &format!("dec{name}"));
        let fmt = Float8Format::of(dt).unwrap();
        for c in 0..=255u8 {
            assert!(same(fmt.decode_f64(c), want[c as usize]), "{dt} {c:#04x}");
            assert_eq!(
                f64::from(fmt.decode_table()[c as usize]).to_bits(),
                want[c as usize].to_bits(),
                "{dt} {c:#04x}"
            );
        }
        for s in SCALES {
            for to in [DataType::Float32, DataType::Float16] {
                let x = codes(&all, dt);
                let got = run1(|| {
                    let t = popxl::constant(x, "x")?;
                    let l = popxl::constant(s, "s")?;
                    ops::pow2scale_cast_from_fp8(&t, &l, to)
                })
                .unwrap();
                assert_eq!(got.dtype(), to);
                for (c, g) in got.to_f64_vec().into_iter().enumerate() {
                    let w = want[c] * 2f64.powi(s);
                    let w = if to == DataType::Float16 { half::f16::from_f64(w).to_f64() } else { w };
                    assert!(same(g, w), "{dt} {c:#04x} 2^{s} to {to}: got {g}, numpy {w}");
                }
            }
        }
    }
}

#[test]
fn encodes_round_to_nearest_even_with_overflow_rules_as_numpy() {
    let mut z = npz();
    let x: ArrayD<f32> = z.by_name("enc_x").unwrap();
    for (name, dt) in FORMATS {
        let fmt = Float8Format::of(dt).unwrap();
        for s in SCALES {
            for nan in [false, true] {
                let want = u8s(&mut z, &format!("enc{name}_s{s}_n{}", u8::from(nan)));
                for (i, (&v, &w)) in x.iter().zip(want.iter()).enumerate() {
                    let g = fmt.encode(f64::from(v), s, nan);
                    assert_eq!(
                        g, w,
                        "{dt} x[{i}] = {v:e} · 2^{s}, nan_on_overflow {nan}: got {g:#04x}, numpy {w:#04x}"
                    );
                }
            }
            // The op (always NaN on overflow), float32 input, scale from a tensor.
            let want = u8s(&mut z, &format!("enc{name}_s{s}_n1"));
            let xs = HostArray::from(x.clone());
            let got = run1(|| {
                let t = popxl::constant(xs, "x")?;
                let l = popxl::constant(s, "s")?;
                ops::pow2scale_cast_to_fp8(&t, &l, dt)
            })
            .unwrap();
            assert_eq!(got.dtype(), dt);
            assert_eq!(code_bytes(&got), want.iter().copied().collect::<Vec<_>>(), "{dt} op at 2^{s}");
        }
    }
}

#[test]
fn every_float16_casts_to_float8_as_numpy() {
    let mut z = npz();
    let x16: ArrayD<half::f16> = {
        let bits: ArrayD<u16> = ArrayD::from_shape_vec(IxDyn(&[65536]), (0..=u16::MAX).collect()).unwrap();
        bits.mapv(half::f16::from_bits)
    };
    for (name, dt) in FORMATS {
        for s in [-3, 2] {
            let want = u8s(&mut z, &format!("enc16_{name}_s{s}"));
            let xs = HostArray::from(x16.clone());
            let got = run1(|| {
                let t = popxl::constant(xs, "x")?;
                let l = popxl::constant(s, "s")?;
                ops::pow2scale_cast_to_fp8(&t, &l, dt)
            })
            .unwrap();
            let got = code_bytes(&got);
            for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
                assert_eq!(g, w, "{dt} float16 bits {i:#06x} at 2^{s}");
            }
        }
    }
}

/// `|got - want| <= one float16 rounding of want` (the sums are in float32);
/// infinite where `want` overflows float16.
fn assert_f16_close(got: &HostArray, want: &ArrayD<f64>, what: &str) {
    assert_eq!(got.dtype(), DataType::Float16, "{what}");
    assert_eq!(got.shape(), want.shape(), "{what}");
    for (i, (g, &w)) in got.to_f64_vec().into_iter().zip(want.iter()).enumerate() {
        if half::f16::from_f64(w).is_infinite() {
            assert_eq!(g, half::f16::from_f64(w).to_f64(), "{what}[{i}]: numpy {w} overflows float16");
            continue;
        }
        let tol = w.abs() * 2f64.powi(-10) + 2f64.powi(-24);
        assert!((g - w).abs() <= tol, "{what}[{i}]: got {g}, numpy {w}");
    }
}

#[test]
fn matmul_pow2scaled_matches_float64_products() {
    let mut z = npz();
    let cases = [
        (DataType::Float8_143, DataType::Float8_143, 0),
        (DataType::Float8_143, DataType::Float8_152, -4),
        (DataType::Float8_152, DataType::Float8_152, -8),
        (DataType::Float8_152, DataType::Float8_143, -16),
    ];
    for (i, (fa, fb, s)) in cases.into_iter().enumerate() {
        let (a, b) = (codes(&u8s(&mut z, &format!("mm{i}_a")), fa), codes(&u8s(&mut z, &format!("mm{i}_b")), fb));
        let want = f64s(&mut z, &format!("mm{i}_y"));
        let got = run1(|| {
            let (a, b) = (popxl::constant(a, "a")?, popxl::constant(b, "b")?);
            ops::matmul_pow2scaled(&a, &b, &popxl::constant(s, "s")?)
        })
        .unwrap();
        assert_f16_close(&got, &want, &format!("matmul case {i}"));
    }
}

#[test]
fn conv_pow2scaled_matches_float64_products() {
    let mut z = npz();
    let cases = [
        (DataType::Float8_143, DataType::Float8_143, ConvOptions::default(), 1),
        (
            DataType::Float8_152,
            DataType::Float8_143,
            ConvOptions::default().stride([2, 1]).padding([1, 0, 1, 1]).dilation([1, 2]).groups(2),
            -3,
        ),
    ];
    for (i, (fx, fw, o, s)) in cases.into_iter().enumerate() {
        let (x, w) = (codes(&u8s(&mut z, &format!("cv{i}_x")), fx), codes(&u8s(&mut z, &format!("cv{i}_w")), fw));
        let want = f64s(&mut z, &format!("cv{i}_y"));
        let got = run1(|| {
            let (x, w) = (popxl::constant(x, "x")?, popxl::constant(w, "w")?);
            ops::conv_pow2scaled(&x, &w, &popxl::constant(s, "s")?, &o)
        })
        .unwrap();
        assert_f16_close(&got, &want, &format!("conv case {i}"));
    }
}

/// Float8 codes of `shape` spread over both signs and the lower binades
/// (products stay within float16), never the NaN code.
fn spread_codes(shape: &[usize], salt: usize) -> ArrayD<u8> {
    ArrayD::from_shape_fn(IxDyn(shape), |ix| {
        let i = ix.as_array_view().iter().fold(salt, |a, &d| a * 31 + d);
        let c = ((i * 37 + 11) % 0x58) as u8;
        if i % 3 == 0 && c != 0 {
            c | 0x80
        } else {
            c
        }
    })
}

/// ONNX `ConvTranspose` (2-d) in float64: each input pixel adds `x · w[c]` into the
/// full output, which the pads then crop (`out_pad` only adds room at the end).
fn conv_transpose_ref(
    x: &ArrayD<f64>,
    w: &ArrayD<f64>,
    stride: [usize; 2],
    pads: [usize; 4],
    groups: usize,
    out_pad: [usize; 2],
) -> ArrayD<f64> {
    let (n, cin, h, wd) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let (cog, kh, kw) = (w.shape()[1], w.shape()[2], w.shape()[3]);
    let (fh, fw) = (stride[0] * (h - 1) + kh + out_pad[0], stride[1] * (wd - 1) + kw + out_pad[1]);
    let mut full = ArrayD::<f64>::zeros(IxDyn(&[n, cog * groups, fh, fw]));
    for b in 0..n {
        for c in 0..cin {
            let g = c / (cin / groups);
            for i in 0..h {
                for j in 0..wd {
                    for oc in 0..cog {
                        for ki in 0..kh {
                            for kj in 0..kw {
                                full[[b, g * cog + oc, i * stride[0] + ki, j * stride[1] + kj]] +=
                                    x[[b, c, i, j]] * w[[c, oc, ki, kj]];
                            }
                        }
                    }
                }
            }
        }
    }
    let (oh, ow) = (fh - pads[0] - pads[2], fw - pads[1] - pads[3]);
    ArrayD::from_shape_fn(IxDyn(&[n, cog * groups, oh, ow]), |ix| {
        full[[ix[0], ix[1], ix[2] + pads[0], ix[3] + pads[1]]]
    })
}

#[test]
fn conv_transpose_pow2scaled_matches_a_float64_scatter() {
    let decode = |a: &ArrayD<u8>, d: DataType| {
        let f = Float8Format::of(d).unwrap();
        a.mapv(|c| f.decode_f64(c))
    };
    let cases = [
        (DataType::Float8_143, DataType::Float8_143, [1, 1], [0, 0, 0, 0], 1, [0, 0], 0),
        (DataType::Float8_152, DataType::Float8_143, [2, 1], [1, 0, 1, 1], 2, [1, 0], -3),
        (DataType::Float8_143, DataType::Float8_152, [2, 3], [0, 1, 0, 0], 1, [1, 2], 4),
    ];
    for (i, (fx, fw, stride, pads, groups, out_pad, s)) in cases.into_iter().enumerate() {
        let (xc, wc) = (spread_codes(&[2, 4, 3, 4], i), spread_codes(&[4, 3, 3, 2], i + 7));
        let want = conv_transpose_ref(&decode(&xc, fx), &decode(&wc, fw), stride, pads, groups, out_pad)
            .mapv(|v| v * 2f64.powi(s));
        let o = ConvTransposeOptions::default()
            .conv(
                ConvOptions::default()
                    .stride(stride.map(|v| v as i64))
                    .padding(pads.map(|v| v as i64))
                    .groups(groups as i64),
            )
            .output_padding(out_pad.map(|v| v as i64));
        let got = run1(|| {
            let (x, w) = (popxl::constant(codes(&xc, fx), "x")?, popxl::constant(codes(&wc, fw), "w")?);
            ops::conv_transpose_pow2scaled(&x, &w, &popxl::constant(s, "s")?, &o)
        })
        .unwrap();
        assert_f16_close(&got, &want, &format!("conv transpose case {i}"));
    }
    // Float operands are PopXL's type error, as for the other scaled products.
    let f32x = || popxl::constant(HostArray::from(ArrayD::from_elem(IxDyn(&[1, 1, 2, 2]), 1.0f32)), "x");
    let f8w = || popxl::constant(codes(&spread_codes(&[1, 1, 2, 2], 0), DataType::Float8_143), "w");
    let s0 = || popxl::constant(0i32, "s");
    let err = build_err(|| ops::conv_transpose_pow2scaled(&f32x()?, &f8w()?, &s0()?, &ConvTransposeOptions::default()));
    assert!(err.to_string().contains("operand 0"), "{err}");
}

#[test]
fn float8_host_data_crosses_the_session_in_streams_and_variables() {
    // A float8 stream in, its codes decoded, and the codes stored back out.
    let ir = Ir::new();
    let (h2d, d2h, back, var) = {
        let _g = ir.main_graph().enter();
        let h2d = popxl::h2d_stream([4], popxl::float8_152, "x").unwrap();
        let x = ops::host_load(&h2d, "x").unwrap();
        let var = popxl::variable(HostArray::from(vec![Float8_143(0x3c), Float8_143(0x80)]), "v").unwrap();
        let s = popxl::constant(-1i32, "s").unwrap();
        let y = ops::pow2scale_cast_from_fp8(&x, &s, popxl::float32).unwrap();
        let d2h = popxl::d2h_stream([4], popxl::float32, "y").unwrap();
        ops::host_store(&d2h, &y).unwrap();
        let back = popxl::d2h_stream([4], popxl::float8_152, "back").unwrap();
        ops::host_store(&back, &x).unwrap();
        (h2d, d2h, back, var)
    };
    let data = HostArray::from(vec![Float8_152(0x38), Float8_152(0x2c), Float8_152(0x80), Float8_152(0xfb)]);
    let mut session = Session::new(ir, "cpu").unwrap();
    let outs = session.scope(|s| s.run(&[(h2d, data.clone())].into())).unwrap();
    let y = outs[&d2h].to_f64_vec();
    assert_eq!(&y[..2], &[0.125, 0.25 * 2f64.powi(-3) / 2.0]);
    assert!(y[2].is_nan());
    assert_eq!(y[3], -Float8_152(0x7b).to_f64() / 2.0);
    assert_eq!(outs[&back], data);
    let v = session.get_tensor_data(&var).unwrap();
    assert_eq!(code_bytes(&v), vec![0x3c, 0x80]);
}

fn build_err(f: impl FnOnce() -> popxl::Result<popxl::Tensor>) -> PopXlError {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    f().unwrap_err()
}

#[test]
fn typed_errors_for_bad_dtypes_scales_and_operands() {
    let f32s = || popxl::constant(HostArray::from(vec![1.0f32, 2.0]), "x");
    let f8 = || popxl::constant(HostArray::from(vec![Float8_143(0x38)]), "x8");
    let s0 = || popxl::constant(0i32, "s");
    let msg = |e: PopXlError| e.to_string();
    // Casting to a non-float8 type, from a float8 or integer input, a non-int32 or non-scalar scale.
    assert!(msg(build_err(|| ops::pow2scale_cast_to_fp8(&f32s()?, &s0()?, popxl::float16))).contains("float8_143"));
    assert!(
        msg(build_err(|| ops::pow2scale_cast_to_fp8(&f8()?, &s0()?, popxl::float8_152))).contains("float16 or float32")
    );
    assert!(msg(build_err(|| ops::pow2scale_cast_to_fp8(&f32s()?, &popxl::constant(0i16, "s")?, popxl::float8_143)))
        .contains("int32"));
    assert!(msg(build_err(|| ops::pow2scale_cast_to_fp8(
        &f32s()?,
        &popxl::constant(vec![0i32], "s")?,
        popxl::float8_143
    )))
    .contains("scalar"));
    assert!(msg(build_err(|| ops::pow2scale_cast_from_fp8(&f32s()?, &s0()?, popxl::float16))).contains("float8"));
    assert!(
        msg(build_err(|| ops::pow2scale_cast_from_fp8(&f8()?, &s0()?, popxl::float64))).contains("float16 or float32")
    );
    // Non-float8 operands of the scaled products; float8 through the plain ops.
    assert!(msg(build_err(|| ops::matmul_pow2scaled(&f32s()?, &f8()?, &s0()?))).contains("operand 0"));
    assert!(msg(build_err(|| ops::matmul(&f8()?, &f8()?))).contains("matmul_pow2scaled"));
    assert!(msg(build_err(|| ops::cast(&f32s()?, popxl::float8_143))).contains("pow2scale_cast_to_fp8"));
    let x4 = || popxl::constant(HostArray::from(ArrayD::from_elem(IxDyn(&[1, 1, 3, 3]), Float8_143(0x38))), "x");
    let w4 = || popxl::constant(HostArray::from(ArrayD::from_elem(IxDyn(&[1, 1, 2, 2]), 1.0f32)), "w");
    assert!(
        msg(build_err(|| ops::conv_pow2scaled(&x4()?, &w4()?, &s0()?, &ConvOptions::default()))).contains("operand 1")
    );

    // A log2 scale outside [-32, 32) stops the run with a typed error.
    for bad in [-33, 32, 100] {
        let err = run1(|| ops::pow2scale_cast_to_fp8(&f32s()?, &popxl::constant(bad, "s")?, popxl::float8_143));
        match err {
            Err(SessionError::Log2ScaleOutOfRange { value, .. }) => assert_eq!(value, bad),
            other => panic!("scale {bad}: {other:?}"),
        }
        let err = run1(|| ops::matmul_pow2scaled(&f8()?, &f8()?, &popxl::constant(bad, "s")?));
        assert!(matches!(err, Err(SessionError::Log2ScaleOutOfRange { .. })), "{err:?}");
    }
    // Unknown names are typed too.
    assert!("float8_144".parse::<DataType>().is_err());
    assert_eq!("float8_143".parse::<DataType>().unwrap(), DataType::Float8_143);
}
