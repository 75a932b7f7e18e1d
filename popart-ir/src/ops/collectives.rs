//! Collectives: reductions and gathers across the replicas of a replicated
//! program (PopART's `ReplicatedAllReduceOp`, `ReplicatedAllGatherOp`,
//! `ReplicatedReduceScatterOp`) and across the IPUs of one replica
//! (`AllReduceOp`).
//!
//! A replica collective acts within the groups of a constant [`ReplicaGrouping`]
//! of the IR's `replication_factor` replicas, stored as the integer attributes
//! `stride` and `group_size` (both required; inference checks that they
//! partition the replicas, so changing the replication factor afterwards makes
//! the IR fail verification). The members of a group are taken in increasing
//! replica order, which is also the order of every reduction: results do not
//! depend on timing.
//!
//! Shapes follow PopART's replicated tensor sharding (RTS) layout: a
//! reduce-scatter flattens its input of `n` elements, pads it with zeros to a
//! multiple of the group size `g` and gives group member `j` chunk `j`, a 1-D
//! tensor of `ceil(n / g)` elements; an all-gather concatenates the flattened
//! inputs of the members in member order.
//!
//! Like PopART, collectives have no side effect: every replica runs the same
//! program, so pruning an unused one removes it from every replica.
//!
//! Gradient rules (PopART's `getGradOps`):
//! - `ReplicatedAllReduce(Inplace)`: none (PopART defines no gradient op).
//! - `ReplicatedAllGather`: `ReplicatedReduceScatter{op: local}` of the output
//!   gradient over the same group (`ReplicatedAllGatherOp::getGradOps`): each
//!   replica takes its own chunk, the derivative of its own loss with respect
//!   to its own input.
//! - `ReplicatedReduceScatter`: with `op: local` only, `ReplicatedAllGather` of
//!   the output gradient over the same group; any other op has no gradient
//!   (PopART throws).
//! - `AllReduce`: with `op: add` only, an `AllReduce` of the output gradients with
//!   `identical_inputs` and `identical_grad_inputs` swapped (`AllReduceGradOp`).
//!
//! The gradient ops take the output gradient only, as PopART's do: the forward
//! input's shape is their attribute `shape` (from the gradient rule's context), so the gradient
//! of a non-1-D input, or of a padded shard, has the forward input's shape and
//! the gradient graph asks for no forward tensor.

use super::grad::spec;
use super::op_types;
use crate::{
    op_attrs, Alias, AttrSpec, AttrValue, Attributes, DataType, GradRule, GradSource, InferContext, OpAttrs, OpDef,
    ReplicaGrouping, Result, TensorInfo,
};

op_attrs! {
    /// Attributes of `ReplicatedAllReduce` and its in-place variant.
    #[derive(Clone, Debug, PartialEq)]
    pub struct AllReduceAttrs {
        /// The operator.
        pub op: CollectiveOperator = CollectiveOperator::Add,
        /// Replica grouping stride.
        pub stride: i64,
        /// Replica group size.
        pub group_size: i64,
    }
}

op_attrs! {
    /// Attributes of the fused data-parallel updates.
    #[derive(Clone, Debug, PartialEq)]
    pub struct AllReduceUpdateAttrs {
        /// The operator.
        pub op: CollectiveOperator = CollectiveOperator::Add,
        /// Replica grouping stride.
        pub stride: i64,
        /// Replica group size.
        pub group_size: i64,
        /// Scale of the reduced gradient.
        pub b: f64,
    }
}

op_attrs! {
    /// Attributes of `ReplicatedAllGather`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct AllGatherAttrs {
        /// Replica grouping stride.
        pub stride: i64,
        /// Replica group size.
        pub group_size: i64,
        /// The gathered tensor's shape.
        pub shape: Option<Vec<i64>> = None,
    }
}

op_attrs! {
    /// Attributes of `ReplicatedReduceScatter`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ReduceScatterAttrs {
        /// The operator.
        pub op: CollectiveOperator = CollectiveOperator::Add,
        /// Replica grouping stride.
        pub stride: i64,
        /// Replica group size.
        pub group_size: i64,
        /// The reduced tensor's shape.
        pub shape: Option<Vec<i64>> = None,
        /// Replicated tensor sharding.
        pub rts: bool = false,
    }
}

