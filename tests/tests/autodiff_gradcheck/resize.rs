//! Gradient checks of `interpolate` (PopXL ✓, `ResizeGrad`, the exact adjoint)
//! for nearest and linear resizing, up and down, every coordinate mode.

use crate::harness::Rng;
use crate::harness::*;
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
