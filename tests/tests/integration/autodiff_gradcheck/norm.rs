//! Gradient checks of `group_norm` and `layer_norm` (PopXL ✓, `GroupNormGrad`
//! from the saved mean and inverse standard deviation) w.r.t. the input, the
//! weight and the bias, and of `batch_norm_inference` (elementwise ops) w.r.t.
//! all five inputs, over random shapes with size-1 spatial dims; training-mode
//! `batch_norm` (`BatchNormGrad`) w.r.t. the input, the scale and the bias,
//! with the running statistics fixed, on `[N, C]` and `[N, C, S..]` inputs.

use super::harness::Rng;
use super::harness::*;
use popxl::ops;
use proptest::prelude::*;

proptest! {
    #![proptest_config(cfg(16))]

    #[test]
    fn group_norm(n in 1usize..3, cg in 1usize..4, groups in 1usize..4, spatial in prop::collection::vec(1usize..4, 0..=2), seed in any::<u64>()) {
        let c = cg * groups;
        let mut rng = Rng(seed);
        let x = rng.array(&[vec![n, c], spatial].concat(), uniform);
        let (w, b) = (rng.array(&[c], positive), rng.array(&[c], uniform));
        let g = groups as i64;
        let f = move |t: &[popxl::Tensor]| ops::group_norm(&t[0], &t[1], &t[2], g, 1e-3);
        // Normalising a single element gives 0 for every input: skip the degenerate case.
        prop_assume!(x.len() / (n * groups) > 1);
        gradcheck(&[Arg::Diff(x), Arg::Diff(w), Arg::Diff(b)], &f, F64, seed)?;
    }

    #[test]
    fn layer_norm(rows in 1usize..4, d in 2usize..6, seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let (x, w, b) = (rng.array(&[rows, d], uniform), rng.array(&[d], positive), rng.array(&[d], uniform));
        let f = |t: &[popxl::Tensor]| ops::layer_norm(&t[0], &t[1], &t[2], 1e-5);
        gradcheck(&[Arg::Diff(x), Arg::Diff(w), Arg::Diff(b)], &f, F64, seed)?;
    }

    #[test]
    fn batch_norm_inference(n in 1usize..3, c in 1usize..4, hw in 1usize..3, seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let x = rng.array(&[n, c, hw, hw], uniform);
        let [s, b, m] = [rng.array(&[c], positive), rng.array(&[c], uniform), rng.array(&[c], uniform)];
        let v = rng.array(&[c], positive);
        let f = |t: &[popxl::Tensor]| ops::batch_norm_inference(&t[0], &t[1], &t[2], &t[3], &t[4], 1e-5, 0.9);
        let args = [Arg::Diff(x), Arg::Diff(s), Arg::Diff(b), Arg::Diff(m), Arg::Diff(v)];
        gradcheck(&args, &f, F64, seed)?;
    }

    #[test]
    fn batch_norm(n in 1usize..4, c in 1usize..4, spatial in prop::collection::vec(1usize..4, 0..=2), unbiased in any::<bool>(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let x = rng.array(&[vec![n, c], spatial].concat(), uniform);
        // Normalising a single element per channel gives 0 for every input: skip it.
        prop_assume!(x.len() / c > 1);
        let [s, b, m] = [rng.array(&[c], positive), rng.array(&[c], uniform), rng.array(&[c], uniform)];
        let v = rng.array(&[c], positive);
        let opts = ops::BatchNormOptions { epsilon: 1e-3, momentum: 0.8, unbiased_variance: unbiased };
        // The running statistics: float64 constants of the function's graph.
        let f = move |t: &[popxl::Tensor]| {
            let m = popxl::constant_as(m.clone(), popxl::DataType::Float64, "running_mean")?;
            let v = popxl::constant_as(v.clone(), popxl::DataType::Float64, "running_var")?;
            Ok(ops::batch_norm_with(&t[0], &t[1], &t[2], &m, &v, opts)?.y)
        };
        let args = [Arg::Diff(x), Arg::Diff(s), Arg::Diff(b)];
        gradcheck(&args, &f, F64, seed)?;
    }
}
