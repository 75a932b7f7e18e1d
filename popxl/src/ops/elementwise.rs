//! Elementwise ops: unary (`Neg`...`Cast`, `clip`, `increment_mod`), their
//! in-place variants (`exp_`...), binary with numpy broadcasting (`add`...`fmod`),
//! the n-ary `maximum`/`minimum` and `scaled_add`.

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::unary::{CastAttrs, ClipAttrs, IncrementModAttrs};
use popart_ir::ops::var_update::ScaleAttrs;
use popart_ir::DataType;

use super::OpBuilder;
use crate::{Result, Tensor};

macro_rules! unary {
    ($($(#[$doc:meta])* $fn:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        pub fn $fn(t: &Tensor) -> Result<Tensor> {
            OpBuilder::new(stringify!($fn), &ir_ops::$op).input(0, t).create1()
        }
    )*};
}

unary! {
    /// `-t` (op `Neg`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::constant(1.0f32, "x").unwrap();
    /// assert_eq!(popxl::ops::negate(&x).unwrap().name(), "Neg:0");
    /// ```
    negate => Neg;
    /// `|t|` (op `Abs`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::constant(-1i32, "x").unwrap();
    /// assert_eq!(popxl::ops::abs(&x).unwrap().dtype(), popxl::int32);
    /// ```
    abs => Abs;
    /// `e^t` (op `Exp`, floating point only).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::exp(&popxl::constant(1.0f32, "x").unwrap()).is_ok());
    /// assert!(popxl::ops::exp(&popxl::constant(1i32, "i").unwrap()).is_err());
    /// ```
    exp => Exp;
    /// Natural logarithm (op `Log`, floating point only).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::log(&popxl::constant(1.0f32, "x").unwrap()).is_ok());
    /// ```
    log => Log;
    /// `ln(1 + t)`, accurate where `t` is tiny (op `Log1p`, floating point only; not in
    /// PopXL, useful for numerically stable losses).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::log1p(&popxl::constant(1e-9f32, "x").unwrap()).is_ok());
    /// assert!(popxl::ops::log1p(&popxl::constant(1i32, "i").unwrap()).is_err());
    /// ```
    log1p => Log1p;
    /// Base-2 logarithm (op `Log2`, floating point only; PopXL `log2`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::log2(&popxl::constant(8.0f32, "x").unwrap()).is_ok());
    /// assert!(popxl::ops::log2(&popxl::constant(8i32, "i").unwrap()).is_err());
    /// ```
    log2 => Log2;
    /// Square root (op `Sqrt`, floating point only).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::sqrt(&popxl::constant(4.0f32, "x").unwrap()).is_ok());
    /// ```
    sqrt => Sqrt;
    /// `max(t, 0)` (op `Relu`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::relu(&popxl::constant(-1.0f32, "x").unwrap()).is_ok());
    /// ```
    relu => Relu;
    /// GELU, tanh approximation as PopXL's `gelu` (op `Gelu`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::gelu(&popxl::constant(1.0f32, "x").unwrap()).is_ok());
    /// ```
    gelu => Gelu;
    /// GELU with the exact error function, `t Φ(t)` (op `GeluErf`, floating point
    /// only; PopXL `geluerf`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::geluerf(&popxl::constant(1.0f32, "x").unwrap()).is_ok());
    /// ```
    geluerf => GeluErf;
    /// Swish, `t · sigmoid(t)` (op `Swish`, floating point only).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::swish(&popxl::constant(1.0f32, "x").unwrap()).is_ok());
    /// ```
    swish => Swish;
    /// Hyperbolic tangent (op `Tanh`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::tanh(&popxl::constant(1.0f32, "x").unwrap()).is_ok());
    /// ```
    tanh => Tanh;
    /// Logistic sigmoid (op `Sigmoid`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::sigmoid(&popxl::constant(1.0f32, "x").unwrap()).is_ok());
    /// ```
    sigmoid => Sigmoid;
    /// Sine (op `Sin`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::sin(&popxl::constant(1.0f32, "x").unwrap()).is_ok());
    /// ```
    sin => Sin;
    /// Cosine (op `Cos`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::cos(&popxl::constant(1.0f32, "x").unwrap()).is_ok());
    /// ```
    cos => Cos;
    /// Sign: -1, 0 or 1 (op `Sign`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::sign(&popxl::constant(-3.0f32, "x").unwrap()).is_ok());
    /// ```
    sign => Sign;
    /// Round down (op `Floor`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::floor(&popxl::constant(1.5f32, "x").unwrap()).is_ok());
    /// ```
    floor => Floor;
    /// Round up (op `Ceil`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::ceil(&popxl::constant(1.5f32, "x").unwrap()).is_ok());
    /// ```
    ceil => Ceil;
    /// Identity that stops gradients (op `Detach`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// assert!(popxl::ops::detach(&popxl::constant(1.5f32, "x").unwrap()).is_ok());
    /// ```
    detach => Detach;
}

