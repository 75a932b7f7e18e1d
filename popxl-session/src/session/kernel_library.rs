//! The kernel library a session's executor is compiled with: the one place that
//! calls a [`KernelFactory`].

use crate::cpu::executor::{CpuExecutor, KernelFactory};
use crate::cpu::kernel::{Kernel, KernelError, KernelSpec};
use crate::Result;

/// The `cpu` device's own kernels (the factory of [`crate::Session::new`]).
pub(super) fn default_kernels(spec: &KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError> {
    crate::cpu::kernels::build_kernel(spec)
}

/// Compile the lowered programs of `exe` for the `cpu` executor, building every
/// kernel with `kernels` (with run-time index checks when `check_indices`).
pub(super) fn compile(
    exe: &popart_lower::Executable,
    kernels: KernelFactory<'_>,
    check_indices: bool,
) -> Result<CpuExecutor> {
    Ok(CpuExecutor::with_checks(exe, kernels, check_indices)?)
}
