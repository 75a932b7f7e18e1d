//! Ops created by autodiff. Input conventions: input 0 is always the incoming
//! gradient `g`; the others are forward tensors as listed per type.

use super::unary::Identity;
use super::{broadcast_shapes, op_types, reduce, to_shape};
use crate::{
    op_attrs, Alias, AttrSpec, AttrValue, Attributes, DataType, GradOpSpec, GradRule, GradSource, InferContext,
    OpAttrs, OpDef, Result, TensorInfo,
};

/// The forward input `x` of a unary op, as its derivative reads it (the default
/// parameter makes `X` itself the marker of [`UnaryDerivative::Reads`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct X<T = ()>(pub T);

/// The forward output `y` of a unary op, as its derivative reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Y<T = ()>(pub T);

mod sealed {
    /// Only [`super::X`] and [`super::Y`] are [`super::FwdValue`]s: no other
    /// type can pair a forward tensor with the other one's wrapper.
    pub trait Sealed {}
    impl Sealed for super::X {}
    impl Sealed for super::Y {}
}

/// Which forward tensor a unary derivative reads: [`X`] or [`Y`] (sealed).
pub trait FwdValue: sealed::Sealed + Send + Sync + 'static {
    /// Where autodiff takes it from.
    const SOURCE: GradSource;
    /// A value of that tensor, wrapped so that a derivative must name which one it reads.
    type Of<T>;
    /// Wrap an element of the tensor.
    fn wrap<T>(v: T) -> Self::Of<T>;
}

impl FwdValue for X {
    const SOURCE: GradSource = GradSource::FwdInput(0);
    type Of<T> = X<T>;
    #[inline(always)]
    fn wrap<T>(v: T) -> X<T> {
        X(v)
    }
}

impl FwdValue for Y {
    const SOURCE: GradSource = GradSource::FwdOutput(0);
    type Of<T> = Y<T>;
    #[inline(always)]
    fn wrap<T>(v: T) -> Y<T> {
        Y(v)
    }
}

/// A unary op differentiated by a gradient op type of its own (`Relu` by
/// `ReluGrad`), declared once in the unary table of `ops::unary`: the gradient
/// op, and which forward tensor it reads ([`X`] or [`Y`]). Autodiff connects
/// that tensor at input 1 of the gradient op; a device's derivative reads it
/// through [`fwd_value`], so a kernel written against the other one does not
/// compile.
pub trait UnaryDerivative: OpDef {
    /// The gradient op type.
    type Grad: UnaryGradOp<Fwd = Self>;
    /// The forward tensor the gradient reads.
    type Reads: FwdValue;
    /// The gradient op's definition.
    const GRAD: &'static Self::Grad;
}

/// The gradient op type of a [`UnaryDerivative`]: `(g, x | y) -> dx`, its
/// forward op known by type.
pub trait UnaryGradOp: OpDef {
    /// The forward op differentiated.
    type Fwd: UnaryDerivative<Grad = Self>;

    /// The forward op's identity.
    fn fwd_id() -> crate::OpDefId {
        crate::OpDefId::of::<Self::Fwd>()
    }
}

/// An element `v` of the forward tensor `D`'s derivative reads, wrapped as
/// [`X`] or [`Y`] as the IR declares: a kernel binds it with the pattern of
/// the tensor it means (`let Y(y) = fwd_value::<Relu, _>(v);`), which only
/// compiles if the IR's gradient rule connects that tensor.
///
/// ```
/// use popart_ir::ops::all::{Log, Relu};
/// use popart_ir::ops::grad::{fwd_value, X, Y};
/// let Y(y) = fwd_value::<Relu, f64>(2.0); // relu' = (y > 0)
/// let X(x) = fwd_value::<Log, f64>(2.0); // log' = 1 / x
/// assert_eq!((y, x), (2.0, 2.0));
/// ```
///
/// ```compile_fail,E0308
/// use popart_ir::ops::all::Relu;
/// use popart_ir::ops::grad::{fwd_value, X};
/// // The IR declares that Relu's gradient reads y: reading x does not compile.
/// let X(x) = fwd_value::<Relu, f64>(2.0);
/// ```
#[inline(always)]
pub fn fwd_value<D: UnaryDerivative, T>(v: T) -> <D::Reads as FwdValue>::Of<T> {
    <D::Reads as FwdValue>::wrap(v)
}

/// The gradient rule of a [`UnaryDerivative`]: `D::Grad(g, x | y)`, the
/// forward tensor at input 1.
pub(crate) fn unary_derivative<D: UnaryDerivative>() -> GradRule {
    GradRule::Ops(vec![spec(
        D::GRAD,
        Attributes::new(),
        &[(0, GradSource::GradOfOutput(0)), (1, <D::Reads as FwdValue>::SOURCE)],
        &[(0, 0)],
    )])
}

