//! `popxl.ops.var_updates`: in-place variable updates (accumulators, the Adam
//! family's updater terms and weight update, sparse accumulation).

use popxl::ops::{self, AdamUpdaterOptions, SparseAccumulateOptions};
use popxl::Tensor;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use super::{t_of, Out};
use crate::errors::IntoPy;
use crate::tensor::{wrap, PyTensor};

/// A factor: a Python number or a scalar tensor.
pub(crate) enum Factor {
    Const(f64),
    Tensor(Tensor),
}

impl Factor {
    pub(crate) fn of(obj: &Bound<'_, PyAny>) -> PyResult<Factor> {
        if let Ok(t) = obj.downcast::<PyTensor>() {
            return Ok(Factor::Tensor(t.borrow().t.clone()));
        }
        obj.extract::<f64>()
            .map(Factor::Const)
            .map_err(|_| PyTypeError::new_err("a factor must be a number or a popxl.Tensor"))
    }
    pub(crate) fn scalar(&self) -> ops::Scalar<'_> {
        match self {
            Factor::Const(v) => ops::Scalar::Const(*v),
            Factor::Tensor(t) => ops::Scalar::Tensor(t),
        }
    }
}

macro_rules! var_update {
    ($reg:ident: $($name:ident($f:ident = $default:expr)),* $(,)?) => {$(
        #[doc = concat!("`ops.var_updates.", stringify!($name), "(t, X, ", stringify!($f), ")`, in place.")]
        #[pyfunction]
        #[pyo3(signature = (t, X, $f=None))]
        #[allow(non_snake_case)]
        fn $name(py: Python<'_>, t: &Bound<'_, PyAny>, X: &Bound<'_, PyAny>, $f: Option<&Bound<'_, PyAny>>) -> Out {
            let f = match $f { Some(v) => Factor::of(v)?, None => Factor::Const($default) };
            wrap(py, ops::$name(&t_of(t)?, &t_of(X)?, f.scalar()).py()?)
        }
    )*
        /// Register this family's functions in `m`.
        fn $reg(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $( m.add_function(wrap_pyfunction!($name, m)?)?; )*
            Ok(())
        }
    };
}

var_update!(
    register_var_update:
    accumulate_(f = 1.0),
    accumulate_square_(f = 1.0),
    accumulate_mean_(step = 0.0),
    accumulate_moving_average_(f = 0.0),
    accumulate_moving_average_square_(f = 0.0),
);

/// `ops.var_updates.accumulator_scale_(t, f)`.
#[pyfunction]
fn accumulator_scale_(py: Python<'_>, t: &Bound<'_, PyAny>, f: &Bound<'_, PyAny>) -> Out {
    let f = Factor::of(f)?;
    wrap(py, ops::accumulator_scale_(&t_of(t)?, f.scalar()).py()?)
}

