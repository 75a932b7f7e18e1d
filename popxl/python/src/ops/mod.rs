//! `popxl.ops`: the op functions, under PopXL's names, parameter names and defaults.

mod control;
mod indexing;
mod ipu;
mod matmul;
mod resize;
mod var_update;

use popxl::{ops, Tensor};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::convert::{dtype_of, host_array};
use crate::errors::IntoPy;
use crate::graph::{graph_of, PyGraph};
use crate::tensor::{tensor_of, wrap, PyD2H, PyH2D, PyTensor};
pub(crate) use ipu::ipu_number;
use var_update::Factor;

type Out = PyResult<Py<PyTensor>>;

fn t_of(obj: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    tensor_of(obj, "the input")
}

fn tensor_list(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    if obj.downcast::<PyTensor>().is_ok() {
        return Err(PyTypeError::new_err("expected a list of popxl.Tensor, not a single Tensor"));
    }
    obj.try_iter().map_err(|_| PyTypeError::new_err("expected a list of popxl.Tensor"))?.map(|o| t_of(&o?)).collect()
}

/// An int or a sequence of ints as a list (None: empty).
fn ints(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<i64>>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => {
            if let Ok(i) = o.extract::<i64>() {
                Ok(Some(vec![i]))
            } else {
                o.extract::<Vec<i64>>()
                    .map(Some)
                    .map_err(|_| PyTypeError::new_err("expected an int or a sequence of ints"))
            }
        }
    }
}

macro_rules! unary {
    ($reg:ident: $($name:ident),* $(,)?) => {$(
        #[doc = concat!("`ops.", stringify!($name), "(t)`, elementwise.")]
        #[pyfunction]
        fn $name(py: Python<'_>, t: &Bound<'_, PyAny>) -> Out {
            wrap(py, ops::$name(&t_of(t)?).py()?)
        }
    )*
        /// Register this family's functions in `m`.
        fn $reg(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $( m.add_function(wrap_pyfunction!($name, m)?)?; )*
            Ok(())
        }
    };
}

unary!(
    register_unary:
    detach_,
    isnan,
    isinf,
    isfinite,
    negate,
    abs,
    exp,
    log,
    log1p,
    log2,
    sqrt,
    relu,
    gelu,
    geluerf,
    swish,
    tanh,
    sigmoid,
    sin,
    cos,
    sign,
    floor,
    ceil,
    exp_,
    relu_,
    gelu_,
    geluerf_,
    swish_,
    logical_not,
    flatten,
    flatten_,
    accumulator_zero_
);

#[pyfunction]
fn detach(py: Python<'_>, t: &Bound<'_, PyAny>) -> Out {
    wrap(py, ops::detach(&t_of(t)?).py()?)
}

macro_rules! binary {
    ($reg:ident: $($name:ident),* $(,)?) => {$(
        #[doc = concat!("`ops.", stringify!($name), "(lhs, rhs)`, with numpy broadcasting.")]
        #[pyfunction]
        fn $name(py: Python<'_>, lhs: &Bound<'_, PyAny>, rhs: &Bound<'_, PyAny>) -> Out {
            let l = t_of(lhs)?;
            let r = crate::tensor::coerce(&l, rhs)?;
            wrap(py, ops::$name(&l, &r).py()?)
        }
    )*
        /// Register this family's functions in `m`.
        fn $reg(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $( m.add_function(wrap_pyfunction!($name, m)?)?; )*
            Ok(())
        }
    };
}

binary!(register_binary: add, sub, mul, div, pow, fmod, greater, less, equal, logical_and, logical_or, add_);

/// `ops.var_updates.copy_var_update_(t, X)`: copy `X` into `t` in place (PopXL's names).
#[pyfunction]
#[allow(non_snake_case)]
fn copy_var_update_(py: Python<'_>, t: &Bound<'_, PyAny>, X: &Bound<'_, PyAny>) -> Out {
    let t = t_of(t)?;
    let x = crate::tensor::coerce(&t, X)?;
    wrap(py, ops::copy_var_update_(&t, &x).py()?)
}

macro_rules! reduce {
    ($reg:ident: $($name:ident),* $(,)?) => {$(
        #[doc = concat!("`ops.", stringify!($name), "(t, axis=None, keepdims=False)`.")]
        #[pyfunction]
        #[pyo3(signature = (t, axis=None, keepdims=false))]
        fn $name(py: Python<'_>, t: &Bound<'_, PyAny>, axis: Option<&Bound<'_, PyAny>>, keepdims: bool) -> Out {
            let t = t_of(t)?;
            let axes = ints(axis)?.unwrap_or_else(|| (0..t.rank() as i64).collect());
            wrap(py, ops::$name(&t, &axes, keepdims).py()?)
        }
    )*
        /// Register this family's functions in `m`.
        fn $reg(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $( m.add_function(wrap_pyfunction!($name, m)?)?; )*
            Ok(())
        }
    };
}

reduce!(register_reduce: sum, mean, max, min, prod, median, l1, l2, logsum, logsumexp, sumsquare);