op_attrs! {
    /// Attributes of `AllReduce` (across IPUs).
    #[derive(Clone, Debug, PartialEq)]
    pub struct IpuAllReduceAttrs {
        /// The operator.
        pub op: CollectiveOperator = CollectiveOperator::Add,
        /// The IPU of each input.
        pub ipus: Vec<i64>,
        /// Inputs hold one value.
        pub identical_inputs: bool = false,
        /// Gradient inputs hold one value.
        pub identical_grad_inputs: bool = false,
    }
}

op_types!(
    /// `ReplicatedAllReduce{op, stride, group_size}(x) -> y`: every member of a
    /// group gets the reduction (attribute `op`, see [`CollectiveOperator`]) of
    /// the group's inputs, elementwise (PopXL `replicated_all_reduce`). Not
    /// differentiable.
    ReplicatedAllReduce,
    /// `ReplicatedAllReduceInplace{op, stride, group_size}(x) -> x`: as
    /// [`ReplicatedAllReduce`], writing the result into `x` (PopXL
    /// `replicated_all_reduce_`).
    ReplicatedAllReduceInplace,
    /// `ReplicatedAllReduceScaledAddInplace{op, stride, group_size, b}(w, g) -> w`:
    /// `w += b * reduce(g)`, the reduction (`op`: add or mean) over the group
    /// as [`ReplicatedAllReduce`]. Created by the `fuse-all-reduce-update`
    /// pattern from a `ReplicatedAllReduce(Inplace)` whose only reader is a
    /// `ScaledAddInplace{a: 1, b}` (data-parallel SGD): the reduced gradient is
    /// never stored and the update needs no separate pass.
    ReplicatedAllReduceScaledAddInplace,
    /// `ReplicatedScaledAddMatMulRhsGradInplace{op, stride, group_size, b}(g, x, w) -> w`:
    /// `w += b * reduce(MatMulRhsGrad(g, x, w))`, the reduction (`op`: add or
    /// mean) over the group as [`ReplicatedAllReduce`]; `w` has rank 1 or 2.
    /// Created by the `fuse-weight-update` pattern from a
    /// [`ReplicatedAllReduceScaledAddInplace`] whose gradient is a
    /// `MatMulRhsGrad` in a called graph: each member computes its rows of the
    /// reduced product from every member's `x` and `g` and adds them into every
    /// member's `w`, so no gradient is ever stored. Lowering marks the call
    /// `weight_invariant` (`popart_lower::KernelCall`) when every member's `w`
    /// holds the same value before the update (weights only such updates
    /// write); in a group of two, a member then updates its own rows once and
    /// copies them to the other member.
    ReplicatedScaledAddMatMulRhsGradInplace,
    /// `ReplicatedAllGather{stride, group_size[, shape]}(x) -> y`: the
    /// concatenation of the flattened inputs of the group's members, in member
    /// order (PopXL `replicated_all_gather`). The output has attribute `shape`
    /// (PopART's gathered output info; autodiff sets the forward input's) when
    /// set, else `[group_size * n]`. An output of `m` elements takes the first `m`
    /// of the concatenation, where `ceil(m / group_size) == n`: gathering
    /// padded RTS shards into their meta shape drops the padding.
    ReplicatedAllGather,
    /// `ReplicatedReduceScatter{op, stride, group_size[, rts, shape]}(x) -> y`:
    /// `x` flattened and zero-padded to a multiple of `group_size`, reduced over
    /// the group (attribute `op`; `local` takes the replica's own input), member
    /// `j` getting chunk `j`: `[ceil(n / group_size)]`, or attribute `shape`
    /// (same element count; autodiff sets the forward input's) when set. PopXL
    /// `replicated_reduce_scatter`, `replica_sharded_slice` (`op: local`, `rts:
    /// true`) and `replicated_slice`. Attribute `rts` (PopART's
    /// `configureOutputForReplicatedTensorSharding`, default false) marks the
    /// output as a sharded tensor whose meta shape is `x`'s shape.
    ReplicatedReduceScatter,
    /// `AllReduce{op, ipus, identical_inputs, identical_grad_inputs}(x0, .., xk-1)
    /// -> (y0, .., yk-1)`: each output is the reduction (attribute `op`) of all
    /// inputs, one per IPU of one replica (PopXL `all_reduce`). Attribute `ipus`
    /// (ints, one per input) names the IPU of each input and output. With
    /// `identical_inputs` (PopXL `all_reduce_identical_inputs`) the inputs are
    /// known to be equal and each output is its input (PopART's
    /// `AllReduceToIdentityPattern`); its gradient is the all-reduce. With
    /// `identical_grad_inputs` the gradient is the identity.
    AllReduce,
);

