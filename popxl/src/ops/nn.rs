//! Matmul, softmax and the negative log-likelihood losses (the reductions are in `reduce`).

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::attention::AttentionAttrs;
use popart_ir::ops::nn::{LossReduction, NllLossAttrs, SoftmaxAttrs};

use super::OpBuilder;
use crate::{PopXlError, Result, Tensor};

/// Matrix product with numpy `matmul` semantics: batched, broadcast batch
/// dimensions, 1-D operands promoted (op `MatMul`; PopXL's `@`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array3::<f32>::ones((5, 2, 3)), "a").unwrap();
/// let b = popxl::constant(ndarray::Array2::<f32>::ones((3, 4)), "b").unwrap();
/// assert_eq!(popxl::ops::matmul(&a, &b).unwrap().shape(), &[5, 2, 4]);
/// assert!(popxl::ops::matmul(&b, &b).is_err());
/// ```
pub fn matmul(lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
    OpBuilder::new("matmul", &ir_ops::MatMul).input(0, lhs).input(1, rhs).create1()
}

/// Multi-head softmax self-attention in one op (`Attention`; an extension: PopXL
/// writes attention from matmuls, a mask and a softmax, which give the same
/// values). `qkv` is `[B, T, 3·D]` float32, the q/k/v projection as it leaves
/// its matmul: queries, keys and values side by side, each `heads` heads of
/// `D / heads` values. Returns `[B, T, D]`, the heads side by side:
/// `softmax(q kᵀ / sqrt(D / heads)) v` per head, where with `causal` position `i`
/// sees only positions `j <= i`. Differentiable (`AttentionGrad`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let qkv = popxl::constant(ndarray::Array3::<f32>::ones((2, 5, 12)), "qkv").unwrap();
/// assert_eq!(popxl::ops::attention(&qkv, 2, true).unwrap().shape(), &[2, 5, 4]);
/// assert!(popxl::ops::attention(&qkv, 3, true).is_err()); // 3 heads do not divide 4
/// ```
pub fn attention(qkv: &Tensor, heads: usize, causal: bool) -> Result<Tensor> {
    let width = qkv.shape().last().copied().unwrap_or(0) / 3;
    let dh = width.checked_div(heads).unwrap_or(0);
    let scale = if dh > 0 { 1.0 / (dh as f64).sqrt() } else { 1.0 };
    let heads = i64::try_from(heads).map_err(|_| PopXlError::ValueOutOfRange {
        what: "attention: heads".to_string(),
        expected: "an int64",
        got: heads.to_string(),
    })?;
    OpBuilder::new("attention", &ir_ops::Attention)
        .input(0, qkv)
        .typed(&AttentionAttrs { heads, scale, causal })
        .create1()
}

/// Softmax along `axis` (negative counts from the end; op `Softmax`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::constant(ndarray::Array2::<f32>::ones((2, 3)), "a").unwrap();
/// assert_eq!(popxl::ops::softmax(&a, -1).unwrap().shape(), &[2, 3]);
/// assert!(popxl::ops::softmax(&a, 2).is_err());
/// ```
pub fn softmax(t: &Tensor, axis: i64) -> Result<Tensor> {
    OpBuilder::new("softmax", &ir_ops::Softmax).input(0, t).typed(&SoftmaxAttrs { axis }).create1()
}

/// How a loss over a batch is reduced.
///
/// ```
/// assert_eq!(popxl::ops::Reduction::default(), popxl::ops::Reduction::Mean);
/// assert_eq!(popxl::ops::Reduction::None.as_str(), "none");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// Mean over the batch (a scalar).
    #[default]
    Mean,
    /// Sum over the batch (a scalar).
    Sum,
    /// One loss per sample.
    None,
}

impl Reduction {
    /// The attribute value: `mean`, `sum` or `none`.
    ///
    /// ```
    /// assert_eq!(popxl::ops::Reduction::Sum.as_str(), "sum");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Reduction::Mean => "mean",
            Reduction::Sum => "sum",
            Reduction::None => "none",
        }
    }
}

/// Options of the negative log-likelihood losses (PopXL's keyword arguments).
///
/// ```
/// use popxl::ops::{NllLossOptions, Reduction};
/// let o = NllLossOptions { reduction: Reduction::Sum, ignore_index: Some(-1), log_prob: false };
/// assert_ne!(o, NllLossOptions::default());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NllLossOptions {
    /// How the per-sample losses are combined (default: mean).
    pub reduction: Reduction,
    /// Samples with this label contribute nothing (and no gradient).
    pub ignore_index: Option<i64>,
    /// The input holds log-probabilities (PopXL `log_prob=True`): the loss is
    /// `-logp[label]`, e.g. of a `log_softmax` computed stably. Not accepted
    /// by the `*_with_softmax_grad` forms.
    pub log_prob: bool,
}

