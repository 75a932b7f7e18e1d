//! Per-graph automatic differentiation (PopXL's `transforms.autodiff`).
//!
//! [`autodiff`] builds the *gradient graph* of a forward graph and describes how to
//! call it with a [`GradGraphInfo`]. Gradient rules come from each op type's
//! [`OpDef::grad`](popart_ir::OpDef::grad): declarative [`GradOpSpec`](popart_ir::GradOpSpec)s
//! saying which forward inputs, forward outputs and output gradients each gradient op
//! reads; this module does all the wiring:
//!
//! - gradients of a tensor with several consumers are summed (`Sum`);
//! - a gradient op output whose shape differs from its forward input's (broadcasting)
//!   is reduced to it (`ReduceToShape`), one of another dtype is cast (`Cast`);
//! - only floating point tensors carry gradients; `Detach` stops them; ops whose rule
//!   is [`GradRule::Zero`] give zeros, symbolically, so nothing is
//!   computed for them unless a zero tensor is actually needed (`Init`);
//! - `Call`, `If` and `Repeat` ops are differentiated through their called graphs,
//!   which are differentiated first (callees before callers) unless their gradient
//!   graphs are passed in, so a graph called from many places gets one gradient graph;
//! - forward intermediates the gradient graph reads become extra outputs of the
//!   forward graph, and every `Call` of it gets the matching outputs; a called
//!   graph whose callers are all `Repeat`s keeps its outputs and the `Repeat`'s
//!   gradient stashes them (below); when the graph is called by an `If` (or a mix
//!   of callers), they are recomputed in the gradient graph instead;
//! - `Repeat` (which PopXL does not differentiate) stashes, per iteration, the
//!   loop-carried inputs and the body intermediates its body's gradient graph
//!   reads: the forward op is rewritten to repeat a wrapper body that also carries
//!   an int32 counter and one stash `[count, ..]` per such tensor, written in place
//!   at the counter, and calls a copy of the body that also outputs the
//!   intermediates, so nothing is recomputed. The gradient is
//!   a `Repeat` of a backward wrapper with the counter going `count-1 .. 0`: it
//!   slices the stashes, calls the body's gradient graph, passes the carried
//!   gradients to the earlier iteration and sums the gradients of loop-invariant
//!   inputs in carried accumulators (stacked weights sliced with `DynamicSlice` at
//!   a counter get the sum of the per-layer `DynamicSliceGrad`s, each slice added
//!   into its accumulator in place). Differentiating
//!   the forward graph again repeats the stashing wrapper, whose in-place stash
//!   update is not differentiable: that is a typed error (see `repeat.rs`).

mod analysis;
mod error;
mod grow;
mod info;
mod repeat;
mod subgraph;

use std::collections::BTreeSet;

use popart_ir::{GradRule, Graph, GraphId, Ir, TensorId};

pub use error::{AutodiffError, Result};
pub use info::{CallSite, ExpectedConnection, ExpectedConnectionType, GradGraphInfo, GradGraphInfos};

use analysis::{analyse, Analysis};
use info::{name, GraphIo};

/// What [`autodiff`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutodiffOutput {
    /// The gradient graph of the differentiated graph.
    pub grad_info: GradGraphInfo,
    /// With `return_all_grad_graphs`, the gradient graph info of every graph whose
    /// gradient this call used: the differentiated graph, the graphs it calls
    /// (directly or not) that were differentiated, and the infos passed in. Empty otherwise.
    pub all: GradGraphInfos,
}

