//! Collectives (PopXL's `popxl.ops.collectives`): reductions and gathers
//! across the replicas of a replicated program, within the groups of a
//! [`ReplicaGrouping`] (all replicas by default, PopXL's `ir.replica_grouping()`),
//! and [`all_reduce`] across the tensors of one replica (one per IPU).
//!
//! | function | op | gradient (PopART's rule) |
//! |---|---|---|
//! | [`replicated_all_reduce`], [`replicated_all_reduce_`] | `ReplicatedAllReduce(Inplace)` | none |
//! | [`replicated_all_gather`] | `ReplicatedAllGather` (plus reshapes) | the replica's own chunk of the gradient (`ReplicatedReduceScatter{op: local}`) |
//! | [`replicated_reduce_scatter`] | `ReplicatedReduceScatter` | none (PopART throws) |
//! | [`replica_sharded_slice`] | `ReplicatedReduceScatter{op: local, rts}` | `ReplicatedAllGather` of the gradient |
//! | [`replicated_slice`] | `ReplicatedReduceScatter{op: local}` (plus reshapes) | `ReplicatedAllGather` of the gradient |
//! | [`all_reduce`], [`all_reduce_identical_inputs`], [`all_reduce_identical_grad_inputs`] | `AllReduce` | with `add`: `AllReduce`, identity flags swapped |
//!
//! A gradient is per replica: the derivative of that replica's values with
//! respect to its own inputs, gathered or sliced as PopART's gradient ops do
//! (the gradient of a gathered tensor is the replica's own slice of the
//! incoming gradient, not a sum over the replicas: reduce-scatter it yourself
//! when the replicas' losses should add up).
//!
//! Reductions are computed in replica order within each group, so results do
//! not depend on thread timing. Every replica must reach the same collectives
//! in the same order: a collective inside a branch that only some replicas take
//! waits for the others forever, as on IPUs.
//!
//! Replicated tensor sharding (RTS): a reduce-scatter flattens its input, pads
//! it with zeros to a multiple of the group size and gives group member `j`
//! chunk `j`. A shard has a *meta shape* ([`Tensor::meta_shape`]), the shape
//! of the whole tensor, which [`replicated_all_gather`] restores.

use std::str::FromStr;

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::collectives::{
    AllGatherAttrs, AllReduceAttrs, CollectiveOperator, IpuAllReduceAttrs, ReduceScatterAttrs,
};
use popart_ir::ops::remote::RemoteAttrs;
use popart_ir::OpAttrs;

use super::OpBuilder;
pub use crate::ReplicaGrouping;
use crate::{PopXlError, ReplicaGroupingError, Result, Tensor};

/// How a collective reduces (PopXL's `CollectiveOps` strings; see
/// [`FromStr`]). PopXL maps `"mul"` to PopART's `Mean` by mistake; here it
/// multiplies.
///
/// ```
/// use popxl::ops::collectives::CollectiveOp;
/// assert_eq!("square_add".parse::<CollectiveOp>().unwrap(), CollectiveOp::SquareAdd);
/// assert_eq!(CollectiveOp::And.to_string(), "and");
/// assert!("sum".parse::<CollectiveOp>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CollectiveOp {
    /// Sum (`"add"`, the default).
    #[default]
    Add,
    /// Sum divided by the group size (`"mean"`; integers divide truncating).
    Mean,
    /// Product (`"mul"`).
    Mul,
    /// Minimum (`"min"`; NaN propagates).
    Min,
    /// Maximum (`"max"`; NaN propagates).
    Max,
    /// Logical and of bool tensors (`"and"`).
    And,
    /// Logical or of bool tensors (`"or"`).
    Or,
    /// Sum of squares (`"square_add"`; float tensors).
    SquareAdd,
}

impl CollectiveOp {
    /// Every operator, in PopXL's order.
    pub const ALL: [CollectiveOp; 8] =
        [Self::Add, Self::Mean, Self::Mul, Self::Min, Self::Max, Self::And, Self::Or, Self::SquareAdd];

