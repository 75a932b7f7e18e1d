//! Lifetimes: the local live interval of every tensor, and the global lifetime of
//! every alias class.
//!
//! A tensor is live over its local interval (see [`super::timeline`]) at each
//! instance of its graph. Callee inputs are live from the copy-in step (local step
//! -1), outputs until the copy-out step (the graph's length); repeat bodies keep
//! inputs live for the whole body (the loop-carried copies write them at its end,
//! and the results are copied out of them after the last iteration); inputs some
//! site marks modified live until the copy-back. A caller tensor passed to an
//! elided input lives until its last use inside the callee, through the class they
//! share. Variables and constants are *permanent*: live for the whole program.

use popart_ir::TensorKind;

use super::index::{ClassId, IndexVec, TensorKey};
use super::Lowerer;
use crate::memory::Intervals;
use crate::LowerError;

/// Inclusive local steps, relative to the start of an instance of the tensor's graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) first: i64,
    pub(super) last: i64,
}

impl Span {
    fn extend_to(&mut self, step: i64) {
        self.last = self.last.max(step);
    }
}

/// The local span of every key with a definition or use.
pub(super) type LocalSpans = IndexVec<TensorKey, Option<Span>>;

/// Global lifetimes of the alias classes (entries of representatives only).
pub(super) struct ClassLifetimes {
    /// The class holds a variable or a constant: live for the whole program.
    pub(super) permanent: IndexVec<ClassId, bool>,
    /// Global live steps of every other class with a defined or used member
    /// (`None`: never live); one interval per member and instance, not normalized.
    pub(super) live: IndexVec<ClassId, Option<Intervals>>,
}

impl ClassLifetimes {
    /// Whether class `c` needs a buffer.
    pub(super) fn has_buffer(&self, c: ClassId) -> bool {
        self.permanent[c] || self.live[c].is_some()
    }
}

impl Lowerer<'_> {
    /// Local live interval of every key with a definition or use.
    pub(super) fn local_intervals(&self) -> Result<LocalSpans, LowerError> {
        let mut locals: LocalSpans = IndexVec::from_elem(None, self.tensors.len());
        for (g, gd) in self.graphs.iter_enumerated() {
            let graph = gd.graph;
            let l = gd.len;
            let mut marked = vec![false; graph.inputs().len()];
            for &s in &gd.callers {
                for &k in &self.sites[s].modified {
                    if let Some(m) = marked.get_mut(k) {
                        *m = true;
                    }
                }
            }
            for (k, &t) in graph.inputs().iter().enumerate() {
                // Repeat bodies: inputs are rewritten by the loop copies (step l) and
                // read by the copy-out (step l + 1). Modified inputs: copied back at l.
                let last = if gd.repeat_body {
                    l + 1
                } else if marked[k] {
                    l
                } else {
                    -1
                };
                if let Some(&key) = gd.keys.get(t) {
                    locals[key] = Some(Span { first: -1, last });
                }
            }
            for &o in &gd.sched {
                let op = graph.op(o)?;
                let s = gd.start[o];
                let shared_view = gd.shared_views.contains_key(o);
                for (idx, t) in op.inputs().iter() {
                    if shared_view && idx > 0 {
                        continue; // no kernel reads it
                    }
                    let u = self.use_time(g, op, idx, s);
                    if let Some(&key) = gd.keys.get(t) {
                        locals[key].get_or_insert(Span { first: u, last: u }).extend_to(u);
                    }
                }
                let d = self.def_time(g, o, s);
                let last_write = self.last_write_time(g, o, s);
                for t in op.outputs().tensors() {
                    if let Some(&key) = gd.keys.get(t) {
                        let e = locals[key].get_or_insert(Span { first: d, last: last_write });
                        e.first = d;
                        e.extend_to(last_write);
                    }
                }
            }
            for &t in graph.outputs() {
                if let Some(&key) = gd.keys.get(t) {
                    locals[key].get_or_insert(Span { first: l, last: l }).extend_to(l);
                }
            }
        }
        Ok(locals)
    }

    /// Which classes are permanent, and the global live steps of the others: each
    /// member's local span at each instance of its graph (classes must be flattened,
    /// instances computed).
    pub(super) fn class_lifetimes(&self, locals: &LocalSpans) -> ClassLifetimes {
        let n = self.tensors.len();
        let mut permanent = IndexVec::from_elem(false, n);
        for k in self.tensors.indices() {
            if matches!(self.kind_of(k), TensorKind::Variable(_) | TensorKind::Constant(_)) {
                permanent[self.classes.find(k)] = true;
            }
        }
        let mut live: IndexVec<ClassId, Option<Intervals>> = IndexVec::from_elem(None, n);
        for (k, local) in locals.iter_enumerated() {
            let Some(Span { first, last }) = *local else { continue };
            let r = self.classes.find(k);
            if permanent[r] {
                continue;
            }
            let steps = live[r].get_or_insert_with(Vec::new);
            for &b in &self.graphs[self.tensors[k].0].instances {
                steps.push(((b + first).max(0) as u64, (b + last).max(0) as u64));
            }
        }
        ClassLifetimes { permanent, live }
    }
}
