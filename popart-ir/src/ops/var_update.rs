//! In-place variable updates: output 0 is input 0, modified in place.
//!
//! The accumulator family follows PopART's `AccumulateOp` (attribute `type`, see
//! [`AccumulationType`]), `AccumulatorScaleOp` and `SparseAccumulateOp`. Like
//! PopART's mixed-precision PopLibs updates, a float accumulator may take an
//! update (and a factor tensor) of another float type: float16 with float32 is
//! computed in float32.

use super::{broadcast_shapes, normalize_axis, op_types};
use crate::{op_attrs, Alias, AttrSpec, Attributes, DataType, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of `Accumulate`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct AccumulateAttrs {
        /// The accumulation type (absent: see [`AccumulateAttrs::kind`]).
        pub kind key "type": Option<AccumulationType> = None,
        /// The factor (or input 2).
        pub factor: Option<f64> = None,
    }
}

impl AccumulateAttrs {
    /// The accumulation type (`dampened_add` when absent).
    pub fn kind(&self) -> AccumulationType {
        self.kind.unwrap_or(AccumulationType::DampenedAdd)
    }
}

op_attrs! {
    /// Attributes of `AccumulatorScale`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct AccumulatorScaleAttrs {
        /// The factor (or input 2).
        pub factor: Option<f64> = None,
    }
}

op_attrs! {
    /// Attributes of `SparseAccumulate`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct SparseAccumulateAttrs {
        /// The factor (or input 2; absent: 1).
        pub factor: Option<f64> = None,
        /// The indexed axis.
        pub axis: i64 = 0,
    }
}

op_attrs! {
    /// Attributes of `ScaledAddMatMulRhsGradInplace`: `w = a w + b (xᵀ @ g)`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct ScaledAddMatMulAttrs {
        /// Scale of the weight.
        pub a: f64,
        /// Scale of the gradient.
        pub b: f64,
    }
}

op_attrs! {
    /// Attributes of `ScaledAddInplace` and `ScaledAddMatMulRhsGradInplace`: `a x + b y` (absent: 1 or input 2, 3).
    #[derive(Clone, Debug, PartialEq)]
    pub struct ScaleAttrs {
        /// Scale of the updated tensor.
        pub a: Option<f64> = None,
        /// Scale of the update.
        pub b: Option<f64> = None,
    }
}

impl ScaleAttrs {
    /// The scales `(a, b)` of an op without scale inputs: an absent one is 1.
    pub fn constant_scales(&self) -> (f64, f64) {
        (self.a.unwrap_or(1.0), self.b.unwrap_or(1.0))
    }
}

op_types!(
    /// `t += x` (PopXL `add_`)
    AddInplace,
    /// `t = rule(t, x, f)` for the [`AccumulationType`] in attribute `type` (default
    /// `dampened_add`: `t += f * x`); `f` from attribute `factor` or optional input 2.
    /// PopXL's `accumulate_`, `accumulate_square_`, `accumulate_mean_`,
    /// `accumulate_moving_average_` and `accumulate_moving_average_square_`.
    Accumulate,
    /// `t *= f` (PopXL `accumulator_scale_`, `accumulator_zero_`); `f` from attribute
    /// `factor` or optional input 2. A constant factor of 0 writes zeros (also over
    /// NaN and infinities), for any dtype.
    AccumulatorScale,
    /// `t[.., indices[j], ..] += f * x[.., j, ..]` along attribute `axis` (PopXL
    /// `sparse_accumulate_`): inputs `(t, x[, f], indices[, W])` at 0, 1, 2, 3, 4;
    /// `x` has `t`'s shape with the `axis` dimension replaced by the indices' shape;
    /// repeated indices add up, negative ones count from the end, out-of-range ones
    /// add nothing. `W` (PopART's tile-layout reference) must have `t`'s shape.
    SparseAccumulate,
    /// `x = a * x + b * y` (PopXL `scaled_add_`); a, b from attributes or optional inputs 2, 3
    ScaledAddInplace,
    /// `t = x` (PopXL `copy_var_update_`)
    CopyVarUpdate,
    /// `w = a * w + b * (xᵀ @ g reduced to w's shape)` in place: inputs (g, x, w) as
    /// `MatMulRhsGrad(g, x, w)`, attributes `a`, `b`. Created by the
    /// `fuse_weight_update` pattern from a weight gradient and its `ScaledAddInplace`;
    /// users do not build it directly.
    ScaledAddMatMulRhsGradInplace,
);