/// An optional factor (`None`: absent).
fn factor(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Factor>> {
    obj.filter(|o| !o.is_none()).map(Factor::of).transpose()
}

/// An optional tensor argument (`None`: absent).
fn opt_tensor(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Tensor>> {
    obj.filter(|o| !o.is_none()).map(|o| crate::tensor::tensor_of(o, what)).transpose()
}

/// `ops.var_updates.sparse_accumulate_(t, X, indices, axis=0, f=None, W=None)`:
/// `t[.., indices[j], ..] += f * X[.., j, ..]` along `axis` in place (repeated
/// indices add up). `W` is the weight whose layout `t` copies on the IPU; its
/// shape must be `t`'s.
#[pyfunction]
#[pyo3(signature = (t, X, indices, axis=0, f=None, W=None))]
#[allow(non_snake_case)]
fn sparse_accumulate_(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    X: &Bound<'_, PyAny>,
    indices: &Bound<'_, PyAny>,
    axis: i64,
    f: Option<&Bound<'_, PyAny>>,
    W: Option<&Bound<'_, PyAny>>,
) -> Out {
    let (t, x, i) = (t_of(t)?, t_of(X)?, t_of(indices)?);
    let f = factor(f)?;
    let w = opt_tensor(W, "W")?;
    if let Some(w) = &w {
        if w.shape() != t.shape() {
            return Err(PyValueError::new_err(format!(
                "sparse_accumulate_: W has shape {:?} but t has shape {:?}",
                w.shape(),
                t.shape()
            )));
        }
    }
    let options = SparseAccumulateOptions { axis, f: f.as_ref().map(Factor::scalar), w: w.as_ref() };
    wrap(py, ops::sparse_accumulate_(&t, &x, &i, options).py()?)
}

/// The arguments shared by the updaters, owned.
struct UpdaterArgs {
    weight: Option<Tensor>,
    time_step: Option<Tensor>,
    weight_decay: Option<Factor>,
    beta1: Option<Factor>,
    beta2: Option<Factor>,
    epsilon: Factor,
}

impl UpdaterArgs {
    fn new(
        weight: Option<&Bound<'_, PyAny>>,
        time_step: Option<&Bound<'_, PyAny>>,
        weight_decay: Option<&Bound<'_, PyAny>>,
        beta1: Option<&Bound<'_, PyAny>>,
        beta2: Option<&Bound<'_, PyAny>>,
        epsilon: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        Ok(UpdaterArgs {
            weight: opt_tensor(weight, "weight")?,
            time_step: opt_tensor(time_step, "time_step")?,
            weight_decay: factor(weight_decay)?,
            beta1: factor(beta1)?,
            beta2: factor(beta2)?,
            epsilon: factor(epsilon)?.unwrap_or(Factor::Const(1e-7)),
        })
    }
    fn options(&self) -> AdamUpdaterOptions<'_> {
        AdamUpdaterOptions {
            weight: self.weight.as_ref(),
            time_step: self.time_step.as_ref(),
            weight_decay: self.weight_decay.as_ref().map(Factor::scalar),
            beta1: self.beta1.as_ref().map(Factor::scalar),
            beta2: self.beta2.as_ref().map(Factor::scalar),
            epsilon: self.epsilon.scalar(),
        }
    }
}

macro_rules! updater {
    ($($name:ident: $doc:literal),* $(,)?) => {$(
        #[doc = $doc]
        #[pyfunction]
        #[pyo3(signature = (acc_first_order, acc_second_order, weight=None, time_step=None, weight_decay=None, beta1=None, beta2=None, epsilon=None))]
        #[allow(clippy::too_many_arguments)]
        fn $name(
            py: Python<'_>,
            acc_first_order: &Bound<'_, PyAny>,
            acc_second_order: &Bound<'_, PyAny>,
            weight: Option<&Bound<'_, PyAny>>,
            time_step: Option<&Bound<'_, PyAny>>,
            weight_decay: Option<&Bound<'_, PyAny>>,
            beta1: Option<&Bound<'_, PyAny>>,
            beta2: Option<&Bound<'_, PyAny>>,
            epsilon: Option<&Bound<'_, PyAny>>,
        ) -> Out {
            let (m, v) = (t_of(acc_first_order)?, t_of(acc_second_order)?);
            let args = UpdaterArgs::new(weight, time_step, weight_decay, beta1, beta2, epsilon)?;
            wrap(py, ops::$name(&m, &v, args.options()).py()?)
        }
    )*};
}

updater!(
    adam_updater: "`ops.var_updates.adam_updater(acc_first_order, acc_second_order, weight=None, time_step=None, \
weight_decay=None, beta1=None, beta2=None, epsilon=1e-07)`: Adam's updater term `mc / (sqrt(vc) + eps) + wd * w`; \
with `time_step` (incremented in place) the moments are bias-corrected with `beta1` and `beta2`.",
    lamb_updater: "`ops.var_updates.lamb_updater(acc_first_order, acc_second_order, weight=None, time_step=None, \
weight_decay=None, beta1=None, beta2=None, epsilon=1e-07)`: LAMB's updater term (Adam's; the trust ratio is \
applied by `adam_var_update`).",
);

/// `ops.var_updates.adamax_updater(acc_first_order, acc_second_order, weight=None,
/// time_step=None, weight_decay=None, beta1=0.9, epsilon=1e-07)`: AdaMax's updater
/// term `mc / (u + eps) + wd * w`; `time_step` is required (incremented in place).
#[pyfunction]
#[pyo3(signature = (acc_first_order, acc_second_order, weight=None, time_step=None, weight_decay=None, beta1=None, epsilon=None))]
#[allow(clippy::too_many_arguments)]
fn adamax_updater(
    py: Python<'_>,
    acc_first_order: &Bound<'_, PyAny>,
    acc_second_order: &Bound<'_, PyAny>,
    weight: Option<&Bound<'_, PyAny>>,
    time_step: Option<&Bound<'_, PyAny>>,
    weight_decay: Option<&Bound<'_, PyAny>>,
    beta1: Option<&Bound<'_, PyAny>>,
    epsilon: Option<&Bound<'_, PyAny>>,
) -> Out {
    let (m, v) = (t_of(acc_first_order)?, t_of(acc_second_order)?);
    let mut args = UpdaterArgs::new(weight, time_step, weight_decay, beta1, None, epsilon)?;
    args.beta1 = Some(args.beta1.unwrap_or(Factor::Const(0.9)));
    wrap(py, ops::adamax_updater(&m, &v, args.options()).py()?)
}

/// `ops.var_updates.adam_var_update(t, x, r1, r2, learning_rate=None, max_weight_norm=None)`:
/// `t -= learning_rate * ratio * x` in place, `ratio = min(sqrt(r1), max_weight_norm) / sqrt(r2)`
/// (LAMB's trust ratio; 1 when `r1` or `r2` is 0, or both are None as for Adam).
#[pyfunction]
#[pyo3(signature = (t, x, r1, r2, learning_rate=None, max_weight_norm=None))]
fn adam_var_update(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    x: &Bound<'_, PyAny>,
    r1: Option<&Bound<'_, PyAny>>,
    r2: Option<&Bound<'_, PyAny>>,
    learning_rate: Option<&Bound<'_, PyAny>>,
    max_weight_norm: Option<&Bound<'_, PyAny>>,
) -> Out {
    let (t, x) = (t_of(t)?, t_of(x)?);
    let (r1, r2) = (opt_tensor(r1, "r1")?, opt_tensor(r2, "r2")?);
    let lr = factor(learning_rate)?.ok_or_else(|| {
        PyValueError::new_err(
            "adam_var_update: learning_rate is required here (PopXL's None leaves PopART's learning rate unset)",
        )
    })?;
    let mwn = factor(max_weight_norm)?;
    let r = ops::adam_var_update(&t, &x, r1.as_ref(), r2.as_ref(), lr.scalar(), mwn.as_ref().map(Factor::scalar));
    wrap(py, r.py()?)
}

/// Register this family's functions in `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    register_var_update(m)?;
    m.add_function(wrap_pyfunction!(accumulator_scale_, m)?)?;
    m.add_function(wrap_pyfunction!(sparse_accumulate_, m)?)?;
    m.add_function(wrap_pyfunction!(adam_updater, m)?)?;
    m.add_function(wrap_pyfunction!(lamb_updater, m)?)?;
    m.add_function(wrap_pyfunction!(adamax_updater, m)?)?;
    m.add_function(wrap_pyfunction!(adam_var_update, m)?)?;
    Ok(())
}
