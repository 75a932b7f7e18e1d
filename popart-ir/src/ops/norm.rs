//! Group normalisation, PopART's `GroupNormOp` (PopXL `group_norm`, and
//! `layer_norm` as one group): `GroupNorm` and its gradient `GroupNormGrad`.
//!
//! `x` is `[N, C, S..]`; its channels are split into `num_groups` groups and
//! each (sample, group) is normalised over its `C / num_groups · ∏S` elements,
//! then scaled and shifted per channel: `y = (x − mean) · inv_std · w[c] + b[c]`
//! with `inv_std = 1 / sqrt(var + epsilon)` (biased variance). The op also
//! outputs the `[N · num_groups]` means and inverse standard deviations, which
//! the gradient reads, as PopART.

use super::grad::spec;
use super::{op_types, require_float};
use crate::{GradRule, GradSource, InferContext, Op, OpDef, Result, TensorInfo};

op_types!(
    /// `GroupNorm{num_groups, epsilon}(x, w, b) -> (y, mean, inv_std)`; PopXL
    /// `group_norm` / `layer_norm` (output 0)
    GroupNorm,
    /// `GroupNormGrad{num_groups, epsilon}(g, x, w, mean, inv_std) -> (dx, dw, db)`
    GroupNormGrad,
);

/// `(N, C, S, num_groups)` of a group norm of `x`, checked against `w` and `b`.
pub fn group_norm_dims(
    ctx: &InferContext<'_>,
    x: &TensorInfo,
    w: &TensorInfo,
    b: &TensorInfo,
) -> Result<(usize, usize, usize, usize)> {
    require_float(ctx, x, "the input")?;
    if x.rank() < 2 {
        return Err(ctx.error(format!("the input must be [N, C, ..], got {x}")));
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let s: usize = x.shape[2..].iter().product();
    for (t, what) in [(w, "weight"), (b, "bias")] {
        if t.dtype != x.dtype || t.shape != [c] {
            return Err(ctx.error(format!("the {what} must be a {} tensor of shape [{c}], got {t}", x.dtype)));
        }
    }
    let groups = ctx.attrs.int("num_groups").unwrap_or(1);
    match usize::try_from(groups) {
        Ok(g) if g >= 1 && c.is_multiple_of(g) => Ok((n, c, s, g)),
        _ => Err(ctx.error(format!("num_groups ({groups}) must be at least 1 and divide the {c} channels"))),
    }
}

fn epsilon_ok(ctx: &InferContext<'_>) -> Result<()> {
    match ctx.attrs.float("epsilon").unwrap_or(1e-5) {
        e if e >= 0.0 && e.is_finite() => Ok(()),
        e => Err(ctx.error(format!("epsilon must be finite and non-negative, got {e}"))),
    }
}

impl OpDef for GroupNorm {
    fn op_type(&self) -> &'static str {
        "GroupNorm"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let (n, _, _, g) = group_norm_dims(ctx, x, ctx.input(1)?, ctx.input(2)?)?;
        epsilon_ok(ctx)?;
        let stat = TensorInfo::new(x.dtype, [n * g]);
        Ok(vec![x.clone(), stat.clone(), stat])
    }
    /// `GroupNormGrad(g, x, w, mean, inv_std)` for `x`, `w` and `b`, as PopART.
    fn grad(&self, op: &Op) -> GradRule {
        let ins = [
            (0, GradSource::GradOfOutput(0)),
            (1, GradSource::FwdInput(0)),
            (2, GradSource::FwdInput(1)),
            (3, GradSource::FwdOutput(1)),
            (4, GradSource::FwdOutput(2)),
        ];
        GradRule::Ops(vec![spec(&GroupNormGrad, op.attrs.clone(), &ins, &[(0, 0), (1, 1), (2, 2)])])
    }
}

impl OpDef for GroupNormGrad {
    fn op_type(&self) -> &'static str {
        "GroupNormGrad"
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (g, x, w) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        let (n, _, _, groups) = group_norm_dims(ctx, x, w, w)?;
        let stat = TensorInfo::new(x.dtype, [n * groups]);
        if g != x || ctx.input(3)? != &stat || ctx.input(4)? != &stat {
            return Err(ctx.error(format!("the gradient must match the input {x} and the statistics {stat}")));
        }
        Ok(vec![x.clone(), w.clone(), w.clone()])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&GroupNorm, &GroupNormGrad];