/// `ops.host_load(h2d_stream, name=None)`.
#[pyfunction]
#[pyo3(signature = (h2d_stream, name=None))]
fn host_load(py: Python<'_>, h2d_stream: &Bound<'_, PyAny>, name: Option<String>) -> Out {
    let s = h2d_stream
        .downcast::<PyH2D>()
        .map_err(|_| PyTypeError::new_err("host_load expects a HostToDeviceStream (popxl.h2d_stream)"))?;
    let s = s.borrow().s.clone();
    let name = name.unwrap_or_else(|| s.name().to_string());
    wrap(py, ops::host_load(&s, &name).py()?)
}

/// `ops.host_store(d2h_stream, t)`.
#[pyfunction]
fn host_store(d2h_stream: &Bound<'_, PyAny>, t: &Bound<'_, PyAny>) -> PyResult<()> {
    let s = d2h_stream
        .downcast::<PyD2H>()
        .map_err(|_| PyTypeError::new_err("host_store expects a DeviceToHostStream (popxl.d2h_stream)"))?;
    let s = s.borrow().s.clone();
    ops::host_store(&s, &t_of(t)?).py()
}

/// `ops.softmax(t, axis)`.
#[pyfunction]
fn softmax(py: Python<'_>, t: &Bound<'_, PyAny>, axis: i64) -> Out {
    wrap(py, ops::softmax(&t_of(t)?, axis).py()?)
}

/// `ops.reshape(t, shape)`.
#[pyfunction]
fn reshape(py: Python<'_>, t: &Bound<'_, PyAny>, shape: Vec<i64>) -> Out {
    wrap(py, ops::reshape(&t_of(t)?, &shape).py()?)
}

/// `ops.reshape_(t, shape)`.
#[pyfunction]
fn reshape_(py: Python<'_>, t: &Bound<'_, PyAny>, shape: Vec<i64>) -> Out {
    wrap(py, ops::reshape_(&t_of(t)?, &shape).py()?)
}

/// `ops.transpose(t, permutation=None)`.
#[pyfunction]
#[pyo3(signature = (t, permutation=None))]
fn transpose(py: Python<'_>, t: &Bound<'_, PyAny>, permutation: Option<Vec<i64>>) -> Out {
    wrap(py, ops::transpose(&t_of(t)?, &permutation.unwrap_or_default()).py()?)
}

/// `ops.transpose_(t, permutation=None)`.
#[pyfunction]
#[pyo3(signature = (t, permutation=None))]
fn transpose_(py: Python<'_>, t: &Bound<'_, PyAny>, permutation: Option<Vec<i64>>) -> Out {
    wrap(py, ops::transpose_(&t_of(t)?, &permutation.unwrap_or_default()).py()?)
}

fn slice_args(
    t: &Tensor,
    start: Option<&Bound<'_, PyAny>>,
    stop: Option<&Bound<'_, PyAny>>,
    step: Option<&Bound<'_, PyAny>>,
    axis: Option<&Bound<'_, PyAny>>,
) -> PyResult<[Vec<i64>; 4]> {
    let (start, stop, step, axis) = (ints(start)?, ints(stop)?, ints(step)?, ints(axis)?);
    let n = [&start, &stop, &step, &axis].iter().filter_map(|v| v.as_ref().map(Vec::len)).max().unwrap_or(0);
    for (name, v) in [("start", &start), ("stop", &stop), ("step", &step), ("axis", &axis)] {
        if let Some(v) = v {
            if v.len() != n {
                return Err(PyValueError::new_err(format!(
                    "slice: `{name}` has {} entries where the other arguments have {n}",
                    v.len()
                )));
            }
        }
    }
    let axis = axis.unwrap_or_else(|| (0..n as i64).collect());
    let step = step.unwrap_or_else(|| vec![1; n]);
    let start = start.unwrap_or_else(|| step.iter().map(|&s| if s < 0 { -1 } else { 0 }).collect());
    let stop = stop.unwrap_or_else(|| {
        step.iter()
            .zip(&axis)
            .map(|(&s, &a)| {
                let rank = t.rank() as i64;
                let a = if a < 0 { a + rank } else { a };
                let dim = usize::try_from(a).ok().and_then(|a| t.shape().get(a)).copied().unwrap_or(0) as i64;
                if s < 0 {
                    -dim - 1
                } else {
                    dim
                }
            })
            .collect()
    });
    Ok([start, stop, step, axis])
}

/// `ops.slice(t, start=None, stop=None, step=None, axis=None)`.
#[pyfunction]
#[pyo3(signature = (t, start=None, stop=None, step=None, axis=None))]
fn slice(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    start: Option<&Bound<'_, PyAny>>,
    stop: Option<&Bound<'_, PyAny>>,
    step: Option<&Bound<'_, PyAny>>,
    axis: Option<&Bound<'_, PyAny>>,
) -> Out {
    let t = t_of(t)?;
    let [a, b, c, d] = slice_args(&t, start, stop, step, axis)?;
    wrap(py, ops::slice(&t, &a, &b, &c, &d).py()?)
}

