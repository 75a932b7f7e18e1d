//! Pruning: remove ops whose results nobody needs.
//!
//! An op is kept when it is *required*:
//! - it has a side effect ([`OpFlags::SIDE_EFFECT`], e.g. host IO);
//! - it calls a graph that (transitively) contains an op with a side effect;
//! - it writes in place into memory that outlives the graph: a variable, a graph
//!   input of a subgraph (visible to callers that mark the input modified), or
//!   anything aliasing those;
//! - it produces a tensor that a required op reads, or a graph output;
//! - it writes in place into a tensor (or an alias of it) that a required op reads.
//!
//! Everything else is erased, with the activations it produced. Variables,
//! constants, streams and graph inputs are never removed.
//!
//! Subgraphs keep their whole signature, with one exception: a graph called from
//! exactly one `Call` op loses the outputs that call's caller never reads (and so
//! the ops computing only them, e.g. the input gradient of a first layer's
//! gradient graph).
//!
//! One pass over the graphs, callers before callees (a callee's outputs only
//! shrink through its callers), each pass over a graph linear in its size.

use std::collections::{HashMap, HashSet};

use crate::Result;
use popart_ir::ops::control::Call;
use popart_ir::{Graph, GraphId, Ir, OpAttrs, OpFlags, OpId, TensorId, TensorKind};
use slotmap::SecondaryMap;

use crate::pipeline::{Pass, PassDetails, PassOutcome, Pipeline};

/// What [`prune`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Names of the erased ops, as `graph/op`, in graph then creation order.
    pub removed_ops: Vec<String>,
    /// Number of activation tensors removed with them.
    pub removed_tensors: usize,
    /// Outputs dropped from single-call-site graphs, as `graph/tensor`.
    pub removed_outputs: Vec<String>,
}

impl PruneReport {
    /// True if nothing was removed.
    pub fn is_empty(&self) -> bool {
        self.removed_ops.is_empty() && self.removed_tensors == 0 && self.removed_outputs.is_empty()
    }

    /// Add what `other` removed to this report.
    pub fn merge(&mut self, other: PruneReport) {
        self.removed_ops.extend(other.removed_ops);
        self.removed_tensors += other.removed_tensors;
        self.removed_outputs.extend(other.removed_outputs);
    }
}

/// [`prune`] as a pipeline [`Pass`] called `prune`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prune;

impl Pass for Prune {
    fn name(&self) -> &str {
        Pipeline::PRUNE
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        let report = prune(ir)?;
        Ok(PassOutcome { changed: !report.is_empty(), details: PassDetails::Pruned(report), notes: Vec::new() })
    }
}

/// Remove every op of every graph that is not required (see the module docs).
/// Returns what was removed; the IR is left valid.
///
/// ```
/// use popart_ir::{Attributes, AttrValue, DataType, HostTensor, Ir, TensorInfo, TensorKind, StreamDirection};
/// let mut ir = Ir::new();
/// let main = ir.main_graph_id();
/// let info = TensorInfo::new(DataType::Float32, [2]);
/// let g = ir.graph_mut(main).unwrap();
/// let x = g.add_tensor("x", info.clone(), TensorKind::Variable(HostTensor::zeros(info.clone()))).unwrap();
/// g.add_tensor("out", info.clone(), TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
/// let used = ir.create_op(main, "Relu", Attributes::new(), &[(0, x)], "used").unwrap();
/// let y = ir.graph(main).unwrap().op(used).unwrap().output(0).unwrap();
/// ir.create_op(main, "HostStore", Attributes::new().with("stream", AttrValue::Str("out".into())), &[(0, y)], "store").unwrap();
/// ir.create_op(main, "Exp", Attributes::new(), &[(0, x)], "unused").unwrap();
/// let report = popart_transforms::prune::prune(&mut ir).unwrap();
/// assert_eq!(report.removed_ops, vec!["main/unused".to_string()]);
/// assert_eq!(ir.main_graph().num_ops(), 2);
/// ```
pub fn prune(ir: &mut Ir) -> Result<PruneReport> {
    // One pass, callers before callees. What a graph requires depends only on its
    // own ops, the graphs with side effects (which pruning never changes) and its
    // outputs; its outputs only shrink through its callers, all pruned before it.
    let callees_first = ir.graphs_callees_first()?;
    let effectful = graphs_with_side_effects(ir, &callees_first);
    let mut sites = call_sites(ir);
    let mut caller_outputs = HashMap::new();
    let mut per_graph: HashMap<GraphId, PruneReport> = HashMap::new();
    for &gid in callees_first.iter().rev() {
        let mut r = PruneReport::default();
        if let Some(s) = sites.remove(&gid) {
            prune_call_outputs(ir, gid, s, &mut caller_outputs, &mut r)?;
        }
        prune_ops(ir, gid, &effectful, &mut r)?;
        if !r.is_empty() {
            per_graph.insert(gid, r);
        }
    }
    // Graph (creation) order, then creation order within a graph.
    let mut report = PruneReport::default();
    for gid in ir.graph_ids() {
        if let Some(r) = per_graph.remove(&gid) {
            report.merge(r);
        }
    }
    Ok(report)
}

