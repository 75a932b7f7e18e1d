//! Indexing ops: subsample, split, scatter and scatter-reduce, dynamic slices
//! and updates, one-hot encoding, grouped and tied gathers. Their gradient ops
//! are in [`super::indexing_grad`].
//!
//! Index semantics (shared with the `cpu` kernels):
//! - `Scatter`, `ScatterReduce`, `Onehot`, `GroupedGather`, `TiedGather`: an
//!   index in `[-len, len)` picks a position (negative counts from the end, as
//!   `numpy.take`); any other index is ignored (scatters write nothing, gathers
//!   give zeros, one-hot gives an all-`off` row) and gets no gradient.
//! - `DynamicSlice`, `DynamicUpdate`: popops' dynamic slicing. The offset of
//!   each sliced axis is read as unsigned; an offset outside `[0, dim)`
//!   (negative ones included) starts the slice at 0, and a slice running past
//!   the end of the axis wraps around to its start.
//!
//! With the session option `check_indices`, every index the rules above would
//! ignore, and every dynamic offset outside `[0, dim - size]`, is a run-time error.

use super::grad::spec;
use super::indexing_grad::{
    DynamicSliceGrad, DynamicSliceGradAttrs, DynamicUpdateGrad, GroupedGatherGrad, GroupedGatherGradAttrs, OnehotGrad,
    OnehotGradAttrs, ScatterReduceGrad, ScatterReduceGradAttrs, SubsampleGrad, SubsampleGradAttrs,
};
use super::shape::Concat;
use super::{infer_error, normalize_axis, op_types};
use crate::{
    op_attrs, Alias, AttrSpec, Attributes, DataType, GradRule, GradSource, InferContext, OpAttrs, OpDef, Result,
    TensorInfo,
};

op_attrs! {
    /// Attributes of `Subsample`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct SubsampleAttrs {
        /// Step per dim.
        pub strides: Vec<i64>,
    }
}

op_attrs! {
    /// Attributes of `Split`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct SplitAttrs {
        /// The split axis.
        pub axis: i64 = 0,
        /// Part sizes.
        pub split: Vec<i64>,
    }
}

op_attrs! {
    /// Attributes of `Scatter`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ScatterAttrs {
        /// The scattered axis.
        pub axis: i64 = 0,
    }
}

op_attrs! {
    /// Attributes of `ScatterReduce`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ScatterReduceAttrs {
        /// The scattered axis.
        pub axis: i64 = 0,
        /// `sum`, `max`, `min`, `mul` or `none`.
        pub reduction: String = "sum".to_string(),
        /// The output's size along `axis`.
        pub axis_size: Option<i64> = None,
    }
}

op_attrs! {
    /// Attributes of `DynamicSlice`, `DynamicUpdate` and `DynamicUpdateInplace`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct DynamicSliceAttrs {
        /// Sliced axes.
        pub axes: Vec<i64>,
        /// Slice sizes.
        pub sizes: Vec<i64>,
        /// Slices never overlap (PopXL's hint).
        pub no_overlap: bool = false,
    }
}

op_attrs! {
    /// Attributes of `Onehot`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct OnehotAttrs {
        /// The class axis.
        pub axis: i64 = -1,
        /// Number of classes (PopART's attribute; input 1 holds it).
        pub num_classes: Option<i64> = None,
    }
}

op_attrs! {
    /// Attributes of `GroupedGather`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct GroupedGatherAttrs {
        /// The gathered axis.
        pub axis: i64 = 0,
        /// Groups.
        pub group_size: i64 = 1,
        /// Out-of-range indices give zeros.
        pub zero_oor key "zero_OOR": bool = false,
    }
}

const G: GradSource = GradSource::GradOfOutput(0);
const X: GradSource = GradSource::FwdInput(0);
const IDX: GradSource = GradSource::FwdInput(1);

