//! Optimizer ops of PopART's Adam family: `AdamUpdater` (the updater term of
//! Adam, LAMB and AdaMax) and `AdamVarUpdate` (the weight update with LAMB's
//! trust ratio). Their scalar hyper-parameters are attributes or optional scalar
//! tensor inputs of any float type (PopART's non-constant `OptimizerValue`s).
//! `AdamStep` (an extension, made by the `fuse-adam` pattern) is one whole
//! Adam step of one weight: both moments, the updater term and the update.

use super::op_types;
use super::var_update::{check_scalar, float_compatible};
use crate::{op_attrs, Alias, AttrSpec, Attributes, DataType, InferContext, OpAttrs, OpDef, Result, TensorInfo};

op_attrs! {
    /// Attributes of `AdamUpdater` (hyper-parameters as attributes or inputs).
    #[derive(Clone, Debug, PartialEq)]
    pub struct AdamUpdaterAttrs {
        /// The Adam mode.
        pub mode: AdamMode = AdamMode::AdamNoBias,
        /// Or input 4.
        pub weight_decay: Option<f64> = None,
        /// Or input 5.
        pub beta1: Option<f64> = None,
        /// Or input 6.
        pub beta2: Option<f64> = None,
        /// Or input 7.
        pub epsilon: Option<f64> = None,
    }
}

op_attrs! {
    /// Attributes of `AdamVarUpdate`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct AdamVarUpdateAttrs {
        /// Or input 4.
        pub learning_rate: Option<f64> = None,
        /// Or input 5.
        pub max_weight_norm: Option<f64> = None,
    }
}

op_attrs! {
    /// Attributes of `AdamStep`: those of the ops it replaces.
    #[derive(Clone, Debug, PartialEq)]
    pub struct AdamStepAttrs {
        /// The first moment's moving-average factor: `m = f · m + (1 − f) · g`.
        pub m_factor: f64,
        /// The second moment's moving-average factor: `v = f · v + (1 − f) · g²`.
        pub v_factor: f64,
        /// The updater's mode (as [`AdamUpdaterAttrs::mode`]).
        pub mode: AdamMode = AdamMode::AdamNoBias,
        /// The updater's weight decay (absent: none).
        pub weight_decay: Option<f64> = None,
        /// The updater's beta1, for the bias correction.
        pub beta1: Option<f64> = None,
        /// The updater's beta2, for the bias correction.
        pub beta2: Option<f64> = None,
        /// The updater's epsilon (absent: 1e-7, as `AdamUpdater`).
        pub epsilon: Option<f64> = None,
        /// The update `w = a · w + b · u`: `a`.
        pub a: f64 = 1.0,
        /// The update's `b` (minus the learning rate).
        pub b: f64,
    }
}

op_types!(
    /// One Adam step of one weight, in place (an extension: PopXL writes it as
    /// the four ops it replaces; the `fuse-adam` pattern makes it): inputs
    /// `(w, g, m, v, step?)` at 0..=4, all but the step of one float32 or
    /// float64 info. Per element, with the attributes of [`AdamStepAttrs`],
    /// exactly as `Accumulate{moving_average}(m, g)`,
    /// `Accumulate{moving_average_square}(v, g)`, `u = AdamUpdater(w?, m, v,
    /// step?)` and `ScaledAddInplace{a, b}(w, u)` compute it: `m` and `v` are
    /// written in place (no outputs), the step incremented when connected, and
    /// output 0 is `w`'s memory.
    AdamStep,
    /// The updater term of Adam/LAMB/AdaMax (PopART `AdamUpdaterOp`): inputs
    /// `(w?, m, v, step?, wd?, beta1?, beta2?, eps?)` at 0..=7, attributes `mode`
    /// ([`AdamMode`]) and `weight_decay`, `beta1`, `beta2`, `epsilon` (for the
    /// scalars not given as tensors). With `step`, `step += 1` in place first and
    /// `mc = m / (1 - beta1^step)`, `vc = v / (1 - beta2^step)` (AdaMax: `vc = v`);
    /// without, `mc = m`, `vc = v`. Output `mc / (sqrt(vc) + eps) + wd * w`
    /// (AdaMax: `mc / (vc + eps) + wd * w`), of `w`'s dtype (else `m`'s).
    AdamUpdater,
    /// `w -= lr * ratio * x` in place (PopART `AdamVarUpdateOp`): inputs
    /// `(w, x, r1sq?, r2sq?, lr?, mwn?)` at 0..=5, attributes `learning_rate` and
    /// `max_weight_norm` (absent: no clipping). With both squared norms `r1sq = |w|²`
    /// and `r2sq = |x|²` (LAMB): `ratio = min(sqrt(r1sq), mwn) / sqrt(r2sq)`, or 1
    /// when `r1sq`, `r2sq` or `mwn` is 0; without them `ratio = 1` (Adam).
    AdamVarUpdate,
);

