//! Code liveness (PopXL's code loading, seed §9.7.2), on the global timeline.
//!
//! Each function's code is live over a set of timeline steps:
//!
//! - a graph that no `RemoteCodeLoad` loads is always live (program start to end);
//! - every call of a loaded graph needs its code from the last load before the
//!   call or, when no load precedes it, from the start of the program, until
//!   the call returns;
//! - a load says the code was not needed since the last call (or the start):
//!   between a call and the next load, the code is dead;
//! - a load itself occupies its step, even if no call follows.
//!
//! Branches are pessimistic: after an `If`, the code counts as loaded only
//! along the branches that loaded it; when a branch did not, the state before
//! the `If` (an earlier load, or the start) also reaches later calls. Loop
//! bodies are walked twice, so that a load late in the body reaches the calls
//! of the next iteration (from the load to the body's end, then from the
//! body's start). Loads inside a called graph happen at the steps of each call
//! instance (nested loading).
//!
//! The analysis follows *paths*: a path is the steps on which the code has
//! been live since the load that reaches the current point (segments already
//! closed, plus an open start). A call closes every path at its last step.

use std::collections::HashMap;

use popart_ir::ops::control::RepeatAttrs;
use popart_ir::ops::remote::{RemoteCodeLoad, RemoteCodeLoadAttrs};
use popart_ir::OpAttrs;

use super::index::{GraphIndex, Idx};
use super::sites::SiteKind;
use super::Lowerer;
use crate::executable::CodeLiveness;
use crate::memory::{normalize, Intervals};
use crate::LowerError;

/// Paths beyond which an analysis state is widened to one pessimistic path.
const MAX_PATHS: usize = 64;

/// The steps on which a graph's code has been live since its reaching load.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Path {
    /// Closed segments (inclusive).
    segs: Vec<(i64, i64)>,
    /// Live from here to the current point.
    open: i64,
}

/// The paths reaching the current point, per loaded graph.
type State = HashMap<GraphIndex, Vec<Path>>;

struct Walk<'l, 'a> {
    l: &'l Lowerer<'a>,
    /// Index of every reachable graph.
    index: HashMap<popart_ir::GraphId, GraphIndex>,
    /// Graphs some `RemoteCodeLoad` loads.
    loaded: Vec<bool>,
    /// Live steps found so far, per graph.
    live: HashMap<GraphIndex, Vec<(i64, i64)>>,
    /// Steps of the loads, per graph.
    loads: HashMap<GraphIndex, Vec<i64>>,
}

impl Walk<'_, '_> {
    /// The call of `g` over steps `start..=end`: its code is live on every
    /// reaching path up to `end`.
    fn call(&mut self, state: &State, g: GraphIndex, end: i64) {
        let Some(paths) = state.get(&g) else { return };
        let live = self.live.entry(g).or_default();
        for p in paths {
            live.extend(p.segs.iter().copied());
            live.push((p.open.min(end), end));
        }
    }

    /// Walk one instance of graph `g` starting at global step `base`.
    fn graph(&mut self, g: GraphIndex, base: i64, state: &mut State) -> Result<(), LowerError> {
        let gd = &self.l.graphs[g];
        for &o in &gd.sched {
            let t = base + gd.start[o];
            let op = gd.graph.op(o)?;
            if op.is::<RemoteCodeLoad>() {
                let target = self.index.get(&RemoteCodeLoadAttrs::of(op)?.graph).copied();
                if let Some(target) = target {
                    state.insert(target, vec![Path { segs: Vec::new(), open: t }]);
                    self.live.entry(target).or_default().push((t, t));
                    self.loads.entry(target).or_default().push(t);
                }
                continue;
            }
            let sites = self.l.op_sites(g, o);
            let Some(first) = sites.first() else { continue };
            match self.l.sites[first].kind {
                SiteKind::Call => {
                    let callee = self.l.sites[first].callee;
                    let end = t + self.l.graphs[callee].len;
                    self.call(state, callee, end);
                    self.graph(callee, t + 1, state)?;
                }
                SiteKind::Repeat => {
                    let callee = self.l.sites[first].callee;
                    let (lo, hi) = (t + 1, t + self.l.graphs[callee].len);
                    self.call(state, callee, hi);
                    self.graph(callee, lo, state)?;
                    let count = RepeatAttrs::of(op)?.count;
                    if count > 1 {
                        // The next iteration: what the body loaded stays live to
                        // the body's end and reaches the body's start.
                        for paths in state.values_mut() {
                            for p in paths.iter_mut().filter(|p| p.open >= lo) {
                                p.segs.push((p.open, hi));
                                p.open = lo;
                            }
                            dedup(paths);
                        }
                        self.call(state, callee, hi);
                        self.graph(callee, lo, state)?;
                    }
                }
                SiteKind::IfThen | SiteKind::IfElse => {
                    let before = state.clone();
                    let mut merged: State = HashMap::new();
                    let mut branch_ends = Vec::new();
                    for s in sites.iter() {
                        let site = &self.l.sites[s];
                        let lo = t + self.l.callee_offset(s);
                        let hi = lo + self.l.graphs[site.callee].len - 1;
                        let mut st = before.clone();
                        self.call(&st, site.callee, hi);
                        self.graph(site.callee, lo, &mut st)?;
                        branch_ends.push((lo, hi + 1, st));
                    }
                    // Paths opened inside a branch continue after the whole op.
                    let after = t + self.l.op_len(g, o) - 1;
                    for (lo, end, st) in branch_ends {
                        for (target, paths) in st {
                            let out = merged.entry(target).or_default();
                            for mut p in paths {
                                if p.open >= lo && p.open <= end && end < after {
                                    p.segs.push((p.open, end));
                                    p.open = after;
                                }
                                out.push(p);
                            }
                        }
                    }
                    for paths in merged.values_mut() {
                        dedup(paths);
                    }
                    *state = merged;
                }
            }
        }
        Ok(())
    }
}