/// Differentiate `graph`.
///
/// - `grads_provided`: outputs of `graph` whose gradients the caller supplies; the
///   gradient graph's first inputs are those gradients, in this order. `None`: every
///   floating point output.
/// - `grads_required`: inputs of `graph` whose gradients the gradient graph returns,
///   in this order (each must be reachable from a provided gradient). `None`: every
///   floating point input that a provided gradient reaches.
/// - `called_graphs_grad_info`: gradient graphs already made for graphs `graph`
///   calls; they are reused instead of made again.
/// - `return_all_grad_graphs`: also return the infos of every called graph
///   differentiated (to pass as `called_graphs_grad_info` to later calls).
///
/// After the gradient inputs, the gradient graph takes the forward tensors it reads
/// ([`ExpectedConnectionType::Fwd`]), each an input or output of `graph`: forward
/// intermediates are added as outputs of `graph` (updating its `Call` sites), so
/// [`GradGraphInfo::inputs_dict`] can map them to any call site.
///
/// On error, the graphs this call created are removed; outputs already added to
/// forward graphs stay (they change no result).
///
/// ```
/// use popart_ir::{Attributes, DataType, Ir, TensorInfo};
/// use popart_transforms::autodiff::{autodiff, ExpectedConnectionType, GradGraphInfos};
///
/// let mut ir = Ir::new();
/// let g = ir.create_graph("square").unwrap();
/// let x = ir.graph_mut(g).unwrap().add_input("x", TensorInfo::new(DataType::Float32, [3])).unwrap();
/// let mul = ir.create_op(g, "Mul", Attributes::new(), &[(0, x), (1, x)], "mul").unwrap();
/// let y = ir.graph(g).unwrap().op(mul).unwrap().output(0).unwrap();
/// ir.graph_mut(g).unwrap().add_output(y).unwrap();
///
/// let info = autodiff(&mut ir, g, None, None, &GradGraphInfos::new(), false).unwrap().grad_info;
/// // Inputs: dy, then x (read by the gradient of Mul); output: dx = dy·x + dy·x.
/// let kinds: Vec<_> = info.expected_inputs.iter().map(|e| e.connection_type).collect();
/// assert_eq!(kinds, [ExpectedConnectionType::FwdGrad, ExpectedConnectionType::Fwd]);
/// assert_eq!(info.expected_outputs[0].fwd_tensor, x);
/// ir.verify().unwrap();
/// ```
pub fn autodiff(
    ir: &mut Ir,
    graph: GraphId,
    grads_provided: Option<&[TensorId]>,
    grads_required: Option<&[TensorId]>,
    called_graphs_grad_info: &GradGraphInfos,
    return_all_grad_graphs: bool,
) -> Result<AutodiffOutput> {
    let fg = ir.graph(graph)?;
    let provided = resolve_provided(fg, grads_provided)?;
    let required = grads_required.map(|r| resolve_required(fg, r)).transpose()?;
    check_infos(ir, called_graphs_grad_info)?;

    // Analyse the graph and every graph it calls on a gradient path (this also finds
    // every non-differentiable op before anything is changed).
    let required_all = required.clone().unwrap_or_else(|| float_tensors(fg, fg.inputs()));
    let mut analyses: Vec<(GraphId, Analysis)> = vec![(graph, analyse(fg, &provided, &required_all)?)];
    let mut needed = BTreeSet::new();
    let mut next = 0;
    while next < analyses.len() {
        let callees = called_on_gradient_path(ir, &analyses[next])?;
        next += 1;
        for c in callees {
            if c == graph || called_graphs_grad_info.contains_key(&c) || !needed.insert(c) {
                continue;
            }
            let cg = ir.graph(c)?;
            let a = analyse(cg, &float_tensors(cg, cg.outputs()), &float_tensors(cg, cg.inputs()))?;
            analyses.push((c, a));
        }
    }
    let order: Vec<GraphId> = ir.graphs_callees_first()?.into_iter().filter(|g| needed.contains(g)).collect();

    let mut all = called_graphs_grad_info.clone();
    let mut created = Vec::new();
    let result = (|| {
        for &c in &order {
            // Every graph of `order` is in `needed`, and every needed graph was analysed.
            let Some((_, a)) = analyses.iter().find(|(g, _)| *g == c) else {
                return Err(AutodiffError::NotAnalysed {
                    graph: ir.graph(c).map_or_else(|_| format!("{c:?}"), |g| g.name().to_string()),
                });
            };
            let cg = ir.graph(c)?;
            let provided = float_tensors(cg, cg.outputs());
            let info = grow::differentiate(ir, c, a, &provided, grow::Role::Callee, &all, &mut created)?;
            all.insert(c, info);
        }
        let role = grow::Role::Top { required: required.as_deref() };
        grow::differentiate(ir, graph, &analyses[0].1, &provided, role, &all, &mut created)
    })();
    let grad_info = match result {
        Ok(info) => info,
        Err(e) => {
            for g in created.into_iter().rev() {
                let _ = ir.remove_graph(g);
            }
            return Err(e);
        }
    };
    if !return_all_grad_graphs {
        return Ok(AutodiffOutput { grad_info, all: GradGraphInfos::new() });
    }
    all.insert(graph, grad_info.clone());
    Ok(AutodiffOutput { grad_info, all })
}