    /// The IR's operator.
    pub fn operator(self) -> CollectiveOperator {
        match self {
            Self::Add => CollectiveOperator::Add,
            Self::Mean => CollectiveOperator::Mean,
            Self::Mul => CollectiveOperator::Mul,
            Self::Min => CollectiveOperator::Min,
            Self::Max => CollectiveOperator::Max,
            Self::And => CollectiveOperator::LogicalAnd,
            Self::Or => CollectiveOperator::LogicalOr,
            Self::SquareAdd => CollectiveOperator::SquareAdd,
        }
    }

    /// PopXL's name (`"add"`, ..., `"square_add"`).
    pub fn name(self) -> &'static str {
        self.operator().name()
    }
}

impl std::fmt::Display for CollectiveOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CollectiveOp {
    type Err = PopXlError;
    /// PopXL's strings; anything else is a [`PopXlError::UnknownName`]
    /// (PopXL's "Not a valid op" error).
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|o| o.name() == s).ok_or_else(|| PopXlError::UnknownName {
            what: "Not a valid op: collective op",
            got: s.to_string(),
            accepted: Self::ALL.iter().map(|o| o.name()).collect(),
        })
    }
}

/// The output shape of [`replicated_all_gather`] (PopXL's `output_shape`).
///
/// ```
/// use popxl::ops::collectives::AllGatherShape;
/// assert_eq!("meta_shape".parse::<AllGatherShape>().unwrap(), AllGatherShape::MetaShape);
/// assert!("flat".parse::<AllGatherShape>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AllGatherShape {
    /// `MetaShape` if the input has a meta shape, else `Concat` (the default).
    #[default]
    Auto,
    /// `(group_size, *t.shape)`: the members' tensors stacked on a new leading
    /// axis (`axis` is ignored).
    NewAxis,
    /// The members' tensors concatenated along `axis`.
    Concat,
    /// The input's meta shape: the members' shards concatenated, padding
    /// dropped, reshaped to the whole tensor's shape.
    MetaShape,
}

impl FromStr for AllGatherShape {
    type Err = PopXlError;
    /// `"auto"`, `"new_axis"`, `"concat"` or `"meta_shape"`.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Self::Auto),
            "new_axis" => Ok(Self::NewAxis),
            "concat" => Ok(Self::Concat),
            "meta_shape" => Ok(Self::MetaShape),
            _ => Err(PopXlError::UnknownName {
                what: "output_shape",
                got: s.to_string(),
                accepted: vec!["new_axis", "concat", "meta_shape", "auto"],
            }),
        }
    }
}

/// `group` (all replicas by default) checked against `t`'s IR: constant, and
/// for its replication factor.
fn group_of(t: &Tensor, group: Option<&ReplicaGrouping>, what: &str) -> Result<ReplicaGrouping> {
    let rf = t.ir()?.replication_factor();
    let rg = group.cloned().unwrap_or_else(|| ReplicaGrouping::all(rf));
    if rg.num_replicas() != rf {
        return Err(
            ReplicaGroupingError::WrongReplicationFactor { grouping: rg.num_replicas(), num_replicas: rf }.into()
        );
    }
    rg.require_const(&format!("by {what}"))?;
    Ok(rg)
}

/// The `stride` and `group_size` attributes of a collective over `rg` (a
/// constant grouping).
fn grouping(rg: &ReplicaGrouping) -> Result<(i64, i64)> {
    let (stride, group_size) = rg.require_const("by a collective")?;
    let what = || "replica grouping of a collective".to_string();
    Ok((super::to_i64(stride, what)?, super::to_i64(group_size, what)?))
}

/// A `ReplicatedAllReduce(Inplace)` of `def` on `t` over `rg`.
fn all_reduce_over(
    what: &'static str,
    def: &'static dyn popart_ir::OpDef,
    t: &Tensor,
    rg: &ReplicaGrouping,
    op: CollectiveOperator,
) -> Result<Tensor> {
    let (stride, group_size) = grouping(rg)?;
    OpBuilder::new(what, def).input(0, t).typed(&AllReduceAttrs { op, stride, group_size }).create1()
}

