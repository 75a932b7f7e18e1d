//! In-place updates (PopXL's `var_updates`): output 0 aliases input 0, which is
//! modified; each function returns the updated tensor. The Adam family is in
//! `optimizer.rs`.
//!
//! A float accumulator may take an update (and a factor tensor) of another float
//! type: float16 with float32 is computed in float32, as PopART's mixed-precision
//! updates are. Unlike PopXL, updates broadcast to the accumulator's shape.

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::var_update::{AccumulateAttrs, AccumulationType, AccumulatorScaleAttrs, SparseAccumulateAttrs};
use popart_ir::DataType;

use super::OpBuilder;
use crate::{Result, Tensor};

/// A scalar operand of an update: a constant (an attribute) or a scalar tensor
/// of the updated tensor's type (an extra input).
///
/// ```
/// use popxl::ops::Scalar;
/// assert_eq!(Scalar::from(0.5f32), Scalar::Const(0.5));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar<'a> {
    /// A constant factor.
    Const(f64),
    /// A scalar tensor.
    Tensor(&'a Tensor),
}

impl From<f64> for Scalar<'_> {
    fn from(v: f64) -> Self {
        Scalar::Const(v)
    }
}

impl From<f32> for Scalar<'_> {
    fn from(v: f32) -> Self {
        Scalar::Const(f64::from(v))
    }
}

impl<'a> From<&'a Tensor> for Scalar<'a> {
    fn from(t: &'a Tensor) -> Self {
        Scalar::Tensor(t)
    }
}

impl Scalar<'_> {
    /// The constant, for the op's attribute (`None` for a tensor, connected as
    /// an input with [`OpBuilder::scalar_input`]).
    pub(super) fn constant(&self) -> Option<f64> {
        match self {
            Scalar::Const(v) => Some(*v),
            Scalar::Tensor(_) => None,
        }
    }
}

impl<'a> OpBuilder<'a> {
    /// Connect a tensor scalar at input `index` (a constant is an attribute of
    /// the op's typed attributes, see [`Scalar::constant`]).
    pub(super) fn scalar_input(self, index: u32, s: &Scalar<'a>) -> Self {
        match s {
            Scalar::Const(_) => self,
            Scalar::Tensor(t) => self.input(index, t),
        }
    }
}

/// `t += x` in place, `x` broadcast to `t` (op `AddInplace`; PopXL's `add_` / `+=`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let w = popxl::variable(vec![1.0f32, 2.0], "w").unwrap();
/// let one = popxl::constant(1.0f32, "one").unwrap();
/// let w2 = popxl::ops::add_(&w, &one).unwrap();
/// assert_eq!(w2.spec(), w.spec());
/// ```
pub fn add_(t: &Tensor, x: &Tensor) -> Result<Tensor> {
    OpBuilder::new("add_", &ir_ops::AddInplace).input(0, t).input(1, x).create1()
}

/// `t += f * x` in place (op `Accumulate`; PopXL's `accumulate_`); `f` is a
/// constant (attribute `factor`) or a scalar tensor (input 2).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let acc = popxl::variable(vec![0.0f32, 0.0], "acc").unwrap();
/// let g = popxl::constant(vec![1.0f32, 2.0], "g").unwrap();
/// popxl::ops::accumulate_(&acc, &g, 0.5).unwrap();
/// let f = popxl::constant(0.1f32, "f").unwrap();
/// popxl::ops::accumulate_(&acc, &g, &f).unwrap();
/// ```
///
/// `x` has `t`'s shape (or broadcasts to it) and may have another data type:
/// it is cast to `t`'s first (a float32 accumulator takes an int32 `x`), as
/// PopART's `AccumulateOpx` does; float16 and float32 mix without a cast.
pub fn accumulate_<'a>(t: &'a Tensor, x: &'a Tensor, f: impl Into<Scalar<'a>>) -> Result<Tensor> {
    let x = cast_to_accumulator(t, x)?;
    let f = f.into();
    OpBuilder::new("accumulate_", &ir_ops::Accumulate)
        .input(0, t)
        .input(1, &x)
        .scalar_input(2, &f)
        .typed(&AccumulateAttrs { kind: None, factor: f.constant() })
        .create1()
}

/// `x` itself when `Accumulate` takes it into `t` as it is (the same type, or
/// float16 with float32), else `x` cast to `t`'s type.
fn cast_to_accumulator(t: &Tensor, x: &Tensor) -> Result<Tensor> {
    let half_or_single = |d| matches!(d, DataType::Float16 | DataType::Float32);
    if x.dtype() == t.dtype() || (half_or_single(x.dtype()) && half_or_single(t.dtype())) {
        Ok(x.clone())
    } else {
        super::cast(x, t.dtype())
    }
}

