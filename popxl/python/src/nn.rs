//! `popxl.ops` for convolutional networks: conv, pooling, batch norm.

use popxl::ops::{self, BatchNormOptions, ConvOptions, ConvTransposeOptions, PadType, PoolOptions};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

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

/// PopXL's per-convolution planning options: each proportion in [0, 1], each
/// partials type 'half' or 'float', each dithering flag 0 or 1 (no effect on `cpu`).
fn check_conv_planning(
    available_memory_proportions: Option<Vec<f64>>,
    partials_types: Option<Vec<String>>,
    enable_conv_dithering: Option<Vec<i64>>,
) -> PyResult<()> {
    if let Some(p) = available_memory_proportions.unwrap_or_default().iter().find(|p| !(0.0..=1.0).contains(*p)) {
        return Err(PyValueError::new_err(format!("available_memory_proportions must each be in [0, 1], not {p}")));
    }
    if let Some(p) =
        partials_types.unwrap_or_default().iter().find(|p| !["half", "float"].contains(&p.to_lowercase().as_str()))
    {
        return Err(PyValueError::new_err(format!("partials_types must each be 'half' or 'float', not '{p}'")));
    }
    if let Some(d) = enable_conv_dithering.unwrap_or_default().iter().find(|d| !(0..=1).contains(*d)) {
        return Err(PyValueError::new_err(format!("enable_conv_dithering must each be 0 or 1, not {d}")));
    }
    Ok(())
}

/// `ops.conv_transpose(t, weight, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
/// pad_type='not_set', output_padding=(), output_shape=(), available_memory_proportions=None,
/// partials_types=None, enable_conv_dithering=None)`: the transposed convolution of `t`
/// `[N, C_in, D..]` with `weight` `[C_in, C_out / groups, K..]` (ONNX `ConvTranspose`).
/// If `output_shape` is given the padding is derived from it.
#[pyfunction]
#[pyo3(signature = (t, weight, stride=None, padding=None, dilation=None, groups=1, pad_type="not_set", output_padding=None, output_shape=None, available_memory_proportions=None, partials_types=None, enable_conv_dithering=None))]
#[allow(clippy::too_many_arguments)]
fn conv_transpose(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    stride: Option<Vec<i64>>,
    padding: Option<Vec<i64>>,
    dilation: Option<Vec<i64>>,
    groups: i64,
    pad_type: &str,
    output_padding: Option<Vec<i64>>,
    output_shape: Option<Vec<i64>>,
    available_memory_proportions: Option<Vec<f64>>,
    partials_types: Option<Vec<String>>,
    enable_conv_dithering: Option<Vec<i64>>,
) -> Out {
    check_conv_planning(available_memory_proportions, partials_types, enable_conv_dithering)?;
    let conv = ConvOptions {
        stride: stride.unwrap_or_default(),
        padding: padding.unwrap_or_default(),
        dilation: dilation.unwrap_or_default(),
        groups,
        pad_type: self::pad_type(pad_type)?,
    };
    let options = ConvTransposeOptions {
        conv,
        output_padding: output_padding.unwrap_or_default(),
        output_shape: output_shape.unwrap_or_default(),
    };
    wrap(py, ops::conv_transpose(&tensor_of(t, "t")?, &tensor_of(weight, "weight")?, &options).py()?)
}

/// `ops.batch_norm(t, scale, bias, mean, var, epsilon=1e-5, momentum=0.9, unbiased_variance=False)`
/// -> `(y, new_mean, new_var)`: training-mode batch normalisation (PopART's
/// `BatchNormalization` in training mode; PopXL itself has only
/// `batch_norm_inference`). Each channel of `t` `[N, C, ..]` is normalised with the
/// mean and biased variance of its elements over the batch and spatial dims, then
/// scaled and shifted; `new_mean = momentum * mean + (1 - momentum) * batch mean`
/// (likewise `new_var`, with the unbiased batch variance if `unbiased_variance`).
/// Write the running statistics back with `ops.var_updates.copy_var_update_`.
#[pyfunction]
#[pyo3(signature = (t, scale, bias, mean, var, epsilon=1e-5, momentum=0.9, unbiased_variance=false))]
#[allow(clippy::too_many_arguments)]
fn batch_norm<'py>(
    py: Python<'py>,
    t: &Bound<'py, PyAny>,
    scale: &Bound<'py, PyAny>,
    bias: &Bound<'py, PyAny>,
    mean: &Bound<'py, PyAny>,
    var: &Bound<'py, PyAny>,
    epsilon: f64,
    momentum: f64,
    unbiased_variance: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let opts = BatchNormOptions { epsilon, momentum, unbiased_variance };
    let out = ops::batch_norm_with(
        &tensor_of(t, "t")?,
        &tensor_of(scale, "scale")?,
        &tensor_of(bias, "bias")?,
        &tensor_of(mean, "mean")?,
        &tensor_of(var, "var")?,
        opts,
    )
    .py()?;
    PyTuple::new(py, [wrap(py, out.y)?, wrap(py, out.mean)?, wrap(py, out.var)?])
}

/// Register the functions in `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(conv, m)?)?;
    m.add_function(wrap_pyfunction!(max_pool, m)?)?;
    m.add_function(wrap_pyfunction!(average_pool, m)?)?;
    m.add_function(wrap_pyfunction!(batch_norm_inference, m)?)?;
    m.add_function(wrap_pyfunction!(conv_transpose, m)?)?;
    m.add_function(wrap_pyfunction!(batch_norm, m)?)?;
    Ok(())
}