/// `ops.concat(ts, axis=0)`.
#[pyfunction]
#[pyo3(signature = (ts, axis=0))]
fn concat(py: Python<'_>, ts: &Bound<'_, PyAny>, axis: i64) -> Out {
    let ts = tensor_list(ts)?;
    let refs: Vec<&Tensor> = ts.iter().collect();
    wrap(py, ops::concat(&refs, axis).py()?)
}

/// `ops.split(t, splits, axis=0)`: `splits` an int (equal parts) or a list of sizes.
#[pyfunction]
#[pyo3(signature = (t, splits, axis=0))]
fn split(py: Python<'_>, t: &Bound<'_, PyAny>, splits: &Bound<'_, PyAny>, axis: i64) -> PyResult<Vec<Py<PyTensor>>> {
    let t = t_of(t)?;
    let parts = if let Ok(n) = splits.extract::<usize>() {
        ops::split(&t, n, axis)
    } else {
        let sizes: Vec<usize> =
            splits.extract().map_err(|_| PyTypeError::new_err("splits must be an int or a list of ints"))?;
        ops::split(&t, sizes, axis)
    }
    .py()?;
    parts.into_iter().map(|p| wrap(py, p)).collect()
}

/// `ops.squeeze(t, axes=None)`.
#[pyfunction]
#[pyo3(signature = (t, axes=None))]
fn squeeze(py: Python<'_>, t: &Bound<'_, PyAny>, axes: Option<&Bound<'_, PyAny>>) -> Out {
    wrap(py, ops::squeeze(&t_of(t)?, &ints(axes)?.unwrap_or_default()).py()?)
}

/// `ops.gather(t, indices, axis=0, zero_OOR=False)`.
#[pyfunction]
#[pyo3(signature = (t, indices, axis=0, zero_OOR=false))]
#[allow(non_snake_case)]
fn gather(py: Python<'_>, t: &Bound<'_, PyAny>, indices: &Bound<'_, PyAny>, axis: i64, zero_OOR: bool) -> Out {
    wrap(py, ops::gather_with(&t_of(t)?, &t_of(indices)?, axis, zero_OOR).py()?)
}

/// `ops.cast(t, data_type)`.
#[pyfunction]
fn cast(py: Python<'_>, t: &Bound<'_, PyAny>, data_type: &Bound<'_, PyAny>) -> Out {
    let d = dtype_of(data_type)?;
    if d.is_float8() {
        // PopXL's type check: float8 takes a scale, so only the pow2-scaled casts make it.
        return Err(PyTypeError::new_err(format!(
            "Data type {d} not supported for cast: use pow2scale_cast_to_fp8 or pow2scale_cast_from_fp8"
        )));
    }
    wrap(py, ops::cast(&t_of(t)?, d).py()?)
}

/// `ops.identity(t, output_name=None)`.
#[pyfunction]
#[pyo3(signature = (t, output_name=None))]
fn identity(py: Python<'_>, t: &Bound<'_, PyAny>, output_name: Option<String>) -> Out {
    let t = t_of(t)?;
    let name = output_name.unwrap_or_else(|| t.name().to_string());
    wrap(py, ops::identity(&t, &name).py()?)
}

/// `ops.clip(t, min=-inf, max=inf)`.
#[pyfunction]
#[pyo3(signature = (t, min=None, max=None))]
fn clip(py: Python<'_>, t: &Bound<'_, PyAny>, min: Option<f64>, max: Option<f64>) -> Out {
    wrap(py, ops::clip(&t_of(t)?, min, max).py()?)
}

/// `ops.where(condition, lhs, rhs)`.
#[pyfunction]
#[pyo3(name = "where")]
fn where_(py: Python<'_>, condition: &Bound<'_, PyAny>, lhs: &Bound<'_, PyAny>, rhs: &Bound<'_, PyAny>) -> Out {
    let l = t_of(lhs)?;
    let r = crate::tensor::coerce(&l, rhs)?;
    wrap(py, ops::select(&t_of(condition)?, &l, &r).py()?)
}

/// `ops.maximum(*ts)`.
#[pyfunction]
#[pyo3(signature = (*ts))]
fn maximum(py: Python<'_>, ts: &Bound<'_, PyTuple>) -> Out {
    let ts = tensor_list(ts.as_any())?;
    let refs: Vec<&Tensor> = ts.iter().collect();
    wrap(py, ops::maximum(&refs).py()?)
}

/// `ops.minimum(*ts)`.
#[pyfunction]
#[pyo3(signature = (*ts))]
fn minimum(py: Python<'_>, ts: &Bound<'_, PyTuple>) -> Out {
    let ts = tensor_list(ts.as_any())?;
    let refs: Vec<&Tensor> = ts.iter().collect();
    wrap(py, ops::minimum(&refs).py()?)
}

/// `ops.argmax(t, dim=0, keepdim=False)`.
#[pyfunction]
#[pyo3(signature = (t, dim=0, keepdim=false))]
fn argmax(py: Python<'_>, t: &Bound<'_, PyAny>, dim: i64, keepdim: bool) -> Out {
    wrap(py, ops::argmax(&t_of(t)?, dim, keepdim).py()?)
}

