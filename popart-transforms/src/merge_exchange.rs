//! `merge_exchange` (PopXL's `popxl.transforms.merge_exchange()`): make the
//! host and remote transfers of a graph adjacent in its schedule where the data
//! dependencies allow, so that the device merges them into one exchange paying
//! one latency (PopXL user guide §9.7.3).
//!
//! **Rule.** The graph's exchange ops (`HostLoad`, `HostStore`, `RemoteLoad`,
//! `RemoteLoadInplace`, `RemoteStore`, `RemoteCodeLoad`) are taken in schedule
//! order and grouped greedily: an exchange joins the current group when it runs
//! on the same tile set and none of its direct predecessors (producers of its
//! inputs and ops constrained before it) is a non-member that depends on a
//! member; otherwise it starts a new group. In a group of two or more, every
//! member is tied to the next (scheduled immediately after it), and every
//! non-member predecessor of a member is constrained before the group's first
//! member, so each member is ready when the one before it is scheduled.
//!
//! **Semantics.** Only topological constraints are added: each one agrees with a
//! topological order of the graph (every constrained-before op does not depend
//! on the group), so the graph stays acyclic and every value is unchanged; only
//! the order of independent ops moves.

use std::collections::HashSet;

use crate::Result;
use popart_ir::ops::all::{HostLoad, HostStore, RemoteCodeLoad, RemoteLoad, RemoteLoadInplace, RemoteStore};
use popart_ir::{Graph, GraphId, Ir, Op, OpId, TileSet};

use crate::pipeline::{Pass, PassOutcome};

/// True for the ops `merge_exchange` groups.
pub fn is_exchange(op: &Op) -> bool {
    op.is::<HostLoad>()
        || op.is::<HostStore>()
        || op.is::<RemoteLoad>()
        || op.is::<RemoteLoadInplace>()
        || op.is::<RemoteStore>()
        || op.is::<RemoteCodeLoad>()
}

/// What [`merge_exchange`] did to one graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeExchangeReport {
    /// Groups of two or more exchange ops made adjacent, in schedule order.
    pub groups: Vec<Vec<OpId>>,
    /// Constraints added (tied and plain).
    pub constraints: usize,
}

/// Direct predecessors of `o`: producers of its inputs and ops constrained before it.
fn predecessors(g: &Graph, op: &Op) -> Vec<OpId> {
    let mut v: Vec<OpId> =
        op.inputs().tensors().filter_map(|t| g.tensor(t).ok().and_then(|t| t.producer()).map(|p| p.op)).collect();
    v.extend(g.topo_cons().befores(op.id).iter().map(|c| c.op));
    v
}

/// Mark every op reachable from `from` (consumers and constrained-after ops), not `from` itself.
fn mark_descendants(g: &Graph, from: OpId, marked: &mut HashSet<OpId>) -> Result<()> {
    let mut stack = vec![from];
    while let Some(o) = stack.pop() {
        let op = g.op(o)?;
        let mut next: Vec<OpId> = Vec::new();
        for t in op.outputs().tensors() {
            next.extend(g.tensor(t)?.consumers().iter().map(|p| p.op));
        }
        next.extend(g.topo_cons().afters(o).iter().map(|c| c.op));
        for s in next {
            if marked.insert(s) {
                stack.push(s);
            }
        }
    }
    Ok(())
}

/// One group being formed.
struct Group {
    members: Vec<OpId>,
    tiles: TileSet,
    /// Ops that depend on a member.
    descendants: HashSet<OpId>,
    /// Non-member predecessors of members after the first: constrained before the first.
    before_first: Vec<OpId>,
}