macro_rules! unary_inplace {
    ($($(#[$doc:meta])* $fn:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        pub fn $fn(t: &Tensor) -> Result<Tensor> {
            OpBuilder::new(stringify!($fn), &ir_ops::$op).input(0, t).create1()
        }
    )*};
}

unary_inplace! {
    /// `exp` in place: `t` is overwritten and returned aliased (op `ExpInplace`;
    /// no gradient).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let w = popxl::variable(vec![0.0f32, 1.0], "w").unwrap();
    /// assert_eq!(popxl::ops::exp_(&w).unwrap().shape(), &[2]);
    /// ```
    exp_ => ExpInplace;
    /// `relu` in place (op `ReluInplace`; no gradient).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let w = popxl::variable(vec![-1.0f32, 1.0], "w").unwrap();
    /// assert!(popxl::ops::relu_(&w).is_ok());
    /// // A constant cannot be written in place.
    /// assert!(popxl::ops::relu_(&popxl::constant(1.0f32, "c").unwrap()).is_err());
    /// ```
    relu_ => ReluInplace;
    /// `gelu` in place (op `GeluInplace`; no gradient).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let w = popxl::variable(vec![-1.0f32, 1.0], "w").unwrap();
    /// assert!(popxl::ops::gelu_(&w).is_ok());
    /// ```
    gelu_ => GeluInplace;
    /// `geluerf` in place (op `GeluErfInplace`; no gradient).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let w = popxl::variable(vec![-1.0f32, 1.0], "w").unwrap();
    /// assert!(popxl::ops::geluerf_(&w).is_ok());
    /// ```
    geluerf_ => GeluErfInplace;
    /// `swish` in place (op `SwishInplace`; no gradient).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let w = popxl::variable(vec![-1.0f32, 1.0], "w").unwrap();
    /// assert!(popxl::ops::swish_(&w).is_ok());
    /// ```
    swish_ => SwishInplace;
    /// `detach` without a copy: the result aliases `t` and stops gradients (op
    /// `DetachInplace`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::constant(vec![1.0f32], "x").unwrap();
    /// assert!(popxl::ops::detach_(&x).is_ok());
    /// ```
    detach_ => DetachInplace;
}

/// Clamp every element of `t` into `[min, max]`; `None` leaves that side open
/// (PopXL's `clip(t, min=-inf, max=inf)`, op `Clip`). NaN propagates. The gradient
/// passes where the output is strictly between the bounds (PopART's `ClipGrad`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(vec![-2.0f32, 0.5, 3.0], "x").unwrap();
/// assert!(popxl::ops::clip(&x, Some(-1.0), Some(1.0)).is_ok());
/// assert!(popxl::ops::clip(&x, None, Some(0.0)).is_ok());
/// assert!(popxl::ops::clip(&x, Some(1.0), Some(0.0)).is_err());
/// ```
pub fn clip(t: &Tensor, min: Option<f64>, max: Option<f64>) -> Result<Tensor> {
    OpBuilder::new("clip", &ir_ops::Clip).input(0, t).typed(&ClipAttrs { min, max }).create1()
}

/// PopXL's alias of [`clip`].
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(vec![-2i32, 5], "x").unwrap();
/// assert!(popxl::ops::clamp(&x, Some(0.0), None).is_ok());
/// ```
pub fn clamp(t: &Tensor, min: Option<f64>, max: Option<f64>) -> Result<Tensor> {
    clip(t, min, max)
}

fn increment_mod_op(
    what: &'static str,
    def: &'static dyn popart_ir::OpDef,
    t: &Tensor,
    inc: f64,
    m: f64,
) -> Result<Tensor> {
    OpBuilder::new(what, def).input(0, t).typed(&IncrementModAttrs { increment: inc, modulus: m }).create1()
}

