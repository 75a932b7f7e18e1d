//! Topological constraints: explicit orderings between ops of one graph,
//! beyond the data edges.

use std::collections::BTreeMap;

use slotmap::SecondaryMap;

use crate::OpId;

/// One constraint edge as seen from an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopoCon {
    /// The other op.
    pub op: OpId,
    /// Tied: the scheduler keeps the two ops adjacent.
    pub tied: bool,
}

/// The `before -> after` constraints of one graph (PopART's `TopoCons`).
/// Kept apart from the ops: it is order, not data.
#[derive(Clone, Debug, Default)]
pub struct TopoCons {
    afters: SecondaryMap<OpId, Vec<TopoCon>>,
    befores: SecondaryMap<OpId, Vec<TopoCon>>,
    len: usize,
}

impl TopoCons {
    /// Add `before -> after`. Adding an existing edge again is a no-op, except
    /// that a tied insert upgrades an untied edge.
    /// Callers check that both ops exist in the graph and differ.
    pub(crate) fn insert(&mut self, before: OpId, after: OpId, tied: bool) {
        let afters = self.afters.entry(before).expect("live op").or_default();
        if let Some(e) = afters.iter_mut().find(|c| c.op == after) {
            e.tied |= tied;
            if let Some(b) = self.befores.get_mut(after).and_then(|v| v.iter_mut().find(|c| c.op == before)) {
                b.tied |= tied;
            }
            return;
        }
        afters.push(TopoCon { op: after, tied });
        self.befores.entry(after).expect("live op").or_default().push(TopoCon { op: before, tied });
        self.len += 1;
    }

    /// Remove `before -> after` if present; returns whether it was.
    pub(crate) fn remove(&mut self, before: OpId, after: OpId) -> bool {
        let removed = match self.afters.get_mut(before) {
            Some(v) => {
                let n = v.len();
                v.retain(|c| c.op != after);
                n != v.len()
            }
            None => false,
        };
        if removed {
            if let Some(v) = self.befores.get_mut(after) {
                v.retain(|c| c.op != before);
            }
            self.len -= 1;
        }
        removed
    }

    /// Remove every constraint touching `op`.
    pub(crate) fn remove_op(&mut self, op: OpId) {
        for c in self.afters.remove(op).unwrap_or_default() {
            if let Some(v) = self.befores.get_mut(c.op) {
                v.retain(|x| x.op != op);
            }
            self.len -= 1;
        }
        for c in self.befores.remove(op).unwrap_or_default() {
            if let Some(v) = self.afters.get_mut(c.op) {
                v.retain(|x| x.op != op);
            }
            self.len -= 1;
        }
    }

    /// Move every constraint of `from` onto `to` (used when `to` replaces `from`).
    pub(crate) fn transfer(&mut self, from: OpId, to: OpId) {
        let afters = self.afters.get(from).cloned().unwrap_or_default();
        let befores = self.befores.get(from).cloned().unwrap_or_default();
        self.remove_op(from);
        for c in afters {
            if c.op != to {
                self.insert(to, c.op, c.tied);
            }
        }
        for c in befores {
            if c.op != to {
                self.insert(c.op, to, c.tied);
            }
        }
    }

    /// Ops that must come after `op`.
    pub fn afters(&self, op: OpId) -> &[TopoCon] {
        self.afters.get(op).map_or(&[], |v| v.as_slice())
    }

    /// Ops that must come before `op`.
    pub fn befores(&self, op: OpId) -> &[TopoCon] {
        self.befores.get(op).map_or(&[], |v| v.as_slice())
    }

    /// True if `before -> after` is a constraint.
    pub fn contains(&self, before: OpId, after: OpId) -> bool {
        self.afters(before).iter().any(|c| c.op == after)
    }

    /// Number of constraint edges.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if there are no constraints.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every edge as `(before, after, tied)`, grouped by `before`.
    pub fn edges(&self) -> impl Iterator<Item = (OpId, OpId, bool)> + '_ {
        self.afters.iter().flat_map(|(b, v)| v.iter().map(move |c| (b, c.op, c.tied)))
    }

    /// Edges sorted by a key of each op (for stable printing).
    pub fn sorted_edges<K: Ord>(&self, key: impl Fn(OpId) -> K) -> Vec<(OpId, OpId, bool)> {
        let mut m: BTreeMap<(K, K), (OpId, OpId, bool)> = BTreeMap::new();
        for (b, a, t) in self.edges() {
            m.insert((key(b), key(a)), (b, a, t));
        }
        m.into_values().collect()
    }
}
