//! The builtin op catalogue: one file per op family. Each op type is a zero-sized
//! type implementing [`OpDef`] (shape inference, flags, gradient rule).
//!
//! Op types and their attributes (all registered under these names):
//!
//! | family | op types | attributes |
//! |---|---|---|
//! | [`unary`] | `Neg Abs Exp Log Sqrt Relu Gelu Tanh Sigmoid Sin Cos Sign Floor Ceil Identity Detach IoTileCopy` | none |
//! | [`unary`] | `AbsGrad ExpGrad LogGrad Log2Grad Log1pGrad SqrtGrad ReluGrad GeluGrad GeluErfGrad SwishGrad TanhGrad SigmoidGrad SinGrad CosGrad` (`(g, x \| y)`, see [`grad::UnaryDerivative`]) | none |
//! | [`unary`] | `Cast` | `to: dtype` |
//! | [`unary`] | `Log2 GeluErf Swish`; in place: `ExpInplace ReluInplace GeluInplace GeluErfInplace SwishInplace DetachInplace` | none |
//! | [`unary`] | `Clip`, `ClipGrad(g, y)` | `min, max: float` (absent: unbounded) |
//! | [`unary`] | `IncrementMod`, `IncrementModInplace` | `increment, modulus: float` |
//! | [`unary`] | `IpuCopy` (copy between IPUs; runs on `destination`) | `source, destination: int` |
//! | [`binary`] | `Add Sub Mul Div Pow Fmod` (numpy broadcasting, equal dtypes) | none |
//! | [`binary`] | `Maximum Minimum` (n >= 1 inputs, broadcast together) | none |
//! | [`binary`] | `ScaledAdd(x, y[, a, b])` | `a, b: float` |
//! | [`logical`] | `IsNan IsInf IsFinite` (float in), `LogicalNot LogicalAnd LogicalOr` (bool in), bool out | none |
//! | [`print`] | `PrintTensor` | `title: str`, `print_self, print_gradient: bool`, format (see [`print::PrintFormat`]) |
//! | [`binary`] | `Greater Less Equal` (bool output), `Where(cond, lhs, rhs)` | none |
//! | [`matmul`] | `MatMul` (numpy `matmul`: batched, broadcast batch dims, 1-D operands promoted) | none |
//! | [`matmul`] | `MatMulAdd(a, b, c, r?)` (made by a pattern): `a @ b + c (+ r)`, `c` a row vector, `r` a residual | |
//! | [`reduce`] | `ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceSumSquare` | `axes: ints` (empty = all), `keepdims: bool` |
//! | [`reduce`] | `ReduceMedian` -> `(values, int32 indices)`, `ReduceMedianGrad(g, indices, x)`; `LambSquare` (float32 scalar) | `axes`, `keepdims`; none |
//! | [`scan`] | `CumSum` | `axis: int`, `exclusive, reverse: bool` |
//! | [`sort`] | `ArgMax ArgMin` (int32); `TopK` -> `(values, int32 indices)`, `TopKGrad(g, indices, x)`; `Histogram` (uint32) | `axis: int`, `keepdims: bool`; `k: int`, `axis`, `largest, sorted: bool`; `levels: floats`, `absolute_of_input: bool` |
//! | [`nn`] | `Softmax` | `axis: int` |
//! | [`nn`] | `NllLoss(probs, labels)` | `reduction: "mean"\|"sum"\|"none"`, optional `ignore_index: int` |
//! | [`nn`] | `NllLossWithSoftmaxGrad(probs, labels[, loss_grad])` -> `(loss, dlogits)` | as `NllLoss` |
//! | [`nn`] | `MaskedSoftmax(x, mask)` (made by a pattern) | `scale, fill: float`, `axis: -1` |
//! | [`attention`] | `Attention(qkv) -> (y, lse)`, `AttentionGrad(g, qkv, y, lse)` (an extension: PopXL has none) | `heads: int`, `scale: float`, `causal: bool` |
//! | [`conv`] | `Conv(x, w)`, `ConvDataGrad(g, w, x)`, `ConvWeightsGrad(g, x, w)`, `ConvTranspose(x, w)` (NCHW, N-d) | `strides, pads, dilations: ints`, `group: int`, `auto_pad: str`; `output_padding, output_shape: ints` |
//! | [`pool`] | `MaxPool(x)`, `AveragePool(x)`, `MaxPoolGrad(g, x, y)`, `AveragePoolGrad(g, x)` (NCHW, N-d) | `kernel_shape, strides, pads, dilations: ints`, `auto_pad: str`, `ceil_mode: int` (`out_pads`, `in_dilations` must be default) |
//! | [`norm`] | `GroupNorm(x, w, b) -> (y, mean, inv_std)`, `GroupNormGrad(g, x, w, mean, inv_std, r?) -> (dx (+ r), dw, db)` | `num_groups: int`, `epsilon: float` |
//! | [`norm`] | `BatchNorm(x, scale, bias, mean, var) -> (y, new_mean, new_var, saved_mean, saved_inv_std)` (training), `BatchNormGrad(g, x, scale, saved_mean, saved_inv_std) -> (dx, dscale, dbias)` | `epsilon, momentum: float`, `unbiased_variance: bool` |
//! | [`resize`] | `Resize(x)`, `ResizeGrad(g, x)` | `scales: floats`, `mode, nearest_mode, coordinate_transformation_mode: str` |
//! | [`roi_align`] | `RoiAlign(x, rois, batch_index)`, `RoiAlignGrad(g, x, rois, batch_index)` | `output_height, output_width, sampling_ratio: int`, `spatial_scale: float` |
//! | [`shape`] | `Reshape` | `shape: ints` (one `-1` allowed) |
//! | [`shape`] | `Transpose` | `perm: ints` |
//! | [`shape`] | `Slice` | `starts, ends, steps, axes: ints` (numpy slice semantics, clamped) |
//! | [`shape`] | `Concat` (n inputs) | `axis: int` |
//! | [`shape`] | `Squeeze` | `axes: ints` (empty = all size-1 axes) |
//! | [`shape`] | `Gather(data, indices)` | `axis: int` |
//! | [`var_update`] | `AddInplace(t, x)`, `Accumulate(t, x[, factor])`, `ScaledAddInplace(x, y[, a, b])`, `CopyVarUpdate(t, x)`, `ScaledAddMatMulRhsGradInplace(g, x, w)` (made by a pattern) | `factor`, `a`, `b: float` |
//! | [`view`] | `ReshapeInplace TransposeInplace SliceInplace ConcatInplace` (in-place views: output aliases input), `SliceUpdateInplace(base, update)` | as `Reshape Transpose Slice Concat` (+ `num_inputs: int` for `ConcatInplace`) |
//! | [`var_update`] | `Accumulate` types, `AccumulatorScale(t[, factor])`, `SparseAccumulate(t, x[, factor], indices[, W])` | `type: str` ([`var_update::AccumulationType`]), `factor: float`, `axis: int` |
//! | [`optimizer`] | `AdamUpdater(w?, m, v, step?, wd?, beta1?, beta2?, eps?)`, `AdamVarUpdate(w, x, r1sq?, r2sq?, lr?, mwn?)`, `AdamStep(w, g, m, v, step?)` (made by a pattern) | `mode: str` ([`optimizer::AdamMode`]), `weight_decay, beta1, beta2, epsilon, learning_rate, max_weight_norm: float`; `AdamStep`: `m_factor, v_factor, a, b: float` too |
//! | [`random`] | `RandomUniform(seed)`, `RandomNormal(seed)`, `Dropout(x, seed)` | `shape, dtype, low, high, mean, std, p` |
//! | [`random`] | `ShapedDropout(x, seed)`, `ModifyRandomSeed(seed, modifier)` | `shape, ratio` |
//! | [`io`] | `HostLoad() -> t`, `HostStore(t)` | `stream: str` (name of a main-graph stream tensor) |
//! | [`remote`] | `RemoteLoad([_, offset]) -> t`, `RemoteLoadInplace(t[, offset])`, `RemoteStore(t[, offset])`, `RemoteCodeLoad` | `remote_buffer: int`, `offset: int` (or input 1: int32 or uint32 scalar); `graph`, `destination: str` |
//! | [`control`] | `Call`, `Repeat`, `If` | `graph`, `modified`, `count`, `then_graph/else_graph`, `then_inputs/else_inputs` |
//! | [`indexing`] | `Subsample`, `Split` (n outputs), `Scatter(t, indices, values)`, `ScatterReduce(data, indices[, initial_values])` | `strides`; `axis, split`; `axis`; `axis, reduction, axis_size` |
//! | [`indexing`] | `DynamicSlice(t, index)`, `DynamicUpdate(t, index, update)`, `DynamicUpdateInplace` | `axes, sizes: ints`, `no_overlap: bool` |
//! | [`indexing`] | `Onehot(indices, num_classes, values)`, `GroupedGather(data, indices)`, `TiedGather(data, indices)` | `axis, num_classes`; `axis, group_size, zero_OOR` |
//! | [`indexing_grad`] | `SubsampleGrad ScatterReduceGrad DynamicSliceGrad DynamicUpdateGrad OnehotGrad GroupedGatherGrad` | see each type |
//! | [`collectives`] | `ReplicatedAllReduce(x)`, `ReplicatedAllReduceInplace(x)`, `ReplicatedAllReduceScaledAddInplace(w, g)`, `ReplicatedScaledAddMatMulRhsGradInplace(g, x, w)`, `ReplicatedAllGather(x[, like])`, `ReplicatedReduceScatter(x[, like])`; `AllReduce(x0, .., xk-1)` | `op: str` ([`collectives::CollectiveOperator`]), `stride, group_size: int`; `shape: ints`; `rts: bool`; `ipus: ints`, `identical_inputs, identical_grad_inputs: bool` |
//! | [`grad`] | `BinaryGrad WhereGrad MatMulLhsGrad MatMulRhsGrad MatMulRhsBiasGrad ReduceGrad SoftmaxGrad SliceGrad GatherGrad NllLossGrad ReshapeGrad ConcatGrad ReduceToShape Sum Init` | see each type |