/// `(t + increment) % modulus` (op `IncrementMod`; no gradient). `increment` and
/// `modulus` are converted to `t`'s dtype (integers truncate); the remainder has
/// the sign of `t + increment` (C `fmod`). A modulus that is zero in `t`'s dtype
/// is an error.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let step = popxl::constant(vec![0i32, 3], "step").unwrap();
/// assert!(popxl::ops::increment_mod(&step, 1.0, 4.0).is_ok());
/// assert!(popxl::ops::increment_mod(&step, 1.0, 0.5).is_err());
/// ```
pub fn increment_mod(t: &Tensor, increment: f64, modulus: f64) -> Result<Tensor> {
    increment_mod_op("increment_mod", &ir_ops::IncrementMod, t, increment, modulus)
}

/// [`increment_mod`] in place (op `IncrementModInplace`): the usual step counter.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let step = popxl::variable(0i32, "step").unwrap();
/// assert!(popxl::ops::increment_mod_(&step, 1.0, 10.0).is_ok());
/// ```
pub fn increment_mod_(t: &Tensor, increment: f64, modulus: f64) -> Result<Tensor> {
    increment_mod_op("increment_mod_", &ir_ops::IncrementModInplace, t, increment, modulus)
}

/// A copy of `t` named `name` (op `Identity`; PopXL's `identity(t, output_name)`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(1.0f32, "x").unwrap();
/// assert_eq!(popxl::ops::identity(&x, "y").unwrap().name(), "y");
/// ```
pub fn identity(t: &Tensor, name: &str) -> Result<Tensor> {
    OpBuilder::new("identity", &ir_ops::Identity).input(0, t).output_name(name).create1()
}

/// `t` converted to `dtype` (op `Cast`, attribute `to`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(1.5f32, "x").unwrap();
/// assert_eq!(popxl::ops::cast(&x, popxl::int32).unwrap().dtype(), popxl::int32);
/// ```
pub fn cast(t: &Tensor, dtype: DataType) -> Result<Tensor> {
    OpBuilder::new("cast", &ir_ops::Cast).input(0, t).typed(&CastAttrs { to: dtype }).create1()
}

macro_rules! binary {
    ($($(#[$doc:meta])* $fn:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        pub fn $fn(lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
            OpBuilder::new(stringify!($fn), &ir_ops::$op).input(0, lhs).input(1, rhs).create1()
        }
    )*};
}

binary! {
    /// `lhs + rhs` with numpy broadcasting; equal dtypes (op `Add`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// let b = popxl::constant(vec![1.0f32, 2.0, 3.0], "b").unwrap();
    /// assert_eq!(popxl::ops::add(&a, &b).unwrap().shape(), &[2, 3]);
    /// let i = popxl::constant(1i32, "i").unwrap();
    /// assert!(popxl::ops::add(&a, &i).is_err());
    /// ```
    add => Add;
    /// `lhs - rhs` (op `Sub`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(1.0f32, "a").unwrap();
    /// assert!(popxl::ops::sub(&a, &a).is_ok());
    /// ```
    sub => Sub;
    /// `lhs * rhs` (op `Mul`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(1.0f32, "a").unwrap();
    /// assert!(popxl::ops::mul(&a, &a).is_ok());
    /// ```
    mul => Mul;
    /// `lhs / rhs` (op `Div`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(1.0f32, "a").unwrap();
    /// assert!(popxl::ops::div(&a, &a).is_ok());
    /// ```
    div => Div;
    /// `lhs ^ rhs` (op `Pow`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(2.0f32, "a").unwrap();
    /// assert!(popxl::ops::pow(&a, &a).is_ok());
    /// ```
    pow => Pow;
    /// Remainder of the truncated division, with the sign of `lhs` (C `fmod`;
    /// op `Fmod`, integers too). Gradient: `g` for `lhs`, none for `rhs`.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(vec![-7.0f32, 7.0], "a").unwrap();
    /// let b = popxl::constant(3.0f32, "b").unwrap();
    /// assert_eq!(popxl::ops::fmod(&a, &b).unwrap().shape(), &[2]);
    /// ```
    fmod => Fmod;
    /// `lhs > rhs`, bool output (op `Greater`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(2.0f32, "a").unwrap();
    /// assert_eq!(popxl::ops::greater(&a, &a).unwrap().dtype(), popxl::bool);
    /// ```
    greater => Greater;
    /// `lhs < rhs`, bool output (op `Less`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(2.0f32, "a").unwrap();
    /// assert_eq!(popxl::ops::less(&a, &a).unwrap().dtype(), popxl::bool);
    /// ```
    less => Less;
    /// `lhs == rhs`, bool output (op `Equal`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(2.0f32, "a").unwrap();
    /// assert_eq!(popxl::ops::equal(&a, &a).unwrap().dtype(), popxl::bool);
    /// ```
    equal => Equal;
}

