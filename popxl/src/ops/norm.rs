//! Normalisation: [`group_norm`], [`layer_norm`] (one group, as PopXL),
//! [`batch_norm_inference`] and, beyond PopXL's Python API, training-mode
//! [`batch_norm`] (PopART's `BatchNormalization` with all its outputs).

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::norm::{BatchNormAttrs, GroupNormAttrs};

use super::OpBuilder;
use crate::host::Wide;
use crate::{ops, HostArray, PopXlError, Result, Tensor};

/// Group normalisation of `t` `[N, C, ..]` (op `GroupNorm`; PopXL `group_norm`):
/// the channels are split into `num_groups` groups, each (sample, group) is
/// normalised over its elements (biased variance, `eps` added), then scaled by
/// `weight[c]` and shifted by `bias[c]` (both `[C]`). Differentiable w.r.t. all
/// three inputs (the gradient reuses the saved mean and inverse standard deviation).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((2, 4, 3, 3)), "x").unwrap();
/// let w = popxl::constant(ndarray::Array1::<f32>::ones(4), "w").unwrap();
/// let b = popxl::constant(ndarray::Array1::<f32>::zeros(4), "b").unwrap();
/// assert_eq!(popxl::ops::group_norm(&x, &w, &b, 2, 1e-5).unwrap().shape(), &[2, 4, 3, 3]);
/// assert!(popxl::ops::group_norm(&x, &w, &b, 3, 1e-5).is_err());
/// ```
pub fn group_norm(t: &Tensor, weight: &Tensor, bias: &Tensor, num_groups: i64, eps: f64) -> Result<Tensor> {
    OpBuilder::new("group_norm", &ir_ops::GroupNorm)
        .input(0, t)
        .input(1, weight)
        .input(2, bias)
        .typed(&GroupNormAttrs { num_groups, epsilon: eps })
        .create1()
}

/// Layer normalisation: [`group_norm`] with one group, as PopXL, so `t`
/// `[N, C, ..]` is normalised per sample over all its other dims and scaled
/// per channel (`weight`, `bias`: `[C]`). For `[N, D]` this is the usual
/// layer norm over `D`; reshape `[B, T, D]` to `[B·T, D]` first, as PopXL programs do.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array2::<f32>::ones((8, 16)), "x").unwrap();
/// let w = popxl::constant(ndarray::Array1::<f32>::ones(16), "w").unwrap();
/// let b = popxl::constant(ndarray::Array1::<f32>::zeros(16), "b").unwrap();
/// assert_eq!(popxl::ops::layer_norm(&x, &w, &b, 1e-5).unwrap().shape(), &[8, 16]);
/// ```
pub fn layer_norm(t: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    group_norm(t, weight, bias, 1, eps)
}

/// Batch normalisation with the given statistics (PopXL `batch_norm_inference`):
/// `(t − mean[c]) / sqrt(var[c] + eps) · scale[c] + bias[c]` over the channel
/// dim 1 of `t` `[N, C, ..]`; all four parameters are `[C]`. `momentum` only
/// matters for training statistics and is accepted for PopXL compatibility
/// (it must be in [0, 1]). Built from elementwise ops, so it is differentiable
/// w.r.t. every input.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((2, 3, 4, 4)), "x").unwrap();
/// let p = popxl::constant(ndarray::Array1::<f32>::ones(3), "p").unwrap();
/// let y = popxl::ops::batch_norm_inference(&x, &p, &p, &p, &p, 1e-5, 0.9).unwrap();
/// assert_eq!(y.shape(), &[2, 3, 4, 4]);
/// ```
pub fn batch_norm_inference(
    t: &Tensor,
    scale: &Tensor,
    bias: &Tensor,
    mean: &Tensor,
    var: &Tensor,
    eps: f64,
    momentum: f64,
) -> Result<Tensor> {
    if t.rank() < 2 {
        return Err(PopXlError::ShapeMismatch {
            what: "batch_norm_inference: the input".to_string(),
            expected: "[N, C, ..]".to_string(),
            got: format!("{:?}", t.shape()),
        });
    }
    if !((0.0..=1.0).contains(&momentum) && eps >= 0.0 && eps.is_finite()) {
        return Err(PopXlError::ValueOutOfRange {
            what: "batch_norm_inference: momentum and epsilon".to_string(),
            expected: "in [0, 1] and finite and >= 0",
            got: format!("{momentum} and {eps}"),
        });
    }
    let c = t.shape()[1];
    let mut bshape = vec![1i64; t.rank()];
    bshape[1] = c as i64;
    for (p, what) in [(scale, "scale"), (bias, "bias"), (mean, "mean"), (var, "var")] {
        if p.shape() != [c] || p.dtype() != t.dtype() {
            return Err(PopXlError::ShapeMismatch {
                what: format!("batch_norm_inference: {what}"),
                expected: format!("a {} tensor of shape [{c}]", t.dtype()),
                got: format!("{:?} {}", p.shape(), p.dtype()),
            });
        }
    }
    let col = |p: &Tensor| ops::reshape(p, &bshape);
    let eps_t = crate::variables::constant_in_graph_of(
        t,
        HostArray::scalar_of(t.dtype(), Wide::Float(eps), "epsilon")?,
        "epsilon",
    )?;
    let inv = ops::div(&col(scale)?, &ops::sqrt(&ops::add(&col(var)?, &eps_t)?)?)?;
    ops::add(&ops::mul(&ops::sub(t, &col(mean)?)?, &inv)?, &col(bias)?)
}