/// `ops.argmin(t, dim=0, keepdim=False)`.
#[pyfunction]
#[pyo3(signature = (t, dim=0, keepdim=false))]
fn argmin(py: Python<'_>, t: &Bound<'_, PyAny>, dim: i64, keepdim: bool) -> Out {
    wrap(py, ops::argmin(&t_of(t)?, dim, keepdim).py()?)
}

/// `ops.cumsum(t, dim=0)`.
#[pyfunction]
#[pyo3(signature = (t, dim=0))]
fn cumsum(py: Python<'_>, t: &Bound<'_, PyAny>, dim: i64) -> Out {
    wrap(py, ops::cumsum(&t_of(t)?, dim).py()?)
}

/// `ops.topk(t, k, axis=-1, largest=True, sorted=True)` -> (values, indices).
#[pyfunction]
#[pyo3(signature = (t, k, axis=-1, largest=true, sorted=true))]
fn topk(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    k: usize,
    axis: i64,
    largest: bool,
    sorted: bool,
) -> PyResult<(Py<PyTensor>, Py<PyTensor>)> {
    let (v, i) = ops::topk(&t_of(t)?, k, axis, largest, sorted).py()?;
    Ok((wrap(py, v)?, wrap(py, i)?))
}

/// `ops.layer_norm(t, weight, bias, eps=1e-5)`.
#[pyfunction]
#[pyo3(signature = (t, weight, bias, eps=1e-5))]
fn layer_norm(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    bias: &Bound<'_, PyAny>,
    eps: f64,
) -> Out {
    wrap(py, ops::layer_norm(&t_of(t)?, &t_of(weight)?, &t_of(bias)?, eps).py()?)
}

/// `ops.group_norm(t, weight, bias, num_groups, eps=1e-5)`.
#[pyfunction]
#[pyo3(signature = (t, weight, bias, num_groups, eps=1e-5))]
fn group_norm(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    bias: &Bound<'_, PyAny>,
    num_groups: i64,
    eps: f64,
) -> Out {
    wrap(py, ops::group_norm(&t_of(t)?, &t_of(weight)?, &t_of(bias)?, num_groups, eps).py()?)
}

/// `ops.dropout(t, seed_tensor, p)`.
#[pyfunction]
fn dropout(py: Python<'_>, t: &Bound<'_, PyAny>, seed_tensor: &Bound<'_, PyAny>, p: f64) -> Out {
    wrap(py, ops::dropout(&t_of(t)?, &t_of(seed_tensor)?, p).py()?)
}

fn reduction(s: &str) -> PyResult<ops::Reduction> {
    match s {
        "mean" => Ok(ops::Reduction::Mean),
        "sum" => Ok(ops::Reduction::Sum),
        "none" => Ok(ops::Reduction::None),
        other => Err(PyValueError::new_err(format!("reduction must be 'mean', 'sum' or 'none', not '{other}'"))),
    }
}

/// `ops.nll_loss(probs, labels, ignore_index=None, reduction='mean', log_prob=False)`.
#[pyfunction]
#[pyo3(signature = (probs, labels, ignore_index=None, reduction="mean", log_prob=false))]
fn nll_loss(
    py: Python<'_>,
    probs: &Bound<'_, PyAny>,
    labels: &Bound<'_, PyAny>,
    ignore_index: Option<i64>,
    reduction: &str,
    log_prob: bool,
) -> Out {
    let options = ops::NllLossOptions { reduction: self::reduction(reduction)?, ignore_index, log_prob };
    wrap(py, ops::nll_loss_with(&t_of(probs)?, &t_of(labels)?, options).py()?)
}

/// `ops.nll_loss_with_softmax_grad(probs, labels, loss_grad=1, ignore_index=None, reduction='mean')`
/// -> (loss, gradient of the logits).
#[pyfunction]
#[pyo3(signature = (probs, labels, loss_grad=None, ignore_index=None, reduction="mean"))]
fn nll_loss_with_softmax_grad(
    py: Python<'_>,
    probs: &Bound<'_, PyAny>,
    labels: &Bound<'_, PyAny>,
    loss_grad: Option<&Bound<'_, PyAny>>,
    ignore_index: Option<i64>,
    reduction: &str,
) -> PyResult<(Py<PyTensor>, Py<PyTensor>)> {
    let probs = t_of(probs)?;
    let lg = match loss_grad {
        Some(g) if !g.is_none() => Some(crate::tensor::coerce(&probs, g)?),
        _ => None,
    };
    let options = ops::NllLossOptions { reduction: self::reduction(reduction)?, ignore_index, log_prob: false };
    let (l, d) = ops::nll_loss_with_softmax_grad_with(&probs, &t_of(labels)?, lg.as_ref(), options).py()?;
    Ok((wrap(py, l)?, wrap(py, d)?))
}

