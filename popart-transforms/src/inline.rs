//! `inline-calls`: replace `Call` ops by a copy of the ops of the graphs they call.
//!
//! PopART lowers every subgraph to one Poplar function, called from each call site
//! through copies: the call site's inputs are copied into the function's input
//! tensors and its outputs copied out. That is what an IPU needs (one copy of the
//! code), but on a CPU those copies are pure overhead: a transformer whose block is
//! one graph called per layer moves every activation of every layer twice per step.
//! Inlining gives the parent graph the callee's ops, reading the call's inputs and
//! producing the call's outputs directly, so the scheduler and the memory plan see
//! one timeline and reuse buffers across layers.
//!
//! A call is inlined only when that keeps the program's meaning exactly:
//! - the op is a `Call` (bodies of `Repeat` and branches of `If` stay graphs, but
//!   calls inside them are inlined into them);
//! - the call modifies none of its inputs (no `modified` input, no in-place write
//!   inside the callee to anything aliasing a callee input: by-value inputs would
//!   otherwise be written through);
//! - every callee output is produced by an op of the callee, appears once among
//!   the outputs and aliases no callee input (a pass-through or view output would
//!   otherwise alias the caller's tensor);
//! - no `RemoteCodeLoad` loads the callee (the program manages its code).
//!
//! The call's output tensors keep their ids and names (the callee's producers are
//! connected to them), so consumers, graph outputs and session handles are
//! unchanged. Topological constraints of the callee are copied; those of the call
//! op go to the inlined ops with no producer among the inlined ops (constraints
//! before the call) and to those whose outputs no inlined op reads (after the call).
//! Inlined ops are named `<call op>/<callee op>`; a callee's constants are copied
//! into a caller once, however many of its calls are inlined there.

use std::collections::{HashMap, HashSet};

use popart_ir::alias::AliasGroups;
use popart_ir::ops::control::{Call, CallAttrs};
use popart_ir::ops::remote::{RemoteCodeLoad, RemoteCodeLoadAttrs};
use popart_ir::{Attributes, GraphId, Ir, Op, OpAttrs, OpDef, OpId, Placement, TensorId, TensorInfo, TensorKind};

use crate::pipeline::{Pass, PassOutcome};
use crate::{Malformed, Result};

/// The `inline-calls` pass (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct InlineCalls;

impl InlineCalls {
    /// The pass's name in a pipeline.
    pub const NAME: &'static str = "inline-calls";
}

impl Pass for InlineCalls {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, ir: &mut Ir) -> Result<PassOutcome> {
        let mut inlinable: HashMap<GraphId, bool> = HashMap::new();
        // A graph whose code the program loads explicitly stays a function.
        let code_loaded: HashSet<GraphId> = ir.graphs().flat_map(|g| g.ops()).filter_map(code_loaded_graph).collect();
        let mut constants = ConstantCopies::new();
        let mut count = 0usize;
        // Callees first, so a graph called from many places is inlined into after
        // its own calls were inlined into it (each nested op is copied once per level).
        for g in ir.graphs_callees_first()? {
            let calls: Vec<(OpId, GraphId)> = {
                let graph = ir.graph(g)?;
                graph
                    .ops_in_creation_order()
                    .into_iter()
                    .filter_map(|o| {
                        let op = graph.op(o).ok()?;
                        if !op.is::<Call>() || !op.modified_inputs().is_empty() {
                            return None;
                        }
                        CallAttrs::of(op).ok().map(|a| (o, a.graph))
                    })
                    .collect()
            };
            for (call, callee) in calls {
                let ok = match inlinable.get(&callee) {
                    Some(&ok) => ok,
                    None => {
                        let ok = !code_loaded.contains(&callee) && can_inline(ir, callee)?;
                        inlinable.insert(callee, ok);
                        ok
                    }
                };
                if ok {
                    inline_call(ir, g, call, callee, &mut constants)?;
                    count += 1;
                }
            }
        }
        Ok(PassOutcome::changed(count > 0).with_note(format!("{count} calls inlined")))
    }
}

/// The graph a `RemoteCodeLoad` loads (`None` for other ops).
fn code_loaded_graph(op: &Op) -> Option<GraphId> {
    if !op.is::<RemoteCodeLoad>() {
        return None;
    }
    RemoteCodeLoadAttrs::of(op).ok().map(|a| a.graph)
}

