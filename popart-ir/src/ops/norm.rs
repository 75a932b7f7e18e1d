//! Group normalisation, PopART's `GroupNormOp` (PopXL `group_norm`, and
//! `layer_norm` as one group): `GroupNorm` and its gradient `GroupNormGrad`;
//! training-mode batch normalisation, PopART's `BatchNormOp` with its five
//! outputs: `BatchNorm` and its gradient `BatchNormGrad`.
//!
//! `x` is `[N, C, S..]`; its channels are split into `num_groups` groups and
//! each (sample, group) is normalised over its `C / num_groups · ∏S` elements,
//! then scaled and shifted per channel: `y = (x − mean) · inv_std · w[c] + b[c]`
//! with `inv_std = 1 / sqrt(var + epsilon)` (biased variance). The op also
//! outputs the `[N · num_groups]` means and inverse standard deviations, which
//! the gradient reads, as PopART.

use super::grad::spec;
use super::{op_types, require_float};
use crate::{op_attrs, AttrSpec, Attributes, GradRule, GradSource, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of `GroupNorm` and `GroupNormGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct GroupNormAttrs {
        /// Channel groups.
        pub num_groups: i64 = 1,
        /// Added to the variance.
        pub epsilon: f64 = 1e-5,
    }
}

op_attrs! {
    /// Attributes of `BatchNorm` and `BatchNormGrad`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct BatchNormAttrs {
        /// Added to the variance.
        pub epsilon: f64 = 1e-5,
        /// Weight of the running statistics.
        pub momentum: f64 = 0.9,
        /// The running variance is unbiased.
        pub unbiased_variance: bool = false,
    }
}

op_types!(
    /// `GroupNorm{num_groups, epsilon}(x, w, b) -> (y, mean, inv_std)`; PopXL
    /// `group_norm` / `layer_norm` (output 0)
    GroupNorm,
    /// `GroupNormGrad{num_groups, epsilon}(g, x, w, mean, inv_std, r?) -> (dx (+ r), dw, db)`:
    /// with the optional `r` (input 5, of `x`'s info; the `fuse-residual-grad`
    /// pattern connects it) added to `dx`, the gradient a residual connection
    /// around the norm sums with it
    GroupNormGrad,
    /// `BatchNorm{epsilon, momentum, unbiased_variance}(x, scale, bias, mean, var)
    /// -> (y, new_mean, new_var, saved_mean, saved_inv_std)`: training-mode batch
    /// normalisation (ONNX `BatchNormalization` with all its outputs), see [`BatchNorm`]'s `infer`
    BatchNorm,
    /// `BatchNormGrad(g, x, scale, saved_mean, saved_inv_std) -> (dx, dscale, dbias)`
    BatchNormGrad,
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
    let groups = GroupNormAttrs::infer(ctx)?.num_groups;
    match usize::try_from(groups) {
        Ok(g) if g >= 1 && c.is_multiple_of(g) => Ok((n, c, s, g)),
        _ => Err(ctx.error(format!("num_groups ({groups}) must be at least 1 and divide the {c} channels"))),
    }
}

fn epsilon_ok(ctx: &InferContext<'_>, epsilon: f64) -> Result<()> {
    match epsilon {
        e if e >= 0.0 && e.is_finite() => Ok(()),
        e => Err(ctx.error(format!("epsilon must be finite and non-negative, got {e}"))),
    }
}

impl OpDef for GroupNorm {
    fn op_type(&self) -> &'static str {
        "GroupNorm"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        GroupNormAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let (n, _, _, g) = group_norm_dims(ctx, x, ctx.input(1)?, ctx.input(2)?)?;
        epsilon_ok(ctx, GroupNormAttrs::infer(ctx)?.epsilon)?;
        let stat = TensorInfo::new(x.dtype, [n * g]);
        Ok(vec![x.clone(), stat.clone(), stat])
    }
    /// `GroupNormGrad(g, x, w, mean, inv_std)` for `x`, `w` and `b`, as PopART.
    fn grad(&self, cx: &crate::GradContext<'_>) -> GradRule {
        let op = cx.op;
        let Ok(a) = GroupNormAttrs::of(op) else { return GradRule::None };
        let attrs = a.to_attrs();
        let ins = [
            (0, GradSource::GradOfOutput(0)),
            (1, GradSource::FwdInput(0)),
            (2, GradSource::FwdInput(1)),
            (3, GradSource::FwdOutput(1)),
            (4, GradSource::FwdOutput(2)),
        ];
        GradRule::Ops(vec![spec(&GroupNormGrad, attrs, &ins, &[(0, 0), (1, 1), (2, 2)])])
    }
}

impl OpDef for GroupNormGrad {
    fn op_type(&self) -> &'static str {
        "GroupNormGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        GroupNormAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (g, x, w) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        let (n, _, _, groups) = group_norm_dims(ctx, x, w, w)?;
        let stat = TensorInfo::new(x.dtype, [n * groups]);
        if g != x || ctx.input(3)? != &stat || ctx.input(4)? != &stat {
            return Err(ctx.error(format!("the gradient must match the input {x} and the statistics {stat}")));
        }
        if let Some(r) = ctx.optional_input(5) {
            if r != x {
                return Err(ctx.error(format!("the addend {r} must match the input {x}")));
            }
        }
        Ok(vec![x.clone(), w.clone(), w.clone()])
    }
}

