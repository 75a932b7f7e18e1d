//! Finite-difference checks of every gradient rule, run on the `cpu` device.
//!
//! For a function `y = f(x0, x1, ..)` under test, the IR is built the PopXL way: `f`
//! is a subgraph called from the main graph (inputs from host streams), autodiff
//! makes its gradient graph, which is called with a random seed `r` as the gradient
//! of `y`. The gradients it returns must equal the central differences of
//! `L(x) = sum(f(x) * r)`, computed by re-running the same session with perturbed
//! inputs. Shapes and values are random (proptest), including broadcasting cases;
//! values stay away from kinks (|x| near 0 for abs/relu, ties for max/min).
//! Everything is float64 unless the op's check says otherwise.
//!
//! The harness is in `autodiff_gradcheck/harness.rs`; the checks of the op
//! families added with the full catalogue live in one file each next to it.

mod harness;

// One file of checks per op family.
mod conv;
mod elementwise_ext;
mod grad_inputs;
mod indexing;
mod norm;
mod pool;
mod reduce_ext;
mod repeat;
mod resize;
mod var_random;
mod views;

use harness::Rng;
use harness::*;
use ndarray::{ArrayD, IxDyn};
use popxl::ops::{self, Branch, NllLossOptions, Reduction};
use popxl::{HostArray, Ir, Tensor};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