crate::attr_enum! {
    /// How a collective combines values (PopART's `CollectiveOperator`; attribute
    /// `op`, by [`CollectiveOperator::name`]: PopXL's name or `local`).
    ///
    /// ```
    /// use popart_ir::ops::collectives::CollectiveOperator;
    /// assert_eq!(CollectiveOperator::SquareAdd.name(), "square_add");
    /// assert_eq!(CollectiveOperator::from_name("and"), Some(CollectiveOperator::LogicalAnd));
    /// assert_eq!(CollectiveOperator::from_name("sum"), None);
    /// ```
    pub enum CollectiveOperator {
        /// Sum.
        Add = "add",
        /// Sum divided by the number of values.
        Mean = "mean",
        /// Product.
        Mul = "mul",
        /// Minimum (NaN propagates).
        Min = "min",
        /// Maximum (NaN propagates).
        Max = "max",
        /// Logical and (bool).
        LogicalAnd = "and",
        /// Logical or (bool).
        LogicalOr = "or",
        /// Sum of squares.
        SquareAdd = "square_add",
        /// No reduction: each replica keeps its own values (reduce-scatter only).
        Local = "local",
    }
}

impl CollectiveOperator {
    /// Every operator, in PopART's order.
    pub const ALL: [CollectiveOperator; 9] = [
        Self::Add,
        Self::Mean,
        Self::Mul,
        Self::Min,
        Self::Max,
        Self::LogicalAnd,
        Self::LogicalOr,
        Self::SquareAdd,
        Self::Local,
    ];

    /// Whether the operator applies to elements of `dtype`: `and` and `or` to
    /// bool; `square_add` to float32 and float16; the other reductions to
    /// PopART's collective types (float32, float16, int32, uint32); `local`
    /// (which only moves data) to every type.
    pub fn supports(self, dtype: DataType) -> bool {
        use DataType::*;
        match self {
            Self::LogicalAnd | Self::LogicalOr => dtype == Bool,
            Self::SquareAdd => matches!(dtype, Float32 | Float16),
            Self::Add | Self::Mean | Self::Mul | Self::Min | Self::Max => {
                matches!(dtype, Float32 | Float16 | Int32 | Uint32)
            }
            Self::Local => true,
        }
    }
}

impl std::fmt::Display for CollectiveOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The attributes of a collective over `grouping` (`stride`, `group_size`).
///
/// ```
/// use popart_ir::{ops::collectives::{grouping_attrs, AllGatherAttrs}, OpAttrs, ReplicaGrouping};
/// let a = AllGatherAttrs::from_attrs(&grouping_attrs(&ReplicaGrouping::new(8, 2, 4).unwrap()).unwrap()).unwrap();
/// assert_eq!((a.stride, a.group_size), (2, 4));
/// assert!(grouping_attrs(&ReplicaGrouping::from_assignment(4, &[0, 1, 1, 0]).unwrap()).is_err());
/// ```
pub fn grouping_attrs(grouping: &ReplicaGrouping) -> std::result::Result<Attributes, crate::ReplicaGroupingError> {
    let (stride, group_size) = grouping.require_const("by a collective")?;
    Ok(Attributes::new()
        .with("stride", AttrValue::Int(stride as i64))
        .with("group_size", AttrValue::Int(group_size as i64)))
}

