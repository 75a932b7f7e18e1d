//! # popart-lower
//!
//! Lowers a prepared `popart_ir::Ir` (verified and pruned, see
//! `popart_transforms::prepare`) into a device-independent [`Executable`]:
//!
//! - **programs** shaped like Poplar's program tree ([`Program`]): sequences,
//!   kernel executions, copies, function calls, repeats, ifs and host stream
//!   copies; one `run` executes [`Programs::main`], and the engine also has
//!   `init` (constants), `weights_from_host` and `weights_to_host`;
//! - **functions**: every subgraph is lowered once ([`Function`]) and called from
//!   each call site, which copies inputs in, calls, copies outputs out and copies
//!   modified inputs back, eliding copies where the callee can use the caller's
//!   buffer directly; repeats become [`Program::Repeat`] with loop-carried copies
//!   (inputs are copied in once; after each iteration output k is copied to input
//!   k; inputs beyond the outputs keep their buffer for the whole loop, so in-place
//!   changes the body makes to them persist across iterations, as on Poplar),
//!   ifs become [`Program::If`];
//! - a **memory plan**: every tensor lives in a [`Buffer`] at a fixed offset of one
//!   arena (64-byte aligned); variables and constants are always live, activation
//!   buffers are reused when their lifetimes in the global schedule do not overlap
//!   (offsets: the better of greedy-by-size and a best-fit time sweep), in-place ops
//!   write into their input's buffer, and view ops ([`popart_ir::OpFlags::VIEW`]) run no kernel
//!   but share their input's buffer whenever no op writes either in place
//!   ([`MemoryPlan`] reports the planned peak, the no-reuse total and the host-load
//!   landing bytes);
//! - a stable **text dump** ([`Executable::dump`]).
//!
//! This crate knows no devices and no kernels: a device turns each
//! [`KernelCall`] into its own kernel, keyed by op type.
//!
//! ## Layout
//!
//! - `executable`: the lowered form ([`Executable`] and its parts); `dump`: its text
//!   dump;
//! - `lower`: the algorithm behind [`lower()`], one module per concept:
//!   - `index`: typed dense indices (`GraphIndex`, `TensorKey`, `ClassId`, `SiteId`,
//!     `TempId`) and the `IndexVec` tables keyed by them;
//!   - `graphs`: reachable graphs, their schedules and tensor keys; `sites`: call
//!     sites (`Call`, `Repeat`, `If` branches) and their argument bindings;
//!   - `classes`: alias classes (union-find); `sharing`: the passes merging them
//!     (in-place aliases, call-copy elision, views);
//!   - `copies`: the copies each call site still needs;
//!   - `timeline`: the global step numbering with calls expanded in place;
//!     `liveness`: local live intervals and class lifetimes;
//!   - `buffers`: buffers numbered in program order and placed in the arena;
//!   - `host`: streams, weights and constants; `emit`: functions and programs;
//! - `memory`: offset assignment for buffers with live intervals;
//! - [`memory_plot`]: the memory report as an SVG plot ([`Executable::memory_plot`]);
//! - [`ipu_model`]: an IPU model of an executable (tile memory per program point
//!   and an estimated timeline), a pure function of the executable and an
//!   [`IpuModelConfig`].

#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![forbid(unsafe_code)]

mod dump;
mod executable;
pub mod ipu_model;
mod lower;
mod memory;
pub mod memory_plot;
mod report;

pub use executable::{
    Arg, Buffer, BufferId, BufferKind, CodeLiveness, Constant, Executable, Function, FunctionId, KernelCall,
    MemoryPlan, Program, Programs, RemoteOffset, RemoteWeight, Stream, StreamId, StreamKind, TensorRef, Weight,
    BUFFER_ALIGNMENT,
};
pub use ipu_model::{IpuModelConfig, IpuModelReport};
pub use lower::lower;
pub use report::{LiveBuffer, MemoryReport};

/// Why an IR could not be lowered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LowerError {
    /// The IR itself is invalid (scheduling failed, a graph calls itself...).
    #[error(transparent)]
    Ir(#[from] popart_ir::IrError),
    /// The main graph has inputs; it can only take data from host streams.
    #[error("the main graph has input `{0}`; the main graph takes data from host streams, not graph inputs")]
    MainGraphInput(String),
    /// A host load/store names a stream that is not a main-graph stream of the right direction.
    #[error("op `{op}` of graph `{graph}` uses stream `{stream}`, which is not a main-graph stream of its direction")]
    UnknownStream {
        /// Graph of the op.
        graph: String,
        /// The op.
        op: String,
        /// The stream name it gives.
        stream: String,
    },
    /// The memory plan's total size overflows (tensors of user-given shapes whose
    /// sizes add up to more than [`popart_ir::size::MAX_TENSOR_BYTES`]).
    #[error(transparent)]
    Size(#[from] popart_ir::SizeError),
    /// An op's definition declares aliases that do not fit its tensors (a
    /// custom `OpDef` naming a port the op does not have, or an output larger
    /// than the input memory it is declared to be): refused before any buffer
    /// is planned, so that no kernel reads or writes outside a buffer.
    #[error("op `{op}` ({op_type}) of graph `{graph}`: its alias declaration does not fit its tensors: {reason}")]
    Declaration {
        /// Graph of the op.
        graph: String,
        /// The op.
        op: String,
        /// Its type.
        op_type: String,
        /// What does not fit.
        reason: String,
    },
    /// A broken invariant of the lowering itself (a bug, or an unverified IR).
    #[error("internal lowering error: {0}")]
    Internal(String),
}