/// What [`batch_norm`] returns: the normalised tensor and the updated running
/// statistics, which a training step writes back into its running-statistic
/// variables (`copy_var_update_`), as PopART does for `BatchNormalization`.
#[derive(Clone, Debug)]
pub struct BatchNormOutputs {
    /// The normalised input, `[N, C, ..]`.
    pub y: Tensor,
    /// `momentum · mean + (1 − momentum) · batch mean`, `[C]`.
    pub mean: Tensor,
    /// `momentum · var + (1 − momentum) · batch variance`, `[C]`.
    pub var: Tensor,
}

/// Options of [`batch_norm_with`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormOptions {
    /// Added to the batch variance before the square root (default `1e-5`).
    pub epsilon: f64,
    /// Weight of the old running statistics, in [0, 1] (ONNX convention,
    /// default `0.9`; PyTorch's `momentum` is `1 −` this).
    pub momentum: f64,
    /// Update the running variance with the unbiased batch variance
    /// (`M / (M − 1)` times the biased one over the `M` elements of a channel),
    /// as PyTorch and PopART's `aiGraphcore` `BatchNormalization` do (default
    /// false: biased, as ONNX). The normalisation itself always uses the
    /// biased variance.
    pub unbiased_variance: bool,
}

impl Default for BatchNormOptions {
    fn default() -> Self {
        BatchNormOptions { epsilon: 1e-5, momentum: 0.9, unbiased_variance: false }
    }
}

/// Training-mode batch normalisation (op `BatchNorm`; PopART's
/// `BatchNormalization` in training mode, ONNX semantics): each channel `c`
/// of `t` `[N, C, ..]` is normalised with the mean and biased variance of its
/// elements over the batch and spatial dims, `(t − μ[c]) / sqrt(σ²[c] + eps) ·
/// scale[c] + bias[c]`, and the running statistics `mean`, `var` (all `[C]`,
/// of `t`'s float dtype) are updated with `momentum` weighting the old value:
/// `new = momentum · old + (1 − momentum) · batch`. Differentiable w.r.t. `t`,
/// `scale` and `bias` (`BatchNormGrad`, from the saved batch mean and inverse
/// standard deviation); the running statistics are not differentiated.
/// [`batch_norm_with`] takes the unbiased running variance option.
///
/// A wrong rank (below 2), a non-float input, a parameter of another shape
/// than `[C]` or dtype, `momentum` outside [0, 1] or a negative `eps` is an
/// error when the op is created.
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::constant(ndarray::Array4::<f32>::ones((2, 3, 4, 4)), "x").unwrap();
/// let p = popxl::variable(ndarray::Array1::<f32>::ones(3), "p").unwrap();
/// let out = popxl::ops::batch_norm(&x, &p, &p, &p, &p, 1e-5, 0.9).unwrap();
/// assert_eq!((out.y.shape(), out.mean.shape(), out.var.shape()), (&[2, 3, 4, 4][..], &[3][..], &[3][..]));
/// let q = popxl::variable(ndarray::Array1::<f32>::ones(4), "q").unwrap();
/// assert!(popxl::ops::batch_norm(&x, &q, &p, &p, &p, 1e-5, 0.9).is_err());
/// ```
pub fn batch_norm(
    t: &Tensor,
    scale: &Tensor,
    bias: &Tensor,
    mean: &Tensor,
    var: &Tensor,
    eps: f64,
    momentum: f64,
) -> Result<BatchNormOutputs> {
    let opts = BatchNormOptions { epsilon: eps, momentum, ..Default::default() };
    batch_norm_with(t, scale, bias, mean, var, opts)
}

/// [`batch_norm`] with all its options ([`BatchNormOptions`]).
pub fn batch_norm_with(
    t: &Tensor,
    scale: &Tensor,
    bias: &Tensor,
    mean: &Tensor,
    var: &Tensor,
    opts: BatchNormOptions,
) -> Result<BatchNormOutputs> {
    let outs = OpBuilder::new("batch_norm", &ir_ops::BatchNorm)
        .input(0, t)
        .input(1, scale)
        .input(2, bias)
        .input(3, mean)
        .input(4, var)
        .typed(&BatchNormAttrs {
            epsilon: opts.epsilon,
            momentum: opts.momentum,
            unbiased_variance: opts.unbiased_variance,
        })
        .create_all()?;
    match <[Tensor; 5]>::try_from(outs) {
        Ok([y, mean, var, _, _]) => Ok(BatchNormOutputs { y, mean, var }),
        Err(v) => Err(PopXlError::IndexOutOfRange { what: "output of op `BatchNorm`".into(), index: 4, len: v.len() }),
    }
}
