//! Indexing ops: subsample, split, scatters, dynamic slices and updates,
//! one-hot encoding, grouped and tied gathers, and `init`.
//!
//! Index semantics (see `popart_ir::ops::indexing`): scatter, one-hot and
//! gather indices in `[-len, len)` pick a position (negative ones count from
//! the end); others are ignored (nothing written, zero rows, an all-`off`
//! row) and get no gradient. Dynamic slices follow popops: an offset outside
//! `[0, dim)` starts the slice at 0, and a slice running past the end of its
//! axis wraps around. With `SessionOptions::check_indices` each of these cases
//! is a run-time `IndexOutOfRange` error instead.

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::grad::InitAttrs;
use popart_ir::ops::indexing::{
    DynamicSliceAttrs, GroupedGatherAttrs, OnehotAttrs, ScatterAttrs, ScatterReduceAttrs, SplitAttrs, SubsampleAttrs,
};
use popart_ir::ops::shape::GatherAttrs;
use popart_ir::{DataType, TensorKind};

use super::OpBuilder;
use crate::{PopXlError, Result, Tensor};

/// Every `strides[d]`-th element of each dimension `d`, starting at 0 (op
/// `Subsample`); missing trailing strides are 1. Each output dimension is
/// `ceil(d / stride)`.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((5, 4)), "a").unwrap();
/// assert_eq!(popxl::ops::subsample(&a, &[2, 3]).unwrap().shape(), &[3, 2]);
/// assert_eq!(popxl::ops::subsample(&a, &[2]).unwrap().shape(), &[3, 4]);
/// assert!(popxl::ops::subsample(&a, &[0, 1]).is_err());
/// assert!(popxl::ops::subsample(&a, &[1, 1, 1]).is_err());
/// ```
pub fn subsample(t: &Tensor, strides: &[i64]) -> Result<Tensor> {
    if strides.len() > t.rank() {
        return Err(PopXlError::TooManyAxes {
            what: "subsample strides",
            count: strides.len(),
            tensor: t.name().to_string(),
            rank: t.rank(),
        });
    }
    let mut s = strides.to_vec();
    s.resize(t.rank(), 1);
    OpBuilder::new("subsample", &ir_ops::Subsample).input(0, t).typed(&SubsampleAttrs { strides: s }).create1()
}

/// How [`split`] divides an axis: into a number of equal parts, or into parts
/// of the given sizes (PopXL's `int` or `List[int]`).
///
/// ```
/// use popxl::ops::Splits;
/// assert_eq!(Splits::from(3), Splits::Parts(3));
/// assert_eq!(Splits::from(vec![1, 2]), Splits::Sizes(vec![1, 2]));
/// assert_eq!(Splits::from(&[1usize, 2][..]), Splits::Sizes(vec![1, 2]));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Splits {
    /// This many parts of equal size.
    Parts(usize),
    /// Parts of these sizes (summing to the axis size).
    Sizes(Vec<usize>),
}

impl From<usize> for Splits {
    fn from(n: usize) -> Self {
        Splits::Parts(n)
    }
}

impl From<Vec<usize>> for Splits {
    fn from(v: Vec<usize>) -> Self {
        Splits::Sizes(v)
    }
}

impl From<&[usize]> for Splits {
    fn from(v: &[usize]) -> Self {
        Splits::Sizes(v.to_vec())
    }
}

impl<const N: usize> From<[usize; N]> for Splits {
    fn from(v: [usize; N]) -> Self {
        Splits::Sizes(v.to_vec())
    }
}

