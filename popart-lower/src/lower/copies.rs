//! Copy planning: the copies each call site still needs once classes are final.
//!
//! A copy between two tensors of one class is elided. Per site: copy-in (arguments
//! to callee inputs), copy-out (callee outputs to caller outputs; for a repeat, from
//! the inputs, which hold the last iteration's outputs), copy-back (modified inputs
//! of a call or repeat), and a repeat's loop-carried copies (output k to input k after each
//! iteration). Loop-carried copies happen "in parallel": when one reads what
//! another writes, every value is staged through a temporary ([`Temp`]) first.

use std::collections::HashSet;

use popart_ir::{TensorId, TensorInfo};

use super::index::{ClassId, GraphIndex, IndexVec, SiteId, TempId};
use super::sites::SiteKind;
use super::Lowerer;
use crate::LowerError;

/// A source or destination of a planned copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Loc {
    /// The buffer of an alias class.
    Class(ClassId),
    /// A copy temporary.
    Temp(TempId),
}

/// One copy of `bytes` bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct PlannedCopy {
    pub(super) src: Loc,
    pub(super) dst: Loc,
    pub(super) bytes: usize,
}

/// The copies of one call site.
#[derive(Clone, Debug, Default)]
pub(super) struct SitePlan {
    /// Arguments to callee inputs, before the call.
    pub(super) copy_in: Vec<PlannedCopy>,
    /// Callee results to caller outputs, after the call.
    pub(super) copy_out: Vec<PlannedCopy>,
    /// Modified callee inputs back to the caller's arguments, after the copy-out.
    pub(super) copy_back: Vec<PlannedCopy>,
    /// A repeat's loop-carried copies, after each iteration.
    pub(super) loop_copies: Vec<PlannedCopy>,
}

/// A copy temporary: live at one local step of a graph.
pub(super) struct Temp {
    pub(super) info: TensorInfo,
    pub(super) graph: GraphIndex,
    pub(super) step: i64,
    /// The IPU of the tensor it stages.
    pub(super) ipu: u32,
}

impl Lowerer<'_> {
    /// The copy from `src` to `dst` ((graph, tensor) pairs), unless they share a class.
    fn copy(
        &self,
        src: (GraphIndex, TensorId),
        dst: (GraphIndex, TensorId),
    ) -> Result<Option<PlannedCopy>, LowerError> {
        let (s, d) = (self.class(src.0, src.1)?, self.class(dst.0, dst.1)?);
        if s == d {
            return Ok(None);
        }
        let bytes = self.info(src.0, src.1)?.nbytes();
        Ok(Some(PlannedCopy { src: Loc::Class(s), dst: Loc::Class(d), bytes }))
    }

    /// The copies of every site (classes must be final and flattened).
    pub(super) fn plan_copies(&mut self) -> Result<IndexVec<SiteId, SitePlan>, LowerError> {
        let mut plans = IndexVec::with_capacity(self.sites.len());
        for s in self.sites.indices() {
            let site = &self.sites[s];
            let (caller, callee, kind) = (site.caller, site.callee, site.kind);
            let callee_graph = self.graphs[callee].graph;
            let (cin, cout) = (callee_graph.inputs(), callee_graph.outputs());
            let mut plan = SitePlan::default();
            for (k, &a) in site.args.iter().enumerate() {
                plan.copy_in.extend(self.copy((caller, a), (callee, cin[k]))?);
            }
            for (j, &y) in site.outs.iter().enumerate() {
                // After a repeat's last loop-carried copy, input j holds the last
                // iteration's output j (the outputs themselves may be inputs that
                // the loop copies have overwritten).
                let src = if kind == SiteKind::Repeat { cin[j] } else { cout[j] };
                plan.copy_out.extend(self.copy((callee, src), (caller, y))?);
            }
            for &k in &site.modified {
                plan.copy_back.extend(self.copy((callee, cin[k]), (caller, site.args[k]))?);
            }
            if kind == SiteKind::Repeat {
                plan.loop_copies = self.loop_copies(s)?;
            }
            plans.push(plan);
        }
        Ok(plans)
    }

    /// The loop-carried copies of repeat site `s`, staged through temporaries when
    /// one reads what another writes.
    fn loop_copies(&mut self, s: SiteId) -> Result<Vec<PlannedCopy>, LowerError> {
        let site = &self.sites[s];
        let (caller, callee) = (site.caller, site.callee);
        let callee_graph = self.graphs[callee].graph;
        let (cin, cout) = (callee_graph.inputs(), callee_graph.outputs());
        let mut loops = Vec::new();
        for (k, &o) in cout.iter().enumerate() {
            loops.extend(self.copy((callee, o), (callee, cin[k]))?);
        }
        let dsts: HashSet<Loc> = loops.iter().map(|c| c.dst).collect();
        if !loops.iter().any(|c| dsts.contains(&c.src)) {
            return Ok(loops);
        }
        let step = self.graphs[caller].start[site.op] + 1 + self.site_len(s);
        let mut staged = Vec::with_capacity(2 * loops.len());
        let mut back = Vec::with_capacity(loops.len());
        for (k, c) in loops.iter().enumerate() {
            let ipu = self.tensor_ipu((callee, cout[k])).unwrap_or(0);
            let t = self.temps.push(Temp { info: self.info(callee, cout[k])?, graph: caller, step, ipu });
            staged.push(PlannedCopy { src: c.src, dst: Loc::Temp(t), bytes: c.bytes });
            back.push(PlannedCopy { src: Loc::Temp(t), dst: c.dst, bytes: c.bytes });
        }
        staged.extend(back);
        Ok(staged)
    }
}
