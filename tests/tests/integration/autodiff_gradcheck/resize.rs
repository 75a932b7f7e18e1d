//! Gradient checks of `interpolate` (PopXL ✓, `ResizeGrad`, the exact adjoint)
//! for nearest and linear resizing, up and down, every coordinate mode.

use super::harness::Rng;
use super::harness::*;
use popxl::ops::{self, InterpolateOptions};
use proptest::prelude::*;

proptest! {
    #![proptest_config(cfg(16))]

    #[test]
    fn interpolate(h in 1usize..5, w in 1usize..5, sh in prop::sample::select(vec![0.5, 1.0, 1.5, 2.0, 3.0]),
                   sw in prop::sample::select(vec![0.75, 1.0, 2.0, 2.5]), linear in any::<bool>(),
                   coords in prop::sample::select(vec!["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]),
                   seed in any::<u64>()) {
        prop_assume!((h as f64 * sh).floor() >= 1.0 && (w as f64 * sw).floor() >= 1.0);
        let x = Rng(seed).array(&[2, 1, h, w], uniform);
        let o = InterpolateOptions::default()
            .scale_factor([1.0, 1.0, sh, sw])
            .mode(if linear { "linear" } else { "nearest" })
            .coordinate_transformation_mode(coords);
        let f = move |t: &[popxl::Tensor]| ops::interpolate(&t[0], &o);
        gradcheck(&[Arg::Diff(x)], &f, F64, seed)?;
    }
}

proptest! {
    #![proptest_config(cfg(12))]

    /// `roi_align` (PopXL ✓, `RoiAlignGrad`) w.r.t. the feature map, random
    /// boxes partly outside it, fixed and adaptive sampling.
    #[test]
    fn roi_align(h in 2usize..6, w in 2usize..6, rois in 1usize..4, ratio in 0i64..3, seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let x = rng.array(&[2, 2, h, w], uniform);
        let boxes: Vec<f64> = (0..rois)
            .flat_map(|_| {
                let (x0, y0) = (rng.uniform(-1.0, w as f64), rng.uniform(-1.0, h as f64));
                [x0, y0, x0 + rng.uniform(0.5, 4.0), y0 + rng.uniform(0.5, 4.0)]
            })
            .collect();
        let idx: Vec<i32> = (0..rois).map(|_| rng.below(2) as i32).collect();
        let boxes = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[rois, 4]), boxes).expect("shape");
        let idx = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[rois]), idx).expect("shape");
        let f = move |t: &[popxl::Tensor]| {
            let r = popxl::constant_as(boxes.clone(), popxl::DataType::Float64, "rois")?;
            let b = popxl::constant(idx.clone(), "batch_index")?;
            ops::roi_align(&t[0], &r, &b, [2, 2], 1.0, ratio)
        };
        gradcheck(&[Arg::Diff(x)], &f, F64, seed)?;
    }
}