/// `Accumulate{type}(t, x[, f])`.
fn accumulate_typed<'a>(
    what: &'static str,
    ty: AccumulationType,
    t: &'a Tensor,
    x: &'a Tensor,
    f: Scalar<'a>,
) -> Result<Tensor> {
    let x = cast_to_accumulator(t, x)?;
    OpBuilder::new(what, &ir_ops::Accumulate)
        .input(0, t)
        .input(1, &x)
        .scalar_input(2, &f)
        .typed(&AccumulateAttrs { kind: Some(ty), factor: f.constant() })
        .create1()
}

/// `t += f * x²` in place (op `Accumulate`, type `dampened_add_square`; PopXL's
/// `accumulate_square_`, whose `f` defaults to 1).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let acc = popxl::variable(vec![0.0f32; 2], "acc").unwrap();
/// let g = popxl::constant(vec![1.0f32, 2.0], "g").unwrap();
/// popxl::ops::accumulate_square_(&acc, &g, 1.0).unwrap();
/// ```
pub fn accumulate_square_<'a>(t: &'a Tensor, x: &'a Tensor, f: impl Into<Scalar<'a>>) -> Result<Tensor> {
    accumulate_typed("accumulate_square_", AccumulationType::DampenedAddSquare, t, x, f.into())
}

/// `t = (step / (step + 1)) * t + (1 / (step + 1)) * x` in place: the running mean
/// of the values accumulated, `step` being how many came before (op `Accumulate`,
/// type `mean`; PopXL's `accumulate_mean_`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let mean = popxl::variable(0.0f32, "mean").unwrap();
/// let a = popxl::constant(1.0f32, "a").unwrap();
/// let b = popxl::constant(2.0f32, "b").unwrap();
/// popxl::ops::accumulate_mean_(&mean, &a, 0.0).unwrap();
/// popxl::ops::accumulate_mean_(&mean, &b, 1.0).unwrap(); // mean = 1.5
/// ```
pub fn accumulate_mean_<'a>(t: &'a Tensor, x: &'a Tensor, step: impl Into<Scalar<'a>>) -> Result<Tensor> {
    accumulate_typed("accumulate_mean_", AccumulationType::Mean, t, x, step.into())
}

/// `t = f * t + (1 - f) * x` in place (op `Accumulate`, type `moving_average`;
/// PopXL's `accumulate_moving_average_`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let m = popxl::variable(vec![0.0f32; 2], "m").unwrap();
/// let g = popxl::constant(vec![1.0f32, 2.0], "g").unwrap();
/// popxl::ops::accumulate_moving_average_(&m, &g, 0.9).unwrap();
/// ```
pub fn accumulate_moving_average_<'a>(t: &'a Tensor, x: &'a Tensor, f: impl Into<Scalar<'a>>) -> Result<Tensor> {
    accumulate_typed("accumulate_moving_average_", AccumulationType::MovingAverage, t, x, f.into())
}

/// `t = f * t + (1 - f) * x²` in place (op `Accumulate`, type
/// `moving_average_square`; PopXL's `accumulate_moving_average_square_`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let v = popxl::variable(vec![0.0f32; 2], "v").unwrap();
/// let g = popxl::constant(vec![1.0f32, 2.0], "g").unwrap();
/// popxl::ops::accumulate_moving_average_square_(&v, &g, 0.999).unwrap();
/// ```
pub fn accumulate_moving_average_square_<'a>(t: &'a Tensor, x: &'a Tensor, f: impl Into<Scalar<'a>>) -> Result<Tensor> {
    accumulate_typed("accumulate_moving_average_square_", AccumulationType::MovingAverageSquare, t, x, f.into())
}

/// `t *= f` in place (op `AccumulatorScale`; PopXL's `accumulator_scale_`). A
/// constant `f` of 0 writes zeros, whatever `t` held (NaN included).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let acc = popxl::variable(vec![1.0f32, 2.0], "acc").unwrap();
/// popxl::ops::accumulator_scale_(&acc, 0.5).unwrap();
/// ```
pub fn accumulator_scale_<'a>(t: &'a Tensor, f: impl Into<Scalar<'a>>) -> Result<Tensor> {
    let f = f.into();
    OpBuilder::new("accumulator_scale_", &ir_ops::AccumulatorScale)
        .input(0, t)
        .scalar_input(2, &f)
        .typed(&AccumulatorScaleAttrs { factor: f.constant() })
        .create1()
}