op_types!(
    /// every `strides[d]`-th element of each dim `d` (`strides`: ints, one per dim, >= 1)
    Subsample,
    /// split along `axis` into parts of the sizes `split` (ints summing to the dim): one output per part
    Split,
    /// `Scatter(t, indices, values)`: a copy of `t` with `values` written at `indices`
    /// along `axis` (ONNX `ScatterElements`; `indices` of `values`' shape, or a vector
    /// along `axis`); of repeated indices the last write wins
    Scatter,
    /// `ScatterReduce(data, indices[, initial_values])`: `data` reduced (`reduction`:
    /// `sum`, `max`, `min`, `none`) into an output at `indices` along `axis`; the output
    /// is `initial_values`' shape, or `data`'s with `axis_size` on `axis`
    ScatterReduce,
    /// `DynamicSlice(t, index)`: the slice of `sizes` at run-time offsets `index` on `axes`
    DynamicSlice,
    /// `DynamicUpdate(t, index, update)`: a copy of `t` with `update` written at the
    /// run-time offsets `index` on `axes` (slice shape `sizes`)
    DynamicUpdate,
    /// `DynamicUpdateInplace(t, index, update)`: [`DynamicUpdate`] writing `t` in place
    DynamicUpdateInplace,
    /// `Onehot(indices, num_classes, values)`: `values[1]` where the class along `axis`
    /// is the index, `values[0]` elsewhere; the attribute `num_classes` is the value
    /// of the integer scalar `num_classes` (a constant: PopART reads it when building)
    Onehot,
    /// `GroupedGather(data, indices)`: for each group `g` of the leading dim
    /// (`group_size` groups), `Gather(data[g], indices[g])` along `axis` (>= 1)
    GroupedGather,
    /// `TiedGather(data, indices)`: `Gather` along `axis` whose weight is tied to a matmul
    /// (PopART lays the indices out for the matmul); same values and gradient as `Gather`
    TiedGather,
);

/// Output shape of subsampling `shape` by `strides` (one per dim, each >= 1):
/// `ceil(d / s)` per dim.
///
/// ```
/// use popart_ir::ops::indexing::subsample_shape;
/// assert_eq!(subsample_shape(&[5, 4], &[2, 4]), Ok(vec![3, 1]));
/// assert!(subsample_shape(&[5, 4], &[2, 0]).is_err());
/// assert!(subsample_shape(&[5, 4], &[2]).is_err());
/// ```
pub fn subsample_shape(shape: &[usize], strides: &[i64]) -> std::result::Result<Vec<usize>, String> {
    if strides.len() != shape.len() {
        return Err(format!("{} strides given for a tensor of rank {}", strides.len(), shape.len()));
    }
    shape
        .iter()
        .zip(strides)
        .enumerate()
        .map(|(i, (&d, &s))| match usize::try_from(s) {
            Ok(s) if s >= 1 => Ok(d.div_ceil(s)),
            _ => Err(format!("stride {s} of dim {i} must be at least 1")),
        })
        .collect()
}

/// The sizes of a split of a dim of size `dim`: `split` (non-negative, summing to `dim`).
///
/// ```
/// use popart_ir::ops::indexing::split_sizes;
/// assert_eq!(split_sizes(6, &[1, 5]), Ok(vec![1, 5]));
/// assert!(split_sizes(6, &[1, 4]).is_err());
/// assert!(split_sizes(6, &[]).is_err());
/// ```
pub fn split_sizes(dim: usize, split: &[i64]) -> std::result::Result<Vec<usize>, String> {
    if split.is_empty() {
        return Err("split into no parts".to_string());
    }
    let sizes = split
        .iter()
        .map(|&s| usize::try_from(s).map_err(|_| format!("split size {s} is negative")))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let total = sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s));
    if total != Some(dim) {
        return Err(format!("split sizes {split:?} do not sum to the dimension size {dim}"));
    }
    Ok(sizes)
}

/// How scatter indices address the source tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScatterIndices {
    /// One index per source element (`indices` has the source's shape).
    Elements,
    /// One index per source row along the axis (`indices` is a vector along the
    /// axis, possibly with size-1 dims: PopART's index broadcasting).
    Rows,
}

