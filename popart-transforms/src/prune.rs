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

use popart_ir::{Graph, GraphId, Ir, OpFlags, OpId, Result, TensorId, TensorKind};
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
    g.remove_tensors(&dangling)
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
    if callee == caller || ir.graph(caller)?.op(call)?.op_type() != "Call" {
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
    ir.graph_mut(caller)?.remove_tensors(&gone)
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
    let callee = ir.graph(caller)?.op(call)?.called_graphs()[0];
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
    ir.graph_mut(caller)?.remove_op_outputs(call, &indices)
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
            for (i, o) in op.def().aliases(&op.attrs) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use popart_ir::{AttrValue, Attributes, DataType, HostTensor, StreamDirection, TensorInfo};

    fn f32x2() -> TensorInfo {
        TensorInfo::new(DataType::Float32, [2])
    }

    fn out(ir: &Ir, g: GraphId, op: OpId) -> TensorId {
        ir.graph(g).unwrap().op(op).unwrap().output(0).unwrap()
    }

    fn op_names(ir: &Ir, g: GraphId) -> Vec<String> {
        let g = ir.graph(g).unwrap();
        g.ops_in_creation_order().into_iter().map(|o| g.op(o).unwrap().name.clone()).collect()
    }

    fn store(ir: &mut Ir, t: TensorId, stream: &str) {
        let main = ir.main_graph_id();
        ir.graph_mut(main)
            .unwrap()
            .add_tensor(stream, f32x2(), TensorKind::Stream(StreamDirection::DeviceToHost))
            .unwrap();
        let attrs = Attributes::new().with("stream", AttrValue::Str(stream.into()));
        ir.create_op(main, "HostStore", attrs, &[(0, t)], "store").unwrap();
    }

    #[test]
    fn removes_dead_chain_and_keeps_store_inputs() {
        let mut ir = Ir::new();
        let main = ir.main_graph_id();
        let x = ir.main_graph_mut().add_tensor("x", f32x2(), TensorKind::Constant(HostTensor::zeros(f32x2()))).unwrap();
        let a = ir.create_op(main, "Relu", Attributes::new(), &[(0, x)], "a").unwrap();
        let b = ir.create_op(main, "Exp", Attributes::new(), &[(0, out(&ir, main, a))], "b").unwrap();
        let dead1 = ir.create_op(main, "Neg", Attributes::new(), &[(0, out(&ir, main, a))], "dead1").unwrap();
        ir.create_op(main, "Neg", Attributes::new(), &[(0, out(&ir, main, dead1))], "dead2").unwrap();
        let bt = out(&ir, main, b);
        store(&mut ir, bt, "o");
        let r = prune(&mut ir).unwrap();
        assert_eq!(r.removed_ops, vec!["main/dead1", "main/dead2"]);
        assert_eq!(r.removed_tensors, 2);
        assert_eq!(op_names(&ir, main), vec!["a", "b", "store"]);
        ir.verify().unwrap();
        // Idempotent.
        assert!(prune(&mut ir).unwrap().is_empty());
    }

    #[test]
    fn keeps_variable_updates_and_what_they_read() {
        let mut ir = Ir::new();
        let main = ir.main_graph_id();
        let v = ir.main_graph_mut().add_tensor("v", f32x2(), TensorKind::Variable(HostTensor::zeros(f32x2()))).unwrap();
        let c = ir.main_graph_mut().add_tensor("c", f32x2(), TensorKind::Constant(HostTensor::zeros(f32x2()))).unwrap();
        let e = ir.create_op(main, "Exp", Attributes::new(), &[(0, c)], "e").unwrap();
        let upd =
            ir.create_op(main, "AddInplace", Attributes::new(), &[(0, v), (1, out(&ir, main, e))], "upd").unwrap();
        // A second in-place write through the alias of the variable.
        ir.create_op(main, "AddInplace", Attributes::new(), &[(0, out(&ir, main, upd)), (1, c)], "upd2").unwrap();
        ir.create_op(main, "Neg", Attributes::new(), &[(0, v)], "dead").unwrap();
        let r = prune(&mut ir).unwrap();
        assert_eq!(r.removed_ops, vec!["main/dead"]);
        assert_eq!(op_names(&ir, main), vec!["e", "upd", "upd2"]);
    }

    #[test]
    fn keeps_in_place_writers_of_needed_activations() {
        let mut ir = Ir::new();
        let main = ir.main_graph_id();
        let c = ir.main_graph_mut().add_tensor("c", f32x2(), TensorKind::Constant(HostTensor::zeros(f32x2()))).unwrap();
        let a = ir.create_op(main, "Exp", Attributes::new(), &[(0, c)], "a").unwrap();
        let at = out(&ir, main, a);
        ir.create_op(main, "AddInplace", Attributes::new(), &[(0, at), (1, c)], "bump").unwrap();
        let unused_writer_target = ir.create_op(main, "Exp", Attributes::new(), &[(0, c)], "t").unwrap();
        let tt = out(&ir, main, unused_writer_target);
        ir.create_op(main, "AddInplace", Attributes::new(), &[(0, tt), (1, c)], "bump_dead").unwrap();
        store(&mut ir, at, "o");
        let r = prune(&mut ir).unwrap();
        assert_eq!(r.removed_ops, vec!["main/t", "main/bump_dead"]);
    }

    /// A graph with one `Call` site loses the outputs its caller never reads, and the
    /// ops computing only them; with two sites, or under `Repeat`, it keeps them all.
    #[test]
    fn single_call_site_graphs_lose_unread_outputs() {
        let build = |sites: usize, repeat: bool| {
            let mut ir = Ir::new();
            let main = ir.main_graph_id();
            let sub = ir.create_graph("sub").unwrap();
            // Three inputs, so that a Repeat may call it too (outputs are loop-carried).
            let xs: Vec<TensorId> =
                (0..3).map(|k| ir.graph_mut(sub).unwrap().add_input(&format!("x{k}"), f32x2()).unwrap()).collect();
            let a = ir.create_op(sub, "Relu", Attributes::new(), &[(0, xs[0])], "a").unwrap();
            let b = ir.create_op(sub, "Exp", Attributes::new(), &[(0, xs[1])], "b").unwrap();
            let c = ir.create_op(sub, "Neg", Attributes::new(), &[(0, xs[2])], "c").unwrap();
            for o in [a, b, c] {
                let t = out(&ir, sub, o);
                ir.graph_mut(sub).unwrap().add_output(t).unwrap();
            }
            let v =
                ir.main_graph_mut().add_tensor("v", f32x2(), TensorKind::Constant(HostTensor::zeros(f32x2()))).unwrap();
            let mut calls = Vec::new();
            for k in 0..sites {
                let (ty, attrs) = if repeat {
                    ("Repeat", Attributes::new().with("graph", AttrValue::Graph(sub)).with("count", AttrValue::Int(1)))
                } else {
                    ("Call", Attributes::new().with("graph", AttrValue::Graph(sub)))
                };
                let call = ir.create_op(main, ty, attrs, &[(0, v), (1, v), (2, v)], &format!("call{k}")).unwrap();
                calls.push(call);
            }
            // Output 1 (b) of the first site is read, and output 0 of a second site.
            let t = ir.graph(main).unwrap().op(calls[0]).unwrap().output(1).unwrap();
            store(&mut ir, t, "o");
            if let Some(&second) = calls.get(1) {
                let t = ir.graph(main).unwrap().op(second).unwrap().output(0).unwrap();
                store(&mut ir, t, "o2");
            }
            (ir, sub, calls[0])
        };
        let (mut ir, sub, call) = build(1, false);
        let r = prune(&mut ir).unwrap();
        assert_eq!(r.removed_outputs, vec!["sub/c:0", "sub/a:0"]);
        assert_eq!(r.removed_ops, vec!["sub/a", "sub/c"]);
        assert_eq!(op_names(&ir, sub), vec!["b"]);
        let call = ir.main_graph().op(call).unwrap();
        assert_eq!(call.outputs().len(), 1);
        assert_eq!(ir.main_graph().tensor(call.output(0).unwrap()).unwrap().consumers().len(), 1);
        ir.verify().unwrap();
        assert!(prune(&mut ir).unwrap().is_empty());
        for (sites, repeat) in [(2, false), (1, true)] {
            let (mut ir, sub, _) = build(sites, repeat);
            let r = prune(&mut ir).unwrap();
            assert!(r.removed_outputs.is_empty(), "sites {sites}, repeat {repeat}");
            assert_eq!(op_names(&ir, sub), vec!["a", "b", "c"]);
            ir.verify().unwrap();
        }
    }

    #[test]
    fn subgraphs_keep_outputs_and_calls_with_host_io_are_kept() {
        let mut ir = Ir::new();
        let main = ir.main_graph_id();
        ir.main_graph_mut().add_tensor("in", f32x2(), TensorKind::Stream(StreamDirection::HostToDevice)).unwrap();
        let sub = ir.create_graph("sub").unwrap();
        let x = ir.graph_mut(sub).unwrap().add_input("x", f32x2()).unwrap();
        let r = ir.create_op(sub, "Relu", Attributes::new(), &[(0, x)], "r").unwrap();
        ir.create_op(sub, "Neg", Attributes::new(), &[(0, x)], "dead_in_sub").unwrap();
        let rt = out(&ir, sub, r);
        ir.graph_mut(sub).unwrap().add_output(rt).unwrap();
        // A graph whose only op loads from the host: calling it is a side effect.
        let loader = ir.create_graph("loader").unwrap();
        let attrs = Attributes::new().with("stream", AttrValue::Str("in".into()));
        let l = ir.create_op(loader, "HostLoad", attrs, &[], "load").unwrap();
        let lt = out(&ir, loader, l);
        ir.graph_mut(loader).unwrap().add_output(lt).unwrap();

        let c = ir.main_graph_mut().add_tensor("c", f32x2(), TensorKind::Constant(HostTensor::zeros(f32x2()))).unwrap();
        ir.create_op(main, "Call", Attributes::new().with("graph", AttrValue::Graph(sub)), &[(0, c)], "call_dead")
            .unwrap();
        ir.create_op(main, "Call", Attributes::new().with("graph", AttrValue::Graph(loader)), &[], "call_load")
            .unwrap();
        let r = prune(&mut ir).unwrap();
        assert_eq!(r.removed_ops, vec!["main/call_dead", "sub/dead_in_sub"]);
        assert_eq!(op_names(&ir, sub), vec!["r"]);
        assert_eq!(op_names(&ir, main), vec!["call_load"]);
        ir.verify().unwrap();
    }

    #[test]
    fn subgraph_writes_to_its_inputs_are_kept() {
        let mut ir = Ir::new();
        let sub = ir.create_graph("sub").unwrap();
        let x = ir.graph_mut(sub).unwrap().add_input("x", f32x2()).unwrap();
        let y = ir.graph_mut(sub).unwrap().add_input("y", f32x2()).unwrap();
        ir.create_op(sub, "AddInplace", Attributes::new(), &[(0, x), (1, y)], "write_x").unwrap();
        prune(&mut ir).unwrap();
        assert_eq!(op_names(&ir, sub), vec!["write_x"]);
    }
}