/// A `ReplicatedAllGather` of `t` over `rg` into `shape`.
fn all_gather(what: &'static str, t: &Tensor, rg: &ReplicaGrouping, shape: &[usize]) -> Result<Tensor> {
    let (stride, group_size) = grouping(rg)?;
    let shape = shape.iter().map(|&d| super::to_i64(d, || format!("{what} output shape"))).collect::<Result<_>>()?;
    OpBuilder::new(what, &ir_ops::ReplicatedAllGather)
        .input(0, t)
        .typed(&AllGatherAttrs { stride, group_size, shape: Some(shape) })
        .create1()
}

/// A `ReplicatedReduceScatter` of `t` over `rg`.
fn reduce_scatter(
    what: &'static str,
    t: &Tensor,
    rg: &ReplicaGrouping,
    op: CollectiveOperator,
    rts: bool,
) -> Result<Tensor> {
    let (stride, group_size) = grouping(rg)?;
    OpBuilder::new(what, &ir_ops::ReplicatedReduceScatter)
        .input(0, t)
        .typed(&ReduceScatterAttrs { op, stride, group_size, shape: None, rts })
        .create1()
}

/// Reduce `t` across the replicas of each group of `group` (op
/// `ReplicatedAllReduce`; PopXL's `replicated_all_reduce`): every member gets
/// the elementwise reduction of the members' tensors. Not differentiable.
///
/// `add`, `mean`, `mul`, `min`, `max` take float32, float16, int32 and uint32
/// tensors, `square_add` float ones, `and` and `or` bool ones.
///
/// ```
/// use popxl::ops::collectives::{replicated_all_reduce, CollectiveOp};
/// let ir = popxl::Ir::new();
/// ir.set_replication_factor(4).unwrap();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
/// let pairs = ir.replica_grouping(1, Some(2)).unwrap(); // replicas {0, 1}, {2, 3}
/// let y = replicated_all_reduce(&x, CollectiveOp::Add, Some(&pairs)).unwrap();
/// assert_eq!(y.shape(), &[2]);
/// let b = popxl::constant(vec![true, false], "b").unwrap();
/// assert!(replicated_all_reduce(&b, CollectiveOp::Add, None).is_err()); // add needs numbers
/// ```
pub fn replicated_all_reduce(t: &Tensor, op: CollectiveOp, group: Option<&ReplicaGrouping>) -> Result<Tensor> {
    let what = "replicated_all_reduce";
    let rg = group_of(t, group, what)?;
    all_reduce_over(what, &ir_ops::ReplicatedAllReduce, t, &rg, op.operator())
}

/// [`replicated_all_reduce`] in place on `t` (op `ReplicatedAllReduceInplace`;
/// PopXL's `replicated_all_reduce_`). Returns `t` updated.
///
/// ```
/// use popxl::ops::collectives::{replicated_all_reduce_, CollectiveOp};
/// let ir = popxl::Ir::new();
/// ir.set_replication_factor(2).unwrap();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
/// let y = replicated_all_reduce_(&x, CollectiveOp::Mean, None).unwrap();
/// assert_eq!(y.spec(), x.spec());
/// ```
pub fn replicated_all_reduce_(t: &Tensor, op: CollectiveOp, group: Option<&ReplicaGrouping>) -> Result<Tensor> {
    let what = "replicated_all_reduce_";
    let rg = group_of(t, group, what)?;
    all_reduce_over(what, &ir_ops::ReplicatedAllReduceInplace, t, &rg, op.operator())
}

/// The permutation bringing `axis` to the front.
fn axis_first(rank: usize, axis: usize) -> Vec<i64> {
    std::iter::once(axis).chain((0..rank).filter(|&d| d != axis)).map(|d| d as i64).collect()
}

/// The inverse of [`axis_first`].
fn axis_back(rank: usize, axis: usize) -> Vec<i64> {
    (0..rank)
        .map(|d| {
            if d == axis {
                0
            } else if d < axis {
                d as i64 + 1
            } else {
                d as i64
            }
        })
        .collect()
}

fn normalize_axis(t: &Tensor, axis: i64, what: &str) -> Result<usize> {
    popart_ir::ops::normalize_axis(axis, t.rank()).map_err(|source| PopXlError::AxisOutOfRange {
        what: format!("{what}: tensor `{}` {}", t.name(), t.info()),
        source,
    })
}

