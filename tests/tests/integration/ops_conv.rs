//! `conv` and `conv_transpose` against numpy (`tests/fixtures/ops_conv_gen.py`
//! writes the reference values to `ops_conv.npz`): outputs, and the gradients
//! autodiff produces (`ConvDataGrad`, `ConvWeightsGrad`) for a given output
//! gradient. The first cases run in float64 and cover stride, asymmetric
//! padding, dilation, groups, depthwise, 1x1, 1-d and every pad type; the
//! last ones run in float32 on shapes large enough to be split over threads.
//! 3-d convolutions (padding, stride, dilation, groups, a stem, depthwise,
//! pointwise) and transposed ones against PyTorch
//! (`tests/fixtures/ops_conv3d_gen.py` writes `ops_conv3d.npz`).

use std::fs::File;

use crate::support::forward_backward;
use forward_backward::{read_npz as read, run_with_grads};

use ndarray::ArrayD;
use ndarray_npy::NpzReader;
use popxl::ops::{self, ConvOptions, ConvTransposeOptions, PadType};
use popxl::{DataType, Ir, Tensor};

/// (strides, pads, dilations, groups, pad type) of case `c{i}`, as in the generator.
fn cases() -> Vec<ConvOptions> {
    let o = |s: &[i64], p: &[i64], d: &[i64], g: i64, t: PadType| {
        ConvOptions::default().stride(s).padding(p).dilation(d).groups(g).pad_type(t)
    };
    use PadType::*;
    vec![
        o(&[1, 1], &[0, 0, 0, 0], &[1, 1], 1, NotSet),
        o(&[2, 2], &[1, 0, 2, 1], &[1, 1], 2, NotSet),
        o(&[1, 2], &[2, 1, 2, 1], &[2, 1], 1, NotSet),
        o(&[1, 1], &[1, 1, 1, 1], &[1, 1], 4, NotSet),
        o(&[2, 2], &[1, 1, 1, 1], &[1, 1], 3, NotSet),
        o(&[1, 1], &[0, 0, 0, 0], &[1, 1], 1, NotSet),
        o(&[2], &[1, 1], &[2], 1, NotSet),
        o(&[2, 2], &[0, 0, 0, 0], &[1, 1], 1, SameUpper),
        o(&[2, 2], &[0, 0, 0, 0], &[1, 1], 1, SameLower),
        o(&[2, 2], &[5, 5, 5, 5], &[1, 1], 1, Valid),
        o(&[1, 1], &[1, 1, 1, 1], &[1, 1], 1, NotSet),
        o(&[1, 1], &[1, 1, 1, 1], &[1, 1], 32, NotSet),
        o(&[1, 1], &[0, 0, 0, 0], &[1, 1], 1, NotSet),
        o(&[1, 1], &[0, 0, 0, 0], &[1, 1], 1, NotSet),
        o(&[2, 1], &[2, 1, 1, 1], &[1, 2], 2, NotSet),
        o(&[1, 1], &[0, 0, 0, 0], &[1, 1], 1, NotSet),
        o(&[1, 1], &[1, 1, 1, 1], &[1, 1], 1, NotSet),
    ]
}
/// Cases from this index on are float32.
const FIRST_F32: usize = 10;

fn transposed_cases() -> Vec<ConvTransposeOptions> {
    let o = |s: &[i64], p: &[i64], g: i64, op: &[i64], os: &[i64], t: PadType| {
        let conv = ConvOptions::default().stride(s).padding(p).groups(g).pad_type(t);
        ConvTransposeOptions::default().conv(conv).output_padding(op).output_shape(os)
    };
    use PadType::*;
    vec![
        o(&[2, 2], &[1, 1, 1, 1], 1, &[1, 1], &[], NotSet),
        o(&[2, 2], &[0, 0, 0, 0], 2, &[0, 0], &[], NotSet),
        o(&[2, 2], &[0, 0, 0, 0], 1, &[0, 0], &[8, 8], SameUpper),
        o(&[2, 2], &[0, 0, 0, 0], 1, &[0, 0], &[8, 8], SameLower),
        o(&[3], &[1, 2], 1, &[2], &[], NotSet),
    ]
}

