//! Which ops of a forward graph autodiff must differentiate, before anything is built.

use std::collections::VecDeque;

use popart_ir::ops::control::{Call, If, Repeat};
use popart_ir::{GradRule, Graph, OpFlags, OpId, TensorId};
use slotmap::SecondaryMap;

use super::error::{AutodiffError, Result};

/// The ops to differentiate, with their rules, in reverse topological order, and the
/// forward tensors whose gradients are wanted.
pub(crate) struct Analysis {
    /// Active ops (on a path from a required input to a provided output, gradient not
    /// stopped), last op first.
    pub active: Vec<(OpId, GradRule)>,
    /// Floating point tensors that depend on a required input through ops that do not
    /// stop gradients: exactly the tensors whose gradient is wanted.
    pub wants_grad: SecondaryMap<TensorId, ()>,
}

/// The ops of `g` in a topological order of their data edges (creation order among
/// independent ops, so the result is deterministic).
pub(crate) fn topological_order(g: &Graph) -> Vec<OpId> {
    let ops = g.ops_in_creation_order();
    let mut pending: SecondaryMap<OpId, usize> = SecondaryMap::with_capacity(ops.len());
    let mut ready = VecDeque::new();
    for &id in &ops {
        let Ok(op) = g.op(id) else { continue };
        let n = op.inputs().tensors().filter(|&t| g.tensor(t).is_ok_and(|t| t.producer().is_some())).count();
        pending.insert(id, n);
        if n == 0 {
            ready.push_back(id);
        }
    }
    let mut order = Vec::with_capacity(ops.len());
    while let Some(id) = ready.pop_front() {
        order.push(id);
        // Ids come from the graph itself, so every lookup succeeds; a failed one
        // (a corrupted graph) leaves ops out, as a cycle does.
        let Ok(op) = g.op(id) else { continue };
        for t in op.outputs().tensors() {
            let Ok(t) = g.tensor(t) else { continue };
            for port in t.consumers() {
                let Some(n) = pending.get_mut(port.op) else { continue };
                *n -= 1;
                if *n == 0 {
                    ready.push_back(port.op);
                }
            }
        }
    }
    // A cycle leaves ops out; the verifier reports those, autodiff just ignores them.
    order
}

/// Analyse `g` for gradients of `required` inputs given gradients of `provided`
/// outputs: every active op must have a gradient rule.
pub(crate) fn analyse(g: &Graph, provided: &[TensorId], required: &[TensorId]) -> Result<Analysis> {
    let order = topological_order(g);
    let is_float = |t: TensorId| g.tensor(t).is_ok_and(|t| t.info.dtype.is_floating_point());

    // Forward sweep: tensors reachable from the required inputs.
    let mut wants_grad: SecondaryMap<TensorId, ()> = SecondaryMap::new();
    for &t in required {
        if is_float(t) {
            wants_grad.insert(t, ());
        }
    }
    let mut rules: SecondaryMap<OpId, GradRule> = SecondaryMap::new();
    for &id in &order {
        let op = g.op(id)?;
        if !op.inputs().tensors().any(|t| wants_grad.contains_key(t)) {
            continue;
        }
        // Writing in place to a tensor whose gradient is wanted would change the
        // values the gradient graph reads (and has no gradient rule).
        let modifies_wanted = op.flags().contains(OpFlags::MODIFIES_INPUTS)
            && op.modified_inputs().iter().any(|&i| op.input(i).is_some_and(|t| wants_grad.contains_key(t)));
        if modifies_wanted {
            return Err(AutodiffError::NotDifferentiable {
                graph: g.name().to_string(),
                op: op.name.clone(),
                op_type: op.op_type().to_string(),
                reason: "it modifies a tensor on a gradient path in place".to_string(),
            });
        }
        let rule = op.def().grad(&popart_ir::GradContext::new(op, g));
        if rule != GradRule::Stop {
            for t in op.outputs().tensors() {
                if is_float(t) {
                    wants_grad.insert(t, ());
                }
            }
        }
        rules.insert(id, rule);
    }

    // Backward sweep: of those ops, the ones that reach a provided output.
    let mut reaches_output: SecondaryMap<TensorId, ()> = SecondaryMap::new();
    for &t in provided {
        reaches_output.insert(t, ());
    }
    let mut active = Vec::new();
    for &id in order.iter().rev() {
        let Some(rule) = rules.remove(id) else { continue };
        let op = g.op(id)?;
        if rule == GradRule::Stop || !op.outputs().tensors().any(|t| reaches_output.contains_key(t)) {
            continue;
        }
        let not_differentiable = |reason: &str| AutodiffError::NotDifferentiable {
            graph: g.name().to_string(),
            op: op.name.clone(),
            op_type: op.op_type().to_string(),
            reason: reason.to_string(),
        };
        match rule {
            GradRule::None => return Err(not_differentiable("")),
            _ if op.flags().contains(OpFlags::MODIFIES_INPUTS) => {
                return Err(not_differentiable("it modifies its inputs in place"))
            }
            GradRule::Subgraph if !op.is::<Call>() && !op.is::<If>() && !op.is::<Repeat>() => {
                return Err(not_differentiable("autodiff differentiates only Call, If and Repeat subgraph ops"))
            }
            _ => {}
        }
        for t in op.inputs().tensors() {
            reaches_output.insert(t, ());
        }
        active.push((id, rule));
    }
    Ok(Analysis { active, wants_grad })
}