/// Gather `t` across the replicas of each group of `group` (op
/// `ReplicatedAllGather`; PopXL's `replicated_all_gather`): every member gets
/// the members' tensors, in replica order, shaped by `output_shape`:
/// - [`AllGatherShape::Concat`]: concatenated along `axis` (negative counts
///   from the end);
/// - [`AllGatherShape::NewAxis`]: stacked, `(group_size, *t.shape)`;
/// - [`AllGatherShape::MetaShape`]: the shards of a sharded tensor, padding
///   dropped, in `t`'s meta shape;
/// - [`AllGatherShape::Auto`]: `MetaShape` if `t` has a meta shape, else `Concat`.
///
/// Its gradient is each replica's own part of the incoming gradient.
///
/// ```
/// use popxl::ops::collectives::{replicated_all_gather, replica_sharded_slice, AllGatherShape};
/// let ir = popxl::Ir::new();
/// ir.set_replication_factor(4).unwrap();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(ndarray::Array2::<f32>::ones((2, 3)), "x").unwrap();
/// assert_eq!(replicated_all_gather(&x, 0, None, AllGatherShape::Auto).unwrap().shape(), &[8, 3]);
/// assert_eq!(replicated_all_gather(&x, -1, None, AllGatherShape::Concat).unwrap().shape(), &[2, 12]);
/// assert_eq!(replicated_all_gather(&x, 0, None, AllGatherShape::NewAxis).unwrap().shape(), &[4, 2, 3]);
/// // A sharded tensor gathers back into its meta shape.
/// let shard = replica_sharded_slice(&x, None).unwrap();
/// assert_eq!(shard.shape(), &[2]);
/// assert_eq!(replicated_all_gather(&shard, 0, None, AllGatherShape::Auto).unwrap().shape(), &[2, 3]);
/// ```
pub fn replicated_all_gather(
    t: &Tensor,
    axis: i64,
    group: Option<&ReplicaGrouping>,
    output_shape: AllGatherShape,
) -> Result<Tensor> {
    let what = "replicated_all_gather";
    let rg = group_of(t, group, what)?;
    let g = rg.group_size();
    let mode = match output_shape {
        AllGatherShape::Auto if t.meta_shape()?.is_some() => AllGatherShape::MetaShape,
        AllGatherShape::Auto => AllGatherShape::Concat,
        m => m,
    };
    match mode {
        AllGatherShape::MetaShape => {
            let meta = t.meta_shape()?.ok_or_else(|| PopXlError::NoMetaShape { what, tensor: t.name().to_string() })?;
            all_gather(what, t, &rg, &meta)
        }
        AllGatherShape::NewAxis => {
            let flat = t.flatten()?;
            let shape: Vec<usize> = std::iter::once(g).chain(t.shape().iter().copied()).collect();
            all_gather(what, &flat, &rg, &shape)
        }
        _ => {
            let axis = normalize_axis(t, axis, what)?;
            let front = if axis > 0 { t.transpose(&axis_first(t.rank(), axis))? } else { t.clone() };
            let mut shape = front.shape().to_vec();
            shape[0] = shape[0].checked_mul(g).ok_or_else(|| PopXlError::IntegerOutOfRange {
                what: format!("{what}: gathered dimension of tensor `{}`", t.name()),
                value: format!("{} * {g}", shape[0]),
                ty: "usize",
            })?;
            let flat = front.flatten()?;
            let y = all_gather(what, &flat, &rg, &shape)?;
            if axis > 0 {
                y.transpose(&axis_back(t.rank(), axis))
            } else {
                Ok(y)
            }
        }
    }
}