crate::attr_enum! {
    /// PopART's `AccumulationType`: how [`Accumulate`] combines the accumulator `t`,
    /// the update `g` and the factor `f` (attribute `type`, in snake case).
    ///
    /// ```
    /// use popart_ir::ops::var_update::AccumulationType;
    /// assert_eq!(AccumulationType::MovingAverageSquare.name(), "moving_average_square");
    /// assert_eq!(AccumulationType::from_name("mean"), Some(AccumulationType::Mean));
    /// ```
    pub enum AccumulationType {
        /// `t += g` (no factor)
        Add = "add",
        /// `t += f * g` (`f` defaults to 1)
        DampenedAdd = "dampened_add",
        /// `t += f * g²` (`f` defaults to 1)
        DampenedAddSquare = "dampened_add_square",
        /// `t = f * t + g`
        DecayAdd = "decay_add",
        /// `t = f * t + g²`
        DecayAddSquare = "decay_add_square",
        /// `t = f * t + (1 - f) * g`
        MovingAverage = "moving_average",
        /// `t = f * t + (1 - f) * g²`
        MovingAverageSquare = "moving_average_square",
        /// `t = max(f * t, |g|)`
        Infinity = "infinity",
        /// `t = (f / (f + 1)) * t + (1 / (f + 1)) * g`, `f` the number of values accumulated so far
        Mean = "mean",
    }
}

impl AccumulationType {
    /// Every type, in PopART's order.
    pub const ALL: [AccumulationType; 9] = [
        Self::Add,
        Self::DampenedAdd,
        Self::DampenedAddSquare,
        Self::DecayAdd,
        Self::DecayAddSquare,
        Self::MovingAverage,
        Self::MovingAverageSquare,
        Self::Infinity,
        Self::Mean,
    ];

    /// Whether the factor defaults to 1 (else it is required).
    pub fn factor_defaults_to_one(self) -> bool {
        matches!(self, Self::DampenedAdd | Self::DampenedAddSquare)
    }
}

/// True if a float tensor of dtype `b` may update one of dtype `a` (or scale it):
/// the same float type, or float16 and float32 mixed (computed in float32).
pub(crate) fn float_compatible(a: DataType, b: DataType) -> bool {
    let half_or_single = |d| matches!(d, DataType::Float16 | DataType::Float32);
    a.is_floating_point() && b.is_floating_point() && (a == b || (half_or_single(a) && half_or_single(b)))
}

/// Checks an optional scalar operand at input `index` (one element): of `t`'s dtype
/// for integer `t`, of any float type for float `t`.
pub(crate) fn check_scalar(ctx: &InferContext<'_>, t: &TensorInfo, index: u32, what: &str) -> Result<bool> {
    let Some(s) = ctx.optional_input(index) else { return Ok(false) };
    let ok =
        s.nelms() == 1 && if t.dtype.is_floating_point() { s.dtype.is_floating_point() } else { s.dtype == t.dtype };
    if !ok {
        let want = if t.dtype.is_floating_point() { "floating point".to_string() } else { t.dtype.to_string() };
        return Err(ctx.error(format!("{what} (input {index}) must be a one-element {want} tensor, got {s}")));
    }
    Ok(true)
}

/// Checks input 1 (and optional scalar inputs) against the updated input 0; returns input 0's info.
fn infer_update(ctx: &InferContext<'_>, exact_shape: bool, scalar_inputs: &[u32]) -> Result<Vec<TensorInfo>> {
    let (t, x) = (ctx.input(0)?, ctx.input(1)?);
    if t.dtype != x.dtype {
        return Err(ctx.error(format!("updated tensor is {} but the update is {}", t.dtype, x.dtype)));
    }
    check_fits(ctx, t, x, exact_shape)?;
    for &i in scalar_inputs {
        if let Some(s) = ctx.optional_input(i) {
            if s.nelms() != 1 || s.dtype != t.dtype {
                return Err(ctx.error(format!("input {i} must be a {} scalar, got {s}", t.dtype)));
            }
        }
    }
    Ok(vec![t.clone()])
}

fn check_fits(ctx: &InferContext<'_>, t: &TensorInfo, x: &TensorInfo, exact_shape: bool) -> Result<()> {
    let ok =
        if exact_shape { t.shape == x.shape } else { broadcast_shapes(&t.shape, &x.shape).as_ref() == Some(&t.shape) };
    if !ok {
        return Err(ctx.error(format!("update of shape {:?} does not fit tensor of shape {:?}", x.shape, t.shape)));
    }
    Ok(())
}

macro_rules! update {
    ($($ty:ident => $name:literal, $schema:expr, $infer:expr;)*) => {$(
        impl OpDef for $ty {
            fn op_type(&self) -> &'static str { $name }
            fn attributes(&self) -> &'static [AttrSpec] { $schema }
            fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
                let infer: fn(&InferContext<'_>) -> Result<Vec<TensorInfo>> = $infer;
                infer(ctx)
            }
            fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> { vec![Alias::modified(0, 0)] }
        }
    )*};
}
update! {
    AddInplace => "AddInplace", &[], |ctx| infer_update(ctx, false, &[]);
    Accumulate => "Accumulate", AccumulateAttrs::SCHEMA, infer_accumulate;
    AccumulatorScale => "AccumulatorScale", AccumulatorScaleAttrs::SCHEMA, infer_accumulator_scale;
    SparseAccumulate => "SparseAccumulate", SparseAccumulateAttrs::SCHEMA, infer_sparse_accumulate;
    ScaledAddInplace => "ScaledAddInplace", ScaleAttrs::SCHEMA, |ctx| infer_update(ctx, false, &[2, 3]);
    CopyVarUpdate => "CopyVarUpdate", &[], |ctx| infer_update(ctx, true, &[]);
}

