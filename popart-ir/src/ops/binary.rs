//! Elementwise binary ops with numpy broadcasting; both operands must have the same dtype.

use super::{broadcast_shapes, op_types, require_dtype};
use crate::{DataType, InferContext, OpDef, Result, TensorInfo};

op_types!(
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`
    Div,
    /// `a ^ b`
    Pow,
    /// elementwise maximum
    Maximum,
    /// elementwise minimum
    Minimum,
    /// `a > b` (bool output)
    Greater,
    /// `a < b` (bool output)
    Less,
    /// `a == b` (bool output)
    Equal,
    /// `where(cond, lhs, rhs)`: bool condition, three-way broadcasting
    Where,
);

/// Output info of a broadcasting binary op whose inputs must share a dtype.
pub(crate) fn broadcast_info(ctx: &InferContext<'_>, a: u32, b: u32) -> Result<TensorInfo> {
    let (x, y) = (ctx.input(a)?, ctx.input(b)?);
    if x.dtype != y.dtype {
        return Err(ctx.error(format!("operands have different dtypes: {} and {}", x.dtype, y.dtype)));
    }
    let shape = broadcast_shapes(&x.shape, &y.shape)
        .ok_or_else(|| ctx.error(format!("shapes {:?} and {:?} cannot be broadcast", x.shape, y.shape)))?;
    Ok(TensorInfo::new(x.dtype, shape))
}

macro_rules! arithmetic {
    ($($ty:ident => $name:literal),*) => {$(
        impl OpDef for $ty {
            fn op_type(&self) -> &'static str { $name }
            fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                Ok(vec![broadcast_info(ctx, 0, 1)?])
            }
        }
    )*};
}
arithmetic!(Add => "Add", Sub => "Sub", Mul => "Mul", Div => "Div", Pow => "Pow", Maximum => "Maximum", Minimum => "Minimum");

macro_rules! comparison {
    ($($ty:ident => $name:literal),*) => {$(
        impl OpDef for $ty {
            fn op_type(&self) -> &'static str { $name }
            fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                let info = broadcast_info(ctx, 0, 1)?;
                Ok(vec![TensorInfo::new(DataType::Bool, info.shape)])
            }
        }
    )*};
}
comparison!(Greater => "Greater", Less => "Less", Equal => "Equal");

impl OpDef for Where {
    fn op_type(&self) -> &'static str {
        "Where"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let c = ctx.input(0)?;
        require_dtype(ctx, c, DataType::Bool, "the condition")?;
        let v = broadcast_info(ctx, 1, 2)?;
        let shape = broadcast_shapes(&c.shape, &v.shape)
            .ok_or_else(|| ctx.error(format!("condition shape {:?} cannot be broadcast to {:?}", c.shape, v.shape)))?;
        Ok(vec![TensorInfo::new(v.dtype, shape)])
    }
}

pub(crate) const ALL: &[&dyn OpDef] =
    &[&Add, &Sub, &Mul, &Div, &Pow, &Maximum, &Minimum, &Greater, &Less, &Equal, &Where];
