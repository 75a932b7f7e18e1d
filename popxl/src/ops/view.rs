//! In-place views (PopXL's `reshape_`, `flatten_`, `transpose_`, `slice_`,
//! `concat_`): the result aliases its input, so an in-place op on either is
//! seen through the other, in program order.
//!
//! ```
//! use popxl::ops;
//! let ir = popxl::Ir::new();
//! let _g = ir.main_graph().enter();
//! let x = popxl::variable(ndarray::Array2::<f32>::zeros((2, 3)), "x").unwrap();
//! let xt = ops::transpose_(&x, &[]).unwrap(); // [3, 2], the same memory as x
//! let one = popxl::constant(1.0f32, "one").unwrap();
//! ops::add_(&xt, &one).unwrap();             // x is now all ones
//! ```
//!
//! They have no gradient (PopXL marks in-place ops ✗), except `concat_`,
//! differentiated as `concat`. `slice_` takes PopXL's `slice` arguments.

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::shape::{ReshapeAttrs, TransposeAttrs};
use popart_ir::ops::view::ConcatInplaceAttrs;

use super::OpBuilder;
use crate::{Result, Tensor};

/// `t` with a new shape, as an alias of `t` (op `ReshapeInplace`); one `-1`
/// is inferred.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(ndarray::Array2::<f32>::zeros((2, 3)), "x").unwrap();
/// assert_eq!(popxl::ops::reshape_(&x, &[3, -1]).unwrap().shape(), &[3, 2]);
/// ```
pub fn reshape_(t: &Tensor, shape: &[i64]) -> Result<Tensor> {
    OpBuilder::new("reshape_", &ir_ops::ReshapeInplace)
        .input(0, t)
        .typed(&ReshapeAttrs { shape: shape.to_vec() })
        .create1()
}

/// `t` as one dimension, as an alias of `t` (a `reshape_` to `[-1]`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(ndarray::Array2::<f32>::zeros((2, 3)), "x").unwrap();
/// assert_eq!(popxl::ops::flatten_(&x).unwrap().shape(), &[6]);
/// ```
pub fn flatten_(t: &Tensor) -> Result<Tensor> {
    OpBuilder::new("flatten_", &ir_ops::ReshapeInplace).input(0, t).typed(&ReshapeAttrs { shape: vec![-1] }).create1()
}

/// `t` with its dimensions permuted by `perm` (empty: reversed), as an alias
/// of `t` (op `TransposeInplace`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(ndarray::Array2::<f32>::zeros((2, 3)), "x").unwrap();
/// assert_eq!(popxl::ops::transpose_(&x, &[]).unwrap().shape(), &[3, 2]);
/// ```
pub fn transpose_(t: &Tensor, perm: &[i64]) -> Result<Tensor> {
    OpBuilder::new("transpose_", &ir_ops::TransposeInplace)
        .input(0, t)
        .typed(&TransposeAttrs { perm: perm.to_vec() })
        .create1()
}

/// A numpy slice of `t` (arguments as [`super::slice()`]), as an alias of `t`
/// (op `SliceInplace`): an in-place op on the result writes that part of `t`.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(ndarray::Array2::<f32>::zeros((4, 6)), "x").unwrap();
/// assert_eq!(popxl::ops::slice_(&x, &[1], &[100], &[2], &[1]).unwrap().shape(), &[4, 3]);
/// ```
pub fn slice_(t: &Tensor, starts: &[i64], ends: &[i64], steps: &[i64], axes: &[i64]) -> Result<Tensor> {
    super::shape::slice_op(OpBuilder::new("slice_", &ir_ops::SliceInplace), t, starts, ends, steps, axes)
}

/// `ts` joined along `axis`, as an alias of every input (op `ConcatInplace`):
/// an in-place op on the result writes the inputs.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::variable(ndarray::Array2::<f32>::zeros((2, 3)), "a").unwrap();
/// let b = popxl::variable(ndarray::Array2::<f32>::zeros((1, 3)), "b").unwrap();
/// assert_eq!(popxl::ops::concat_(&[&a, &b], 0).unwrap().shape(), &[3, 3]);
/// ```
pub fn concat_(ts: &[&Tensor], axis: i64) -> Result<Tensor> {
    let n = super::to_i64(ts.len(), || "concat_ input count".to_string())?;
    let mut spec = OpBuilder::new("concat_", &ir_ops::ConcatInplace).typed(&ConcatInplaceAttrs { axis, num_inputs: n });
    for (i, t) in ts.iter().enumerate() {
        spec = spec.input(super::input_index(i, "concat_")?, t);
    }
    spec.create1()
}
