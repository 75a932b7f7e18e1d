//! The alias model of in-place ops and views (PopART's `AliasModel`, reduced
//! to what this IR needs): which tensors of a graph share memory, which ops
//! are ordered against which, and the in-place ambiguity check.
//!
//! Two tensors alias when an op declares an (input, output) pair between them
//! with [`OpDef::aliases`](crate::OpDef::aliases): in-place updates
//! (`AddInplace`, `ReluInplace`...) and views (`ReshapeInplace`,
//! `TransposeInplace`...). Aliasing is transitive: an [`AliasGroups`] class is
//! every tensor reachable through such pairs.
//!
//! An in-place write is **ambiguous** when another op reads (or writes) a
//! tensor of the written tensor's class and neither op is ordered before the
//! other, by data edges or topological constraints: the value it sees would
//! depend on the scheduler. [`check_inplace_ambiguity`] rejects such graphs,
//! as PopXL does by default. Pure view ops (aliases, no write) are not readers:
//! they move no data, their consumers are checked instead.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::{Graph, IrError, OpId, Result, TensorId, TensorKind};

/// The alias classes of one graph's tensors (union-find over the alias pairs
/// of its ops). Tensors that alias nothing are their own class.
#[derive(Clone, Debug, Default)]
pub struct AliasGroups {
    parent: HashMap<TensorId, TensorId>,
    /// The members of each class with aliases, by representative (built once the
    /// unions are done, so [`AliasGroups::members`] costs the class, not the graph).
    classes: HashMap<TensorId, Vec<TensorId>>,
}

impl AliasGroups {
    /// The classes of `graph`.
    pub fn of(graph: &Graph) -> AliasGroups {
        AliasGroups::of_ops(graph, |_| true)
    }

    /// The classes of `graph` formed by the alias pairs of the ops `keep` accepts.
    pub fn of_ops(graph: &Graph, keep: impl Fn(&crate::Op) -> bool) -> AliasGroups {
        let mut groups = AliasGroups::default();
        for op in graph.ops().filter(|o| keep(o)) {
            for (i, o) in op.alias_pairs() {
                if let (Some(a), Some(b)) = (op.input(i), op.output(o)) {
                    groups.union(a, b);
                }
            }
        }
        let mut classes: HashMap<TensorId, Vec<TensorId>> = HashMap::new();
        for &t in groups.parent.keys() {
            classes.entry(groups.find(t)).or_default().push(t);
        }
        groups.classes = classes;
        groups
    }

    /// The representative of `t`'s class.
    pub fn find(&self, mut t: TensorId) -> TensorId {
        while let Some(&p) = self.parent.get(&t) {
            if p == t {
                break;
            }
            t = p;
        }
        t
    }

    fn union(&mut self, a: TensorId, b: TensorId) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent.insert(ra, rb);
            self.parent.entry(rb).or_insert(rb);
        }
    }

    /// True if `t` aliases at least one other tensor.
    pub fn has_aliases(&self, t: TensorId) -> bool {
        self.parent.contains_key(&t)
    }

    /// Every tensor of `t`'s class, `t` included.
    pub fn members(&self, t: TensorId) -> Vec<TensorId> {
        if !self.has_aliases(t) {
            return vec![t];
        }
        self.classes.get(&self.find(t)).cloned().unwrap_or_else(|| vec![t])
    }
}

/// Ops strictly after (`forward`) or before `op` in every schedule: reachable
/// through data edges and topological constraints.
pub fn ordered_from(graph: &Graph, op: OpId, forward: bool) -> Result<HashSet<OpId>> {
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([op]);
    while let Some(o) = queue.pop_front() {
        let node = graph.op(o)?;
        let mut next: Vec<OpId> = Vec::new();
        if forward {
            for t in node.outputs().tensors() {
                next.extend(graph.tensor(t)?.consumers().iter().map(|p| p.op));
            }
            next.extend(graph.topo_cons().afters(o).iter().map(|c| c.op));
        } else {
            for t in node.inputs().tensors() {
                next.extend(graph.tensor(t)?.producer().map(|p| p.op));
            }
            next.extend(graph.topo_cons().befores(o).iter().map(|c| c.op));
        }
        for n in next {
            if seen.insert(n) {
                queue.push_back(n);
            }
        }
    }
    Ok(seen)
}

/// The constant that `t` is (or aliases through the producers' alias pairs),
/// if any: writing `t` in place would write that constant.
pub fn aliased_constant(graph: &Graph, t: TensorId) -> Option<TensorId> {
    let mut stack = vec![t];
    let mut seen = HashSet::new();
    while let Some(t) = stack.pop() {
        if !seen.insert(t) {
            continue;
        }
        let Ok(tensor) = graph.tensor(t) else { continue };
        if matches!(tensor.kind, TensorKind::Constant(_)) {
            return Some(t);
        }
        let Some(p) = tensor.producer() else { continue };
        let Ok(op) = graph.op(p.op) else { continue };
        for (i, o) in op.alias_pairs() {
            if o == p.index {
                stack.extend(op.input(i));
            }
        }
    }
    None
}

