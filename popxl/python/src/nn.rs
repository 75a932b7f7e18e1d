//! `popxl.ops` for convolutional networks: conv, pooling, batch norm.

use popxl::ops::{self, ConvOptions, PadType, PoolOptions};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPy;
use crate::tensor::{tensor_of, wrap, PyTensor};

type Out = PyResult<Py<PyTensor>>;

fn pad_type(s: &str) -> PyResult<PadType> {
    match s {
        "not_set" => Ok(PadType::NotSet),
        "same_upper" => Ok(PadType::SameUpper),
        "same_lower" => Ok(PadType::SameLower),
        "valid" => Ok(PadType::Valid),
        other => Err(PyValueError::new_err(format!(
            "pad_type must be 'not_set', 'same_upper', 'same_lower' or 'valid', not '{other}'"
        ))),
    }
}

/// `ops.conv(t, weight, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, pad_type='not_set')`.
#[pyfunction]
#[pyo3(signature = (t, weight, stride=None, padding=None, dilation=None, groups=1, pad_type="not_set"))]
#[allow(clippy::too_many_arguments)]
fn conv(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    stride: Option<Vec<i64>>,
    padding: Option<Vec<i64>>,
    dilation: Option<Vec<i64>>,
    groups: i64,
    pad_type: &str,
) -> Out {
    let options = ConvOptions {
        stride: stride.unwrap_or_default(),
        padding: padding.unwrap_or_default(),
        dilation: dilation.unwrap_or_default(),
        groups,
        pad_type: self::pad_type(pad_type)?,
    };
    wrap(py, ops::conv_with(&tensor_of(t, "t")?, &tensor_of(weight, "weight")?, &options).py()?)
}

#[allow(clippy::too_many_arguments)]
fn pool_options(
    stride: Option<Vec<i64>>,
    padding: Option<Vec<i64>>,
    out_pads: Option<Vec<i64>>,
    dilation: Option<Vec<i64>>,
    in_dilation: Option<Vec<i64>>,
    auto_pad: &str,
    ceil_mode: bool,
) -> PyResult<PoolOptions> {
    Ok(PoolOptions {
        stride: stride.unwrap_or_default(),
        padding: padding.unwrap_or_default(),
        out_pads: out_pads.unwrap_or_default(),
        dilation: dilation.unwrap_or_default(),
        in_dilations: in_dilation.unwrap_or_default(),
        auto_pad: pad_type(auto_pad)?,
        ceil_mode,
    })
}

/// `ops.max_pool(t, kernel_size, stride=None, padding=None, out_pads=None, dilation=None,
/// in_dilation=None, auto_pad='not_set', ceil_mode=False)`.
#[pyfunction]
#[pyo3(signature = (t, kernel_size, stride=None, padding=None, out_pads=None, dilation=None, in_dilation=None, auto_pad="not_set", ceil_mode=false))]
#[allow(clippy::too_many_arguments)]
fn max_pool(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    kernel_size: Vec<i64>,
    stride: Option<Vec<i64>>,
    padding: Option<Vec<i64>>,
    out_pads: Option<Vec<i64>>,
    dilation: Option<Vec<i64>>,
    in_dilation: Option<Vec<i64>>,
    auto_pad: &str,
    ceil_mode: bool,
) -> Out {
    let o = pool_options(stride, padding, out_pads, dilation, in_dilation, auto_pad, ceil_mode)?;
    wrap(py, ops::max_pool_with(&tensor_of(t, "t")?, &kernel_size, &o, ops::StorageOrder::default()).py()?)
}

/// `ops.average_pool(t, kernel_size, stride=None, padding=None, out_pads=None, dilation=None,
/// in_dilation=None, auto_pad='not_set', ceil_mode=False)`.
#[pyfunction]
#[pyo3(signature = (t, kernel_size, stride=None, padding=None, out_pads=None, dilation=None, in_dilation=None, auto_pad="not_set", ceil_mode=false))]
#[allow(clippy::too_many_arguments)]
fn average_pool(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    kernel_size: Vec<i64>,
    stride: Option<Vec<i64>>,
    padding: Option<Vec<i64>>,
    out_pads: Option<Vec<i64>>,
    dilation: Option<Vec<i64>>,
    in_dilation: Option<Vec<i64>>,
    auto_pad: &str,
    ceil_mode: bool,
) -> Out {
    let o = pool_options(stride, padding, out_pads, dilation, in_dilation, auto_pad, ceil_mode)?;
    wrap(py, ops::average_pool_with(&tensor_of(t, "t")?, &kernel_size, &o).py()?)
}

/// `ops.batch_norm_inference(t, scale, bias, mean, var, epsilon=1e-5, momentum=0.9)`.
#[pyfunction]
#[pyo3(signature = (t, scale, bias, mean, var, epsilon=1e-5, momentum=0.9))]
#[allow(clippy::too_many_arguments)]
fn batch_norm_inference(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    scale: &Bound<'_, PyAny>,
    bias: &Bound<'_, PyAny>,
    mean: &Bound<'_, PyAny>,
    var: &Bound<'_, PyAny>,
    epsilon: f64,
    momentum: f64,
) -> Out {
    let r = ops::batch_norm_inference(
        &tensor_of(t, "t")?,
        &tensor_of(scale, "scale")?,
        &tensor_of(bias, "bias")?,
        &tensor_of(mean, "mean")?,
        &tensor_of(var, "var")?,
        epsilon,
        momentum,
    );
    wrap(py, r.py()?)
}

/// Register the functions in `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(conv, m)?)?;
    m.add_function(wrap_pyfunction!(max_pool, m)?)?;
    m.add_function(wrap_pyfunction!(average_pool, m)?)?;
    m.add_function(wrap_pyfunction!(batch_norm_inference, m)?)?;
    Ok(())
}