/// Split `t` along `axis` (negative counts from the end) into a list of
/// tensors (op `Split`): `splits` equal parts (an error if they do not divide
/// the axis) or parts of the given sizes (an error if they do not sum to it).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 6)), "a").unwrap();
/// let parts = popxl::ops::split(&a, 3, 1).unwrap();
/// assert_eq!(parts.iter().map(|p| p.shape().to_vec()).collect::<Vec<_>>(), vec![vec![2, 2]; 3]);
/// let parts = popxl::ops::split(&a, [1, 5], -1).unwrap();
/// assert_eq!(parts[1].shape(), &[2, 5]);
/// assert!(popxl::ops::split(&a, 4, 1).is_err());
/// assert!(popxl::ops::split(&a, [1, 2], 1).is_err());
/// ```
pub fn split(t: &Tensor, splits: impl Into<Splits>, axis: i64) -> Result<Vec<Tensor>> {
    let rank = t.rank();
    let ax = popart_ir::ops::normalize_axis(axis, rank)
        .map_err(|source| PopXlError::AxisOutOfRange { what: format!("split of tensor `{}`", t.name()), source })?;
    let sizes = match splits.into() {
        Splits::Parts(n) => {
            let len = t.shape()[ax];
            if n == 0 || !len.is_multiple_of(n) {
                return Err(PopXlError::NotDivisible {
                    what: format!("split {n} does not equally divide axis {ax} of tensor `{}`: its length", t.name()),
                    len,
                    divisor: n,
                });
            }
            vec![len / n; n]
        }
        Splits::Sizes(v) => v,
    };
    let sizes = sizes
        .iter()
        .map(|&s| super::to_i64(s, || format!("split size of tensor `{}`", t.name())))
        .collect::<Result<Vec<_>>>()?;
    let mut b = OpBuilder::new("split", &ir_ops::Split).input(0, t).typed(&SplitAttrs { axis, split: sizes.clone() });
    for i in 0..sizes.len() {
        b = b.output_name(&format!("{}_split_{i}", t.base_name()));
    }
    b.create_all()
}

/// A copy of `t` with `values` written at `indices` along `axis` (op `Scatter`,
/// ONNX `ScatterElements`): for every element of `values`, its position with the
/// `axis` coordinate replaced by the matching index. `indices` has `values`'
/// shape, or is a vector of one index per row of `values` along `axis`.
/// Of repeated indices the last write (in row-major order) wins. The gradient
/// of `t` is zero at the written positions; `values` get the gradient there.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let t = popxl::constant(ndarray::Array2::<f32>::zeros((4, 2)), "t").unwrap();
/// let v = popxl::constant(ndarray::Array2::<f32>::ones((2, 2)), "v").unwrap();
/// let i = popxl::constant(ndarray::array![[1i32, 3], [0, -1]], "i").unwrap();
/// assert_eq!(popxl::ops::scatter(&t, &i, &v, 0).unwrap().shape(), &[4, 2]);
/// ```
pub fn scatter(t: &Tensor, indices: &Tensor, values: &Tensor, axis: i64) -> Result<Tensor> {
    OpBuilder::new("scatter", &ir_ops::Scatter)
        .input(0, t)
        .input(1, indices)
        .input(2, values)
        .typed(&ScatterAttrs { axis })
        .create1()
}

/// The optional arguments of [`scatter_reduce`] (PopXL's keyword arguments).
///
/// ```
/// let o = popxl::ops::ScatterReduceOptions { axis_size: Some(5), ..Default::default() };
/// assert_eq!(o.axis, 0);
/// assert!(o.initial_values.is_none());
/// ```
#[derive(Clone, Debug, Default)]
pub struct ScatterReduceOptions<'a> {
    /// The values the reduction starts from; they also give the output's shape.
    pub initial_values: Option<&'a Tensor>,
    /// The axis scattered along (negative counts from the end). Default 0.
    pub axis: i64,
    /// The output's size along `axis` (required without `initial_values`).
    pub axis_size: Option<usize>,
    /// PopXL's memory hint: no effect on the `cpu` device.
    pub available_memory_proportion: Option<f32>,
}

/// Reduce `data` into an output at `indices` along `axis` (op `ScatterReduce`;
/// PopXL's `scatter_reduce`). `reduction`: `"sum"`, `"max"`, `"min"` or `"none"`
/// (the last write wins). The output is `initial_values` (copied) or, without
/// them, `data`'s shape with `axis_size` rows on the axis, starting from zeros;
/// for `max`/`min` without initial values, positions nothing was scattered to
/// are 0. `indices` has `data`'s shape or is a vector of one index per row of
/// `data` along `axis` (PopART's index broadcasting).
///
/// Gradients (as PopART): `data` gets the output gradient gathered where each
/// element went (for `max`/`min`, only where it is the selected value);
/// `initial_values` get it unchanged (`sum`), zeroed at the scattered positions
/// (`none`), or where the output equals them (`max`/`min`).
///
/// ```
/// use popxl::ops::ScatterReduceOptions;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::array![[1.0f32, 2.0], [3.0, 4.0], [5.0, 6.0]], "x").unwrap();
/// let i = popxl::constant(ndarray::array![3i32, 0, 3], "i").unwrap();
/// let o = ScatterReduceOptions { axis_size: Some(5), ..Default::default() };
/// assert_eq!(popxl::ops::scatter_reduce(&x, &i, "sum", o).unwrap().shape(), &[5, 2]);
/// assert!(popxl::ops::scatter_reduce(&x, &i, "mul", ScatterReduceOptions::default()).is_err());
/// ```
pub fn scatter_reduce(
    data: &Tensor,
    indices: &Tensor,
    reduction: &str,
    opts: ScatterReduceOptions<'_>,
) -> Result<Tensor> {
    if popart_ir::ops::indexing::Reduction::parse(reduction).is_none() {
        return Err(PopXlError::UnknownName {
            what: "scatter_reduce reduction",
            got: reduction.to_string(),
            accepted: vec!["sum", "max", "min", "none"],
        });
    }
    if opts.initial_values.is_none() && opts.axis_size.is_none() {
        return Err(PopXlError::MissingArgument {
            what: "scatter_reduce",
            needs: "one of initial_values and axis_size",
        });
    }
    let axis_size = opts.axis_size.map(|s| super::to_i64(s, || "scatter_reduce axis_size".to_string())).transpose()?;
    let mut b = OpBuilder::new("scatter_reduce", &ir_ops::ScatterReduce)
        .input(0, data)
        .input(1, indices)
        .typed(&ScatterReduceAttrs { axis: opts.axis, reduction: reduction.to_string(), axis_size });
    if let Some(init) = opts.initial_values {
        b = b.input(2, init);
    }
    b.create1()
}

