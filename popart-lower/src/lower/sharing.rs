//! Buffer sharing: the passes that merge alias classes (see [`super::classes`]).
//!
//! - **in-place aliases**: each `OpDef::aliases` (input, output) pair of an op is
//!   one class;
//! - **input elision**: when every call site of a graph passes the same caller
//!   buffer at input `k`, and the graph does not write that input unless every
//!   site is a `Call` marking it modified, the callee reads the caller's buffer
//!   directly (no copy in, no copy back). For a repeat's body only the invariant
//!   inputs (those after the loop-carried ones) qualify: a carried input is
//!   overwritten after every iteration. An unwritten invariant input is read
//!   by every iteration from the caller's buffer, which nothing writes while
//!   the loop runs (a modified input's copy-back comes after it);
//! - **carried elision**: a repeat body with a single call site shares its
//!   loop-carried input `k` with the site's argument `k` when that argument is
//!   an activation of the caller read by the repeat alone (it dies there: no
//!   copy in), and with the site's output `k` when that output is an
//!   activation whose whole class is defined at or after the repeat (no copy
//!   out). A stash that the loop fills in place then lives in one buffer from
//!   its `Init` to its last reader;
//! - **output elision**: a graph with a single `Call` site writes output `j`
//!   straight into the caller's output when that output is an activation private
//!   to the graph (no copy out);
//! - **views**: a view op (flag `OpFlags::VIEW`: its output has the bytes of input 0
//!   in the same order) lowers to no kernel at all, its output sharing input 0's
//!   buffer, when no op writes either class in place (in-place updates, calls
//!   marking an input modified). Members of such a class are only ever written when
//!   they are defined, with equal values, so the sharing cannot be observed.
//!   Otherwise the view stays a kernel (a copy).

use std::collections::{HashMap, HashSet};

use popart_ir::{OpFlags, TensorId, TensorKind};
use slotmap::SecondaryMap;

use super::index::{ClassId, GraphIndex, IndexVec, SiteId};
use super::sites::{Site, SiteKind};
use super::Lowerer;
use crate::LowerError;

/// Which inputs each graph writes (by input position).
pub(super) type WrittenInputs = IndexVec<GraphIndex, Vec<bool>>;