/// How `indices` address a scatter source of shape `src` along `axis`: the
/// same shape, or a vector of `src[axis]` indices placed on `axis` (a rank-1
/// vector is placed there, trailing size-1 dims are added) that broadcasts over
/// the other dims. Anything else (PopART's partial broadcasting) is an error.
///
/// ```
/// use popart_ir::ops::indexing::{scatter_indices, ScatterIndices};
/// assert_eq!(scatter_indices(&[3, 2], &[3, 2], 0), Ok(ScatterIndices::Elements));
/// assert_eq!(scatter_indices(&[2], &[3, 2], 1), Ok(ScatterIndices::Rows));
/// assert_eq!(scatter_indices(&[3, 1], &[3, 2], 0), Ok(ScatterIndices::Rows));
/// assert!(scatter_indices(&[3, 2], &[3, 2, 4], 0).is_err());
/// ```
pub fn scatter_indices(indices: &[usize], src: &[usize], axis: usize) -> std::result::Result<ScatterIndices, String> {
    if indices == src {
        return Ok(ScatterIndices::Elements);
    }
    let bad = || format!("indices of shape {indices:?} cannot address a source of shape {src:?} along axis {axis}");
    if indices.len() > src.len() || axis >= src.len() {
        return Err(bad());
    }
    let mut expanded = vec![1usize; src.len()];
    if indices.len() == 1 {
        expanded[axis] = indices[0];
    } else {
        expanded[..indices.len()].copy_from_slice(indices);
    }
    let rows = expanded.iter().enumerate().all(|(d, &n)| if d == axis { n == src[axis] } else { n == 1 });
    if rows {
        Ok(ScatterIndices::Rows)
    } else {
        Err(bad())
    }
}

/// The checks shared by scatters: integer indices addressing `src` along
/// `axis`, and an output of `out`'s info that holds `src` on the other dims.
fn check_scatter(
    ctx: &InferContext<'_>,
    out: &TensorInfo,
    idx: &TensorInfo,
    src: &TensorInfo,
    axis: usize,
) -> Result<ScatterIndices> {
    if !idx.dtype.is_int() {
        return Err(ctx.error(format!("indices must be an integer tensor, got {}", idx.dtype)));
    }
    if out.dtype != src.dtype {
        return Err(ctx.error(format!("the scattered tensor is {} but the output is {}", src.dtype, out.dtype)));
    }
    let fits = out.rank() == src.rank() && (0..src.rank()).all(|d| d == axis || out.shape[d] >= src.shape[d]);
    if !fits {
        return Err(ctx.error(format!(
            "a source of shape {:?} does not fit an output of shape {:?} off axis {axis}",
            src.shape, out.shape
        )));
    }
    scatter_indices(&idx.shape, &src.shape, axis).map_err(|m| ctx.error(m))
}

/// The `axis` attribute's value normalised against `rank`.
fn axis_attr(ctx: &InferContext<'_>, axis: i64, rank: usize) -> Result<usize> {
    normalize_axis(axis, rank).map_err(infer_error(ctx))
}

/// A scatter reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// Sum of the scattered values (and the initial value).
    Sum,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// No reduction: the last value written wins.
    None,
}

impl Reduction {
    /// The reduction named `s` (`sum`, `max`, `min`, `none`).
    ///
    /// ```
    /// use popart_ir::ops::indexing::Reduction;
    /// assert_eq!(Reduction::parse("max"), Some(Reduction::Max));
    /// assert_eq!(Reduction::parse("mul"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Reduction> {
        match s {
            "sum" => Some(Reduction::Sum),
            "max" => Some(Reduction::Max),
            "min" => Some(Reduction::Min),
            "none" => Some(Reduction::None),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Reduction::Sum => "sum",
            Reduction::Max => "max",
            Reduction::Min => "min",
            Reduction::None => "none",
        }
    }
}

/// The `reduction` attribute's value `r` of a scatter op, checked.
pub(crate) fn reduction_attr(ctx: &InferContext<'_>, r: &str) -> Result<Reduction> {
    Reduction::parse(r).ok_or_else(|| ctx.error(format!("unknown reduction `{r}` (sum, max, min or none)")))
}

/// Sliced axes of a dynamic slice: `(axis, size)` per entry of `axes`, in the
/// order of the index tensor's elements; axes distinct, `size <= dim`.
///
/// ```
/// use popart_ir::ops::indexing::dynamic_slices;
/// assert_eq!(dynamic_slices(&[4, 5], &[-1, 0], &[2, 1]), Ok(vec![(1, 2), (0, 1)]));
/// assert!(dynamic_slices(&[4, 5], &[0], &[5]).is_err());
/// assert!(dynamic_slices(&[4, 5], &[0, 0], &[1, 1]).is_err());
/// ```
pub fn dynamic_slices(
    shape: &[usize],
    axes: &[i64],
    sizes: &[i64],
) -> std::result::Result<Vec<(usize, usize)>, String> {
    if axes.len() != sizes.len() {
        return Err(format!("{} axes but {} sizes", axes.len(), sizes.len()));
    }
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(axes.len());
    for (&a, &s) in axes.iter().zip(sizes) {
        let axis = normalize_axis(a, shape.len()).map_err(|e| e.to_string())?;
        if out.iter().any(|&(b, _)| b == axis) {
            return Err(format!("axis {axis} is listed more than once in {axes:?}"));
        }
        match usize::try_from(s) {
            Ok(size) if size <= shape[axis] => out.push((axis, size)),
            _ => return Err(format!("slice size {s} does not fit axis {axis} of size {}", shape[axis])),
        }
    }
    Ok(out)
}

