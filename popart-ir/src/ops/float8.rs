//! The float8 ops (PopXL's `pow2scale_cast_to_fp8`, `pow2scale_cast_from_fp8`,
//! `matmul_pow2scaled`, `conv_pow2scaled`, `conv_transpose_pow2scaled`): every one reads a scalar `int32`
//! `log2_scale` tensor as its last input and multiplies by `2^log2_scale`, whose
//! value must be in `[-32, 32)` when the op runs (see [`crate::float8`]).
//!
//! Float8 is for inference in PopART: none of them has a gradient.

use super::conv::{conv_geometry, conv_transpose_geometry, ConvAttrs, ConvTransposeAttrs};
use super::matmul::matmul_shape;
use super::op_types;
use super::unary::CastAttrs;
use crate::{AttrSpec, DataType, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_types!(
    /// `Pow2ScaleThenCast{to}(x, log2_scale)`: `cast(x · 2^log2_scale, to)`,
    /// `x` float16 or float32, `to` float8_143 or float8_152, rounded to nearest
    /// even, NaN on overflow; PopXL `pow2scale_cast_to_fp8`
    Pow2ScaleThenCast,
    /// `CastThenPow2Scale{to}(x, log2_scale)`: `cast(x, to) · 2^log2_scale`,
    /// `x` float8, `to` float16 or float32; PopXL `pow2scale_cast_from_fp8`
    CastThenPow2Scale,
    /// `MatMulPow2Scaled(a, b, log2_scale)`: `(a @ b) · 2^log2_scale` as float16,
    /// `a` and `b` float8 (either format each), numpy `matmul` shapes; PopXL
    /// `matmul_pow2scaled`
    MatMulPow2Scaled,
    /// `ConvPow2Scaled{conv attrs}(x, w, log2_scale)`: `Conv(x, w) · 2^log2_scale`
    /// as float16, `x` and `w` float8 (either format each), `Conv`'s shapes and
    /// attributes; PopXL `conv_pow2scaled`
    ConvPow2Scaled,
    /// `ConvTransposePow2Scaled{conv transpose attrs}(x, w, log2_scale)`:
    /// `ConvTranspose(x, w) · 2^log2_scale` as float16, `x` and `w` float8 (either
    /// format each), `ConvTranspose`'s shapes and attributes; PopXL
    /// `conv_transpose_pow2scaled`
    ConvTransposePow2Scaled,
);

/// Checks the `log2_scale` input at `index` is a scalar int32.
fn check_log2_scale(ctx: &InferContext<'_>, index: u32) -> Result<()> {
    let s = ctx.input(index)?;
    if s.dtype != DataType::Int32 {
        return Err(ctx.error(format!("the log2 scale tensor must be of type int32, got {}", s.dtype)));
    }
    if !s.shape.is_empty() {
        return Err(ctx.error(format!("the log2 scale must be a scalar tensor, got shape {:?}", s.shape)));
    }
    Ok(())
}

/// Checks the operands at `indices` are float8 (either format).
fn check_float8_operands(ctx: &InferContext<'_>, indices: &[u32]) -> Result<()> {
    for &i in indices {
        let t = ctx.input(i)?;
        if !t.dtype.is_float8() {
            return Err(ctx.error(format!(
                "operand {i} must be of dtype float8_143 or float8_152, got {} (use the op without pow2 scaling)",
                t.dtype
            )));
        }
    }
    Ok(())
}

impl OpDef for Pow2ScaleThenCast {
    fn op_type(&self) -> &'static str {
        "Pow2ScaleThenCast"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        CastAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        check_log2_scale(ctx, 1)?;
        let to = CastAttrs::infer(ctx)?.to;
        if !to.is_float8() {
            return Err(ctx.error(format!("data type {to} is not float8_143 or float8_152")));
        }
        if !matches!(x.dtype, DataType::Float16 | DataType::Float32) {
            return Err(ctx.error(format!("the input must be float16 or float32, got {}", x.dtype)));
        }
        Ok(vec![TensorInfo::new(to, x.shape.clone())])
    }
}

impl OpDef for CastThenPow2Scale {
    fn op_type(&self) -> &'static str {
        "CastThenPow2Scale"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        CastAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        check_float8_operands(ctx, &[0])?;
        check_log2_scale(ctx, 1)?;
        let x = ctx.input(0)?;
        let to = CastAttrs::infer(ctx)?.to;
        if !matches!(to, DataType::Float16 | DataType::Float32) {
            return Err(ctx.error(format!("data type {to} is not float16 or float32")));
        }
        Ok(vec![TensorInfo::new(to, x.shape.clone())])
    }
}

impl OpDef for MatMulPow2Scaled {
    fn op_type(&self) -> &'static str {
        "MatMulPow2Scaled"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        check_float8_operands(ctx, &[0, 1])?;
        check_log2_scale(ctx, 2)?;
        let (a, b) = (ctx.input(0)?, ctx.input(1)?);
        let shape = matmul_shape(&a.shape, &b.shape).map_err(|m| ctx.error(m))?;
        Ok(vec![TensorInfo::new(DataType::Float16, shape)])
    }
}

impl OpDef for ConvPow2Scaled {
    fn op_type(&self) -> &'static str {
        "ConvPow2Scaled"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ConvAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        check_float8_operands(ctx, &[0, 1])?;
        check_log2_scale(ctx, 2)?;
        let (x, w) = (ctx.input(0)?, ctx.input(1)?);
        let geo = conv_geometry(&x.shape, &w.shape, &ConvAttrs::infer(ctx)?).map_err(|m| ctx.error(m))?;
        Ok(vec![TensorInfo::new(DataType::Float16, geo.y_shape())])
    }
}

impl OpDef for ConvTransposePow2Scaled {
    fn op_type(&self) -> &'static str {
        "ConvTransposePow2Scaled"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        ConvTransposeAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        check_float8_operands(ctx, &[0, 1])?;
        check_log2_scale(ctx, 2)?;
        let (x, w) = (ctx.input(0)?, ctx.input(1)?);
        let geo =
            conv_transpose_geometry(&x.shape, &w.shape, &ConvTransposeAttrs::infer(ctx)?).map_err(|m| ctx.error(m))?;
        Ok(vec![TensorInfo::new(DataType::Float16, geo.x_shape())])
    }
}

pub(crate) const ALL: &[&dyn OpDef] =
    &[&Pow2ScaleThenCast, &CastThenPow2Scale, &MatMulPow2Scaled, &ConvPow2Scaled, &ConvTransposePow2Scaled];
