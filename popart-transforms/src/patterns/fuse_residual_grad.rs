//! `fuse_residual_grad`: the gradient a residual connection adds to a norm's.
//!
//! A pre-norm residual block `y = x + f(norm(x))` sends two gradients to `x`,
//! which autodiff sums:
//!
//! ```text
//! (dx, dw, db) = GroupNormGrad(g, x, w, mean, inv_std)   dx read by the Sum alone
//! s = Sum(r, dx)                                          two inputs, either order
//! ```
//!
//! becomes `(s, dw, db) = GroupNormGrad(g, x, w, mean, inv_std, r)`: the kernel
//! adds `r` to each row of `dx` as it writes it, and the pass over `dx` and `r`
//! that the `Sum` made is gone. `s` keeps its id and consumers. The values are
//! those of the `Sum` (one addition of the same two numbers).
//!
//! A layer norm over the last axis of `[B, T, C]` runs on `[B·T, C]`, so its
//! `dx` reaches the `Sum` through a `ReshapeGrad` (or `Reshape`) read by the
//! `Sum` alone: then `r` goes to the norm through a `Reshape` to `dx`'s shape
//! (which shares `r`'s buffer), and the reshape of `dx + r` produces `s`.

use popart_ir::ops::all::{GroupNormGrad, Reshape, ReshapeGrad, Sum};
use popart_ir::ops::shape::ReshapeAttrs;
use popart_ir::{Graph, Ir, OpAttrs, OpId, TensorId, TensorKind};

use super::{rewrite_matches, single_use};
use crate::pipeline::{Pass, PassOutcome};
use crate::Result;

/// The `fuse-residual-grad` pattern (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuseResidualGrad;

impl FuseResidualGrad {
    /// The pass's name in a pipeline.
    pub const NAME: &'static str = "fuse-residual-grad";
}

impl Pass for FuseResidualGrad {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        let n = rewrite_matches(ir, find, rewrite)?;
        Ok(PassOutcome::changed(n > 0).with_note(format!("{n} residual gradients fused")))
    }
}

struct Match {
    sum: OpId,
    norm: OpId,
    /// The reshape between the norm gradient and the `Sum`, if any.
    view: Option<OpId>,
    /// The other addend.
    r: TensorId,
}

/// The `GroupNormGrad` whose `dx` (output 0, read by nothing else) is `t`, or
/// reaches `t` through one reshape read by nothing else: `(norm, view)`.
fn norm_of(g: &Graph, t: TensorId) -> Option<(OpId, Option<OpId>)> {
    let direct = |t: TensorId| {
        let p = g.tensor(t).ok()?.producer()?;
        let op = g.op(p.op).ok()?;
        (op.is::<GroupNormGrad>() && p.index == 0 && op.input(5).is_none() && single_use(g, t)).then_some(op.id)
    };
    if let Some(norm) = direct(t) {
        return Some((norm, None));
    }
    let view = g.op(g.tensor(t).ok()?.producer()?.op).ok()?;
    if !(view.is::<Reshape>() || view.is::<ReshapeGrad>()) || view.inputs().len() != 1 || !single_use(g, t) {
        return None;
    }
    Some((direct(view.input(0)?)?, Some(view.id)))
}

fn find(g: &Graph, sum: OpId) -> Option<Match> {
    let op = g.op(sum).ok()?;
    if !op.is::<Sum>() || op.inputs().len() != 2 {
        return None;
    }
    let s = g.tensor(op.output(0)?).ok()?;
    let (x0, x1) = (op.input(0)?, op.input(1)?);
    [(x0, x1), (x1, x0)].into_iter().find_map(|(dx, r)| {
        let (norm, view) = norm_of(g, dx)?;
        let fits = dx != r && g.tensor(dx).ok()?.info == s.info && g.tensor(r).ok()?.info == s.info;
        fits.then_some(Match { sum, norm, view, r })
    })
}

fn rewrite(g: &mut Graph, m: Match) -> Result<()> {
    // The op whose output 0 becomes `s`: the reshape, else the norm gradient.
    let last = m.view.unwrap_or(m.norm);
    let r = match m.view {
        None => m.r,
        Some(_) => {
            // `r` in the norm's shape, by a reshape of its own.
            let dx = g.op(m.norm)?.output(0).ok_or_else(|| crate::Malformed::NoOutput {
                op: g.op(m.norm).map(|o| o.name.clone()).unwrap_or_default(),
            })?;
            let info = g.tensor(dx)?.info.clone();
            let shape = info.shape.iter().map(|&d| d as i64).collect();
            let base = format!("{}_reshaped", g.tensor(m.r)?.name);
            let (op_name, tensor_name) = (g.unique_op_name(&base), g.unique_tensor_name(&base));
            let placement = g.op(m.norm)?.placement;
            let reshape = g.add_op(&Reshape, ReshapeAttrs { shape }.to_attrs(), &op_name);
            g.set_op_placement(reshape, placement)?;
            let r2 = g.add_tensor(&tensor_name, info, TensorKind::ActGrad)?;
            g.connect_input(reshape, 0, m.r)?;
            g.connect_output(reshape, 0, r2)?;
            r2
        }
    };
    let s = g.disconnect_output(m.sum, 0)?;
    let t = g.disconnect_output(last, 0)?;
    g.transfer_topo_cons(m.sum, last)?;
    g.erase_op(m.sum)?;
    g.remove_tensor(t)?;
    g.connect_output(last, 0, s)?;
    g.connect_input(m.norm, 5, r)?;
    Ok(())
}