/// `ops.scaled_add(X, Y, a=1.0, b=1.0)` = aX + bY.
#[pyfunction]
#[pyo3(signature = (X, Y, a=None, b=None))]
#[allow(non_snake_case)]
fn scaled_add(
    py: Python<'_>,
    X: &Bound<'_, PyAny>,
    Y: &Bound<'_, PyAny>,
    a: Option<&Bound<'_, PyAny>>,
    b: Option<&Bound<'_, PyAny>>,
) -> Out {
    let a = a.map(Factor::of).transpose()?.unwrap_or(Factor::Const(1.0));
    let b = b.map(Factor::of).transpose()?.unwrap_or(Factor::Const(1.0));
    wrap(py, ops::scaled_add(&t_of(X)?, &t_of(Y)?, a.scalar(), b.scalar()).py()?)
}

/// `ops.scaled_add_(X, Y, a=1.0, b=1.0)`: X = aX + bY in place.
#[pyfunction]
#[pyo3(signature = (X, Y, a=None, b=None))]
#[allow(non_snake_case)]
fn scaled_add_(
    py: Python<'_>,
    X: &Bound<'_, PyAny>,
    Y: &Bound<'_, PyAny>,
    a: Option<&Bound<'_, PyAny>>,
    b: Option<&Bound<'_, PyAny>>,
) -> Out {
    let a = a.map(Factor::of).transpose()?.unwrap_or(Factor::Const(1.0));
    let b = b.map(Factor::of).transpose()?.unwrap_or(Factor::Const(1.0));
    wrap(py, ops::scaled_add_(&t_of(X)?, &t_of(Y)?, a.scalar(), b.scalar()).py()?)
}

/// The call site of a `call_with_info` / `repeat_with_info` (PopXL's `CallSiteInfo`).
#[pyclass(name = "CallSiteInfo", module = "popxl.ops")]
#[derive(Clone)]
pub struct PyCallSiteInfo {
    pub info: ops::CallSiteInfo,
}

#[pymethods]
impl PyCallSiteInfo {
    /// The called graph.
    #[getter]
    fn called_graph(&self) -> PyGraph {
        PyGraph::new(self.info.called_graph())
    }
    /// The graph of the call op.
    #[getter]
    fn graph(&self) -> PyGraph {
        PyGraph::new(self.info.graph())
    }
    /// The call's inputs, in the parent graph.
    #[getter]
    fn inputs(&self, py: Python<'_>) -> PyResult<Vec<Py<PyTensor>>> {
        self.info.inputs().py()?.into_iter().map(|t| wrap(py, t)).collect()
    }
    /// The call's outputs, in the parent graph.
    #[getter]
    fn outputs(&self, py: Python<'_>) -> PyResult<Vec<Py<PyTensor>>> {
        self.info.outputs().py()?.into_iter().map(|t| wrap(py, t)).collect()
    }
    /// The parent tensor connected to input `idx`.
    fn parent_input(&self, py: Python<'_>, idx: usize) -> Out {
        wrap(py, self.info.parent_input(idx).py()?)
    }
    /// The parent tensor of output `idx`.
    fn parent_output(&self, py: Python<'_>, idx: usize) -> Out {
        wrap(py, self.info.parent_output(idx).py()?)
    }
    /// The called graph's tensor connected to a parent tensor.
    fn parent_to_graph(&self, py: Python<'_>, parent_tensor: &Bound<'_, PyAny>) -> Out {
        wrap(py, self.info.parent_to_graph(&t_of(parent_tensor)?).py()?)
    }
    /// The parent tensor connected to a called graph's tensor.
    fn graph_to_parent(&self, py: Python<'_>, graph_tensor: &Bound<'_, PyAny>) -> Out {
        wrap(py, self.info.graph_to_parent(&t_of(graph_tensor)?).py()?)
    }
    /// Mark a parent input as modified by the call (passed by reference).
    fn set_parent_input_modified(&self, parent_tensor: &Bound<'_, PyAny>) -> PyResult<()> {
        self.info.set_parent_input_modified(&t_of(parent_tensor)?).py()
    }
}

/// Positional inputs and `inputs_dict` pairs (subgraph input, parent tensor).
type CallInputs = (Vec<Tensor>, Vec<(Tensor, Tensor)>);

fn call_inputs(
    graph: &popxl::Graph,
    inputs: &Bound<'_, PyTuple>,
    inputs_dict: Option<&Bound<'_, PyAny>>,
) -> PyResult<CallInputs> {
    let graph_inputs = graph.inputs().py()?;
    let mut ins = Vec::with_capacity(inputs.len());
    for (i, obj) in inputs.iter().enumerate() {
        if let Ok(t) = obj.downcast::<PyTensor>() {
            ins.push(t.borrow().t.clone());
        } else if let Some(gi) = graph_inputs.get(i) {
            let data = host_array(&obj, Some(gi.dtype()))?;
            ins.push(popxl::constant_as(data, gi.dtype(), "").py()?);
        } else {
            return Err(PyValueError::new_err(format!(
                "too many inputs for graph `{}`: it has {} inputs",
                graph.name(),
                graph_inputs.len()
            )));
        }
    }
    let mut dict = Vec::new();
    if let Some(d) = inputs_dict.filter(|d| !d.is_none()) {
        let d = d
            .downcast::<PyDict>()
            .map_err(|_| PyTypeError::new_err("inputs_dict must be a dict {subgraph tensor: parent tensor}"))?;
        for (k, v) in d.iter() {
            let k = tensor_of(&k, "an inputs_dict key")?;
            let v = if let Ok(t) = v.downcast::<PyTensor>() {
                t.borrow().t.clone()
            } else {
                popxl::constant_as(host_array(&v, Some(k.dtype()))?, k.dtype(), "").py()?
            };
            dict.push((k, v));
        }
    }
    Ok((ins, dict))
}