proptest! {
    #![proptest_config(cfg(16))]

    #[test]
    fn unary_ops(s in shape(3), seed in any::<u64>()) {
        type Gen = fn(&mut Rng) -> f64;
        let cases: [(&str, UnaryOp, Gen); 13] = [
            ("negate", ops::negate, uniform),
            ("abs", ops::abs, away_from_zero),
            ("exp", ops::exp, uniform),
            ("log", ops::log, positive),
            ("log1p", ops::log1p, positive),
            ("sqrt", ops::sqrt, positive),
            ("relu", ops::relu, away_from_zero),
            ("gelu", ops::gelu, uniform),
            ("tanh", ops::tanh, uniform),
            ("sigmoid", ops::sigmoid, uniform),
            ("sin", ops::sin, uniform),
            ("cos", ops::cos, uniform),
            ("identity", |t| ops::identity(t, "id"), uniform),
        ];
        let mut rng = Rng(seed);
        for (name, op, gen) in cases {
            let x = rng.array(&s, gen);
            gradcheck(&[Arg::Diff(x)], &*unary(op), F64, seed)
                .map_err(|e| TestCaseError::fail(format!("{name} {s:?}: {e}")))?;
        }
    }

    #[test]
    fn cast_round_trip(s in shape(3), seed in any::<u64>()) {
        // float64 -> float32: the gradient is cast back; differences of f32 values need a larger step.
        let x = Rng(seed).array(&s, uniform);
        let tol = Tol { eps: 1e-2, rtol: 1e-4, atol: 1e-5, ..F64 };
        gradcheck(&[Arg::Diff(x)], &|t| ops::cast(&t[0], popxl::float32), tol, seed)?;
    }

    #[test]
    fn binary_ops_with_broadcasting((a, b, swap) in broadcast_pair(), seed in any::<u64>()) {
        type Gen = fn(&mut Rng) -> f64;
        let cases: [(&str, BinaryOp, Gen, Gen); 5] = [
            ("add", ops::add, uniform, uniform),
            ("sub", ops::sub, uniform, uniform),
            ("mul", ops::mul, uniform, uniform),
            ("div", ops::div, uniform, away_from_zero),
            ("pow", ops::pow, positive, uniform),
        ];
        let (sa, sb) = if swap { (&b, &a) } else { (&a, &b) };
        let mut rng = Rng(seed);
        for (name, op, ga, gb) in cases {
            let (x, y) = (rng.array(sa, ga), rng.array(sb, gb));
            gradcheck(&[Arg::Diff(x), Arg::Diff(y)], &*binary(op), F64, seed)
                .map_err(|e| TestCaseError::fail(format!("{name} {sa:?} {sb:?}: {e}")))?;
        }
    }

    #[test]
    fn maximum_minimum((a, b, swap) in broadcast_pair(), seed in any::<u64>()) {
        let (sa, sb) = if swap { (&b, &a) } else { (&a, &b) };
        let mut rng = Rng(seed);
        let (x, y) = (rng.array(sa, uniform), rng.array(sb, uniform));
        // No near-ties at any broadcast position (`a` is the full shape).
        let (xb, yb) = (x.broadcast(IxDyn(&a)).expect("broadcasts"), y.broadcast(IxDyn(&a)).expect("broadcasts"));
        prop_assume!(xb.iter().zip(yb.iter()).all(|(p, q)| (p - q).abs() > 0.05));
        let max2: BinaryOp = |a, b| ops::maximum(&[a, b]);
        let min2: BinaryOp = |a, b| ops::minimum(&[a, b]);
        for (name, op) in [("maximum", max2), ("minimum", min2)] {
            gradcheck(&[Arg::Diff(x.clone()), Arg::Diff(y.clone())], &*binary(op), F64, seed)
                .map_err(|e| TestCaseError::fail(format!("{name} {sa:?} {sb:?}: {e}")))?;
        }
    }

    #[test]
    fn select((a, b, _) in broadcast_pair(), seed in any::<u64>(), cond_full in any::<bool>()) {
        let mut rng = Rng(seed);
        let cs = if cond_full { a.clone() } else { b.clone() };
        let cond = rng.array(&cs, uniform).mapv(|v| v > 0.0);
        let (x, y) = (rng.array(&b, uniform), rng.array(&a, uniform));
        let args = [Arg::Fixed(HostArray::from(cond)), Arg::Diff(x), Arg::Diff(y)];
        gradcheck(&args, &|t| ops::select(&t[0], &t[1], &t[2]), F64, seed)?;
    }

    #[test]
    fn matmul(m in 1usize..4, k in 1usize..4, n in 1usize..4, batch in 1usize..3, form in 0usize..5, seed in any::<u64>()) {
        let (sa, sb): (Vec<usize>, Vec<usize>) = match form {
            0 => (vec![m, k], vec![k, n]),
            1 => (vec![batch, m, k], vec![k, n]),
            2 => (vec![k], vec![batch, k, n]),
            3 => (vec![batch, 1, m, k], vec![2, k]),
            _ => (vec![batch, 1, m, k], vec![2, k, n]),
        };
        let sb = if form == 3 { vec![k] } else { sb };
        let mut rng = Rng(seed);
        let (x, y) = (rng.array(&sa, uniform), rng.array(&sb, uniform));
        gradcheck(&[Arg::Diff(x), Arg::Diff(y)], &*binary(ops::matmul), F64, seed)
            .map_err(|e| TestCaseError::fail(format!("{sa:?} @ {sb:?}: {e}")))?;
    }

    #[test]
    fn reductions(s in prop::collection::vec(1usize..4, 1..=3), axes_bits in any::<u8>(), keepdims in any::<bool>(), seed in any::<u64>()) {
        let axes: Vec<i64> = (0..s.len()).filter(|k| axes_bits >> k & 1 == 1).map(|k| k as i64 - if axes_bits & 0x80 != 0 { s.len() as i64 } else { 0 }).collect();
        type Red = fn(&Tensor, &[i64], bool) -> popxl::Result<Tensor>;
        let cases: [(&str, Red); 4] = [("sum", ops::sum), ("mean", ops::mean), ("max", ops::max), ("min", ops::min)];
        let x = Rng(seed).array(&s, uniform);
        for (name, op) in cases {
            let a = axes.clone();
            gradcheck(&[Arg::Diff(x.clone())], &move |t| op(&t[0], &a, keepdims), F64, seed)
                .map_err(|e| TestCaseError::fail(format!("{name} {s:?} axes {axes:?} keepdims {keepdims}: {e}")))?;
        }
    }

    #[test]
    fn softmax(s in prop::collection::vec(1usize..4, 1..=3), axis in 0usize..3, seed in any::<u64>()) {
        let axis = (axis % s.len()) as i64 - s.len() as i64 * (axis as i64 & 1);
        let x = Rng(seed).array(&s, uniform);
        gradcheck(&[Arg::Diff(x)], &move |t| ops::softmax(&t[0], axis), F64, seed)?;
    }

    #[test]
    fn reshape_transpose_squeeze(s in prop::collection::vec(1usize..4, 1..=3), rot in 0usize..3, seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let x = rng.array(&s, uniform);
        let rank = s.len();
        let perm: Vec<i64> = (0..rank).map(|k| ((k + rot) % rank) as i64).collect();
        gradcheck(&[Arg::Diff(x.clone())], &move |t| ops::transpose(&t[0], &perm), F64, seed)?;
        gradcheck(&[Arg::Diff(x.clone())], &|t| ops::reshape(&t[0], &[-1]), F64, seed)?;
        let rev: Vec<i64> = s.iter().rev().map(|&d| d as i64).collect();
        gradcheck(&[Arg::Diff(x)], &move |t| ops::reshape(&t[0], &rev), F64, seed)?;
        // Squeeze inserted size-1 axes.
        let mut with_ones = s.clone();
        with_ones.insert(rot % (rank + 1), 1);
        with_ones.push(1);
        let axes = [(rot % (rank + 1)) as i64, -1];
        let x = rng.array(&with_ones, uniform);
        gradcheck(&[Arg::Diff(x)], &move |t| ops::squeeze(&t[0], &axes), F64, seed)?;
    }

    #[test]
    fn slice(s in prop::collection::vec(2usize..5, 1..=3), start in -4i64..4, len in 1i64..4, step in prop::sample::select(vec![1i64, 2, -1, -2]), seed in any::<u64>()) {
        let axis = (seed % s.len() as u64) as i64;
        let end = if step > 0 { start + len * step } else { start - len * (-step) };
        let x = Rng(seed).array(&s, uniform);
        let f = move |t: &[Tensor]| ops::slice(&t[0], &[start], &[end], &[step], &[axis]);
        // An empty slice has no gradient path; shape inference decides.
        let ir = Ir::new();
        let empty = ir.main_graph().with(|| {
            let c = popxl::constant(HostArray::from(x.clone()), "c").unwrap();
            ops::slice(&c, &[start], &[end], &[step], &[axis]).map(|y| y.nelms() == 0)
        }).unwrap();
        prop_assume!(!empty);
        gradcheck(&[Arg::Diff(x)], &f, F64, seed)?;
    }

    #[test]
    fn concat(rows in prop::collection::vec(1usize..4, 1..=3), cols in 1usize..4, axis in 0i64..2, seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let args: Vec<Arg> = rows.iter().map(|&r| {
            let shape = if axis == 0 { [r, cols] } else { [cols, r] };
            Arg::Diff(rng.array(&shape, uniform))
        }).collect();
        gradcheck(&args, &move |t| ops::concat(&t.iter().collect::<Vec<_>>(), axis), F64, seed)?;
    }

    #[test]
    fn gather(n in 1usize..5, other in 1usize..4, idx_shape in shape(2), axis in 0i64..2, seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let data_shape = if axis == 0 { vec![n, other] } else { vec![other, n] };
        let x = rng.array(&data_shape, uniform);
        // Indices may repeat: their gradients add up.
        let idx = rng.array(&idx_shape, |r| r.below(n) as f64).mapv(|v| v as i32);
        let args = [Arg::Diff(x), Arg::Fixed(HostArray::from(idx))];
        gradcheck(&args, &move |t| ops::gather(&t[0], &t[1], axis), F64, seed)?;
    }

    #[test]
    fn nll_loss(batch in 1usize..4, classes in 2usize..5, reduction in 0usize..3, ignore in any::<bool>(), log_prob in any::<bool>(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        // Probabilities, or log-probabilities with `log_prob` (PopXL `log_prob=True`).
        let probs = rng.array(&[batch, classes], |r| r.uniform(0.1, 1.0));
        let probs = if log_prob { probs.mapv(f64::ln) } else { probs };
        let labels = rng.array(&[batch], |r| r.below(classes) as f64).mapv(|v| v as i32);
        let ignore_index = (ignore && batch > 1).then(|| i64::from(labels[[0]]));
        let reduction = [Reduction::Mean, Reduction::Sum, Reduction::None][reduction];
        let options = NllLossOptions { reduction, ignore_index, log_prob };
        let args = [Arg::Diff(probs), Arg::Fixed(HostArray::from(labels))];
        gradcheck(&args, &move |t| ops::nll_loss_with(&t[0], &t[1], options), F64, seed)?;
    }

    #[test]
    fn dropout(s in prop::collection::vec(1usize..5, 1..=3), p in prop::sample::select(vec![0.0, 0.25, 0.5]), seed in any::<u64>()) {
        // The gradient is dropout of the output gradient with the same seed and p, so the
        // (linear) function and its gradient drop the same elements.
        let x = Rng(seed).array(&s, uniform);
        let rng_seed = HostArray::from(vec![(seed >> 32) as u32, seed as u32]);
        let args = [Arg::Diff(x), Arg::Fixed(rng_seed)];
        gradcheck(&args, &move |t| ops::dropout(&t[0], &t[1], p), F64, seed)?;
    }
}

/// Sign, floor and ceil have zero gradients, computed without a gradient of their output.
#[test]
fn zero_gradient_ops_give_zeros() {
    for op in [ops::sign as UnaryOp, ops::floor, ops::ceil] {
        let x = ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![0.3, -1.7, 2.2, -0.6]).unwrap();
        // sin(op(x)) * x: only the second factor carries a gradient, sin(op(x)) itself.
        let f = move |t: &[Tensor]| -> popxl::Result<Tensor> { ops::mul(&ops::sin(&op(&t[0])?)?, &t[0]) };
        gradcheck(&[Arg::Diff(x)], &f, F64, 7).unwrap();
    }
}