fn extremum(what: &'static str, def: &'static dyn popart_ir::OpDef, ts: &[&Tensor]) -> Result<Tensor> {
    let mut b = OpBuilder::new(what, def);
    for (i, t) in ts.iter().enumerate() {
        b = b.input(super::input_index(i, what)?, t);
    }
    b.create1()
}

/// Elementwise maximum of one or more tensors, all broadcast together (op
/// `Maximum`; PopXL's `maximum(*ts)`). Equal dtypes. The gradient goes to every
/// input equal to the output (ties included, as PopART).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(vec![1.0f32, 5.0], "a").unwrap();
/// let b = popxl::constant(2.0f32, "b").unwrap();
/// let c = popxl::constant(ndarray::arr2(&[[0.0f32], [9.0]]), "c").unwrap();
/// assert_eq!(popxl::ops::maximum(&[&a, &b, &c]).unwrap().shape(), &[2, 2]);
/// assert!(popxl::ops::maximum(&[]).is_err());
/// ```
pub fn maximum(ts: &[&Tensor]) -> Result<Tensor> {
    extremum("maximum", &ir_ops::Maximum, ts)
}

/// Elementwise minimum of one or more tensors (op `Minimum`; PopXL's `minimum(*ts)`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(2.0f32, "a").unwrap();
/// assert!(popxl::ops::minimum(&[&a, &a]).is_ok());
/// ```
pub fn minimum(ts: &[&Tensor]) -> Result<Tensor> {
    extremum("minimum", &ir_ops::Minimum, ts)
}

/// `a * x + b * y`, `y` broadcast to `x`'s shape, equal dtypes (op `ScaledAdd`;
/// PopXL's `scaled_add`, out of place; no gradient). `a`, `b`: constants or scalar
/// tensors of `x`'s dtype.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(vec![1.0f32, 2.0], "x").unwrap();
/// let y = popxl::constant(vec![3.0f32, 4.0], "y").unwrap();
/// let s = popxl::constant(0.5f32, "s").unwrap();
/// assert!(popxl::ops::scaled_add(&x, &y, 2.0, &s).is_ok());
/// ```
pub fn scaled_add<'a>(
    x: &'a Tensor,
    y: &'a Tensor,
    a: impl Into<super::Scalar<'a>>,
    b: impl Into<super::Scalar<'a>>,
) -> Result<Tensor> {
    scaled_add_op("scaled_add", &ir_ops::ScaledAdd, x, y, a.into(), b.into())
}

/// `a * x + b * y` as op `def` (`ScaledAdd` or `ScaledAddInplace`): constant
/// coefficients go in the attributes, tensor ones in inputs 2 and 3.
pub(super) fn scaled_add_op<'a>(
    what: &'static str,
    def: &'static dyn popart_ir::OpDef,
    x: &'a Tensor,
    y: &'a Tensor,
    a: super::Scalar<'a>,
    b: super::Scalar<'a>,
) -> Result<Tensor> {
    OpBuilder::new(what, def)
        .input(0, x)
        .input(1, y)
        .scalar_input(2, &a)
        .scalar_input(3, &b)
        .typed(&ScaleAttrs { a: a.constant(), b: b.constant() })
        .create1()
}

/// PopXL's `where(condition, lhs, rhs)`: `lhs` where `condition` is true, else
/// `rhs`, with three-way broadcasting (op `Where`). A condition that is not
/// bool is cast to bool first (non-zero is true), as PopXL's `cast_if_needed`.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let c = popxl::constant(vec![true, false], "c").unwrap();
/// let a = popxl::constant(vec![1.0f32, 2.0], "a").unwrap();
/// let b = popxl::constant(0.0f32, "b").unwrap();
/// assert_eq!(popxl::ops::select(&c, &a, &b).unwrap().shape(), &[2]);
/// ```
#[doc(alias = "where")]
pub fn select(condition: &Tensor, lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
    let condition = super::logical::as_bool(condition)?;
    OpBuilder::new("where", &ir_ops::Where).input(0, &condition).input(1, lhs).input(2, rhs).create1()
}
