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
//! gradient graph). Pruning repeats until nothing changes.

use std::collections::{HashMap, HashSet};

use popart_ir::ops::control::Call;
use popart_ir::{Graph, GraphId, Ir, OpFlags, OpId, Result, TensorId, TensorKind};

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
    let mut report = PruneReport::default();
    loop {
        prune_ops(ir, &mut report)?;
        if prune_call_outputs(ir, &mut report)? == 0 {
            return Ok(report);
        }
    }
}

/// One pass of op removal over every graph.
fn prune_ops(ir: &mut Ir, report: &mut PruneReport) -> Result<()> {
    let effectful = graphs_with_side_effects(ir)?;
    for gid in ir.graph_ids() {
        let g = ir.graph(gid)?;
        let keep = required_ops(g, gid == ir.main_graph_id(), &effectful);
        let mut doomed: Vec<OpId> = g.ops_in_creation_order().into_iter().filter(|o| !keep.contains(o)).collect();
        if doomed.is_empty() {
            continue;
        }
        let gname = g.name().to_string();
        let mut produced: Vec<TensorId> = Vec::new();
        for &o in &doomed {
            let op = g.op(o)?;
            report.removed_ops.push(format!("{gname}/{}", op.name));
            produced.extend(op.outputs().tensors());
        }
        let g = ir.graph_mut(gid)?;
        for o in doomed.drain(..) {
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
        g.remove_tensors(&dangling)?;
    }
    Ok(())
}

/// Drop the outputs of single-call-site graphs that the caller never reads;
/// returns how many were dropped.
fn prune_call_outputs(ir: &mut Ir, report: &mut PruneReport) -> Result<usize> {
    let sites = call_sites(ir);
    let mut dropped = 0;
    for callee in ir.graph_ids() {
        let Some(&[(caller, call)]) = sites.get(&callee).map(Vec::as_slice) else { continue };
        if callee == caller || !ir.graph(caller)?.op(call)?.is::<Call>() {
            continue;
        }
        let g = ir.graph(caller)?;
        let op = g.op(call)?;
        let graph_outputs: HashSet<TensorId> = g.outputs().iter().copied().collect();
        let indices: Vec<usize> = op
            .outputs()
            .iter()
            .filter(|&(_, t)| g.tensor(t).is_ok_and(|t| t.consumers().is_empty()) && !graph_outputs.contains(&t))
            .map(|(i, _)| i as usize)
            .collect();
        if indices.is_empty() {
            continue;
        }
        let f = ir.graph(callee)?;
        // Reported last first.
        for &i in indices.iter().rev() {
            report.removed_outputs.push(format!("{}/{}", f.name(), f.tensor(f.outputs()[i])?.name));
        }
        let gone = remove_call_outputs(ir, caller, call, &indices)?;
        report.removed_tensors += gone.len();
        ir.graph_mut(caller)?.remove_tensors(&gone)?;
        dropped += indices.len();
    }
    Ok(dropped)
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
    let boundary: HashSet<TensorId> = f.inputs().iter().chain(f.outputs()).copied().collect();
    let mut orphans = Vec::new();
    for t in removed {
        // A former output nothing produces or reads any more goes too.
        let tensor = f.tensor(t)?;
        let orphan = tensor.producer().is_none() && tensor.consumers().is_empty() && tensor.kind == TensorKind::ActGrad;
        if orphan && !boundary.contains(&t) {
            orphans.push(t);
        }
    }
    orphans.sort();
    orphans.dedup();
    f.remove_tensors(&orphans)?;
    let g = ir.graph_mut(caller)?;
    let outs: Vec<(u32, TensorId)> = g.op(call)?.outputs().iter().collect();
    let mut drop = vec![false; outs.iter().map(|&(i, _)| i as usize + 1).max().unwrap_or(0)];
    for &i in indices {
        if let Some(d) = drop.get_mut(i) {
            *d = true;
        }
    }
    let mut removed = Vec::new();
    let mut next = 0u32;
    for (i, t) in outs {
        if drop[i as usize] {
            g.disconnect_output(call, i)?;
            removed.push(t);
        } else {
            if i != next {
                g.disconnect_output(call, i)?;
                g.connect_output(call, next, t)?;
            }
            next += 1;
        }
    }
    Ok(removed)
}

/// Graphs containing, directly or through the graphs they call, an op with a side effect.
fn graphs_with_side_effects(ir: &Ir) -> Result<HashSet<GraphId>> {
    let mut out = HashSet::new();
    for gid in ir.graphs_callees_first()? {
        let g = ir.graph(gid)?;
        let has = g
            .ops()
            .any(|op| op.flags().contains(OpFlags::SIDE_EFFECT) || op.called_graphs().iter().any(|c| out.contains(c)));
        if has {
            out.insert(gid);
        }
    }
    Ok(out)
}

/// Alias classes of a graph's tensors: tensors joined by the (input, output) alias
/// pairs of in-place ops. Only tensors in a class of two or more appear.
pub(crate) struct AliasClasses {
    /// Tensor -> class representative.
    rep: HashMap<TensorId, TensorId>,
    /// Representative -> members.
    members: HashMap<TensorId, Vec<TensorId>>,
}

impl AliasClasses {
    pub(crate) fn new(g: &Graph) -> Self {
        // Union-find with path halving and union by size.
        let mut parent: HashMap<TensorId, TensorId> = HashMap::new();
        let mut size: HashMap<TensorId, usize> = HashMap::new();
        fn find(parent: &mut HashMap<TensorId, TensorId>, mut t: TensorId) -> TensorId {
            while let Some(&p) = parent.get(&t) {
                if p == t {
                    break;
                }
                let grand = parent.get(&p).copied().unwrap_or(p);
                parent.insert(t, grand);
                t = grand;
            }
            t
        }
        for op in g.ops() {
            for (i, o) in op.def().aliases(&op.attrs) {
                if let (Some(a), Some(b)) = (op.input(i), op.output(o)) {
                    for t in [a, b] {
                        parent.entry(t).or_insert(t);
                        size.entry(t).or_insert(1);
                    }
                    let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
                    if ra != rb {
                        let (big, small) = if size[&ra] >= size[&rb] { (ra, rb) } else { (rb, ra) };
                        parent.insert(small, big);
                        *size.get_mut(&big).expect("sized") += size[&small];
                    }
                }
            }
        }
        let keys: Vec<TensorId> = parent.keys().copied().collect();
        let mut rep = HashMap::with_capacity(keys.len());
        let mut members: HashMap<TensorId, Vec<TensorId>> = HashMap::new();
        for t in keys {
            let r = find(&mut parent, t);
            rep.insert(t, r);
            members.entry(r).or_default().push(t);
        }
        AliasClasses { rep, members }
    }

    pub(crate) fn class_of(&self, t: TensorId) -> TensorId {
        self.rep.get(&t).copied().unwrap_or(t)
    }

    pub(crate) fn members(&self, class: TensorId) -> &[TensorId] {
        self.members.get(&class).map_or(&[], Vec::as_slice)
    }
}

fn required_ops(g: &Graph, is_main: bool, effectful: &HashSet<GraphId>) -> HashSet<OpId> {
    let classes = AliasClasses::new(g);
    let class_of = |t: TensorId| classes.class_of(t);
    // Classes holding memory that outlives one execution of the graph.
    let mut persistent: HashSet<TensorId> = HashSet::new();
    for t in g.tensors() {
        if t.is_variable() {
            persistent.insert(class_of(t.id));
        }
    }
    if !is_main {
        persistent.extend(g.inputs().iter().map(|&t| class_of(t)));
    }
    // Modifiers of each alias class.
    let mut modifiers: HashMap<TensorId, Vec<OpId>> = HashMap::new();
    for op in g.ops() {
        for i in op.modified_inputs() {
            if let Some(t) = op.input(i) {
                modifiers.entry(class_of(t)).or_default().push(op.id);
            }
        }
    }

    let mut keep: HashSet<OpId> = HashSet::new();
    let mut work: Vec<OpId> = Vec::new();
    let mut needed_classes: HashSet<TensorId> = HashSet::new();
    let mut tensor_work: Vec<TensorId> = g.outputs().to_vec();
    for op in g.ops() {
        let flags = op.flags();
        let root = flags.contains(OpFlags::SIDE_EFFECT)
            || op.called_graphs().iter().any(|c| effectful.contains(c))
            || op.modified_inputs().iter().filter_map(|&i| op.input(i)).any(|t| persistent.contains(&class_of(t)));
        if root {
            keep.insert(op.id);
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
            if keep.insert(p.op) {
                work.push(p.op);
            }
        }
        let c = class_of(t);
        if needed_classes.insert(c) {
            // Every tensor of an alias class shares memory: their producers and
            // in-place writers determine what a reader of `t` sees.
            tensor_work.extend(classes.members(c).iter().filter(|&&m| m != t));
            for &m in modifiers.get(&c).map(Vec::as_slice).unwrap_or(&[]) {
                if keep.insert(m) {
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
