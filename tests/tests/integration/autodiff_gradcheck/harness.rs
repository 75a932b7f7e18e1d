//! The finite-difference harness shared by every gradient check: build `f` as a
//! subgraph, differentiate it with `autodiff`, and compare the gradients it
//! returns with central differences of `L(x) = sum(f(x) * r)` (see the doc of
//! `autodiff_gradcheck.rs`). Each op family has its own file of checks next to
//! this one.

#![allow(dead_code)]

use std::collections::HashMap;

use ndarray::{ArrayD, IxDyn};
use popxl::ops;
use popxl::{transforms, DataType, HostArray, Ir, Tensor};
use popxl_session::{Inputs, Session};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// A small deterministic generator (SplitMix64), seeded by proptest.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn array(&mut self, shape: &[usize], mut value: impl FnMut(&mut Rng) -> f64) -> ArrayD<f64> {
        ArrayD::from_shape_simple_fn(IxDyn(shape), || value(self))
    }
}

/// Values in [-2, 2).
pub fn uniform(r: &mut Rng) -> f64 {
    r.uniform(-2.0, 2.0)
}

/// Values in [0.2, 2) of either sign: away from the kinks of abs and relu.
pub fn away_from_zero(r: &mut Rng) -> f64 {
    let v = r.uniform(0.2, 2.0);
    if r.next_u64() & 1 == 0 {
        v
    } else {
        -v
    }
}

/// Values in [0.2, 2).
pub fn positive(r: &mut Rng) -> f64 {
    r.uniform(0.2, 2.0)
}

/// An argument of the function under test.
#[derive(Clone, Debug)]
pub enum Arg {
    /// A floating point input whose gradient is checked.
    Diff(ArrayD<f64>),
    /// A fixed input without a gradient (indices, labels, conditions, seeds).
    Fixed(HostArray),
}

/// Precision of a check.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub dtype: DataType,
    pub eps: f64,
    pub rtol: f64,
    pub atol: f64,
}

pub const F64: Tol = Tol { dtype: DataType::Float64, eps: 1e-6, rtol: 1e-5, atol: 1e-7 };

pub type Func = dyn Fn(&[Tensor]) -> popxl::Result<Tensor>;
pub type UnaryOp = fn(&Tensor) -> popxl::Result<Tensor>;
pub type BinaryOp = fn(&Tensor, &Tensor) -> popxl::Result<Tensor>;

