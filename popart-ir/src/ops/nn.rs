//! Neural-network ops: softmax and negative log-likelihood losses.

use super::grad::spec;
use super::grad::{NllLossGrad, SoftmaxGrad};
use super::{infer_error, normalize_axis, op_types, require_float};
use crate::{AttrValue, Attributes, GradRule, GradSource, InferContext, Op, OpDef, Result, TensorInfo};

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
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        require_float(ctx, x, "the input")?;
        normalize_axis(ctx.attrs.int("axis").unwrap_or(-1), x.rank()).map_err(infer_error(ctx))?;
        Ok(vec![x.clone()])
    }
    /// `SoftmaxGrad{axis}(g, y)`.
    fn grad(&self, op: &Op) -> GradRule {
        let attrs = Attributes::new().with("axis", AttrValue::Int(op.attrs.int("axis").unwrap_or(-1)));
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
    if ctx.attrs.bool("log_prob").unwrap_or(false) && ctx.optional_input(2).is_some() {
        return Err(ctx.error("log_prob inputs cannot take a loss gradient input"));
    }
    match ctx.attrs.str("reduction").unwrap_or("mean") {
        "mean" | "sum" => Ok(TensorInfo::new(p.dtype, Vec::<usize>::new())),
        "none" => Ok(TensorInfo::new(p.dtype, l.shape.clone())),
        other => Err(ctx.error(format!("unknown reduction `{other}` (expected mean, sum or none)"))),
    }
}

impl OpDef for NllLoss {
    fn op_type(&self) -> &'static str {
        "NllLoss"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        Ok(vec![nll_loss_info(ctx)?])
    }
    /// `NllLossGrad{reduction, ignore_index}(g, probs, labels)`; labels (integer) get none.
    fn grad(&self, op: &Op) -> GradRule {
        let ins = [(0, GradSource::GradOfOutput(0)), (1, GradSource::FwdInput(0)), (2, GradSource::FwdInput(1))];
        GradRule::Ops(vec![spec(&NllLossGrad, op.attrs.clone(), &ins, &[(0, 0)])])
    }
}

impl OpDef for NllLossWithSoftmaxGrad {
    fn op_type(&self) -> &'static str {
        "NllLossWithSoftmaxGrad"
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
        for key in ["scale", "fill"] {
            if ctx.attrs.float(key).is_none() {
                return Err(ctx.error(format!("missing float attribute `{key}`")));
            }
        }
        Ok(vec![x.clone()])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&Softmax, &NllLoss, &NllLossWithSoftmaxGrad, &MaskedSoftmax];