/// The replica grouping of a collective's `stride` and `group_size`, checked
/// against the IR's replication factor (an inference error naming the op otherwise).
pub fn grouping_of(ctx: &InferContext<'_>, stride: i64, group_size: i64) -> Result<ReplicaGrouping> {
    let positive = |key: &str, v: i64| -> Result<usize> {
        usize::try_from(v).map_err(|_| ctx.error(format!("`{key}` must be positive, got {v}")))
    };
    let (stride, group_size) = (positive("stride", stride)?, positive("group_size", group_size)?);
    let rf = ctx.ir.replication_factor;
    ReplicaGrouping::new(rf, stride, group_size).map_err(|e| {
        ctx.error(format!(
            "stride {stride} and group size {group_size} are not a replica grouping of the IR's {rf} replicas: {e}"
        ))
    })
}

/// The operator `op`, checked against the element type.
fn operator_of(
    ctx: &InferContext<'_>,
    op: CollectiveOperator,
    dtype: DataType,
    allow_local: bool,
) -> Result<CollectiveOperator> {
    if op == CollectiveOperator::Local && !allow_local {
        return Err(ctx.error("`op` local is only valid for a reduce-scatter"));
    }
    if !op.supports(dtype) {
        return Err(ctx.error(format!("collective operator `{op}` does not support {dtype} tensors")));
    }
    Ok(op)
}

/// Elements per member of a reduce-scatter of `n` elements over `group_size`.
pub fn shard_len(n: usize, group_size: usize) -> usize {
    n.div_ceil(group_size.max(1))
}

/// The attributes of a fused data-parallel update: a grouping, `op` add or
/// mean, and the float `b`.
fn check_update_attrs(ctx: &InferContext<'_>, dtype: DataType) -> Result<()> {
    let a = AllReduceUpdateAttrs::infer(ctx)?;
    grouping_of(ctx, a.stride, a.group_size)?;
    let op = operator_of(ctx, a.op, dtype, false)?;
    if !matches!(op, CollectiveOperator::Add | CollectiveOperator::Mean) {
        return Err(ctx.error(format!("`op` must be add or mean, got {op}")));
    }
    Ok(())
}

fn infer_all_reduce(ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let a = AllReduceAttrs::infer(ctx)?;
    grouping_of(ctx, a.stride, a.group_size)?;
    operator_of(ctx, a.op, x.dtype, false)?;
    Ok(vec![x.clone()])
}

impl OpDef for ReplicatedAllReduce {
    fn op_type(&self) -> &'static str {
        "ReplicatedAllReduce"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        AllReduceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        infer_all_reduce(ctx)
    }
}

impl OpDef for ReplicatedAllReduceInplace {
    fn op_type(&self) -> &'static str {
        "ReplicatedAllReduceInplace"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        AllReduceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        infer_all_reduce(ctx)
    }
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::modified(0, 0)]
    }
}

impl OpDef for ReplicatedAllReduceScaledAddInplace {
    fn op_type(&self) -> &'static str {
        "ReplicatedAllReduceScaledAddInplace"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        AllReduceUpdateAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (w, g) = (ctx.input(0)?, ctx.input(1)?);
        check_update_attrs(ctx, g.dtype)?;
        if w != g || !w.dtype.is_floating_point() {
            return Err(ctx.error(format!("the weight {w} and the gradient {g} must be the same float type")));
        }
        Ok(vec![w.clone()])
    }
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::modified(0, 0)]
    }
}

impl OpDef for ReplicatedScaledAddMatMulRhsGradInplace {
    fn op_type(&self) -> &'static str {
        "ReplicatedScaledAddMatMulRhsGradInplace"
    }
    /// As `ScaledAddMatMulRhsGradInplace` (the reduction is not counted).
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.matrix(ctx.input_elements(0).saturating_mul(ctx.input_last_dim(1)))
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        AllReduceUpdateAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let w = ctx.input(2)?;
        check_update_attrs(ctx, w.dtype)?;
        if !(1..=2).contains(&w.shape.len()) {
            return Err(ctx.error(format!("the weight {w} must have rank 1 or 2")));
        }
        super::var_update::infer_rhs_grad_update(ctx)
    }
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::modified(2, 0)]
    }
}

