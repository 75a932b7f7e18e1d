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

/// The output of a reduction; without an identity (max, min), reducing an empty
/// axis is an error, as numpy's "zero-size array to reduction operation which has
/// no identity".
fn infer_reduce_with(ctx: &InferContext<'_>, has_identity: bool) -> Result<TensorInfo> {
    let x = ctx.input(0)?;
    let axes = normalize_axes(ctx.attrs.ints("axes").unwrap_or(&[]), x.rank()).map_err(infer_error(ctx))?;
    if let Some(&a) = axes.iter().find(|&&a| x.shape[a] == 0).filter(|_| !has_identity) {
        return Err(ctx.error(format!("cannot reduce axis {a} of {x}: it is empty and the reduction has no identity")));
    }
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
    ($($ty:ident => $name:literal, $func:literal, $identity:literal);*) => {$(
        impl OpDef for $ty {
            fn op_type(&self) -> &'static str { $name }
            fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                Ok(vec![infer_reduce_with(ctx, $identity)?])
            }
            fn grad(&self, op: &Op) -> GradRule {
                reduce_grad(op, $func)
            }
        }
    )*};
}
// The last field: whether the reduction has an identity (max and min of nothing are errors).
reduce!(
    ReduceSum => "ReduceSum", "sum", true;
    ReduceMean => "ReduceMean", "mean", true;
    ReduceMax => "ReduceMax", "max", false;
    ReduceMin => "ReduceMin", "min", false
);

pub(crate) const ALL: &[&dyn OpDef] = &[&ReduceSum, &ReduceMean, &ReduceMax, &ReduceMin];