/// The attributes of a dynamic slice.
fn dynamic<'a>(
    what: &'static str,
    def: &'static dyn popart_ir::OpDef,
    axes: &[i64],
    sizes: &[i64],
    no_overlap: bool,
) -> OpBuilder<'a> {
    OpBuilder::new(what, def).typed(&DynamicSliceAttrs { axes: axes.to_vec(), sizes: sizes.to_vec(), no_overlap })
}

/// A copy of the slice of `t` at run-time offsets `index` (op `DynamicSlice`):
/// `sizes[k]` elements from offset `index[k]` along `axes[k]`, all of every
/// other axis. `index` is an integer tensor with one offset per axis. An offset
/// outside `[0, dim)` starts at 0 and a slice running past the end wraps around
/// (popops' behaviour; PopXL does not support either), or, with
/// `SessionOptions::check_indices`, is a run-time error. `no_overlap` is PopXL's
/// gradient hint: no effect here (gradients are always exact).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let t = popxl::constant(ndarray::Array3::<f32>::ones((3, 5, 7)), "t").unwrap();
/// let i = popxl::constant(ndarray::array![1u32, 2], "i").unwrap();
/// let s = popxl::ops::dynamic_slice(&t, &i, &[0, 2], &[2, 4], false).unwrap();
/// assert_eq!(s.shape(), &[2, 5, 4]);
/// assert!(popxl::ops::dynamic_slice(&t, &i, &[0, 2], &[2, 8], false).is_err());
/// ```
pub fn dynamic_slice(t: &Tensor, index: &Tensor, axes: &[i64], sizes: &[i64], no_overlap: bool) -> Result<Tensor> {
    dynamic("dynamic_slice", &ir_ops::DynamicSlice, axes, sizes, no_overlap).input(0, t).input(1, index).create1()
}

/// A copy of `t` with `t_update` written at the slice of [`dynamic_slice`]
/// (op `DynamicUpdate`); `t_update` has the slice's shape. Gradients: `t`'s is
/// zero on the slice, `t_update`'s is the slice of the output gradient.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let t = popxl::constant(ndarray::Array2::<f32>::zeros((4, 3)), "t").unwrap();
/// let u = popxl::constant(ndarray::Array2::<f32>::ones((1, 3)), "u").unwrap();
/// let i = popxl::constant(ndarray::array![2u32], "i").unwrap();
/// assert_eq!(popxl::ops::dynamic_update(&t, &i, &u, &[0], &[1], true).unwrap().shape(), &[4, 3]);
/// ```
pub fn dynamic_update(
    t: &Tensor,
    index: &Tensor,
    t_update: &Tensor,
    axes: &[i64],
    sizes: &[i64],
    no_overlap: bool,
) -> Result<Tensor> {
    dynamic("dynamic_update", &ir_ops::DynamicUpdate, axes, sizes, no_overlap)
        .input(0, t)
        .input(1, index)
        .input(2, t_update)
        .create1()
}

