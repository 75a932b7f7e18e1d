//! `interpolate` against numpy (`tests/fixtures/ops_resize_gen.py` writes
//! `ops_resize.npz` from the ONNX Resize rules PopART follows, checked against
//! PyTorch where it has the same mode): every nearest rounding, every
//! coordinate transformation, linear, up- and down-scaling, float64 and float32.

use std::fs::File;

use crate::support::forward_backward;
use forward_backward::run_with_grads;

use ndarray::ArrayD;
use ndarray_npy::NpzReader;
use popxl::ops::{self, InterpolateOptions};
use popxl::{DataType, HostArray, Ir};

fn cases() -> Vec<InterpolateOptions> {
    let o = |s: &[f64], m: &str, n: &str, c: &str| {
        InterpolateOptions::default().scale_factor(s).mode(m).nearest_mode(n).coordinate_transformation_mode(c)
    };
    vec![
        o(&[1.0, 1.0, 2.0, 2.0], "nearest", "round_prefer_floor", "half_pixel"),
        o(&[1.0, 1.0, 1.5, 2.5], "nearest", "round_prefer_ceil", "asymmetric"),
        o(&[1.0, 1.0, 0.5, 0.75], "nearest", "floor", "align_corners"),
        o(&[1.0, 1.0, 2.0, 1.6], "nearest", "ceil", "pytorch_half_pixel"),
        o(&[1.0, 1.0, 2.0, 2.0], "linear", "round_prefer_floor", "half_pixel"),
        o(&[1.0, 1.0, 2.0, 3.0], "linear", "round_prefer_floor", "align_corners"),
        o(&[1.0, 1.0, 0.5, 0.5], "linear", "round_prefer_floor", "asymmetric"),
        o(&[2.0, 1.5], "linear", "round_prefer_floor", "pytorch_half_pixel"),
    ]
}

#[test]
fn interpolate_matches_numpy() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ops_resize.npz");
    let mut npz = NpzReader::new(File::open(path).expect("fixture ops_resize.npz")).expect("npz");
    for (i, o) in cases().into_iter().enumerate() {
        let x: ArrayD<f64> = npz.by_name(&format!("r{i}_x")).expect("x");
        let want: ArrayD<f64> = npz.by_name(&format!("r{i}_y")).expect("y");
        for dt in [DataType::Float64, DataType::Float32] {
            let got = run_with_grads(&|t| ops::interpolate(&t[0], &o), vec![HostArray::from(x.clone()).cast(dt)], None);
            let tol = if dt == DataType::Float64 { 1e-12 } else { 1e-6 };
            assert_eq!(got[0].len(), want.len(), "case {i}");
            for (j, (g, w)) in got[0].iter().zip(want.iter()).enumerate() {
                assert!((g - w).abs() <= tol, "case {i} {dt} [{j}]: got {g}, numpy {w} ({o:?})");
            }
        }
    }
}

#[test]
fn bad_interpolations_are_typed_errors() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(ArrayD::<f32>::zeros(vec![1, 2, 4, 4]), "x").unwrap();
    let msg = |o: InterpolateOptions| ops::interpolate(&x, &o).unwrap_err().to_string();
    let d = InterpolateOptions::default;
    assert!(msg(d().scale_factor([2.0])).contains("scale_factor"));
    assert!(msg(d().scale_factor([1.0, 1.0, 0.0, 1.0])).contains("positive"));
    assert!(msg(d().mode("cubic")).contains("cubic"));
    assert!(msg(d().mode("area")).contains("unknown mode"));
    assert!(msg(d().coordinate_transformation_mode("tf_crop_and_resize")).contains("not supported"));
    assert!(msg(d().nearest_mode("up")).contains("nearest_mode"));
}
