//! Predicates and logical ops, all with bool output: `IsNan IsInf IsFinite`
//! (float input), `LogicalNot` (bool input), `LogicalAnd LogicalOr` (bool operands,
//! numpy broadcasting). PopXL casts non-bool operands of the logical ops to bool
//! before them (the `popxl` facade does so); the ops themselves take bool only.

use super::binary::broadcast_info;
use super::{op_types, require_dtype, require_float};
use crate::{DataType, GradRule, InferContext, OpDef, Result, TensorInfo};

op_types!(
    /// `x != x`: true where the element is NaN (PopXL `isnan`)
    IsNan,
    /// true where the element is +-infinity (PopXL `isinf`)
    IsInf,
    /// true where the element is neither NaN nor infinite (PopXL `isfinite`)
    IsFinite,
    /// `!x` (PopXL `logical_not`)
    LogicalNot,
    /// `a && b` (PopXL `logical_and`)
    LogicalAnd,
    /// `a || b` (PopXL `logical_or`)
    LogicalOr,
);

macro_rules! predicate {
    ($($ty:ident => $name:literal),*) => {$(
        impl OpDef for $ty {
            fn op_type(&self) -> &'static str { $name }
            fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                let x = ctx.input(0)?;
                require_float(ctx, x, "the input")?;
                Ok(vec![TensorInfo::new(DataType::Bool, x.shape.clone())])
            }
            /// No gradient (PopXL ✗); the bool output carries none anyway.
            fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
                GradRule::None
            }
        }
    )*};
}
predicate!(IsNan => "IsNan", IsInf => "IsInf", IsFinite => "IsFinite");

impl OpDef for LogicalNot {
    fn op_type(&self) -> &'static str {
        "LogicalNot"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        require_dtype(ctx, x, DataType::Bool, "the input")?;
        Ok(vec![x.clone()])
    }
}

macro_rules! logical_binary {
    ($($ty:ident => $name:literal),*) => {$(
        impl OpDef for $ty {
            fn op_type(&self) -> &'static str { $name }
            fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                let info = broadcast_info(ctx, 0, 1)?;
                require_dtype(ctx, &info, DataType::Bool, "the operands")?;
                Ok(vec![info])
            }
        }
    )*};
}
logical_binary!(LogicalAnd => "LogicalAnd", LogicalOr => "LogicalOr");

pub(crate) const ALL: &[&dyn OpDef] = &[&IsNan, &IsInf, &IsFinite, &LogicalNot, &LogicalAnd, &LogicalOr];