/// Shape inference of a unary gradient op `(g, x | y) -> dx`: both of one type and shape.
pub(crate) fn infer_unary_derivative(ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
    let (g, fwd) = (ctx.input(0)?, ctx.input(1)?);
    if fwd != g {
        return Err(ctx.error(format!("gradient {g} and forward tensor {fwd} differ in type or shape")));
    }
    Ok(vec![g.clone()])
}

crate::attr_enum! {
    /// Which derivative a `BinaryGrad` computes: the forward op and operand.
    pub enum BinaryDerivative {
        /// `Div` w.r.t. `b`: `-g·a/b²`, from `(g, a, b)`.
        DivRhs = "div_rhs",
        /// `Pow` w.r.t. `a`: `g·b·a^(b-1)`, from `(g, a, b)`.
        PowLhs = "pow_lhs",
        /// `Pow` w.r.t. `b`: `g·y·ln a`, from `(g, a, y)`.
        PowRhs = "pow_rhs",
        /// `Maximum` w.r.t. `a`: `g` where `a == y`, from `(g, a, y)`.
        MaxLhs = "max_lhs",
        /// `Maximum` w.r.t. `b`: `g` where `b == y`, from `(g, b, y)`.
        MaxRhs = "max_rhs",
        /// `Minimum` w.r.t. `a`: `g` where `a == y`, from `(g, a, y)`.
        MinLhs = "min_lhs",
        /// `Minimum` w.r.t. `b`: `g` where `b == y`, from `(g, b, y)`.
        MinRhs = "min_rhs",
    }
}

impl BinaryDerivative {
    /// The `BinaryGrad` inputs the formula reads, in its order: `g` (0), then
    /// two of `a` (1), `b` (2) and the forward output `y` (3).
    pub fn operands(self) -> [u32; 3] {
        match self {
            Self::DivRhs | Self::PowLhs => [0, 1, 2],
            Self::PowRhs | Self::MaxLhs | Self::MinLhs => [0, 1, 3],
            Self::MaxRhs | Self::MinRhs => [0, 2, 3],
        }
    }

    /// True if the forward output `y` is connected (input 3).
    pub fn reads_output(self) -> bool {
        self.operands().contains(&3)
    }
}