/// Reduce `t` across the replicas of each group and give each member one shard
/// of the result (op `ReplicatedReduceScatter`; PopXL's
/// `replicated_reduce_scatter`): `t` is flattened and padded with zeros to a
/// multiple of the group size; member `j` gets chunk `j`, a 1-D tensor of
/// `ceil(nelms / group_size)` elements. With
/// `configure_output_for_replicated_tensor_sharding` the output is a sharded
/// tensor whose meta shape is `t`'s shape. Not differentiable (PopART has no
/// gradient for a reducing reduce-scatter).
///
/// ```
/// use popxl::ops::collectives::{replicated_reduce_scatter, CollectiveOp};
/// let ir = popxl::Ir::new();
/// ir.set_replication_factor(4).unwrap();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(vec![1.0f32; 10], "x").unwrap();
/// let y = replicated_reduce_scatter(&x, CollectiveOp::Add, None, true).unwrap();
/// assert_eq!(y.shape(), &[3]);
/// assert_eq!(y.meta_shape().unwrap(), Some(vec![10]));
/// ```
pub fn replicated_reduce_scatter(
    t: &Tensor,
    op: CollectiveOp,
    group: Option<&ReplicaGrouping>,
    configure_output_for_replicated_tensor_sharding: bool,
) -> Result<Tensor> {
    let what = "replicated_reduce_scatter";
    let rg = group_of(t, group, what)?;
    reduce_scatter(what, t, &rg, op.operator(), configure_output_for_replicated_tensor_sharding)
}

/// The replica's shard of `t` (op `ReplicatedReduceScatter{op: local, rts}`;
/// PopXL's `replica_sharded_slice`): `t` flattened and padded with zeros to a
/// multiple of the group size, member `j` of each group taking chunk `j`. The
/// shard's meta shape is `t`'s shape. Its gradient gathers the shards'
/// gradients into `t`'s shape.
///
/// ```
/// use popxl::ops::collectives::replica_sharded_slice;
/// let ir = popxl::Ir::new();
/// ir.set_replication_factor(2).unwrap();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(ndarray::Array2::<f32>::ones((3, 3)), "x").unwrap();
/// let s = replica_sharded_slice(&x, None).unwrap();
/// assert_eq!((s.shape(), s.meta_shape().unwrap()), (&[5][..], Some(vec![3, 3])));
/// ```
pub fn replica_sharded_slice(t: &Tensor, group: Option<&ReplicaGrouping>) -> Result<Tensor> {
    let what = "replica_sharded_slice";
    let rg = group_of(t, group, what)?;
    reduce_scatter(what, t, &rg, CollectiveOperator::Local, true)
}

/// The replica's equal slice of `t` along `axis` (PopXL's `replicated_slice`):
/// member `j` of each group of `group` takes `t[.., j*k:(j+1)*k, ..]`, `k =
/// t.shape[axis] / group_size` (which must divide). As in PopXL, when `k` is 1
/// the axis is dropped. Its gradient gathers the slices' gradients (a
/// `ReplicatedAllGather`).
///
/// ```
/// use popxl::ops::collectives::replicated_slice;
/// let ir = popxl::Ir::new();
/// ir.set_replication_factor(2).unwrap();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(ndarray::Array2::<f32>::ones((3, 4)), "x").unwrap();
/// assert_eq!(replicated_slice(&x, 1, None).unwrap().shape(), &[3, 2]);
/// assert!(replicated_slice(&x, 0, None).is_err()); // 3 rows over 2 replicas
/// ```
pub fn replicated_slice(t: &Tensor, axis: i64, group: Option<&ReplicaGrouping>) -> Result<Tensor> {
    let what = "replicated_slice";
    let rg = group_of(t, group, what)?;
    let g = rg.group_size();
    let axis = normalize_axis(t, axis, what)?;
    let len = t.shape()[axis];
    if !len.is_multiple_of(g) {
        return Err(PopXlError::NotDivisible {
            what: format!(
                "Replicated slice must equally divide axis {axis} of tensor `{}` into the replica group size: axis size",
                t.name()
            ),
            len,
            divisor: g,
        });
    }
    let front = if axis > 0 { t.transpose(&axis_first(t.rank(), axis))? } else { t.clone() };
    let flat = front.flatten()?;
    let shard = reduce_scatter(what, &flat, &rg, CollectiveOperator::Local, false)?;
    let mut shape: Vec<i64> = front.shape().iter().map(|&d| d as i64).collect();
    if len / g == 1 {
        // The axis is dropped; the other dims keep their order.
        shape.remove(0);
        return shard.reshape(&shape);
    }
    shape[0] = (len / g) as i64;
    let y = shard.reshape(&shape)?;
    if axis > 0 {
        y.transpose(&axis_back(t.rank(), axis))
    } else {
        Ok(y)
    }
}

