//! The device's own error: why the `cpu` device could not compile an
//! executable, bind host memory or run a program. `popxl-session` wraps it in
//! its `SessionError`.

use popart_ir::size::SizeError;

use crate::executor::{BindError, ExecError};
use crate::kernel::KernelError;

/// Why the `cpu` device failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CpuError {
    /// A kernel call the kernel library cannot build (unsupported type or
    /// attributes).
    #[error("compilation failed: {0}")]
    Kernel(#[from] KernelError),
    /// The allocator refused a buffer (the arena, a remote buffer, a constant).
    #[error("out of memory: cannot allocate {requested} bytes for {what}")]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
        /// What the buffer was for.
        what: String,
    },
    /// A size computed while compiling overflows.
    #[error("size of {what} overflows")]
    SizeOverflow {
        /// What was being sized.
        what: String,
    },
    /// The executable breaks an invariant `popart_lower` guarantees (a buffer
    /// outside the arena, a function or stream that does not exist): a bug of
    /// the lowering, or an executable built by hand.
    #[error("malformed executable: {reason}")]
    MalformedExecutable {
        /// Which invariant is broken.
        reason: String,
    },
    /// Host memory could not be bound to a stream, or device memory accessed.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// A program stopped.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The threads of the replicas could not be started.
    #[error("could not start the threads of {replicas} replicas: {reason}")]
    Threads {
        /// Replicas asked for.
        replicas: usize,
        /// What the operating system said.
        reason: String,
    },
}

impl From<SizeError> for CpuError {
    fn from(e: SizeError) -> Self {
        match e {
            SizeError::Overflow { what } => CpuError::SizeOverflow { what },
            SizeError::OutOfMemory { requested, what } => CpuError::OutOfMemory { requested, what },
        }
    }
}
