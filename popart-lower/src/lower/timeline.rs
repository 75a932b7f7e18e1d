//! The timeline: one global step numbering in which every call is expanded in place.
//!
//! Each op of a graph takes steps relative to the graph's start (its *local* steps):
//!
//! - a plain op takes 1 step;
//! - a call takes `2 + len(callee)`: copy-in, the callee body, copy-out (and
//!   copy-back of modified inputs);
//! - a repeat takes `3 + len(body)`: copy-in, the body, the loop-carried copies,
//!   copy-out;
//! - an if takes `4 + len(then) + len(else)`: then copy-in, then body, then
//!   copy-out, else copy-in, else body, else copy-out.
//!
//! A graph called from several places has several *instances*: the global steps at
//! which its body starts (see [`Lowerer::compute_instances`]).

use popart_ir::{Op, OpId};
use slotmap::SecondaryMap;

use super::index::{GraphIndex, SiteId};
use super::sites::{SiteKind, SiteRange};
use super::Lowerer;

impl Lowerer<'_> {
    /// Local start step of every op and length of every graph, callees first.
    pub(super) fn compute_timeline(&mut self) {
        for g in self.callers_first.clone().into_iter().rev() {
            let mut t = 0i64;
            let mut start = SecondaryMap::new();
            for &o in &self.graphs[g].sched {
                start.insert(o, t);
                t += self.op_len(g, o);
            }
            self.graphs[g].start = start;
            self.graphs[g].len = t;
        }
    }

    /// Steps of one instance of the callee of site `s`.
    pub(super) fn site_len(&self, s: SiteId) -> i64 {
        self.graphs[self.sites[s].callee].len
    }

    /// The call sites of op `o` of graph `g` (empty for ops that call no graph).
    pub(super) fn op_sites(&self, g: GraphIndex, o: OpId) -> SiteRange {
        self.graphs[g].op_sites.get(o).copied().unwrap_or_default()
    }

    fn first_site_kind(&self, g: GraphIndex, o: OpId) -> Option<(SiteId, SiteKind)> {
        self.op_sites(g, o).first().map(|s| (s, self.sites[s].kind))
    }

    pub(super) fn op_len(&self, g: GraphIndex, o: OpId) -> i64 {
        match self.first_site_kind(g, o) {
            None => 1,
            Some((s, SiteKind::Call)) => 2 + self.site_len(s),
            Some((s, SiteKind::Repeat)) => 3 + self.site_len(s),
            Some((_, SiteKind::IfThen | SiteKind::IfElse)) => {
                4 + self.op_sites(g, o).iter().map(|s| self.site_len(s)).sum::<i64>()
            }
        }
    }

    /// (then length, else length) of an if op.
    fn if_lens(&self, g: GraphIndex, o: OpId) -> (i64, i64) {
        let mut lt = 0;
        let mut le = 0;
        for s in self.op_sites(g, o).iter() {
            match self.sites[s].kind {
                SiteKind::IfThen => lt = self.site_len(s),
                SiteKind::IfElse => le = self.site_len(s),
                _ => {}
            }
        }
        (lt, le)
    }

    /// Step, relative to the op's start, at which the callee of site `s` starts.
    pub(super) fn callee_offset(&self, s: SiteId) -> i64 {
        let site = &self.sites[s];
        match site.kind {
            SiteKind::Call | SiteKind::Repeat | SiteKind::IfThen => 1,
            SiteKind::IfElse => 3 + self.if_lens(site.caller, site.op).0,
        }
    }

    /// Local step at which op `o` (starting at `s`) writes its outputs.
    pub(super) fn def_time(&self, g: GraphIndex, o: OpId, s: i64) -> i64 {
        match self.first_site_kind(g, o) {
            None => s,
            Some((x, SiteKind::Call)) => s + 1 + self.site_len(x),
            Some((x, SiteKind::Repeat)) => s + 2 + self.site_len(x),
            Some((_, SiteKind::IfThen | SiteKind::IfElse)) => s + 1 + self.if_lens(g, o).0,
        }
    }

    /// Last local step at which op `o` (starting at `s`) writes its outputs: an if
    /// writes them in each branch, the else branch's copy-out coming last.
    pub(super) fn last_write_time(&self, g: GraphIndex, o: OpId, s: i64) -> i64 {
        match self.first_site_kind(g, o) {
            Some((_, SiteKind::IfThen | SiteKind::IfElse)) => {
                let (lt, le) = self.if_lens(g, o);
                s + 3 + lt + le
            }
            _ => self.def_time(g, o, s),
        }
    }

    /// Last local step at which op `op` (starting at `s`) reads its input `idx`.
    pub(super) fn use_time(&self, g: GraphIndex, op: &Op, idx: u32, s: i64) -> i64 {
        let mut last = s;
        for x in self.op_sites(g, op.id).iter() {
            let site = &self.sites[x];
            match site.kind {
                SiteKind::Call => {
                    if site.marks(idx as usize) {
                        last = last.max(s + 1 + self.site_len(x));
                    }
                }
                SiteKind::Repeat | SiteKind::IfThen => {}
                SiteKind::IfElse => {
                    if site.reads.binary_search(&idx).is_ok() {
                        last = last.max(s + 2 + self.if_lens(g, op.id).0);
                    }
                }
            }
        }
        last
    }

    /// Global start steps of every instance of every graph.
    pub(super) fn compute_instances(&mut self) {
        self.graphs[GraphIndex::MAIN].instances = vec![0];
        for g in self.callers_first.clone() {
            let mut calls = Vec::new();
            for &o in &self.graphs[g].sched {
                for s in self.op_sites(g, o).iter() {
                    calls.push((self.sites[s].callee, self.graphs[g].start[o] + self.callee_offset(s)));
                }
            }
            let mine = self.graphs[g].instances.clone();
            for (callee, off) in calls {
                self.graphs[callee].instances.extend(mine.iter().map(|b| b + off));
            }
        }
    }
}
