//! Elementwise unary ops: output has the input's type and shape (except `Cast`).

use super::grad::{infer_unary_derivative, pass_through, simple, spec, unary_derivative, UnaryDerivative, UnaryGradOp};
use super::{op_types, require_float};
use crate::{
    op_attrs, Alias, AttrError, AttrSpec, AttrValue, Attributes, DataType, GradRule, GradSource, InferContext,
    IpuRoute, OpAttrs, OpDef, Result, TensorInfo,
};

op_attrs! {
    /// Attributes of `Cast`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct CastAttrs {
        /// The output's data type.
        pub to: DataType,
    }
}

op_attrs! {
    /// Attributes of `Clip` and `ClipGrad`: the bounds (absent: unbounded; not
    /// NaN, `min <= max`).
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct ClipAttrs {
        /// Lower bound.
        pub min: Option<f64> = None,
        /// Upper bound.
        pub max: Option<f64> = None,
    }
    validate = ClipAttrs::check;
}

impl ClipAttrs {
    /// The bounds, infinite where absent.
    pub fn bounds(&self) -> (f64, f64) {
        (self.min.unwrap_or(f64::NEG_INFINITY), self.max.unwrap_or(f64::INFINITY))
    }
    fn check(&self) -> std::result::Result<(), AttrError> {
        let (min, max) = self.bounds();
        for (key, v) in [("min", min), ("max", max)] {
            if v.is_nan() {
                return Err(AttrError::OutOfRange {
                    attr: key.into(),
                    expected: "a bound that is not NaN",
                    got: AttrValue::Float(v),
                });
            }
        }
        if min > max {
            return Err(AttrError::OutOfRange {
                attr: "max".into(),
                expected: "at least `min`",
                got: AttrValue::Float(max),
            });
        }
        Ok(())
    }
}

op_attrs! {
    /// Attributes of `IncrementMod` and `IncrementModInplace` (finite; cast to
    /// the element type).
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct IncrementModAttrs {
        /// Added to each element.
        pub increment: f64,
        /// The modulus (not zero in the element type).
        pub modulus: f64,
    }
    validate = |a: &IncrementModAttrs| {
        for (key, v) in [("increment", a.increment), ("modulus", a.modulus)] {
            if !v.is_finite() {
                return Err(AttrError::OutOfRange { attr: key.into(), expected: "a finite number", got: AttrValue::Float(v) });
            }
        }
        Ok(())
    };
}

op_attrs! {
    /// Attributes of `IpuCopy`: IPU numbers (`0..=u32::MAX`).
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct IpuCopyAttrs {
        /// The IPU the input is on.
        pub source: i64,
        /// The IPU the output is written on.
        pub destination: i64,
    }
    validate = |a: &IpuCopyAttrs| {
        for (key, v) in [("source", a.source), ("destination", a.destination)] {
            if u32::try_from(v).is_err() {
                return Err(AttrError::OutOfRange { attr: key.into(), expected: "an IPU number (0 to 4294967295)", got: AttrValue::Int(v) });
            }
        }
        Ok(())
    };
}

op_types!(
    /// convert to attribute `to`
    Cast,
    /// `clamp(x, min, max)` (PopXL `clip`/`clamp`); float attributes `min`, `max`
    /// (absent: unbounded), cast to the element type. NaN propagates.
    Clip,
    /// `ClipGrad{min, max}(g, y)`: `g` where the forward output `y` is strictly
    /// inside `(min, max)`, else 0 (PopART's rule: the gradient is zero where the
    /// output equals a bound, including an input exactly on it).
    ClipGrad,
    /// `(x + increment) % modulus` (PopXL `increment_mod`); float attributes
    /// `increment`, `modulus` cast to the element type (C remainder: the result has
    /// the sign of `x + increment`).
    IncrementMod,
    /// `increment_mod` in place (PopXL `increment_mod_`).
    IncrementModInplace,
    /// `detach` in place (PopXL `detach_`): output 0 aliases input 0, nothing is
    /// written, gradients stop.
    DetachInplace,
    /// `IpuCopy{source, destination}(t)`: `t` copied from IPU `source` to IPU
    /// `destination` (PopXL `ipu_copy`); same type and shape. The op runs on
    /// the destination (its placement), reads on the source
    /// ([`OpDef::ipu_route`]); its gradient copies the gradient back from
    /// `destination` to `source`. The `cpu` device runs it as a plain copy.
    IpuCopy,
);

