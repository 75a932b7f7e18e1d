//! Reductions over axes: attributes `axes` (empty = all) and `keepdims`.

use super::grad::spec;
use super::grad::ReduceGrad;
use super::{infer_error, normalize_axes, op_types};
use crate::{AttrValue, GradRule, GradSource, InferContext, Op, OpDef, Result, TensorInfo};

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
    let axes = normalize_axes(ctx.attrs.ints("axes").unwrap_or(&[]), x.rank()).map_err(infer_error(ctx))?;
    let keepdims = ctx.attrs.bool("keepdims").unwrap_or(false);
    Ok(TensorInfo::new(x.dtype, reduced_shape(&x.shape, &axes, keepdims)))
}

/// `ReduceGrad{func, axes, keepdims}(g, x[, y])`: `max`/`min` also read the forward output
/// to find the selected elements.
fn reduce_grad(op: &Op, func: &str) -> GradRule {
    let mut attrs = op.attrs.clone();
    attrs.set("func", AttrValue::Str(func.to_string()));
    let (g, x, y) = (GradSource::GradOfOutput(0), GradSource::FwdInput(0), GradSource::FwdOutput(0));
    let inputs: &[(u32, GradSource)] =
        if matches!(func, "max" | "min") { &[(0, g), (1, x), (2, y)] } else { &[(0, g), (1, x)] };
    GradRule::Ops(vec![spec(&ReduceGrad, attrs, inputs, &[(0, 0)])])
}

macro_rules! reduce {
    ($($ty:ident => $name:literal, $func:literal);*) => {$(
        impl OpDef for $ty {
            fn op_type(&self) -> &'static str { $name }
            fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                Ok(vec![infer_reduce(ctx)?])
            }
            fn grad(&self, op: &Op) -> GradRule {
                reduce_grad(op, $func)
            }
        }
    )*};
}
reduce!(ReduceSum => "ReduceSum", "sum"; ReduceMean => "ReduceMean", "mean"; ReduceMax => "ReduceMax", "max"; ReduceMin => "ReduceMin", "min");

pub(crate) const ALL: &[&dyn OpDef] = &[&ReduceSum, &ReduceMean, &ReduceMax, &ReduceMin];
