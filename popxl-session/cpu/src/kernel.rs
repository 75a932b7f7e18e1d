//! The kernel interface of the `cpu` device: how a lowered op becomes executable code.
//!
//! At compile time (session creation) every kernel-execution node of the lowered
//! program is turned into a `Box<dyn Kernel>` by [`build_kernel`](super::kernels::build_kernel): it finds the
//! [`KernelBuilder`] registered for the op's definition ([`register_kernel`](super::kernels::register_kernel)),
//! which looks at the attributes and the input/output infos once and picks a
//! specialised implementation. At run time the executor only calls [`Kernel::run`] with
//! pointers into its preallocated buffers: no lookup, no allocation.

use popart_ir::{Attributes, OpDef, TensorInfo};

/// Everything a kernel builder may look at, fixed at compile time.
///
/// Build one with [`KernelSpec::new`] (run-time checks off) or a struct literal.
#[derive(Clone, Debug)]
pub struct KernelSpec<'a> {
    /// The op's definition (its type).
    pub def: &'static dyn OpDef,
    /// Op attributes.
    pub attrs: &'a Attributes,
    /// Connected inputs as (op input index, info), sorted by index.
    pub inputs: Vec<(u32, TensorInfo)>,
    /// Outputs as (op output index, info), sorted by index.
    pub outputs: Vec<(u32, TensorInfo)>,
    /// Build the kernel with run-time index checks: an index or label out of
    /// range makes [`Kernel::run`] fail with [`KernelRunError::IndexOutOfRange`]
    /// before it writes anything, instead of the op's defined out-of-range
    /// result (see `SessionOptions::check_indices` in `popxl-session`). Kernels without
    /// indices ignore it.
    pub check_indices: bool,
    /// The lowered call's [`popart_lower::KernelCall::weight_invariant`]: every
    /// replica holds the same value of the weight this fused update writes.
    /// Only the replicated matmul weight update reads it.
    pub weight_invariant: bool,
}

impl<'a> KernelSpec<'a> {
    /// A spec with run-time checks off.
    pub fn new(
        def: &'static dyn OpDef,
        attrs: &'a Attributes,
        inputs: Vec<(u32, TensorInfo)>,
        outputs: Vec<(u32, TensorInfo)>,
    ) -> Self {
        KernelSpec { def, attrs, inputs, outputs, check_indices: false, weight_invariant: false }
    }
}

impl KernelSpec<'_> {
    /// The op type name (for messages).
    pub fn op_type(&self) -> &'static str {
        self.def.op_type()
    }

    /// True if the op is of the type defined by `T`.
    pub fn is<T: OpDef>(&self) -> bool {
        self.def.is::<T>()
    }
}

/// Builds the kernel of one op from its spec, once, at session creation. One is
/// registered per op type with [`register_kernel`](super::kernels::register_kernel).
pub type KernelBuilder = fn(&KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError>;

/// Why a kernel could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("no cpu kernel for op type `{op_type}`: {reason}")]
pub struct KernelError {
    /// Op type.
    pub op_type: String,
    /// What is unsupported.
    pub reason: String,
}

/// Why a kernel failed while running. Only kernels built with
/// [`KernelSpec::check_indices`] fail, and they fail before writing any output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KernelRunError {
    /// An index (a gather index, a loss label) outside `[-bound, bound)` (gather)
    /// or `[0, bound)` (labels). Unsigned indices above `i64::MAX` are reported
    /// as `i64::MAX`.
    #[error("index {index} is out of range for a dimension of size {bound}")]
    IndexOutOfRange {
        /// The index value.
        index: i64,
        /// The size of the indexed dimension.
        bound: usize,
    },
    /// A collective was abandoned because another replica failed (see
    /// [`crate::replicas::Comm::exchange`]); the executor reports the
    /// failing replica's error instead.
    #[error("a collective was abandoned because another replica failed")]
    ReplicaAborted,
    /// A float8 op's `log2_scale` tensor held a value outside `[-32, 32)`.
    #[error("log2 scale {value} is not in the range [-32, 32)")]
    Log2ScaleOutOfRange {
        /// The value read.
        value: i32,
    },
}

/// What [`Kernel::run`] returns.
pub type KernelResult = Result<(), KernelRunError>;

/// Raw buffers of one kernel execution, in the order of `KernelSpec::inputs` / `outputs`.
///
/// Invariants guaranteed by the executor: every pointer is valid and aligned to 64
/// bytes for `info.nbytes()` bytes; outputs do not overlap each other or any input,
/// except for (input, output) pairs the op declares with `OpDef::aliases` (in-place
/// updates), which are the same pointer. Kernels must read such an input through
/// the output pointer only.
pub struct KernelArgs<'a> {
    /// Input data pointers.
    pub inputs: &'a [*const u8],
    /// Output data pointers.
    pub outputs: &'a [*mut u8],
}

/// One compiled kernel.
pub trait Kernel: Send + Sync {
    /// Execute on the given buffers. An error (only from run-time checks, see
    /// [`KernelRunError`]) means no output was written.
    ///
    /// # Safety
    /// The caller guarantees the invariants documented on [`KernelArgs`].
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult;
}