/// `(N · ∏S, C)` of a batch norm of `x` `[N, C, S..]`: the elements per channel
/// and the channels, with every `[C]` parameter in `params` checked (dtype of `x`).
fn batch_norm_dims(ctx: &InferContext<'_>, x: &TensorInfo, params: &[(&TensorInfo, &str)]) -> Result<(usize, usize)> {
    require_float(ctx, x, "the input")?;
    if x.rank() < 2 {
        return Err(ctx.error(format!("the input must be [N, C, ..], got {x}")));
    }
    let c = x.shape[1];
    for &(t, what) in params {
        if t.dtype != x.dtype || t.shape != [c] {
            return Err(ctx.error(format!("the {what} must be a {} tensor of shape [{c}], got {t}", x.dtype)));
        }
    }
    let m = x.shape.iter().enumerate().filter(|&(d, _)| d != 1).try_fold(1usize, |m, (_, &s)| m.checked_mul(s));
    let m = m.ok_or_else(|| ctx.error(format!("the element count of {x} overflows")))?;
    Ok((m, c))
}

impl OpDef for BatchNorm {
    fn op_type(&self) -> &'static str {
        "BatchNorm"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        BatchNormAttrs::SCHEMA
    }
    /// Training mode, as PopART's `BatchNormOp` with five outputs: each channel
    /// `c` of `x` `[N, C, S..]` is normalised over its `M = N · ∏S` elements
    /// with the batch mean `μ` and biased batch variance `σ²`,
    /// `y = (x − μ) · inv_std · scale[c] + bias[c]` with
    /// `inv_std = 1 / sqrt(σ² + epsilon)`. The running statistics follow
    /// ONNX's momentum convention, `new_mean = momentum · mean + (1 − momentum) · μ`,
    /// and `new_var` likewise from `σ²`, or from the unbiased `σ² · M / (M − 1)`
    /// with `unbiased_variance` (PopART's `aiGraphcore` `BatchNormalization`,
    /// as PyTorch; needs `M >= 2`). Outputs 3 and 4 are the batch mean and
    /// inverse standard deviation that `BatchNormGrad` reads (PopART outputs
    /// the batch variance and converts it back).
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let params = [
            (ctx.input(1)?, "scale"),
            (ctx.input(2)?, "bias"),
            (ctx.input(3)?, "running mean"),
            (ctx.input(4)?, "running var"),
        ];
        let (m, c) = batch_norm_dims(ctx, x, &params)?;
        let a = BatchNormAttrs::infer(ctx)?;
        epsilon_ok(ctx, a.epsilon)?;
        match a.momentum {
            mo if (0.0..=1.0).contains(&mo) => {}
            mo => return Err(ctx.error(format!("momentum must be in [0, 1], got {mo}"))),
        }
        let unbiased = a.unbiased_variance;
        if m < 1 || (unbiased && m < 2) {
            return Err(ctx.error(format!(
                "batch statistics need at least {} values per channel, {x} has {m}",
                1 + unbiased as usize
            )));
        }
        let stat = TensorInfo::new(x.dtype, [c]);
        Ok(vec![x.clone(), stat.clone(), stat.clone(), stat.clone(), stat])
    }
    /// `BatchNormGrad(g, x, scale, saved_mean, saved_inv_std)` for `x`, `scale`
    /// and `bias`, as PopART's `BatchNormGradOp`. The running statistics are
    /// not differentiated (nor are gradients of outputs 1 to 4 propagated).
    fn grad(&self, _cx: &crate::GradContext<'_>) -> GradRule {
        let ins = [
            (0, GradSource::GradOfOutput(0)),
            (1, GradSource::FwdInput(0)),
            (2, GradSource::FwdInput(1)),
            (3, GradSource::FwdOutput(3)),
            (4, GradSource::FwdOutput(4)),
        ];
        GradRule::Ops(vec![spec(&BatchNormGrad, Attributes::new(), &ins, &[(0, 0), (1, 1), (2, 2)])])
    }
}

impl OpDef for BatchNormGrad {
    fn op_type(&self) -> &'static str {
        "BatchNormGrad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        BatchNormAttrs::SCHEMA
    }
    /// With `x̂ = (x − μ) · inv_std` per channel and sums over a channel's `M`
    /// elements: `dbias = Σ g`, `dscale = Σ g · x̂`, `dx = scale · inv_std ·
    /// (g − dbias / M − x̂ · dscale / M)`.
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (g, x, scale) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        let params = [(scale, "scale"), (ctx.input(3)?, "saved mean"), (ctx.input(4)?, "saved inverse std")];
        batch_norm_dims(ctx, x, &params)?;
        if g != x {
            return Err(ctx.error(format!("the gradient {g} must match the input {x}")));
        }
        Ok(vec![x.clone(), scale.clone(), scale.clone()])
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&GroupNorm, &GroupNormGrad, &BatchNorm, &BatchNormGrad];