impl Lowerer<'_> {
    /// One class for every (input, output) alias pair of an in-place op.
    pub(super) fn merge_aliases(&mut self) -> Result<(), LowerError> {
        for g in self.graphs.indices() {
            let graph = self.graphs[g].graph;
            for n in 0..self.graphs[g].sched.len() {
                let op = graph.op(self.graphs[g].sched[n])?;
                for (i, j) in op.alias_pairs() {
                    if let (Some(a), Some(b)) = (op.input(i), op.output(j)) {
                        let (ka, kb) = (self.key(g, a)?, self.key(g, b)?);
                        self.classes.union(ka, kb);
                    }
                }
            }
        }
        Ok(())
    }

    /// Classes some op of some graph writes in place: in-place updates and calls
    /// marking an input modified.
    fn written_classes(&self) -> Result<HashSet<ClassId>, LowerError> {
        let mut written = HashSet::new();
        for (g, gd) in self.graphs.iter_enumerated() {
            for &o in &gd.sched {
                let op = gd.graph.op(o)?;
                for i in op.modified_inputs() {
                    if let Some(t) = op.input(i) {
                        written.insert(self.class(g, t)?);
                    }
                }
            }
        }
        Ok(written)
    }

    /// For every graph, which of its inputs it writes (itself or through its alias
    /// classes, including calls that mark them modified).
    pub(super) fn inputs_modified_by_graphs(&self) -> Result<WrittenInputs, LowerError> {
        let written = self.written_classes()?;
        let mut out = IndexVec::with_capacity(self.graphs.len());
        for (g, gd) in self.graphs.iter_enumerated() {
            let v = gd
                .graph
                .inputs()
                .iter()
                .map(|&t| self.class(g, t).map(|c| written.contains(&c)))
                .collect::<Result<_, _>>()?;
            out.push(v);
        }
        Ok(out)
    }

    /// Carried elision (see the module docs), run before input elision, when
    /// classes are still in-place alias classes.
    pub(super) fn elide_carried(&mut self) -> Result<(), LowerError> {
        for f in self.graphs.indices() {
            let [s] = self.graphs[f].callers[..] else { continue };
            if self.sites[s].kind != SiteKind::Repeat {
                continue;
            }
            let graph = self.graphs[f].graph;
            let inputs = graph.inputs();
            let carried = graph.outputs().len().min(inputs.len());
            // Inputs per class, taken before the merges below (each joins one
            // input's class with caller tensors only, never with another input).
            let before: Vec<ClassId> = inputs.iter().map(|&t| self.class(f, t)).collect::<Result<_, _>>()?;
            let mut per_class: HashMap<ClassId, u32> = HashMap::new();
            for &c in &before {
                *per_class.entry(c).or_default() += 1;
            }
            for (k, &input) in inputs.iter().enumerate().take(carried) {
                // Another input in the class would make two caller tensors one buffer.
                if per_class[&before[k]] != 1 || self.sites[s].marks(k) {
                    continue;
                }
                let ci = self.class(f, input)?;
                if self.dies_at_site(s, k)? {
                    let site = &self.sites[s];
                    let ca = self.class(site.caller, site.args[k])?;
                    self.classes.merge(ca, ci);
                }
                if self.born_at_site(s, k)? {
                    let site = &self.sites[s];
                    let cy = self.class(site.caller, site.outs[k])?;
                    let ci = self.class(f, input)?;
                    self.classes.merge(cy, ci);
                }
            }
        }
        Ok(())
    }

    /// Whether argument `k` of site `s` is an activation of the caller, alone in
    /// its class, read by the site's op alone and at one input only.
    fn dies_at_site(&self, s: SiteId, k: usize) -> Result<bool, LowerError> {
        let site = &self.sites[s];
        let graph = self.graphs[site.caller].graph;
        let a = site.args[k];
        let t = graph.tensor(a)?;
        let key = self.key(site.caller, a)?;
        Ok(matches!(t.kind, TensorKind::ActGrad)
            && t.producer().is_some()
            && self.classes.members(self.classes.find(key)) == [key]
            && t.consumers().len() == 1
            && t.consumers().iter().all(|p| p.op == site.op)
            && !graph.outputs().contains(&a))
    }

    /// Whether every member of the class of output `k` of site `s` is an
    /// activation of the caller (not one of its inputs or outputs) defined at or
    /// after the site's op.
    fn born_at_site(&self, s: SiteId, k: usize) -> Result<bool, LowerError> {
        let site = &self.sites[s];
        let gd = &self.graphs[site.caller];
        let at = gd.start[site.op];
        let cy = self.class(site.caller, site.outs[k])?;
        for &m in self.classes.members(cy) {
            let (mg, mt) = self.tensors[m];
            let t = self.tensor(m);
            let born = t.producer().and_then(|p| gd.start.get(p.op)).is_some_and(|&d| d >= at);
            if mg != site.caller
                || !matches!(t.kind, TensorKind::ActGrad)
                || !born
                || gd.graph.inputs().contains(&mt)
                || gd.graph.outputs().contains(&mt)
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Input elision (see the module docs), callers first.
    pub(super) fn elide_inputs(&mut self, modifies_input: &WrittenInputs) -> Result<(), LowerError> {
        for f in self.callers_first.clone() {
            if f == GraphIndex::MAIN {
                continue;
            }
            let callers = self.graphs[f].callers.clone();
            if callers.is_empty() {
                continue;
            }
            self.elide_inputs_of(f, &callers, &modifies_input[f])?;
        }
        Ok(())
    }

    /// Input elision for graph `f`, called from `callers`, writing the inputs
    /// flagged in `writes`.
    fn elide_inputs_of(&mut self, f: GraphIndex, callers: &[SiteId], writes: &[bool]) -> Result<(), LowerError> {
        let touched = |site: &Site, k: usize| writes[k] || site.marks(k);
        // Caller classes of every argument, taken before this graph's merges: those
        // join one callee input with one caller class each, never two caller classes.
        let mut arg_classes: Vec<Vec<ClassId>> = Vec::with_capacity(callers.len());
        // Per site: class -> (arguments in it, how many of them are written).
        let mut groups: Vec<HashMap<ClassId, (u32, u32)>> = Vec::with_capacity(callers.len());
        for &s in callers {
            let site = &self.sites[s];
            let classes: Vec<ClassId> =
                site.args.iter().map(|&a| self.class(site.caller, a)).collect::<Result<_, _>>()?;
            let mut group: HashMap<ClassId, (u32, u32)> = HashMap::new();
            for (k, &c) in classes.iter().enumerate() {
                let e = group.entry(c).or_default();
                e.0 += 1;
                e.1 += u32::from(touched(site, k));
            }
            arg_classes.push(classes);
            groups.push(group);
        }
        let inputs = self.graphs[f].graph.inputs();
        // A repeat's loop-carried inputs come first, one per body output.
        let repeated = callers.iter().any(|&s| self.sites[s].kind == SiteKind::Repeat);
        let carried = if repeated { self.graphs[f].graph.outputs().len() } else { 0 };
        for (k, &input) in inputs.iter().enumerate().skip(carried) {
            let marked_everywhere =
                callers.iter().all(|&s| self.sites[s].kind == SiteKind::Call && self.sites[s].marks(k));
            if writes[k] && !marked_everywhere {
                continue;
            }
            let c = arg_classes[0][k];
            if arg_classes.iter().any(|a| a[k] != c) {
                continue;
            }
            // The same buffer at two inputs: sharing is only safe if neither is written.
            let clash = callers.iter().zip(&groups).any(|(&s, group)| {
                let (count, written) = group[&c];
                let me = u32::from(touched(&self.sites[s], k));
                count > 1 && (me == 1 || written > me)
            });
            if !clash {
                let ki = self.key(f, input)?;
                self.classes.union(c.member(), ki);
            }
        }
        Ok(())
    }

    /// Output elision (see the module docs), callers first.
    pub(super) fn elide_outputs(&mut self) -> Result<(), LowerError> {
        for f in self.callers_first.clone() {
            let [s] = self.graphs[f].callers[..] else { continue };
            if self.sites[s].kind == SiteKind::Call {
                self.elide_outputs_of(f, s)?;
            }
        }
        Ok(())
    }

    /// Output elision for graph `f`, called only from the `Call` site `s`.
    fn elide_outputs_of(&mut self, f: GraphIndex, s: SiteId) -> Result<(), LowerError> {
        let graph = self.graphs[f].graph;
        let outputs = graph.outputs();
        let is_input: HashSet<TensorId> = graph.inputs().iter().copied().collect();
        // Output classes, taken before the merges below: each joins one private
        // class with one caller class, so no two output classes become one.
        let out_classes: Vec<ClassId> = outputs.iter().map(|&o| self.class(f, o)).collect::<Result<_, _>>()?;
        let mut tensor_count: HashMap<TensorId, u32> = HashMap::new();
        let mut class_count: HashMap<ClassId, u32> = HashMap::new();
        for (&o, &c) in outputs.iter().zip(&out_classes) {
            *tensor_count.entry(o).or_default() += 1;
            *class_count.entry(c).or_default() += 1;
        }
        for (j, &o) in outputs.iter().enumerate() {
            if graph.tensor(o)?.producer().is_none() || tensor_count[&o] != 1 {
                continue;
            }
            let c = self.classes.find(out_classes[j].member());
            let private = class_count[&out_classes[j]] == 1
                && self.classes.members(c).iter().all(|&m| {
                    let (mg, mt) = self.tensors[m];
                    mg == f && !is_input.contains(&mt) && matches!(self.kind_of(m), TensorKind::ActGrad)
                });
            if private {
                let site = &self.sites[s];
                let y = self.class(site.caller, site.outs[j])?;
                self.classes.merge(c, y);
            }
        }
        Ok(())
    }

    /// Lower view ops to buffer sharing where no op writes either class in place.
    pub(super) fn share_views(&mut self) -> Result<(), LowerError> {
        let written = self.written_classes()?;
        for g in self.graphs.indices() {
            let graph = self.graphs[g].graph;
            let mut shared = SecondaryMap::new();
            for &o in &self.graphs[g].sched {
                let op = graph.op(o)?;
                if !op.flags().contains(OpFlags::VIEW) {
                    continue;
                }
                let (Some(x), Some(y)) = (op.input(0), op.output(0)) else { continue };
                let (ix, iy) = (&graph.tensor(x)?.info, &graph.tensor(y)?.info);
                if ix.dtype != iy.dtype || ix.nbytes() != iy.nbytes() {
                    continue;
                }
                let (cx, cy) = (self.class(g, x)?, self.class(g, y)?);
                // Neither class is written, and merging two unwritten classes gives
                // an unwritten class: `written` stays exact for later views.
                if !written.contains(&cx) && !written.contains(&cy) {
                    self.classes.merge(cx, cy);
                    shared.insert(o, ());
                }
            }
            self.graphs[g].shared_views = shared;
        }
        Ok(())
    }
}
