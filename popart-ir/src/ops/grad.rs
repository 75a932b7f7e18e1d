//! Ops created by autodiff. Input conventions: input 0 is always the incoming
//! gradient `g`; the others are forward tensors as listed per type.

use super::unary::Identity;
use super::{broadcast_shapes, op_types, reduce, to_shape};
use crate::{
    op_attrs, Alias, AttrSpec, AttrValue, Attributes, DataType, GradOpSpec, GradRule, GradSource, InferContext,
    OpAttrs, OpDef, Result, TensorInfo,
};

op_attrs! {
    /// Attributes of `UnaryGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct UnaryGradAttrs {
        /// The forward op type.
        pub func: String,
    }
}

op_attrs! {
    /// Attributes of `BinaryGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct BinaryGradAttrs {
        /// Which derivative (`div_rhs`, `pow_lhs`...).
        pub func: String,
    }
}

op_attrs! {
    /// Attributes of `WhereGrad`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct WhereGradAttrs {
        /// 0: the gradient of `lhs`, 1: of `rhs`.
        pub arg: i64,
    }
}

op_attrs! {
    /// Attributes of `ReduceGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ReduceGradAttrs {
        /// The forward reduction (`sum`, `mean`, `max`...).
        pub func: String,
        /// The forward op's axes (empty: all).
        pub axes: Vec<i64> = Vec::new(),
        /// The forward op's `keepdims`.
        pub keepdims: bool = false,
        /// The forward input's shape.
        pub shape: Vec<i64>,
    }
}

op_attrs! {
    /// Attributes of `SliceGrad`: the forward `Slice`'s and its input's shape.
    #[derive(Clone, Debug, PartialEq)]
    pub struct SliceGradAttrs {
        /// As `Slice`.
        pub starts: Vec<i64>,
        /// As `Slice`.
        pub ends: Vec<i64>,
        /// As `Slice`.
        pub steps: Option<Vec<i64>> = None,
        /// As `Slice`.
        pub axes: Option<Vec<i64>> = None,
        /// The forward input's shape.
        pub shape: Vec<i64>,
    }
}

op_attrs! {
    /// Attributes of `GatherGrad`: the forward gather's and its data's shape.
    #[derive(Clone, Debug, PartialEq)]
    pub struct GatherGradAttrs {
        /// The gathered axis.
        pub axis: i64 = 0,
        /// Out-of-range indices add nothing (always true of this op).
        pub zero_oor key "zero_OOR": bool = false,
        /// The forward data's shape.
        pub shape: Vec<i64>,
    }
}

op_attrs! {
    /// Attributes of `ReshapeGrad` and `ReduceToShape`: a shape.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ShapeAttrs {
        /// The shape.
        pub shape: Vec<i64>,
    }
}

op_attrs! {
    /// Attributes of `Init`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct InitAttrs {
        /// The shape.
        pub shape: Vec<i64>,
        /// The data type.
        pub dtype: DataType,
    }
}

/// Attributes of `ConcatGrad`: `axis`, `index` and one `shape<i>` per concat
/// input (`shape0`, `shape1`...).
pub const CONCAT_GRAD_SCHEMA: &[AttrSpec] = &[
    AttrSpec { name: "axis", kind: crate::AttrKind::Int, required: true },
    AttrSpec { name: "index", kind: crate::AttrKind::Int, required: true },
    AttrSpec { name: "shape#", kind: crate::AttrKind::Ints, required: false },
];

// ----- shorthands for the gradient rules declared in the op files -----

/// A gradient op spec: `op_type{attrs}` fed from `inputs`, whose output `o` is the
/// gradient of forward input `i` for each `(o, i)` in `outputs`.
pub(crate) fn spec(
    op: &'static dyn OpDef,
    attrs: Attributes,
    inputs: &[(u32, GradSource)],
    outputs: &[(u32, u32)],
) -> GradOpSpec {
    GradOpSpec { op, attrs, inputs: inputs.to_vec(), outputs: outputs.to_vec(), shape_attrs: Vec::new() }
}

/// `Identity(g0)` as the gradient of forward input `input`: the output gradient passes
/// through unchanged (autodiff then only reduces it to the input's shape and dtype).
pub(crate) fn pass_through(input: u32) -> GradOpSpec {
    spec(&Identity, Attributes::new(), &[(0, GradSource::GradOfOutput(0))], &[(0, input)])
}

