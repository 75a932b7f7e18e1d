//! Gradient checks of the elementwise_ext ops: `log2`, `geluerf`, `swish`, `clip`
//! (both, one or no bound), `fmod` (w.r.t. the dividend, with broadcasting), the
//! n-ary `maximum`/`minimum` and `print_tensor` (the gradient passes through).

use super::harness::Rng;
use super::harness::*;
use ndarray::{ArrayD, IxDyn};
use popart_ir::DataType;
use popxl::ops::{self, PrintTensorOptions};
use popxl::{HostArray, Tensor};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Values in [-2, 2) at least 0.05 away from each of `kinks`.
fn away_from(kinks: &'static [f64]) -> impl Fn(&mut Rng) -> f64 {
    move |r| loop {
        let v = uniform(r);
        if kinks.iter().all(|k| (v - k).abs() > 0.05) {
            return v;
        }
    }
}

proptest! {
    #![proptest_config(cfg(12))]

    #[test]
    fn log2_geluerf_swish(s in shape(3), seed in any::<u64>()) {
        type Gen = fn(&mut Rng) -> f64;
        let cases: [(&str, UnaryOp, Gen); 3] = [
            ("log2", ops::log2, positive),
            ("geluerf", ops::geluerf, uniform),
            ("swish", ops::swish, uniform),
        ];
        let mut rng = Rng(seed);
        for (name, op, gen) in cases {
            let x = rng.array(&s, gen);
            gradcheck(&[Arg::Diff(x)], &*unary(op), F64, seed)
                .map_err(|e| TestCaseError::fail(format!("{name} {s:?}: {e}")))?;
        }
    }

    #[test]
    fn clip_passes_the_gradient_inside_the_bounds(s in shape(3), seed in any::<u64>(), which in 0usize..4) {
        let (min, max) = [(Some(-0.5), Some(0.7)), (Some(-0.5), None), (None, Some(0.7)), (None, None)][which];
        let x = Rng(seed).array(&s, away_from(&[-0.5, 0.7]));
        gradcheck(&[Arg::Diff(x)], &move |t: &[Tensor]| ops::clip(&t[0], min, max), F64, seed)?;
    }

    #[test]
    fn fmod_dividend((a, b, swap) in broadcast_pair(), seed in any::<u64>()) {
        // The dividend may be broadcast (its gradient is reduced); the divisor is a
        // constant (fmod has no divisor gradient) away from 0, and no quotient is
        // near an integer (where fmod jumps).
        let (sa, sb) = if swap { (&b, &a) } else { (&a, &b) };
        let mut rng = Rng(seed);
        let (x, d) = (rng.array(sa, uniform), rng.array(sb, away_from_zero));
        let out = popart_ir::ops::broadcast_shapes(sa, sb).expect("broadcasts");
        let (xb, db) = (x.broadcast(IxDyn(&out)).expect("x"), d.broadcast(IxDyn(&out)).expect("d"));
        prop_assume!(xb.iter().zip(db.iter()).all(|(p, q)| {
            let f = (p / q).fract().abs();
            f > 0.02 && f < 0.98
        }));
        let divisor = HostArray::from(d.clone());
        let f = move |t: &[Tensor]| {
            let d = popxl::constant_as(divisor.clone(), DataType::Float64, "divisor")?;
            ops::fmod(&t[0], &d)
        };
        gradcheck(&[Arg::Diff(x)], &f, F64, seed)?;
    }

    #[test]
    fn n_ary_maximum_minimum((a, b, _) in broadcast_pair(), seed in any::<u64>(), n in 1usize..5) {
        // Inputs alternate between the full shape `a` and the broadcast shape `b`.
        let mut rng = Rng(seed);
        let xs: Vec<ArrayD<f64>> = (0..n).map(|k| rng.array(if k % 2 == 0 { &a } else { &b }, uniform)).collect();
        let full: Vec<Vec<f64>> =
            xs.iter().map(|x| x.broadcast(IxDyn(&a)).expect("broadcasts").iter().copied().collect()).collect();
        // No near-ties at any position.
        prop_assume!((0..full[0].len()).all(|j| {
            (0..n).all(|p| (p + 1..n).all(|q| (full[p][j] - full[q][j]).abs() > 0.05))
        }));
        let args: Vec<Arg> = xs.into_iter().map(Arg::Diff).collect();
        let max = |t: &[Tensor]| ops::maximum(&t.iter().collect::<Vec<_>>());
        let min = |t: &[Tensor]| ops::minimum(&t.iter().collect::<Vec<_>>());
        gradcheck(&args, &max, F64, seed).map_err(|e| TestCaseError::fail(format!("maximum of {n}: {e}")))?;
        gradcheck(&args, &min, F64, seed).map_err(|e| TestCaseError::fail(format!("minimum of {n}: {e}")))?;
    }

    #[test]
    fn print_tensor_passes_the_gradient_unchanged(s in shape(3), seed in any::<u64>()) {
        // Quiet: nothing printed (the print ops still run and are differentiated).
        let x = Rng(seed).array(&s, uniform);
        let quiet = PrintTensorOptions { print_self: false, ..Default::default() };
        let f = move |t: &[Tensor]| ops::tanh(&ops::print_tensor(&t[0], &quiet)?);
        gradcheck(&[Arg::Diff(x)], &f, F64, seed)?;
    }
}
