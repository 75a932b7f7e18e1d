//! Gradient ops of the indexing ops ([`super::indexing`]), created by autodiff.
//! Input 0 is always the incoming gradient `g`; the others are forward tensors
//! as listed per type. A forward tensor needed for its shape only is not an
//! input: its shape is attribute `shape`, taken from the forward op's context by its gradient rule (as PopART's grad
//! ops keep it), so the gradient graph does not ask for it.

use super::indexing::{
    dynamic_slice_shape, dynamic_slices, grouped_gather_shape, is_numeric, num_classes_attr, onehot_shape,
    reduction_attr, scatter_indices, subsample_shape, Reduction,
};
use super::{infer_error, normalize_axis, op_types};
use crate::{op_attrs, AttrSpec, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of `SubsampleGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct SubsampleGradAttrs {
        /// Step per dim.
        pub strides: Vec<i64>,
        /// The forward input's shape (from the gradient rule's context).
        pub shape: Vec<i64>,
    }
}

op_attrs! {
    /// Attributes of `ScatterReduceGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ScatterReduceGradAttrs {
        /// The scattered axis.
        pub axis: i64 = 0,
        /// The forward reduction.
        pub reduction: String = "sum".to_string(),
        /// Output 1 is the initial values' gradient.
        pub with_initial: bool = false,
        /// The forward input's shape (from the gradient rule's context).
        pub shape: Vec<i64>,
    }
}

op_attrs! {
    /// Attributes of `DynamicSliceGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct DynamicSliceGradAttrs {
        /// Sliced axes.
        pub axes: Vec<i64>,
        /// Slice sizes.
        pub sizes: Vec<i64>,
        /// Slices never overlap (PopXL's hint).
        pub no_overlap: bool = false,
        /// The forward input's shape (from the gradient rule's context).
        pub shape: Vec<i64>,
    }
}

op_attrs! {
    /// Attributes of `OnehotGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct OnehotGradAttrs {
        /// The class axis.
        pub axis: i64 = -1,
        /// Number of classes.
        pub num_classes: Option<i64> = None,
        /// The forward indices' shape.
        pub shape: Option<Vec<i64>> = None,
    }
}

op_attrs! {
    /// Attributes of `GroupedGatherGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct GroupedGatherGradAttrs {
        /// The gathered axis.
        pub axis: i64 = 0,
        /// Groups.
        pub group_size: i64 = 1,
        /// Out-of-range indices give zeros.
        pub zero_oor key "zero_OOR": bool = false,
        /// The forward input's shape (from the gradient rule's context).
        pub shape: Vec<i64>,
    }
}

op_types!(
    /// `SubsampleGrad{strides, shape}(g)`: zeros of the forward input's shape
    /// (attribute `shape`) with `g` at every `strides[d]`-th element.
    SubsampleGrad,
    /// `ScatterReduceGrad{axis, reduction, with_initial, shape}(g, indices[, data, y[, initial]])`:
    /// output 0, the gradient of the scattered `data` (of attribute `shape`): `g`
    /// gathered where each element went (times `data == y` there for `max`/`min`;
    /// zero for ignored indices); output 1 (if `with_initial`), the gradient of the
    /// initial values: `g` (`sum`), `g` zeroed at the scattered positions (`none`),
    /// `g` where `y == initial` (`max`/`min`). `data` (input 2), `y` (the forward
    /// output, input 3) and `initial` (input 4) are read by `max`/`min` only.
    ScatterReduceGrad,
    /// `DynamicSliceGrad{axes, sizes, shape}(g, index)`: zeros of the forward
    /// input's shape (attribute `shape`) with `g` written at the slice (as
    /// `DynamicUpdate` writes it).
    DynamicSliceGrad,
    /// `DynamicUpdateGrad{axes, sizes}(g, index)`: `g` with the slice zeroed (the
    /// gradient of the updated tensor).
    DynamicUpdateGrad,
    /// `OnehotGrad{axis, num_classes}(g, indices)`: `[sum of g off the hot
    /// positions, sum of g on them]`, the gradient of the `[2]` values.
    OnehotGrad,
    /// `GroupedGatherGrad{axis, group_size, zero_OOR, shape}(g, indices)`: zeros of
    /// the forward data's shape (attribute `shape`), `g` scatter-added per group at
    /// `indices` (out-of-range indices add nothing).
    GroupedGatherGrad,
);

/// Check that the incoming gradient (input 0) is `want`.
fn check_grad(ctx: &InferContext<'_>, want: &TensorInfo) -> Result<()> {
    let g = ctx.input(0)?;
    if g != want {
        return Err(ctx.error(format!("gradient input {g} does not match the forward output {want}")));
    }
    Ok(())
}

/// Float gradients only (the forward tensor may be anything, its gradient is not).
fn require_numeric(ctx: &InferContext<'_>, info: &TensorInfo) -> Result<()> {
    if !is_numeric(info.dtype) {
        return Err(ctx.error(format!("gradient of a {} tensor", info.dtype)));
    }
    Ok(())
}

impl OpDef for SubsampleGrad {
    fn op_type(&self) -> &'static str {
        "SubsampleGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        SubsampleGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let a = SubsampleGradAttrs::infer(ctx)?;
        let x = TensorInfo::new(ctx.input(0)?.dtype, super::checked_shape(ctx, &a.shape, "shape")?);
        let shape = subsample_shape(&x.shape, &a.strides).map_err(|m| ctx.error(m))?;
        check_grad(ctx, &TensorInfo::new(x.dtype, shape))?;
        Ok(vec![x])
    }
}

