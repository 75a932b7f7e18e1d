//! Shape ops: reshape, flatten, transpose, slicing and indexing, concat, squeeze, gather.

use popart_ir::ops::all as ir_ops;
use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

use popart_ir::ops::shape::{ConcatAttrs, GatherAttrs, ReshapeAttrs, SliceAttrs, SqueezeAttrs, TransposeAttrs};

use super::OpBuilder;
use crate::{DataType, PopXlError, Result, Tensor};

/// `t` with a new shape holding the same elements; one `-1` is inferred (op `Reshape`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array3::<f32>::ones((8, 28, 28)), "a").unwrap();
/// assert_eq!(popxl::ops::reshape(&a, &[-1, 784]).unwrap().shape(), &[8, 784]);
/// assert!(popxl::ops::reshape(&a, &[5, -1]).is_err());
/// ```
pub fn reshape(t: &Tensor, shape: &[i64]) -> Result<Tensor> {
    OpBuilder::new("reshape", &ir_ops::Reshape).input(0, t).typed(&ReshapeAttrs { shape: shape.to_vec() }).create1()
}

/// `t` as one dimension (a `Reshape` to `[-1]`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
/// assert_eq!(popxl::ops::flatten(&a).unwrap().shape(), &[6]);
/// ```
pub fn flatten(t: &Tensor) -> Result<Tensor> {
    OpBuilder::new("flatten", &ir_ops::Reshape).input(0, t).typed(&ReshapeAttrs { shape: vec![-1] }).create1()
}

/// Permute the dimensions by `perm`; empty `perm` reverses them (op `Transpose`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array3::<f32>::ones((2, 3, 4)), "a").unwrap();
/// assert_eq!(popxl::ops::transpose(&a, &[]).unwrap().shape(), &[4, 3, 2]);
/// assert_eq!(popxl::ops::transpose(&a, &[0, 2, 1]).unwrap().shape(), &[2, 4, 3]);
/// assert!(popxl::ops::transpose(&a, &[0, 0, 1]).is_err());
/// ```
pub fn transpose(t: &Tensor, perm: &[i64]) -> Result<Tensor> {
    OpBuilder::new("transpose", &ir_ops::Transpose).input(0, t).typed(&TransposeAttrs { perm: perm.to_vec() }).create1()
}

/// Numpy slicing along `axes` (op `Slice`): for each k, elements
/// `starts[k]..ends[k]` with step `steps[k]` of axis `axes[k]`. Negative values
/// count from the end and bounds are clamped, as in numpy. Empty `steps` means
/// all 1; empty `axes` means `0..starts.len()`.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((4, 6)), "a").unwrap();
/// let s = popxl::ops::slice(&a, &[1], &[100], &[2], &[1]).unwrap();
/// assert_eq!(s.shape(), &[4, 3]);
/// ```
pub fn slice(t: &Tensor, starts: &[i64], ends: &[i64], steps: &[i64], axes: &[i64]) -> Result<Tensor> {
    slice_op(OpBuilder::new("slice", &ir_ops::Slice), t, starts, ends, steps, axes)
}

/// Connect `t` to a slice-like op (`Slice`, `SliceInplace`) and set its
/// `starts/ends/steps/axes`, with the defaults filled in (steps all 1, axes `0..n`).
pub(crate) fn slice_op(
    op: OpBuilder<'_>,
    t: &Tensor,
    starts: &[i64],
    ends: &[i64],
    steps: &[i64],
    axes: &[i64],
) -> Result<Tensor> {
    let n = starts.len();
    let steps = if steps.is_empty() { vec![1; n] } else { steps.to_vec() };
    let axes = if axes.is_empty() {
        (0..n).map(|a| super::to_i64(a, || "slice axis".to_string())).collect::<Result<_>>()?
    } else {
        axes.to_vec()
    };
    op.input(0, t)
        .typed(&SliceAttrs { starts: starts.to_vec(), ends: ends.to_vec(), steps: Some(steps), axes: Some(axes) })
        .create1()
}

