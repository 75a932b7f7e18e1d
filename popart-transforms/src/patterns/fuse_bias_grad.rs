//! `fuse_bias_grad`: a layer's bias gradient summed in its weight gradient's
//! pass over the incoming gradient.
//!
//! Autodiff of `y = x @ W + b` (`W` a `[k, n]` matrix, `b` a `[n]` row
//! vector) reads the incoming gradient `g` twice:
//!
//! ```text
//! dW = MatMulRhsGrad(g, x, W)
//! db = ReduceToShape{shape=[n]}(g)
//! ```
//!
//! becomes `(dW, db) = MatMulRhsBiasGrad(g, x, W)`: the kernel sums `g`'s
//! columns as it packs them for the product, and the separate pass over `g`
//! is gone. `dW` and `db` keep their ids and consumers; the values are those
//! of the two ops (a sum over the same elements, in an order of the kernel's
//! own).
//!
//! The two ops must read the same tensor, be float32, and neither may reach
//! the other through data or topological constraints (the fused op would then
//! close a cycle). When several weight gradients read one `g`, one of them
//! (the same in every run) takes the reduction.

use std::collections::HashSet;

use popart_ir::ops::all::{MatMulRhsBiasGrad, MatMulRhsGrad, ReduceToShape};
use popart_ir::ops::grad::ShapeAttrs;
use popart_ir::{Attributes, DataType, Graph, Ir, OpAttrs, OpId};

use super::{fuse_ops_keeping, reachable_from, rewrite_matches};
use crate::pipeline::{Pass, PassOutcome};
use crate::Result;

/// The `fuse-bias-grad` pattern (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuseBiasGrad;

impl FuseBiasGrad {
    /// The pass's name in a pipeline.
    pub const NAME: &'static str = "fuse-bias-grad";
}

impl Pass for FuseBiasGrad {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        let n = rewrite_matches(ir, find, rewrite)?;
        Ok(PassOutcome::changed(n > 0).with_note(format!("{n} bias gradients fused")))
    }
}

struct Match {
    matmul: OpId,
    reduce: OpId,
}

/// The match of the weight gradient `matmul`, if it is the first
/// `MatMulRhsGrad` reading its `g` and a fitting reduction reads `g` too.
fn find(g: &Graph, matmul: OpId) -> Option<Match> {
    let op = g.op(matmul).ok()?;
    if !op.is::<MatMulRhsGrad>() || op.inputs().len() != 3 || op.outputs().len() != 1 {
        return None;
    }
    let grad = g.tensor(op.input(0)?).ok()?;
    let w = g.tensor(op.input(2)?).ok()?;
    if grad.info.dtype != DataType::Float32 || w.info.rank() != 2 || grad.info.rank() < 2 {
        return None;
    }
    let n = w.info.shape[1];
    let consumers: HashSet<OpId> = grad.consumers().iter().map(|p| p.op).collect();
    // One weight gradient of `g` (the least id) takes the reduction.
    let first = consumers
        .iter()
        .copied()
        .filter(|&c| g.op(c).is_ok_and(|o| o.is::<MatMulRhsGrad>() && o.input(0) == Some(grad.id)))
        .min()?;
    if first != matmul {
        return None;
    }
    let reduce = consumers.iter().copied().filter(|&c| fits(g, c, n)).min()?;
    let downstream = reachable_from(g, matmul).ok()?;
    if downstream.contains(&reduce) || reachable_from(g, reduce).ok()?.contains(&matmul) {
        return None;
    }
    Some(Match { matmul, reduce })
}

/// `op` is `ReduceToShape{shape=[n]}` of one input (its gradient, of a float32
/// tensor whose last dim is `n`).
fn fits(g: &Graph, op: OpId, n: usize) -> bool {
    let Ok(o) = g.op(op) else { return false };
    o.is::<ReduceToShape>()
        && o.inputs().len() == 1
        && o.outputs().len() == 1
        && ShapeAttrs::of(o).is_ok_and(|a| a.shape == [n as i64])
}

fn rewrite(g: &mut Graph, m: Match) -> Result<()> {
    let mm = g.op(m.matmul)?;
    let inputs: Vec<_> = (0..3).filter_map(|i| mm.input(i)).collect();
    let name = g.unique_op_name(&format!("{}_bias", mm.name));
    let (ops, outputs) = ([m.matmul, m.reduce], [(m.matmul, 0), (m.reduce, 0)]);
    fuse_ops_keeping(g, &ops, &MatMulRhsBiasGrad, Attributes::new(), &name, &inputs, &outputs)?;
    Ok(())
}
