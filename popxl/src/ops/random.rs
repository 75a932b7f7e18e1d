//! Random ops driven by an explicit `uint32[2]` seed tensor: deterministic for a given seed.

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::random::{DropoutAttrs, RandomNormalAttrs, RandomUniformAttrs, ShapedDropoutAttrs};
use popart_ir::DataType;

use super::OpBuilder;
use crate::{Result, Tensor};

fn shape_attr(shape: &[usize]) -> Result<Vec<i64>> {
    let dims =
        shape.iter().enumerate().map(|(i, &d)| super::to_i64(d, || format!("dimension {i} of the random shape")));
    dims.collect()
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
        .typed(&RandomUniformAttrs { shape: shape_attr(shape)?, dtype, low, high })
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
        .typed(&RandomNormalAttrs { shape: shape_attr(shape)?, dtype, mean, std })
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
    OpBuilder::new("dropout", &ir_ops::Dropout).input(0, t).input(1, seed).typed(&DropoutAttrs { p }).create1()
}

/// Dropout with one mask of `shape` broadcast over `t` (op `ShapedDropout`;
/// PopXL's `shaped_dropout`): whole slices of `t` (the broadcast dimensions of
/// the mask) are kept together or dropped, with probability `ratio` (in `[0, 1)`)
/// of dropping; kept elements are scaled by `1 / (1 - ratio)`. The gradient
/// applies the same mask (same seed).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let seed = popxl::variable(vec![0u32, 42], "seed").unwrap();
/// let x = popxl::constant(ndarray::Array2::<f32>::ones((4, 8)), "x").unwrap();
/// // One decision per row.
/// let y = popxl::ops::shaped_dropout(&x, &seed, &[4, 1], 0.5).unwrap();
/// assert_eq!(y.shape(), &[4, 8]);
/// assert!(popxl::ops::shaped_dropout(&x, &seed, &[3, 1], 0.5).is_err());
/// ```
pub fn shaped_dropout(t: &Tensor, seed_tensor: &Tensor, shape: &[usize], ratio: f64) -> Result<Tensor> {
    OpBuilder::new("shaped_dropout", &ir_ops::ShapedDropout)
        .input(0, t)
        .input(1, seed_tensor)
        .typed(&ShapedDropoutAttrs { ratio, shape: shape_attr(shape)? })
        .create1()
}

/// A new seed from `seed` (`uint32[2]`) and a `uint32` scalar `modifier` (op
/// `ModifyRandomSeed`; PopXL's `ops.random_seed.create_random_seed`): `[L, h]`
/// where `h` depends on `L` and `R + modifier` only (see the op's doc).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let seed = popxl::variable(vec![0u32, 42], "seed").unwrap();
/// let m = popxl::constant(3u32, "m").unwrap();
/// let s = popxl::ops::create_random_seed(&seed, &m).unwrap();
/// assert_eq!((s.shape(), s.dtype()), (&[2usize][..], popxl::uint32));
/// ```
pub fn create_random_seed(seed: &Tensor, modifier: &Tensor) -> Result<Tensor> {
    OpBuilder::new("create_random_seed", &ir_ops::ModifyRandomSeed).input(0, seed).input(1, modifier).create1()
}

/// `n` new seeds from `seed` (PopXL's `split_random_seed`, default `n = 2`):
/// [`create_random_seed`] with modifiers `0..n` (uint32 constants). Chaining
/// `let [seed, s1] = split(seed)` gives every random op of a program its own
/// stream.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let seed = popxl::variable(vec![0u32, 42], "seed").unwrap();
/// let seeds = popxl::ops::split_random_seed(&seed, 2).unwrap();
/// assert_eq!(seeds.len(), 2);
/// let x = popxl::constant(vec![1.0f32; 8], "x").unwrap();
/// popxl::ops::dropout(&x, &seeds[1], 0.1).unwrap();
/// ```
pub fn split_random_seed(seed: &Tensor, n: usize) -> Result<Vec<Tensor>> {
    (0..n)
        .map(|i| {
            let m = u32::try_from(i).map_err(|_| crate::PopXlError::IntegerOutOfRange {
                what: "split_random_seed modifier".to_string(),
                value: i.to_string(),
                ty: "u32",
            })?;
            let modifier = crate::constant(m, &format!("seed_modifier_{i}"))?;
            create_random_seed(seed, &modifier)
        })
        .collect()
}