/// Remove duplicate paths; widen to one pessimistic path when there are too many.
fn dedup(paths: &mut Vec<Path>) {
    let mut out: Vec<Path> = Vec::with_capacity(paths.len());
    for p in paths.drain(..) {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if out.len() > MAX_PATHS {
        let open = out.iter().flat_map(|p| p.segs.iter().map(|s| s.0).chain([p.open])).min().unwrap_or(0);
        out = vec![Path { segs: Vec::new(), open }];
    }
    *paths = out;
}

impl Lowerer<'_> {
    /// The [`GraphIndex`] of a reachable graph.
    pub(super) fn graph_index(&self, id: popart_ir::GraphId) -> Option<GraphIndex> {
        self.graphs.iter_enumerated().find(|(_, gd)| gd.id == id).map(|(i, _)| i)
    }

    /// Code liveness of every function (see the module docs).
    pub(super) fn code_liveness(&self) -> Result<Vec<CodeLiveness>, LowerError> {
        let steps = self.graphs[GraphIndex::MAIN].len;
        let index: HashMap<popart_ir::GraphId, GraphIndex> =
            self.graphs.iter_enumerated().map(|(i, gd)| (gd.id, i)).collect();
        let mut loaded = vec![false; self.graphs.len()];
        for gd in self.graphs.iter() {
            for op in gd.graph.ops().filter(|op| op.is::<RemoteCodeLoad>()) {
                let graph = RemoteCodeLoadAttrs::of(op).ok().map(|a| a.graph);
                if let Some(&i) = graph.and_then(|id| index.get(&id)) {
                    loaded[i.index()] = true;
                }
            }
        }
        let mut state: State = HashMap::new();
        for (i, &l) in loaded.iter().enumerate() {
            if l {
                state.insert(GraphIndex::from_index(i), vec![Path { segs: Vec::new(), open: 0 }]);
            }
        }
        let mut w = Walk { l: self, index, loaded, live: HashMap::new(), loads: HashMap::new() };
        w.graph(GraphIndex::MAIN, 0, &mut state)?;
        let mut out = Vec::new();
        for (g, gd) in self.graphs.iter_enumerated().skip(1) {
            let Some(function) = g.function_id() else { continue };
            let to_u = |v: i64| u64::try_from(v).unwrap_or(0);
            let (loaded, live): (bool, Intervals) = if w.loaded[g.index()] {
                let v: Intervals =
                    w.live.remove(&g).unwrap_or_default().into_iter().map(|(a, b)| (to_u(a), to_u(b))).collect();
                (true, normalize(v))
            } else {
                (false, if steps > 0 { vec![(0, to_u(steps - 1))] } else { Vec::new() })
            };
            let mut loads: Vec<u64> = w.loads.remove(&g).unwrap_or_default().into_iter().map(to_u).collect();
            loads.sort_unstable();
            loads.dedup();
            out.push(CodeLiveness { function, graph: gd.graph.name().to_string(), loaded, loads, live });
        }
        Ok(out)
    }
}
