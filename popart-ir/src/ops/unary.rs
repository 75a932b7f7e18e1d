//! Elementwise unary ops: output has the input's type and shape (except `Cast`).

use super::grad::{pass_through, simple, unary_grad};
use super::{op_types, require_float};
use crate::{Attributes, GradRule, GradSource, InferContext, Op, OpDef, OpFlags, Result, TensorInfo};

op_types!(
    /// convert to attribute `to`
    Cast,
);

/// The table of unary ops sharing the "same type and shape" rule, one line each:
/// `/// doc` then `Type => "OpType", float_only = bool, grad = GradRule expr[, flags = OpFlags];`.
/// `float_only` restricts to float inputs. Declares each zero-sized type, its
/// [`OpDef`] and the list [`TABLE`] that registers them.
macro_rules! same_info_unary {
    ($($(#[$doc:meta])* $ty:ident => $name:literal, float_only = $float:literal, grad = $grad:expr $(, flags = $flags:expr)?;)*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy, Default)]
            pub struct $ty;

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

        /// Every op of the same-info table.
        pub(crate) const TABLE: &[&dyn OpDef] = &[$(&$ty),*];
    };
}

// Derivatives: UnaryGrad reads the forward input (x) or output (y), whichever gives the
// cheaper formula: relu' = (y > 0), tanh' = 1 - y², sigmoid' = y(1 - y), sqrt' = 1/(2y),
// exp' = y, log' = 1/x, abs' = sign(x), sin' = cos(x), cos' = -sin(x), gelu' from x.
same_info_unary! {
    /// `-x`
    Neg => "Neg", float_only = false, grad = GradRule::Ops(vec![simple(&Neg, &[(0, GradSource::GradOfOutput(0))], 0)]);
    /// `|x|`
    Abs => "Abs", float_only = false, grad = unary_grad(&Abs, false);
    /// `e^x`
    Exp => "Exp", float_only = true, grad = unary_grad(&Exp, true);
    /// natural log
    Log => "Log", float_only = true, grad = unary_grad(&Log, false);
    /// `ln(1 + x)`, accurate for small `x` (not in PopXL; for stable losses)
    Log1p => "Log1p", float_only = true, grad = unary_grad(&Log1p, false);
    /// square root
    Sqrt => "Sqrt", float_only = true, grad = unary_grad(&Sqrt, true);
    /// `max(x, 0)`
    Relu => "Relu", float_only = false, grad = unary_grad(&Relu, true);
    /// GELU, tanh approximation (as PopXL's `gelu`)
    Gelu => "Gelu", float_only = true, grad = unary_grad(&Gelu, false);
    /// hyperbolic tangent
    Tanh => "Tanh", float_only = true, grad = unary_grad(&Tanh, true);
    /// logistic sigmoid
    Sigmoid => "Sigmoid", float_only = true, grad = unary_grad(&Sigmoid, true);
    /// sine
    Sin => "Sin", float_only = true, grad = unary_grad(&Sin, false);
    /// cosine
    Cos => "Cos", float_only = true, grad = unary_grad(&Cos, false);
    /// sign (-1, 0, 1)
    Sign => "Sign", float_only = false, grad = GradRule::Zero;
    /// round down
    Floor => "Floor", float_only = false, grad = GradRule::Zero;
    /// round up
    Ceil => "Ceil", float_only = false, grad = GradRule::Zero;
    /// copy (PopXL `identity`, used to rename)
    Identity => "Identity", float_only = false, grad = GradRule::Ops(vec![pass_through(0)]), flags = OpFlags::VIEW;
    /// identity that stops gradients
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

/// The ops of this file outside [`TABLE`].
pub(crate) const ALL: &[&dyn OpDef] = &[&Cast];
