//! The Adam family of PopXL's `var_updates`: the updater terms of Adam, LAMB and
//! AdaMax (op `AdamUpdater`) and the weight update (op `AdamVarUpdate`).

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::optimizer::{AdamMode, AdamUpdaterAttrs, AdamVarUpdateAttrs};

use super::var_update::Scalar;
use super::OpBuilder;
use crate::{PopXlError, Result, Tensor};

/// Keyword arguments of [`adam_updater`], [`lamb_updater`] and [`adamax_updater`]
/// (PopXL's defaults: every one `None` but `epsilon = 1e-7`).
///
/// ```
/// let o = popxl::ops::AdamUpdaterOptions::default();
/// assert_eq!(o.epsilon, popxl::ops::Scalar::Const(1e-7));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct AdamUpdaterOptions<'a> {
    /// The weight `w`; required for weight decay.
    pub weight: Option<&'a Tensor>,
    /// The time step `t` (a one-element float32/float64/integer tensor): enables
    /// the bias correction; incremented by 1 in place before it is used.
    pub time_step: Option<&'a Tensor>,
    /// Weight decay `wd` (`x += wd * w`); `None` or a constant 0 for none.
    pub weight_decay: Option<Scalar<'a>>,
    /// `beta1`, for the bias correction of `m` (AdaMax: default 0.9).
    pub beta1: Option<Scalar<'a>>,
    /// `beta2`, for the bias correction of `v` (not for AdaMax).
    pub beta2: Option<Scalar<'a>>,
    /// `eps` of the denominator.
    pub epsilon: Scalar<'a>,
}

impl Default for AdamUpdaterOptions<'_> {
    fn default() -> Self {
        AdamUpdaterOptions {
            weight: None,
            time_step: None,
            weight_decay: None,
            beta1: None,
            beta2: None,
            epsilon: Scalar::Const(1e-7),
        }
    }
}

fn invalid(what: &'static str, reason: &'static str) -> PopXlError {
    PopXlError::IncompatibleOptions { what, reason }
}

/// PopXL's `weight_decay_is_required`: a tensor, or a constant other than 0.
fn decays(wd: &Option<Scalar<'_>>) -> bool {
    match wd {
        Some(Scalar::Tensor(_)) => true,
        Some(Scalar::Const(v)) => *v != 0.0,
        None => false,
    }
}

fn create_updater<'a>(
    what: &'static str,
    mode: AdamMode,
    m: &'a Tensor,
    v: &'a Tensor,
    o: AdamUpdaterOptions<'a>,
) -> Result<Tensor> {
    if decays(&o.weight_decay) && o.weight.is_none() {
        return Err(invalid(what, "Weight decay requires weight to not be None."));
    }
    let mut b = OpBuilder::new(what, &ir_ops::AdamUpdater).input(1, m).input(2, v);
    let mut attrs =
        AdamUpdaterAttrs { mode, weight_decay: None, beta1: None, beta2: None, epsilon: o.epsilon.constant() };
    if let (true, Some(w)) = (decays(&o.weight_decay), o.weight) {
        let wd = o.weight_decay.unwrap_or(Scalar::Const(0.0));
        attrs.weight_decay = wd.constant();
        b = b.input(0, w).scalar_input(4, &wd);
    }
    if mode.bias_correction() {
        if let Some(t) = o.time_step {
            b = b.input(3, t);
        }
        if let Some(b1) = o.beta1 {
            attrs.beta1 = b1.constant();
            b = b.scalar_input(5, &b1);
        }
        if let (false, Some(b2)) = (mode == AdamMode::AdaMax, o.beta2) {
            attrs.beta2 = b2.constant();
            b = b.scalar_input(6, &b2);
        }
    }
    b.scalar_input(7, &o.epsilon).typed(&attrs).create1()
}

/// Adam's updater term (op `AdamUpdater`; PopXL's `var_updates.adam_updater`):
/// with `time_step` (and then both betas), `time_step += 1` in place,
/// `mc = m / (1 - beta1^t)` and `vc = v / (1 - beta2^t)`; without, `mc = m` and
/// `vc = v`. Returns `mc / (sqrt(vc) + eps) + wd * w`, of the weight's dtype
/// (else `m`'s). Errors as PopXL: weight decay without `weight`, a `time_step`
/// without both betas.
///
/// ```
/// use popxl::ops::{self, AdamUpdaterOptions};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let m = popxl::variable(vec![0.1f32, 0.2], "m").unwrap();
/// let v = popxl::variable(vec![0.01f32, 0.04], "v").unwrap();
/// let t = popxl::variable(0.0f32, "t").unwrap();
/// let opts = AdamUpdaterOptions {
///     time_step: Some(&t),
///     beta1: Some(0.9.into()),
///     beta2: Some(0.999.into()),
///     ..Default::default()
/// };
/// let x = ops::adam_updater(&m, &v, opts).unwrap();
/// assert_eq!(x.shape(), &[2]);
/// ```
pub fn adam_updater<'a>(
    acc_first_order: &'a Tensor,
    acc_second_order: &'a Tensor,
    options: AdamUpdaterOptions<'a>,
) -> Result<Tensor> {
    let mode = bias_mode("adam_updater", &options, AdamMode::Adam, AdamMode::AdamNoBias)?;
    create_updater("adam_updater", mode, acc_first_order, acc_second_order, options)
}

fn bias_mode(what: &'static str, o: &AdamUpdaterOptions<'_>, bias: AdamMode, no_bias: AdamMode) -> Result<AdamMode> {
    match (o.time_step, &o.beta1, &o.beta2) {
        (Some(_), Some(_), Some(_)) => Ok(bias),
        (Some(_), _, _) => Err(invalid(what, "Bias correction requires both beta1 and beta2 to not be None.")),
        (None, _, _) => Ok(no_bias),
    }
}

