//! The crate's error type.

/// Everything that can go wrong when building, editing, scheduling, verifying
/// or parsing an IR. Each variant names the graphs, ops and tensors involved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IrError {
    /// A graph id or name that the IR does not hold.
    #[error("unknown graph `{0}`")]
    UnknownGraph(String),
    /// A tensor id or name that the graph does not hold.
    #[error("graph `{graph}` has no tensor `{tensor}`")]
    UnknownTensor {
        /// Graph searched.
        graph: String,
        /// Tensor asked for.
        tensor: String,
    },
    /// An op id or name that the graph does not hold.
    #[error("graph `{graph}` has no op `{op}`")]
    UnknownOp {
        /// Graph searched.
        graph: String,
        /// Op asked for.
        op: String,
    },
    /// An op writes in place to a constant (PopXL refuses to modify constants).
    #[error(
        "op `{op}` in graph `{graph}` would modify constant `{tensor}` in place; use a variable, or an out-of-place op"
    )]
    ModifiesConstant {
        /// Graph.
        graph: String,
        /// The in-place op.
        op: String,
        /// The constant.
        tensor: String,
    },
    /// An in-place write whose effect depends on the schedule: another op reads
    /// (or writes) an alias of the written tensor and neither op is ordered
    /// before the other (see `popart_ir::alias::check_inplace_ambiguity`).
    #[error(
        "Inplacing ambiguity detected: in-place op `{}` in graph `{}` writes `{}`, which op `{}` also uses (through `{}`), and neither is ordered before the other; add a data dependency or a topological constraint (build under in_sequence), or turn the in-place ambiguity check off",
        .0.op, .0.graph, .0.tensor, .0.other, .0.through
    )]
    InplaceAmbiguity(Box<InplaceAmbiguity>),
    /// A host stream tensor used directly as an op input.
    #[error("op `{op}` in graph `{graph}` reads stream `{tensor}` directly; load it with `host_load` first")]
    StreamAsInput {
        /// Graph.
        graph: String,
        /// The op.
        op: String,
        /// The stream tensor.
        tensor: String,
    },
    /// An op type that is not registered.
    #[error("unknown op type `{0}` (register custom ops with `popart_ir::register_op`)")]
    UnknownOpType(String),
    /// Two different op definitions registered under one type name.
    #[error("op type `{0}` is already registered with a different definition")]
    DuplicateOpType(String),
    /// A tensor name already used in the graph.
    #[error("graph `{graph}` already has a tensor named `{name}`")]
    DuplicateTensorName {
        /// Graph.
        graph: String,
        /// Name in use.
        name: String,
    },
    /// A graph name already used in the IR.
    #[error("the IR already has a graph named `{0}`")]
    DuplicateGraphName(String),
    /// Connecting an output to a tensor that already has a producer.
    #[error("tensor `{tensor}` in graph `{graph}` is already produced by op `{producer}`; cannot connect it as an output of `{op}`")]
    AlreadyProduced {
        /// Graph.
        graph: String,
        /// Tensor.
        tensor: String,
        /// Its existing producer.
        producer: String,
        /// Op that tried to produce it.
        op: String,
    },
    /// Connecting an op output to a tensor that is not an activation (graph input, variable, constant, stream).
    #[error("tensor `{tensor}` in graph `{graph}` is a {what} and cannot be produced by op `{op}`")]
    NotProducible {
        /// Graph.
        graph: String,
        /// Tensor.
        tensor: String,
        /// What the tensor is.
        what: &'static str,
        /// Op that tried to produce it.
        op: String,
    },
    /// An input or output index that is already connected.
    #[error("op `{op}` already has an {side} at index {index}")]
    IndexTaken {
        /// Op.
        op: String,
        /// "input" or "output".
        side: &'static str,
        /// Index.
        index: u32,
    },
    /// An input or output index that is not connected.
    #[error("op `{op}` has no {side} at index {index}")]
    IndexNotConnected {
        /// Op.
        op: String,
        /// "input" or "output".
        side: &'static str,
        /// Index.
        index: u32,
    },
    /// Shape or type inference rejected the op's inputs or attributes.
    #[error("op `{op}` ({op_type}): {message}")]
    Inference {
        /// Op name.
        op: String,
        /// Op type.
        op_type: String,
        /// What is wrong.
        message: String,
    },
    /// A tensor that cannot be removed because it is still connected or is a graph input/output.
    #[error("tensor `{tensor}` in graph `{graph}` is still in use: {reason}")]
    TensorInUse {
        /// Graph.
        graph: String,
        /// Tensor.
        tensor: String,
        /// Why.
        reason: String,
    },
    /// A topological constraint between an op and itself.
    #[error("topological constraint from op `{0}` to itself")]
    SelfConstraint(String),
    /// The ops, data edges and topological constraints of a graph contain a cycle.
    #[error("graph `{graph}` has a cycle through ops [{}]", ops.join(" -> "))]
    Cycle {
        /// Graph.
        graph: String,
        /// The ops on the cycle, in order (the first op follows the last).
        ops: Vec<String>,
    },
    /// A graph that calls itself, directly or through other graphs.
    #[error("graph `{0}` calls itself (recursion is not supported)")]
    RecursiveGraph(String),
    /// A tensor whose byte size overflows (more than [`MAX_TENSOR_BYTES`](crate::size::MAX_TENSOR_BYTES)).
    #[error("tensor `{tensor}` in graph `{graph}` is too large: {info} overflows the maximum tensor size")]
    TensorTooLarge {
        /// Graph name.
        graph: String,
        /// Tensor name.
        tensor: String,
        /// The declared info.
        info: crate::TensorInfo,
    },
    /// The host data of a variable or constant does not match its info.
    #[error("data of tensor `{tensor}` in graph `{graph}`: {source}")]
    HostData {
        /// Graph name.
        graph: String,
        /// Tensor name.
        tensor: String,
        /// What is wrong with the data.
        source: crate::HostDataError,
    },
    /// [`crate::Ir::num_ipus`] does not fit in 64 bits.
    #[error(
        "the number of IPUs overflows: {ipus_per_replica} IPUs per replica x replication factor \
         {replication_factor}, rounded up to a power of two, does not fit in 64 bits"
    )]
    TooManyIpus {
        /// IPUs of one replica ([`crate::Ir::ipus_per_replica`]).
        ipus_per_replica: u64,
        /// The IR's replication factor.
        replication_factor: usize,
    },
    /// An op's attributes do not match its type's declaration
    /// ([`crate::OpDef::attributes`]): unknown key, wrong kind, out of range,
    /// missing.
    #[error("op `{op}` ({op_type}): {error}")]
    Attribute {
        /// The op's name.
        op: String,
        /// Its type.
        op_type: String,
        /// What is wrong, naming the attribute, what was expected and what was given.
        error: Box<crate::AttrError>,
    },
    /// A remote buffer or remote variable request the IR refuses.
    #[error(transparent)]
    Remote(#[from] crate::RemoteError),
    /// The host data given for a variable or constant has another type or
    /// shape than the tensor declared.
    #[error("data of tensor `{tensor}` in graph `{graph}` is {data} but the tensor is declared {declared}")]
    DataInfoMismatch {
        /// Graph name.
        graph: String,
        /// Tensor name.
        tensor: String,
        /// The data's info.
        data: crate::TensorInfo,
        /// The declared info.
        declared: crate::TensorInfo,
    },
    /// A tensor that cannot become a graph input: it has a producer, is
    /// already an input, or is not an activation.
    #[error("tensor `{tensor}` of graph `{graph}` cannot become a graph input (produced, already an input, or not an activation)")]
    NotAnInputCandidate {
        /// Graph name.
        graph: String,
        /// Tensor name.
        tensor: String,
    },
    /// A graph input or output index that the graph does not have.
    #[error("graph `{graph}` has no {side} {index}")]
    NoGraphPort {
        /// Graph name.
        graph: String,
        /// "input" or "output".
        side: &'static str,
        /// The index asked for.
        index: usize,
    },
    /// `replace_op` with a replacement that is not fresh.
    #[error("replacement op `{op}` {problem}")]
    ReplacementInUse {
        /// The replacement op.
        op: String,
        /// "is already connected" or "already has topological constraints".
        problem: &'static str,
    },
    /// The main graph cannot be removed.
    #[error("the main graph cannot be removed")]
    MainGraphRemoval,
    /// A graph that some op still calls cannot be removed.
    #[error("graph `{graph}` is still called by op `{op}` of graph `{caller}`")]
    GraphStillCalled {
        /// The graph to remove.
        graph: String,
        /// An op calling it.
        op: String,
        /// The graph holding that op.
        caller: String,
    },
    /// A count of the IR that must be at least 1 (`replication_factor`,
    /// `num_host_transfers`).
    #[error("{setting} must be at least 1, not 0")]
    ZeroSetting {
        /// The setting's name.
        setting: &'static str,
    },
    /// Variable settings (replica grouping, sharding, host data) that do not
    /// fit the variable or the IR.
    #[error("replicated variable `{tensor}`: {reason}")]
    VariableSettings {
        /// The variable's name.
        tensor: String,
        /// What does not fit.
        reason: String,
    },
    /// The verifier found a broken invariant (an IR edited or parsed into a
    /// state no builder call makes, or left so by a pass).
    #[error("invalid IR: {0}")]
    Invalid(String),
    /// The text form could not be parsed.
    #[error("parse error at line {line}: {message}")]
    Parse {
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// Result alias for this crate.
pub type Result<T, E = IrError> = std::result::Result<T, E>;

/// The ops and tensors of an [`IrError::InplaceAmbiguity`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InplaceAmbiguity {
    /// Graph.
    pub graph: String,
    /// The in-place op.
    pub op: String,
    /// The tensor it writes.
    pub tensor: String,
    /// The unordered op.
    pub other: String,
    /// The alias of `tensor` that `other` uses.
    pub through: String,
}
