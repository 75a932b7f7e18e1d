//! In-place updates (PopXL's `var_updates`): output 0 aliases input 0, which is
//! modified; each function returns the updated tensor.

use popart_ir::ops::all as ir_ops;
use popart_ir::AttrValue;

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

impl<'a> OpBuilder<'a> {
    /// Set a scalar as attribute `key` or connect it at input `index`.
    fn scalar(self, key: &str, index: u32, s: Scalar<'a>) -> Self {
        match s {
            Scalar::Const(v) => self.attr(key, AttrValue::Float(v)),
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
pub fn accumulate_<'a>(t: &'a Tensor, x: &'a Tensor, f: impl Into<Scalar<'a>>) -> Result<Tensor> {
    OpBuilder::new("accumulate_", &ir_ops::Accumulate).input(0, t).input(1, x).scalar("factor", 2, f.into()).create1()
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
    OpBuilder::new("scaled_add_", &ir_ops::ScaledAddInplace)
        .input(0, x)
        .input(1, y)
        .scalar("a", 2, a.into())
        .scalar("b", 3, b.into())
        .create1()
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