/// [`dynamic_update`] in place: `t` is modified and returned (op
/// `DynamicUpdateInplace`; no gradient).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let t = popxl::variable(ndarray::Array2::<f32>::zeros((4, 3)), "t").unwrap();
/// let u = popxl::constant(ndarray::Array2::<f32>::ones((4, 1)), "u").unwrap();
/// let i = popxl::constant(ndarray::array![2u32], "i").unwrap();
/// assert_eq!(popxl::ops::dynamic_update_(&t, &i, &u, &[1], &[1], false).unwrap().spec(), t.spec());
/// ```
pub fn dynamic_update_(
    t: &Tensor,
    index: &Tensor,
    t_update: &Tensor,
    axes: &[i64],
    sizes: &[i64],
    no_overlap: bool,
) -> Result<Tensor> {
    dynamic("dynamic_update_", &ir_ops::DynamicUpdateInplace, axes, sizes, no_overlap)
        .input(0, t)
        .input(1, index)
        .input(2, t_update)
        .create1()
}

/// One-hot encoding of the integer tensor `t` (op `Onehot`, ONNX `OneHot`): a new
/// axis of `num_classes` classes at `axis` (in `-(rank+1)..=rank`), holding
/// `values[1]` at each index's class and `values[0]` elsewhere. `num_classes` is
/// a constant integer scalar (its value fixes the shape, as in PopART); `values`
/// is an `[off, on]` pair whose dtype the output takes. Indices in
/// `[-num_classes, num_classes)` are hot (negative ones count from the end);
/// other indices give an all-`off` row. The gradient flows to `values` only.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let t = popxl::constant(ndarray::array![[1i32, 5]], "t").unwrap();
/// let c = popxl::constant(6i32, "c").unwrap();
/// let v = popxl::constant(ndarray::array![0.0f32, 1.0], "v").unwrap();
/// assert_eq!(popxl::ops::onehot(&t, &c, &v, 1).unwrap().shape(), &[1, 6, 2]);
/// assert_eq!(popxl::ops::onehot(&t, &c, &v, -1).unwrap().shape(), &[1, 2, 6]);
/// ```
pub fn onehot(t: &Tensor, num_classes: &Tensor, values: &Tensor, axis: i64) -> Result<Tensor> {
    let not_const = || PopXlError::NotConstant {
        what: "onehot num_classes",
        tensor: num_classes.name().to_string(),
        expected: "integer scalar",
    };
    let TensorKind::Constant(data) = num_classes.kind()? else {
        return Err(not_const());
    };
    if data.info.nelms() != 1 || !data.info.dtype.is_int() {
        return Err(not_const());
    }
    let c = data.to_f64_vec().first().copied().ok_or_else(not_const)?;
    if c < 0.0 || c > i64::MAX as f64 {
        return Err(PopXlError::ValueOutOfRange {
            what: "onehot num_classes".to_string(),
            expected: "non-negative",
            got: c.to_string(),
        });
    }
    OpBuilder::new("onehot", &ir_ops::Onehot)
        .input(0, t)
        .input(1, num_classes)
        .input(2, values)
        .typed(&OnehotAttrs { axis, num_classes: Some(c as i64) })
        .create1()
}

/// PopXL's keyword arguments of `gather` and [`tied_gather`].
///
/// ```
/// let o = popxl::ops::GatherOptions::default();
/// assert_eq!((o.axis, o.zero_OOR), (0, false));
/// ```
#[allow(non_snake_case)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GatherOptions {
    /// The axis gathered along (negative counts from the end). Default 0.
    pub axis: i64,
    /// PopXL's memory hint: no effect on the `cpu` device.
    pub available_memory_proportion: Option<f32>,
    /// Ask for zeros at out-of-range indices (what is computed anyway), so
    /// `check_indices` does not report them.
    pub zero_OOR: bool,
}

/// PopXL's `gather(t, indices, axis=0, available_memory_proportion=None,
/// zero_OOR=False)` with its keyword arguments as [`GatherOptions`] (op
/// `Gather`; see [`gather`](super::gather)).
///
/// ```
/// use popxl::ops::GatherOptions;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let t = popxl::constant(ndarray::Array2::<f32>::ones((10, 4)), "t").unwrap();
/// let i = popxl::constant(ndarray::array![3i32, 99], "i").unwrap();
/// let o = GatherOptions { axis: 0, zero_OOR: true, ..Default::default() };
/// assert_eq!(popxl::ops::gather_with_options(&t, &i, o).unwrap().shape(), &[2, 4]);
/// ```
pub fn gather_with_options(t: &Tensor, indices: &Tensor, opts: GatherOptions) -> Result<Tensor> {
    super::gather_with(t, indices, opts.axis, opts.zero_OOR)
}