/// Remove the ops of graph `gid` that are not required.
fn prune_ops(ir: &mut Ir, gid: GraphId, effectful: &HashSet<GraphId>, report: &mut PruneReport) -> Result<()> {
    let g = ir.graph(gid)?;
    let keep = required_ops(g, gid == ir.main_graph_id(), effectful);
    let doomed: Vec<OpId> = g.ops_in_creation_order().into_iter().filter(|&o| !keep.contains_key(o)).collect();
    if doomed.is_empty() {
        return Ok(());
    }
    let gname = g.name().to_string();
    let mut produced: Vec<TensorId> = Vec::new();
    for &o in &doomed {
        let op = g.op(o)?;
        report.removed_ops.push(format!("{gname}/{}", op.name));
        produced.extend(op.outputs().tensors());
    }
    let g = ir.graph_mut(gid)?;
    for o in doomed {
        g.erase_op(o)?;
    }
    let boundary: HashSet<TensorId> = g.inputs().iter().chain(g.outputs()).copied().collect();
    let mut dangling = Vec::new();
    for t in produced {
        let tensor = g.tensor(t)?;
        if tensor.kind == TensorKind::ActGrad
            && tensor.consumers().is_empty()
            && tensor.producer().is_none()
            && !boundary.contains(&t)
        {
            dangling.push(t);
        }
    }
    dangling.sort();
    dangling.dedup();
    report.removed_tensors += dangling.len();
    Ok(g.remove_tensors(&dangling)?)
}

/// If graph `callee` has one call site left (of `sites`, the ops that called it
/// before pruning) and it is a `Call`, drop the outputs its caller never reads.
/// `caller_outputs` caches the output sets of callers (all pruned already, so
/// their outputs no longer change).
fn prune_call_outputs(
    ir: &mut Ir,
    callee: GraphId,
    sites: Vec<(GraphId, OpId)>,
    caller_outputs: &mut HashMap<GraphId, HashSet<TensorId>>,
    report: &mut PruneReport,
) -> Result<()> {
    // Callers were pruned already: some sites may be gone.
    let live: Vec<(GraphId, OpId)> =
        sites.into_iter().filter(|&(g, o)| ir.graph(g).is_ok_and(|g| g.op(o).is_ok())).collect();
    let &[(caller, call)] = live.as_slice() else { return Ok(()) };
    if callee == caller || !ir.graph(caller)?.op(call)?.is::<Call>() {
        return Ok(());
    }
    let g = ir.graph(caller)?;
    let op = g.op(call)?;
    let graph_outputs = caller_outputs.entry(caller).or_insert_with(|| g.outputs().iter().copied().collect());
    let indices: Vec<usize> = op
        .outputs()
        .iter()
        .filter(|&(_, t)| g.tensor(t).is_ok_and(|t| t.consumers().is_empty()) && !graph_outputs.contains(&t))
        .map(|(i, _)| i as usize)
        .collect();
    if indices.is_empty() {
        return Ok(());
    }
    let f = ir.graph(callee)?;
    // Reported last first.
    for &i in indices.iter().rev() {
        report.removed_outputs.push(format!("{}/{}", f.name(), f.tensor(f.outputs()[i])?.name));
    }
    let gone = remove_call_outputs(ir, caller, call, &indices)?;
    report.removed_tensors += gone.len();
    Ok(ir.graph_mut(caller)?.remove_tensors(&gone)?)
}

