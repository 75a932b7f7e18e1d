//! The contract between a forward graph and its gradient graph.

use std::collections::BTreeMap;

use popart_ir::ops::control::{Call, CallAttrs};
use popart_ir::{Graph, GraphId, Ir, Op, OpAttrs, OpId, TensorId};
use slotmap::SecondaryMap;

use super::error::{AutodiffError, Result};

/// Whether a gradient graph input/output is a forward tensor or its gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExpectedConnectionType {
    /// The forward tensor itself (an activation the gradient graph reads).
    Fwd,
    /// The gradient of the forward tensor.
    FwdGrad,
}

/// One input or output of a gradient graph, described in terms of the forward graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExpectedConnection {
    /// A tensor of the forward graph.
    pub fwd_tensor: TensorId,
    /// Whether the connection is that tensor or its gradient.
    pub connection_type: ExpectedConnectionType,
}

impl ExpectedConnection {
    /// The forward tensor itself.
    pub fn fwd(fwd_tensor: TensorId) -> Self {
        ExpectedConnection { fwd_tensor, connection_type: ExpectedConnectionType::Fwd }
    }

    /// The gradient of the forward tensor.
    pub fn fwd_grad(fwd_tensor: TensorId) -> Self {
        ExpectedConnection { fwd_tensor, connection_type: ExpectedConnectionType::FwdGrad }
    }
}

/// A call site: a `Call` op in a parent graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallSite {
    /// The graph holding the op.
    pub graph: GraphId,
    /// The `Call` op.
    pub op: OpId,
}

/// What autodiff made for one forward graph (PopXL's `GradGraphInfo`, PopART's
/// `BwdGraphInfo`): gradient graph input `k` is `expected_inputs[k]` and output `k`
/// is `expected_outputs[k]`.
///
/// The inputs are first the gradients of the forward outputs the caller provides
/// ([`ExpectedConnectionType::FwdGrad`]), in the order given to autodiff, then the
/// forward tensors the gradient graph reads ([`ExpectedConnectionType::Fwd`]); each
/// such forward tensor is an input or an output of the forward graph, so it is
/// available at every call site (see [`GradGraphInfo::inputs_dict`]). The outputs are
/// the gradients of forward inputs ([`ExpectedConnectionType::FwdGrad`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GradGraphInfo {
    /// The gradient graph.
    pub graph: GraphId,
    /// The forward graph it differentiates.
    pub forward_graph: GraphId,
    /// One entry per gradient graph input, in order.
    pub expected_inputs: Vec<ExpectedConnection>,
    /// One entry per gradient graph output, in order.
    pub expected_outputs: Vec<ExpectedConnection>,
}

/// Gradient graph infos keyed by forward graph (PopXL's `called_graphs_grad_info`).
pub type GradGraphInfos = BTreeMap<GraphId, GradGraphInfo>;

impl GradGraphInfo {
    /// Inputs of a call of the gradient graph that come from a forward call site:
    /// `(gradient graph input, tensor of the call site's graph)` for every
    /// [`Fwd`](ExpectedConnectionType::Fwd) input, mapping forward-graph inputs to the
    /// call's inputs and forward-graph outputs to its outputs. The
    /// [`FwdGrad`](ExpectedConnectionType::FwdGrad) inputs (the output gradients, first in
    /// the gradient graph's inputs) are not included: the caller supplies them.
    pub fn inputs_dict(&self, ir: &Ir, fwd_call: CallSite) -> Result<Vec<(TensorId, TensorId)>> {
        let fwd = ir.graph(self.forward_graph)?;
        let grad = ir.graph(self.graph)?;
        let call = self.call_op(ir, fwd_call, self.forward_graph)?;
        let io = GraphIo::of(fwd);
        let mut out = Vec::new();
        for (k, e) in self.expected_inputs.iter().enumerate() {
            if e.connection_type != ExpectedConnectionType::Fwd {
                continue;
            }
            let grad_input = *grad
                .inputs()
                .get(k)
                .ok_or_else(|| self.invalid(ir, "it has more expected inputs than its graph has inputs"))?;
            let parent = if let Some(i) = io.input_index(e.fwd_tensor) {
                call.input(i as u32)
            } else if let Some(j) = io.output_index(e.fwd_tensor) {
                call.output(j as u32)
            } else {
                return Err(self.invalid(
                    ir,
                    &format!(
                        "expected input `{}` is neither an input nor an output of the forward graph",
                        name(fwd, e.fwd_tensor)
                    ),
                ));
            };
            let parent = parent.ok_or_else(|| {
                self.invalid(
                    ir,
                    &format!("call op `{}` does not connect forward tensor `{}`", call.name, name(fwd, e.fwd_tensor)),
                )
            })?;
            out.push((grad_input, parent));
        }
        Ok(out)
    }