/// The table of unary ops sharing the "same type and shape" rule, one line each:
/// `/// doc` then `Type => "OpType", float_only = bool, grad = GradRule expr[, aliases = [Alias...]];`.
/// `float_only` restricts to float inputs. Declares each zero-sized type, its
/// [`OpDef`] and the list [`TABLE`] that registers them.
macro_rules! same_info_unary {
    ($($(#[$doc:meta])* $ty:ident => $name:literal, float_only = $float:literal, grad = $grad:expr $(, aliases = $aliases:expr)?;)*) => {
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
                fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
                    $grad
                }
                $(fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
                    $aliases.to_vec()
                })?
            }
        )*

        /// Every op of the same-info table.
        pub(crate) const TABLE: &[&dyn OpDef] = &[$(&$ty),*];
    };
}

/// The table of unary ops differentiated by a gradient op type of their own,
/// one line each: `/// doc` then `Type => "OpType", float_only = bool, grad = GradType(X | Y);`.
/// Declares each forward type (as [`same_info_unary!`]), its gradient op type
/// `GradType` (registered as `"OpTypeGrad"`: `(g, x | y) -> dx`, the forward
/// tensor at input 1) and their [`UnaryDerivative`]/[`UnaryGradOp`] links;
/// `X` or `Y` is which forward tensor the gradient reads, declared here only:
/// autodiff connects it and the devices' derivative kernels must read it.
macro_rules! differentiable_unary {
    ($($(#[$doc:meta])* $ty:ident => $name:literal, float_only = $float:literal, grad = $gty:ident($reads:ident);)*) => {
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
                fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
                    unary_derivative::<$ty>()
                }
            }

            impl UnaryDerivative for $ty {
                type Grad = $gty;
                type Reads = super::grad::$reads;
                const GRAD: &'static $gty = &$gty;
            }

            #[doc = concat!("`", $name, "Grad(g, ", stringify!($reads), ")`: the gradient of [`", stringify!($ty),
                "`] w.r.t. its input, from the incoming gradient `g` and the forward tensor `",
                stringify!($reads), "` at input 1 (see [`UnaryDerivative`]).")]
            #[derive(Debug, Clone, Copy, Default)]
            pub struct $gty;

            impl OpDef for $gty {
                fn op_type(&self) -> &'static str { concat!($name, "Grad") }
                fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                    infer_unary_derivative(ctx)
                }
            }

            impl UnaryGradOp for $gty {
                type Fwd = $ty;
            }
        )*

        /// Every op of the differentiable table, each followed by its gradient op.
        pub(crate) const DIFFERENTIABLE: &[&dyn OpDef] = &[$(&$ty, &$gty),*];

        /// `(forward op, its gradient op)` of every line of the differentiable table.
        pub const DERIVATIVES: &[(&dyn OpDef, &dyn OpDef)] = &[$((&$ty, &$gty)),*];
    };
}

