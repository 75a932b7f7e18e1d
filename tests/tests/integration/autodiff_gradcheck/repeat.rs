//! Gradient checks of `repeat` (autodiff of `Repeat` is ours: PopXL has none):
//! loop-carried values only, carried and loop-invariant inputs, stacked weights
//! sliced by a carried counter (`dynamic_slice`), counts 1 and more, a body that
//! calls a subgraph, a body with a conditional on the counter, and a repeat
//! nested in a repeat body.

use super::harness::Rng;
use super::harness::*;
use popxl::ops::{self, Branch};
use popxl::Tensor;
use proptest::prelude::*;

/// `repeat(count)` of `x -> tanh(x) * 1.5 + x * 0.25`: loop-carried only. The
/// gradient of `tanh` reads its output, which is the body's output: the backward
/// loop carries it.
fn carried_only(count: usize) -> impl Fn(&[Tensor]) -> popxl::Result<Tensor> {
    move |t: &[Tensor]| {
        let ir = t[0].graph().ir()?;
        let body = ir.create_graph(
            |x: Tensor| -> popxl::Result<Tensor> { Ok(&(&ops::tanh(&x)? * 1.5) + &(&x * 0.25)) },
            &t[0],
        )?;
        Ok(ops::repeat(&body, count, &[&t[0]], &[])?[0].clone())
    }
}

/// Carried `x` and `y`, invariants `w` and `v`: `x' = sin(x * w) + y`, `y' = y * v - x`.
fn carried_and_invariant(count: usize) -> impl Fn(&[Tensor]) -> popxl::Result<Tensor> {
    move |t: &[Tensor]| {
        let ir = t[0].graph().ir()?;
        let body = ir.create_graph(
            |x: Tensor, y: Tensor, w: Tensor, v: Tensor| -> popxl::Result<Vec<Tensor>> {
                let x2 = &ops::sin(&(&x * &w))? + &y;
                let y2 = &(&y * &v) - &x;
                Ok(vec![x2, y2])
            },
            (&t[0], &t[1], &t[2], &t[3]),
        )?;
        let out = ops::repeat(&body, count, &[&t[0], &t[1], &t[2], &t[3]], &[])?;
        // Both carried outputs reach the result.
        Ok(&out[0] * &out[1])
    }
}

/// A stack of `layers` layers `x -> gelu(x @ W[l] + b[l]) + x` as one repeat over
/// stacked weights `W [L, D, D]`, `b [L, D]`, each iteration slicing its layer with
/// `dynamic_slice` at a carried int32 counter.
fn stacked_layers(layers: usize) -> impl Fn(&[Tensor]) -> popxl::Result<Tensor> {
    move |t: &[Tensor]| {
        let ir = t[0].graph().ir()?;
        let counter = popxl::constant(0i32, "counter")?;
        let body = ir.create_graph(
            |x: Tensor, i: Tensor, w: Tensor, b: Tensor| -> popxl::Result<Vec<Tensor>> {
                let wl = ops::squeeze(&ops::dynamic_slice(&w, &i, &[0], &[1], true)?, &[0])?;
                let bl = ops::squeeze(&ops::dynamic_slice(&b, &i, &[0], &[1], true)?, &[0])?;
                let h = ops::gelu(&(&x.matmul(&wl)? + &bl))?;
                Ok(vec![&h + &x, &i + 1i64])
            },
            (&t[0], &counter, &t[1], &t[2]),
        )?;
        Ok(ops::repeat(&body, layers, &[&t[0], &counter, &t[1], &t[2]], &[])?[0].clone())
    }
}

proptest! {
    #![proptest_config(cfg(4))]

    #[test]
    fn repeat_carried_only(s in shape(2), count in 1usize..4, seed in any::<u64>()) {
        let x = Rng(seed).array(&s, uniform);
        gradcheck(&[Arg::Diff(x)], &carried_only(count), F64, seed)?;
    }

    #[test]
    fn repeat_carried_and_invariant(n in 1usize..4, count in 1usize..4, seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let args: Vec<Arg> = (0..4).map(|_| Arg::Diff(rng.array(&[n], |r| r.uniform(-1.0, 1.0)))).collect();
        gradcheck(&args, &carried_and_invariant(count), F64, seed)?;
    }

    #[test]
    fn repeat_stacked_weights(batch in 1usize..3, d in 1usize..4, layers in 1usize..4, seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let x = rng.array(&[batch, d], uniform);
        let w = rng.array(&[layers, d, d], |r| r.uniform(-0.7, 0.7));
        let b = rng.array(&[layers, d], |r| r.uniform(-0.5, 0.5));
        gradcheck(&[Arg::Diff(x), Arg::Diff(w), Arg::Diff(b)], &stacked_layers(layers), F64, seed)?;
    }
}