/// `shape`, checked.
fn shape_attr(ctx: &InferContext<'_>, shape: &Option<Vec<i64>>) -> Result<Option<Vec<usize>>> {
    shape.as_ref().map(|v| super::to_shape(ctx, v, "`shape`")).transpose()
}

impl OpDef for ReplicatedAllGather {
    fn op_type(&self) -> &'static str {
        "ReplicatedAllGather"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        AllGatherAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let a = AllGatherAttrs::infer(ctx)?;
        let g = grouping_of(ctx, a.stride, a.group_size)?.group_size();
        let n = x.nelms();
        let shape = match shape_attr(ctx, &a.shape)? {
            Some(shape) => shape,
            None => {
                let m = n.checked_mul(g).ok_or_else(|| ctx.error("the gathered tensor is too large"))?;
                vec![m]
            }
        };
        let out = TensorInfo::new(x.dtype, shape);
        let m = out.checked_nelms().ok_or_else(|| ctx.error(format!("output shape {:?} is too large", out.shape)))?;
        if shard_len(m, g) != n {
            return Err(ctx.error(format!(
                "cannot gather {n} elements from each of {g} replicas into shape {:?} ({m} elements): \
                 it needs ceil({m} / {g}) = {} elements per replica",
                out.shape,
                shard_len(m, g)
            )));
        }
        Ok(vec![out])
    }
    /// `ReplicatedReduceScatter{op: local, stride, group_size, shape: x's}(g)`.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let (Ok(a), Some(shape)) = (AllGatherAttrs::of(op), cx.input_shape(0)) else { return GradRule::None };
        let attrs = ReduceScatterAttrs {
            op: CollectiveOperator::Local,
            stride: a.stride,
            group_size: a.group_size,
            shape: Some(shape),
            rts: false,
        }
        .to_attrs();
        let inputs = [(0, GradSource::GradOfOutput(0))];
        GradRule::Ops(vec![spec(&ReplicatedReduceScatter, attrs, &inputs, &[(0, 0)])])
    }
}

impl OpDef for ReplicatedReduceScatter {
    fn op_type(&self) -> &'static str {
        "ReplicatedReduceScatter"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ReduceScatterAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let a = ReduceScatterAttrs::infer(ctx)?;
        let g = grouping_of(ctx, a.stride, a.group_size)?.group_size();
        operator_of(ctx, a.op, x.dtype, true)?;
        let c = shard_len(x.nelms(), g);
        match shape_attr(ctx, &a.shape)? {
            Some(shape) if shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) != Some(c) => {
                Err(ctx.error(format!("each replica gets {c} elements of {x}, not the {shape:?} of attribute `shape`")))
            }
            Some(shape) => Ok(vec![TensorInfo::new(x.dtype, shape)]),
            None => Ok(vec![TensorInfo::new(x.dtype, [c])]),
        }
    }
    /// With `op: local`, `ReplicatedAllGather{stride, group_size, shape: x's}(g)`;
    /// no gradient otherwise.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let (Ok(a), Some(shape)) = (ReduceScatterAttrs::of(op), cx.input_shape(0)) else { return GradRule::None };
        if a.op != CollectiveOperator::Local {
            return GradRule::None;
        }
        let attrs = AllGatherAttrs { stride: a.stride, group_size: a.group_size, shape: Some(shape) }.to_attrs();
        let inputs = [(0, GradSource::GradOfOutput(0))];
        GradRule::Ops(vec![spec(&ReplicatedAllGather, attrs, &inputs, &[(0, 0)])])
    }
}