fn fixture() -> NpzReader<File> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ops_conv.npz");
    NpzReader::new(File::open(path).expect("fixture ops_conv.npz")).expect("npz")
}

fn assert_close(got: &[f64], want: &[f64], rtol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs())).max(1.0);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= rtol * scale, "{what}[{i}]: got {g}, numpy {w}");
    }
}

#[test]
fn conv_and_its_gradients_match_numpy() {
    let mut npz = fixture();
    for (i, o) in cases().into_iter().enumerate() {
        let (dt, rtol) = if i >= FIRST_F32 { (DataType::Float32, 2e-5) } else { (DataType::Float64, 1e-12) };
        let [x, w, gy] = ["x", "w", "gy"].map(|k| read(&mut npz, &format!("c{i}_{k}"), dt));
        let got = run_with_grads(&|t| ops::conv_with(&t[0], &t[1], &o), vec![x, w], Some(gy));
        for (k, name) in ["y", "dx", "dw"].iter().enumerate() {
            let want = read(&mut npz, &format!("c{i}_{name}"), dt).to_f64_vec();
            assert_close(&got[k], &want, rtol, &format!("case {i} {name} ({o:?})"));
        }
    }
}

#[test]
fn conv_transpose_matches_numpy() {
    let mut npz = fixture();
    for (i, o) in transposed_cases().into_iter().enumerate() {
        let [x, w] = ["x", "w"].map(|k| read(&mut npz, &format!("t{i}_{k}"), DataType::Float64));
        let got = run_with_grads(&|t| ops::conv_transpose(&t[0], &t[1], &o), vec![x, w], None);
        let want = read(&mut npz, &format!("t{i}_y"), DataType::Float64).to_f64_vec();
        assert_close(&got[0], &want, 1e-12, &format!("transposed case {i}"));
    }
}

#[test]
fn conv_results_do_not_depend_on_the_thread_count() {
    let mut npz = fixture();
    // Column blocks (case 10), several images per GEMM (case 15), one image's
    // output channels over a shared im2col matrix (case 16).
    for case in [10, 15, 16] {
        let o = &cases()[case];
        let [x, w, gy] = ["x", "w", "gy"].map(|k| read(&mut npz, &format!("c{case}_{k}"), DataType::Float32));
        let f = |t: &[Tensor]| ops::conv_with(&t[0], &t[1], o);
        let one = popxl_session::cpu::team::with_max_threads(1, || {
            run_with_grads(&f, vec![x.clone(), w.clone()], Some(gy.clone()))
        });
        let many = run_with_grads(&f, vec![x, w], Some(gy));
        // The forward pass and data gradient are exact; the weight gradient sums
        // the batch in chunks fixed at build time, close but possibly reordered.
        assert_eq!(one[..2], many[..2], "case {case}");
        assert_close(&one[2], &many[2], 1e-5, "dw");
    }
}

/// The 3-d cases of `ops_conv3d_gen.py`: (strides, pads, dilations, groups).
fn cases_3d() -> Vec<ConvOptions> {
    let o = |s: &[i64], p: &[i64], d: &[i64], g: i64| ConvOptions::default().stride(s).padding(p).dilation(d).groups(g);
    vec![
        o(&[1, 1, 1], &[1, 1, 1, 1, 1, 1], &[1, 1, 1], 1),
        o(&[2, 1, 2], &[1, 0, 2, 0, 1, 1], &[2, 1, 1], 2),
        o(&[1, 2, 2], &[1, 3, 3, 1, 3, 3], &[1, 1, 1], 1),
        o(&[1, 1, 1], &[1, 1, 1, 1, 1, 1], &[1, 2, 1], 6),
        o(&[1, 1, 1], &[0, 0, 0, 0, 0, 0], &[1, 1, 1], 1),
    ]
}

