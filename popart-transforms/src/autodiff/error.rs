//! Errors of the autodiff transform.

use popart_ir::{DataType, IrError};

/// Why autodiff could not build a gradient graph, or why a [`GradGraphInfo`]
/// cannot be connected to a call site. Every variant names the graphs, tensors and
/// ops involved.
///
/// [`GradGraphInfo`]: super::GradGraphInfo
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AutodiffError {
    /// A tensor in `grads_provided` that is not an output of the forward graph.
    #[error("tensor `{tensor}` is not an output of graph `{graph}`: gradients can only be provided for graph outputs")]
    ProvidedNotOutput {
        /// Forward graph.
        graph: String,
        /// The tensor given.
        tensor: String,
    },
    /// A tensor listed twice in `grads_provided` or `grads_required`.
    #[error("tensor `{tensor}` of graph `{graph}` is listed twice in `{list}`")]
    Duplicate {
        /// Forward graph.
        graph: String,
        /// The repeated tensor.
        tensor: String,
        /// `grads_provided` or `grads_required`.
        list: &'static str,
    },
    /// A tensor in `grads_required` that is not an input of the forward graph.
    #[error("tensor `{tensor}` is not an input of graph `{graph}`: gradients can only be required for graph inputs")]
    RequiredNotInput {
        /// Forward graph.
        graph: String,
        /// The tensor given.
        tensor: String,
    },
    /// A provided or required tensor of a type that carries no gradient.
    #[error("tensor `{tensor}` of graph `{graph}` is {dtype}: only floating point tensors carry gradients")]
    NotFloatingPoint {
        /// Forward graph.
        graph: String,
        /// The tensor.
        tensor: String,
        /// Its type.
        dtype: DataType,
    },
    /// A required input that no provided gradient reaches.
    #[error("no gradient reaches input `{tensor}` of graph `{graph}` from the provided output gradients")]
    NoGradientPath {
        /// Forward graph.
        graph: String,
        /// The required input.
        tensor: String,
    },
    /// An op without a gradient rule on a path from a required input to a provided output.
    #[error(
        "op `{op}` ({op_type}) in graph `{graph}` lies on a gradient path but is not differentiable{}",
        if reason.is_empty() { String::new() } else { format!(": {reason}") }
    )]
    NotDifferentiable {
        /// Graph of the op.
        graph: String,
        /// Op name.
        op: String,
        /// Op type.
        op_type: String,
        /// Extra detail (may be empty).
        reason: String,
    },
    /// A forward intermediate needed by the gradient graph could not be recomputed there.
    #[error("cannot recompute op `{op}` ({op_type}) of graph `{graph}` in its gradient graph: {reason}")]
    CannotRecompute {
        /// Forward graph.
        graph: String,
        /// Op name.
        op: String,
        /// Op type.
        op_type: String,
        /// Why.
        reason: String,
    },
    /// A `GradGraphInfo` (passed in, or used with a call site) that does not fit.
    #[error("gradient graph info of graph `{graph}` cannot be used: {reason}")]
    InvalidGradGraphInfo {
        /// Forward graph the info claims to describe.
        graph: String,
        /// What is wrong.
        reason: String,
    },
    /// A graph autodiff had to differentiate but did not analyse first (a bug in autodiff).
    #[error("autodiff: graph `{graph}` was not analysed")]
    NotAnalysed {
        /// The graph.
        graph: String,
    },
    /// An op lacking a connection autodiff needs (see [`crate::Malformed`]).
    #[error(transparent)]
    Malformed(#[from] crate::Malformed),
    /// An error of the IR itself (unknown graph, failed shape inference...).
    #[error(transparent)]
    Ir(#[from] IrError),
}

/// Result alias for autodiff.
pub type Result<T, E = AutodiffError> = std::result::Result<T, E>;
