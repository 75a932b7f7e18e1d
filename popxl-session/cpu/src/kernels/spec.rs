//! Build-time helpers of the kernel factories: typed accessors on a [`KernelSpec`]
//! ([`SpecExt`], [`Slot`]), axis normalisation and the factory result type.

use std::marker::PhantomData;

use popart_ir::ops::{normalize_axes, normalize_axis};
use popart_ir::{DataType, TensorInfo};

use crate::kernel::{Kernel, KernelError, KernelSpec};

/// `Result` of a kernel factory.
pub(crate) type BuildResult = Result<Box<dyn Kernel>, KernelError>;

/// Box a kernel as a factory result.
pub(crate) fn boxed(kernel: impl Kernel + 'static) -> BuildResult {
    Ok(Box::new(kernel))
}

/// Marker holding the type parameters of a kernel without owning values
/// (keeps kernels `Send + Sync` whatever the parameters).
pub(crate) type Types<T> = PhantomData<fn() -> T>;

/// A connected tensor of a spec: its position in [`KernelArgs`](crate::kernel::KernelArgs) and its info.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot<'s> {
    /// Position in `KernelArgs::inputs` / `outputs`.
    pub pos: usize,
    /// Type and shape.
    pub info: &'s TensorInfo,
}

impl Slot<'_> {
    pub(crate) fn dtype(&self) -> DataType {
        self.info.dtype
    }
    pub(crate) fn shape(&self) -> &[usize] {
        &self.info.shape
    }
    pub(crate) fn nelms(&self) -> usize {
        self.info.nelms()
    }
}

/// Convenience accessors on a [`KernelSpec`] returning typed build errors.
pub(crate) trait SpecExt {
    fn error(&self, reason: impl Into<String>) -> KernelError;
    fn input(&self, index: u32) -> Result<Slot<'_>, KernelError>;
    fn opt_input(&self, index: u32) -> Option<Slot<'_>>;
    fn output(&self, index: u32) -> Result<Slot<'_>, KernelError>;
    fn unsupported_dtype(&self, dtype: DataType) -> KernelError;
    /// The op's typed attributes (`CumSumAttrs`...), decoded and validated by
    /// their declaration in the IR (at kernel build time, never in a step).
    fn typed<A: popart_ir::OpAttrs>(&self) -> Result<A, KernelError>;
}

impl SpecExt for KernelSpec<'_> {
    fn error(&self, reason: impl Into<String>) -> KernelError {
        KernelError { op_type: self.op_type().to_string(), reason: reason.into() }
    }
    fn input(&self, index: u32) -> Result<Slot<'_>, KernelError> {
        self.opt_input(index).ok_or_else(|| self.error(format!("input {index} is not connected")))
    }
    fn opt_input(&self, index: u32) -> Option<Slot<'_>> {
        self.inputs.iter().position(|(i, _)| *i == index).map(|pos| Slot { pos, info: &self.inputs[pos].1 })
    }
    fn output(&self, index: u32) -> Result<Slot<'_>, KernelError> {
        self.outputs
            .iter()
            .position(|(i, _)| *i == index)
            .map(|pos| Slot { pos, info: &self.outputs[pos].1 })
            .ok_or_else(|| self.error(format!("output {index} is not connected")))
    }
    fn unsupported_dtype(&self, dtype: DataType) -> KernelError {
        self.error(format!("dtype {dtype} is not supported"))
    }
    fn typed<A: popart_ir::OpAttrs>(&self) -> Result<A, KernelError> {
        A::from_attrs(self.attrs).map_err(|e| self.error(e.to_string()))
    }
}

/// [`normalize_axis`]: a possibly negative axis against `rank`, as a build error.
pub(crate) fn norm_axis(spec: &KernelSpec<'_>, axis: i64, rank: usize) -> Result<usize, KernelError> {
    normalize_axis(axis, rank).map_err(|e| spec.error(e.to_string()))
}

/// [`normalize_axes`]: a list of axes (sorted, deduplicated; empty means all), as a build error.
pub(crate) fn norm_axes(spec: &KernelSpec<'_>, axes: &[i64], rank: usize) -> Result<Vec<usize>, KernelError> {
    normalize_axes(axes, rank).map_err(|e| spec.error(e.to_string()))
}