fn nll_spec<'a>(
    what: &'static str,
    op_type: &'static dyn popart_ir::OpDef,
    probs: &'a Tensor,
    labels: &'a Tensor,
    options: NllLossOptions,
) -> OpBuilder<'a> {
    let reduction = match options.reduction {
        Reduction::Mean => LossReduction::Mean,
        Reduction::Sum => LossReduction::Sum,
        Reduction::None => LossReduction::None,
    };
    let attrs = NllLossAttrs { reduction, ignore_index: options.ignore_index, log_prob: options.log_prob };
    OpBuilder::new(what, op_type).input(0, probs).input(1, labels).typed(&attrs)
}

/// Negative log likelihood of `probs` (`[N.., C]`, probabilities) at integer
/// `labels` (`[N..]`), mean over the batch (op `NllLoss`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let p = popxl::constant(ndarray::Array2::<f32>::ones((4, 10)), "p").unwrap();
/// let l = popxl::constant(ndarray::Array1::<i32>::zeros(4), "l").unwrap();
/// assert_eq!(popxl::ops::nll_loss(&p, &l).unwrap().shape(), &[] as &[usize]);
/// ```
pub fn nll_loss(probs: &Tensor, labels: &Tensor) -> Result<Tensor> {
    nll_loss_with(probs, labels, NllLossOptions::default())
}

/// [`nll_loss`] with explicit options.
///
/// ```
/// use popxl::ops::{NllLossOptions, Reduction};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let p = popxl::constant(ndarray::Array2::<f32>::ones((4, 10)), "p").unwrap();
/// let l = popxl::constant(ndarray::Array1::<i32>::zeros(4), "l").unwrap();
/// let o = NllLossOptions { reduction: Reduction::None, ignore_index: None, ..Default::default() };
/// assert_eq!(popxl::ops::nll_loss_with(&p, &l, o).unwrap().shape(), &[4]);
/// ```
pub fn nll_loss_with(probs: &Tensor, labels: &Tensor, options: NllLossOptions) -> Result<Tensor> {
    nll_spec("nll_loss", &ir_ops::NllLoss, probs, labels, options).create1()
}

/// The loss of [`nll_loss`] and the gradient of that loss with respect to the
/// logits that produced `probs` by softmax, `(loss, dlogits)`, with an incoming
/// loss gradient of 1 (op `NllLossWithSoftmaxGrad`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let p = popxl::constant(ndarray::Array2::<f32>::ones((4, 10)), "p").unwrap();
/// let l = popxl::constant(ndarray::Array1::<i32>::zeros(4), "l").unwrap();
/// let (loss, dlogits) = popxl::ops::nll_loss_with_softmax_grad(&p, &l).unwrap();
/// assert_eq!((loss.rank(), dlogits.shape()), (0, &[4usize, 10][..]));
/// ```
pub fn nll_loss_with_softmax_grad(probs: &Tensor, labels: &Tensor) -> Result<(Tensor, Tensor)> {
    nll_loss_with_softmax_grad_with(probs, labels, None, NllLossOptions::default())
}

/// [`nll_loss_with_softmax_grad`] with an explicit incoming loss gradient
/// (a scalar of `probs`' type; `None` means 1) and options.
///
/// ```
/// use popxl::ops::NllLossOptions;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let p = popxl::constant(ndarray::Array2::<f32>::ones((4, 10)), "p").unwrap();
/// let l = popxl::constant(ndarray::Array1::<i32>::zeros(4), "l").unwrap();
/// let g = popxl::constant(0.5f32, "g").unwrap();
/// let (_loss, d) = popxl::ops::nll_loss_with_softmax_grad_with(&p, &l, Some(&g), NllLossOptions::default()).unwrap();
/// assert_eq!(d.shape(), &[4, 10]);
/// ```
pub fn nll_loss_with_softmax_grad_with(
    probs: &Tensor,
    labels: &Tensor,
    loss_grad: Option<&Tensor>,
    options: NllLossOptions,
) -> Result<(Tensor, Tensor)> {
    let mut spec = nll_spec("nll_loss_with_softmax_grad", &ir_ops::NllLossWithSoftmaxGrad, probs, labels, options);
    if let Some(g) = loss_grad {
        spec = spec.input(2, g);
    }
    let created = spec.create()?;
    let n = created.outputs.len();
    let [loss, dlogits]: [Tensor; 2] = created.outputs.try_into().map_err(|_| PopXlError::IndexOutOfRange {
        what: "output of op NllLossWithSoftmaxGrad".into(),
        index: 1,
        len: n,
    })?;
    Ok((loss, dlogits))
}
