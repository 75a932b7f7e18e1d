//! # popxl-session
//!
//! Run `popxl` IRs: [`Session`] (PopXL's `popxl.Session`), the devices
//! (`cpu`, `ipu_model`, `ipu_hw`) and the `cpu` executor and kernels.
//!
//! A session prepares its IR (`popart_transforms::prepare`), lowers it
//! (`popart_lower::lower`) and compiles the lowered programs for the cpu
//! executor ([`cpu::executor`]) once; `run` then only moves stream data and
//! executes the precompiled instructions. A [`Session`] is `Send`: build the IR
//! on one thread and run its session on another.

#![warn(missing_docs)]

pub mod cpu;
mod error;
mod host;
mod session;

pub use error::{SessionError, StreamRole};
pub use session::{DeviceType, Inputs, Outputs, Result, Session, SessionContext, SessionOptions, TransferCounts};
