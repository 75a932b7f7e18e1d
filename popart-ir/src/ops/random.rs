//! Random ops driven by an explicit `uint32[2]` seed tensor (input 0, or 1 for
//! dropout), and the derivation of new seeds from a seed.

use super::grad::spec;
use super::{broadcast_shapes, op_types, require_float, to_shape};
use crate::{
    op_attrs, AttrSpec, Attributes, DataType, GradRule, GradSource, InferContext, OpAttrs, OpDef, OpFlags, Result,
    TensorInfo,
};

op_attrs! {
    /// Attributes of `RandomUniform`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct RandomUniformAttrs {
        /// Output shape.
        pub shape: Vec<i64>,
        /// Output type.
        pub dtype: DataType = DataType::Float32,
        /// Lower bound.
        pub low: f64 = 0.0,
        /// Upper bound.
        pub high: f64 = 1.0,
    }
}

op_attrs! {
    /// Attributes of `RandomNormal`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct RandomNormalAttrs {
        /// Output shape.
        pub shape: Vec<i64>,
        /// Output type.
        pub dtype: DataType = DataType::Float32,
        /// Mean.
        pub mean: f64 = 0.0,
        /// Standard deviation.
        pub std: f64 = 1.0,
    }
}

op_attrs! {
    /// Attributes of `Dropout`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct DropoutAttrs {
        /// Drop probability.
        pub p: f64,
    }
}

op_attrs! {
    /// Attributes of `ShapedDropout`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ShapedDropoutAttrs {
        /// Drop probability.
        pub ratio: f64,
        /// Mask shape.
        pub shape: Vec<i64>,
    }
}

op_types!(
    /// uniform in `[low, high)` of `shape` and `dtype`
    RandomUniform,
    /// normal with `mean` and `std`, of `shape` and `dtype`
    RandomNormal,
    /// zero elements with probability `p`, scale the rest by `1/(1-p)`
    Dropout,
    /// `ShapedDropout(x, seed)`: dropout with one mask of attribute `shape` (which
    /// broadcasts to `x`'s shape) drawn with probability `ratio` of dropping,
    /// broadcast over `x`; kept elements are scaled by `1/(1-ratio)`
    ShapedDropout,
    /// `ModifyRandomSeed(seed, modifier)`: a new `uint32[2]` seed `[L, h(L, R + modifier)]`
    /// from `seed = [L, R]` and a `uint32` scalar `modifier` (PopXL's
    /// `split_random_seed` uses modifiers 0..n)
    ModifyRandomSeed,
);

fn check_seed(ctx: &InferContext<'_>, index: u32) -> Result<()> {
    let s = ctx.input(index)?;
    if s.dtype != DataType::Uint32 || s.shape != [2] {
        return Err(ctx.error(format!("the seed must be uint32[2], got {s}")));
    }
    Ok(())
}

fn infer_random(ctx: &InferContext<'_>, shape: &[i64], dtype: DataType) -> Result<Vec<TensorInfo>> {
    check_seed(ctx, 0)?;
    let shape = to_shape(ctx, shape, "shape")?;
    if !dtype.is_floating_point() {
        return Err(ctx.error(format!("random values must be floating point, got {dtype}")));
    }
    Ok(vec![TensorInfo::new(dtype, shape)])
}

impl OpDef for RandomUniform {
    fn op_type(&self) -> &'static str {
        "RandomUniform"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        RandomUniformAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let a = RandomUniformAttrs::infer(ctx)?;
        infer_random(ctx, &a.shape, a.dtype)
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::RANDOM
    }
}

impl OpDef for RandomNormal {
    fn op_type(&self) -> &'static str {
        "RandomNormal"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        RandomNormalAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let a = RandomNormalAttrs::infer(ctx)?;
        infer_random(ctx, &a.shape, a.dtype)
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::RANDOM
    }
}

impl OpDef for Dropout {
    fn op_type(&self) -> &'static str {
        "Dropout"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        DropoutAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        require_float(ctx, x, "the input")?;
        check_seed(ctx, 1)?;
        let p = DropoutAttrs::infer(ctx)?.p;
        if !(0.0..1.0).contains(&p) {
            return Err(ctx.error(format!("dropout probability must be in [0, 1), got {p}")));
        }
        Ok(vec![x.clone()])
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::RANDOM
    }
    /// `Dropout(g, seed)` with the same seed and `p`: the same elements are dropped and the
    /// kept ones scaled by `1/(1-p)`, which is exactly the derivative.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = DropoutAttrs::of(op) else { return GradRule::None };
        let attrs = a.to_attrs();
        let ins = [(0, GradSource::GradOfOutput(0)), (1, GradSource::FwdInput(1))];
        GradRule::Ops(vec![spec(&Dropout, attrs, &ins, &[(0, 0)])])
    }
}

impl OpDef for ShapedDropout {
    fn op_type(&self) -> &'static str {
        "ShapedDropout"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ShapedDropoutAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        require_float(ctx, x, "the input")?;
        check_seed(ctx, 1)?;
        let ShapedDropoutAttrs { ratio, shape } = ShapedDropoutAttrs::infer(ctx)?;
        if !(0.0..1.0).contains(&ratio) {
            return Err(ctx.error(format!("dropout ratio must be in [0, 1), got {ratio}")));
        }
        let shape = to_shape(ctx, &shape, "the mask shape")?;
        if broadcast_shapes(&x.shape, &shape).as_ref() != Some(&x.shape) {
            return Err(ctx.error(format!("mask shape {shape:?} does not broadcast to the input shape {:?}", x.shape)));
        }
        Ok(vec![x.clone()])
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::RANDOM
    }
    /// `ShapedDropout(g, seed)` with the same seed, shape and ratio: the same mask.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = ShapedDropoutAttrs::of(op) else { return GradRule::None };
        let attrs = a.to_attrs();
        let ins = [(0, GradSource::GradOfOutput(0)), (1, GradSource::FwdInput(1))];
        GradRule::Ops(vec![spec(&ShapedDropout, attrs, &ins, &[(0, 0)])])
    }
}

impl OpDef for ModifyRandomSeed {
    fn op_type(&self) -> &'static str {
        "ModifyRandomSeed"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        check_seed(ctx, 0)?;
        let m = ctx.input(1)?;
        if m.dtype != DataType::Uint32 || m.nelms() != 1 || m.rank() > 1 {
            return Err(ctx.error(format!("the seed modifier must be a uint32 scalar, got {m}")));
        }
        Ok(vec![TensorInfo::new(DataType::Uint32, [2])])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&RandomUniform, &RandomNormal, &Dropout, &ShapedDropout, &ModifyRandomSeed];
