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

// Tests: the text filetests in `tests/filetests/prune/` (`cargo test -p tests --test filetests`).
