//! Neural-network ops: softmax and negative log-likelihood losses.

use super::grad::spec;
use super::grad::{NllLossGrad, SoftmaxGrad};
use super::{infer_error, normalize_axis, op_types, require_float};
use crate::{op_attrs, AttrSpec, GradRule, GradSource, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of `Softmax` and `SoftmaxGrad`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct SoftmaxAttrs {
        /// The normalised axis (negative counts from the end).
        pub axis: i64 = -1,
    }
}

crate::attr_enum! {
    /// How a loss is reduced over the samples.
    pub enum LossReduction {
        /// Mean over the non-ignored samples.
        Mean = "mean",
        /// Sum.
        Sum = "sum",
        /// One loss per sample.
        None = "none",
    }
}

op_attrs! {
    /// Attributes of `NllLoss`, `NllLossWithSoftmaxGrad` and `NllLossGrad`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct NllLossAttrs {
        /// The reduction.
        pub reduction: LossReduction = LossReduction::Mean,
        /// Samples with this label contribute nothing.
        pub ignore_index: Option<i64> = None,
        /// The input holds log-probabilities (PopXL `nll_loss(log_prob=True)`).
        pub log_prob: bool = false,
    }
}

op_attrs! {
    /// Attributes of `MaskedSoftmax` (made by the `fuse-masked-softmax` pattern).
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct MaskedSoftmaxAttrs {
        /// `x` is multiplied by this.
        pub scale: f64,
        /// The value where the mask is false.
        pub fill: f64,
        /// The axis (always the last).
        pub axis: i64 = -1,
    }
}

op_types!(
    /// softmax along `axis`
    Softmax,
    /// negative log likelihood of `probs` at integer `labels`
    NllLoss,
    /// `NllLoss` plus the gradient of the loss w.r.t. the logits that produced `probs` by softmax
    NllLossWithSoftmaxGrad,
    /// `softmax(where(mask, x · scale, fill))` along the last axis, in one pass (made by
    /// the `fuse-masked-softmax` pattern from `Mul`, `Where` and `Softmax`; no gradient)
    MaskedSoftmax,
);

impl OpDef for Softmax {
    fn op_type(&self) -> &'static str {
        "Softmax"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        SoftmaxAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        require_float(ctx, x, "the input")?;
        normalize_axis(SoftmaxAttrs::infer(ctx)?.axis, x.rank()).map_err(infer_error(ctx))?;
        Ok(vec![x.clone()])
    }
    /// `SoftmaxGrad{axis}(g, y)`.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = SoftmaxAttrs::of(op) else { return GradRule::None };
        let attrs = a.to_attrs();
        let ins = [(0, GradSource::GradOfOutput(0)), (1, GradSource::FwdOutput(0))];
        GradRule::Ops(vec![spec(&SoftmaxGrad, attrs, &ins, &[(0, 0)])])
    }
}

/// Checks `probs` is `[N.., C]` float and `labels` is `[N..]` integer; returns the loss info.
fn nll_loss_info(ctx: &InferContext<'_>) -> Result<TensorInfo> {
    let (p, l) = (ctx.input(0)?, ctx.input(1)?);
    require_float(ctx, p, "probs")?;
    if !l.dtype.is_int() {
        return Err(ctx.error(format!("labels must be an integer tensor, got {}", l.dtype)));
    }
    if p.rank() < 1 || l.shape[..] != p.shape[..p.rank() - 1] {
        return Err(ctx.error(format!(
            "labels shape {:?} must equal probs shape {:?} without its last (class) dimension",
            l.shape, p.shape
        )));
    }
    let a = NllLossAttrs::infer(ctx)?;
    if a.log_prob && ctx.optional_input(2).is_some() {
        return Err(ctx.error("log_prob inputs cannot take a loss gradient input"));
    }
    match a.reduction {
        LossReduction::Mean | LossReduction::Sum => Ok(TensorInfo::new(p.dtype, Vec::<usize>::new())),
        LossReduction::None => Ok(TensorInfo::new(p.dtype, l.shape.clone())),
    }
}

impl OpDef for NllLoss {
    fn op_type(&self) -> &'static str {
        "NllLoss"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        NllLossAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        Ok(vec![nll_loss_info(ctx)?])
    }
    /// `NllLossGrad{reduction, ignore_index}(g, probs, labels)`; labels (integer) get none.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = NllLossAttrs::of(op) else { return GradRule::None };
        let attrs = a.to_attrs();
        let ins = [(0, GradSource::GradOfOutput(0)), (1, GradSource::FwdInput(0)), (2, GradSource::FwdInput(1))];
        GradRule::Ops(vec![spec(&NllLossGrad, attrs, &ins, &[(0, 0)])])
    }
}

impl OpDef for NllLossWithSoftmaxGrad {
    fn op_type(&self) -> &'static str {
        "NllLossWithSoftmaxGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        NllLossAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let loss = nll_loss_info(ctx)?;
        if let Some(g) = ctx.optional_input(2) {
            if g.dtype != loss.dtype || g.nelms() != 1 {
                return Err(ctx.error(format!("loss_grad must be a {} scalar, got {g}", loss.dtype)));
            }
        }
        Ok(vec![loss, ctx.input(0)?.clone()])
    }
}

impl OpDef for MaskedSoftmax {
    fn op_type(&self) -> &'static str {
        "MaskedSoftmax"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        MaskedSoftmaxAttrs::SCHEMA
    }
    /// `MaskedSoftmax{scale, fill}(x, mask)`: `x` float of rank >= 1, `mask` bool
    /// broadcasting to `x`; the result is `x`'s info.
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (x, mask) = (ctx.input(0)?, ctx.input(1)?);
        require_float(ctx, x, "the input")?;
        if x.rank() == 0 {
            return Err(ctx.error("a masked softmax needs an input of rank >= 1"));
        }
        if mask.dtype != crate::DataType::Bool {
            return Err(ctx.error(format!("the mask must be bool, got {}", mask.dtype)));
        }
        if super::broadcast_shapes(&x.shape, &mask.shape).as_deref() != Some(&x.shape[..]) {
            return Err(ctx.error(format!("mask shape {:?} does not broadcast to {:?}", mask.shape, x.shape)));
        }
        MaskedSoftmaxAttrs::infer(ctx)?;
        Ok(vec![x.clone()])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&Softmax, &NllLoss, &NllLossWithSoftmaxGrad, &MaskedSoftmax];