fn flatten_args<'py>(py: Python<'py>, inputs: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyTuple>> {
    // PopXL accepts `call(g, a, b)` and `call(g, [a, b])`... only the first form here,
    // plus a single list/tuple argument.
    if inputs.len() == 1 {
        let first = inputs.get_item(0)?;
        if first.downcast::<PyList>().is_ok() || first.downcast::<PyTuple>().is_ok() {
            return PyTuple::new(py, first.try_iter()?.collect::<PyResult<Vec<_>>>()?);
        }
    }
    Ok(inputs.clone())
}

/// `ops.call(graph, *inputs, inputs_dict=None)` -> the tuple of outputs.
#[pyfunction]
#[pyo3(signature = (graph, *inputs, inputs_dict=None))]
fn call<'py>(
    py: Python<'py>,
    graph: &Bound<'py, PyAny>,
    inputs: &Bound<'py, PyTuple>,
    inputs_dict: Option<&Bound<'py, PyAny>>,
) -> PyResult<PyObject> {
    let g = graph_of(graph, "call's graph")?;
    let inputs = flatten_args(py, inputs)?;
    let (ins, dict) = call_inputs(&g, &inputs, inputs_dict)?;
    let ins: Vec<&Tensor> = ins.iter().collect();
    let dict: Vec<(&Tensor, &Tensor)> = dict.iter().map(|(a, b)| (a, b)).collect();
    let outs = ops::call(&g, &ins, &dict).py()?;
    outputs(py, outs)
}

/// A call's outputs: always a tuple, as PopXL's `(o,) = ops.call(...)` expects.
fn outputs(py: Python<'_>, outs: Vec<Tensor>) -> PyResult<PyObject> {
    let v: Vec<Py<PyTensor>> = outs.into_iter().map(|t| wrap(py, t)).collect::<PyResult<_>>()?;
    Ok(PyTuple::new(py, v)?.into_any().unbind())
}

/// `ops.call_with_info(graph, *inputs, inputs_dict=None)` -> `CallSiteInfo`.
#[pyfunction]
#[pyo3(signature = (graph, *inputs, inputs_dict=None))]
fn call_with_info<'py>(
    py: Python<'py>,
    graph: &Bound<'py, PyAny>,
    inputs: &Bound<'py, PyTuple>,
    inputs_dict: Option<&Bound<'py, PyAny>>,
) -> PyResult<PyCallSiteInfo> {
    let g = graph_of(graph, "call_with_info's graph")?;
    let inputs = flatten_args(py, inputs)?;
    let (ins, dict) = call_inputs(&g, &inputs, inputs_dict)?;
    let ins: Vec<&Tensor> = ins.iter().collect();
    let dict: Vec<(&Tensor, &Tensor)> = dict.iter().map(|(a, b)| (a, b)).collect();
    Ok(PyCallSiteInfo { info: ops::call_with_info(&g, &ins, &dict).py()? })
}

fn repeat_count(n: i64) -> PyResult<usize> {
    usize::try_from(n).map_err(|_| {
        PyValueError::new_err(format!("Repeat trip count for repeat of {n} is not valid: it must be >= 0"))
    })
}

/// `ops.repeat(graph, repeat_count, *inputs, inputs_dict=None)`.
#[pyfunction]
#[pyo3(signature = (graph, repeat_count, *inputs, inputs_dict=None))]
fn repeat<'py>(
    py: Python<'py>,
    graph: &Bound<'py, PyAny>,
    repeat_count: i64,
    inputs: &Bound<'py, PyTuple>,
    inputs_dict: Option<&Bound<'py, PyAny>>,
) -> PyResult<PyObject> {
    let g = graph_of(graph, "repeat's graph")?;
    let inputs = flatten_args(py, inputs)?;
    let (ins, dict) = call_inputs(&g, &inputs, inputs_dict)?;
    let ins: Vec<&Tensor> = ins.iter().collect();
    let dict: Vec<(&Tensor, &Tensor)> = dict.iter().map(|(a, b)| (a, b)).collect();
    let outs = ops::repeat(&g, self::repeat_count(repeat_count)?, &ins, &dict).py()?;
    outputs(py, outs)
}