    /// `(forward graph input, output of the gradient call site)` for every gradient
    /// the gradient graph computes: which parent tensor holds the gradient of which
    /// forward-graph input.
    pub fn fwd_graph_ins_to_grad_parent_outs(&self, ir: &Ir, grad_call: CallSite) -> Result<Vec<(TensorId, TensorId)>> {
        let call = self.call_op(ir, grad_call, self.graph)?;
        self.expected_outputs
            .iter()
            .enumerate()
            .filter(|(_, e)| e.connection_type == ExpectedConnectionType::FwdGrad)
            .map(|(k, e)| {
                let t = call
                    .output(k as u32)
                    .ok_or_else(|| self.invalid(ir, &format!("gradient call op `{}` has no output {k}", call.name)))?;
                Ok((e.fwd_tensor, t))
            })
            .collect()
    }

    /// `(input of the forward call site, output of the gradient call site)`: the
    /// gradient of each forward call input, in the parent graph.
    pub fn fwd_parent_ins_to_grad_parent_outs(
        &self,
        ir: &Ir,
        fwd_call: CallSite,
        grad_call: CallSite,
    ) -> Result<Vec<(TensorId, TensorId)>> {
        let fwd = ir.graph(self.forward_graph)?;
        let call = self.call_op(ir, fwd_call, self.forward_graph)?;
        let io = GraphIo::of(fwd);
        self.fwd_graph_ins_to_grad_parent_outs(ir, grad_call)?
            .into_iter()
            .map(|(fwd_in, grad_out)| {
                let i = io.input_index(fwd_in).ok_or_else(|| {
                    self.invalid(ir, &format!("expected output `{}` is not a forward graph input", name(fwd, fwd_in)))
                })?;
                let parent_in = call
                    .input(i as u32)
                    .ok_or_else(|| self.invalid(ir, &format!("call op `{}` has no input {i}", call.name)))?;
                Ok((parent_in, grad_out))
            })
            .collect()
    }

    /// The op at `site`, checked to be a `Call` of `callee`.
    fn call_op<'a>(&self, ir: &'a Ir, site: CallSite, callee: GraphId) -> Result<&'a Op> {
        let op = ir.graph(site.graph)?.op(site.op)?;
        if !op.is::<Call>() || CallAttrs::of(op).map_or(true, |a| a.graph != callee) {
            let callee = ir.graph(callee)?.name();
            return Err(self.invalid(ir, &format!("op `{}` is not a call of graph `{callee}`", op.name)));
        }
        Ok(op)
    }

    fn invalid(&self, ir: &Ir, reason: &str) -> AutodiffError {
        let graph =
            ir.graph(self.forward_graph).map_or_else(|_| format!("{:?}", self.forward_graph), |g| g.name().to_string());
        AutodiffError::InvalidGradGraphInfo { graph, reason: reason.to_string() }
    }
}

/// Positions of a graph's inputs and outputs, for constant-time lookups.
#[derive(Clone, Debug, Default)]
pub(crate) struct GraphIo {
    inputs: SecondaryMap<TensorId, usize>,
    outputs: SecondaryMap<TensorId, Vec<usize>>,
}

impl GraphIo {
    pub(crate) fn of(g: &Graph) -> Self {
        let mut io = GraphIo::default();
        for (i, &t) in g.inputs().iter().enumerate() {
            io.inputs.insert(t, i);
        }
        for (k, &t) in g.outputs().iter().enumerate() {
            match io.outputs.get_mut(t) {
                Some(v) => v.push(k),
                None => {
                    io.outputs.insert(t, vec![k]);
                }
            }
        }
        io
    }

    /// Index of input `t`.
    pub(crate) fn input_index(&self, t: TensorId) -> Option<usize> {
        self.inputs.get(t).copied()
    }

    /// First index of output `t`.
    pub(crate) fn output_index(&self, t: TensorId) -> Option<usize> {
        self.outputs.get(t).map(|v| v[0])
    }

    /// Every index at which `t` is an output.
    pub(crate) fn output_indices(&self, t: TensorId) -> &[usize] {
        self.outputs.get(t).map_or(&[], |v| &v[..])
    }

    /// True for inputs and outputs.
    pub(crate) fn is_io(&self, t: TensorId) -> bool {
        self.inputs.contains_key(t) || self.outputs.contains_key(t)
    }
}

/// A tensor's name, or its id if it is not in `g`.
pub(crate) fn name(g: &Graph, t: TensorId) -> String {
    g.tensor(t).map_or_else(|_| format!("{t:?}"), |t| t.name.clone())
}
