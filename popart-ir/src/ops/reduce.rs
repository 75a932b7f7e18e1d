//! Reductions over axes: attributes `axes` (empty = all) and `keepdims`.
//!
//! `ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare` have one output;
//! `ReduceMedian` also outputs the int32 index of the median within each reduced
//! group (row-major over the reduced axes), which its gradient reads. `LambSquare`
//! is the sum of squares of every element as a float32 scalar.

use super::grad::spec;
use super::grad::{ReduceGrad, ReduceGradAttrs, ReduceKind};
use super::{infer_error, normalize_axes, op_types, require_float};
use crate::{
    op_attrs, AttrSpec, DataType, GradContext, GradRule, GradSource, InferContext, OpAttrs, OpDef, Result, TensorInfo,
};

op_attrs! {
    /// Attributes of the `Reduce*` ops and `ReduceMedian`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ReduceAttrs {
        /// Reduced axes (empty: all).
        pub axes: Vec<i64> = Vec::new(),
        /// Keep reduced axes with size 1.
        pub keepdims: bool = false,
    }
}

op_attrs! {
    /// Attributes of `ReduceMedianGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ReduceMedianGradAttrs {
        /// Reduced axes (empty: all).
        pub axes: Vec<i64> = Vec::new(),
        /// Keep reduced axes with size 1.
        pub keepdims: bool = false,
        /// The forward input's shape (from the gradient rule's context).
        pub shape: Vec<i64>,
    }
}

op_types!(
    /// sum over `axes`
    ReduceSum,
    /// mean over `axes`
    ReduceMean,
    /// maximum over `axes`
    ReduceMax,
    /// minimum over `axes`
    ReduceMin,
    /// product over `axes` (PopXL `prod`)
    ReduceProd,
    /// sum of absolute values over `axes` (PopXL `l1`)
    ReduceL1,
    /// square root of the sum of squares over `axes` (PopXL `l2`, floats)
    ReduceL2,
    /// natural log of the sum over `axes` (PopXL `logsum`, floats)
    ReduceLogSum,
    /// `log(sum(exp(x)))` over `axes`, computed stably from the maximum (PopXL `logsumexp`, floats)
    ReduceLogSumExp,
    /// sum of squares over `axes` (PopXL `sumsquare`)
    ReduceSumSquare,
    /// lower median over `axes` (PopXL `median`): outputs `(values, indices)`, the
    /// indices int32 positions within each reduced group
    ReduceMedian,
    /// `ReduceMedianGrad{axes, keepdims, shape}(g, indices)`: zeros of the forward
    /// input's shape (attribute `shape`) with `g` at the median positions `indices`
    ReduceMedianGrad,
    /// sum of the squares of every element, as a float32 scalar (PopXL `lamb_square`)
    LambSquare,
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

/// What a reduction accepts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Domain {
    /// Every dtype the kernels have (the original four reductions).
    Any,
    /// Numbers, not bool.
    Num,
    /// Floating point only.
    Float,
}

/// The output of a reduction; without an identity (max, min, median), reducing an
/// empty axis is an error, as numpy's "zero-size array to reduction operation which
/// has no identity".
fn infer_reduce_with(ctx: &InferContext<'_>, has_identity: bool, domain: Domain) -> Result<TensorInfo> {
    let x = ctx.input(0)?;
    match domain {
        Domain::Float => require_float(ctx, x, "the input")?,
        Domain::Num if x.dtype == DataType::Bool => return Err(ctx.error("the input must be numeric, got bool")),
        _ => {}
    }
    let ReduceAttrs { axes, keepdims } = ReduceAttrs::infer(ctx)?;
    let axes = normalize_axes(&axes, x.rank()).map_err(infer_error(ctx))?;
    if let Some(&a) = axes.iter().find(|&&a| x.shape[a] == 0).filter(|_| !has_identity) {
        return Err(ctx.error(format!("cannot reduce axis {a} of {x}: it is empty and the reduction has no identity")));
    }
    Ok(TensorInfo::new(x.dtype, reduced_shape(&x.shape, &axes, keepdims)))
}

/// `ReduceGrad{reduction, axes, keepdims, shape: x's}(g[, x][, y])`, reading the
/// forward input and output as [`ReduceKind::reads`] says.
fn reduce_grad(cx: &GradContext<'_>, reduction: ReduceKind) -> GradRule {
    let (Ok(ReduceAttrs { axes, keepdims }), Some(shape)) = (ReduceAttrs::of(cx.op), cx.input_shape(0)) else {
        return GradRule::None;
    };
    let attrs = ReduceGradAttrs { reduction, axes, keepdims, shape }.to_attrs();
    let (reads_x, reads_y) = reduction.reads();
    let mut inputs = vec![(0, GradSource::GradOfOutput(0))];
    if reads_x {
        inputs.push((1, GradSource::FwdInput(0)));
    }
    if reads_y {
        inputs.push((2, GradSource::FwdOutput(0)));
    }
    GradRule::Ops(vec![spec(&ReduceGrad, attrs, &inputs, &[(0, 0)])])
}