/// Every op calling each graph, as (caller graph, op); an `If` calling the same
/// graph in both branches appears twice.
pub(crate) fn call_sites(ir: &Ir) -> HashMap<GraphId, Vec<(GraphId, OpId)>> {
    let mut sites: HashMap<GraphId, Vec<(GraphId, OpId)>> = HashMap::new();
    for g in ir.graphs() {
        for op in g.ops() {
            for c in op.called_graphs() {
                sites.entry(c).or_default().push((g.id(), op.id));
            }
        }
    }
    sites
}

/// The graph a `Call` op calls (its `graph` attribute).
pub(crate) fn call_callee(op: &popart_ir::Op) -> Result<GraphId> {
    Ok(popart_ir::ops::control::CallAttrs::of(op)?.graph)
}

/// Remove outputs `indices` of the `Call` op `call` in graph `caller` and of the
/// graph it calls, in one pass over each; the call's other outputs are renumbered
/// 0..n in order; a callee tensor left without producer, consumers or role is
/// removed. Returns the caller tensors that were those outputs (now without a
/// producer; the caller removes them once nothing reads them).
pub(crate) fn remove_call_outputs(
    ir: &mut Ir,
    caller: GraphId,
    call: OpId,
    indices: &[usize],
) -> Result<Vec<TensorId>> {
    let callee = call_callee(ir.graph(caller)?.op(call)?)?;
    let f = ir.graph_mut(callee)?;
    let removed = f.remove_outputs(indices)?;
    // A former output nothing produces or reads any more goes too, unless it is
    // still a graph input or output.
    let mut orphans: SecondaryMap<TensorId, ()> = SecondaryMap::new();
    for &t in &removed {
        let tensor = f.tensor(t)?;
        if tensor.producer().is_none() && tensor.consumers().is_empty() && tensor.kind == TensorKind::ActGrad {
            orphans.insert(t, ());
        }
    }
    if !orphans.is_empty() {
        for t in f.inputs().iter().chain(f.outputs()) {
            orphans.remove(*t);
        }
    }
    let orphans: Vec<TensorId> = orphans.keys().collect();
    f.remove_tensors(&orphans)?;
    let indices: Vec<u32> = indices.iter().map(|&i| i as u32).collect();
    Ok(ir.graph_mut(caller)?.remove_op_outputs(call, &indices)?)
}

/// Graphs containing, directly or through the graphs they call, an op with a side
/// effect; `callees_first` is [`Ir::graphs_callees_first`].
fn graphs_with_side_effects(ir: &Ir, callees_first: &[GraphId]) -> HashSet<GraphId> {
    let mut out = HashSet::new();
    for g in callees_first.iter().filter_map(|&g| ir.graph(g).ok()) {
        let has = g.ops().any(|op| {
            op.flags().contains(OpFlags::SIDE_EFFECT)
                || (!out.is_empty() && op.attrs.graphs().any(|c| out.contains(&c)))
        });
        if has {
            out.insert(g.id());
        }
    }
    out
}

/// Alias classes of a graph's tensors: tensors joined by the (input, output) alias
/// pairs of in-place ops. Only tensors in a class of two or more appear.
///
/// Dense maps by tensor id (the ids of a graph are allocated densely): linear to
/// build, and cache friendly on large graphs.
pub(crate) struct AliasClasses {
    /// Tensor -> class representative.
    rep: SecondaryMap<TensorId, TensorId>,
    /// Representative -> members.
    members: SecondaryMap<TensorId, Vec<TensorId>>,
}

