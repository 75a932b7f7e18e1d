//! Topological constraints: explicit orderings between ops of one graph,
//! beyond the data edges.

use std::collections::{BTreeMap, HashMap};

use slotmap::SecondaryMap;

use crate::{Graph, IrError, OpId, Result};

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
        // `entry` is `None` only for a removed op's key; callers pass live ops.
        let Some(afters) = self.afters.entry(before) else { return };
        let afters = afters.or_default();
        if let Some(e) = afters.iter_mut().find(|c| c.op == after) {
            e.tied |= tied;
            if let Some(b) = self.befores.get_mut(after).and_then(|v| v.iter_mut().find(|c| c.op == before)) {
                b.tied |= tied;
            }
            return;
        }
        let Some(befores) = self.befores.entry(after) else { return };
        afters.push(TopoCon { op: after, tied });
        befores.or_default().push(TopoCon { op: before, tied });
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

/// Adding constraints. Every checked entry point refuses a constraint that would
/// close a cycle with the data edges and the existing constraints, so a graph
/// built through them stays schedulable; the check costs a bidirectional search
/// bounded by the smaller of the two regions it explores (constant when `after`
/// is a freshly created op, as with `in_sequence`).
impl Graph {
    /// Require `before` to be scheduled before `after`.
    ///
    /// Errors: [`IrError::SelfConstraint`] if they are the same op,
    /// [`IrError::Cycle`] (naming the ops of the cycle) if `after` already
    /// precedes `before` through data edges and constraints; nothing changes then.
    pub fn add_topo_con(&mut self, before: OpId, after: OpId) -> Result<()> {
        self.check_con(before, after)?;
        if !self.topo_cons.contains(before, after) {
            self.check_no_path(after, before)?;
        }
        self.topo_cons.insert(before, after, false);
        Ok(())
    }

    /// Require `before` immediately before `after` (tied: scheduled adjacently).
    /// Errors as [`Graph::add_topo_con`].
    pub fn add_tied_topo_con(&mut self, before: OpId, after: OpId) -> Result<()> {
        self.check_con(before, after)?;
        if !self.topo_cons.contains(before, after) {
            self.check_no_path(after, before)?;
        }
        self.topo_cons.insert(before, after, true);
        Ok(())
    }

    /// [`Graph::add_topo_con`] without the cycle check, for passes that add many
    /// constraints each known to agree with an existing schedule of the graph
    /// (`before` scheduled before `after`), which therefore closes no cycle. A
    /// constraint that does close one is reported by [`Ir::verify`](crate::Ir::verify)
    /// and the scheduler, not here. Still refuses unknown ops and self-constraints.
    pub fn add_topo_con_unchecked(&mut self, before: OpId, after: OpId) -> Result<()> {
        self.check_con(before, after)?;
        self.topo_cons.insert(before, after, false);
        Ok(())
    }

    /// Remove the constraint `before -> after`; returns whether it existed.
    pub fn remove_topo_con(&mut self, before: OpId, after: OpId) -> bool {
        self.topo_cons.remove(before, after)
    }

    /// Move all constraints of `from` onto `to` (constraints between the two are
    /// dropped). Errors as [`Graph::add_topo_con`] if a moved constraint would close
    /// a cycle through `to`; nothing changes then.
    pub fn transfer_topo_cons(&mut self, from: OpId, to: OpId) -> Result<()> {
        self.op(from)?;
        self.op(to)?;
        if from == to {
            return Ok(());
        }
        let afters = self.topo_cons.afters(from).to_vec();
        let befores = self.topo_cons.befores(from).to_vec();
        self.topo_cons.remove_op(from);
        let mut added: Vec<(OpId, OpId)> = Vec::new();
        let moved = afters.iter().map(|c| (to, c.op, c.tied)).chain(befores.iter().map(|c| (c.op, to, c.tied)));
        for (b, a, tied) in moved {
            if b == a || self.topo_cons.contains(b, a) {
                if b != a {
                    self.topo_cons.insert(b, a, tied);
                }
                continue;
            }
            if let Err(e) = self.check_no_path(a, b) {
                // Roll back: the added edges go, `from`'s come back.
                for (b, a) in added {
                    self.topo_cons.remove(b, a);
                }
                for c in afters {
                    self.topo_cons.insert(from, c.op, c.tied);
                }
                for c in befores {
                    self.topo_cons.insert(c.op, from, c.tied);
                }
                return Err(e);
            }
            self.topo_cons.insert(b, a, tied);
            added.push((b, a));
        }
        Ok(())
    }

