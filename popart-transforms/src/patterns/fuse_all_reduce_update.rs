//! `fuse_all_reduce_update`: data-parallel SGD's gradient all-reduce and
//! weight update as one collective.
//!
//! ```text
//! r = ReplicatedAllReduce(Inplace){op: add|mean, group}(g)    r read by nothing else
//! w' = ScaledAddInplace{a: 1, b}(w, r)
//! ```
//!
//! becomes `w' = ReplicatedAllReduceScaledAddInplace{op, group, b}(w, g)`: each
//! replica reduces its chunk of the gradients and adds it into every member's
//! weight, so the reduced gradient is never stored and the update needs no
//! separate pass over the weight. The fused op runs where the update ran; the
//! pattern applies only when no op is ordered between the two (topological
//! constraints), so moving the all-reduce later cannot change what any op
//! sees, and every replica moves it alike (they run the same schedule).

use crate::Result;
use popart_ir::ops::collectives::{
    AllReduceAttrs, AllReduceUpdateAttrs, CollectiveOperator, ReplicatedAllReduce, ReplicatedAllReduceInplace,
    ReplicatedAllReduceScaledAddInplace,
};
use popart_ir::ops::var_update::{ScaleAttrs, ScaledAddInplace};
use popart_ir::{Graph, Ir, OpAttrs, OpId, TensorId};

use super::{fuse_ops, rewrite_matches};
use crate::pipeline::{Pass, PassOutcome};

/// The `fuse-all-reduce-update` pattern (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuseAllReduceUpdate;

impl FuseAllReduceUpdate {
    /// The pass's name in a pipeline.
    pub const NAME: &'static str = "fuse-all-reduce-update";
}

impl Pass for FuseAllReduceUpdate {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        let n = rewrite_matches(ir, find, rewrite)?;
        Ok(PassOutcome::changed(n > 0).with_note(format!("{n} all-reduce updates fused")))
    }
}

struct Match {
    update: OpId,
    reduce: OpId,
    w: TensorId,
    g: TensorId,
    attrs: AllReduceUpdateAttrs,
}

fn find(g: &Graph, update: OpId) -> Option<Match> {
    let op = g.op(update).ok()?;
    if !op.is::<ScaledAddInplace>() || op.input(2).is_some() || op.input(3).is_some() {
        return None;
    }
    let (a, b) = ScaleAttrs::of(op).ok()?.constant_scales();
    if a != 1.0 {
        return None;
    }
    let (w, r) = (op.input(0)?, op.input(1)?);
    let rt = g.tensor(r).ok()?;
    let red = g.op(rt.producer()?.op).ok()?;
    if !(red.is::<ReplicatedAllReduce>() || red.is::<ReplicatedAllReduceInplace>()) {
        return None;
    }
    let AllReduceAttrs { op: reduce_op, stride, group_size } = AllReduceAttrs::of(red).ok()?;
    let fits = matches!(reduce_op, CollectiveOperator::Add | CollectiveOperator::Mean)
        && rt.consumers().len() == 1
        && g.output_index(r).is_none()
        && rt.info.dtype.is_floating_point()
        && g.tensor(w).ok()?.info == rt.info
        // Nothing is ordered between the two: the all-reduce may move to the update.
        && g.topo_cons().afters(red.id).iter().all(|c| c.op == update)
        && g.topo_cons().befores(update).iter().all(|c| c.op == red.id);
    let gi = red.input(0)?;
    // An in-place all-reduce writes its input: fuse only when nothing else reads it.
    let in_place_ok = !red.is::<ReplicatedAllReduceInplace>() || g.tensor(gi).ok()?.consumers().len() == 1;
    (fits && in_place_ok && gi != w).then_some(Match {
        update,
        reduce: red.id,
        w,
        g: gi,
        attrs: AllReduceUpdateAttrs { op: reduce_op, stride, group_size, b },
    })
}

fn rewrite(g: &mut Graph, m: Match) -> Result<()> {
    let red = g.op(m.reduce)?;
    let name = format!("{}_update", red.name);
    let attrs = m.attrs.to_attrs();
    fuse_ops(g, &[m.update, m.reduce], &ReplicatedAllReduceScaledAddInplace, attrs, &name, &[m.w, m.g])?;
    Ok(())
}