impl OpDef for AllReduce {
    fn op_type(&self) -> &'static str {
        "AllReduce"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        IpuAllReduceAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let inputs = ctx.inputs();
        let Some((_, first)) = inputs.first() else {
            return Err(ctx.error("there must be at least one input"));
        };
        if let Some((i, _)) = inputs.iter().enumerate().find(|(k, (i, _))| *i as usize != *k) {
            return Err(ctx.error(format!("inputs must be connected at 0..n, found a gap before index {i}")));
        }
        if let Some((i, info)) = inputs.iter().find(|(_, t)| t != first) {
            return Err(ctx.error(format!(
                "all inputs must have the same type and shape: input 0 is {first}, input {i} is {info}"
            )));
        }
        let a = IpuAllReduceAttrs::infer(ctx)?;
        operator_of(ctx, a.op, first.dtype, false)?;
        let ipus = &a.ipus;
        if ipus.len() != inputs.len() {
            return Err(ctx.error(format!("{} inputs but {} ipus", inputs.len(), ipus.len())));
        }
        if let Some(i) = ipus.iter().find(|&&i| i < 0) {
            return Err(ctx.error(format!("ipu {i} is negative")));
        }
        Ok(vec![first.clone(); inputs.len()])
    }
    /// With `op: add`, `AllReduce` of the output gradients with the identical
    /// flags swapped; no gradient otherwise.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = IpuAllReduceAttrs::of(op) else { return GradRule::None };
        if a.op != CollectiveOperator::Add {
            return GradRule::None;
        }
        let attrs = IpuAllReduceAttrs {
            identical_inputs: a.identical_grad_inputs,
            identical_grad_inputs: a.identical_inputs,
            ..a
        }
        .to_attrs();
        let n = op.inputs().end() as u32;
        let inputs: Vec<(u32, GradSource)> = (0..n).map(|i| (i, GradSource::GradOfOutput(i))).collect();
        let outputs: Vec<(u32, u32)> = (0..n).map(|i| (i, i)).collect();
        GradRule::Ops(vec![spec(&AllReduce, attrs, &inputs, &outputs)])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[
    &ReplicatedAllReduce,
    &ReplicatedAllReduceInplace,
    &ReplicatedAllReduceScaledAddInplace,
    &ReplicatedScaledAddMatMulRhsGradInplace,
    &ReplicatedAllGather,
    &ReplicatedReduceScatter,
    &AllReduce,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ir, IrError, OpFlags};

    fn ir_with(rf: usize) -> Ir {
        let mut ir = Ir::new();
        ir.replication_factor = rf;
        ir
    }

    fn infer(rf: usize, def: &'static dyn OpDef, attrs: Attributes, inputs: &[TensorInfo]) -> Result<Vec<TensorInfo>> {
        let mut ir = ir_with(rf);
        let main = ir.main_graph_id();
        let ids: Vec<(u32, crate::TensorId)> = inputs
            .iter()
            .enumerate()
            .map(|(i, info)| (i as u32, ir.graph_mut(main).unwrap().add_input(&format!("x{i}"), info.clone()).unwrap()))
            .collect();
        ir.infer_outputs(main, def, &attrs, &ids, "op")
    }

    fn group(s: i64, g: i64) -> Attributes {
        Attributes::new().with("stride", AttrValue::Int(s)).with("group_size", AttrValue::Int(g))
    }

    fn f32(shape: &[usize]) -> TensorInfo {
        TensorInfo::new(DataType::Float32, shape)
    }

    #[test]
    fn shapes_follow_popart() {
        let x = f32(&[3, 5]);
        assert_eq!(infer(4, &ReplicatedAllReduce, group(1, 4), std::slice::from_ref(&x)).unwrap(), vec![x.clone()]);
        assert_eq!(infer(4, &ReplicatedAllGather, group(1, 4), std::slice::from_ref(&x)).unwrap(), vec![f32(&[60])]);
        assert_eq!(infer(4, &ReplicatedAllGather, group(2, 2), std::slice::from_ref(&x)).unwrap(), vec![f32(&[30])]);
        // 15 elements over 4 replicas: shards of 4 (one padding element).
        assert_eq!(infer(4, &ReplicatedReduceScatter, group(1, 4), std::slice::from_ref(&x)).unwrap(), vec![f32(&[4])]);
        // Gathering shards of 4 into the 15-element meta shape drops the padding.
        let meta = group(1, 4).with("shape", AttrValue::Ints(vec![3, 5]));
        assert_eq!(infer(4, &ReplicatedAllGather, meta, &[f32(&[4])]).unwrap(), vec![x.clone()]);
        let too_small = group(1, 4).with("shape", AttrValue::Ints(vec![12]));
        assert!(infer(4, &ReplicatedAllGather, too_small, &[f32(&[4])]).is_err());
        // Attribute `shape` gives the shard's shape (autodiff sets the forward input's).
        let shard_shape = |v: Vec<i64>| group(1, 4).with("shape", AttrValue::Ints(v));
        assert_eq!(
            infer(4, &ReplicatedReduceScatter, shard_shape(vec![2, 1]), &[f32(&[8])]).unwrap(),
            vec![f32(&[2, 1])]
        );
        assert!(infer(4, &ReplicatedReduceScatter, shard_shape(vec![3]), &[f32(&[8])]).is_err());
        // The gradient ops take no forward tensor as an input.
        assert!(infer(2, &ReplicatedAllGather, group(1, 2), &[f32(&[2]), x.clone()]).is_err());
        assert!(infer(2, &ReplicatedReduceScatter, group(1, 2), &[f32(&[4]), f32(&[2])]).is_err());
        let ar = Attributes::new().with("ipus", AttrValue::Ints(vec![0, 1]));
        assert_eq!(infer(1, &AllReduce, ar, &[x.clone(), x.clone()]).unwrap(), vec![x.clone(), x]);
    }

    #[test]
    fn invalid_collectives_are_inference_errors() {
        let x = f32(&[4]);
        let err = |rf, def, attrs, inputs: &[TensorInfo]| match infer(rf, def, attrs, inputs) {
            Err(e @ (IrError::Inference { .. } | IrError::Attribute { .. })) => e.to_string(),
            other => panic!("expected an inference or attribute error, got {other:?}"),
        };
        assert!(err(4, &ReplicatedAllReduce, group(1, 3), std::slice::from_ref(&x)).contains("not a replica grouping"));
        assert!(err(2, &ReplicatedAllReduce, group(1, 4), std::slice::from_ref(&x)).contains("2 replicas"));
        assert!(err(4, &ReplicatedAllReduce, Attributes::new(), std::slice::from_ref(&x)).contains("stride"));
        let op = |name: &str| group(1, 2).with("op", AttrValue::Str(name.into()));
        assert!(err(2, &ReplicatedAllReduce, op("sum"), std::slice::from_ref(&x)).contains("`op` must be one of"));
        assert!(err(2, &ReplicatedAllReduce, op("local"), std::slice::from_ref(&x)).contains("reduce-scatter"));
        assert!(err(2, &ReplicatedAllReduce, op("and"), std::slice::from_ref(&x)).contains("does not support float32"));
        let b = TensorInfo::new(DataType::Bool, [4]);
        assert!(err(2, &ReplicatedReduceScatter, op("add"), std::slice::from_ref(&b)).contains("bool"));
        assert!(infer(2, &ReplicatedAllReduce, op("or"), std::slice::from_ref(&b)).is_ok());
        let i = TensorInfo::new(DataType::Int32, [4]);
        assert!(err(2, &ReplicatedAllReduce, op("square_add"), std::slice::from_ref(&i)).contains("int32"));
        let ipus = |v: Vec<i64>| Attributes::new().with("ipus", AttrValue::Ints(v));
        assert!(err(1, &AllReduce, ipus(vec![0]), &[x.clone(), x.clone()]).contains("ipus"));
        assert!(err(1, &AllReduce, ipus(vec![0, 1]), &[x.clone(), f32(&[5])]).contains("same type and shape"));
        assert!(err(1, &AllReduce, ipus(vec![]), &[]).contains("at least one input"));
        assert!(err(1, &AllReduce, ipus(vec![0]).with("identical_inputs", AttrValue::Int(1)), &[x]).contains("a bool"));
    }

    #[test]
    fn flags_and_grad_rules() {
        let attrs = Attributes::new();
        let (plain, inplace): (&dyn OpDef, &dyn OpDef) = (&ReplicatedAllReduce, &ReplicatedAllReduceInplace);
        assert_eq!(plain.flags(&attrs), OpFlags::empty());
        assert!(inplace.flags(&attrs).contains(OpFlags::MODIFIES_INPUTS));
        assert_eq!(inplace.alias_pairs(&attrs), vec![(0, 0)]);
        for def in ALL {
            assert!(!def.flags(&attrs).contains(OpFlags::SIDE_EFFECT), "{}", def.op_type());
        }
    }
}