/// One item of a numpy-style index (see [`index`] and [`crate::s!`]): an integer
/// picks one element and removes the axis; a range slices it.
///
/// Converts from integers and from every range type (`a..b`, `a..`, `..b`,
/// `..`, `a..=b`, `..=b`); negative values count from the end.
///
/// ```
/// use popxl::SliceIndex;
/// assert_eq!(SliceIndex::from(-1), SliceIndex::Index(-1));
/// assert_eq!(SliceIndex::from(1..3), SliceIndex::Range { start: Some(1), end: Some(3), step: 1 });
/// assert_eq!(SliceIndex::from(..).step(-1), SliceIndex::Range { start: None, end: None, step: -1 });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SliceIndex {
    /// One element; the axis is removed.
    Index(i64),
    /// Elements `start..end` by `step` (`None`: from the start / to the end,
    /// in the direction of `step`).
    Range {
        /// First element (default: the first in the direction of `step`).
        start: Option<i64>,
        /// One past the last element (default: past the end in the direction of `step`).
        end: Option<i64>,
        /// Step, non-zero; negative walks backwards.
        step: i64,
    },
}

impl SliceIndex {
    /// The same range with step `step` (no effect on [`SliceIndex::Index`]).
    ///
    /// ```
    /// use popxl::SliceIndex;
    /// assert_eq!(SliceIndex::from(0..4).step(2), SliceIndex::Range { start: Some(0), end: Some(4), step: 2 });
    /// ```
    pub fn step(self, step: i64) -> Self {
        match self {
            SliceIndex::Range { start, end, .. } => SliceIndex::Range { start, end, step },
            i => i,
        }
    }
}

impl From<RangeFull> for SliceIndex {
    fn from(_: RangeFull) -> Self {
        SliceIndex::Range { start: None, end: None, step: 1 }
    }
}

/// An integer as a slice bound, saturating: a `usize` above `i64::MAX` is past
/// the end of any axis (dimensions are at most `isize::MAX`), so saturating keeps
/// the range's meaning and an index out of range stays out of range.
trait SaturatingI64: Copy {
    fn saturating_i64(self) -> i64;
}

impl SaturatingI64 for i32 {
    fn saturating_i64(self) -> i64 {
        i64::from(self)
    }
}

impl SaturatingI64 for i64 {
    fn saturating_i64(self) -> i64 {
        self
    }
}

impl SaturatingI64 for isize {
    fn saturating_i64(self) -> i64 {
        i64::try_from(self).unwrap_or(if self < 0 { i64::MIN } else { i64::MAX })
    }
}

impl SaturatingI64 for usize {
    fn saturating_i64(self) -> i64 {
        i64::try_from(self).unwrap_or(i64::MAX)
    }
}

macro_rules! slice_index_from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for SliceIndex {
            fn from(i: $t) -> Self {
                SliceIndex::Index(i.saturating_i64())
            }
        }
        impl From<Range<$t>> for SliceIndex {
            fn from(r: Range<$t>) -> Self {
                SliceIndex::Range { start: Some(r.start.saturating_i64()), end: Some(r.end.saturating_i64()), step: 1 }
            }
        }
        impl From<RangeFrom<$t>> for SliceIndex {
            fn from(r: RangeFrom<$t>) -> Self {
                SliceIndex::Range { start: Some(r.start.saturating_i64()), end: None, step: 1 }
            }
        }
        impl From<RangeTo<$t>> for SliceIndex {
            fn from(r: RangeTo<$t>) -> Self {
                SliceIndex::Range { start: None, end: Some(r.end.saturating_i64()), step: 1 }
            }
        }
        impl From<RangeInclusive<$t>> for SliceIndex {
            fn from(r: RangeInclusive<$t>) -> Self {
                SliceIndex::Range {
                    start: Some(r.start().saturating_i64()),
                    end: inclusive_end(r.end().saturating_i64()),
                    step: 1,
                }
            }
        }
        impl From<RangeToInclusive<$t>> for SliceIndex {
            fn from(r: RangeToInclusive<$t>) -> Self {
                SliceIndex::Range { start: None, end: inclusive_end(r.end.saturating_i64()), step: 1 }
            }
        }
    )*};
}
slice_index_from_int!(i32, i64, isize, usize);

/// The exclusive end of an inclusive range ending at `e` (`..=-1` runs to the
/// end; `..=i64::MAX` saturates, past the end of any axis).
fn inclusive_end(e: i64) -> Option<i64> {
    if e == -1 {
        None
    } else {
        Some(e.saturating_add(1))
    }
}