/// `op_type(g0, ..)` with no attributes, as the gradient of forward input `input`.
pub(crate) fn simple(op: &'static dyn OpDef, inputs: &[(u32, GradSource)], input: u32) -> GradOpSpec {
    spec(op, Attributes::new(), inputs, &[(0, input)])
}

/// The rule of a unary op whose derivative is computed by `UnaryGrad{func}` (`func`:
/// the forward op's type) from the forward input (`uses_output == false`, input 1)
/// or the forward output (input 2).
pub(crate) fn unary_grad(fwd_op: &'static dyn OpDef, uses_output: bool) -> GradRule {
    let fwd = if uses_output { (2, GradSource::FwdOutput(0)) } else { (1, GradSource::FwdInput(0)) };
    GradRule::Ops(vec![spec(
        &UnaryGrad,
        Attributes::new().with("func", AttrValue::Str(fwd_op.op_type().to_string())),
        &[(0, GradSource::GradOfOutput(0)), fwd],
        &[(0, 0)],
    )])
}

op_types!(
    /// `UnaryGrad{func}(g, x | y)`: gradient of the unary op type `func` (`"Relu"`,
    /// `"Exp"`...) w.r.t. its input, from the forward input `x` (index 1) or output `y`
    /// (index 2), whichever the forward op's grad rule connects.
    UnaryGrad,
    /// `BinaryGrad{func}(g, a, b, y?)`: gradient of a binary op w.r.t. one operand, at the
    /// broadcast shape (autodiff reduces it). `func`: `div_rhs` (-g·a/b²), `pow_lhs`
    /// (g·b·a^(b-1)), `pow_rhs` (g·y·ln a), `max_lhs`/`min_lhs` (g where a == y),
    /// `max_rhs`/`min_rhs` (g where b == y).
    BinaryGrad,
    /// `WhereGrad{arg}(g, cond)`: `arg` 0 -> where(cond, g, 0), 1 -> where(cond, 0, g).
    WhereGrad,
    /// `MatMulLhsGrad(g, a, b)`: `g @ bᵀ` reduced to `a`'s shape.
    MatMulLhsGrad,
    /// `MatMulRhsGrad(g, a, b)`: `aᵀ @ g` reduced to `b`'s shape.
    MatMulRhsGrad,
    /// `ReduceGrad{func, axes, keepdims, shape}(g, x?, y?)`: broadcast `g` back to
    /// the forward input's shape (attribute `shape`); `mean` divides by the
    /// reduced count, `max`/`min` mask where `x == y`; `prod` multiplies by the
    /// product of the other elements, `l1` by `sign(x)`, `l2` by `x / y`,
    /// `logsum` by `1 / exp(y)`, `logsumexp` by `exp(x - y)`, `sumsquare` by `2x`.
    /// `x` (input 1) is connected for `max min prod l1 l2 logsumexp sumsquare`,
    /// `y` (input 2) for `max min l2 logsum logsumexp`, as PopART's grad ops read them.
    ReduceGrad,
    /// `SoftmaxGrad{axis}(g, y)`: `y · (g - sum(g · y, axis))`.
    SoftmaxGrad,
    /// `SliceGrad{starts, ends, steps, axes, shape}(g)`: zeros of the forward
    /// input's shape (attribute `shape`) with `g` in the slice.
    SliceGrad,
    /// `GatherGrad{axis, zero_OOR, shape}(g, indices)`: zeros of the forward
    /// data's shape (attribute `shape`), `g` scatter-added at `indices`
    /// (out-of-range indices add nothing).
    GatherGrad,
    /// `NllLossGrad{reduction, ignore_index}(g, probs, labels)`: `-g / probs` at each label
    /// (divided by the count of non-ignored labels for `mean`), zero elsewhere.
    NllLossGrad,
    /// `ReshapeGrad{shape}(g)`: `g` reshaped to the forward input's shape
    /// (attribute `shape`, same element count; gradient of `Reshape` and `Squeeze`).
    ReshapeGrad,
    /// `ConcatGrad{axis, index, shape0, .., shape<n-1>}(g)`: the part of `g`
    /// along `axis` that came from concat input `index`; attributes `shape<i>`
    /// are the concat inputs' shapes (PopART's `ConcatGradOp` keeps the range).
    ConcatGrad,
    /// `ReduceToShape{shape}(x)`: sum `x` over the dims that broadcasting expanded from `shape`.
    ReduceToShape,
    /// `Sum(x0, x1, ...)`: elementwise sum of equally typed and shaped inputs.
    Sum,
    /// `Init{shape, dtype}()`: a tensor of zeros.
    Init,
);