impl AliasClasses {
    pub(crate) fn new(g: &Graph) -> Self {
        // Union-find with path halving and union by size.
        let mut parent: SecondaryMap<TensorId, (TensorId, u32)> = SecondaryMap::new();
        fn find(parent: &mut SecondaryMap<TensorId, (TensorId, u32)>, mut t: TensorId) -> TensorId {
            while let Some(&(p, _)) = parent.get(t) {
                if p == t {
                    break;
                }
                let grand = parent.get(p).map_or(p, |&(gp, _)| gp);
                parent[t].0 = grand;
                t = grand;
            }
            t
        }
        let mut keys = Vec::new();
        for op in g.ops() {
            for (i, o) in op.alias_pairs() {
                if let (Some(a), Some(b)) = (op.input(i), op.output(o)) {
                    for t in [a, b] {
                        if !parent.contains_key(t) {
                            parent.insert(t, (t, 1));
                            keys.push(t);
                        }
                    }
                    let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
                    if ra != rb {
                        let (sa, sb) = (parent[ra].1, parent[rb].1);
                        let (big, small) = if sa >= sb { (ra, rb) } else { (rb, ra) };
                        parent[small].0 = big;
                        parent[big].1 = sa + sb;
                    }
                }
            }
        }
        let mut rep = SecondaryMap::with_capacity(keys.len());
        let mut members: SecondaryMap<TensorId, Vec<TensorId>> = SecondaryMap::new();
        for t in keys {
            let r = find(&mut parent, t);
            rep.insert(t, r);
            match members.get_mut(r) {
                Some(m) => m.push(t),
                None => {
                    members.insert(r, vec![t]);
                }
            }
        }
        AliasClasses { rep, members }
    }

    pub(crate) fn class_of(&self, t: TensorId) -> TensorId {
        self.rep.get(t).copied().unwrap_or(t)
    }

    pub(crate) fn members(&self, class: TensorId) -> &[TensorId] {
        self.members.get(class).map_or(&[], Vec::as_slice)
    }
}

/// The ops of `g` that are required (see the module docs): one linear walk
/// backwards from the roots.
fn required_ops(g: &Graph, is_main: bool, effectful: &HashSet<GraphId>) -> SecondaryMap<OpId, ()> {
    let classes = AliasClasses::new(g);
    let class_of = |t: TensorId| classes.class_of(t);
    // Classes holding memory that outlives one execution of the graph.
    let mut persistent: SecondaryMap<TensorId, ()> = SecondaryMap::new();
    for t in g.tensors() {
        if t.is_variable() {
            persistent.insert(class_of(t.id), ());
        }
    }
    if !is_main {
        for &t in g.inputs() {
            persistent.insert(class_of(t), ());
        }
    }
    // Modifiers of each alias class.
    let mut modifiers: SecondaryMap<TensorId, Vec<OpId>> = SecondaryMap::new();
    for op in g.ops() {
        for i in op.modified_inputs() {
            if let Some(t) = op.input(i) {
                let c = class_of(t);
                match modifiers.get_mut(c) {
                    Some(m) => m.push(op.id),
                    None => {
                        modifiers.insert(c, vec![op.id]);
                    }
                }
            }
        }
    }

    let mut keep: SecondaryMap<OpId, ()> = SecondaryMap::with_capacity(g.num_ops());
    let mut work: Vec<OpId> = Vec::new();
    let mut needed_classes: SecondaryMap<TensorId, ()> = SecondaryMap::with_capacity(g.num_tensors());
    let mut tensor_work: Vec<TensorId> = g.outputs().to_vec();
    for op in g.ops() {
        let flags = op.flags();
        let root = flags.contains(OpFlags::SIDE_EFFECT)
            || (!effectful.is_empty() && op.attrs.graphs().any(|c| effectful.contains(&c)))
            || op.modified_inputs().iter().filter_map(|&i| op.input(i)).any(|t| persistent.contains_key(class_of(t)));
        if root {
            keep.insert(op.id, ());
            work.push(op.id);
        }
    }
    loop {
        while let Some(o) = work.pop() {
            if let Ok(op) = g.op(o) {
                tensor_work.extend(op.inputs().tensors());
            }
        }
        let Some(t) = tensor_work.pop() else { break };
        let Ok(tensor) = g.tensor(t) else { continue };
        if let Some(p) = tensor.producer() {
            if keep.insert(p.op, ()).is_none() {
                work.push(p.op);
            }
        }
        let c = class_of(t);
        if needed_classes.insert(c, ()).is_none() {
            // Every tensor of an alias class shares memory: their producers and
            // in-place writers determine what a reader of `t` sees.
            tensor_work.extend(classes.members(c).iter().filter(|&&m| m != t));
            for &m in modifiers.get(c).map(Vec::as_slice).unwrap_or(&[]) {
                if keep.insert(m, ()).is_none() {
                    work.push(m);
                }
            }
        }
    }
    keep
}

// Tests: the text filetests in `tests/filetests/prune/` (`cargo test -p tests --test integration filetests::`).