/// The floating point tensors among `ts`, each once, in order.
fn float_tensors(g: &Graph, ts: &[TensorId]) -> Vec<TensorId> {
    let mut seen = slotmap::SecondaryMap::new();
    let mut out: Vec<TensorId> = Vec::new();
    for &t in ts {
        if g.tensor(t).is_ok_and(|x| x.info.dtype.is_floating_point()) && seen.insert(t, ()).is_none() {
            out.push(t);
        }
    }
    out
}

fn not_float(g: &Graph, t: TensorId) -> Option<AutodiffError> {
    let x = g.tensor(t).ok()?;
    (!x.info.dtype.is_floating_point()).then(|| AutodiffError::NotFloatingPoint {
        graph: g.name().to_string(),
        tensor: x.name.clone(),
        dtype: x.info.dtype,
    })
}

fn resolve_provided(g: &Graph, provided: Option<&[TensorId]>) -> Result<Vec<TensorId>> {
    let Some(p) = provided else { return Ok(float_tensors(g, g.outputs())) };
    let io = GraphIo::of(g);
    check_unique(g, p, "grads_provided")?;
    for &t in p {
        if io.output_index(t).is_none() {
            return Err(AutodiffError::ProvidedNotOutput { graph: g.name().to_string(), tensor: name(g, t) });
        }
        if let Some(e) = not_float(g, t) {
            return Err(e);
        }
    }
    Ok(p.to_vec())
}

/// A tensor listed twice is an error naming it (PopXL's lists are of distinct tensors).
fn check_unique(g: &Graph, list: &[TensorId], what: &'static str) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(list.len());
    match list.iter().find(|&&t| !seen.insert(t)) {
        Some(&t) => Err(AutodiffError::Duplicate { graph: g.name().to_string(), tensor: name(g, t), list: what }),
        None => Ok(()),
    }
}

fn resolve_required(g: &Graph, required: &[TensorId]) -> Result<Vec<TensorId>> {
    let io = GraphIo::of(g);
    check_unique(g, required, "grads_required")?;
    for &t in required {
        if io.input_index(t).is_none() {
            return Err(AutodiffError::RequiredNotInput { graph: g.name().to_string(), tensor: name(g, t) });
        }
        if let Some(e) = not_float(g, t) {
            return Err(e);
        }
    }
    Ok(required.to_vec())
}

fn check_infos(ir: &Ir, infos: &GradGraphInfos) -> Result<()> {
    for (&fwd, info) in infos {
        let fwd_name = ir.graph(fwd).map_or_else(|_| format!("{fwd:?}"), |g| g.name().to_string());
        let invalid = |reason: String| AutodiffError::InvalidGradGraphInfo { graph: fwd_name.clone(), reason };
        if info.forward_graph != fwd {
            return Err(invalid("it is keyed by a graph other than its forward graph".to_string()));
        }
        let grad = ir.graph(info.graph).map_err(|_| invalid("its gradient graph is not in this IR".to_string()))?;
        if grad.inputs().len() != info.expected_inputs.len() || grad.outputs().len() != info.expected_outputs.len() {
            return Err(invalid(format!(
                "gradient graph `{}` has {} inputs and {} outputs, the info lists {} and {}",
                grad.name(),
                grad.inputs().len(),
                grad.outputs().len(),
                info.expected_inputs.len(),
                info.expected_outputs.len()
            )));
        }
    }
    Ok(())
}

/// Graphs called by the active subgraph ops of an analysed graph.
fn called_on_gradient_path(ir: &Ir, (graph, a): &(GraphId, Analysis)) -> Result<Vec<GraphId>> {
    let g = ir.graph(*graph)?;
    let mut out = Vec::new();
    for (id, rule) in &a.active {
        if *rule == GradRule::Subgraph {
            out.extend(g.op(*id)?.called_graphs());
        }
    }
    Ok(out)
}