/// Make the exchanges of graph `graph` adjacent where dependencies allow (see
/// the module docs). Returns the groups formed.
///
/// ```
/// use popart_ir::{AttrValue, Attributes, DataType, Ir, StreamDirection, TensorInfo, TensorKind};
/// let mut ir = Ir::new();
/// let main = ir.main_graph_id();
/// let info = TensorInfo::new(DataType::Float32, [4]);
/// let g = ir.main_graph_mut();
/// for s in ["a", "b"] {
///     g.add_tensor(s, info.clone(), TensorKind::Stream(StreamDirection::HostToDevice)).unwrap();
/// }
/// let load = |ir: &mut Ir, s: &str| {
///     let op = ir.create_op(main, "HostLoad", Attributes::new().with("stream", AttrValue::Str(s.into())), &[], s).unwrap();
///     ir.main_graph().op(op).unwrap().output(0).unwrap()
/// };
/// let a = load(&mut ir, "a");
/// let ra = ir.create_op(main, "Relu", Attributes::new(), &[(0, a)], "ra").unwrap();
/// let b = load(&mut ir, "b");
/// let report = popart_transforms::merge_exchange::merge_exchange(&mut ir, main).unwrap();
/// assert_eq!(report.groups.len(), 1);
/// let sched = ir.main_graph().schedule().unwrap();
/// let pos = |o| sched.iter().position(|&x| x == o).unwrap();
/// let (la, lb) = (report.groups[0][0], report.groups[0][1]);
/// assert_eq!(pos(lb), pos(la) + 1);
/// # let _ = (ra, b);
/// ```
pub fn merge_exchange(ir: &mut Ir, graph: GraphId) -> Result<MergeExchangeReport> {
    let g = ir.graph(graph)?;
    let schedule = g.schedule()?;
    let mut groups: Vec<Group> = Vec::new();
    for &o in &schedule {
        let op = g.op(o)?;
        if !is_exchange(op) {
            continue;
        }
        let tiles = op.placement.tile_set;
        let preds = predecessors(g, op);
        let joins = groups.last().is_some_and(|grp| {
            grp.tiles == tiles && preds.iter().all(|p| grp.members.contains(p) || !grp.descendants.contains(p))
        });
        match groups.last_mut() {
            Some(grp) if joins => {
                grp.before_first.extend(preds.into_iter().filter(|p| !grp.members.contains(p)));
                grp.members.push(o);
                mark_descendants(g, o, &mut grp.descendants)?;
            }
            _ => {
                let mut descendants = HashSet::new();
                mark_descendants(g, o, &mut descendants)?;
                groups.push(Group { members: vec![o], tiles, descendants, before_first: Vec::new() });
            }
        }
    }
    let mut report = MergeExchangeReport::default();
    let g = ir.graph_mut(graph)?;
    for grp in groups.into_iter().filter(|grp| grp.members.len() > 1) {
        let first = grp.members[0];
        let mut seen = HashSet::new();
        for p in grp.before_first.into_iter().filter(|&p| p != first) {
            if seen.insert(p) && !g.topo_cons().contains(p, first) {
                g.add_topo_con(p, first)?;
                report.constraints += 1;
            }
        }
        for pair in grp.members.windows(2) {
            g.add_tied_topo_con(pair[0], pair[1])?;
            report.constraints += 1;
        }
        report.groups.push(grp.members);
    }
    Ok(report)
}

/// [`merge_exchange`] over every graph of an IR, as a pipeline pass
/// (`merge-exchange`; not in the default pipeline: PopXL applies it on request).
#[derive(Clone, Copy, Debug, Default)]
pub struct MergeExchange;

impl MergeExchange {
    /// The pass's name.
    pub const NAME: &'static str = "merge-exchange";
}

impl Pass for MergeExchange {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        let mut outcome = PassOutcome::unchanged();
        for id in ir.graph_ids() {
            let report = merge_exchange(ir, id)?;
            if !report.groups.is_empty() {
                outcome.changed = true;
                let name = ir.graph(id)?.name().to_string();
                outcome.notes.push(format!("{name}: {} exchange groups", report.groups.len()));
            }
        }
        Ok(outcome)
    }
}
