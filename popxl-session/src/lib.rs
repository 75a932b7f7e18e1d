//! # popxl-session
//!
//! Run `popxl` IRs: [`Session`] (PopXL's `popxl.Session`) on the devices
//! `cpu`, `ipu_model` and `ipu_hw`. The `cpu` device (executor, kernels,
//! kernel registry) is the `popxl-cpu` crate, re-exported as [`cpu`].
//!
//! A session prepares its IR (`popart_transforms::prepare`), lowers it
//! (`popart_lower::lower`) and compiles the lowered programs for the cpu
//! executor ([`cpu::executor`], a crate of its own) once; `run` then only moves stream data and
//! executes the precompiled instructions. A [`Session`] is `Send`: build the IR
//! on one thread and run its session on another.

#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(clippy::undocumented_unsafe_blocks)]

/// The `cpu` device (the `popxl-cpu` crate): executor, kernels, kernel registry.
pub use popxl_cpu as cpu;
mod error;
mod host;
mod session;

pub use error::{SessionError, StreamRole};
/// The `ipu_model` device's model of an IPU (re-exported from `popart_lower`):
/// its config, report and out-of-memory report.
pub use popart_lower::ipu_model::{IpuModelConfig, IpuModelReport, OutOfMemory};

/// Register a custom op in one call: its definition with the IR's registry (so it
/// can be built, printed and parsed; see [`popart_ir::register_op`]) and its `cpu`
/// kernel builder by op identity (see [`cpu::kernels::register_kernel`]).
/// Registering the same op again is allowed; another definition under a taken
/// name is an error.
///
/// The `custom_op` example registers a leaky ReLU and its gradient this way.
pub fn register_custom_op(
    def: &'static dyn popart_ir::OpDef,
    kernel: cpu::kernel::KernelBuilder,
) -> std::result::Result<(), popart_ir::IrError> {
    popart_ir::register_op(def)?;
    cpu::kernels::register_kernel(def, kernel);
    Ok(())
}
pub use cpu::kernels::{capture_prints, set_print_sink, PrintSink};
pub use session::{
    DeviceType, InputView, Inputs, OutputView, Outputs, Result, Session, SessionContext, SessionOptions,
    TransferCounts, MAX_REPLICAS,
};
