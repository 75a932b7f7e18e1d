//! Gradient checks of the in-place views: `concat_` has `Concat`'s gradient
//! (PopXL ✓); the other in-place views have none (PopXL ✗, checked in
//! `inplace_aliasing.rs`). The concatenated inputs are then read through
//! the view, so the check covers the alias too.

use super::harness::Rng;
use super::harness::*;
use popxl::ops;
use proptest::prelude::*;

proptest! {
    #![proptest_config(cfg(12))]

    #[test]
    fn concat_inplace(s in prop::collection::vec(1usize..4, 1..=3), extra in 1usize..3, axis_pick in any::<u64>(), seed in any::<u64>()) {
        let axis = (axis_pick % s.len() as u64) as usize;
        let mut rng = Rng(seed);
        let mut s2 = s.clone();
        s2[axis] = extra;
        let (a, b) = (rng.array(&s, uniform), rng.array(&s2, uniform));
        let f = move |t: &[popxl::Tensor]| {
            let c = ops::concat_(&[&t[0], &t[1]], axis as i64)?;
            ops::mul(&c, &c)
        };
        gradcheck(&[Arg::Diff(a), Arg::Diff(b)], &f, F64, seed)?;
    }
}
