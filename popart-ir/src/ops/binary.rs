//! Elementwise binary ops with numpy broadcasting; both operands must have the same dtype.

use super::grad::{pass_through, simple, spec};
use super::grad::{BinaryDerivative, BinaryGrad, BinaryGradAttrs, WhereGrad, WhereGradAttrs};
use super::unary::Neg;
use super::{broadcast_shapes, op_types, require_dtype};
use crate::{
    AttrSpec, DataType, GradOpSpec, GradRule, GradSource, InferContext, Op, OpAttrs, OpDef, Result, TensorInfo,
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
    /// elementwise maximum of n >= 1 inputs at indices 0..n, all broadcast
    /// together (PopXL `maximum(*ts)`, ONNX `Max`)
    Maximum,
    /// elementwise minimum of n >= 1 inputs (PopXL `minimum(*ts)`, ONNX `Min`)
    Minimum,
    /// `fmod(a, b)`: remainder of the truncated division, with the sign of `a`
    /// (C `fmod`; integers too, a zero divisor gives 0). Gradient: `g` for `a`,
    /// none for `b` (PopART's `FmodArg0Grad`).
    Fmod,
    /// `a * x + b * y`, `y` broadcast to `x`'s shape (PopXL `scaled_add`): float
    /// attributes `a`, `b` (default 1) or scalar tensors at inputs 2, 3. No gradient.
    ScaledAdd,
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
            fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
                GradRule::Ops($grad)
            }
        }
    )*};
}

const G: GradSource = GradSource::GradOfOutput(0);
const A: GradSource = GradSource::FwdInput(0);
const B: GradSource = GradSource::FwdInput(1);
const Y: GradSource = GradSource::FwdOutput(0);

/// `BinaryGrad{derivative}(g, a, b[, y])` as the gradient of forward input `input`
/// (`y` connected if the derivative reads it).
fn binary_grad(derivative: BinaryDerivative, input: u32) -> GradOpSpec {
    let attrs = BinaryGradAttrs { derivative }.to_attrs();
    if derivative.reads_output() {
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
    Div => "Div", grad = vec![simple(&Div, &[(0, G), (1, B)], 0), binary_grad(BinaryDerivative::DivRhs, 1)];
    Pow => "Pow", grad = vec![binary_grad(BinaryDerivative::PowLhs, 0), binary_grad(BinaryDerivative::PowRhs, 1)];
    Fmod => "Fmod", grad = vec![pass_through(0)];
}

/// Output info of a variadic broadcasting op: inputs at 0..n (n >= 1), one dtype.
fn variadic_info(ctx: &InferContext<'_>) -> Result<TensorInfo> {
    let first = ctx.input(0)?;
    let mut shape = first.shape.clone();
    for (k, (i, t)) in ctx.inputs().iter().enumerate() {
        if *i as usize != k {
            return Err(ctx.error("inputs must be at indices 0..n"));
        }
        if t.dtype != first.dtype {
            return Err(ctx.error(format!("input {i} is {} but input 0 is {}", t.dtype, first.dtype)));
        }
        shape = broadcast_shapes(&shape, &t.shape)
            .ok_or_else(|| ctx.error(format!("input {i} of shape {:?} does not broadcast to {shape:?}", t.shape)))?;
    }
    Ok(TensorInfo::new(first.dtype, shape))
}

/// The gradient of each input of an n-ary maximum or minimum: `g` where the input
/// equals the output (every tied input gets it, as PopART's `MaxArgGrad`). Two
/// inputs use `BinaryGrad{max_lhs, max_rhs}`; otherwise input `i` uses
/// `BinaryGrad{max_lhs}(g, x_i, y, y)`: `max_lhs` masks on `a == y` and reads
/// `b` for nothing but its connection.
fn extremum_grad(op: &Op, lhs: BinaryDerivative, rhs: BinaryDerivative) -> GradRule {
    let n = op.inputs().len() as u32;
    if n == 2 {
        return GradRule::Ops(vec![binary_grad(lhs, 0), binary_grad(rhs, 1)]);
    }
    let attrs = BinaryGradAttrs { derivative: lhs }.to_attrs();
    let specs = (0..n)
        .map(|i| spec(&BinaryGrad, attrs.clone(), &[(0, G), (1, GradSource::FwdInput(i)), (2, Y), (3, Y)], &[(0, i)]))
        .collect();
    GradRule::Ops(specs)
}

impl OpDef for Maximum {
    fn op_type(&self) -> &'static str {
        "Maximum"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        Ok(vec![variadic_info(ctx)?])
    }
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        extremum_grad(op, BinaryDerivative::MaxLhs, BinaryDerivative::MaxRhs)
    }
}

impl OpDef for Minimum {
    fn op_type(&self) -> &'static str {
        "Minimum"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        Ok(vec![variadic_info(ctx)?])
    }
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        extremum_grad(op, BinaryDerivative::MinLhs, BinaryDerivative::MinRhs)
    }
}

impl OpDef for ScaledAdd {
    fn op_type(&self) -> &'static str {
        "ScaledAdd"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        super::var_update::ScaleAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (x, y) = (ctx.input(0)?, ctx.input(1)?);
        let out = broadcast_info(ctx, 0, 1)?;
        if out.shape != x.shape {
            return Err(ctx.error(format!("y of shape {:?} does not broadcast to x's shape {:?}", y.shape, x.shape)));
        }
        if x.dtype == DataType::Bool {
            return Err(ctx.error("operands must be numeric, got bool"));
        }
        let scales = super::var_update::ScaleAttrs::infer(ctx)?;
        for (i, key, attr) in [(2, "a", scales.a), (3, "b", scales.b)] {
            if let Some(s) = ctx.optional_input(i) {
                if s.nelms() != 1 || s.dtype != x.dtype {
                    return Err(ctx.error(format!("input {i} (`{key}`) must be a {} scalar, got {s}", x.dtype)));
                }
                if attr.is_some() {
                    return Err(ctx.error(format!("`{key}` is given both as attribute and as input {i}")));
                }
            }
        }
        Ok(vec![x.clone()])
    }
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
            fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
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
    fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
        let arm = |arg: i64, input: u32| {
            let attrs = WhereGradAttrs { arg }.to_attrs();
            spec(&WhereGrad, attrs, &[(0, G), (1, GradSource::FwdInput(0))], &[(0, input)])
        };
        GradRule::Ops(vec![arm(0, 1), arm(1, 2)])
    }
}

pub(crate) const ALL: &[&dyn OpDef] =
    &[&Add, &Sub, &Mul, &Div, &Pow, &Maximum, &Minimum, &Greater, &Less, &Equal, &Where, &Fmod, &ScaledAdd];
