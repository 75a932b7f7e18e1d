//! `roi_align` against numpy (`tests/fixtures/ops_roi_align_gen.py`, a port of
//! torchvision's `RoIAlign(aligned=False)`, the reference PopXL's own tests
//! use): outputs and the input gradient (`RoiAlignGrad`) for fixed and adaptive
//! sampling ratios, several spatial scales, ROIs partly outside the map.

use std::fs::File;

use crate::support::forward_backward;
use forward_backward::run_with_grads;

use ndarray::ArrayD;
use ndarray_npy::NpzReader;
use popxl::ops;
use popxl::{HostArray, Ir};

/// (output size, spatial scale, sampling ratio) of case `a{i}`, as in the generator.
const CASES: [([i64; 2], f64, i64); 4] = [([2, 2], 1.0, 2), ([3, 2], 0.5, 0), ([4, 4], 0.25, 1), ([2, 3], 2.0, 3)];

#[test]
fn roi_align_and_its_gradient_match_numpy() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ops_roi_align.npz");
    let mut npz = NpzReader::new(File::open(path).expect("fixture ops_roi_align.npz")).expect("npz");
    for (i, (size, scale, ratio)) in CASES.into_iter().enumerate() {
        let mut f = |k: &str| -> ArrayD<f64> { npz.by_name(&format!("a{i}_{k}")).expect(k) };
        let (x, rois, gy, y, dx) = (f("x"), f("rois"), f("gy"), f("y"), f("dx"));
        let idx: ArrayD<i32> = npz.by_name(&format!("a{i}_idx")).expect("idx");
        let g = |t: &[popxl::Tensor]| {
            let r = popxl::constant_as(HostArray::from(rois.clone()), popxl::DataType::Float64, "rois")?;
            let b = popxl::constant(HostArray::from(idx.clone()), "batch_index")?;
            ops::roi_align(&t[0], &r, &b, size, scale, ratio)
        };
        let got = run_with_grads(&g, vec![HostArray::from(x)], Some(HostArray::from(gy)));
        for (got, want, name) in [(&got[0], &y, "y"), (&got[1], &dx, "dx")] {
            assert_eq!(got.len(), want.len(), "case {i} {name}");
            for (j, (a, b)) in got.iter().zip(want.iter()).enumerate() {
                assert!((a - b).abs() <= 1e-12, "case {i} {name}[{j}]: got {a}, numpy {b}");
            }
        }
    }
}

#[test]
fn bad_roi_aligns_are_typed_errors() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(ArrayD::<f32>::zeros(vec![1, 2, 4, 4]), "x").unwrap();
    let rois = popxl::variable(ArrayD::<f32>::zeros(vec![3, 4]), "rois").unwrap();
    let idx = popxl::variable(ArrayD::<i32>::zeros(vec![3]), "idx").unwrap();
    let msg = |r: popxl::Result<popxl::Tensor>| r.unwrap_err().to_string();
    assert!(msg(ops::roi_align(&x, &rois, &idx, [0, 2], 1.0, 2)).contains("output_size"));
    assert!(msg(ops::roi_align(&x, &x, &idx, [2, 2], 1.0, 2)).contains("rois"));
    assert!(msg(ops::roi_align(&x, &rois, &rois, [2, 2], 1.0, 2)).contains("batch_index"));
    assert!(msg(ops::roi_align(&x, &rois, &idx, [2, 2], 1.0, -1)).contains("sampling_ratio"));
    assert!(msg(ops::roi_align(&rois, &rois, &idx, [2, 2], 1.0, 1)).contains("[N, C, H, W]"));
}
