//! Order statistics: `argmax`, `argmin`, `topk` and `histogram`.

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::sort::{ArgReduceAttrs, HistogramAttrs, TopKAttrs};

use super::{to_i64, OpBuilder};
use crate::{PopXlError, Result, Tensor};

fn arg(what: &'static str, def: &'static dyn popart_ir::OpDef, t: &Tensor, dim: i64, keepdim: bool) -> Result<Tensor> {
    OpBuilder::new(what, def).input(0, t).typed(&ArgReduceAttrs { axis: dim, keepdims: keepdim }).create1()
}

/// Int32 index of the maximum along `dim` (PopXL's default 0; negative counts
/// from the end), the first one on ties (NaN counts as the maximum); the axis is
/// kept as size 1 if `keepdim` (op `ArgMax`; no gradient).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
/// let i = popxl::ops::argmax(&a, 1, false).unwrap();
/// assert_eq!((i.dtype(), i.shape()), (popxl::int32, &[2usize][..]));
/// ```
pub fn argmax(t: &Tensor, dim: i64, keepdim: bool) -> Result<Tensor> {
    arg("argmax", &ir_ops::ArgMax, t, dim, keepdim)
}

/// Int32 index of the minimum along `dim`, the first one on ties (op `ArgMin`);
/// see [`argmax`].
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
/// assert_eq!(popxl::ops::argmin(&a, 0, true).unwrap().shape(), &[1, 3]);
/// ```
pub fn argmin(t: &Tensor, dim: i64, keepdim: bool) -> Result<Tensor> {
    arg("argmin", &ir_ops::ArgMin, t, dim, keepdim)
}

/// The `k` largest (`largest`) or smallest elements along `axis` and their int32
/// indices, `(values, indices)` (op `TopK`). With `sorted` they come best first,
/// otherwise in index order; ties keep the lower index first. `k` larger than
/// the axis is an error. The gradient of the values is scattered back to the
/// indices.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 5)), "a").unwrap();
/// let (v, i) = popxl::ops::topk(&a, 3, -1, true, true).unwrap();
/// assert_eq!((v.shape(), i.dtype()), (&[2usize, 3][..], popxl::int32));
/// assert!(popxl::ops::topk(&a, 6, -1, true, true).is_err());
/// ```
pub fn topk(t: &Tensor, k: usize, axis: i64, largest: bool, sorted: bool) -> Result<(Tensor, Tensor)> {
    let k = to_i64(k, || "k of topk".to_string())?;
    let outputs = OpBuilder::new("topk", &ir_ops::TopK)
        .input(0, t)
        .typed(&TopKAttrs { k, axis, largest, sorted })
        .create_all()?;
    let n = outputs.len();
    let [values, indices]: [Tensor; 2] = outputs.try_into().map_err(|_| PopXlError::IndexOutOfRange {
        what: "output of op TopK".into(),
        index: 1,
        len: n,
    })?;
    Ok((values, indices))
}

/// Uint32 counts of the elements of a float tensor in the `levels.len() + 1`
/// bins `x < l0`, `l0 <= x < l1`, ..., `x >= l_last` (of `|x|` if
/// `absolute_of_input`; NaN counts in the last bin). `levels` must be strictly
/// increasing (op `Histogram`; no gradient).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
/// let h = popxl::ops::histogram(&a, &[0.1, 3.1, 7.0], false).unwrap();
/// assert_eq!((h.dtype(), h.shape()), (popxl::uint32, &[4usize][..]));
/// assert!(popxl::ops::histogram(&a, &[1.0, 1.0], false).is_err());
/// ```
pub fn histogram(t: &Tensor, levels: &[f64], absolute_of_input: bool) -> Result<Tensor> {
    OpBuilder::new("histogram", &ir_ops::Histogram)
        .input(0, t)
        .typed(&HistogramAttrs { levels: levels.to_vec(), absolute_of_input })
        .create1()
}
