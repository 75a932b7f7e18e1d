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

/// A batch index outside `[0, N)` gives a zero output row, or with
/// `check_indices` `IndexOutOfRange` naming it (as every op that reads by index).
#[test]
fn an_out_of_range_batch_index_is_zeros_or_checked() {
    use popxl_session::{Session, SessionError, SessionOptions};
    let build = || {
        let ir = Ir::new();
        let (idx, out) = {
            let _g = ir.main_graph().enter();
            // A constant map: every bilinear sample inside it is 3.
            let x = popxl::variable(ArrayD::<f32>::from_elem(vec![2, 1, 3, 3], 3.0), "x").unwrap();
            let rois = popxl::constant(ndarray::array![[0.0f32, 0.0, 1.0, 1.0], [0.5, 0.5, 2.0, 2.0]], "rois").unwrap();
            let idx = popxl::h2d_stream([2], popxl::int32, "idx").unwrap();
            let b = ops::host_load(&idx, "idx").unwrap();
            let y = ops::roi_align(&x, &rois, &b, [1, 1], 1.0, 2).unwrap();
            let out = popxl::d2h_stream([2, 1, 1, 1], popxl::float32, "y").unwrap();
            ops::host_store(&out, &y).unwrap();
            (idx, out)
        };
        (ir, idx, out)
    };
    for check_indices in [false, true] {
        let (ir, idx, out) = build();
        let mut s = Session::with_options(ir, "cpu", SessionOptions { check_indices, ..Default::default() }).unwrap();
        let mut run = |v: [i32; 2]| s.scope(|s| s.run(&[(idx.clone(), HostArray::from(ndarray::arr1(&v)))].into()));
        assert_eq!(run([1, 0]).unwrap()[&out].to_f64_vec(), vec![3.0, 3.0]);
        for (bad, at) in [([0, 2], 1), ([-1, 1], 0), ([i32::MAX, 0], 0)] {
            match run(bad) {
                Ok(o) if !check_indices => {
                    let mut want = vec![3.0, 3.0];
                    want[at] = 0.0;
                    assert_eq!(o[&out].to_f64_vec(), want, "{bad:?}");
                }
                Err(SessionError::IndexOutOfRange { op_type, index, bound, .. }) if check_indices => {
                    assert_eq!((op_type.as_str(), index, bound), ("RoiAlign", i64::from(bad[at]), 2));
                }
                other => panic!("check_indices {check_indices}, {bad:?}: {other:?}"),
            }
        }
    }
}