/// Build a `[SliceIndex; N]` for [`Tensor::index`] / [`crate::ops::index`]
/// (like `ndarray::s!`): `s![0, 1..3, .., -1]`.
///
/// ```
/// use popxl::{s, SliceIndex};
/// assert_eq!(s![0, ..], [SliceIndex::Index(0), SliceIndex::from(..)]);
/// ```
#[macro_export]
macro_rules! s {
    ($($e:expr),* $(,)?) => {
        [$($crate::SliceIndex::from($e)),*]
    };
}

/// Numpy-style indexing (PopXL's `t[key]` with integers and slices): item k
/// applies to axis k; an integer picks one element and removes the axis (a
/// `Slice` then a `Squeeze`); missing trailing axes are kept whole. Integer
/// indices out of range are an error; range bounds are clamped.
///
/// ```
/// use popxl::s;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((4, 6)), "a").unwrap();
/// assert_eq!(popxl::ops::index(&a, &s![-1]).unwrap().shape(), &[6]);
/// assert_eq!(popxl::ops::index(&a, &s![1..3, 0]).unwrap().shape(), &[2]);
/// assert!(popxl::ops::index(&a, &s![4]).is_err());
/// ```
pub fn index(t: &Tensor, items: &[SliceIndex]) -> Result<Tensor> {
    if items.len() > t.rank() {
        return Err(PopXlError::TooManyAxes {
            what: "index items",
            count: items.len(),
            tensor: t.name().to_string(),
            rank: t.rank(),
        });
    }
    let (mut starts, mut ends, mut steps, mut axes, mut squeeze_axes) = (vec![], vec![], vec![], vec![], vec![]);
    for (axis, (item, &len)) in items.iter().zip(t.shape()).enumerate() {
        let dim = super::to_i64(len, || format!("dimension {axis} of tensor `{}`", t.name()))?;
        let axis_i64 = super::to_i64(axis, || format!("axis {axis} of tensor `{}`", t.name()))?;
        match *item {
            SliceIndex::Index(i) => {
                let j = if i < 0 { i + dim } else { i };
                if !(0..dim).contains(&j) {
                    return Err(PopXlError::IndexOutOfRange {
                        what: format!("axis {axis} of tensor `{}`", t.name()),
                        index: usize::try_from(i.unsigned_abs()).unwrap_or(usize::MAX),
                        len,
                    });
                }
                starts.push(j);
                ends.push(j + 1);
                steps.push(1);
                axes.push(axis_i64);
                squeeze_axes.push(axis_i64);
            }
            SliceIndex::Range { start, end, step } => {
                if step == 0 {
                    return Err(PopXlError::ValueOutOfRange {
                        what: format!("slice step of axis {axis}"),
                        expected: "non-zero",
                        got: step.to_string(),
                    });
                }
                if start.is_none() && end.is_none() && step == 1 {
                    continue;
                }
                // Out-of-range defaults are clamped by the op to "from the first / past the last".
                let (s0, e0) = if step > 0 { (0, i64::MAX) } else { (i64::MAX, i64::MIN) };
                starts.push(start.unwrap_or(s0));
                ends.push(end.unwrap_or(e0));
                steps.push(step);
                axes.push(axis_i64);
            }
        }
    }
    let sliced = if axes.is_empty() { t.clone() } else { slice(t, &starts, &ends, &steps, &axes)? };
    if squeeze_axes.is_empty() {
        Ok(sliced)
    } else {
        squeeze(&sliced, &squeeze_axes)
    }
}