// Derivatives read the forward input (X) or output (Y), whichever gives the
// cheaper formula: relu' = (y > 0), tanh' = 1 - y², sigmoid' = y(1 - y), sqrt' = 1/(2y),
// exp' = y, log' = 1/x, abs' = sign(x), sin' = cos(x), cos' = -sin(x), gelu' from x.
differentiable_unary! {
    /// `|x|`
    Abs => "Abs", float_only = false, grad = AbsGrad(X);
    /// `e^x`
    Exp => "Exp", float_only = true, grad = ExpGrad(Y);
    /// natural log
    Log => "Log", float_only = true, grad = LogGrad(X);
    /// base-2 logarithm (PopXL `log2`)
    Log2 => "Log2", float_only = true, grad = Log2Grad(X);
    /// `ln(1 + x)`, accurate for small `x` (not in PopXL; for stable losses)
    Log1p => "Log1p", float_only = true, grad = Log1pGrad(X);
    /// square root
    Sqrt => "Sqrt", float_only = true, grad = SqrtGrad(Y);
    /// `max(x, 0)`
    Relu => "Relu", float_only = false, grad = ReluGrad(Y);
    /// GELU, tanh approximation (as PopXL's `gelu`)
    Gelu => "Gelu", float_only = true, grad = GeluGrad(X);
    /// GELU with the exact erf, `x Φ(x)` (PopXL `geluerf`)
    GeluErf => "GeluErf", float_only = true, grad = GeluErfGrad(X);
    /// `x · sigmoid(x)` (PopXL `swish`)
    Swish => "Swish", float_only = true, grad = SwishGrad(X);
    /// hyperbolic tangent
    Tanh => "Tanh", float_only = true, grad = TanhGrad(Y);
    /// logistic sigmoid
    Sigmoid => "Sigmoid", float_only = true, grad = SigmoidGrad(Y);
    /// sine
    Sin => "Sin", float_only = true, grad = SinGrad(X);
    /// cosine
    Cos => "Cos", float_only = true, grad = CosGrad(X);
}

same_info_unary! {
    /// `-x`
    Neg => "Neg", float_only = false, grad = GradRule::Ops(vec![simple(&Neg, &[(0, GradSource::GradOfOutput(0))], 0)]);
    /// sign (-1, 0, 1)
    Sign => "Sign", float_only = false, grad = GradRule::Zero;
    /// round down
    Floor => "Floor", float_only = false, grad = GradRule::Zero;
    /// round up
    Ceil => "Ceil", float_only = false, grad = GradRule::Zero;
    /// copy (PopXL `identity`, used to rename)
    Identity => "Identity", float_only = false, grad = GradRule::Ops(vec![pass_through(0)]), aliases = [Alias::copy(0, 0)];
    /// identity that stops gradients
    Detach => "Detach", float_only = false, grad = GradRule::Stop, aliases = [Alias::copy(0, 0)];
    /// copy between compute and IO tiles (PopXL `io_tile_copy`; the op's
    /// placement names the destination tile set)
    IoTileCopy => "IoTileCopy", float_only = false, grad = GradRule::Ops(vec![pass_through(0)]);
}

impl OpDef for Cast {
    fn op_type(&self) -> &'static str {
        "Cast"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        CastAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let to = CastAttrs::infer(ctx)?.to;
        if to.is_float8() || x.dtype.is_float8() {
            return Err(ctx.error(format!(
                "cast from {} to {to}: float8 casts are pow2scale_cast_to_fp8 and pow2scale_cast_from_fp8",
                x.dtype
            )));
        }
        Ok(vec![TensorInfo::new(to, x.shape.clone())])
    }
    /// The gradient passes through; autodiff casts it back to the input's dtype.
    /// Integer inputs get none (integer paths carry no gradient).
    fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
        GradRule::Ops(vec![pass_through(0)])
    }
}

/// In-place variants of unary ops of the table (PopXL's `exp_`, `relu_`...): same
/// inference as the out-of-place op, output 0 aliases input 0, which is written;
/// no gradient (PopXL marks in-place variants ✗).
macro_rules! inplace_unary {
    ($($(#[$doc:meta])* $ty:ident => $name:literal of $fwd:ident;)*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy, Default)]
            pub struct $ty;

            impl OpDef for $ty {
                fn op_type(&self) -> &'static str { $name }
                fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                    $fwd.infer(ctx)
                }
                fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> { vec![Alias::modified(0, 0)] }
            }
        )*
        /// Every in-place unary op of the table above.
        pub(crate) const INPLACE: &[&dyn OpDef] = &[$(&$ty),*];
    };
}

inplace_unary! {
    /// `exp` in place (PopXL `exp_`)
    ExpInplace => "ExpInplace" of Exp;
    /// `relu` in place (PopXL `relu_`)
    ReluInplace => "ReluInplace" of Relu;
    /// `gelu` in place (PopXL `gelu_`)
    GeluInplace => "GeluInplace" of Gelu;
    /// `geluerf` in place (PopXL `geluerf_`)
    GeluErfInplace => "GeluErfInplace" of GeluErf;
    /// `swish` in place (PopXL `swish_`)
    SwishInplace => "SwishInplace" of Swish;
}

