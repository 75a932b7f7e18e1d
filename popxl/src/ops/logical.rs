//! Predicates and logical ops (bool output): `isnan`, `isinf`, `isfinite` (float
//! input; another dtype is an error, as PopART's kernels take floats only) and
//! `logical_not`, `logical_and`, `logical_or`, which cast non-bool inputs to bool
//! first, as PopXL does (`x != 0`).

use popart_ir::ops::all as ir_ops;
use popart_ir::DataType;

use super::elementwise::cast;
use super::OpBuilder;
use crate::{Result, Tensor};

macro_rules! predicate {
    ($($(#[$doc:meta])* $fn:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        pub fn $fn(t: &Tensor) -> Result<Tensor> {
            OpBuilder::new(stringify!($fn), &ir_ops::$op).input(0, t).create1()
        }
    )*};
}

predicate! {
    /// True where an element is NaN (op `IsNan`; float input).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::constant(vec![f32::NAN, 1.0], "x").unwrap();
    /// assert_eq!(popxl::ops::isnan(&x).unwrap().dtype(), popxl::bool);
    /// assert!(popxl::ops::isnan(&popxl::constant(1i32, "i").unwrap()).is_err());
    /// ```
    isnan => IsNan;
    /// True where an element is infinite (op `IsInf`; float input).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::constant(vec![f32::INFINITY, 1.0], "x").unwrap();
    /// assert_eq!(popxl::ops::isinf(&x).unwrap().dtype(), popxl::bool);
    /// ```
    isinf => IsInf;
    /// True where an element is neither NaN nor infinite (op `IsFinite`; float input).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let x = popxl::constant(vec![f64::NAN, 1.0], "x").unwrap();
    /// assert_eq!(popxl::ops::isfinite(&x).unwrap().shape(), &[2]);
    /// ```
    isfinite => IsFinite;
}

/// `t` itself if bool, else `cast(t, bool)` (PopXL's `cast_if_needed`).
pub(crate) fn as_bool(t: &Tensor) -> Result<Tensor> {
    if t.dtype() == DataType::Bool {
        Ok(t.clone())
    } else {
        cast(t, DataType::Bool)
    }
}

/// Elementwise `not` (op `LogicalNot`); a non-bool input is cast to bool first.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(vec![0.0f32, 2.0], "x").unwrap();
/// assert_eq!(popxl::ops::logical_not(&x).unwrap().dtype(), popxl::bool);
/// ```
pub fn logical_not(t: &Tensor) -> Result<Tensor> {
    let t = as_bool(t)?;
    OpBuilder::new("logical_not", &ir_ops::LogicalNot).input(0, &t).create1()
}

/// Elementwise `and` with numpy broadcasting (op `LogicalAnd`); non-bool operands
/// are cast to bool first.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(vec![true, false], "a").unwrap();
/// let b = popxl::constant(1.5f32, "b").unwrap();
/// assert_eq!(popxl::ops::logical_and(&a, &b).unwrap().shape(), &[2]);
/// ```
pub fn logical_and(lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
    let (a, b) = (as_bool(lhs)?, as_bool(rhs)?);
    OpBuilder::new("logical_and", &ir_ops::LogicalAnd).input(0, &a).input(1, &b).create1()
}

/// Elementwise `or` with numpy broadcasting (op `LogicalOr`); non-bool operands
/// are cast to bool first.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(vec![true, false], "a").unwrap();
/// assert_eq!(popxl::ops::logical_or(&a, &a).unwrap().dtype(), popxl::bool);
/// ```
pub fn logical_or(lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
    let (a, b) = (as_bool(lhs)?, as_bool(rhs)?);
    OpBuilder::new("logical_or", &ir_ops::LogicalOr).input(0, &a).input(1, &b).create1()
}