/// `ops.repeat_with_info(graph, repeat_count, *inputs, inputs_dict=None)`.
#[pyfunction]
#[pyo3(signature = (graph, repeat_count, *inputs, inputs_dict=None))]
fn repeat_with_info<'py>(
    py: Python<'py>,
    graph: &Bound<'py, PyAny>,
    repeat_count: i64,
    inputs: &Bound<'py, PyTuple>,
    inputs_dict: Option<&Bound<'py, PyAny>>,
) -> PyResult<PyCallSiteInfo> {
    let g = graph_of(graph, "repeat's graph")?;
    let inputs = flatten_args(py, inputs)?;
    let (ins, dict) = call_inputs(&g, &inputs, inputs_dict)?;
    let ins: Vec<&Tensor> = ins.iter().collect();
    let dict: Vec<(&Tensor, &Tensor)> = dict.iter().map(|(a, b)| (a, b)).collect();
    Ok(PyCallSiteInfo { info: ops::repeat_with_info(&g, self::repeat_count(repeat_count)?, &ins, &dict).py()? })
}

/// `ops.scatter(t, indices, values, axis=0)`: a copy of `t` with `values` written at `indices`.
#[pyfunction]
#[pyo3(signature = (t, indices, values, axis=0))]
fn scatter(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    indices: &Bound<'_, PyAny>,
    values: &Bound<'_, PyAny>,
    axis: i64,
) -> Out {
    wrap(py, ops::scatter(&t_of(t)?, &t_of(indices)?, &t_of(values)?, axis).py()?)
}

/// `ops.histogram(t, levels, absolute_of_input)`: counts of elements below, between and above the levels.
#[pyfunction]
fn histogram(py: Python<'_>, t: &Bound<'_, PyAny>, levels: Vec<f64>, absolute_of_input: bool) -> Out {
    wrap(py, ops::histogram(&t_of(t)?, &levels, absolute_of_input).py()?)
}

/// `ops.lamb_square(t)`: the sum of squares, as LAMB uses it.
#[pyfunction]
fn lamb_square(py: Python<'_>, t: &Bound<'_, PyAny>) -> Out {
    wrap(py, ops::lamb_square(&t_of(t)?).py()?)
}

/// `ops.shaped_dropout(t, seed_tensor, shape, ratio)`.
#[pyfunction]
fn shaped_dropout(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    seed_tensor: &Bound<'_, PyAny>,
    shape: &Bound<'_, PyAny>,
    ratio: f64,
) -> Out {
    let shape = crate::convert::shape_of(shape)?;
    wrap(py, ops::shaped_dropout(&t_of(t)?, &t_of(seed_tensor)?, &shape, ratio).py()?)
}

/// `ops.concat_(ts, axis=0)`: a view concatenating the tensors.
#[pyfunction]
#[pyo3(signature = (ts, axis=0))]
fn concat_(py: Python<'_>, ts: &Bound<'_, PyAny>, axis: i64) -> Out {
    let ts = tensor_list(ts)?;
    let refs: Vec<&Tensor> = ts.iter().collect();
    wrap(py, ops::concat_(&refs, axis).py()?)
}

/// `ops.slice_(t, start=None, stop=None, step=None, axis=None)`: a view.
#[pyfunction]
#[pyo3(signature = (t, start=None, stop=None, step=None, axis=None))]
fn slice_(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    start: Option<&Bound<'_, PyAny>>,
    stop: Option<&Bound<'_, PyAny>>,
    step: Option<&Bound<'_, PyAny>>,
    axis: Option<&Bound<'_, PyAny>>,
) -> Out {
    let t = t_of(t)?;
    let [a, b, c, d] = slice_args(&t, start, stop, step, axis)?;
    wrap(py, ops::slice_(&t, &a, &b, &c, &d).py()?)
}

/// `ops.print_tensor(t, title=None, print_self=True, print_gradient=False)`: prints
/// the tensor's value to stderr when it runs; returns the same values.
#[pyfunction]
#[pyo3(signature = (t, title=None, print_self=true, print_gradient=false))]
fn print_tensor(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    title: Option<String>,
    print_self: bool,
    print_gradient: bool,
) -> Out {
    // No title (or an empty one): `print_<tensor name>`, as PopXL.
    let title = title.unwrap_or_default();
    let options = ops::PrintTensorOptions { title, print_self, print_gradient, ..ops::PrintTensorOptions::default() };
    wrap(py, ops::print_tensor(&t_of(t)?, &options).py()?)
}

/// `ops.increment_mod(t, increment, modulus)`: (t + increment) mod modulus.
#[pyfunction]
fn increment_mod(py: Python<'_>, t: &Bound<'_, PyAny>, increment: f64, modulus: f64) -> Out {
    wrap(py, ops::increment_mod(&t_of(t)?, increment, modulus).py()?)
}

/// `ops.increment_mod_(t, increment, modulus)`, in place.
#[pyfunction]
fn increment_mod_(py: Python<'_>, t: &Bound<'_, PyAny>, increment: f64, modulus: f64) -> Out {
    wrap(py, ops::increment_mod_(&t_of(t)?, increment, modulus).py()?)
}

/// `ops.subsample(t, strides)`.
#[pyfunction]
fn subsample(py: Python<'_>, t: &Bound<'_, PyAny>, strides: Vec<i64>) -> Out {
    wrap(py, ops::subsample(&t_of(t)?, &strides).py()?)
}