/// The sliced axes of a dynamic op on `t`, with its index tensor checked:
/// integers, one per sliced axis.
fn dynamic_check(ctx: &InferContext<'_>, t: &TensorInfo) -> Result<Vec<(usize, usize)>> {
    let a = DynamicSliceAttrs::infer(ctx)?;
    let slices = dynamic_slices(&t.shape, &a.axes, &a.sizes).map_err(|m| ctx.error(m))?;
    let index = ctx.input(1)?;
    if !index.dtype.is_int() {
        return Err(ctx.error(format!("index must be an integer tensor, got {}", index.dtype)));
    }
    if index.nelms() != slices.len() {
        return Err(ctx.error(format!("index {index} must hold one offset per sliced axis ({})", slices.len())));
    }
    Ok(slices)
}

/// `t`'s shape with the sliced axes at their slice sizes.
pub(crate) fn dynamic_slice_shape(t: &[usize], slices: &[(usize, usize)]) -> Vec<usize> {
    let mut shape = t.to_vec();
    for &(a, s) in slices {
        shape[a] = s;
    }
    shape
}

/// `DynamicUpdate`: `t`'s info after checking the update fits the slice.
fn infer_dynamic_update(ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
    let (t, u) = (ctx.input(0)?, ctx.input(2)?);
    let slices = dynamic_check(ctx, t)?;
    let want = dynamic_slice_shape(&t.shape, &slices);
    if u.dtype != t.dtype || u.shape != want {
        return Err(ctx.error(format!("update {u} does not fit the slice {} of {t}", TensorInfo::new(t.dtype, want))));
    }
    Ok(vec![t.clone()])
}

/// Output shape of a one-hot encoding of `indices` with `num_classes` classes
/// inserted at `axis` (in `-(rank+1)..=rank`, ONNX `OneHot`).
///
/// ```
/// use popart_ir::ops::indexing::onehot_shape;
/// assert_eq!(onehot_shape(&[2, 3], 5, -1), Ok((2, vec![2, 3, 5])));
/// assert_eq!(onehot_shape(&[2, 3], 5, 0), Ok((0, vec![5, 2, 3])));
/// assert!(onehot_shape(&[2, 3], 5, 3).is_err());
/// ```
pub fn onehot_shape(
    indices: &[usize],
    num_classes: usize,
    axis: i64,
) -> std::result::Result<(usize, Vec<usize>), String> {
    let axis = normalize_axis(axis, indices.len() + 1).map_err(|e| e.to_string())?;
    let mut shape = indices.to_vec();
    shape.insert(axis, num_classes);
    Ok((axis, shape))
}

/// The `num_classes` attribute's value `c` (required), checked non-negative.
pub(crate) fn num_classes_attr(ctx: &InferContext<'_>, c: Option<i64>) -> Result<usize> {
    let c = c.ok_or_else(|| ctx.error("missing integer attribute `num_classes`"))?;
    usize::try_from(c).map_err(|_| ctx.error(format!("num_classes {c} is negative")))
}

/// Output shape of a grouped gather: `data` `[G, ..]` and `indices` `[G, ..]`
/// (with `group_size` G > 1; without a group dim for 1) along `axis`; returns
/// the normalised axis and the shape.
///
/// ```
/// use popart_ir::ops::indexing::grouped_gather_shape;
/// assert_eq!(grouped_gather_shape(&[2, 5, 3], &[2, 4], 1, 2), Ok((1, vec![2, 4, 3])));
/// assert_eq!(grouped_gather_shape(&[5, 3], &[4], 0, 1), Ok((0, vec![4, 3])));
/// assert!(grouped_gather_shape(&[2, 5, 3], &[2, 4], 0, 2).is_err());
/// assert!(grouped_gather_shape(&[2, 5, 3], &[3, 4], 1, 2).is_err());
/// ```
pub fn grouped_gather_shape(
    data: &[usize],
    indices: &[usize],
    axis: i64,
    group_size: i64,
) -> std::result::Result<(usize, Vec<usize>), String> {
    let axis = normalize_axis(axis, data.len()).map_err(|e| e.to_string())?;
    let groups = usize::try_from(group_size).ok().filter(|&g| g >= 1);
    let Some(groups) = groups else {
        return Err(format!("group_size {group_size} must be at least 1"));
    };
    let mut idx = indices;
    if groups > 1 {
        if axis == 0 {
            return Err("axis 0 is the group dimension".to_string());
        }
        if data[0] != groups || indices.first() != Some(&groups) {
            return Err(format!(
                "data {data:?} and indices {indices:?} must both have {groups} groups in their leading dimension"
            ));
        }
        idx = &indices[1..];
    }
    let mut shape = data[..axis].to_vec();
    shape.extend_from_slice(idx);
    shape.extend_from_slice(&data[axis + 1..]);
    Ok((axis, shape))
}