/// Gradients through calls two levels deep, a subgraph called twice, and both
/// branches of a conditional.
#[test]
fn subgraphs_nested_calls_and_conditionals() {
    let mut rng = Rng(11);
    let x = rng.array(&[2, 3], uniform);
    let w = rng.array(&[3, 2], uniform);
    // outer(x, w) = middle(x, w) * x[:, :2]; middle(x, w) = tanh(inner(x, w)); inner = x @ w.
    let nested = |t: &[Tensor]| -> popxl::Result<Tensor> {
        let ir = t[0].graph().ir()?;
        let inner = ir.create_graph(|a: Tensor, b: Tensor| a.matmul(&b), (&t[0], &t[1]))?;
        let middle = ir.create_graph(
            |a: Tensor, b: Tensor| -> popxl::Result<Tensor> { ops::tanh(&ops::call(&inner, &[&a, &b], &[])?[0]) },
            (&t[0], &t[1]),
        )?;
        let m = ops::call(&middle, &[&t[0], &t[1]], &[])?;
        ops::mul(&m[0], &ops::slice(&t[0], &[0], &[2], &[1], &[1])?)
    };
    gradcheck(&[Arg::Diff(x.clone()), Arg::Diff(w.clone())], &nested, F64, 11).unwrap();

    // One subgraph called twice: y = layer(layer(v, w2), w2) with layer(a, b) = sigmoid(a @ b).
    let v = rng.array(&[2, 3], uniform);
    let w2 = rng.array(&[3, 3], uniform);
    let twice = |t: &[Tensor]| -> popxl::Result<Tensor> {
        let ir = t[0].graph().ir()?;
        let layer = ir.create_graph(|a: Tensor, b: Tensor| ops::sigmoid(&a.matmul(&b)?), (&t[0], &t[1]))?;
        let h = ops::call(&layer, &[&t[0], &t[1]], &[])?;
        Ok(ops::call(&layer, &[&h[0], &t[1]], &[])?[0].clone())
    };
    gradcheck(&[Arg::Diff(v), Arg::Diff(w2)], &twice, F64, 12).unwrap();

    for flag in [true, false] {
        // if c { sin(x) * w } else { x * x } (w unused by the else branch).
        let cond = |t: &[Tensor]| -> popxl::Result<Tensor> {
            let ir = t[0].graph().ir()?;
            let then_g = ir.create_graph(
                |a: Tensor, b: Tensor| -> popxl::Result<Tensor> { ops::mul(&ops::sin(&a)?, &b) },
                (&t[1], &t[2]),
            )?;
            let else_g = ir.create_graph(|a: Tensor| ops::mul(&a, &a), &t[1])?;
            let then_inputs = [&t[1], &t[2]];
            let else_inputs = [&t[1]];
            let out = ops::conditional_branches(
                &t[0],
                Branch::new(&then_g, &then_inputs),
                Branch::new(&else_g, &else_inputs),
            )?;
            Ok(out[0].clone())
        };
        let c = Arg::Fixed(HostArray::from(flag));
        let x = rng.array(&[3], uniform);
        let w = rng.array(&[3], uniform);
        gradcheck(&[c, Arg::Diff(x), Arg::Diff(w)], &cond, F64, 13).unwrap_or_else(|e| panic!("branch {flag}: {e}"));
    }
}
