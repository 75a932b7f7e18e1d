//! Gradient checks of the reductions, scans and top-k added with the full
//! catalogue: prod (also with zeros), median, l1, l2, logsum, logsumexp,
//! sumsquare, cumsum (exclusive, reverse) and topk.

use super::harness::Rng;
use super::harness::*;
use ndarray::{ArrayD, IxDyn};
use popxl::ops::{self, CumSumOptions};
use popxl::Tensor;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Axes picked by the low bits of `bits` (negative if bit 7), possibly empty (= all).
fn pick_axes(rank: usize, bits: u8) -> Vec<i64> {
    let neg = if bits & 0x80 != 0 { rank as i64 } else { 0 };
    (0..rank).filter(|k| bits >> k & 1 == 1).map(|k| k as i64 - neg).collect()
}

type Red = fn(&Tensor, &[i64], bool) -> popxl::Result<Tensor>;
type Gen = fn(&mut Rng) -> f64;

proptest! {
    #![proptest_config(cfg(16))]

    #[test]
    fn reductions(s in shape(3), axes_bits in any::<u8>(), keepdims in any::<bool>(), seed in any::<u64>()) {
        let axes = pick_axes(s.len(), axes_bits);
        // Values away from the kinks: l1 at 0; logsum needs a positive sum; median
        // needs distinct values (uniform draws are).
        let cases: [(&str, Red, Gen); 7] = [
            ("prod", ops::prod, uniform),
            ("median", ops::median, uniform),
            ("l1", ops::l1, away_from_zero),
            ("l2", ops::l2, away_from_zero),
            ("logsum", ops::logsum, positive),
            ("logsumexp", ops::logsumexp, uniform),
            ("sumsquare", ops::sumsquare, uniform),
        ];
        for (name, op, gen) in cases {
            let x = Rng(seed).array(&s, gen);
            let a = axes.clone();
            gradcheck(&[Arg::Diff(x)], &move |t| op(&t[0], &a, keepdims), F64, seed)
                .map_err(|e| TestCaseError::fail(format!("{name} {s:?} axes {axes:?} keepdims {keepdims}: {e}")))?;
        }
    }

    #[test]
    fn prod_with_zeros(s in prop::collection::vec(1usize..4, 1..=3), zeros in 1usize..3, axes_bits in any::<u8>(), seed in any::<u64>()) {
        // One or two exact zeros: the product is linear in each element, so central
        // differences are exact and the gradient must be the product of the others.
        let mut rng = Rng(seed);
        let mut x = rng.array(&s, uniform);
        let n = x.len();
        for _ in 0..zeros {
            let i = rng.below(n);
            x.as_slice_mut().unwrap()[i] = 0.0;
        }
        let axes = pick_axes(s.len(), axes_bits);
        let a = axes.clone();
        gradcheck(&[Arg::Diff(x)], &move |t| ops::prod(&t[0], &a, false), F64, seed)
            .map_err(|e| TestCaseError::fail(format!("prod {s:?} axes {axes:?}: {e}")))?;
    }

    #[test]
    fn cumsum(s in prop::collection::vec(1usize..5, 1..=3), axis in 0usize..3, exclusive in any::<bool>(), reverse in any::<bool>(), seed in any::<u64>()) {
        let axis = (axis % s.len()) as i64 - s.len() as i64 * (seed as i64 & 1);
        let x = Rng(seed).array(&s, uniform);
        let o = CumSumOptions { exclusive, reverse };
        gradcheck(&[Arg::Diff(x)], &move |t| ops::cumsum_with(&t[0], axis, o), F64, seed)
            .map_err(|e| TestCaseError::fail(format!("cumsum {s:?} axis {axis} {o:?}: {e}")))?;
    }

    #[test]
    fn topk(s in prop::collection::vec(1usize..5, 1..=3), axis in 0usize..3, k in 0usize..5, largest in any::<bool>(), sorted in any::<bool>(), seed in any::<u64>()) {
        let axis_u = axis % s.len();
        let k = k % (s[axis_u] + 1);
        let axis = axis_u as i64 - s.len() as i64 * (seed as i64 & 1);
        let x = Rng(seed).array(&s, uniform);
        gradcheck(&[Arg::Diff(x)], &move |t| ops::topk(&t[0], k, axis, largest, sorted).map(|(v, _)| v), F64, seed)
            .map_err(|e| TestCaseError::fail(format!("topk {s:?} axis {axis} k {k} largest {largest}: {e}")))?;
    }
}

#[test]
fn median_of_even_count_routes_to_the_lower_middle() {
    // [4, 1, 3, 2]: lower median 2 (index 3) gets the whole gradient.
    let x = ArrayD::from_shape_vec(IxDyn(&[4]), vec![4.0, 1.0, 3.0, 2.0]).unwrap();
    gradcheck(&[Arg::Diff(x)], &|t| ops::median(&t[0], &[], false), F64, 1).unwrap();
}