/// The remote buffer a remote load or store accesses.
fn remote_access(op: &crate::Op) -> Option<i64> {
    crate::ops::remote::transfer_attrs(op).map(|a| a.remote_buffer)
}

/// Every pair (store, other access) of one remote buffer is ordered.
fn check_remote_ambiguity(graph: &Graph) -> Result<()> {
    let accesses: Vec<(OpId, i64)> = graph.ops().filter_map(|op| Some((op.id, remote_access(op)?))).collect();
    let mut order: Option<Order<'_>> = None;
    for &(store, buf) in &accesses {
        if !graph.op(store)?.is::<crate::ops::remote::RemoteStore>() {
            continue;
        }
        for &(other, b) in &accesses {
            if other == store || b != buf {
                continue;
            }
            let order = match &mut order {
                Some(o) => o,
                None => order.insert(Order::new(graph)?),
            };
            if !order.ordered(store, other)? {
                let what = format!("remote buffer {buf}");
                return Err(IrError::InplaceAmbiguity(Box::new(crate::InplaceAmbiguity {
                    graph: graph.name().to_string(),
                    op: graph.op(store)?.name.clone(),
                    tensor: what.clone(),
                    other: graph.op(other)?.name.clone(),
                    through: what,
                })));
            }
        }
    }
    Ok(())
}

/// Whether two ops of a graph are ordered (one reaches the other through data
/// edges or topological constraints). A topological order says which of the two
/// could reach the other; the ops reachable from that earlier op are searched once
/// and kept, since the pairs to check share their earlier ops (a call reading every
/// weight, checked against each weight's update): the check costs one search per
/// distinct earlier op, not one per in-place write.
struct Order<'g> {
    graph: &'g Graph,
    /// Position of each op in one topological order.
    pos: HashMap<OpId, usize>,
    /// Ops reachable from an op, by op, computed when first asked.
    reach: HashMap<OpId, HashSet<OpId>>,
}

impl<'g> Order<'g> {
    fn new(graph: &'g Graph) -> Result<Self> {
        let pos = graph.schedule()?.into_iter().enumerate().map(|(i, o)| (o, i)).collect();
        Ok(Order { graph, pos, reach: Default::default() })
    }

    fn pos(&self, op: OpId) -> Result<usize> {
        // Every op of the graph is scheduled: a missing one is not the graph's.
        self.pos.get(&op).copied().ok_or_else(|| self.graph.unknown_op(op))
    }

    /// Whether `a` reaches `b` or `b` reaches `a`.
    fn ordered(&mut self, a: OpId, b: OpId) -> Result<bool> {
        let (from, to) = if self.pos(a)? <= self.pos(b)? { (a, b) } else { (b, a) };
        if !self.reach.contains_key(&from) {
            let r = ordered_from(self.graph, from, true)?;
            self.reach.insert(from, r);
        }
        Ok(self.reach.get(&from).is_some_and(|r| r.contains(&to)))
    }
}

/// True for an op that only creates aliases (a view): it declares alias pairs
/// and writes nothing.
fn is_pure_view(graph: &Graph, op: OpId) -> bool {
    graph.op(op).is_ok_and(|o| !o.alias_pairs().is_empty() && o.modified_inputs().is_empty())
}

/// Reject in-place writes whose effect depends on the schedule (see the module
/// docs): for every op writing a tensor in place, every other op consuming a
/// tensor of the same alias class must be ordered before or after it. Remote
/// buffers are written in place too: every other remote load or store of the
/// buffer a `RemoteStore` writes must be ordered against it (the error names
/// `remote buffer N` as the tensor).
pub fn check_inplace_ambiguity(graph: &Graph) -> Result<()> {
    check_remote_ambiguity(graph)?;
    let mut groups: Option<AliasGroups> = None;
    let mut order: Option<Order<'_>> = None;
    for op in graph.ops() {
        let modified = op.modified_inputs();
        if modified.is_empty() {
            continue;
        }
        let groups = groups.get_or_insert_with(|| AliasGroups::of(graph));
        for i in modified {
            let Some(t) = op.input(i) else { continue };
            for u in groups.members(t) {
                for reader in graph.tensor(u)?.consumers().iter().map(|p| p.op) {
                    if reader == op.id || is_pure_view(graph, reader) {
                        continue;
                    }
                    let order = match &mut order {
                        Some(o) => o,
                        None => order.insert(Order::new(graph)?),
                    };
                    if !order.ordered(op.id, reader)? {
                        return Err(IrError::InplaceAmbiguity(Box::new(crate::InplaceAmbiguity {
                            graph: graph.name().to_string(),
                            op: op.name.clone(),
                            tensor: graph.tensor(t)?.name.clone(),
                            other: graph.op(reader)?.name.clone(),
                            through: graph.tensor(u)?.name.clone(),
                        })));
                    }
                }
            }
        }
    }
    Ok(())
}
