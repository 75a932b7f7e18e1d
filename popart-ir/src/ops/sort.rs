//! Order statistics along one axis: `ArgMax`, `ArgMin`, `TopK` (and its gradient)
//! and `Histogram`.

use super::grad::spec;
use super::{infer_error, normalize_axis, op_types, require_float};
use crate::{op_attrs, AttrSpec, DataType, GradRule, GradSource, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of `ArgMax` and `ArgMin`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct ArgReduceAttrs {
        /// The reduced axis.
        pub axis: i64 = 0,
        /// Keep the reduced axis with size 1.
        pub keepdims: bool = false,
    }
}

op_attrs! {
    /// Attributes of `TopK`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct TopKAttrs {
        /// How many values are kept.
        pub k: i64,
        /// The axis searched.
        pub axis: i64 = -1,
        /// Keep the largest (else the smallest) values.
        pub largest: bool = true,
        /// Values in order (else in input order).
        pub sorted: bool = true,
    }
}

op_attrs! {
    /// Attributes of `TopKGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct TopKGradAttrs {
        /// The forward axis.
        pub axis: i64 = -1,
        /// The forward input's shape.
        pub shape: Vec<i64>,
    }
}

op_attrs! {
    /// Attributes of `Histogram`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct HistogramAttrs {
        /// Bin edges, strictly increasing.
        pub levels: Vec<f64>,
        /// Count `|x|` instead of `x`.
        pub absolute_of_input: bool = false,
    }
    validate = |a: &HistogramAttrs| {
        if a.levels.iter().any(|l| l.is_nan()) || a.levels.windows(2).any(|w| w[0] >= w[1]) {
            return Err(crate::AttrError::OutOfRange { attr: "levels".into(), expected: "strictly increasing levels", got: crate::AttrValue::Floats(a.levels.clone()) });
        }
        Ok(())
    };
}

op_types!(
    /// `ArgMax{axis, keepdims}(x)`: int32 index of the first maximum along `axis`
    /// (default 0; NaN counts as the maximum); PopXL `argmax`
    ArgMax,
    /// `ArgMin{axis, keepdims}(x)`: int32 index of the first minimum along `axis`
    /// (default 0; NaN counts as the minimum); PopXL `argmin`
    ArgMin,
    /// `TopK{k, axis, largest, sorted}(x) -> (values, indices)`: the `k` largest (or
    /// smallest) elements along `axis` (default -1) and their int32 indices; ties
    /// keep the lower index first; unsorted results are in index order
    TopK,
    /// `TopKGrad{axis, shape}(g, indices)`: zeros of the forward input's shape
    /// (attribute `shape`) with `g` scattered to `indices` along `axis`
    TopKGrad,
    /// `Histogram{levels, absolute_of_input}(x)`: uint32 counts of the elements in the
    /// `len(levels) + 1` bins `x < l0`, `l0 <= x < l1`, ..., `x >= l_last` (of `|x|`
    /// if `absolute_of_input`; NaN counts in the last bin)
    Histogram,
);

/// The reduced info of an arg-reduction over `axis`.
fn infer_arg(ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    if x.dtype == DataType::Bool {
        return Err(ctx.error("the input must be numeric, got bool"));
    }
    let a = ArgReduceAttrs::infer(ctx)?;
    let axis = normalize_axis(a.axis, x.rank()).map_err(infer_error(ctx))?;
    if x.shape[axis] == 0 {
        return Err(ctx.error(format!("cannot reduce the empty axis {axis} of {x}")));
    }
    if i32::try_from(x.shape[axis]).is_err() {
        return Err(ctx.error(format!("axis {axis} of {x} is too long for int32 indices")));
    }
    let shape = super::reduce::reduced_shape(&x.shape, &[axis], a.keepdims);
    Ok(vec![TensorInfo::new(DataType::Int32, shape)])
}

impl OpDef for ArgMax {
    fn op_type(&self) -> &'static str {
        "ArgMax"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ArgReduceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        infer_arg(ctx)
    }
}

impl OpDef for ArgMin {
    fn op_type(&self) -> &'static str {
        "ArgMin"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ArgReduceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        infer_arg(ctx)
    }
}

/// `(axis, k)` of a `TopK` on `x`, checked.
fn topk_axis_k(ctx: &InferContext<'_>, x: &TensorInfo) -> Result<(usize, usize)> {
    let TopKAttrs { axis, k, .. } = TopKAttrs::infer(ctx)?;
    let axis = normalize_axis(axis, x.rank()).map_err(infer_error(ctx))?;
    let n = x.shape[axis];
    match usize::try_from(k) {
        Ok(k) if k <= n && i32::try_from(n).is_ok() => Ok((axis, k)),
        _ if i32::try_from(n).is_err() => Err(ctx.error(format!("axis {axis} of {x} is too long for int32 indices"))),
        _ => Err(ctx.error(format!("k = {k} is not in [0, {n}], the size of axis {axis} of {x}"))),
    }
}

impl OpDef for TopK {
    fn op_type(&self) -> &'static str {
        "TopK"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        TopKAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        if x.dtype == DataType::Bool {
            return Err(ctx.error("the input must be numeric, got bool"));
        }
        let (axis, k) = topk_axis_k(ctx, x)?;
        let mut shape = x.shape.clone();
        shape[axis] = k;
        Ok(vec![TensorInfo::new(x.dtype, shape.clone()), TensorInfo::new(DataType::Int32, shape)])
    }
    /// `TopKGrad{axis, shape: x's}(g, indices)`.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let (Ok(a), Some(shape)) = (TopKAttrs::of(op), cx.input_shape(0)) else { return GradRule::None };
        let attrs = TopKGradAttrs { axis: a.axis, shape }.to_attrs();
        let ins = [(0, GradSource::GradOfOutput(0)), (1, GradSource::FwdOutput(1))];
        GradRule::Ops(vec![spec(&TopKGrad, attrs, &ins, &[(0, 0)])])
    }
}

impl OpDef for TopKGrad {
    fn op_type(&self) -> &'static str {
        "TopKGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        TopKGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (g, idx) = (ctx.input(0)?, ctx.input(1)?);
        let a = TopKGradAttrs::infer(ctx)?;
        let x = &TensorInfo::new(g.dtype, super::checked_shape(ctx, &a.shape, "shape")?);
        let axis = normalize_axis(a.axis, x.rank()).map_err(infer_error(ctx))?;
        let fits = g.dtype == x.dtype
            && g.rank() == x.rank()
            && g.shape[axis] <= x.shape[axis]
            && g.shape.iter().zip(&x.shape).enumerate().all(|(d, (a, b))| d == axis || a == b);
        if !fits {
            return Err(ctx.error(format!("gradient {g} is not a top-k along axis {axis} of {x}")));
        }
        if idx.dtype != DataType::Int32 || idx.shape != g.shape {
            return Err(ctx.error(format!("indices {idx} must be int32 of the gradient's shape {:?}", g.shape)));
        }
        Ok(vec![x.clone()])
    }
}

impl OpDef for Histogram {
    fn op_type(&self) -> &'static str {
        "Histogram"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        HistogramAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        require_float(ctx, x, "the input")?;
        let levels = HistogramAttrs::infer(ctx)?.levels;
        Ok(vec![TensorInfo::new(DataType::Uint32, [levels.len() + 1])])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&ArgMax, &ArgMin, &TopK, &TopKGrad, &Histogram];