    fn check_con(&self, before: OpId, after: OpId) -> Result<()> {
        let b = self.op(before)?;
        self.op(after)?;
        if before == after {
            return Err(IrError::SelfConstraint(b.name.clone()));
        }
        Ok(())
    }

    /// Successors of `o`: consumers of its outputs and its constraint afters.
    fn for_each_successor(&self, o: OpId, mut f: impl FnMut(OpId)) {
        if let Some(op) = self.ops.get(o) {
            for t in op.outputs.tensors() {
                if let Some(t) = self.tensors.get(t) {
                    t.consumers.iter().for_each(|p| f(p.op));
                }
            }
        }
        self.topo_cons.afters(o).iter().for_each(|c| f(c.op));
    }

    /// Predecessors of `o`: producers of its inputs and its constraint befores.
    fn for_each_predecessor(&self, o: OpId, mut f: impl FnMut(OpId)) {
        if let Some(op) = self.ops.get(o) {
            for t in op.inputs.tensors() {
                if let Some(p) = self.tensors.get(t).and_then(|t| t.producer) {
                    f(p.op);
                }
            }
        }
        self.topo_cons.befores(o).iter().for_each(|c| f(c.op));
    }

    /// An error naming the cycle if `from` reaches `to` (so that a constraint
    /// `to -> from` would close a cycle). Searches forward from `from` and backward
    /// from `to` in turns, and stops when either side runs out: the cost is about
    /// twice the smaller of the two regions.
    fn check_no_path(&self, from: OpId, to: OpId) -> Result<()> {
        // Parent links: forward (op -> the op it was reached from, toward `from`),
        // backward (op -> the op it was reached from, toward `to`).
        // Hash maps, not `SecondaryMap`s: a secondary map grows to the largest
        // slot index it holds, which would make every check linear in the graph.
        let mut fwd: HashMap<OpId, OpId> = HashMap::new();
        let mut bwd: HashMap<OpId, OpId> = HashMap::new();
        fwd.insert(from, from);
        bwd.insert(to, to);
        let (mut fq, mut bq) = (vec![from], vec![to]);
        let (mut fi, mut bi) = (0usize, 0usize);
        let mut meet = if from == to { Some(from) } else { None };
        while meet.is_none() && fi < fq.len() && bi < bq.len() {
            let o = fq[fi];
            fi += 1;
            self.for_each_successor(o, |s| {
                if meet.is_none() && !fwd.contains_key(&s) {
                    fwd.insert(s, o);
                    if bwd.contains_key(&s) {
                        meet = Some(s);
                    }
                    fq.push(s);
                }
            });
            if meet.is_some() {
                break;
            }
            let o = bq[bi];
            bi += 1;
            self.for_each_predecessor(o, |p| {
                if meet.is_none() && !bwd.contains_key(&p) {
                    bwd.insert(p, o);
                    if fwd.contains_key(&p) {
                        meet = Some(p);
                    }
                    bq.push(p);
                }
            });
        }
        let Some(m) = meet else { return Ok(()) };
        // The cycle: to -> from -> .. -> m -> .. -> to (the first op follows the last).
        let mut head = vec![m];
        let mut cur = m;
        while cur != from {
            cur = fwd.get(&cur).copied().unwrap_or(from);
            head.push(cur);
        }
        head.reverse();
        let mut cur = m;
        while cur != to {
            cur = bwd.get(&cur).copied().unwrap_or(to);
            head.push(cur);
        }
        // `head` runs from -> .. -> to; the new constraint closes it.
        head.pop();
        let name = |o: OpId| self.ops.get(o).map_or_else(|| format!("{o:?}"), |op| op.name.clone());
        let mut ops = vec![name(to)];
        ops.extend(head.into_iter().map(name));
        Err(IrError::Cycle { graph: self.name.clone(), ops })
    }
}