/// The forward tensor shape a gradient op takes as its attribute `key` (set by
/// autodiff from [`crate::GradOpSpec::shape_attrs`]), checked: its element
/// count must fit `usize`.
pub(crate) fn fwd_shape(ctx: &InferContext<'_>, key: &str) -> Result<Vec<usize>> {
    let shape = to_shape(ctx, ctx.ints(key)?, &format!("`{key}`"))?;
    if shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).is_none() {
        return Err(ctx.error(format!("`{key}` {shape:?} has too many elements")));
    }
    Ok(shape)
}

fn first_input_info(ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
    Ok(vec![ctx.input(0)?.clone()])
}

fn info_of_input(ctx: &InferContext<'_>, i: u32) -> Result<Vec<TensorInfo>> {
    ctx.input(0)?;
    Ok(vec![ctx.input(i)?.clone()])
}

/// Check that the incoming gradient (input 0) has `expected`'s dtype and shape:
/// the forward output it is the gradient of. Catches hand-built gradient ops
/// whose gradient input does not fit the forward tensors.
fn check_grad_input(ctx: &InferContext<'_>, dtype: crate::DataType, shape: &[usize]) -> Result<()> {
    let g = ctx.input(0)?;
    if g.dtype != dtype || g.shape != shape {
        return Err(ctx.error(format!(
            "gradient input {g} does not match the forward output {}",
            TensorInfo::new(dtype, shape.to_vec())
        )));
    }
    Ok(())
}

/// The forward output shape of `a @ b` for the matmul gradients.
fn matmul_grad_check(ctx: &InferContext<'_>) -> Result<()> {
    let (a, b) = (ctx.input(1)?, ctx.input(2)?);
    if a.dtype != b.dtype {
        return Err(ctx.error(format!("operands have different dtypes: {} and {}", a.dtype, b.dtype)));
    }
    let y = super::matmul::matmul_shape(&a.shape, &b.shape).map_err(|m| ctx.error(m))?;
    check_grad_input(ctx, a.dtype, &y)
}

impl OpDef for UnaryGrad {
    fn op_type(&self) -> &'static str {
        "UnaryGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        UnaryGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let f = ctx.attrs.str("func").ok_or_else(|| ctx.error("missing attribute `func`"))?;
        crate::lookup_op(f).map_err(|_| ctx.error(format!("`func` names no registered op type: `{f}`")))?;
        let fwd = match (ctx.optional_input(1), ctx.optional_input(2)) {
            (Some(x), None) => x,
            (None, Some(y)) => y,
            _ => return Err(ctx.error("exactly one of the forward input (1) and output (2) must be connected")),
        };
        let g = ctx.input(0)?;
        if fwd != g {
            return Err(ctx.error("gradient and forward tensor differ in type or shape"));
        }
        Ok(vec![g.clone()])
    }
}

impl OpDef for BinaryGrad {
    fn op_type(&self) -> &'static str {
        "BinaryGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        BinaryGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let f = ctx.attrs.str("func").ok_or_else(|| ctx.error("missing attribute `func`"))?;
        if !["div_rhs", "pow_lhs", "pow_rhs", "max_lhs", "max_rhs", "min_lhs", "min_rhs"].contains(&f) {
            return Err(ctx.error(format!("unknown binary gradient `{f}`")));
        }
        ctx.input(1)?;
        ctx.input(2)?;
        if matches!(f, "pow_rhs" | "max_lhs" | "max_rhs" | "min_lhs" | "min_rhs") {
            ctx.input(3)?;
        }
        first_input_info(ctx)
    }
}

impl OpDef for WhereGrad {
    fn op_type(&self) -> &'static str {
        "WhereGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        WhereGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (g, c) = (ctx.input(0)?, ctx.input(1)?);
        let shape = broadcast_shapes(&g.shape, &c.shape).ok_or_else(|| ctx.error("condition does not broadcast"))?;
        Ok(vec![TensorInfo::new(g.dtype, shape)])
    }
}

impl OpDef for MatMulLhsGrad {
    fn op_type(&self) -> &'static str {
        "MatMulLhsGrad"
    }
    /// The forward product's multiply-adds: `g`'s elements x the contracted size (input 1's last dimension).
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.matrix(ctx.input_elements(0).saturating_mul(ctx.input_last_dim(1)))
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        matmul_grad_check(ctx)?;
        info_of_input(ctx, 1)
    }
}