/// PopXL's `t[key]` with a tensor key: an integer `key` gathers along axis 0
/// ([`gather`]: output shape `key.shape + t.shape[1..]`); a bool `key` is a
/// mask, `where(key, t, 0)` ([`super::select`], broadcast together). Any other
/// key dtype is [`PopXlError::DTypeMismatch`].
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((4, 3)), "a").unwrap();
/// let rows = popxl::constant(vec![3i32, 1], "rows").unwrap();
/// assert_eq!(popxl::ops::index_with(&a, &rows).unwrap().shape(), &[2, 3]);
/// let mask = popxl::constant(vec![true, false, true], "mask").unwrap();
/// assert_eq!(popxl::ops::index_with(&a, &mask).unwrap().shape(), &[4, 3]);
/// let bad = popxl::constant(1.0f32, "bad").unwrap();
/// assert!(popxl::ops::index_with(&a, &bad).is_err());
/// ```
pub fn index_with(t: &Tensor, key: &Tensor) -> Result<Tensor> {
    let dtype = key.dtype();
    if dtype == DataType::Bool {
        let what = format!("zero for masking tensor `{}`", t.name());
        let zero = crate::HostArray::scalar_of(t.dtype(), crate::host::Wide::Int(0), &what)?;
        let zero = crate::variables::constant_in_graph_of(t, zero, "mask_zero")?;
        super::select(key, t, &zero)
    } else if dtype.is_int() {
        gather(t, key, 0)
    } else {
        Err(PopXlError::DTypeMismatch {
            what: format!("index of tensor `{}`", t.name()),
            tensor: key.name().to_string(),
            expected: "an integer or bool tensor",
            got: dtype,
        })
    }
}

/// Join tensors along `axis` (op `Concat`); all other dimensions must match.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
/// let b = popxl::constant(ndarray::Array2::<f32>::ones((1, 3)), "b").unwrap();
/// assert_eq!(popxl::ops::concat(&[&a, &b], 0).unwrap().shape(), &[3, 3]);
/// ```
pub fn concat(ts: &[&Tensor], axis: i64) -> Result<Tensor> {
    let mut spec = OpBuilder::new("concat", &ir_ops::Concat).typed(&ConcatAttrs { axis });
    for (i, t) in ts.iter().enumerate() {
        spec = spec.input(super::input_index(i, "concat")?, t);
    }
    spec.create1()
}

/// Remove size-1 `axes` (empty: every size-1 axis; op `Squeeze`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array3::<f32>::ones((1, 3, 1)), "a").unwrap();
/// assert_eq!(popxl::ops::squeeze(&a, &[]).unwrap().shape(), &[3]);
/// assert_eq!(popxl::ops::squeeze(&a, &[0]).unwrap().shape(), &[3, 1]);
/// assert!(popxl::ops::squeeze(&a, &[1]).is_err());
/// ```
pub fn squeeze(t: &Tensor, axes: &[i64]) -> Result<Tensor> {
    OpBuilder::new("squeeze", &ir_ops::Squeeze).input(0, t).typed(&SqueezeAttrs { axes: axes.to_vec() }).create1()
}

/// Pick the elements at integer `indices` along `axis` of `t` (op `Gather`);
/// the result's shape is `t.shape[..axis] + indices.shape + t.shape[axis+1..]`.
///
/// Indices count from the end when negative (`numpy.take`); an index outside
/// `[-len, len)` gives a row of zeros, and its gradient is dropped. PopXL
/// leaves such rows undefined unless `zero_OOR`; with the session option
/// `check_indices` they are a run-time error (see [`gather_with`] for
/// `zero_OOR`, which asks for the zeros and so is never an error).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let table = popxl::constant(ndarray::Array2::<f32>::ones((10, 4)), "table").unwrap();
/// let idx = popxl::constant(ndarray::Array2::<i32>::zeros((2, 3)), "idx").unwrap();
/// assert_eq!(popxl::ops::gather(&table, &idx, 0).unwrap().shape(), &[2, 3, 4]);
/// ```
pub fn gather(t: &Tensor, indices: &Tensor, axis: i64) -> Result<Tensor> {
    gather_with(t, indices, axis, false)
}

/// [`gather`] with PopXL's `zero_OOR`: `true` asks for zeros at out-of-range
/// indices (what [`gather`] computes too), so run-time index checks
/// (`check_indices`) do not report them.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let table = popxl::constant(ndarray::Array2::<f32>::ones((10, 4)), "table").unwrap();
/// let idx = popxl::constant(ndarray::Array1::<i32>::from(vec![3, 99]), "idx").unwrap();
/// assert_eq!(popxl::ops::gather_with(&table, &idx, 0, true).unwrap().shape(), &[2, 4]);
/// ```
pub fn gather_with(t: &Tensor, indices: &Tensor, axis: i64, zero_oor: bool) -> Result<Tensor> {
    OpBuilder::new("gather", &ir_ops::Gather)
        .input(0, t)
        .input(1, indices)
        .typed(&GatherAttrs { axis, zero_oor })
        .create1()
}