op_attrs! {
    /// Attributes of `BinaryGrad`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct BinaryGradAttrs {
        /// Which derivative.
        pub derivative: BinaryDerivative,
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

crate::attr_enum! {
    /// The forward reduction a `ReduceGrad` differentiates (one per `Reduce*` op).
    pub enum ReduceKind {
        /// `ReduceSum`.
        Sum = "sum",
        /// `ReduceMean`.
        Mean = "mean",
        /// `ReduceMax`.
        Max = "max",
        /// `ReduceMin`.
        Min = "min",
        /// `ReduceProd`.
        Prod = "prod",
        /// `ReduceL1`.
        L1 = "l1",
        /// `ReduceL2`.
        L2 = "l2",
        /// `ReduceLogSum`.
        LogSum = "logsum",
        /// `ReduceLogSumExp`.
        LogSumExp = "logsumexp",
        /// `ReduceSumSquare`.
        SumSquare = "sumsquare",
    }
}

impl ReduceKind {
    /// Whether the gradient reads the forward input `x` (input 1) and the
    /// forward output `y` (input 2), as PopART's grad ops do.
    pub fn reads(self) -> (bool, bool) {
        match self {
            Self::Sum | Self::Mean => (false, false),
            Self::LogSum => (false, true),
            Self::Prod | Self::L1 | Self::SumSquare => (true, false),
            Self::Max | Self::Min | Self::L2 | Self::LogSumExp => (true, true),
        }
    }
}

op_attrs! {
    /// Attributes of `ReduceGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ReduceGradAttrs {
        /// The forward reduction.
        pub reduction: ReduceKind,
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

crate::attr_enum! {
    /// What an `Init` fills its tensor with (PopXL's `init_type`).
    pub enum InitType {
        /// Zeros.
        Zero = "zero",
        /// Whatever the buffer held: for tensors every element of which is
        /// written before it is read (a repeat's stash).
        Undef = "undef",
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
        /// The fill; absent: [`InitType::Zero`].
        pub init_type: Option<InitType> = None,
    }
}

/// Attributes of `ConcatGrad`: `axis`, `index` and one `shape<i>` per concat
/// input (`shape0`, `shape1`...; an indexed family, so declared by hand rather
/// than with [`op_attrs!`](crate::op_attrs)).
#[derive(Clone, Debug, PartialEq)]
pub struct ConcatGradAttrs {
    /// The forward concat's axis.
    pub axis: i64,
    /// Which concat input this gradient is for.
    pub index: i64,
    /// The shapes of the concat inputs, in input order.
    pub shapes: Vec<Vec<i64>>,
}

impl OpAttrs for ConcatGradAttrs {
    const SCHEMA: &'static [AttrSpec] = &[
        AttrSpec { name: "axis", kind: crate::AttrKind::Int, required: true },
        AttrSpec { name: "index", kind: crate::AttrKind::Int, required: true },
        AttrSpec { name: "shape#", kind: crate::AttrKind::Ints, required: false },
    ];
    fn from_attrs(attrs: &Attributes) -> std::result::Result<Self, crate::AttrError> {
        crate::check_schema(Self::SCHEMA, attrs)?;
        let mut shapes = Vec::new();
        while attrs.get(&format!("shape{}", shapes.len())).is_some() {
            shapes.push(crate::decode_field::<Vec<i64>>(attrs, &format!("shape{}", shapes.len()), None)?);
        }
        Ok(ConcatGradAttrs {
            axis: crate::decode_field(attrs, "axis", None)?,
            index: crate::decode_field(attrs, "index", None)?,
            shapes,
        })
    }
    fn to_attrs(&self) -> Attributes {
        let mut attrs =
            Attributes::new().with("axis", AttrValue::Int(self.axis)).with("index", AttrValue::Int(self.index));
        for (k, shape) in self.shapes.iter().enumerate() {
            attrs.set(&format!("shape{k}"), AttrValue::Ints(shape.clone()));
        }
        attrs
    }
}

impl ConcatGradAttrs {
    /// The range `[start, end)` along the normalized `axis` of a gradient of
    /// shape `g` that came from concat input `index`; the error says what is wrong.
    pub fn range(&self, g: &[usize]) -> std::result::Result<(usize, usize, usize), String> {
        let rank = g.len();
        let axis = super::normalize_axis(self.axis, rank).map_err(|e| e.to_string())?;
        let (mut total, mut range) = (0usize, None);
        for (k, shape) in self.shapes.iter().enumerate() {
            let fits = shape.len() == rank
                && shape.iter().zip(g).enumerate().all(|(d, (&a, &b))| d == axis || usize::try_from(a) == Ok(b));
            let len = usize::try_from(shape.get(axis).copied().unwrap_or(-1)).ok().filter(|_| fits);
            let len = len.ok_or_else(|| format!("concat input {k} of shape {shape:?} does not fit gradient {g:?}"))?;
            let end = total.checked_add(len).ok_or("the concatenated size overflows")?;
            if k as i64 == self.index {
                range = Some((total, end));
            }
            total = end;
        }
        let (start, end) = range
            .ok_or_else(|| format!("index {} is not one of the {} concat inputs", self.index, self.shapes.len()))?;
        if total != g[axis] {
            return Err(format!("concat inputs sum to {total} along axis {axis}, gradient has {}", g[axis]));
        }
        Ok((axis, start, end))
    }
}

// ----- shorthands for the gradient rules declared in the op files -----

/// A gradient op spec: `op_type{attrs}` fed from `inputs`, whose output `o` is the
/// gradient of forward input `i` for each `(o, i)` in `outputs`.
pub(crate) fn spec(
    op: &'static dyn OpDef,
    attrs: Attributes,
    inputs: &[(u32, GradSource)],
    outputs: &[(u32, u32)],
) -> GradOpSpec {
    GradOpSpec { op, attrs, inputs: inputs.to_vec(), outputs: outputs.to_vec() }
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

op_types!(
    /// `BinaryGrad{derivative}(g, a, b, y?)`: gradient of a binary op w.r.t. one
    /// operand, at the broadcast shape (autodiff reduces it); see
    /// [`BinaryDerivative`] for the formulas and the inputs each reads.
    BinaryGrad,
    /// `WhereGrad{arg}(g, cond)`: `arg` 0 -> where(cond, g, 0), 1 -> where(cond, 0, g).
    WhereGrad,
    /// `MatMulLhsGrad(g, a, b)`: `g @ bᵀ` reduced to `a`'s shape.
    MatMulLhsGrad,
    /// `MatMulRhsGrad(g, a, b)`: `aᵀ @ g` reduced to `b`'s shape.
    MatMulRhsGrad,
    /// `MatMulRhsBiasGrad(g, a, b)`, `b` of rank 2 (`[k, n]`): output 0 is
    /// `MatMulRhsGrad(g, a, b)`, output 1 `g` summed over every axis but its
    /// last (`ReduceToShape{shape=[n]}(g)`: the gradient of a bias added to
    /// the product), computed in the weight gradient's pass over `g`. Made
    /// by the `fuse-bias-grad` pattern.
    MatMulRhsBiasGrad,
    /// `ReduceGrad{reduction, axes, keepdims, shape}(g, x?, y?)`: broadcast `g` back to
    /// the forward input's shape (attribute `shape`); `mean` divides by the
    /// reduced count, `max`/`min` mask where `x == y`; `prod` multiplies by the
    /// product of the other elements, `l1` by `sign(x)`, `l2` by `x / y`,
    /// `logsum` by `1 / exp(y)`, `logsumexp` by `exp(x - y)`, `sumsquare` by `2x`.
    /// `x` (input 1) and `y` (input 2) are connected as [`ReduceKind::reads`] says.
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

impl OpDef for BinaryGrad {
    fn op_type(&self) -> &'static str {
        "BinaryGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        BinaryGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let derivative = BinaryGradAttrs::infer(ctx)?.derivative;
        ctx.input(1)?;
        ctx.input(2)?;
        if derivative.reads_output() {
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

impl OpDef for MatMulRhsBiasGrad {
    fn op_type(&self) -> &'static str {
        "MatMulRhsBiasGrad"
    }
    /// As `MatMulRhsGrad` (the sum over `g` is not counted).
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        MatMulRhsGrad.cost(ctx)
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        matmul_grad_check(ctx)?;
        let b = ctx.input(2)?;
        if b.rank() != 2 || !b.dtype.is_floating_point() {
            return Err(ctx.error(format!("the weight {b} must be a float matrix [k, n]")));
        }
        Ok(vec![b.clone(), TensorInfo::new(b.dtype, vec![b.shape[1]])])
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
        let ReduceGradAttrs { reduction, axes, keepdims, shape } = ReduceGradAttrs::infer(ctx)?;
        let f = reduction.name();
        let (reads_x, reads_y) = reduction.reads();
        let g = ctx.input(0)?;
        let x = TensorInfo::new(g.dtype, super::checked_shape(ctx, &shape, "shape")?);
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
        let axes = super::normalize_axes(&axes, x.rank()).map_err(super::infer_error(ctx))?;
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
        let axis = super::nn::SoftmaxAttrs::infer(ctx)?.axis;
        super::normalize_axis(axis, y.rank()).map_err(super::infer_error(ctx))?;
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
        let a = SliceGradAttrs::infer(ctx)?;
        let x_shape = super::checked_shape(ctx, &a.shape, "shape")?;
        let dtype = ctx.input(0)?.dtype;
        let mut shape = x_shape.clone();
        let forward = super::shape::SliceAttrs { starts: a.starts, ends: a.ends, steps: a.steps, axes: a.axes };
        for s in super::shape::slice_dims(ctx, &forward, &x_shape)? {
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
        let a = GatherGradAttrs::infer(ctx)?;
        let x_shape = super::checked_shape(ctx, &a.shape, "shape")?;
        let (dtype, idx) = (ctx.input(0)?.dtype, ctx.input(1)?);
        if !idx.dtype.is_int() {
            return Err(ctx.error(format!("indices must be an integer tensor, got {}", idx.dtype)));
        }
        let axis = super::normalize_axis(a.axis, x_shape.len()).map_err(super::infer_error(ctx))?;
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
        let x = TensorInfo::new(g.dtype, super::checked_shape(ctx, &ShapeAttrs::infer(ctx)?.shape, "shape")?);
        if g.nelms() != x.nelms() {
            return Err(ctx.error(format!("gradient {g} cannot be reshaped to {x}")));
        }
        Ok(vec![x])
    }
}

impl OpDef for ConcatGrad {
    fn op_type(&self) -> &'static str {
        "ConcatGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ConcatGradAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let g = ctx.input(0)?;
        let (axis, start, end) = ConcatGradAttrs::infer(ctx)?.range(&g.shape).map_err(|m| ctx.error(m))?;
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
        let shape = to_shape(ctx, &ShapeAttrs::infer(ctx)?.shape, "shape")?;
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
        let InitAttrs { shape, dtype, .. } = InitAttrs::infer(ctx)?;
        let shape = to_shape(ctx, &shape, "shape")?;
        Ok(vec![TensorInfo::new(dtype, shape)])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[
    &BinaryGrad,
    &WhereGrad,
    &MatMulLhsGrad,
    &MatMulRhsGrad,
    &MatMulRhsBiasGrad,
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