/// The factor of an update: attribute `factor` (value `factor`) or input 2 (not
/// both); required unless `default_one`.
fn check_factor(ctx: &InferContext<'_>, t: &TensorInfo, factor: Option<f64>, default_one: bool) -> Result<()> {
    let input = check_scalar(ctx, t, 2, "the factor")?;
    match (input, factor) {
        (true, Some(_)) => Err(ctx.error("the factor is given both as attribute `factor` and as input 2")),
        (false, None) if !default_one => Err(ctx.error("missing factor: attribute `factor` or input 2")),
        _ => Ok(()),
    }
}

fn infer_accumulate(ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
    let (t, x) = (ctx.input(0)?, ctx.input(1)?);
    let a = AccumulateAttrs::infer(ctx)?;
    let ty = a.kind();
    let plain = matches!(ty, AccumulationType::Add | AccumulationType::DampenedAdd);
    // Sums of equal types work for integers too; every other rule is float arithmetic.
    let same_numeric = plain && t.dtype == x.dtype && t.dtype != DataType::Bool;
    if !(same_numeric || float_compatible(t.dtype, x.dtype)) {
        return Err(ctx.error(format!(
            "cannot accumulate {} into {} with type {} (float types: equal, or float16 with float32)",
            x.dtype,
            t.dtype,
            ty.name()
        )));
    }
    check_fits(ctx, t, x, false)?;
    if ty == AccumulationType::Add {
        if ctx.optional_input(2).is_some() || a.factor.is_some() {
            return Err(ctx.error("accumulation type add takes no factor"));
        }
    } else {
        check_factor(ctx, t, a.factor, ty.factor_defaults_to_one())?;
    }
    Ok(vec![t.clone()])
}

fn infer_accumulator_scale(ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
    let t = ctx.input(0)?;
    let a = AccumulatorScaleAttrs::infer(ctx)?;
    check_factor(ctx, t, a.factor, false)?;
    let zeroing = ctx.optional_input(2).is_none() && a.factor == Some(0.0);
    if !zeroing && !t.dtype.is_floating_point() {
        return Err(ctx.error(format!("only a constant factor of 0 applies to a {} tensor", t.dtype)));
    }
    Ok(vec![t.clone()])
}

fn infer_sparse_accumulate(ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
    let (t, x, idx) = (ctx.input(0)?, ctx.input(1)?, ctx.input(3)?);
    if !float_compatible(t.dtype, x.dtype) {
        return Err(ctx.error(format!("cannot accumulate {} into {} (float types only)", x.dtype, t.dtype)));
    }
    if !idx.dtype.is_int() {
        return Err(ctx.error(format!("indices must be an integer tensor, got {}", idx.dtype)));
    }
    if t.rank() == 0 {
        return Err(ctx.error("cannot sparse-accumulate into a scalar"));
    }
    let a = SparseAccumulateAttrs::infer(ctx)?;
    let axis = normalize_axis(a.axis, t.rank()).map_err(super::infer_error(ctx))?;
    let mut want = t.shape[..axis].to_vec();
    want.extend_from_slice(&idx.shape);
    want.extend_from_slice(&t.shape[axis + 1..]);
    if x.shape != want {
        return Err(ctx.error(format!("update {x} should have shape {want:?} (indices {idx} along axis {axis})")));
    }
    check_factor(ctx, t, a.factor, true)?;
    if let Some(w) = ctx.optional_input(4) {
        if w.shape != t.shape {
            return Err(ctx.error(format!("reference weight {w} must have the shape of {t}")));
        }
    }
    Ok(vec![t.clone()])
}

/// Inputs `(g, x, w)` of an update by `MatMulRhsGrad(g, x, w)`: one float
/// dtype, `g` shaped as `x @ w`; the output is `w`.
pub(super) fn infer_rhs_grad_update(ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
    let (g, x, w) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    if g.dtype != w.dtype || x.dtype != w.dtype || !w.dtype.is_floating_point() {
        return Err(ctx.error(format!("operands must share a float dtype: g {g}, x {x}, w {w}")));
    }
    let y = super::matmul::matmul_shape(&x.shape, &w.shape).map_err(|m| ctx.error(m))?;
    if y != g.shape {
        return Err(ctx.error(format!("gradient {g} does not match {:?} @ {:?}", x.shape, w.shape)));
    }
    Ok(vec![w.clone()])
}

impl OpDef for ScaledAddMatMulRhsGradInplace {
    fn op_type(&self) -> &'static str {
        "ScaledAddMatMulRhsGradInplace"
    }
    /// The weight gradient's multiply-adds: `g`'s elements x `x`'s last dimension.
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.matrix(ctx.input_elements(0).saturating_mul(ctx.input_last_dim(1)))
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ScaledAddMatMulAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        ScaledAddMatMulAttrs::infer(ctx)?;
        infer_rhs_grad_update(ctx)
    }
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::modified(2, 0)]
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[
    &AddInplace,
    &Accumulate,
    &AccumulatorScale,
    &SparseAccumulate,
    &ScaledAddInplace,
    &CopyVarUpdate,
    &ScaledAddMatMulRhsGradInplace,
];
