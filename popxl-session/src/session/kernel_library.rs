//! The kernel library a session's executor is compiled with: the one place that
//! calls a [`KernelFactory`].

use crate::cpu::executor::{CpuExecutor, KernelFactory, MayFail};
use crate::cpu::kernel::{Kernel, KernelError, KernelSpec};
use crate::Result;

/// The `cpu` device's own kernels (the factory of [`crate::Session::new`]).
pub(super) fn default_kernels(spec: &KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError> {
    crate::cpu::kernels::build_kernel(spec)
}

/// Which of the default kernels may fail at run time (see [`MayFail`]).
pub(super) fn default_may_fail(spec: &KernelSpec<'_>) -> bool {
    crate::cpu::kernels::kernel_may_fail(spec)
}

/// Compile the lowered programs of `exe` for the `cpu` executor, building every
/// kernel with `kernels` (with run-time index checks when `check_indices`);
/// `may_fail` tells which kernels may fail at run time.
pub(super) fn compile(
    exe: &popart_lower::Executable,
    kernels: KernelFactory<'_>,
    may_fail: MayFail<'_>,
    check_indices: bool,
) -> Result<CpuExecutor> {
    Ok(CpuExecutor::compile(exe, kernels, check_indices, may_fail)?)
}