fn fixture_3d() -> NpzReader<File> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ops_conv3d.npz");
    NpzReader::new(File::open(path).expect("fixture ops_conv3d.npz")).expect("npz")
}

#[test]
fn conv3d_and_its_autodiff_gradients_match_pytorch() {
    let mut npz = fixture_3d();
    for (i, o) in cases_3d().into_iter().enumerate() {
        for (dt, rtol) in [(DataType::Float64, 1e-12), (DataType::Float32, 2e-5)] {
            let [x, w, gy] = ["x", "w", "gy"].map(|k| read(&mut npz, &format!("c{i}_{k}"), DataType::Float64).cast(dt));
            let got = run_with_grads(&|t| ops::conv_with(&t[0], &t[1], &o), vec![x, w], Some(gy));
            for (k, name) in ["y", "dx", "dw"].iter().enumerate() {
                let want = read(&mut npz, &format!("c{i}_{name}"), DataType::Float64).to_f64_vec();
                assert_close(&got[k], &want, rtol, &format!("3-d case {i} {name} {dt} ({o:?})"));
            }
        }
    }
}

#[test]
fn conv_transpose3d_matches_pytorch() {
    let mut npz = fixture_3d();
    // (strides, pads, output_padding, groups), as the generator's TRANSPOSED.
    type Case<'a> = (&'a [i64], &'a [i64], &'a [i64], i64);
    let cases: [Case; 2] = [(&[2, 2, 1], &[1, 1, 0], &[1, 0, 0], 1), (&[1, 2, 2], &[0, 1, 0], &[0, 1, 1], 2)];
    for (i, (s, p, op, g)) in cases.into_iter().enumerate() {
        let pads = [p, p].concat();
        let conv = ConvOptions::default().stride(s).padding(pads).groups(g);
        let o = ConvTransposeOptions::default().conv(conv).output_padding(op);
        let [x, w] = ["x", "w"].map(|k| read(&mut npz, &format!("t{i}_{k}"), DataType::Float64));
        let got = run_with_grads(&|t| ops::conv_transpose(&t[0], &t[1], &o), vec![x, w], None);
        let want = read(&mut npz, &format!("t{i}_y"), DataType::Float64).to_f64_vec();
        assert_close(&got[0], &want, 1e-12, &format!("3-d transposed case {i}"));
    }
}

#[test]
fn bad_convolutions_are_typed_errors() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let t = |s: &[usize], dt: DataType| popxl::variable_as(ArrayD::<f64>::zeros(s), dt, "t").unwrap();
    let x = t(&[1, 4, 5, 5], DataType::Float32);
    let msg = |r: popxl::Result<Tensor>| r.unwrap_err().to_string();
    assert!(msg(ops::conv(&x, &t(&[2, 3, 3, 3], DataType::Float32))).contains("input channels"));
    assert!(msg(ops::conv(&x, &t(&[2, 4, 7, 7], DataType::Float32))).contains("larger than the padded input"));
    assert!(msg(ops::conv(&x, &t(&[2, 4, 3, 3], DataType::Float64))).contains("dtype"));
    assert!(msg(ops::conv(&x, &t(&[2, 4, 3], DataType::Float32))).contains("rank"));
    let w = t(&[2, 4, 3, 3], DataType::Float32);
    assert!(msg(ops::conv_with(&x, &w, &ConvOptions::default().stride([0, 1]))).contains("strides"));
    assert!(msg(ops::conv_with(&x, &w, &ConvOptions::default().stride([1]))).contains("one per spatial"));
    assert!(msg(ops::conv_with(&x, &t(&[3, 2, 3, 3], DataType::Float32), &ConvOptions::default().groups(2)))
        .contains("must divide"));
    assert!(msg(ops::conv_with(&x, &w, &ConvOptions::default().groups(0))).contains("at least 1"));
    let tr = ConvTransposeOptions::default().conv(ConvOptions::default().dilation([2, 2]));
    assert!(msg(ops::conv_transpose(&x, &t(&[4, 2, 3, 3], DataType::Float32), &tr)).contains("dilation"));
}
