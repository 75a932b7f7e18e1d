//! The session error type: every mistake of PopXL's session API, with the names involved.

use popart_ir::{DataType, HostDataError, IrError, SizeError};
use popart_lower::LowerError;

use crate::cpu::kernel::KernelError;
use crate::cpu::CpuError;

/// Direction of a stream named in an error: `input` (host to device) or `output`.
pub type StreamRole = &'static str;

/// Everything that can go wrong creating or using a [`crate::Session`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SessionError {
    /// A device string other than `cpu`, `ipu_model` and `ipu_hw`.
    #[error("unknown device `{0}`: expected one of `cpu`, `ipu_model`, `ipu_hw`")]
    UnknownDevice(String),
    /// More replicas than a session runs ([`crate::MAX_REPLICAS`]).
    #[error("replication_factor {replication_factor} is too large: a session runs at most {max} replicas")]
    TooManyReplicas {
        /// The IR's replication factor.
        replication_factor: usize,
        /// The limit.
        max: usize,
    },
    /// The IR's replicas span several processes ([`popxl::Ir::set_instances`])
    /// and the session has no transport to reach them: build with the `mpi`
    /// feature and call `popxl_session::cpu::mpi::init()`, or set
    /// [`crate::SessionOptions::transport`].
    #[error(
        "the IR's replicas span {processes} processes but no transport reaches them: build with the `mpi` feature \
         and call popxl_session::cpu::mpi::init() first, or set SessionOptions::transport"
    )]
    NoTransport {
        /// Processes the IR's replicas span.
        processes: usize,
    },
    /// The IR's instances do not match the replication factor or the transport
    /// (a count that does not divide `replication_factor`, or a transport of
    /// another rank or size).
    #[error("the IR's instances do not fit: {reason}")]
    Instances {
        /// What does not match.
        reason: String,
    },
    /// Another process of a session spanning processes failed (its own error
    /// is reported there), or the processes diverged: this process's step
    /// stopped too, with its state restored.
    #[error(transparent)]
    Processes(#[from] crate::cpu::transport::SpanError),
    /// `write_variable_data` on a variable whose retrieval mode is all_replicas
    /// and whose groups hold several replicas (PopXL's NotImplementedError).
    #[error("cannot write variable `{tensor}`: writing variables with retrieval_mode all_replicas is not supported")]
    WriteAllReplicas {
        /// The variable.
        tensor: String,
    },
    /// The IR has no ops reachable from the main graph (an IR whose ops are
    /// all pruned away is valid: its runs do nothing).
    #[error("the IR {ir_id} has no ops in its main graph (or in graphs it calls); add operations (a host_store, a variable update) to your graphs")]
    NoOps {
        /// Id of the IR.
        ir_id: u64,
    },
    /// The IR failed verification or preparation (for example a topological-constraint cycle).
    #[error("invalid IR: {0}")]
    InvalidIr(#[from] IrError),
    /// A pass of the preparation pipeline failed for another reason than an IR
    /// error (those are [`SessionError::InvalidIr`]), for example one that left
    /// an invalid IR.
    #[error("invalid IR: {0}")]
    Transform(popart_transforms::TransformError),
    /// Lowering failed.
    #[error("lowering failed: {0}")]
    Lower(#[from] LowerError),
    /// The device has no kernel for an op.
    #[error("compilation failed: {0}")]
    Kernel(#[from] KernelError),
    /// A runtime function (run, weights transfer) called while detached.
    #[error("must be attached to device before calling a runtime function (`{function}`); run it inside a session context (`session.enter()` or `session.scope(..)`)")]
    NotAttached {
        /// The function called.
        function: &'static str,
    },
    /// Attaching failed.
    #[error("could not attach to device `{device}`: {reason}")]
    AttachFailed {
        /// The device.
        device: &'static str,
        /// Why.
        reason: String,
    },
    /// The streams given to `run` differ from the expected set.
    #[error("unexpected/missing {role} streams.\n  unexpected: {unexpected:?}\n  missing: {missing:?}")]
    UnexpectedOrMissingStreams {
        /// `input` or `output`.
        role: StreamRole,
        /// Streams given that the session does not expect.
        unexpected: Vec<String>,
        /// Expected streams not given.
        missing: Vec<String>,
    },
    /// Dimension 0 of an array is smaller than `num_host_transfers`.
    #[error("dimension 0 ({got}) of the array for {role} stream `{stream}` is not large enough: it should be at least num_host_transfers = {num_host_transfers}")]
    TooFewHostTransfers {
        /// `input` or `output`.
        role: StreamRole,
        /// Stream name.
        stream: String,
        /// Size of dimension 0.
        got: usize,
        /// The IR's `num_host_transfers`.
        num_host_transfers: usize,
    },
    /// The replication dimension of an array is not `replication_factor`.
    #[error("dimension {dim} ({got}) of the array for {role} stream `{stream}` is the wrong size: it should be replication_factor = {replication_factor}")]
    WrongReplicaDim {
        /// `input` or `output`.
        role: StreamRole,
        /// Stream name.
        stream: String,
        /// The dimension checked.
        dim: usize,
        /// Its size.
        got: usize,
        /// The IR's replication factor.
        replication_factor: usize,
    },
    /// The data dimensions of an array do not match the stream shape.
    #[error("shape mismatch for {role} stream `{stream}`: stream shape {stream_shape:?}, so the expected full shape is {expected:?}; got array shape {got:?}")]
    StreamShapeMismatch {
        /// `input` or `output`.
        role: StreamRole,
        /// Stream name.
        stream: String,
        /// Shape of one transfer.
        stream_shape: Vec<usize>,
        /// `[num_host_transfers, replication_factor, *stream shape]` without size-1 dims.
        expected: Vec<usize>,
        /// The array's shape.
        got: Vec<usize>,
    },
    /// The element type of an array does not match its stream.
    #[error("dtype mismatch for {role} stream `{stream}`: the stream is {expected}, the array is {got}")]
    StreamDTypeMismatch {
        /// `input` or `output`.
        role: StreamRole,
        /// Stream name.
        stream: String,
        /// Stream dtype.
        expected: DataType,
        /// Array dtype.
        got: DataType,
    },
    /// A tensor or stream of another IR.
    #[error("`{name}` belongs to IR {ir_id}, not to this session's IR {session_ir_id}")]
    ForeignTensor {
        /// Tensor or stream name.
        name: String,
        /// Its IR.
        ir_id: u64,
        /// The session's IR.
        session_ir_id: u64,
    },
    /// A file the session was asked to write (a trace, a plot) could not be written.
    #[error("could not write {what} to `{path}`: {reason}")]
    WriteFile {
        /// What was being written.
        what: &'static str,
        /// The path.
        path: String,
        /// The operating system's reason.
        reason: String,
    },
    /// No tensor of the session's main graph has this name.
    #[error("the main graph of this session's IR has no tensor named `{name}`")]
    UnknownTensor {
        /// The name looked up.
        name: String,
    },
    /// Reading data of a tensor that is neither a variable nor a constant.
    #[error("tensor `{tensor}` is not of type Constant or Variable: get_tensor_data is not supported for it")]
    NotVariableOrConstant {
        /// The tensor.
        tensor: String,
    },
    /// Writing data of a tensor that is not a variable.
    #[error("tensor `{tensor}` is not of type Variable: write_variable_data is not supported for it")]
    NotAVariable {
        /// The tensor.
        tensor: String,
    },
    /// Writing data of another element type.
    #[error("the dtype of the input array ({got}) must match the dtype of variable `{tensor}` ({expected})")]
    WriteDTypeMismatch {
        /// The variable.
        tensor: String,
        /// Its dtype.
        expected: DataType,
        /// The data's dtype.
        got: DataType,
    },
    /// Writing data of another shape.
    #[error("the shape of the input array {got:?} must match the shape of variable `{tensor}` {expected:?}")]
    WriteShapeMismatch {
        /// The variable.
        tensor: String,
        /// Its shape.
        expected: Vec<usize>,
        /// The data's shape.
        got: Vec<usize>,
    },
    /// Closing a session context that was not entered.
    #[error("no session context is open")]
    NoOpenContext,
    /// The allocator refused a buffer whose size comes from the user (the device
    /// arena, host copies of variables, the arrays of `run`). Nothing was changed.
    #[error("out of memory: cannot allocate {requested} bytes for {what}")]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
        /// What the buffer was for.
        what: String,
    },
    /// A size computed from user data overflows (for example `num_host_transfers
    /// x replication_factor x` a stream's elements, or the memory plan's total).
    #[error("size of {what} overflows")]
    SizeOverflow {
        /// What was being sized.
        what: String,
    },
    /// With [`crate::SessionOptions::check_indices`], an op met an index or label
    /// out of range while running. The run stopped; the variables on the device
    /// are as they were before the run and the session stays usable.
    #[error("op `{op}` ({op_type}): index {index} is out of range for a dimension of size {bound}")]
    IndexOutOfRange {
        /// Name of the op (scoped, as in the lowered program: `graph/op`).
        op: String,
        /// Its type (`Gather`, `NllLoss`...).
        op_type: String,
        /// The index value (unsigned values above `i64::MAX` read as `i64::MAX`).
        index: i64,
        /// The size of the indexed dimension (classes, for labels).
        bound: usize,
    },
    /// A remote load or store computed an offset (an int32 tensor) that its
    /// remote buffer does not have. The run stops there: what it wrote before
    /// stays written (variables are restored only with `check_indices`).
    #[error("remote buffer {buffer}: offset {offset} is out of range for its {entries} entries")]
    RemoteOffsetOutOfRange {
        /// The remote buffer's id.
        buffer: u32,
        /// The offset.
        offset: i64,
        /// Its entries.
        entries: usize,
    },
    /// A float8 op (`pow2scale_cast_to_fp8`, `matmul_pow2scaled`...) read a
    /// `log2_scale` outside `[-32, 32)` (PopART's `throwIfLog2ScaleTensorNotInRange`).
    /// The run stops there: what it wrote before stays written.
    #[error("op `{op}` ({op_type}): log2 scale {value} is not in the range [-32, 32)")]
    Log2ScaleOutOfRange {
        /// Name of the op.
        op: String,
        /// Its type.
        op_type: String,
        /// The value read.
        value: i32,
    },
    /// Host data for a tensor or stream is invalid (a bool byte other than 0 or
    /// 1, a byte length that does not match the shape).
    #[error("invalid host data for `{tensor}`: {source}")]
    InvalidHostData {
        /// The tensor or stream.
        tensor: String,
        /// What is wrong.
        source: HostDataError,
    },
    /// The program does not fit in the tile memory of the modelled IPU
    /// (`ipu_model` device; `cpu` ignores the limit): the report names the peak
    /// program point, the most loaded tile, by how much it exceeds, and the
    /// largest tensors and code blocks live there.
    #[error("{0}")]
    TileMemoryExceeded(Box<popart_lower::ipu_model::OutOfMemory>),
    /// The `ipu_model` estimate could not be made (an unusable
    /// [`crate::SessionOptions::ipu_model`] config, or live bytes overflowing).
    #[error("ipu_model: {0}")]
    IpuModel(#[from] popart_lower::ipu_model::IpuModelError),
    /// The `cpu` device failed in a way not covered by the variants above
    /// (which its allocation and kernel errors map to): a malformed
    /// executable, a binding or run failure of the executor, the replica
    /// threads. See [`CpuError`].
    #[error("device: {0}")]
    Device(CpuError),
    /// A broken invariant of the session (a bug, not a user mistake); the
    /// session may not be usable afterwards. Returned only if one of these
    /// breaks:
    /// - the host conversions of `popxl` (`HostArray::try_cast`,
    ///   `try_downcast_64bit`, `from_host_tensor`) fail only with `HostCast`,
    ///   `Size` or `HostData` errors (each mapped to its own variant here);
    /// - every stream and named tensor of the prepared IR's main graph has an
    ///   unbound handle (`Tensor::unbound`, `DeviceToHostStream::unbound`);
    /// - every variable of the prepared IR has a host copy (made when the
    ///   session is created);
    /// - a program compiled as one that cannot fail does not stop part way
    ///   (only a program that may fail saves the state a failure restores).
    #[error("internal session error: {reason}")]
    Internal {
        /// What broke.
        reason: String,
    },
}

/// IR errors of the preparation pipeline stay [`SessionError::InvalidIr`]; the
/// others are [`SessionError::Transform`].
impl From<popart_transforms::TransformError> for SessionError {
    fn from(e: popart_transforms::TransformError) -> Self {
        match e {
            popart_transforms::TransformError::Ir(e) => SessionError::InvalidIr(e),
            e => SessionError::Transform(e),
        }
    }
}

impl From<SizeError> for SessionError {
    fn from(e: SizeError) -> Self {
        match e {
            SizeError::Overflow { what } => SessionError::SizeOverflow { what },
            SizeError::OutOfMemory { requested, what } => SessionError::OutOfMemory { requested, what },
        }
    }
}

impl From<CpuError> for SessionError {
    /// Allocation, size and kernel errors of the device are the session's own
    /// variants (the same mistake whether the session or the device sizes the
    /// buffer); the rest is [`SessionError::Device`].
    fn from(e: CpuError) -> Self {
        match e {
            CpuError::Kernel(k) => SessionError::Kernel(k),
            CpuError::OutOfMemory { requested, what } => SessionError::OutOfMemory { requested, what },
            CpuError::SizeOverflow { what } => SessionError::SizeOverflow { what },
            e => SessionError::Device(e),
        }
    }
}