/// Count 1 and 3 of each family, at fixed values (the property tests draw counts).
#[test]
fn repeat_counts_one_and_three() {
    for count in [1, 3] {
        let mut rng = Rng(40 + count as u64);
        let x = rng.array(&[2, 3], uniform);
        gradcheck(&[Arg::Diff(x)], &carried_only(count), F64, 1).unwrap_or_else(|e| panic!("count {count}: {e}"));
        let args: Vec<Arg> = (0..4).map(|_| Arg::Diff(rng.array(&[3], |r| r.uniform(-1.0, 1.0)))).collect();
        gradcheck(&args, &carried_and_invariant(count), F64, 2).unwrap_or_else(|e| panic!("count {count}: {e}"));
        let x = rng.array(&[2, 3], uniform);
        let w = rng.array(&[count, 3, 3], |r| r.uniform(-0.7, 0.7));
        let b = rng.array(&[count, 3], |r| r.uniform(-0.5, 0.5));
        gradcheck(&[Arg::Diff(x), Arg::Diff(w), Arg::Diff(b)], &stacked_layers(count), F64, 3)
            .unwrap_or_else(|e| panic!("count {count}: {e}"));
    }
}

/// A repeat body that calls a subgraph: `x' = layer(x, w) + x`, `layer(a, b) = sigmoid(a @ b)`.
#[test]
fn repeat_body_calls_a_subgraph() {
    let f = |t: &[Tensor]| -> popxl::Result<Tensor> {
        let ir = t[0].graph().ir()?;
        let layer = ir.create_graph(|a: Tensor, b: Tensor| ops::sigmoid(&a.matmul(&b)?), (&t[0], &t[1]))?;
        let body = ir.create_graph(
            |x: Tensor, w: Tensor| -> popxl::Result<Tensor> { Ok(&ops::call(&layer, &[&x, &w], &[])?[0] + &x) },
            (&t[0], &t[1]),
        )?;
        Ok(ops::repeat(&body, 3, &[&t[0], &t[1]], &[])?[0].clone())
    };
    let mut rng = Rng(21);
    let x = rng.array(&[2, 3], uniform);
    let w = rng.array(&[3, 3], uniform);
    gradcheck(&[Arg::Diff(x), Arg::Diff(w)], &f, F64, 21).unwrap();
}

/// A repeat body with a conditional on the carried counter: iteration 0 takes
/// `sin(x) * w`, the others `x * w + x`; `w` is invariant.
#[test]
fn repeat_body_with_a_conditional() {
    for count in [1, 3] {
        let f = move |t: &[Tensor]| -> popxl::Result<Tensor> {
            let ir = t[0].graph().ir()?;
            let counter = popxl::constant(0i32, "counter")?;
            let then_g = ir.create_graph(
                |a: Tensor, b: Tensor| -> popxl::Result<Tensor> { ops::mul(&ops::sin(&a)?, &b) },
                (&t[0], &t[1]),
            )?;
            let else_g = ir.create_graph(
                |a: Tensor, b: Tensor| -> popxl::Result<Tensor> { Ok(&(&a * &b) + &a) },
                (&t[0], &t[1]),
            )?;
            let body = ir.create_graph(
                |x: Tensor, i: Tensor, w: Tensor| -> popxl::Result<Vec<Tensor>> {
                    let zero = popxl::constant(0i32, "zero")?;
                    let first = ops::equal(&i, &zero)?;
                    let ins = [&x, &w];
                    let y = ops::conditional_branches(&first, Branch::new(&then_g, &ins), Branch::new(&else_g, &ins))?;
                    Ok(vec![y[0].clone(), &i + 1i64])
                },
                (&t[0], &counter, &t[1]),
            )?;
            Ok(ops::repeat(&body, count, &[&t[0], &counter, &t[1]], &[])?[0].clone())
        };
        let mut rng = Rng(31);
        let x = rng.array(&[3], uniform);
        let w = rng.array(&[3], |r| r.uniform(-1.0, 1.0));
        gradcheck(&[Arg::Diff(x), Arg::Diff(w)], &f, F64, 31).unwrap_or_else(|e| panic!("count {count}: {e}"));
    }
}

/// A repeat nested in a repeat body: the outer body recomputes its inner repeat
/// (with its stash) in its gradient graph.
#[test]
fn repeat_nested_in_a_repeat_body() {
    let f = |t: &[Tensor]| -> popxl::Result<Tensor> {
        let ir = t[0].graph().ir()?;
        let inner = ir.create_graph(
            |x: Tensor, w: Tensor| -> popxl::Result<Tensor> { Ok(&ops::tanh(&(&x * &w))? + &x) },
            (&t[0], &t[1]),
        )?;
        let outer = ir.create_graph(
            |x: Tensor, w: Tensor| -> popxl::Result<Tensor> {
                let y = ops::repeat(&inner, 2, &[&x, &w], &[])?;
                ops::sin(&y[0])
            },
            (&t[0], &t[1]),
        )?;
        Ok(ops::repeat(&outer, 3, &[&t[0], &t[1]], &[])?[0].clone())
    };
    let mut rng = Rng(51);
    let x = rng.array(&[3], uniform);
    let w = rng.array(&[3], |r| r.uniform(-1.0, 1.0));
    gradcheck(&[Arg::Diff(x), Arg::Diff(w)], &f, F64, 51).unwrap();
}
