//! Errors of the executor: binding host memory and running programs.

use super::KernelRunError;

/// Why host memory could not be bound to a stream, or device memory accessed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BindError {
    /// The stream id is not a stream of the executable.
    #[error("stream s{0} does not exist")]
    UnknownStream(u32),
    /// The host memory is too small for `count` elements.
    #[error("stream s{stream}: host memory of {got} bytes cannot hold {count} elements of {element_bytes} bytes")]
    TooSmall {
        /// Stream id.
        stream: u32,
        /// Bytes given.
        got: usize,
        /// Elements requested.
        count: usize,
        /// Bytes per element.
        element_bytes: usize,
    },
    /// A device-memory range that does not lie within the arena.
    #[error("bytes {offset}..{offset}+{len} lie outside the arena of {arena_bytes} bytes")]
    OutsideArena {
        /// Start of the range.
        offset: usize,
        /// Its length.
        len: usize,
        /// Size of the arena.
        arena_bytes: usize,
    },
    /// An entry that a remote buffer does not have.
    #[error("remote buffer {buffer} has no entry {entry} ({entries} entries)")]
    RemoteEntry {
        /// Remote buffer id.
        buffer: u32,
        /// Entry asked for.
        entry: usize,
        /// Its entries.
        entries: usize,
    },
}

/// Why running an engine program stopped.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecError {
    /// A kernel built with run-time checks failed (before writing its outputs).
    #[error("op `{op}` ({op_type}): {error}")]
    Kernel {
        /// Name of the op (scoped as in the lowered program).
        op: String,
        /// Its type.
        op_type: String,
        /// What failed.
        error: KernelRunError,
    },
    /// A host transfer on a stream that is not bound (a bug of the caller).
    #[error("stream s{stream} is not bound")]
    UnboundStream {
        /// Stream id.
        stream: u32,
    },
    /// A remote load or store at an entry its buffer does not have.
    #[error("remote buffer {buffer}: offset {offset} is out of range ({entries} entries)")]
    RemoteOffset {
        /// Remote buffer id.
        buffer: u32,
        /// The offset the program computed.
        offset: i64,
        /// Entries of the buffer.
        entries: usize,
    },
    /// The replicas span processes and another process failed (or they
    /// diverged): this process's replicas stopped at the collective where
    /// they learnt it.
    #[error(transparent)]
    Processes(#[from] crate::transport::SpanError),
}