impl OpDef for DetachInplace {
    fn op_type(&self) -> &'static str {
        "DetachInplace"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        Ok(vec![ctx.input(0)?.clone()])
    }
    /// Aliases its input byte for byte without writing it.
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::identical(0, 0)]
    }
    fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
        GradRule::Stop
    }
}

impl OpDef for IpuCopy {
    fn op_type(&self) -> &'static str {
        "IpuCopy"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        IpuCopyAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        IpuCopyAttrs::infer(ctx)?;
        Ok(vec![ctx.input(0)?.clone()])
    }
    /// An `IpuCopy` back: from the forward destination to the forward source,
    /// where the gradient of the input is needed (PopART's IPU copies of
    /// gradients run the other way).
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = IpuCopyAttrs::of(op) else { return GradRule::None };
        let attrs = IpuCopyAttrs { source: a.destination, destination: a.source }.to_attrs();
        GradRule::Ops(vec![spec(&IpuCopy, attrs, &[(0, GradSource::GradOfOutput(0))], &[(0, 0)])])
    }
    fn ipu_route(&self, attrs: &Attributes) -> Option<IpuRoute> {
        let a = IpuCopyAttrs::from_attrs(attrs).ok()?;
        Some(IpuRoute { source: u32::try_from(a.source).ok()?, destination: u32::try_from(a.destination).ok()? })
    }
}

/// A numeric (not bool) input.
fn require_numeric<'a>(ctx: &InferContext<'a>, index: u32) -> Result<&'a TensorInfo> {
    let x = ctx.input(index)?;
    if x.dtype == crate::DataType::Bool {
        return Err(ctx.error("the input must be numeric, got bool"));
    }
    Ok(x)
}

impl OpDef for Clip {
    fn op_type(&self) -> &'static str {
        "Clip"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ClipAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        ClipAttrs::infer(ctx)?;
        Ok(vec![require_numeric(ctx, 0)?.clone()])
    }
    /// `ClipGrad{min, max}(g, y)`, from the forward output as PopART.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = ClipAttrs::of(op) else { return GradRule::None };
        GradRule::Ops(vec![spec(
            &ClipGrad,
            a.to_attrs(),
            &[(0, GradSource::GradOfOutput(0)), (1, GradSource::FwdOutput(0))],
            &[(0, 0)],
        )])
    }
}

impl OpDef for ClipGrad {
    fn op_type(&self) -> &'static str {
        "ClipGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ClipAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        ClipAttrs::infer(ctx)?;
        let (g, y) = (ctx.input(0)?, ctx.input(1)?);
        if g != y {
            return Err(ctx.error(format!("gradient {g} does not match the forward output {y}")));
        }
        Ok(vec![g.clone()])
    }
}

/// Checks `increment` and `modulus` (finite; a modulus that is zero in the
/// element type is refused) and returns the input's info.
fn infer_increment_mod(ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
    let x = require_numeric(ctx, 0)?;
    let modulus = IncrementModAttrs::infer(ctx)?.modulus;
    let zero = if x.dtype.is_floating_point() { modulus == 0.0 } else { modulus.trunc() == 0.0 };
    if zero {
        return Err(ctx.error(format!("modulus {modulus} is zero as {}", x.dtype)));
    }
    Ok(vec![x.clone()])
}

impl OpDef for IncrementMod {
    fn op_type(&self) -> &'static str {
        "IncrementMod"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        IncrementModAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        infer_increment_mod(ctx)
    }
}

impl OpDef for IncrementModInplace {
    fn op_type(&self) -> &'static str {
        "IncrementModInplace"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        IncrementModAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        infer_increment_mod(ctx)
    }
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::modified(0, 0)]
    }
}

/// The ops of this file outside [`TABLE`] and [`INPLACE`].
pub(crate) const ALL: &[&dyn OpDef] =
    &[&Cast, &Clip, &ClipGrad, &IncrementMod, &IncrementModInplace, &DetachInplace, &IpuCopy];