impl OpDef for MatMulRhsGrad {
    fn op_type(&self) -> &'static str {
        "MatMulRhsGrad"
    }
    /// As `MatMulLhsGrad`: the forward product's multiply-adds.
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.matrix(ctx.input_elements(0).saturating_mul(ctx.input_last_dim(1)))
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        matmul_grad_check(ctx)?;
        info_of_input(ctx, 2)
    }
}

impl OpDef for ReduceGrad {
    fn op_type(&self) -> &'static str {
        "ReduceGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ReduceGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let f = ctx.attrs.str("func").ok_or_else(|| ctx.error("missing attribute `func`"))?;
        let (reads_x, reads_y) = reduce::grad_func(f).ok_or_else(|| ctx.error(format!("unknown reduction `{f}`")))?;
        let g = ctx.input(0)?;
        let x = TensorInfo::new(g.dtype, fwd_shape(ctx, "shape")?);
        for (i, reads) in [(1, reads_x), (2, reads_y)] {
            match (reads, ctx.optional_input(i)) {
                (true, None) => return Err(ctx.error(format!("`{f}` reads the forward tensor at input {i}"))),
                (false, Some(_)) => return Err(ctx.error(format!("`{f}` reads no forward tensor at input {i}"))),
                _ => {}
            }
        }
        if reads_x && ctx.input(1)? != &x {
            return Err(ctx.error(format!("the forward input {} is not {x}", ctx.input(1)?)));
        }
        let axes =
            super::normalize_axes(ctx.attrs.ints("axes").unwrap_or(&[]), x.rank()).map_err(super::infer_error(ctx))?;
        let keepdims = ctx.attrs.bool("keepdims").unwrap_or(false);
        let y = reduce::reduced_shape(&x.shape, &axes, keepdims);
        if g.shape != y {
            return Err(ctx.error("gradient shape does not match the reduced shape"));
        }
        if reads_y && ctx.input(2)?.shape != y {
            return Err(ctx.error("the forward output does not have the reduced shape"));
        }
        Ok(vec![x])
    }
}

impl OpDef for SoftmaxGrad {
    fn op_type(&self) -> &'static str {
        "SoftmaxGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        super::nn::SoftmaxAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let y = ctx.input(1)?;
        check_grad_input(ctx, y.dtype, &y.shape)?;
        super::normalize_axis(ctx.attrs.int("axis").unwrap_or(-1), y.rank()).map_err(super::infer_error(ctx))?;
        info_of_input(ctx, 1)
    }
}

impl OpDef for SliceGrad {
    fn op_type(&self) -> &'static str {
        "SliceGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        SliceGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x_shape = fwd_shape(ctx, "shape")?;
        let dtype = ctx.input(0)?.dtype;
        let mut shape = x_shape.clone();
        for s in super::shape::slice_dims(ctx, &x_shape)? {
            shape[s.axis] = s.len;
        }
        check_grad_input(ctx, dtype, &shape)?;
        Ok(vec![TensorInfo::new(dtype, x_shape)])
    }
}

impl OpDef for GatherGrad {
    fn op_type(&self) -> &'static str {
        "GatherGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        GatherGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x_shape = fwd_shape(ctx, "shape")?;
        let (dtype, idx) = (ctx.input(0)?.dtype, ctx.input(1)?);
        if !idx.dtype.is_int() {
            return Err(ctx.error(format!("indices must be an integer tensor, got {}", idx.dtype)));
        }
        let axis = super::normalize_axis(ctx.attrs.int("axis").unwrap_or(0), x_shape.len())
            .map_err(super::infer_error(ctx))?;
        let mut shape = x_shape[..axis].to_vec();
        shape.extend_from_slice(&idx.shape);
        shape.extend_from_slice(&x_shape[axis + 1..]);
        check_grad_input(ctx, dtype, &shape)?;
        Ok(vec![TensorInfo::new(dtype, x_shape)])
    }
}

impl OpDef for NllLossGrad {
    fn op_type(&self) -> &'static str {
        "NllLossGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        super::nn::NllLossAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        ctx.input(2)?;
        info_of_input(ctx, 1)
    }
}

