//! `fuse_adam`: one Adam step of one weight as one op.
//!
//! The shape PopXL's Adam takes (`var_updates.accumulate_moving_average_`,
//! `accumulate_moving_average_square_`, `adam_updater`, `scaled_add_`):
//!
//! ```text
//! m' = Accumulate{moving_average, factor=f1}(m, g)
//! v' = Accumulate{moving_average_square, factor=f2}(v, g)
//! u  = AdamUpdater{mode, weight_decay, beta1, beta2, epsilon}(w?, m', v', step?)
//! w' = ScaledAddInplace{a, b}(w, u)
//! ```
//!
//! becomes `w' = AdamStep{f1, f2, mode, .., a, b}(w, g, m, v, step?)`: one pass
//! over the four tensors instead of four passes over eleven, and one kernel
//! instead of four. Every value is computed by the same operations in the same
//! order as before, so the weights, moments and step are bit for bit those of
//! the four ops.
//!
//! It applies only where nothing can observe the difference:
//! - the hyper-parameters are attributes (no scalar tensor inputs), and
//!   `w`, `g`, `m`, `v` are distinct float32 or float64 tensors of one info,
//!   the updater's output of that info too;
//! - `m`, `v` and the step are read by their own op only, and are no op's
//!   in-place or view output (so no other tensor shares their memory);
//!   `m'`, `v'` and `u` are read by the next op of the chain only; none of
//!   them is a graph output; the updater's weight, when it has one, is `w`.
//!
//! The fused op takes the place of the `ScaledAddInplace` (its output keeps its
//! id and consumers) and every topological constraint of the four ops.

use popart_ir::ops::all::{Accumulate, AdamUpdater, ScaledAddInplace};
use popart_ir::ops::optimizer::{AdamStep, AdamStepAttrs, AdamUpdaterAttrs};
use popart_ir::ops::var_update::{AccumulateAttrs, AccumulationType, ScaleAttrs};
use popart_ir::{DataType, Graph, Ir, OpAttrs, OpId, TensorId};

use super::{fuse_ops, rewrite_matches, single_use};
use crate::pipeline::{Pass, PassOutcome};
use crate::Result;

/// The `fuse-adam` pattern (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuseAdam;

impl FuseAdam {
    /// The pass's name in a pipeline.
    pub const NAME: &'static str = "fuse-adam";
}

impl Pass for FuseAdam {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        let n = rewrite_matches(ir, find, rewrite)?;
        Ok(PassOutcome::changed(n > 0).with_note(format!("{n} Adam steps fused")))
    }
}

struct Match {
    /// The `ScaledAddInplace`, `AdamUpdater` and both `Accumulate`s.
    ops: [OpId; 4],
    /// `w, g, m, v` and the step, if any.
    inputs: Vec<TensorId>,
    attrs: AdamStepAttrs,
}

/// `t` is read by `op` alone (at one input) and is no graph output.
fn sole_use(g: &Graph, t: TensorId, op: OpId) -> bool {
    single_use(g, t) && g.tensor(t).is_ok_and(|t| t.consumers()[0].op == op)
}

/// `t` is no op's in-place or view output: nothing else names its memory.
fn own_memory(g: &Graph, t: TensorId) -> bool {
    let Ok(tensor) = g.tensor(t) else { return false };
    match tensor.producer() {
        None => true,
        Some(p) => g.op(p.op).is_ok_and(|op| op.alias_pairs().iter().all(|&(_, o)| o != p.index)),
    }
}

/// The `Accumulate` of `ty` producing `t` from `(state, grad)` with a constant
/// factor: `(op, state, grad, factor)`.
fn moving_average(g: &Graph, t: TensorId, ty: AccumulationType) -> Option<(OpId, TensorId, TensorId, f64)> {
    let op = g.op(g.tensor(t).ok()?.producer()?.op).ok()?;
    if !op.is::<Accumulate>() || op.inputs().len() != 2 {
        return None;
    }
    let a = AccumulateAttrs::of(op).ok()?;
    if a.kind() != ty {
        return None;
    }
    Some((op.id, op.input(0)?, op.input(1)?, a.factor?))
}

fn find(g: &Graph, update: OpId) -> Option<Match> {
    let su = g.op(update).ok()?;
    if !su.is::<ScaledAddInplace>() || su.inputs().len() != 2 {
        return None;
    }
    let (w, u) = (su.input(0)?, su.input(1)?);
    let (a, b) = ScaleAttrs::of(su).ok()?.constant_scales();
    let au = g.op(g.tensor(u).ok()?.producer()?.op).ok()?;
    // Inputs 4..=7 (the hyper-parameters as tensors) must be absent.
    if !au.is::<AdamUpdater>() || au.inputs().iter().any(|(i, _)| i > 3) || !sole_use(g, u, update) {
        return None;
    }
    let ua = AdamUpdaterAttrs::of(au).ok()?;
    if au.input(0).is_some_and(|uw| uw != w) {
        return None;
    }
    let (mp, vp) = (au.input(1)?, au.input(2)?);
    let (am, m, gm, f1) = moving_average(g, mp, AccumulationType::MovingAverage)?;
    let (av, v, gv, f2) = moving_average(g, vp, AccumulationType::MovingAverageSquare)?;
    let step = au.input(3);
    let distinct = [w, gm, m, v].iter().enumerate().all(|(i, x)| [w, gm, m, v][..i].iter().all(|y| y != x));
    if gm != gv || !distinct || step.is_some_and(|s| [w, gm, m, v].contains(&s)) {
        return None;
    }
    let info = &g.tensor(w).ok()?.info;
    let same = [gm, m, v, u].iter().all(|&t| g.tensor(t).is_ok_and(|t| &t.info == info));
    if !same || !matches!(info.dtype, DataType::Float32 | DataType::Float64) {
        return None;
    }
    let private = sole_use(g, m, am)
        && sole_use(g, v, av)
        && sole_use(g, mp, au.id)
        && sole_use(g, vp, au.id)
        && step.is_none_or(|s| sole_use(g, s, au.id) && own_memory(g, s))
        && own_memory(g, m)
        && own_memory(g, v);
    if !private {
        return None;
    }
    let attrs = AdamStepAttrs {
        m_factor: f1,
        v_factor: f2,
        mode: ua.mode,
        weight_decay: if au.input(0).is_some() { ua.weight_decay } else { None },
        beta1: ua.beta1,
        beta2: ua.beta2,
        epsilon: ua.epsilon,
        a,
        b,
    };
    let mut inputs = vec![w, gm, m, v];
    inputs.extend(step);
    Some(Match { ops: [update, au.id, am, av], inputs, attrs })
}

fn rewrite(g: &mut Graph, m: Match) -> Result<()> {
    let name = format!("{}_adam", g.op(m.ops[0])?.name);
    fuse_ops(g, &m.ops, &AdamStep, m.attrs.to_attrs(), &name, &m.inputs)?;
    Ok(())
}