/// LAMB's updater term (op `AdamUpdater` in LAMB mode; PopXL's
/// `var_updates.lamb_updater`): the same term as [`adam_updater`]; LAMB differs in
/// the weight update, whose trust ratio [`adam_var_update`] applies from the
/// squared norms of the weight and of this term.
///
/// ```
/// use popxl::ops::{self, AdamUpdaterOptions};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let m = popxl::variable(vec![0.1f32, 0.2], "m").unwrap();
/// let v = popxl::variable(vec![0.01f32, 0.04], "v").unwrap();
/// let w = popxl::variable(vec![1.0f32, 2.0], "w").unwrap();
/// let opts = AdamUpdaterOptions { weight: Some(&w), weight_decay: Some(0.01.into()), ..Default::default() };
/// assert!(ops::lamb_updater(&m, &v, opts).is_ok());
/// ```
pub fn lamb_updater<'a>(
    acc_first_order: &'a Tensor,
    acc_second_order: &'a Tensor,
    options: AdamUpdaterOptions<'a>,
) -> Result<Tensor> {
    let mode = bias_mode("lamb_updater", &options, AdamMode::Lamb, AdamMode::LambNoBias)?;
    create_updater("lamb_updater", mode, acc_first_order, acc_second_order, options)
}

/// AdaMax's updater term (op `AdamUpdater` in AdaMax mode; PopXL's
/// `var_updates.adamax_updater`): `time_step` (required) `+= 1` in place, then
/// `mc / (v + eps) + wd * w` with `mc = m / (1 - beta1^t)`, `beta1` defaulting to
/// 0.9. `v` is the infinity norm accumulator (`Accumulate` type `infinity`).
/// PopXL has no `beta2` here: setting it is an error.
///
/// ```
/// use popxl::ops::{self, AdamUpdaterOptions};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let m = popxl::variable(vec![0.1f32, 0.2], "m").unwrap();
/// let u = popxl::variable(vec![0.5f32, 0.5], "u").unwrap();
/// let t = popxl::variable(0i32, "t").unwrap();
/// let opts = AdamUpdaterOptions { time_step: Some(&t), ..Default::default() };
/// assert!(ops::adamax_updater(&m, &u, opts).is_ok());
/// assert!(ops::adamax_updater(&m, &u, Default::default()).is_err());
/// ```
pub fn adamax_updater<'a>(
    acc_first_order: &'a Tensor,
    acc_second_order: &'a Tensor,
    options: AdamUpdaterOptions<'a>,
) -> Result<Tensor> {
    if options.time_step.is_none() {
        return Err(invalid("adamax_updater", "AdaMax requires time_step to not be None."));
    }
    if options.beta2.is_some() {
        return Err(invalid("adamax_updater", "AdaMax takes no beta2."));
    }
    let options = AdamUpdaterOptions { beta1: Some(options.beta1.unwrap_or(Scalar::Const(0.9))), ..options };
    create_updater("adamax_updater", AdamMode::AdaMax, acc_first_order, acc_second_order, options)
}

/// `t -= lr * ratio * x` in place, `x` an updater term (op `AdamVarUpdate`;
/// PopXL's `var_updates.adam_var_update`). With the squared norms `r1 = |w|²` and
/// `r2 = |x|²` (LAMB), `ratio = min(sqrt(r1), max_weight_norm) / sqrt(r2)`, or 1
/// when `r1`, `r2` or `max_weight_norm` is 0; without them (Adam) `ratio = 1`.
/// `max_weight_norm = None` clips nothing.
///
/// PopXL's `learning_rate` defaults to `None`, which leaves PopART's learning rate
/// unset; here it is required. `r1` and `r2` go together (PopXL requires both).
///
/// ```
/// use popxl::ops::{self, Scalar};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let w = popxl::variable(vec![1.0f32, 2.0], "w").unwrap();
/// let x = popxl::constant(vec![0.1f32, 0.2], "x").unwrap();
/// let r1 = popxl::constant(5.0f32, "r1").unwrap();
/// let r2 = popxl::constant(0.05f32, "r2").unwrap();
/// ops::adam_var_update(&w, &x, Some(&r1), Some(&r2), 1e-3, Some(Scalar::Const(10.0))).unwrap();
/// ops::adam_var_update(&w, &x, None, None, 1e-3, None).unwrap();
/// ```
pub fn adam_var_update<'a>(
    t: &'a Tensor,
    x: &'a Tensor,
    r1: Option<&'a Tensor>,
    r2: Option<&'a Tensor>,
    learning_rate: impl Into<Scalar<'a>>,
    max_weight_norm: Option<Scalar<'a>>,
) -> Result<Tensor> {
    let mut b = OpBuilder::new("adam_var_update", &ir_ops::AdamVarUpdate).input(0, t).input(1, x);
    match (r1, r2) {
        (Some(r1), Some(r2)) => b = b.input(2, r1).input(3, r2),
        (None, None) => {}
        _ => return Err(invalid("adam_var_update", "r1 and r2 go together")),
    }
    let learning_rate = learning_rate.into();
    b = b.scalar_input(4, &learning_rate);
    if let Some(mwn) = &max_weight_norm {
        b = b.scalar_input(5, mwn);
    }
    b.typed(&AdamVarUpdateAttrs {
        learning_rate: learning_rate.constant(),
        max_weight_norm: max_weight_norm.as_ref().and_then(Scalar::constant),
    })
    .create1()
}