/// Integer indices, or an error naming the op.
fn require_int_indices(ctx: &InferContext<'_>, idx: &TensorInfo) -> Result<()> {
    if !idx.dtype.is_int() {
        return Err(ctx.error(format!("indices must be an integer tensor, got {}", idx.dtype)));
    }
    Ok(())
}

impl OpDef for Subsample {
    fn op_type(&self) -> &'static str {
        "Subsample"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        SubsampleAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let shape = subsample_shape(&x.shape, &SubsampleAttrs::infer(ctx)?.strides).map_err(|m| ctx.error(m))?;
        Ok(vec![TensorInfo::new(x.dtype, shape)])
    }
    /// `SubsampleGrad{strides, shape: x's}(g)`: `g` scattered back into zeros.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let (Ok(a), Some(shape)) = (SubsampleAttrs::of(op), cx.input_shape(0)) else { return GradRule::None };
        let attrs = SubsampleGradAttrs { strides: a.strides, shape }.to_attrs();
        GradRule::Ops(vec![spec(&SubsampleGrad, attrs, &[(0, G)], &[(0, 0)])])
    }
}

impl OpDef for Split {
    fn op_type(&self) -> &'static str {
        "Split"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        SplitAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let a = SplitAttrs::infer(ctx)?;
        let axis = axis_attr(ctx, a.axis, x.rank())?;
        let sizes = split_sizes(x.shape[axis], &a.split).map_err(|m| ctx.error(m))?;
        Ok(sizes
            .into_iter()
            .map(|s| {
                let mut shape = x.shape.clone();
                shape[axis] = s;
                TensorInfo::new(x.dtype, shape)
            })
            .collect())
    }
    /// `Concat{axis}(g0, .., gn-1)` (missing gradients are zeros).
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let n = op.outputs().end() as u32;
        let inputs: Vec<(u32, GradSource)> = (0..n).map(|i| (i, GradSource::GradOfOutput(i))).collect();
        let Ok(a) = SplitAttrs::of(op) else { return GradRule::None };
        let attrs = super::shape::ConcatAttrs { axis: a.axis }.to_attrs();
        GradRule::Ops(vec![spec(&Concat, attrs, &inputs, &[(0, 0)])])
    }
}

impl OpDef for Scatter {
    fn op_type(&self) -> &'static str {
        "Scatter"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ScatterAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (t, idx, values) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        if t.rank() == 0 {
            return Err(ctx.error("cannot scatter into a scalar"));
        }
        let axis = axis_attr(ctx, ScatterAttrs::infer(ctx)?.axis, t.rank())?;
        check_scatter(ctx, t, idx, values, axis)?;
        Ok(vec![t.clone()])
    }
    /// `ScatterReduceGrad{axis, reduction: none, with_initial, shape: values'}(g, indices)`:
    /// `values` get `g` gathered at the indices, `t` gets `g` zeroed there.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let (Ok(a), Some(shape)) = (ScatterAttrs::of(op), cx.input_shape(2)) else { return GradRule::None };
        let attrs =
            ScatterReduceGradAttrs { axis: a.axis, reduction: "none".into(), with_initial: true, shape }.to_attrs();
        let ins = [(0, G), (1, IDX)];
        GradRule::Ops(vec![spec(&ScatterReduceGrad, attrs, &ins, &[(0, 2), (1, 0)])])
    }
}

