//! # popxl-cpu
//!
//! The `cpu` device, the counterpart of PopART's `popx`: it compiles the
//! programs of a lowered [`popart_lower::Executable`] into flat instruction
//! blocks ([`executor::CpuExecutor`]), builds one kernel per kernel call from
//! a kernel library ([`kernels::build_kernel`], keyed by op identity, open to
//! custom ops through [`kernels::register_kernel`]), runs them on a team of
//! threads ([`team`]) and runs replicas in lock step ([`gang`], [`replicas`]),
//! within this process or across processes ([`transport`]; over MPI with the
//! `mpi` feature).
//!
//! The crate depends only on the IR (`popart-ir`), the lowered form
//! (`popart-lower`) and numeric crates. Its errors are [`CpuError`];
//! `popxl-session` wraps them in its `SessionError` and keeps PopXL's session
//! semantics (attach, weights, streams) on top of this device.
//!
//! The device benches (`conv_bench`, `matmul_bench`, `kernel_bench`,
//! `batch_norm_bench`, `layer_norm_bench`) are examples of this crate:
//! `cargo run --release -p popxl-cpu --example conv_bench -- --help`.

#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

mod error;
pub mod executor;
pub mod gang;
pub mod kernel;
pub mod kernels;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod peak;
pub mod replicas;
pub mod team;
pub mod transport;

pub use error::CpuError;
