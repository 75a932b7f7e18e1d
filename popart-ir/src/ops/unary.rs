//! Elementwise unary ops: output has the input's type and shape (except `Cast`).

use super::grad::{pass_through, simple, unary_grad};
use super::{op_types, require_float};
use crate::{Attributes, GradRule, GradSource, InferContext, Op, OpDef, OpFlags, Result, TensorInfo};

op_types!(
    /// `-x`
    Neg,
    /// `|x|`
    Abs,
    /// `e^x`
    Exp,
    /// natural log
    Log,
    /// square root
    Sqrt,
    /// `max(x, 0)`
    Relu,
    /// GELU, tanh approximation (as PopXL's `gelu`)
    Gelu,
    /// hyperbolic tangent
    Tanh,
    /// logistic sigmoid
    Sigmoid,
    /// sine
    Sin,
    /// cosine
    Cos,
    /// sign (-1, 0, 1)
    Sign,
    /// round down
    Floor,
    /// round up
    Ceil,
    /// copy (PopXL `identity`, used to rename)
    Identity,
    /// identity that stops gradients
    Detach,
    /// convert to attribute `to`
    Cast,
);

/// Unary ops sharing the "same type and shape" rule; `float_only` restricts to float inputs;
/// `grad` is the gradient rule (an expression of type `GradRule`).
macro_rules! same_info_unary {
    ($($ty:ident => $name:literal, float_only = $float:literal, grad = $grad:expr $(, flags = $flags:expr)?;)*) => {
        $(
            impl OpDef for $ty {
                fn op_type(&self) -> &'static str { $name }
                fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                    let x = ctx.input(0)?;
                    if $float { require_float(ctx, x, "the input")?; }
                    Ok(vec![x.clone()])
                }
                fn grad(&self, _op: &Op) -> GradRule {
                    $grad
                }
                fn flags(&self, _attrs: &Attributes) -> OpFlags {
                    OpFlags::empty() $(| $flags)?
                }
            }
        )*
    };
}

// Derivatives: UnaryGrad reads the forward input (x) or output (y), whichever gives the
// cheaper formula: relu' = (y > 0), tanh' = 1 - y², sigmoid' = y(1 - y), sqrt' = 1/(2y),
// exp' = y, log' = 1/x, abs' = sign(x), sin' = cos(x), cos' = -sin(x), gelu' from x.
same_info_unary! {
    Neg => "Neg", float_only = false, grad = GradRule::Ops(vec![simple(&Neg, &[(0, GradSource::GradOfOutput(0))], 0)]);
    Abs => "Abs", float_only = false, grad = unary_grad(&Abs, false);
    Exp => "Exp", float_only = true, grad = unary_grad(&Exp, true);
    Log => "Log", float_only = true, grad = unary_grad(&Log, false);
    Sqrt => "Sqrt", float_only = true, grad = unary_grad(&Sqrt, true);
    Relu => "Relu", float_only = false, grad = unary_grad(&Relu, true);
    Gelu => "Gelu", float_only = true, grad = unary_grad(&Gelu, false);
    Tanh => "Tanh", float_only = true, grad = unary_grad(&Tanh, true);
    Sigmoid => "Sigmoid", float_only = true, grad = unary_grad(&Sigmoid, true);
    Sin => "Sin", float_only = true, grad = unary_grad(&Sin, false);
    Cos => "Cos", float_only = true, grad = unary_grad(&Cos, false);
    Sign => "Sign", float_only = false, grad = GradRule::Zero;
    Floor => "Floor", float_only = false, grad = GradRule::Zero;
    Ceil => "Ceil", float_only = false, grad = GradRule::Zero;
    Identity => "Identity", float_only = false, grad = GradRule::Ops(vec![pass_through(0)]), flags = OpFlags::VIEW;
    Detach => "Detach", float_only = false, grad = GradRule::Stop, flags = OpFlags::VIEW;
}

impl OpDef for Cast {
    fn op_type(&self) -> &'static str {
        "Cast"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let to = ctx.attrs.dtype("to").ok_or_else(|| ctx.error("missing dtype attribute `to`"))?;
        Ok(vec![TensorInfo::new(to, x.shape.clone())])
    }
    fn flags(&self, _attrs: &Attributes) -> OpFlags {
        OpFlags::empty()
    }
    /// The gradient passes through; autodiff casts it back to the input's dtype.
    /// Integer inputs get none (integer paths carry no gradient).
    fn grad(&self, _op: &Op) -> GradRule {
        GradRule::Ops(vec![pass_through(0)])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[
    &Neg, &Abs, &Exp, &Log, &Sqrt, &Relu, &Gelu, &Tanh, &Sigmoid, &Sin, &Cos, &Sign, &Floor, &Ceil, &Identity, &Detach,
    &Cast,
];