/// The IPUs of `ts`: `ipus` if given (one per tensor), else each tensor's IPU.
fn ipus_of(ts: &[&Tensor], ipus: Option<&[u32]>, what: &'static str) -> Result<Vec<i64>> {
    let ipus: Vec<u32> = match ipus {
        Some(v) => v.to_vec(),
        None => ts.iter().map(|t| t.ipu()).collect::<Result<_>>()?,
    };
    if ipus.len() != ts.len() {
        return Err(PopXlError::LengthMismatch {
            what,
            left: ts.len(),
            left_name: "tensors",
            right: ipus.len(),
            right_name: "IPUs",
        });
    }
    Ok(ipus.into_iter().map(i64::from).collect())
}

fn all_reduce_op(
    what: &'static str,
    ts: &[&Tensor],
    ipus: Option<&[u32]>,
    op: CollectiveOp,
    identical_inputs: bool,
    identical_grad_inputs: bool,
) -> Result<Vec<Tensor>> {
    if ts.is_empty() {
        return Err(PopXlError::EmptyArgument { what, expected: "at least one tensor" });
    }
    let ipus = ipus_of(ts, ipus, what)?;
    let mut b = OpBuilder::new(what, &ir_ops::AllReduce).mixed_placement().typed(&IpuAllReduceAttrs {
        op: op.operator(),
        ipus,
        identical_inputs,
        identical_grad_inputs,
    });
    for (i, t) in ts.iter().enumerate() {
        b = b.input(i as u32, t);
    }
    b.create_all()
}

/// Reduce tensors across the IPUs of one replica (op `AllReduce`; PopXL's
/// `all_reduce`): `ts` holds one tensor per IPU, all of one type and shape;
/// each output is the reduction of all of them (in list order) and belongs to
/// the IPU of its input. `ipus` defaults to the tensors' IPUs ([`Tensor::ipu`]).
/// Differentiable with [`CollectiveOp::Add`]: the gradients are all-reduced.
///
/// ```
/// use popxl::ops::collectives::{all_reduce, CollectiveOp};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::variable(vec![1.0f32, 2.0], "a").unwrap();
/// let b = popxl::variable(vec![3.0f32, 4.0], "b").unwrap();
/// let ys = all_reduce(&[&a, &b], Some(&[0, 1]), CollectiveOp::Add).unwrap();
/// assert_eq!(ys.len(), 2);
/// assert!(all_reduce(&[&a, &b], None, CollectiveOp::Add).is_err()); // no IPU set
/// ```
pub fn all_reduce(ts: &[&Tensor], ipus: Option<&[u32]>, op: CollectiveOp) -> Result<Vec<Tensor>> {
    all_reduce_op("all_reduce", ts, ipus, op, false, false)
}

/// [`all_reduce`] of tensors known to be identical (PopXL's
/// `all_reduce_identical_inputs`): each output is its input (PopART's
/// `AllReduceToIdentityPattern`), and the gradient is the all-reduce of the
/// outputs' gradients.
///
/// ```
/// use popxl::ops::collectives::{all_reduce_identical_inputs, CollectiveOp};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::variable(vec![1.0f32, 2.0], "a").unwrap();
/// let ys = all_reduce_identical_inputs(&[&a, &a], Some(&[0, 1]), CollectiveOp::Add).unwrap();
/// assert_eq!(ys[1].shape(), &[2]);
/// ```
pub fn all_reduce_identical_inputs(ts: &[&Tensor], ipus: Option<&[u32]>, op: CollectiveOp) -> Result<Vec<Tensor>> {
    all_reduce_op("all_reduce_identical_inputs", ts, ipus, op, true, false)
}

