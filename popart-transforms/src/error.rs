//! Errors of the transforms, patterns and the pass pipeline.

use popart_ir::ops::AxisError;
use popart_ir::IrError;

/// Why a transform, pattern or pass could not run. IR errors met on the way
/// (unknown graph, failed shape inference, the verifier's findings...) are
/// wrapped as [`TransformError::Ir`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TransformError {
    /// An error of the IR itself.
    #[error(transparent)]
    Ir(#[from] IrError),
    /// A pass returned `Ok` but left an IR the verifier rejects (reported when
    /// the pipeline verifies every pass: debug builds and tests).
    #[error("pass `{pass}` left an invalid IR: {source}")]
    InvalidAfterPass {
        /// The pass's name.
        pass: String,
        /// What the verifier found.
        source: Box<IrError>,
    },
    /// An op lacking a connection the rewrite needs (see [`Malformed`]).
    #[error(transparent)]
    Malformed(#[from] Malformed),
    /// The attributes of a strided view name an axis or permutation its bases
    /// do not have.
    #[error("view `{op}`: {error}")]
    ViewAxis {
        /// The view op.
        op: String,
        /// What is wrong with the axis.
        error: AxisError,
    },
    /// A tensor dimension that does not fit the `i64` of an attribute.
    #[error("dimension {dim} does not fit an i64")]
    DimensionOverflow {
        /// The dimension.
        dim: usize,
    },
}

/// An op without a connection every op of its type has, or a tensor a rewrite
/// lost track of: an IR edited by hand into a state no builder makes (the
/// verifier does not check every op type's connections), or a bug in a pass.
/// Each variant names the op.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// An op without output 0.
    #[error("op `{op}` has no output")]
    NoOutput {
        /// The op.
        op: String,
    },
    /// An op with input `index` unconnected.
    #[error("op `{op}` has no input {index}{}", if context.is_empty() { String::new() } else { format!(" ({context})") })]
    MissingInput {
        /// The op.
        op: String,
        /// The unconnected input.
        index: u32,
        /// What the input is for (may be empty).
        context: &'static str,
    },
    /// A subgraph op that does not connect every input of its graph.
    #[error("{op_type} op `{op}` does not connect every body input")]
    UnconnectedGraphInputs {
        /// The op.
        op: String,
        /// Its type.
        op_type: &'static str,
    },
    /// An op of a graph being copied or inlined that reads (or a graph output
    /// that is) a tensor the copy has no counterpart for.
    #[error("{what} of `{graph}` reads a tensor not copied")]
    UncopiedTensor {
        /// The op (`op \`name\``) or output reading the tensor.
        what: String,
        /// The graph copied or inlined.
        graph: String,
    },
    /// An op whose input or output index map has an index far beyond its number
    /// of entries (connected by hand near `u32::MAX`).
    #[error("op `{op}` has an index map with index {index} but {entries} entries")]
    SparseIndexMap {
        /// The op.
        op: String,
        /// Its largest index.
        index: usize,
        /// Its number of connections.
        entries: usize,
    },
}

/// Result alias of the transforms.
pub type Result<T, E = TransformError> = std::result::Result<T, E>;
