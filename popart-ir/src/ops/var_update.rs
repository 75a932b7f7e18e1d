//! In-place variable updates: output 0 is input 0, modified in place.

use super::{broadcast_shapes, op_types};
use crate::{Attributes, InferContext, OpDef, OpFlags, Result, TensorInfo};

op_types!(
    /// `t += x` (PopXL `add_`)
    AddInplace,
    /// `t += factor * x` (PopXL `accumulate_`); factor from attribute `factor` or optional input 2
    Accumulate,
    /// `x = a * x + b * y` (PopXL `scaled_add_`); a, b from attributes or optional inputs 2, 3
    ScaledAddInplace,
    /// `t = x` (PopXL `copy_var_update_`)
    CopyVarUpdate,
    /// `w = a * w + b * (xᵀ @ g reduced to w's shape)` in place: inputs (g, x, w) as
    /// `MatMulRhsGrad(g, x, w)`, attributes `a`, `b`. Created by the
    /// `fuse_weight_update` pattern from a weight gradient and its `ScaledAddInplace`;
    /// users do not build it directly.
    ScaledAddMatMulRhsGradInplace,
);

/// Checks input 1 (and optional scalar inputs) against the updated input 0; returns input 0's info.
fn infer_update(ctx: &InferContext<'_>, exact_shape: bool, scalar_inputs: &[u32]) -> Result<Vec<TensorInfo>> {
    let (t, x) = (ctx.input(0)?, ctx.input(1)?);
    if t.dtype != x.dtype {
        return Err(ctx.error(format!("updated tensor is {} but the update is {}", t.dtype, x.dtype)));
    }
    let ok =
        if exact_shape { t.shape == x.shape } else { broadcast_shapes(&t.shape, &x.shape).as_ref() == Some(&t.shape) };
    if !ok {
        return Err(ctx.error(format!("update of shape {:?} does not fit tensor of shape {:?}", x.shape, t.shape)));
    }
    for &i in scalar_inputs {
        if let Some(s) = ctx.optional_input(i) {
            if s.nelms() != 1 || s.dtype != t.dtype {
                return Err(ctx.error(format!("input {i} must be a {} scalar, got {s}", t.dtype)));
            }
        }
    }
    Ok(vec![t.clone()])
}

macro_rules! update {
    ($($ty:ident => $name:literal, exact = $exact:literal, scalars = $scalars:expr;)*) => {$(
        impl OpDef for $ty {
            fn op_type(&self) -> &'static str { $name }
            fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                infer_update(ctx, $exact, $scalars)
            }
            fn flags(&self, _attrs: &Attributes) -> OpFlags {
                OpFlags::MODIFIES_INPUTS | OpFlags::INPLACE
            }
            fn modified_inputs(&self, _attrs: &Attributes) -> Vec<u32> { vec![0] }
            fn aliases(&self, _attrs: &Attributes) -> Vec<(u32, u32)> { vec![(0, 0)] }
        }
    )*};
}
update! {
    AddInplace => "AddInplace", exact = false, scalars = &[];
    Accumulate => "Accumulate", exact = false, scalars = &[2];
    ScaledAddInplace => "ScaledAddInplace", exact = false, scalars = &[2, 3];
    CopyVarUpdate => "CopyVarUpdate", exact = true, scalars = &[];
}

impl OpDef for ScaledAddMatMulRhsGradInplace {
    fn op_type(&self) -> &'static str {
        "ScaledAddMatMulRhsGradInplace"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (g, x, w) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        ctx.float("a")?;
        ctx.float("b")?;
        if g.dtype != w.dtype || x.dtype != w.dtype || !w.dtype.is_floating_point() {
            return Err(ctx.error(format!("operands must share a float dtype: g {g}, x {x}, w {w}")));
        }
        let y = super::matmul::matmul_shape(&x.shape, &w.shape).map_err(|m| ctx.error(m))?;
        if y != g.shape {
            return Err(ctx.error(format!("gradient {g} does not match {:?} @ {:?}", x.shape, w.shape)));
        }
        Ok(vec![w.clone()])
    }
    fn flags(&self, _attrs: &Attributes) -> OpFlags {
        OpFlags::MODIFIES_INPUTS | OpFlags::INPLACE
    }
    fn modified_inputs(&self, _attrs: &Attributes) -> Vec<u32> {
        vec![2]
    }
    fn aliases(&self, _attrs: &Attributes) -> Vec<(u32, u32)> {
        vec![(2, 0)]
    }
}

pub(crate) const ALL: &[&dyn OpDef] =
    &[&AddInplace, &Accumulate, &ScaledAddInplace, &CopyVarUpdate, &ScaledAddMatMulRhsGradInplace];