impl OpDef for ScatterReduce {
    fn op_type(&self) -> &'static str {
        "ScatterReduce"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ScatterReduceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (data, idx) = (ctx.input(0)?, ctx.input(1)?);
        if data.rank() == 0 {
            return Err(ctx.error("cannot scatter a scalar"));
        }
        let a = ScatterReduceAttrs::infer(ctx)?;
        let axis = axis_attr(ctx, a.axis, data.rank())?;
        let reduction = reduction_attr(ctx, &a.reduction)?;
        if reduction != Reduction::None && !is_numeric(data.dtype) {
            return Err(ctx.error(format!(
                "reduction `{}` needs a numeric tensor, got {}",
                reduction.name(),
                data.dtype
            )));
        }
        let axis_size = match a.axis_size {
            Some(s) => Some(
                usize::try_from(s)
                    .ok()
                    .filter(|&s| s >= 1)
                    .ok_or_else(|| ctx.error(format!("axis_size {s} must be at least 1")))?,
            ),
            None => None,
        };
        let out = match (ctx.optional_input(2), axis_size) {
            (Some(init), s) => {
                if s.is_some_and(|s| init.shape.get(axis) != Some(&s)) {
                    return Err(ctx.error(format!("axis_size {s:?} differs from the initial values {init}")));
                }
                init.clone()
            }
            (None, Some(s)) => {
                let mut shape = data.shape.clone();
                shape[axis] = s;
                TensorInfo::new(data.dtype, shape)
            }
            (None, None) => return Err(ctx.error("one of initial_values and axis_size must be given")),
        };
        check_scatter(ctx, &out, idx, data, axis)?;
        Ok(vec![out])
    }
    /// `ScatterReduceGrad{axis, reduction, with_initial, shape: data's}(g, indices[, data, y[, initial]])`:
    /// max and min also read the forward output (and initial values) to find the
    /// selected elements.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let (Ok(ScatterReduceAttrs { axis, reduction, .. }), Some(shape)) =
            (ScatterReduceAttrs::of(op), cx.input_shape(0))
        else {
            return GradRule::None;
        };
        let with_initial = op.input(2).is_some();
        let is_extremum = matches!(reduction.as_str(), "max" | "min");
        let attrs = ScatterReduceGradAttrs { axis, reduction, with_initial, shape }.to_attrs();
        let mut ins = vec![(0, G), (1, IDX)];
        if is_extremum {
            ins.push((2, X));
            ins.push((3, GradSource::FwdOutput(0)));
            if with_initial {
                ins.push((4, GradSource::FwdInput(2)));
            }
        }
        let outs: &[(u32, u32)] = if with_initial { &[(0, 0), (1, 2)] } else { &[(0, 0)] };
        GradRule::Ops(vec![spec(&ScatterReduceGrad, attrs, &ins, outs)])
    }
}

impl OpDef for DynamicSlice {
    fn op_type(&self) -> &'static str {
        "DynamicSlice"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        DynamicSliceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let t = ctx.input(0)?;
        let slices = dynamic_check(ctx, t)?;
        Ok(vec![TensorInfo::new(t.dtype, dynamic_slice_shape(&t.shape, &slices))])
    }
    /// `DynamicSliceGrad{axes, sizes, shape: t's}(g, index)`: zeros with `g` at the slice.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let (Ok(a), Some(shape)) = (DynamicSliceAttrs::of(op), cx.input_shape(0)) else { return GradRule::None };
        let ins = [(0, G), (1, IDX)];
        let attrs = DynamicSliceGradAttrs { axes: a.axes, sizes: a.sizes, no_overlap: a.no_overlap, shape }.to_attrs();
        GradRule::Ops(vec![spec(&DynamicSliceGrad, attrs, &ins, &[(0, 0)])])
    }
}

impl OpDef for DynamicUpdate {
    fn op_type(&self) -> &'static str {
        "DynamicUpdate"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        DynamicSliceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        infer_dynamic_update(ctx)
    }
    /// `DynamicUpdateGrad{axes, sizes}(g, index)` for `t` (`g` zeroed at the slice)
    /// and `DynamicSlice{axes, sizes}(g, index)` for the update.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = DynamicSliceAttrs::of(op) else { return GradRule::None };
        let attrs = a.to_attrs();
        GradRule::Ops(vec![
            spec(&DynamicUpdateGrad, attrs.clone(), &[(0, G), (1, IDX)], &[(0, 0)]),
            spec(&DynamicSlice, attrs, &[(0, G), (1, IDX)], &[(0, 2)]),
        ])
    }
}