impl OpDef for ReshapeGrad {
    fn op_type(&self) -> &'static str {
        "ReshapeGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ShapeAttrs::SCHEMA
    }
    /// Its output holds the input's bytes in order (a view for lowering).
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::copy(0, 0)]
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let g = ctx.input(0)?;
        let x = TensorInfo::new(g.dtype, fwd_shape(ctx, "shape")?);
        if g.nelms() != x.nelms() {
            return Err(ctx.error(format!("gradient {g} cannot be reshaped to {x}")));
        }
        Ok(vec![x])
    }
}

/// The range `[start, end)` along the normalized `axis` of a `ConcatGrad`'s
/// gradient of shape `g` that came from concat input `index`, from attributes
/// `axis`, `index` and `shape0, ..`; the error says what is wrong.
pub fn concat_grad_range(attrs: &Attributes, g: &[usize]) -> std::result::Result<(usize, usize, usize), String> {
    let rank = g.len();
    let axis = attrs.int("axis").ok_or("missing int attribute `axis`")?;
    let axis = super::normalize_axis(axis, rank).map_err(|e| e.to_string())?;
    let index = attrs.int("index").ok_or("missing int attribute `index`")?;
    let (mut total, mut range, mut k) = (0usize, None, 0usize);
    while let Some(v) = attrs.get(&format!("shape{k}")) {
        let AttrValue::Ints(shape) = v else { return Err(format!("`shape{k}` must be a list of integers")) };
        let fits = shape.len() == rank
            && shape.iter().zip(g).enumerate().all(|(d, (&a, &b))| d == axis || usize::try_from(a) == Ok(b));
        let len = usize::try_from(shape.get(axis).copied().unwrap_or(-1)).ok().filter(|_| fits);
        let len = len.ok_or_else(|| format!("concat input {k} of shape {shape:?} does not fit gradient {g:?}"))?;
        let end = total.checked_add(len).ok_or("the concatenated size overflows")?;
        if k as i64 == index {
            range = Some((total, end));
        }
        total = end;
        k += 1;
    }
    let (start, end) = range.ok_or_else(|| format!("index {index} is not one of the {k} concat inputs"))?;
    if total != g[axis] {
        return Err(format!("concat inputs sum to {total} along axis {axis}, gradient has {}", g[axis]));
    }
    Ok((axis, start, end))
}

impl OpDef for ConcatGrad {
    fn op_type(&self) -> &'static str {
        "ConcatGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        CONCAT_GRAD_SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let g = ctx.input(0)?;
        let (axis, start, end) = concat_grad_range(ctx.attrs, &g.shape).map_err(|m| ctx.error(m))?;
        let mut shape = g.shape.clone();
        shape[axis] = end - start;
        Ok(vec![TensorInfo::new(g.dtype, shape)])
    }
}

impl OpDef for ReduceToShape {
    fn op_type(&self) -> &'static str {
        "ReduceToShape"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ShapeAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let shape = to_shape(ctx, ctx.ints("shape")?, "shape")?;
        if broadcast_shapes(&shape, &x.shape).as_deref() != Some(&x.shape[..]) {
            return Err(ctx.error(format!("{:?} does not broadcast to {:?}", shape, x.shape)));
        }
        Ok(vec![TensorInfo::new(x.dtype, shape)])
    }
}

impl OpDef for Sum {
    fn op_type(&self) -> &'static str {
        "Sum"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let first = ctx.input(0)?;
        if ctx.inputs().iter().enumerate().any(|(k, (i, _))| *i as usize != k) {
            return Err(ctx.error("inputs must be at indices 0..n"));
        }
        if let Some((i, t)) = ctx.inputs().iter().find(|(_, t)| t != first) {
            return Err(ctx.error(format!("input {i} is {t} but input 0 is {first}")));
        }
        Ok(vec![first.clone()])
    }
}

impl OpDef for Init {
    fn op_type(&self) -> &'static str {
        "Init"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        InitAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let shape = to_shape(ctx, ctx.ints("shape")?, "shape")?;
        let dtype = ctx.attrs.dtype("dtype").ok_or_else(|| ctx.error("missing dtype attribute `dtype`"))?;
        Ok(vec![TensorInfo::new(dtype, shape)])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[
    &UnaryGrad,
    &BinaryGrad,
    &WhereGrad,
    &MatMulLhsGrad,
    &MatMulRhsGrad,
    &ReduceGrad,
    &SoftmaxGrad,
    &SliceGrad,
    &GatherGrad,
    &NllLossGrad,
    &ReshapeGrad,
    &ConcatGrad,
    &ReduceToShape,
    &Sum,
    &Init,
];