pub mod attention;
mod axes;
pub mod binary;
pub mod collectives;
pub mod control;
pub mod conv;
pub mod float8;
pub mod grad;
pub mod indexing;
pub mod indexing_grad;
pub mod io;
pub mod logical;
pub mod matmul;
pub mod nn;
pub mod norm;
pub mod optimizer;
pub mod pool;
pub mod print;
pub mod random;
pub mod reduce;
pub mod remote;
pub mod resize;
pub mod roi_align;
pub mod scan;
pub mod shape;
pub mod sort;
pub mod unary;
pub mod var_update;
pub mod view;

pub use axes::{normalize_axes, normalize_axis, AxisError};

use crate::{DataType, InferContext, IrError, OpDef, Result, TensorInfo};

/// Every builtin op type in one namespace (`ops::all::Relu`), for code that names
/// many op types (the `popxl` facade, device kernel tables).
pub mod all {
    pub use super::attention::*;
    pub use super::binary::*;
    pub use super::collectives::{
        AllReduce, ReplicatedAllGather, ReplicatedAllReduce, ReplicatedAllReduceInplace,
        ReplicatedAllReduceScaledAddInplace, ReplicatedReduceScatter, ReplicatedScaledAddMatMulRhsGradInplace,
    };
    pub use super::control::*;
    pub use super::conv::*;
    pub use super::float8::*;
    pub use super::grad::*;
    pub use super::indexing::*;
    pub use super::indexing_grad::*;
    pub use super::io::*;
    pub use super::logical::*;
    pub use super::matmul::*;
    pub use super::nn::*;
    pub use super::norm::*;
    pub use super::optimizer::*;
    pub use super::pool::*;
    pub use super::print::PrintTensor;
    pub use super::random::*;
    pub use super::reduce::*;
    pub use super::remote::{RemoteCodeLoad, RemoteLoad, RemoteLoadInplace, RemoteStore};
    pub use super::resize::{Resize, ResizeGrad};
    pub use super::roi_align::*;
    pub use super::scan::*;
    pub use super::shape::*;
    pub use super::sort::*;
    pub use super::unary::*;
    pub use super::var_update::*;
    pub use super::view::*;
}