impl OpDef for DynamicUpdateInplace {
    fn op_type(&self) -> &'static str {
        "DynamicUpdateInplace"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        DynamicSliceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        infer_dynamic_update(ctx)
    }
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::modified(0, 0)]
    }
}

impl OpDef for Onehot {
    fn op_type(&self) -> &'static str {
        "Onehot"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        OnehotAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (idx, depth, values) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        require_int_indices(ctx, idx)?;
        if depth.nelms() != 1 || !depth.dtype.is_int() {
            return Err(ctx.error(format!("num_classes must be an integer scalar, got {depth}")));
        }
        if values.shape != [2] {
            return Err(ctx.error(format!("values must be a [off, on] pair of shape [2], got {values}")));
        }
        let a = OnehotAttrs::infer(ctx)?;
        let c = num_classes_attr(ctx, a.num_classes)?;
        let (_, shape) = onehot_shape(&idx.shape, c, a.axis).map_err(|m| ctx.error(m))?;
        Ok(vec![TensorInfo::new(values.dtype, shape)])
    }
    /// `OnehotGrad{axis, num_classes}(g, indices)`: the sums of `g` off and on
    /// the hot positions (the gradient of `values`; the indices get none).
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = OnehotAttrs::of(op) else { return GradRule::None };
        let attrs = OnehotGradAttrs { axis: a.axis, num_classes: a.num_classes, shape: None }.to_attrs();
        GradRule::Ops(vec![spec(&OnehotGrad, attrs, &[(0, G), (1, X)], &[(0, 2)])])
    }
}

impl OpDef for GroupedGather {
    fn op_type(&self) -> &'static str {
        "GroupedGather"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        GroupedGatherAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
        require_int_indices(ctx, idx)?;
        let GroupedGatherAttrs { axis, group_size, .. } = GroupedGatherAttrs::infer(ctx)?;
        let (_, shape) = grouped_gather_shape(&x.shape, &idx.shape, axis, group_size).map_err(|m| ctx.error(m))?;
        Ok(vec![TensorInfo::new(x.dtype, shape)])
    }
    /// `GroupedGatherGrad{axis, group_size, zero_OOR, shape: data's}(g, indices)`: per group,
    /// `g` scatter-added into zeros (out-of-range indices add nothing).
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let (Ok(a), Some(shape)) = (GroupedGatherAttrs::of(op), cx.input_shape(0)) else { return GradRule::None };
        let ins = [(0, G), (1, IDX)];
        let attrs =
            GroupedGatherGradAttrs { axis: a.axis, group_size: a.group_size, zero_oor: a.zero_oor, shape }.to_attrs();
        GradRule::Ops(vec![spec(&GroupedGatherGrad, attrs, &ins, &[(0, 0)])])
    }
}

impl OpDef for TiedGather {
    fn op_type(&self) -> &'static str {
        "TiedGather"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        super::shape::GatherAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
        require_int_indices(ctx, idx)?;
        let axis = super::shape::GatherAttrs::infer(ctx)?.axis;
        let (_, shape) = grouped_gather_shape(&x.shape, &idx.shape, axis, 1).map_err(|m| ctx.error(m))?;
        Ok(vec![TensorInfo::new(x.dtype, shape)])
    }
    /// `GatherGrad{axis, zero_OOR, shape: data's}(g, indices)`, as `Gather` (PopART's
    /// `TiedGatherGradOp` is a `GatherGradOp`).
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let (Ok(a), Some(shape)) = (super::shape::GatherAttrs::of(op), cx.input_shape(0)) else {
            return GradRule::None;
        };
        let ins = [(0, G), (1, IDX)];
        let attrs = super::grad::GatherGradAttrs { axis: a.axis, zero_oor: a.zero_oor, shape }.to_attrs();
        GradRule::Ops(vec![spec(&super::grad::GatherGrad, attrs, &ins, &[(0, 0)])])
    }
}

/// Whether `dtype` is numeric (scatter reductions other than `none`, gradients).
pub(crate) fn is_numeric(dtype: DataType) -> bool {
    dtype.is_int() || dtype.is_floating_point()
}

pub(crate) const ALL: &[&dyn OpDef] = &[
    &Subsample,
    &Split,
    &Scatter,
    &ScatterReduce,
    &DynamicSlice,
    &DynamicUpdate,
    &DynamicUpdateInplace,
    &Onehot,
    &GroupedGather,
    &TiedGather,
];