/// Check the gradients of `f` at `args` against central differences.
pub fn gradcheck(args: &[Arg], f: &Func, tol: Tol, seed: u64) -> Result<(), TestCaseError> {
    let fail = |e: popxl::PopXlError| TestCaseError::fail(format!("building: {e}"));
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let mut main_ts = Vec::new();
    let mut streams = Vec::new();
    for (i, a) in args.iter().enumerate() {
        match a {
            Arg::Diff(v) => {
                let s = popxl::h2d_stream(v.shape(), tol.dtype, &format!("in{i}")).map_err(fail)?;
                main_ts.push(ops::host_load(&s, &format!("x{i}")).map_err(fail)?);
                streams.push((i, s));
            }
            Arg::Fixed(h) => main_ts.push(popxl::constant(h.clone(), &format!("c{i}")).map_err(fail)?),
        }
    }
    let graph = ir.create_graph(|ts: Vec<Tensor>| f(&ts), main_ts.clone()).map_err(fail)?;
    let refs: Vec<&Tensor> = main_ts.iter().collect();
    let fwd = ops::call_with_info(&graph, &refs, &[]).map_err(fail)?;
    let y = fwd.parent_output(0).map_err(fail)?;
    let y_stream = popxl::d2h_stream(y.shape(), y.dtype(), "y").map_err(fail)?;
    ops::host_store(&y_stream, &y).map_err(fail)?;

    let provided = [graph.outputs().map_err(fail)?[0].clone()];
    let info = transforms::autodiff(&graph, Some(&provided), None, &HashMap::new(), false).map_err(fail)?.grad_info;
    let seed_stream = popxl::h2d_stream(y.shape(), y.dtype(), "seed").map_err(fail)?;
    let seed_t = ops::host_load(&seed_stream, "seed").map_err(fail)?;
    let acts = info.inputs_dict(&fwd).map_err(fail)?;
    let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
    let grads = ops::call(&info.graph(), &[&seed_t], &acts).map_err(fail)?;
    let graph_inputs = graph.inputs().map_err(fail)?;
    let mut grad_streams = HashMap::new();
    for (k, e) in info.expected_outputs().map_err(fail)?.iter().enumerate() {
        let i = graph_inputs.iter().position(|t| t == e.fwd_tensor()).expect("gradients are of graph inputs");
        let s = popxl::d2h_stream(grads[k].shape(), grads[k].dtype(), &format!("grad{i}")).map_err(fail)?;
        ops::host_store(&s, &grads[k]).map_err(fail)?;
        grad_streams.insert(i, s);
    }
    drop(g);

    let mut rng = Rng(seed ^ 0x5EED);
    let r = rng.array(y.shape(), uniform);
    let mut session = Session::new(ir, "cpu").map_err(|e| TestCaseError::fail(format!("session: {e}")))?;
    let mut run = |values: &[ArrayD<f64>]| -> HashMap<popxl::DeviceToHostStream, HostArray> {
        let mut inputs: Inputs = streams
            .iter()
            .zip(values)
            .map(|((_, s), v)| (s.clone(), HostArray::from(v.clone()).cast(tol.dtype)))
            .collect();
        inputs.insert(seed_stream.clone(), HostArray::from(r.clone()).cast(y.dtype()));
        session.scope(|s| s.run(&inputs)).expect("run")
    };
    let loss = |out: &HashMap<popxl::DeviceToHostStream, HostArray>| -> f64 {
        out[&y_stream].to_f64_vec().iter().zip(r.iter()).map(|(a, b)| a * b).sum()
    };
    let base: Vec<ArrayD<f64>> = streams
        .iter()
        .map(|(i, _)| match &args[*i] {
            Arg::Diff(v) => v.clone(),
            Arg::Fixed(_) => unreachable!(),
        })
        .collect();
    let out = run(&base);
    for (k, (i, _)) in streams.iter().enumerate() {
        let Some(gs) = grad_streams.get(i) else {
            return Err(TestCaseError::fail(format!("no gradient for input {i}")));
        };
        let analytic = out[gs].to_f64_vec();
        prop_assert_eq!(analytic.len(), base[k].len());
        for (j, &a) in analytic.iter().enumerate() {
            let mut plus = base.clone();
            plus[k].as_slice_mut().unwrap()[j] += tol.eps;
            let mut minus = base.clone();
            minus[k].as_slice_mut().unwrap()[j] -= tol.eps;
            let fd = (loss(&run(&plus)) - loss(&run(&minus))) / (2.0 * tol.eps);
            prop_assert!(
                (fd - a).abs() <= tol.atol + tol.rtol * fd.abs().max(a.abs()),
                "input {i} element {j}: autodiff {a}, finite difference {fd}"
            );
        }
    }
    Ok(())
}

pub fn shape(max_rank: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..4, 0..=max_rank)
}

/// A shape and another that broadcasts against it: leading dims dropped, some dims 1.
pub fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, bool)> {
    (shape(3), any::<u64>(), any::<bool>()).prop_map(|(s, bits, swap)| {
        let drop = (bits % (s.len() as u64 + 1)) as usize;
        let b = s[drop..].iter().enumerate().map(|(k, &d)| if bits >> (8 + k) & 1 == 1 { 1 } else { d }).collect();
        (s, b, swap)
    })
}

pub fn cfg(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

pub fn unary(op: UnaryOp) -> Box<Func> {
    Box::new(move |t: &[Tensor]| op(&t[0]))
}

pub fn binary(op: BinaryOp) -> Box<Func> {
    Box::new(move |t: &[Tensor]| op(&t[0], &t[1]))
}
