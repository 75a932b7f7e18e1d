//! Reductions over axes, the cumulative sum and `lamb_square`.

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::reduce::ReduceAttrs;
use popart_ir::ops::scan::CumSumAttrs;

use super::OpBuilder;
use crate::{Result, Tensor};

macro_rules! reduce {
    ($($(#[$doc:meta])* $fn:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        pub fn $fn(t: &Tensor, axes: &[i64], keepdims: bool) -> Result<Tensor> {
            OpBuilder::new(stringify!($fn), &ir_ops::$op)
                .input(0, t)
                .typed(&ReduceAttrs { axes: axes.to_vec(), keepdims })
                .create1()
        }
    )*};
}

reduce! {
    /// Sum over `axes` (empty: all axes; negative axes count from the end),
    /// keeping reduced axes as size 1 if `keepdims` (op `ReduceSum`).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array3::<f32>::ones((2, 3, 4)), "a").unwrap();
    /// assert_eq!(popxl::ops::sum(&a, &[-1], false).unwrap().shape(), &[2, 3]);
    /// assert_eq!(popxl::ops::sum(&a, &[1], true).unwrap().shape(), &[2, 1, 4]);
    /// assert_eq!(popxl::ops::sum(&a, &[], false).unwrap().shape(), &[] as &[usize]);
    /// ```
    sum => ReduceSum;
    /// Mean over `axes` (op `ReduceMean`); see [`sum`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(popxl::ops::mean(&a, &[0], false).unwrap().shape(), &[3]);
    /// ```
    mean => ReduceMean;
    /// Maximum over `axes` (op `ReduceMax`); see [`sum`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(popxl::ops::max(&a, &[1], false).unwrap().shape(), &[2]);
    /// ```
    max => ReduceMax;
    /// Minimum over `axes` (op `ReduceMin`); see [`sum`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(popxl::ops::min(&a, &[1], true).unwrap().shape(), &[2, 1]);
    /// ```
    min => ReduceMin;
    /// Product over `axes` (op `ReduceProd`; numbers); see [`sum`]. Its gradient
    /// is the product of the other elements, exact with zeros in the input.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(popxl::ops::prod(&a, &[-1], false).unwrap().shape(), &[2]);
    /// ```
    prod => ReduceProd;
    /// Lower median over `axes` (op `ReduceMedian`; numbers): for an even count,
    /// the smaller of the two middle values. The gradient flows to the first
    /// element equal to the median of each group; see [`sum`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 4)), "a").unwrap();
    /// assert_eq!(popxl::ops::median(&a, &[1], true).unwrap().shape(), &[2, 1]);
    /// ```
    median => ReduceMedian;
    /// Sum of absolute values over `axes` (op `ReduceL1`; numbers); see [`sum`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(popxl::ops::l1(&a, &[0], false).unwrap().shape(), &[3]);
    /// ```
    l1 => ReduceL1;
    /// Square root of the sum of squares over `axes` (op `ReduceL2`; floats); see [`sum`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(popxl::ops::l2(&a, &[], false).unwrap().shape(), &[] as &[usize]);
    /// ```
    l2 => ReduceL2;
    /// Natural log of the sum over `axes` (op `ReduceLogSum`; floats); see [`sum`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(popxl::ops::logsum(&a, &[1], false).unwrap().shape(), &[2]);
    /// ```
    logsum => ReduceLogSum;
    /// `log(sum(exp(t)))` over `axes`, computed from the maximum so that it
    /// neither overflows nor underflows (op `ReduceLogSumExp`; floats); see [`sum`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(popxl::ops::logsumexp(&a, &[-1], true).unwrap().shape(), &[2, 1]);
    /// ```
    logsumexp => ReduceLogSumExp;
    /// Sum of squares over `axes` (op `ReduceSumSquare`; numbers); see [`sum`].
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
    /// assert_eq!(popxl::ops::sumsquare(&a, &[0, 1], false).unwrap().shape(), &[] as &[usize]);
    /// ```
    sumsquare => ReduceSumSquare;
}

/// Options of [`cumsum_with`]: PopART's `CumSumOp` attributes, which PopXL's
/// `cumsum` leaves at their defaults (both false).
///
/// ```
/// let o = popxl::ops::CumSumOptions { exclusive: true, ..Default::default() };
/// assert!(!o.reverse);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CumSumOptions {
    /// Leave each element out of its own sum (the first output is 0).
    pub exclusive: bool,
    /// Sum from the end of the axis.
    pub reverse: bool,
}

/// Cumulative sum along `dim` (negative counts from the end; PopXL's default is
/// 0; op `CumSum`). Numbers only.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
/// assert_eq!(popxl::ops::cumsum(&a, -1).unwrap().shape(), &[2, 3]);
/// assert!(popxl::ops::cumsum(&a, 2).is_err());
/// ```
pub fn cumsum(t: &Tensor, dim: i64) -> Result<Tensor> {
    cumsum_with(t, dim, CumSumOptions::default())
}

/// [`cumsum`] with the `exclusive` and `reverse` options.
///
/// ```
/// use popxl::ops::CumSumOptions;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(vec![1.0f32, 2.0, 3.0], "a").unwrap();
/// let o = CumSumOptions { exclusive: true, reverse: true };
/// assert_eq!(popxl::ops::cumsum_with(&a, 0, o).unwrap().shape(), &[3]);
/// ```
pub fn cumsum_with(t: &Tensor, dim: i64, options: CumSumOptions) -> Result<Tensor> {
    OpBuilder::new("cumsum", &ir_ops::CumSum)
        .input(0, t)
        .typed(&CumSumAttrs { axis: dim, exclusive: options.exclusive, reverse: options.reverse })
        .create1()
}

/// The sum of the squares of every element of a float tensor, as a float32
/// scalar (op `LambSquare`, used by the LAMB optimizer; no gradient).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f64>::ones((2, 3)), "a").unwrap();
/// let s = popxl::ops::lamb_square(&a).unwrap();
/// assert_eq!((s.dtype(), s.rank()), (popxl::float32, 0));
/// ```
pub fn lamb_square(t: &Tensor) -> Result<Tensor> {
    OpBuilder::new("lamb_square", &ir_ops::LambSquare).input(0, t).create1()
}