crate::attr_enum! {
    /// PopART's `AdamMode` as attribute `mode` of [`AdamUpdater`].
    ///
    /// ```
    /// use popart_ir::ops::optimizer::AdamMode;
    /// assert_eq!(AdamMode::from_name(AdamMode::LambNoBias.name()), Some(AdamMode::LambNoBias));
    /// ```
    pub enum AdamMode {
        /// Adam with bias correction (`step` required)
        Adam = "adam",
        /// Adam without bias correction
        AdamNoBias = "adam_no_bias",
        /// LAMB with bias correction (`step` required); the updater is Adam's
        Lamb = "lamb",
        /// LAMB without bias correction
        LambNoBias = "lamb_no_bias",
        /// AdaMax: bias correction of `m` only (`step` required), `v` not square-rooted
        AdaMax = "adamax",
    }
}

impl AdamMode {
    /// Whether the mode corrects the bias of `m` (and of `v`, but for AdaMax).
    pub fn bias_correction(self) -> bool {
        matches!(self, Self::Adam | Self::Lamb | Self::AdaMax)
    }
}

/// A scalar hyper-parameter `key` at input `index` or attribute value `attr`:
/// whether it is present (tensor or attribute); both at once is an error.
fn hyper(ctx: &InferContext<'_>, like: &TensorInfo, index: u32, key: &str, attr: Option<f64>) -> Result<bool> {
    let input = check_scalar(ctx, like, index, key)?;
    if input && attr.is_some() {
        return Err(ctx.error(format!("`{key}` is given both as an attribute and as input {index}")));
    }
    Ok(input || attr.is_some())
}

impl OpDef for AdamUpdater {
    fn op_type(&self) -> &'static str {
        "AdamUpdater"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        AdamUpdaterAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let a = AdamUpdaterAttrs::infer(ctx)?;
        let mode = a.mode;
        let (m, v) = (ctx.input(1)?, ctx.input(2)?);
        if !float_compatible(m.dtype, v.dtype) || m.shape != v.shape {
            return Err(ctx.error(format!("the moments must be float tensors of one shape, got {m} and {v}")));
        }
        let w = ctx.optional_input(0);
        if let Some(w) = w {
            if !float_compatible(w.dtype, m.dtype) || w.shape != m.shape {
                return Err(ctx.error(format!("the weight {w} must be a float tensor of the moments' shape {m}")));
            }
        }
        let step = ctx.optional_input(3);
        if let Some(s) = step {
            let ok = s.nelms() == 1 && !matches!(s.dtype, DataType::Bool | DataType::Float16);
            if !ok {
                return Err(
                    ctx.error(format!("the time step must be a one-element float32/float64/integer tensor, got {s}"))
                );
            }
        }
        // Given both ways is refused; a tensor may hold any value.
        hyper(ctx, m, 4, "weight_decay", a.weight_decay)?;
        let decays = ctx.optional_input(4).is_some() || a.weight_decay.is_some_and(|wd| wd != 0.0);
        if decays && w.is_none() {
            return Err(ctx.error("weight decay needs the weight (input 0)"));
        }
        let b1 = hyper(ctx, m, 5, "beta1", a.beta1)?;
        let b2 = hyper(ctx, m, 6, "beta2", a.beta2)?;
        hyper(ctx, m, 7, "epsilon", a.epsilon)?;
        if mode.bias_correction() {
            let betas = if mode == AdamMode::AdaMax { b1 } else { b1 && b2 };
            if step.is_none() || !betas {
                return Err(ctx.error(format!(
                    "mode {} corrects the bias: it needs the time step (input 3) and beta1{}",
                    mode.name(),
                    if mode == AdamMode::AdaMax { "" } else { " and beta2" }
                )));
            }
        }
        let dtype = w.map_or(m.dtype, |w| w.dtype);
        Ok(vec![TensorInfo::new(dtype, m.shape.clone())])
    }
    /// The time step (input 3), incremented in place when connected (no
    /// output is its memory).
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::written(3)]
    }
}