/// Every builtin op definition.
pub(crate) fn builtin_ops() -> &'static [&'static dyn OpDef] {
    static ALL: std::sync::OnceLock<Vec<&'static dyn OpDef>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let mut v: Vec<&'static dyn OpDef> = Vec::new();
        v.extend_from_slice(unary::TABLE);
        v.extend_from_slice(unary::DIFFERENTIABLE);
        v.extend_from_slice(unary::ALL);
        v.extend_from_slice(binary::ALL);
        v.extend_from_slice(matmul::ALL);
        v.extend_from_slice(reduce::ALL);
        v.extend_from_slice(scan::ALL);
        v.extend_from_slice(sort::ALL);
        v.extend_from_slice(nn::ALL);
        v.extend_from_slice(attention::ALL);
        v.extend_from_slice(shape::ALL);
        v.extend_from_slice(var_update::ALL);
        v.extend_from_slice(optimizer::ALL);
        v.extend_from_slice(random::ALL);
        v.extend_from_slice(io::ALL);
        v.extend_from_slice(remote::ALL);
        v.extend_from_slice(control::ALL);
        v.extend_from_slice(grad::ALL);
        v.extend_from_slice(view::ALL);
        v.extend_from_slice(unary::INPLACE);
        v.extend_from_slice(logical::ALL);
        v.extend_from_slice(print::ALL);
        v.extend_from_slice(indexing::ALL);
        v.extend_from_slice(indexing_grad::ALL);
        v.extend_from_slice(conv::ALL);
        v.extend_from_slice(float8::ALL);
        v.extend_from_slice(pool::ALL);
        v.extend_from_slice(norm::ALL);
        v.extend_from_slice(resize::ALL);
        v.extend_from_slice(roi_align::ALL);
        v.extend_from_slice(collectives::ALL);
        v
    })
}

