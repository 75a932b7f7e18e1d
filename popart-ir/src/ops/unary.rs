//! Elementwise unary ops: output has the input's type and shape (except `Cast`).

use super::{op_types, require_float};
use crate::{Attributes, InferContext, OpDef, OpFlags, Result, TensorInfo};

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

/// Unary ops sharing the "same type and shape" rule; `float_only` restricts to float inputs.
macro_rules! same_info_unary {
    ($($ty:ident => $name:literal, float_only = $float:literal;)*) => {
        $(
            impl OpDef for $ty {
                fn op_type(&self) -> &'static str { $name }
                fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                    let x = ctx.input(0)?;
                    if $float { require_float(ctx, x, "the input")?; }
                    Ok(vec![x.clone()])
                }
            }
        )*
    };
}

same_info_unary! {
    Neg => "Neg", float_only = false;
    Abs => "Abs", float_only = false;
    Exp => "Exp", float_only = true;
    Log => "Log", float_only = true;
    Sqrt => "Sqrt", float_only = true;
    Relu => "Relu", float_only = false;
    Gelu => "Gelu", float_only = true;
    Tanh => "Tanh", float_only = true;
    Sigmoid => "Sigmoid", float_only = true;
    Sin => "Sin", float_only = true;
    Cos => "Cos", float_only = true;
    Sign => "Sign", float_only = false;
    Floor => "Floor", float_only = false;
    Ceil => "Ceil", float_only = false;
    Identity => "Identity", float_only = false;
    Detach => "Detach", float_only = false;
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
}

pub(crate) const ALL: &[&dyn OpDef] = &[
    &Neg, &Abs, &Exp, &Log, &Sqrt, &Relu, &Gelu, &Tanh, &Sigmoid, &Sin, &Cos, &Sign, &Floor, &Ceil, &Identity,
    &Detach, &Cast,
];