/// `ops.dynamic_slice(t, index, axes, sizes, no_overlap)`.
#[pyfunction]
fn dynamic_slice(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    index: &Bound<'_, PyAny>,
    axes: Vec<i64>,
    sizes: Vec<i64>,
    no_overlap: bool,
) -> Out {
    wrap(py, ops::dynamic_slice(&t_of(t)?, &t_of(index)?, &axes, &sizes, no_overlap).py()?)
}

/// `ops.dynamic_update(t, index, t_update, axes, sizes, no_overlap)`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn dynamic_update(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    index: &Bound<'_, PyAny>,
    t_update: &Bound<'_, PyAny>,
    axes: Vec<i64>,
    sizes: Vec<i64>,
    no_overlap: bool,
) -> Out {
    wrap(py, ops::dynamic_update(&t_of(t)?, &t_of(index)?, &t_of(t_update)?, &axes, &sizes, no_overlap).py()?)
}

/// `ops.dynamic_update_(t, index, t_update, axes, sizes, no_overlap)`, in place.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn dynamic_update_(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    index: &Bound<'_, PyAny>,
    t_update: &Bound<'_, PyAny>,
    axes: Vec<i64>,
    sizes: Vec<i64>,
    no_overlap: bool,
) -> Out {
    wrap(py, ops::dynamic_update_(&t_of(t)?, &t_of(index)?, &t_of(t_update)?, &axes, &sizes, no_overlap).py()?)
}

/// `ops.onehot(t, num_classes, values, axis)`.
#[pyfunction]
fn onehot(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    num_classes: &Bound<'_, PyAny>,
    values: &Bound<'_, PyAny>,
    axis: i64,
) -> Out {
    wrap(py, ops::onehot(&t_of(t)?, &t_of(num_classes)?, &t_of(values)?, axis).py()?)
}

/// `ops.random_uniform(seed_tensor, shape, low=0.0, high=1.0, dtype=popxl.float32)`.
#[pyfunction]
#[pyo3(signature = (seed_tensor, shape, low=0.0, high=1.0, dtype=None))]
fn random_uniform(
    py: Python<'_>,
    seed_tensor: &Bound<'_, PyAny>,
    shape: &Bound<'_, PyAny>,
    low: f64,
    high: f64,
    dtype: Option<&Bound<'_, PyAny>>,
) -> Out {
    let d = dtype.map(dtype_of).transpose()?.unwrap_or(popart_ir::DataType::Float32);
    wrap(py, ops::random_uniform(&t_of(seed_tensor)?, &crate::convert::shape_of(shape)?, low, high, d).py()?)
}

/// `ops.random_normal(seed_tensor, shape, mean=0.0, std=1.0, dtype=popxl.float32)`.
#[pyfunction]
#[pyo3(signature = (seed_tensor, shape, mean=0.0, std=1.0, dtype=None))]
fn random_normal(
    py: Python<'_>,
    seed_tensor: &Bound<'_, PyAny>,
    shape: &Bound<'_, PyAny>,
    mean: f64,
    std: f64,
    dtype: Option<&Bound<'_, PyAny>>,
) -> Out {
    let d = dtype.map(dtype_of).transpose()?.unwrap_or(popart_ir::DataType::Float32);
    wrap(py, ops::random_normal(&t_of(seed_tensor)?, &crate::convert::shape_of(shape)?, mean, std, d).py()?)
}

/// `ops.split_random_seed(seed, n=2)`.
#[pyfunction]
#[pyo3(signature = (seed, n=2))]
fn split_random_seed(py: Python<'_>, seed: &Bound<'_, PyAny>, n: usize) -> PyResult<Vec<Py<PyTensor>>> {
    ops::split_random_seed(&t_of(seed)?, n).py()?.into_iter().map(|t| wrap(py, t)).collect()
}

/// Register the op functions in `m` (`popxl._native`, re-exported by `popxl.ops`).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCallSiteInfo>()?;
    macro_rules! add {
        ($($f:ident),* $(,)?) => {$( m.add_function(wrap_pyfunction!($f, m)?)?; )*};
    }
    add!(
        scatter,
        histogram,
        lamb_square,
        shaped_dropout,
        concat_,
        slice_,
        print_tensor,
        increment_mod,
        increment_mod_,
        subsample,
        dynamic_slice,
        dynamic_update,
        dynamic_update_,
        onehot,
        random_uniform,
        random_normal,
        split_random_seed,
        copy_var_update_,
        detach,
        host_load,
        host_store,
        softmax,
        reshape,
        reshape_,
        transpose,
        transpose_,
        slice,
        concat,
        split,
        squeeze,
        gather,
        cast,
        identity,
        clip,
        where_,
        maximum,
        minimum,
        argmax,
        argmin,
        cumsum,
        topk,
        layer_norm,
        group_norm,
        dropout,
        nll_loss,
        nll_loss_with_softmax_grad,
        scaled_add,
        scaled_add_,
        call,
        call_with_info,
        repeat,
        repeat_with_info,
    );
    register_unary(m)?;
    register_binary(m)?;
    register_reduce(m)?;
    var_update::register(m)?;
    indexing::register(m)?;
    ipu::register(m)?;
    matmul::register(m)?;
    resize::register(m)?;
    control::register(m)?;
    Ok(())
}