/// `gather` whose data is a weight tied to a matmul (op `TiedGather`; PopXL's
/// `tied_gather`): PopART lays the indices out for the matmul. The values and
/// the gradient are those of `gather`.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let t = popxl::constant(ndarray::Array2::<f32>::ones((10, 4)), "t").unwrap();
/// let i = popxl::constant(ndarray::array![[0i32, 1], [2, 3]], "i").unwrap();
/// let y = popxl::ops::tied_gather(&t, &i, Default::default()).unwrap();
/// assert_eq!(y.shape(), &[2, 2, 4]);
/// ```
pub fn tied_gather(t: &Tensor, indices: &Tensor, opts: GatherOptions) -> Result<Tensor> {
    OpBuilder::new("tied_gather", &ir_ops::TiedGather)
        .input(0, t)
        .input(1, indices)
        .typed(&GatherAttrs { axis: opts.axis, zero_oor: opts.zero_OOR })
        .create1()
}

/// PopXL's keyword arguments of [`groupedgather`].
///
/// ```
/// let o = popxl::ops::GroupedGatherOptions::default();
/// assert_eq!((o.axis, o.group_size, o.zero_OOR), (0, 1, false));
/// ```
#[allow(non_snake_case)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupedGatherOptions {
    /// The axis gathered along (negative counts from the end); at least 1 with groups.
    pub axis: i64,
    /// The number of groups: the leading dimension of `t` and `indices`
    /// (1: a plain `gather`, without a group dimension).
    pub group_size: usize,
    /// PopXL's memory hint: no effect on the `cpu` device.
    pub available_memory_proportion: Option<f32>,
    /// Ask for zeros at out-of-range indices (see [`GatherOptions::zero_OOR`]).
    pub zero_OOR: bool,
}

impl Default for GroupedGatherOptions {
    fn default() -> Self {
        GroupedGatherOptions { axis: 0, group_size: 1, available_memory_proportion: None, zero_OOR: false }
    }
}

/// A gather per group (op `GroupedGather`; PopXL's `groupedgather`): `t` and
/// `indices` have a leading dimension of `group_size` groups, and group `g` of
/// the result is `gather(t[g], indices[g])` along `axis` (an axis of `t`, so at
/// least 1). With `group_size` 1 this is `gather` (op `Gather`).
///
/// ```
/// use popxl::ops::GroupedGatherOptions;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let t = popxl::constant(ndarray::Array3::<f32>::ones((2, 2, 4)), "t").unwrap();
/// let i = popxl::constant(ndarray::array![[0i32, 1, 0], [1, 0, 1]], "i").unwrap();
/// let o = GroupedGatherOptions { axis: 1, group_size: 2, ..Default::default() };
/// assert_eq!(popxl::ops::groupedgather(&t, &i, o).unwrap().shape(), &[2, 3, 4]);
/// ```
pub fn groupedgather(t: &Tensor, indices: &Tensor, opts: GroupedGatherOptions) -> Result<Tensor> {
    if opts.group_size == 1 {
        return super::gather_with(t, indices, opts.axis, opts.zero_OOR);
    }
    let group_size = super::to_i64(opts.group_size, || "groupedgather group_size".to_string())?;
    OpBuilder::new("groupedgather", &ir_ops::GroupedGather)
        .input(0, t)
        .input(1, indices)
        .typed(&GroupedGatherAttrs { axis: opts.axis, group_size, zero_oor: opts.zero_OOR })
        .create1()
}

/// What [`init`] fills its tensor with (PopXL's `init_type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitType {
    /// Zeros (`"zero"`).
    #[default]
    Zero,
    /// Undefined values (`"undef"`): the `cpu` device fills zeros too.
    Undef,
}

/// A new tensor of `shape` and `dtype` named `name`, zero-filled (op `Init`; no
/// inputs, no gradient). Unlike a variable it can be created in any graph.
/// `InitType::Undef` leaves the values undefined in PopXL; here they are zeros too.
///
/// ```
/// use popxl::ops::InitType;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let z = popxl::ops::init(&[2, 3], popxl::float32, "z", InitType::Zero).unwrap();
/// assert_eq!(z.shape(), &[2, 3]);
/// assert_eq!(z.name(), "z");
/// ```
pub fn init(shape: &[usize], dtype: DataType, name: &str, init_type: InitType) -> Result<Tensor> {
    let _ = init_type;
    let shape = shape
        .iter()
        .map(|&d| super::to_i64(d, || format!("dimension of init tensor `{name}`")))
        .collect::<Result<Vec<_>>>()?;
    OpBuilder::new("init", &ir_ops::Init)
        .typed(&InitAttrs { shape, dtype, init_type: None })
        .output_name(name)
        .create1()
}