impl OpDef for ScatterReduceGrad {
    fn op_type(&self) -> &'static str {
        "ScatterReduceGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ScatterReduceGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (g, idx) = (ctx.input(0)?, ctx.input(1)?);
        let a = ScatterReduceGradAttrs::infer(ctx)?;
        let data = &TensorInfo::new(g.dtype, super::checked_shape(ctx, &a.shape, "shape")?);
        require_numeric(ctx, g)?;
        if g.dtype != data.dtype || g.rank() != data.rank() || data.rank() == 0 {
            return Err(ctx.error(format!("gradient {g} does not fit the scattered tensor {data}")));
        }
        let axis = normalize_axis(a.axis, data.rank()).map_err(infer_error(ctx))?;
        if !idx.dtype.is_int() {
            return Err(ctx.error(format!("indices must be an integer tensor, got {}", idx.dtype)));
        }
        if (0..data.rank()).any(|d| d != axis && g.shape[d] < data.shape[d]) {
            return Err(ctx.error(format!("gradient {g} does not hold the scattered tensor {data} off axis {axis}")));
        }
        scatter_indices(&idx.shape, &data.shape, axis).map_err(|m| ctx.error(m))?;
        let reduction = reduction_attr(ctx, &a.reduction)?;
        let with_initial = a.with_initial;
        if matches!(reduction, Reduction::Max | Reduction::Min) {
            if ctx.input(2)? != data {
                return Err(ctx.error(format!("the scattered tensor {} is not {data}", ctx.input(2)?)));
            }
            check_grad(ctx, ctx.input(3)?)?;
            if with_initial {
                check_grad(ctx, ctx.input(4)?)?;
            }
        }
        let mut out = vec![data.clone()];
        if with_initial {
            out.push(g.clone());
        }
        Ok(out)
    }
}

impl OpDef for DynamicSliceGrad {
    fn op_type(&self) -> &'static str {
        "DynamicSliceGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        DynamicSliceGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let a = DynamicSliceGradAttrs::infer(ctx)?;
        let t = TensorInfo::new(ctx.input(0)?.dtype, super::checked_shape(ctx, &a.shape, "shape")?);
        let slices = dynamic_slices(&t.shape, &a.axes, &a.sizes).map_err(|m| ctx.error(m))?;
        let index = ctx.input(1)?;
        if !index.dtype.is_int() || index.nelms() != slices.len() {
            return Err(ctx.error(format!("index {index} must hold one integer offset per sliced axis")));
        }
        check_grad(ctx, &TensorInfo::new(t.dtype, dynamic_slice_shape(&t.shape, &slices)))?;
        Ok(vec![t])
    }
}

impl OpDef for DynamicUpdateGrad {
    fn op_type(&self) -> &'static str {
        "DynamicUpdateGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        super::indexing::DynamicSliceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let g = ctx.input(0)?;
        let a = super::indexing::DynamicSliceAttrs::infer(ctx)?;
        let slices = dynamic_slices(&g.shape, &a.axes, &a.sizes).map_err(|m| ctx.error(m))?;
        let index = ctx.input(1)?;
        if !index.dtype.is_int() || index.nelms() != slices.len() {
            return Err(ctx.error(format!("index {index} must hold one integer offset per sliced axis")));
        }
        Ok(vec![g.clone()])
    }
}

impl OpDef for OnehotGrad {
    fn op_type(&self) -> &'static str {
        "OnehotGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        OnehotGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let idx = ctx.input(1)?;
        if !idx.dtype.is_int() {
            return Err(ctx.error(format!("indices {idx} must be an integer tensor")));
        }
        let values = TensorInfo::new(ctx.input(0)?.dtype, [2]);
        require_numeric(ctx, &values)?;
        let a = OnehotGradAttrs::infer(ctx)?;
        let c = num_classes_attr(ctx, a.num_classes)?;
        let (_, shape) = onehot_shape(&idx.shape, c, a.axis).map_err(|m| ctx.error(m))?;
        check_grad(ctx, &TensorInfo::new(values.dtype, shape))?;
        Ok(vec![values])
    }
}

impl OpDef for GroupedGatherGrad {
    fn op_type(&self) -> &'static str {
        "GroupedGatherGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        GroupedGatherGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let idx = ctx.input(1)?;
        let a = GroupedGatherGradAttrs::infer(ctx)?;
        let x = TensorInfo::new(ctx.input(0)?.dtype, super::checked_shape(ctx, &a.shape, "shape")?);
        if !idx.dtype.is_int() {
            return Err(ctx.error(format!("indices must be an integer tensor, got {}", idx.dtype)));
        }
        require_numeric(ctx, &x)?;
        let (axis, groups) = (a.axis, a.group_size);
        let (_, shape) = grouped_gather_shape(&x.shape, &idx.shape, axis, groups).map_err(|m| ctx.error(m))?;
        check_grad(ctx, &TensorInfo::new(x.dtype, shape))?;
        Ok(vec![x])
    }
}

pub(crate) const ALL: &[&dyn OpDef] =
    &[&SubsampleGrad, &ScatterReduceGrad, &DynamicSliceGrad, &DynamicUpdateGrad, &OnehotGrad, &GroupedGatherGrad];