/// Zero `t` in place (`accumulator_scale_(t, 0.0)`; PopXL's `accumulator_zero_`);
/// any dtype.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let acc = popxl::variable(vec![1.0f32, 2.0], "acc").unwrap();
/// let z = popxl::ops::accumulator_zero_(&acc).unwrap();
/// assert_eq!(z.shape(), &[2]);
/// ```
pub fn accumulator_zero_(t: &Tensor) -> Result<Tensor> {
    OpBuilder::new("accumulator_zero_", &ir_ops::AccumulatorScale)
        .input(0, t)
        .typed(&AccumulatorScaleAttrs { factor: Some(0.0) })
        .create1()
}

/// Keyword arguments of [`sparse_accumulate_`] (PopXL's defaults).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseAccumulateOptions<'a> {
    /// The axis of `t` the indices select along (negative counts from the end).
    pub axis: i64,
    /// Factor applied to the update (`None`: 1).
    pub f: Option<Scalar<'a>>,
    /// PopXL's `W`: the weight whose tile layout `t` copies on the IPU; only its
    /// shape (that of `t`) is checked here.
    pub w: Option<&'a Tensor>,
}

/// `t[.., indices[j], ..] += f * x[.., j, ..]` along `axis` in place, the
/// scatter-add of a `gather` gradient without materialising it (op
/// `SparseAccumulate`; PopXL's `sparse_accumulate_`). `x` has `t`'s shape with the
/// `axis` dimension replaced by the indices' shape; repeated indices add up,
/// negative ones count from the end, out-of-range ones add nothing (an error with
/// `SessionOptions::check_indices`).
///
/// ```
/// use popxl::ops::{self, SparseAccumulateOptions};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let acc = popxl::variable(ndarray::Array2::<f32>::zeros((3, 2)), "acc").unwrap();
/// let rows = popxl::constant(ndarray::Array2::<f32>::ones((4, 2)), "rows").unwrap();
/// let idx = popxl::constant(vec![0i32, 2, 2, 1], "idx").unwrap();
/// let opts = SparseAccumulateOptions { f: Some(0.5.into()), ..Default::default() };
/// ops::sparse_accumulate_(&acc, &rows, &idx, opts).unwrap();
/// ```
pub fn sparse_accumulate_<'a>(
    t: &'a Tensor,
    x: &'a Tensor,
    indices: &'a Tensor,
    options: SparseAccumulateOptions<'a>,
) -> Result<Tensor> {
    let mut b = OpBuilder::new("sparse_accumulate_", &ir_ops::SparseAccumulate)
        .input(0, t)
        .input(1, x)
        .input(3, indices)
        .typed(&SparseAccumulateAttrs { factor: options.f.as_ref().and_then(Scalar::constant), axis: options.axis });
    if let Some(f) = &options.f {
        b = b.scalar_input(2, f);
    }
    if let Some(w) = options.w {
        b = b.input(4, w);
    }
    b.create1()
}

/// `x = a * x + b * y` in place (op `ScaledAddInplace`; PopXL's `scaled_add_`);
/// `a` and `b` are constants (attributes) or scalar tensors (inputs 2 and 3).
/// Plain SGD is `scaled_add_(&w, &grad, 1.0, -lr)`.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let w = popxl::variable(vec![1.0f32, 2.0], "w").unwrap();
/// let g = popxl::constant(vec![0.1f32, 0.2], "g").unwrap();
/// let w2 = popxl::ops::scaled_add_(&w, &g, 1.0, -0.01).unwrap();
/// assert_eq!(w2.shape(), &[2]);
/// ```
pub fn scaled_add_<'a>(
    x: &'a Tensor,
    y: &'a Tensor,
    a: impl Into<Scalar<'a>>,
    b: impl Into<Scalar<'a>>,
) -> Result<Tensor> {
    super::elementwise::scaled_add_op("scaled_add_", &ir_ops::ScaledAddInplace, x, y, a.into(), b.into())
}

/// `t = x` in place; shapes must be equal (op `CopyVarUpdate`; PopXL's `copy_var_update_`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let w = popxl::variable(vec![1.0f32, 2.0], "w").unwrap();
/// let v = popxl::constant(vec![3.0f32, 4.0], "v").unwrap();
/// assert!(popxl::ops::copy_var_update_(&w, &v).is_ok());
/// ```
pub fn copy_var_update_(t: &Tensor, x: &Tensor) -> Result<Tensor> {
    OpBuilder::new("copy_var_update_", &ir_ops::CopyVarUpdate).input(0, t).input(1, x).create1()
}