/// The numpy broadcast of two shapes, or `None` if they are incompatible.
///
/// ```
/// use popart_ir::ops::broadcast_shapes;
/// assert_eq!(broadcast_shapes(&[2, 1, 3], &[4, 1]), Some(vec![2, 4, 3]));
/// assert_eq!(broadcast_shapes(&[2], &[3]), None);
/// ```
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Report the error of a context-free check (such as [`normalize_axis`]) as an
/// inference error of the op being inferred: `.map_err(infer_error(ctx))`.
pub(crate) fn infer_error<'c, E: std::fmt::Display>(ctx: &'c InferContext<'_>) -> impl Fn(E) -> IrError + 'c {
    move |e| ctx.error(e.to_string())
}

pub(crate) fn require_float(ctx: &InferContext<'_>, info: &TensorInfo, what: &str) -> Result<()> {
    if !info.dtype.is_floating_point() {
        return Err(ctx.error(format!("{what} must be a floating point tensor, got {}", info.dtype)));
    }
    Ok(())
}

pub(crate) fn require_dtype(ctx: &InferContext<'_>, info: &TensorInfo, dtype: DataType, what: &str) -> Result<()> {
    if info.dtype != dtype {
        return Err(ctx.error(format!("{what} must be {dtype}, got {}", info.dtype)));
    }
    Ok(())
}

/// Convert an attribute list of non-negative integers into a shape.
pub(crate) fn to_shape(ctx: &InferContext<'_>, v: &[i64], what: &str) -> Result<Vec<usize>> {
    v.iter()
        .map(|&d| usize::try_from(d).map_err(|_| ctx.error(format!("{what} has a negative dimension {d}"))))
        .collect()
}

/// The shape in attribute `key` (value `v`): no negative dimension, an element
/// count that fits `usize` (the forward shapes autodiff records on gradient ops).
pub(crate) fn checked_shape(ctx: &InferContext<'_>, v: &[i64], key: &str) -> Result<Vec<usize>> {
    let shape = to_shape(ctx, v, &format!("`{key}`"))?;
    if shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).is_none() {
        return Err(ctx.error(format!("`{key}` {shape:?} has too many elements")));
    }
    Ok(shape)
}

/// Defines zero-sized op types with the given type names. Each type still needs an
/// `OpDef` impl; this only removes the boilerplate of the declarations.
macro_rules! op_types {
    ($($(#[$m:meta])* $ty:ident),* $(,)?) => {
        $( $(#[$m])* #[derive(Debug, Clone, Copy, Default)] pub struct $ty; )*
    };
}
pub(crate) use op_types;
