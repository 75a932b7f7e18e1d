//! Elementwise ops: unary (`Neg`...`Cast`) and binary with numpy broadcasting.

use popart_ir::ops::all as ir_ops;
use popart_ir::{AttrValue, DataType};

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
    OpBuilder::new("cast", &ir_ops::Cast).input(0, t).attr("to", AttrValue::DType(dtype)).create1()
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
    /// Elementwise maximum (op `Maximum`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(2.0f32, "a").unwrap();
    /// assert!(popxl::ops::maximum(&a, &a).is_ok());
    /// ```
    maximum => Maximum;
    /// Elementwise minimum (op `Minimum`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(2.0f32, "a").unwrap();
    /// assert!(popxl::ops::minimum(&a, &a).is_ok());
    /// ```
    minimum => Minimum;
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

/// PopXL's `where(condition, lhs, rhs)`: `lhs` where `condition` is true, else
/// `rhs`, with three-way broadcasting (op `Where`).
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
    OpBuilder::new("where", &ir_ops::Where).input(0, condition).input(1, lhs).input(2, rhs).create1()
}