/// [`all_reduce`] whose gradients are known to be identical (PopXL's
/// `all_reduce_identical_grad_inputs`): the forward op is the all-reduce and
/// each input's gradient is its output's gradient.
///
/// ```
/// use popxl::ops::collectives::{all_reduce_identical_grad_inputs, CollectiveOp};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::variable(vec![1.0f32, 2.0], "a").unwrap();
/// let b = popxl::variable(vec![3.0f32, 4.0], "b").unwrap();
/// let ys = all_reduce_identical_grad_inputs(&[&a, &b], Some(&[0, 1]), CollectiveOp::Add).unwrap();
/// assert_eq!(ys.len(), 2);
/// ```
pub fn all_reduce_identical_grad_inputs(ts: &[&Tensor], ipus: Option<&[u32]>, op: CollectiveOp) -> Result<Vec<Tensor>> {
    all_reduce_op("all_reduce_identical_grad_inputs", ts, ipus, op, false, true)
}

impl Tensor {
    /// The meta shape of a replica-sharded tensor (PopXL's `Tensor.meta_shape`):
    /// the shape of the whole tensor a 1-D shard is part of; `None` for other
    /// tensors. Sharded tensors are the outputs of [`replica_sharded_slice`] and
    /// of [`replicated_reduce_scatter`] with
    /// `configure_output_for_replicated_tensor_sharding`, replica-sharded
    /// variables ([`crate::replica_sharded_variable`]) and remote loads of
    /// remote replica-sharded variables; the meta shape carries over to tensors
    /// that alias a sharded tensor (in-place updates, views) or all-reduce it.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// ir.set_replication_factor(2).unwrap();
    /// let _g = ir.main_graph().enter();
    /// let (_, w) = popxl::replica_sharded_variable(vec![1.0f32; 5], "w", None, None, popxl::RetrievalMode::OnePerGroup).unwrap();
    /// assert_eq!(w.meta_shape().unwrap(), Some(vec![5]));
    /// let one = popxl::constant(vec![1.0f32; 3], "one").unwrap();
    /// let w2 = popxl::ops::add_(&w, &one).unwrap();
    /// assert_eq!(w2.meta_shape().unwrap(), Some(vec![5]));
    /// assert_eq!(one.meta_shape().unwrap(), None);
    /// ```
    pub fn meta_shape(&self) -> Result<Option<Vec<usize>>> {
        let state = self.graph().state()?;
        let st = state.borrow();
        let ir = &st.ir;
        let g = ir.graph(self.graph_id())?;
        let mut t = self.tensor_id();
        // Each step goes to the producer's input: at most one step per op.
        for _ in 0..=g.ops().count() {
            if let Some(s) = ir.variable_settings(t).filter(|s| s.shard_over.is_some()) {
                return Ok(Some(s.value_shape().to_vec()));
            }
            let tensor = g.tensor(t)?;
            let Some(port) = tensor.producer() else { return Ok(None) };
            let op = g.op(port.op)?;
            if op.is::<ir_ops::ReplicatedReduceScatter>() {
                let rts = ReduceScatterAttrs::of(op)?.rts;
                return match op.input(0) {
                    Some(x) if rts => Ok(Some(g.tensor(x)?.info.shape.clone())),
                    _ => Ok(None),
                };
            }
            if op.is::<ir_ops::RemoteLoad>() || op.is::<ir_ops::RemoteLoadInplace>() {
                if let Some(shape) = remote_meta_shape(ir, op) {
                    return Ok(Some(shape));
                }
            }
            let through = op.is::<ir_ops::ReplicatedAllReduce>()
                || op.is::<ir_ops::ReplicatedAllReduceInplace>()
                || op.alias_pairs().contains(&(0, port.index));
            match op.input(0) {
                Some(x) if through && g.tensor(x)?.info == tensor.info => t = x,
                _ => return Ok(None),
            }
        }
        Ok(None)
    }
}

/// The meta shape of what a remote load reads: the value shape of the
/// replica-sharded remote variable at its (constant) buffer entry.
fn remote_meta_shape(ir: &popart_ir::Ir, op: &popart_ir::Op) -> Option<Vec<usize>> {
    let RemoteAttrs { remote_buffer: buffer, offset } = RemoteAttrs::of(op).ok()?;
    let entry = offset?;
    ir.remote_variables()
        .filter(|(_, slot)| i64::from(slot.buffer.0) == buffer && slot.entry as i64 == entry)
        .find_map(|(v, _)| ir.variable_settings(v).filter(|s| s.shard_over.is_some()))
        .map(|s| s.value_shape().to_vec())
}
