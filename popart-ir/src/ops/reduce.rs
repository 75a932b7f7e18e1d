//! Reductions over axes: attributes `axes` (empty = all) and `keepdims`.

use super::{normalize_axes, op_types};
use crate::{InferContext, OpDef, Result, TensorInfo};

op_types!(
    /// sum over `axes`
    ReduceSum,
    /// mean over `axes`
    ReduceMean,
    /// maximum over `axes`
    ReduceMax,
    /// minimum over `axes`
    ReduceMin,
);

/// Output shape of reducing `shape` over `axes` (already normalised).
pub fn reduced_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keepdims) {
            (true, true) => Some(1),
            (true, false) => None,
            (false, _) => Some(d),
        })
        .collect()
}

pub(crate) fn infer_reduce(ctx: &InferContext<'_>) -> Result<TensorInfo> {
    let x = ctx.input(0)?;
    let axes = normalize_axes(ctx, ctx.attrs.ints("axes").unwrap_or(&[]), x.rank())?;
    let keepdims = ctx.attrs.bool("keepdims").unwrap_or(false);
    Ok(TensorInfo::new(x.dtype, reduced_shape(&x.shape, &axes, keepdims)))
}

macro_rules! reduce {
    ($($ty:ident => $name:literal),*) => {$(
        impl OpDef for $ty {
            fn op_type(&self) -> &'static str { $name }
            fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                Ok(vec![infer_reduce(ctx)?])
            }
        }
    )*};
}
reduce!(ReduceSum => "ReduceSum", ReduceMean => "ReduceMean", ReduceMax => "ReduceMax", ReduceMin => "ReduceMin");

pub(crate) const ALL: &[&dyn OpDef] = &[&ReduceSum, &ReduceMean, &ReduceMax, &ReduceMin];
