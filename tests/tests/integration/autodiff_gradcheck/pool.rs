//! Gradient checks of `max_pool` and `average_pool` (PopXL ✓, `MaxPoolGrad`
//! and `AveragePoolGrad`) over random 1-d and 2-d windows: stride, asymmetric
//! padding, dilation, ceil_mode and every pad type. Inputs are distinct values
//! at least 0.05 apart, so a finite-difference step never changes a window's maximum.

use super::harness::Rng;
use super::harness::*;
use ndarray::{ArrayD, IxDyn};
use popxl::ops::{self, PadType, PoolOptions, StorageOrder};
use proptest::prelude::*;

/// A random valid pool: (x shape, kernel, options).
fn geometry() -> impl Strategy<Value = (Vec<usize>, Vec<i64>, PoolOptions)> {
    (prop::sample::select(vec![1usize, 2]), 1usize..3, 1usize..3, 0usize..4, any::<u64>()).prop_map(
        |(nd, n, c, mode, bits)| {
            let mut r = Rng(bits);
            let k: Vec<usize> = (0..nd).map(|_| 1 + r.below(3)).collect();
            let s: Vec<i64> = (0..nd).map(|_| 1 + r.below(2) as i64).collect();
            let d: Vec<i64> = (0..nd).map(|_| 1 + r.below(2) as i64).collect();
            // Padding smaller than the window, as PyTorch requires.
            let p: Vec<i64> = (0..2 * nd).map(|i| r.below(k[i % nd]) as i64).collect();
            let size: Vec<usize> = (0..nd).map(|i| (k[i] - 1) * d[i] as usize + 1 + r.below(4)).collect();
            let auto_pad = [PadType::NotSet, PadType::SameUpper, PadType::SameLower, PadType::Valid][mode];
            let o = PoolOptions::default()
                .stride(s)
                .padding(p)
                .dilation(d)
                .auto_pad(auto_pad)
                .ceil_mode(bits >> 50 & 1 == 1);
            ([vec![n, c], size].concat(), k.iter().map(|&v| v as i64).collect(), o)
        },
    )
}

/// Distinct values 0.05 apart, shuffled.
fn distinct(shape: &[usize], rng: &mut Rng) -> ArrayD<f64> {
    let n: usize = shape.iter().product();
    let mut v: Vec<f64> = (0..n).map(|i| i as f64 * 0.05 - 1.0).collect();
    for i in (1..n).rev() {
        v.swap(i, rng.below(i + 1));
    }
    ArrayD::from_shape_vec(IxDyn(shape), v).expect("shape")
}

proptest! {
    #![proptest_config(cfg(24))]

    #[test]
    fn max_pool((xs, k, o) in geometry(), seed in any::<u64>()) {
        let x = distinct(&xs, &mut Rng(seed));
        let f = move |t: &[popxl::Tensor]| ops::max_pool_with(&t[0], &k, &o, StorageOrder::Row);
        gradcheck(&[Arg::Diff(x)], &f, F64, seed)?;
    }

    #[test]
    fn average_pool((xs, k, o) in geometry(), seed in any::<u64>()) {
        let x = Rng(seed).array(&xs, uniform);
        let f = move |t: &[popxl::Tensor]| ops::average_pool_with(&t[0], &k, &o);
        gradcheck(&[Arg::Diff(x)], &f, F64, seed)?;
    }
}