macro_rules! reduce {
    ($($ty:ident => $name:literal, $reduction:ident, $identity:literal, $domain:ident);*) => {$(
        impl OpDef for $ty {
            fn op_type(&self) -> &'static str { $name }
            fn attributes(&self) -> &'static [AttrSpec] { ReduceAttrs::SCHEMA }
            fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                Ok(vec![infer_reduce_with(ctx, $identity, Domain::$domain)?])
            }
            fn grad(&self, cx: &GradContext<'_>) -> GradRule {
                reduce_grad(cx, ReduceKind::$reduction)
            }
        }
    )*};
}
// Fields: type name, ReduceGrad reduction, whether the reduction has an identity (max
// and min of nothing are errors), accepted dtypes.
reduce!(
    ReduceSum => "ReduceSum", Sum, true, Any;
    ReduceMean => "ReduceMean", Mean, true, Any;
    ReduceMax => "ReduceMax", Max, false, Any;
    ReduceMin => "ReduceMin", Min, false, Any;
    ReduceProd => "ReduceProd", Prod, true, Num;
    ReduceL1 => "ReduceL1", L1, true, Num;
    ReduceL2 => "ReduceL2", L2, true, Float;
    ReduceLogSum => "ReduceLogSum", LogSum, true, Float;
    ReduceLogSumExp => "ReduceLogSumExp", LogSumExp, true, Float;
    ReduceSumSquare => "ReduceSumSquare", SumSquare, true, Num
);

impl OpDef for ReduceMedian {
    fn op_type(&self) -> &'static str {
        "ReduceMedian"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ReduceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let y = infer_reduce_with(ctx, false, Domain::Num)?;
        let count = ctx.input(0)?.nelms() / y.nelms().max(1);
        if i32::try_from(count).is_err() {
            return Err(ctx.error(format!("{count} elements per median do not fit int32 indices")));
        }
        let indices = TensorInfo::new(DataType::Int32, y.shape.clone());
        Ok(vec![y, indices])
    }
    /// `ReduceMedianGrad{axes, keepdims, shape: x's}(g, indices)`.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let (Ok(ReduceAttrs { axes, keepdims }), Some(shape)) = (ReduceAttrs::of(op), cx.input_shape(0)) else {
            return GradRule::None;
        };
        let attrs = ReduceMedianGradAttrs { axes, keepdims, shape }.to_attrs();
        let ins = [(0, GradSource::GradOfOutput(0)), (1, GradSource::FwdOutput(1))];
        GradRule::Ops(vec![spec(&ReduceMedianGrad, attrs, &ins, &[(0, 0)])])
    }
}

impl OpDef for ReduceMedianGrad {
    fn op_type(&self) -> &'static str {
        "ReduceMedianGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ReduceMedianGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (g, idx) = (ctx.input(0)?, ctx.input(1)?);
        let ReduceMedianGradAttrs { axes, keepdims, shape } = ReduceMedianGradAttrs::infer(ctx)?;
        let x = &TensorInfo::new(g.dtype, super::checked_shape(ctx, &shape, "shape")?);
        let axes = normalize_axes(&axes, x.rank()).map_err(infer_error(ctx))?;
        let reduced = reduced_shape(&x.shape, &axes, keepdims);
        if g.dtype != x.dtype || g.shape != reduced {
            return Err(ctx.error(format!("gradient {g} does not match the reduced shape {reduced:?} of {x}")));
        }
        if idx.dtype != DataType::Int32 || idx.shape != reduced {
            return Err(ctx.error(format!("indices {idx} must be int32 of shape {reduced:?}")));
        }
        Ok(vec![x.clone()])
    }
}

impl OpDef for LambSquare {
    fn op_type(&self) -> &'static str {
        "LambSquare"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        require_float(ctx, ctx.input(0)?, "the input")?;
        Ok(vec![TensorInfo::new(DataType::Float32, Vec::<usize>::new())])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[
    &ReduceSum,
    &ReduceMean,
    &ReduceMax,
    &ReduceMin,
    &ReduceProd,
    &ReduceL1,
    &ReduceL2,
    &ReduceLogSum,
    &ReduceLogSumExp,
    &ReduceSumSquare,
    &ReduceMedian,
    &ReduceMedianGrad,
    &LambSquare,
];