impl OpDef for AdamVarUpdate {
    fn op_type(&self) -> &'static str {
        "AdamVarUpdate"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        AdamVarUpdateAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let (w, x) = (ctx.input(0)?, ctx.input(1)?);
        if !float_compatible(w.dtype, x.dtype) || w.shape != x.shape {
            return Err(ctx.error(format!("the updater {x} must be a float tensor of the weight's shape {w}")));
        }
        let r1 = check_scalar(ctx, w, 2, "r1 (the squared weight norm)")?;
        let r2 = check_scalar(ctx, w, 3, "r2 (the squared updater norm)")?;
        if r1 != r2 {
            return Err(ctx.error("the LAMB norms r1 and r2 (inputs 2 and 3) go together"));
        }
        let a = AdamVarUpdateAttrs::infer(ctx)?;
        if !hyper(ctx, w, 4, "learning_rate", a.learning_rate)? {
            return Err(ctx.error("missing learning rate: attribute `learning_rate` or input 4"));
        }
        hyper(ctx, w, 5, "max_weight_norm", a.max_weight_norm)?;
        Ok(vec![w.clone()])
    }
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::modified(0, 0)]
    }
}

impl OpDef for AdamStep {
    fn op_type(&self) -> &'static str {
        "AdamStep"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        AdamStepAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let a = AdamStepAttrs::infer(ctx)?;
        let w = ctx.input(0)?;
        if !matches!(w.dtype, DataType::Float32 | DataType::Float64) {
            return Err(ctx.error(format!("the weight must be float32 or float64, got {w}")));
        }
        for (i, what) in [(1, "gradient"), (2, "first moment"), (3, "second moment")] {
            let t = ctx.input(i)?;
            if t != w {
                return Err(ctx.error(format!("the {what} (input {i}) {t} must have the weight's info {w}")));
            }
        }
        if let Some(s) = ctx.optional_input(4) {
            if s.nelms() != 1 || matches!(s.dtype, DataType::Bool | DataType::Float16) {
                return Err(
                    ctx.error(format!("the time step must be a one-element float32/float64/integer tensor, got {s}"))
                );
            }
        }
        if a.mode.bias_correction() {
            let betas = a.beta1.is_some() && (a.mode == AdamMode::AdaMax || a.beta2.is_some());
            if ctx.optional_input(4).is_none() || !betas {
                return Err(
                    ctx.error(format!("mode {} corrects the bias: it needs the time step and betas", a.mode.name()))
                );
            }
        }
        Ok(vec![w.clone()])
    }
    /// The weight (output 0 its memory), both moments and the step (written).
    fn aliases(&self, _attrs: &Attributes) -> Vec<Alias> {
        vec![Alias::modified(0, 0), Alias::written(2), Alias::written(3), Alias::written(4)]
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&AdamUpdater, &AdamVarUpdate, &AdamStep];
