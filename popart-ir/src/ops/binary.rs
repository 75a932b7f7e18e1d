//! Elementwise binary ops with numpy broadcasting; both operands must have the same dtype.

use super::grad::{pass_through, simple, spec};
use super::grad::{BinaryGrad, WhereGrad};
use super::unary::Neg;
use super::{broadcast_shapes, op_types, require_dtype};
use crate::{
    AttrValue, Attributes, DataType, GradOpSpec, GradRule, GradSource, InferContext, Op, OpDef, Result, TensorInfo,
};

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
    ($($ty:ident => $name:literal, grad = $grad:expr;)*) => {$(
        impl OpDef for $ty {
            fn op_type(&self) -> &'static str { $name }
            fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                Ok(vec![broadcast_info(ctx, 0, 1)?])
            }
            fn grad(&self, _op: &Op) -> GradRule {
                GradRule::Ops($grad)
            }
        }
    )*};
}

const G: GradSource = GradSource::GradOfOutput(0);
const A: GradSource = GradSource::FwdInput(0);
const B: GradSource = GradSource::FwdInput(1);
const Y: GradSource = GradSource::FwdOutput(0);

/// `BinaryGrad{func}(g, a, b[, y])` as the gradient of forward input `input`.
fn binary_grad(func: &str, with_output: bool, input: u32) -> GradOpSpec {
    let attrs = Attributes::new().with("func", AttrValue::Str(func.to_string()));
    if with_output {
        spec(&BinaryGrad, attrs, &[(0, G), (1, A), (2, B), (3, Y)], &[(0, input)])
    } else {
        spec(&BinaryGrad, attrs, &[(0, G), (1, A), (2, B)], &[(0, input)])
    }
}

// Gradients are computed at the broadcast (output) shape; autodiff reduces each to its
// operand's shape.
arithmetic! {
    Add => "Add", grad = vec![pass_through(0), pass_through(1)];
    Sub => "Sub", grad = vec![pass_through(0), simple(&Neg, &[(0, G)], 1)];
    Mul => "Mul", grad = vec![simple(&Mul, &[(0, G), (1, B)], 0), simple(&Mul, &[(0, G), (1, A)], 1)];
    Div => "Div", grad = vec![simple(&Div, &[(0, G), (1, B)], 0), binary_grad("div_rhs", false, 1)];
    Pow => "Pow", grad = vec![binary_grad("pow_lhs", false, 0), binary_grad("pow_rhs", true, 1)];
    Maximum => "Maximum", grad = vec![binary_grad("max_lhs", true, 0), binary_grad("max_rhs", true, 1)];
    Minimum => "Minimum", grad = vec![binary_grad("min_lhs", true, 0), binary_grad("min_rhs", true, 1)];
}

macro_rules! comparison {
    ($($ty:ident => $name:literal),*) => {$(
        impl OpDef for $ty {
            fn op_type(&self) -> &'static str { $name }
            fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                let info = broadcast_info(ctx, 0, 1)?;
                Ok(vec![TensorInfo::new(DataType::Bool, info.shape)])
            }
            /// Boolean output: zero gradient.
            fn grad(&self, _op: &Op) -> GradRule {
                GradRule::Zero
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
    /// `WhereGrad{arg}(g, cond)` for each value operand; the condition gets none (bool).
    fn grad(&self, _op: &Op) -> GradRule {
        let arm = |arg: i64, input: u32| {
            let attrs = Attributes::new().with("arg", AttrValue::Int(arg));
            spec(&WhereGrad, attrs, &[(0, G), (1, GradSource::FwdInput(0))], &[(0, input)])
        };
        GradRule::Ops(vec![arm(0, 1), arm(1, 2)])
    }
}

pub(crate) const ALL: &[&dyn OpDef] =
    &[&Add, &Sub, &Mul, &Div, &Pow, &Maximum, &Minimum, &Greater, &Less, &Equal, &Where];