/// Whether calls of `callee` can be inlined (see the module docs).
fn can_inline(ir: &Ir, callee: GraphId) -> Result<bool> {
    // A graph whose code the program loads explicitly stays a function.
    let code_loaded = ir.graphs().any(|g| g.ops().any(|op| code_loaded_graph(op) == Some(callee)));
    if code_loaded {
        return Ok(false);
    }
    let g = ir.graph(callee)?;
    let aliases = AliasGroups::of(g);
    let input_classes: Vec<TensorId> = g.inputs().iter().map(|&t| aliases.find(t)).collect();
    for op in g.ops() {
        for i in op.modified_inputs() {
            if let Some(t) = op.input(i) {
                if input_classes.contains(&aliases.find(t)) {
                    return Ok(false);
                }
            }
        }
    }
    let outputs = g.outputs();
    for (k, &t) in outputs.iter().enumerate() {
        let tensor = g.tensor(t)?;
        if tensor.producer().is_none()
            || outputs[..k].contains(&t)
            || input_classes.contains(&aliases.find(t))
            || !matches!(tensor.kind, TensorKind::ActGrad)
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The caller's copy of each callee constant, per (caller, callee, constant): a
/// graph inlined at many sites of one caller gets one copy of its constants.
type ConstantCopies = HashMap<(GraphId, GraphId, TensorId), TensorId>;

/// One op of the callee, as copied into the caller.
struct OpCopy {
    id: OpId,
    def: &'static dyn OpDef,
    attrs: Attributes,
    name: String,
    placement: Placement,
    inputs: Vec<(u32, TensorId)>,
    outputs: Vec<(u32, TensorId, String, TensorInfo)>,
}

/// Replace `call` (in `parent`, calling `callee`) by copies of `callee`'s ops.
fn inline_call(
    ir: &mut Ir,
    parent: GraphId,
    call: OpId,
    callee: GraphId,
    constant_copies: &mut ConstantCopies,
) -> Result<()> {
    // Read everything needed from the callee first (the caller is mutated next).
    let g = ir.graph(callee)?;
    let order = g.schedule()?;
    let ops: Vec<OpCopy> = order
        .iter()
        .map(|&o| {
            let op = g.op(o)?;
            let outputs = op
                .outputs()
                .iter()
                .map(|(i, t)| {
                    let t = g.tensor(t)?;
                    Ok((i, t.id, t.name.clone(), t.info.clone()))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(OpCopy {
                id: o,
                def: op.def(),
                attrs: op.attrs.clone(),
                name: op.name.clone(),
                placement: op.placement,
                inputs: op.inputs().iter().collect(),
                outputs,
            })
        })
        .collect::<Result<_>>()?;
    let callee_inputs = g.inputs().to_vec();
    let callee_outputs = g.outputs().to_vec();
    let callee_name = g.name().to_string();
    let constants: Vec<(TensorId, String, TensorInfo, TensorKind)> =
        g.constants().map(|t| (t.id, t.name.clone(), t.info.clone(), t.kind.clone())).collect();
    let internal_cons: Vec<(OpId, OpId, bool)> = g.topo_cons().edges().collect();

    let pg = ir.graph_mut(parent)?;
    let call_op = pg.op(call)?.clone();
    let prefix = call_op.name.clone();
    let befores: Vec<(OpId, bool)> = pg.topo_cons().befores(call).iter().map(|c| (c.op, c.tied)).collect();
    let afters: Vec<(OpId, bool)> = pg.topo_cons().afters(call).iter().map(|c| (c.op, c.tied)).collect();

    // Callee tensor -> caller tensor.
    let mut map: HashMap<TensorId, TensorId> = HashMap::with_capacity(ops.len() * 2);
    for (i, &t) in callee_inputs.iter().enumerate() {
        let parent_t = call_op.input(i as u32).ok_or_else(|| Malformed::MissingInput {
            op: prefix.clone(),
            index: i as u32,
            context: "for its graph's input",
        })?;
        map.insert(t, parent_t);
    }
    for (t, name, info, kind) in constants {
        let copy = match constant_copies.get(&(parent, callee, t)) {
            Some(&c) => c,
            None => {
                let name = pg.unique_tensor_name(&format!("{prefix}/{name}"));
                let c = pg.add_tensor(&name, info, kind)?;
                constant_copies.insert((parent, callee, t), c);
                c
            }
        };
        map.insert(t, copy);
    }
    // The call's outputs are kept (erasing the call leaves them unproduced): the
    // callee's producers will produce them.
    let outputs_of_call: HashMap<TensorId, TensorId> =
        callee_outputs.iter().enumerate().filter_map(|(j, &t)| Some((t, call_op.output(j as u32)?))).collect();
    pg.erase_op(call)?;

    let mut new_ops: HashMap<OpId, OpId> = HashMap::with_capacity(ops.len());
    let mut produced_inside: Vec<bool> = Vec::with_capacity(ops.len());
    let mut read_inside: HashSet<OpId> = HashSet::new();
    let producer_of: HashMap<TensorId, OpId> =
        ops.iter().flat_map(|c| c.outputs.iter().map(move |o| (o.1, c.id))).collect();
    for c in &ops {
        let new = pg.add_op(c.def, c.attrs.clone(), &format!("{prefix}/{}", c.name));
        pg.set_op_placement(new, c.placement)?;
        let mut any_inside = false;
        for &(i, t) in &c.inputs {
            if let Some(&p) = producer_of.get(&t) {
                any_inside = true;
                read_inside.insert(p);
            }
            let pt = *map.get(&t).ok_or_else(|| Malformed::UncopiedTensor {
                what: format!("op `{}`", c.name),
                graph: callee_name.clone(),
            })?;
            pg.connect_input(new, i, pt)?;
        }
        produced_inside.push(any_inside);
        for (i, t, name, info) in &c.outputs {
            let pt = match outputs_of_call.get(t) {
                Some(&out) => {
                    pg.connect_output(new, *i, out)?;
                    out
                }
                None => pg.create_output(new, *i, &format!("{prefix}/{name}"), info.clone())?,
            };
            map.insert(*t, pt);
        }
        new_ops.insert(c.id, new);
    }
    for (b, a, tied) in internal_cons {
        if let (Some(&b), Some(&a)) = (new_ops.get(&b), new_ops.get(&a)) {
            add_con(pg, b, a, tied)?;
        }
    }
    for (k, c) in ops.iter().enumerate() {
        let new = new_ops[&c.id];
        if !produced_inside[k] {
            for &(b, tied) in &befores {
                add_con(pg, b, new, tied)?;
            }
        }
        if !read_inside.contains(&c.id) {
            for &(a, tied) in &afters {
                add_con(pg, new, a, tied)?;
            }
        }
    }
    Ok(())
}

fn add_con(g: &mut popart_ir::Graph, before: OpId, after: OpId, tied: bool) -> Result<()> {
    // The constraints agree with the schedule the call had: no cycle can close.
    g.add_topo_con_unchecked(before, after)?;
    if tied {
        g.add_tied_topo_con(before, after)?;
    }
    Ok(())
}
