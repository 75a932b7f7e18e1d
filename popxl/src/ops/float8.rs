//! The float8 ops: casts to and from `float8_143` / `float8_152` and the
//! pow2-scaled matmul, convolution and transposed convolution (PopXL's fp8 API; see
//! [`popart_ir::float8`] for the formats and their rounding).
//!
//! `log2_scale` is a scalar `int32` tensor (a constant, variable or computed
//! value) whose value must be in `[-32, 32)` when the op runs; a value outside
//! is a run-time error, as PopART's default `throwIfLog2ScaleTensorNotInRange`.
//! None of these ops has a gradient (PopART: float8 is for inference).

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::unary::CastAttrs;
use popart_ir::DataType;

use super::conv::{ConvOptions, ConvTransposeOptions};
use super::OpBuilder;
use crate::{Result, Tensor};

/// `cast(t · 2^log2_scale, data_type)`: `t` float16 or float32 to `data_type`
/// `float8_143` or `float8_152`, rounded to nearest (ties to even), NaN where
/// the scaled value overflows the format (op `Pow2ScaleThenCast`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::arr1(&[0.75f32, 3.0]), "x").unwrap();
/// let s = popxl::constant(0i32, "s").unwrap();
/// let y = popxl::ops::pow2scale_cast_to_fp8(&x, &s, popxl::float8_143).unwrap();
/// assert_eq!(y.dtype(), popxl::float8_143);
/// assert!(popxl::ops::pow2scale_cast_to_fp8(&x, &s, popxl::float16).is_err());
/// ```
pub fn pow2scale_cast_to_fp8(t: &Tensor, log2_scale: &Tensor, data_type: DataType) -> Result<Tensor> {
    OpBuilder::new("pow2scale_cast_to_fp8", &ir_ops::Pow2ScaleThenCast)
        .input(0, t)
        .input(1, log2_scale)
        .typed(&CastAttrs { to: data_type })
        .create1()
}

/// `cast(t, data_type) · 2^log2_scale`: float8 `t` to `data_type` float16 or
/// float32 (op `CastThenPow2Scale`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::arr1(&[0.75f32]), "x").unwrap();
/// let s = popxl::constant(0i32, "s").unwrap();
/// let y = popxl::ops::pow2scale_cast_to_fp8(&x, &s, popxl::float8_152).unwrap();
/// let z = popxl::ops::pow2scale_cast_from_fp8(&y, &s, popxl::float16).unwrap();
/// assert_eq!(z.dtype(), popxl::float16);
/// assert!(popxl::ops::pow2scale_cast_from_fp8(&x, &s, popxl::float16).is_err());
/// ```
pub fn pow2scale_cast_from_fp8(t: &Tensor, log2_scale: &Tensor, data_type: DataType) -> Result<Tensor> {
    OpBuilder::new("pow2scale_cast_from_fp8", &ir_ops::CastThenPow2Scale)
        .input(0, t)
        .input(1, log2_scale)
        .typed(&CastAttrs { to: data_type })
        .create1()
}

/// `(lhs @ rhs) · 2^log2_scale` as float16, `lhs` and `rhs` float8 (either
/// format each), numpy `matmul` shapes (op `MatMulPow2Scaled`; PopXL
/// `matmul_pow2scaled`). On `cpu` the products of the decoded values are
/// accumulated in float32 and the scaled sum rounded once to float16.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let s = popxl::constant(0i32, "s").unwrap();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
/// let b = popxl::constant(ndarray::Array2::<f32>::ones((3, 4)), "b").unwrap();
/// let a8 = popxl::ops::pow2scale_cast_to_fp8(&a, &s, popxl::float8_143).unwrap();
/// let b8 = popxl::ops::pow2scale_cast_to_fp8(&b, &s, popxl::float8_152).unwrap();
/// let y = popxl::ops::matmul_pow2scaled(&a8, &b8, &s).unwrap();
/// assert_eq!((y.dtype(), y.shape()), (popxl::float16, &[2, 4][..]));
/// assert!(popxl::ops::matmul_pow2scaled(&a, &b, &s).is_err());
/// ```
pub fn matmul_pow2scaled(lhs: &Tensor, rhs: &Tensor, log2_scale: &Tensor) -> Result<Tensor> {
    OpBuilder::new("matmul_pow2scaled", &ir_ops::MatMulPow2Scaled)
        .input(0, lhs)
        .input(1, rhs)
        .input(2, log2_scale)
        .create1()
}

/// `conv(t, weight) · 2^log2_scale` as float16, `t` and `weight` float8 (either
/// format each), with [`conv_with`](super::conv_with)'s shapes and options (op
/// `ConvPow2Scaled`; PopXL `conv_pow2scaled`).
///
/// ```
/// use popxl::ops::ConvOptions;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let s = popxl::constant(1i32, "s").unwrap();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((1, 2, 5, 5)), "x").unwrap();
/// let w = popxl::constant(ndarray::Array4::<f32>::ones((3, 2, 3, 3)), "w").unwrap();
/// let x8 = popxl::ops::pow2scale_cast_to_fp8(&x, &s, popxl::float8_143).unwrap();
/// let w8 = popxl::ops::pow2scale_cast_to_fp8(&w, &s, popxl::float8_143).unwrap();
/// let y = popxl::ops::conv_pow2scaled(&x8, &w8, &s, &ConvOptions::default()).unwrap();
/// assert_eq!((y.dtype(), y.shape()), (popxl::float16, &[1, 3, 3, 3][..]));
/// ```
pub fn conv_pow2scaled(t: &Tensor, weight: &Tensor, log2_scale: &Tensor, options: &ConvOptions) -> Result<Tensor> {
    OpBuilder::new("conv_pow2scaled", &ir_ops::ConvPow2Scaled)
        .input(0, t)
        .input(1, weight)
        .input(2, log2_scale)
        .typed(&options.attrs())
        .create1()
}

/// `conv_transpose(t, weight) · 2^log2_scale` as float16, `t` and `weight` float8
/// (either format each), with [`conv_transpose`](super::conv_transpose)'s shapes
/// and options (op `ConvTransposePow2Scaled`; PopXL `conv_transpose_pow2scaled`).
///
/// ```
/// use popxl::ops::ConvTransposeOptions;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let s = popxl::constant(0i32, "s").unwrap();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((1, 2, 3, 3)), "x").unwrap();
/// let w = popxl::constant(ndarray::Array4::<f32>::ones((2, 4, 3, 3)), "w").unwrap();
/// let x8 = popxl::ops::pow2scale_cast_to_fp8(&x, &s, popxl::float8_143).unwrap();
/// let w8 = popxl::ops::pow2scale_cast_to_fp8(&w, &s, popxl::float8_143).unwrap();
/// let y = popxl::ops::conv_transpose_pow2scaled(&x8, &w8, &s, &ConvTransposeOptions::default()).unwrap();
/// assert_eq!((y.dtype(), y.shape()), (popxl::float16, &[1, 4, 5, 5][..]));
/// ```
pub fn conv_transpose_pow2scaled(
    t: &Tensor,
    weight: &Tensor,
    log2_scale: &Tensor,
    options: &ConvTransposeOptions,
) -> Result<Tensor> {
    OpBuilder::new("conv_transpose_pow2scaled", &ir_ops::ConvTransposePow2Scaled)
        .input(0, t)
        .input(1, weight)
        .input(2, log2_scale)
        .typed(&options.attrs())
        .create1()
}
