//! Random ops driven by an explicit `uint32[2]` seed tensor: deterministic for a given seed.

use popart_ir::ops::all as ir_ops;
use popart_ir::{AttrValue, DataType};

use super::OpBuilder;
use crate::{Result, Tensor};

fn shape_attr(shape: &[usize]) -> Result<AttrValue> {
    let dims =
        shape.iter().enumerate().map(|(i, &d)| super::to_i64(d, || format!("dimension {i} of the random shape")));
    Ok(AttrValue::Ints(dims.collect::<Result<_>>()?))
}

/// Uniform samples in `[low, high)` of `shape` and floating point `dtype`
/// (op `RandomUniform`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let seed = popxl::variable(vec![0u32, 42], "seed").unwrap();
/// let r = popxl::ops::random_uniform(&seed, &[2, 3], 0.0, 1.0, popxl::float32).unwrap();
/// assert_eq!(r.shape(), &[2, 3]);
/// ```
pub fn random_uniform(seed: &Tensor, shape: &[usize], low: f64, high: f64, dtype: DataType) -> Result<Tensor> {
    OpBuilder::new("random_uniform", &ir_ops::RandomUniform)
        .input(0, seed)
        .attr("shape", shape_attr(shape)?)
        .attr("dtype", AttrValue::DType(dtype))
        .attr("low", AttrValue::Float(low))
        .attr("high", AttrValue::Float(high))
        .create1()
}

/// Normal samples with `mean` and `std` of `shape` and floating point `dtype`
/// (op `RandomNormal`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let seed = popxl::variable(vec![0u32, 42], "seed").unwrap();
/// let r = popxl::ops::random_normal(&seed, &[4], 0.0, 0.02, popxl::float32).unwrap();
/// assert_eq!(r.dtype(), popxl::float32);
/// ```
pub fn random_normal(seed: &Tensor, shape: &[usize], mean: f64, std: f64, dtype: DataType) -> Result<Tensor> {
    OpBuilder::new("random_normal", &ir_ops::RandomNormal)
        .input(0, seed)
        .attr("shape", shape_attr(shape)?)
        .attr("dtype", AttrValue::DType(dtype))
        .attr("mean", AttrValue::Float(mean))
        .attr("std", AttrValue::Float(std))
        .create1()
}

/// Zero each element of `t` with probability `p` and scale the others by
/// `1 / (1 - p)` (op `Dropout`; `p` in `[0, 1)`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let seed = popxl::variable(vec![0u32, 42], "seed").unwrap();
/// let x = popxl::constant(vec![1.0f32; 8], "x").unwrap();
/// assert!(popxl::ops::dropout(&x, &seed, 0.1).is_ok());
/// assert!(popxl::ops::dropout(&x, &seed, 1.0).is_err());
/// ```
pub fn dropout(t: &Tensor, seed: &Tensor, p: f64) -> Result<Tensor> {
    OpBuilder::new("dropout", &ir_ops::Dropout).input(0, t).input(1, seed).attr("p", AttrValue::Float(p)).create1()
}
