//! Multi-head self-attention in one op: `Attention` and its gradient
//! `AttentionGrad`. PopXL has no such op (its programs write attention from
//! matmuls, a mask and a softmax, which this catalogue runs too); this is an
//! extension a model can call instead, to run attention without materialising
//! the `[B, H, T, T]` scores or copying the heads apart.
//!
//! The input is the q/k/v projection as it leaves its matmul, `qkv`
//! `[B, T, 3·D]` (queries, keys, values side by side along the last axis, each
//! `heads` heads of `D / heads` values). For head `h` of batch `b`, with `q`,
//! `k`, `v` its `[T, dh]` slices:
//!
//! `y[b, :, h·dh..(h+1)·dh] = softmax(scale · q kᵀ, masked) v`
//!
//! where, when `causal`, position `i` attends to positions `j <= i` only (the
//! others get probability 0, as `where(mask, s, -1e9)` gives in f32). The
//! second output, `[B, heads, T]`, is the log-sum-exp of each softmax row,
//! which the gradient reads to recompute the probabilities instead of storing them.

use super::grad::spec;
use super::op_types;
use crate::{op_attrs, AttrSpec, DataType, GradRule, GradSource, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of `Attention` and `AttentionGrad`.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct AttentionAttrs {
        /// Heads: `D / heads` values each.
        pub heads: i64,
        /// Scale of the scores (usually `1 / sqrt(D / heads)`).
        pub scale: f64,
        /// Position `i` attends only to positions `j <= i`.
        pub causal: bool = true,
    }
}

op_types!(
    /// `Attention{heads, scale, causal}(qkv) -> (y, lse)`: multi-head softmax
    /// self-attention of `qkv` `[B, T, 3·D]`; `y` `[B, T, D]`, `lse` `[B, heads, T]`
    Attention,
    /// `AttentionGrad{heads, scale, causal}(g, qkv, y, lse) -> dqkv`
    AttentionGrad,
);

/// `(B, T, D, heads)` of an attention over `qkv`, checked.
pub fn attention_dims(ctx: &InferContext<'_>, qkv: &TensorInfo) -> Result<(usize, usize, usize, usize)> {
    if qkv.dtype != DataType::Float32 {
        return Err(ctx.error(format!("attention runs on float32 q/k/v, got {}", qkv.dtype)));
    }
    let &[b, t, w] = &qkv.shape[..] else {
        return Err(ctx.error(format!("qkv must be [B, T, 3·D], got {qkv}")));
    };
    let a = AttentionAttrs::infer(ctx)?;
    if !w.is_multiple_of(3) {
        return Err(ctx.error(format!("qkv's last axis ({w}) must hold q, k and v: a multiple of 3")));
    }
    let d = w / 3;
    match usize::try_from(a.heads) {
        Ok(h) if h >= 1 && d.is_multiple_of(h) => {}
        _ => return Err(ctx.error(format!("heads ({}) must be at least 1 and divide the width {d}", a.heads))),
    }
    if !a.scale.is_finite() {
        return Err(ctx.error(format!("the scale must be finite, got {}", a.scale)));
    }
    Ok((b, t, d, a.heads as usize))
}

/// Multiply-adds of `count` products of `B·T·D·T` each, from `qkv` at input `qkv_pos`.
fn products(ctx: &crate::CostContext<'_>, qkv_pos: u32, count: u64) -> u64 {
    let (t, elements) = ctx.input(qkv_pos).map_or((0, 0), |x| (x.shape.get(1).copied().unwrap_or(0), x.nelms()));
    // `qkv` holds `B·T·3D` elements.
    (elements as u64 / 3).saturating_mul(t as u64).saturating_mul(count)
}

impl OpDef for Attention {
    fn op_type(&self) -> &'static str {
        "Attention"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        AttentionAttrs::SCHEMA
    }
    /// The two products of every head, `q kᵀ` and `p v` (`B·T·D·T`
    /// multiply-adds each), counted in full even when causal, as model FLOPs
    /// (MFU) count attention.
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.matrix(products(ctx, 0, 2))
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let qkv = ctx.input(0)?;
        let (b, t, d, h) = attention_dims(ctx, qkv)?;
        Ok(vec![TensorInfo::new(qkv.dtype, [b, t, d]), TensorInfo::new(qkv.dtype, [b, h, t])])
    }
    /// `AttentionGrad(g, qkv, y, lse)` for `qkv` (the log-sum-exp output gets none).
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let Ok(a) = AttentionAttrs::of(cx.op) else { return GradRule::None };
        let ins = [
            (0, GradSource::GradOfOutput(0)),
            (1, GradSource::FwdInput(0)),
            (2, GradSource::FwdOutput(0)),
            (3, GradSource::FwdOutput(1)),
        ];
        GradRule::Ops(vec![spec(&AttentionGrad, a.to_attrs(), &ins, &[(0, 0)])])
    }
}

impl OpDef for AttentionGrad {
    fn op_type(&self) -> &'static str {
        "AttentionGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        AttentionAttrs::SCHEMA
    }
    /// The four products of a head's gradient (`dv`, `dp`, `dq`, `dk`), counted
    /// as [`Attention`]'s (the recomputed scores are not model FLOPs).
    fn cost(&self, ctx: &crate::CostContext<'_>) -> crate::OpCost {
        ctx.matrix(products(ctx, 1, 4))
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let qkv = ctx.input(1)?;
        let (b, t, d, h) = attention_dims(ctx, qkv)?;
        let y = TensorInfo::new(qkv.dtype, [b, t, d]);
        let lse = TensorInfo::new(qkv.dtype, [b, h, t]);
        if ctx.input(0)? != &y || ctx.input(2)? != &y || ctx.input(3)? != &lse {
            return Err(ctx.error(format!("the gradient and the output must be {y}, the log-sum-exp {lse}")));
        }
        Ok(vec![qkv.clone()])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&Attention, &AttentionGrad];
