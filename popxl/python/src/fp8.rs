//! PopXL's float8 API: the ops (`pow2scale_cast_to_fp8`, `pow2scale_cast_from_fp8`,
//! `matmul_pow2scaled`, `conv_pow2scaled`, `conv_transpose_pow2scaled`), the host
//! conversions and the MSE scale search behind `popxl.fp8_utils`, and float8 host data at the boundary: numpy has no float8,
//! so PopXL's arrays are structured `np.dtype([("float8_143", "u1")])` views of
//! the codes (the `popxl.dtypes.np_dtype_float8_*` dtypes).

use numpy::{PyArrayDyn, PyArrayMethods};
use popart_ir::float8::{encode_scaled, pow2, Float8Format, Float8_143, Float8_152, LOG2_SCALE_RANGE};
use popart_ir::DataType;
use popxl::ops::{self, ConvOptions, ConvTransposeOptions, PadType};
use popxl::HostArray;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::convert::{dtype_of, type_name};
use crate::errors::IntoPy;
use crate::tensor::{tensor_of, wrap, PyTensor};

type Out = PyResult<Py<PyTensor>>;

/// The float8 format of a data type, or PopXL's `TypeError`.
fn format_of(d: DataType, what: &str) -> PyResult<Float8Format> {
    Float8Format::of(d).ok_or_else(|| {
        PyTypeError::new_err(format!("Data type {d} not supported for {what}: use float8_143 or float8_152"))
    })
}

/// `log2_scale` of a host conversion, checked against `[-32, 32)`.
fn host_scale(log2_scale: i64) -> PyResult<i32> {
    i32::try_from(log2_scale)
        .ok()
        .filter(|s| LOG2_SCALE_RANGE.contains(s))
        .ok_or_else(|| PyValueError::new_err(format!("log2_scale {log2_scale} is not in the range [-32, 32)")))
}

/// PopXL's checks of a `log2_scale` tensor: a scalar (`ValueError`) of int32 (`TypeError`).
fn scale_tensor(obj: &Bound<'_, PyAny>) -> PyResult<popxl::Tensor> {
    let s = tensor_of(obj, "log2_scale")?;
    if !s.shape().is_empty() {
        return Err(PyValueError::new_err("Log2 scale argument must be a scalar tensor"));
    }
    if s.dtype() != DataType::Int32 {
        return Err(PyTypeError::new_err("Log2 scale tensor must be of type popxl.int32"));
    }
    Ok(s)
}

/// The codes of a float8 host array (from a structured or uint8 numpy array) as
/// a host array of `dtype`.
pub fn codes_array(obj: &Bound<'_, PyAny>, dtype: DataType) -> PyResult<HostArray> {
    let u8s = obj.call_method1("view", ("uint8",))?;
    let a = u8s
        .downcast::<PyArrayDyn<u8>>()
        .map_err(|_| PyTypeError::new_err(format!("float8 data must be a numpy array, not {}", type_name(obj))))?
        .readonly()
        .as_array()
        .to_owned();
    Ok(match dtype {
        DataType::Float8_143 => HostArray::from(a.mapv(Float8_143)),
        _ => HostArray::from(a.mapv(Float8_152)),
    })
}

/// The float8 data type a numpy dtype stands for (`np_dtype_float8_143`...).
pub fn float8_of_numpy(np_dtype: &Bound<'_, PyAny>) -> Option<DataType> {
    let names = np_dtype.getattr("names").ok()?;
    let names: Vec<String> = names.extract().ok()?;
    match names.as_slice() {
        [n] => n.parse::<DataType>().ok().filter(|d| d.is_float8()),
        _ => None,
    }
}

/// Host data for a tensor of float8 `dtype`: float8 arrays as they are (their
/// codes), float data converted with PopXL's defaults (`log2_scale` 0, NaN on
/// overflow), anything else a `TypeError`.
pub fn host_array_fp8(obj: &Bound<'_, PyAny>, dtype: DataType) -> PyResult<HostArray> {
    host_array_fp8_scaled(obj, dtype, 0, true)
}

/// [`host_array_fp8`] with the scale and overflow rule of float data (PopXL's
/// `log2_scale` and `nan_on_overflow` keywords of `variable` and `constant`).
pub fn host_array_fp8_scaled(
    obj: &Bound<'_, PyAny>,
    dtype: DataType,
    log2_scale: i32,
    nan_on_overflow: bool,
) -> PyResult<HostArray> {
    let py = obj.py();
    let np = py.import("numpy")?;
    let arr = np.call_method1("asarray", (obj,))?;
    let np_dtype = arr.getattr("dtype")?;
    if let Some(d) = float8_of_numpy(&np_dtype) {
        if d != dtype {
            return Err(PyTypeError::new_err(format!("float8 data of type {d} for a {dtype} tensor")));
        }
        return codes_array(&arr, dtype);
    }
    let kind: String = np_dtype.getattr("kind")?.extract()?;
    if kind != "f" {
        return Err(PyTypeError::new_err(format!(
            "Type {} is not supported for float8 tensors. Please use float16, float32 or float64 types.",
            np_dtype.str()?
        )));
    }
    let x = arr.call_method1("astype", ("float64",))?;
    let codes = encode_array(&x, format_of(dtype, "a float8 tensor")?, log2_scale, nan_on_overflow)?;
    let c = codes.downcast::<PyArrayDyn<u8>>()?.readonly().as_array().to_owned();
    Ok(match dtype {
        DataType::Float8_143 => HostArray::from(c.mapv(Float8_143)),
        _ => HostArray::from(c.mapv(Float8_152)),
    })
}

/// A float8 host array as PopXL's numpy view (structured dtype over the codes).
pub fn to_numpy_fp8(py: Python<'_>, a: &HostArray) -> PyResult<PyObject> {
    let (bytes, d) = match a {
        HostArray::F8_143(x) => (x.mapv(|c| c.0), DataType::Float8_143),
        HostArray::F8_152(x) => (x.mapv(|c| c.0), DataType::Float8_152),
        _ => return Err(PyRuntimeError::new_err("not float8 data")),
    };
    let arr = numpy::PyArray::from_owned_array(py, bytes);
    let np_dtype = py.import("popxl.dtypes")?.getattr(format!("np_dtype_{}", d.name()))?;
    Ok(arr.call_method1("view", (np_dtype,))?.unbind())
}

/// The codes (uint8, same shape) of float64 array `x` times `2^log2_scale`.
fn encode_array<'py>(
    x: &Bound<'py, PyAny>,
    fmt: Float8Format,
    log2_scale: i32,
    nan_on_overflow: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = x.py();
    let a = x.downcast::<PyArrayDyn<f64>>()?.readonly();
    let view = a.as_array();
    let scale = pow2(log2_scale);
    let out = py.allow_threads(|| view.mapv(|v| encode_scaled(fmt, v, scale, nan_on_overflow)));
    Ok(numpy::PyArray::from_owned_array(py, out).into_any())
}

/// `fp8_utils.host_pow2scale_cast_to_fp8` without the structured view: the
/// uint8 codes of `cast(src · 2^log2_scale, dtype)`.
#[pyfunction]
#[pyo3(signature = (src, dtype, log2_scale=0, nan_on_overflow=true))]
fn _host_pow2scale_cast_to_fp8<'py>(
    src: &Bound<'py, PyAny>,
    dtype: &Bound<'py, PyAny>,
    log2_scale: i64,
    nan_on_overflow: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let fmt =
        format_of(dtype_of(dtype).map_err(|e| PyRuntimeError::new_err(e.to_string()))?, "host_pow2scale_cast_to_fp8")
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let s = host_scale(log2_scale)?;
    let np_dtype = src.getattr("dtype")?;
    let kind: String = np_dtype.getattr("kind")?.extract()?;
    let size: usize = np_dtype.getattr("itemsize")?.extract()?;
    if kind != "f" || !matches!(size, 2 | 4 | 8) {
        return Err(PyRuntimeError::new_err(format!("src.dtype {} not currently supported.", np_dtype.str()?)));
    }
    encode_any(src, fmt, s, nan_on_overflow)
}

/// The codes of a float16, float32 or float64 numpy array times `2^log2_scale`,
/// read in place (no float64 copy) with the GIL released.
fn encode_any<'py>(
    src: &Bound<'py, PyAny>,
    fmt: Float8Format,
    log2_scale: i32,
    nan_on_overflow: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = src.py();
    let scale = pow2(log2_scale);
    macro_rules! encode_as {
        ($($t:ty),*) => {$(
            if let Ok(a) = src.downcast::<PyArrayDyn<$t>>() {
                let a = a.readonly();
                let view = a.as_array();
                let out = py.allow_threads(|| view.mapv(|v| encode_scaled(fmt, f64::from(v), scale, nan_on_overflow)));
                return Ok(numpy::PyArray::from_owned_array(py, out).into_any());
            }
        )*};
    }
    encode_as!(f32, f64, half::f16);
    let x = src.call_method1("astype", ("float64",))?;
    encode_array(&x, fmt, log2_scale, nan_on_overflow)
}

/// `fp8_utils.host_pow2scale_cast_from_fp8` on uint8 codes of format `src_dtype`:
/// `cast(src, dtype) · 2^log2_scale` as numpy `dtype` (float16, float32, float64).
#[pyfunction]
fn _host_pow2scale_cast_from_fp8<'py>(
    src: &Bound<'py, PyAny>,
    src_dtype: &Bound<'py, PyAny>,
    dtype: &Bound<'py, PyAny>,
    log2_scale: i64,
) -> PyResult<Bound<'py, PyAny>> {
    let py = src.py();
    let fmt = format_of(dtype_of(src_dtype)?, "host_pow2scale_cast_from_fp8")?;
    let to = dtype_of(dtype)?;
    if !matches!(to, DataType::Float16 | DataType::Float32 | DataType::Float64) {
        return Err(PyRuntimeError::new_err(format!("dtype {to} not currently supported.")));
    }
    let s = host_scale(log2_scale)?;
    let codes = src.downcast::<PyArrayDyn<u8>>()?.readonly();
    let view = codes.as_array();
    let scale = pow2(s);
    // The 256 scaled values in the output type (each rounded once from its exact f64).
    let table: [f64; 256] = std::array::from_fn(|c| fmt.decode_f64(c as u8) * scale);
    macro_rules! lookup_as {
        ($t:ty, $from:expr) => {{
            let t: [$t; 256] = std::array::from_fn(|c| $from(table[c]));
            let out = py.allow_threads(|| view.mapv(|c| t[usize::from(c)]));
            numpy::PyArray::from_owned_array(py, out).into_any()
        }};
    }
    Ok(match to {
        DataType::Float16 => lookup_as!(half::f16, half::f16::from_f64),
        DataType::Float32 => lookup_as!(f32, |v: f64| v as f32),
        _ => lookup_as!(f64, |v: f64| v),
    })
}

/// `ops.pow2scale_cast_to_fp8(t, log2_scale, data_type)`: `cast(t · 2^log2_scale, data_type)`.
#[pyfunction]
fn pow2scale_cast_to_fp8(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    log2_scale: &Bound<'_, PyAny>,
    data_type: &Bound<'_, PyAny>,
) -> Out {
    let d = dtype_of(data_type)?;
    format_of(d, "pow2scale_cast_to_fp8")?;
    let s = scale_tensor(log2_scale)?;
    wrap(py, ops::pow2scale_cast_to_fp8(&tensor_of(t, "t")?, &s, d).py()?)
}

/// `ops.pow2scale_cast_from_fp8(t, log2_scale, data_type)`: `cast(t, data_type) · 2^log2_scale`.
#[pyfunction]
fn pow2scale_cast_from_fp8(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    log2_scale: &Bound<'_, PyAny>,
    data_type: &Bound<'_, PyAny>,
) -> Out {
    let d = dtype_of(data_type)?;
    if !matches!(d, DataType::Float16 | DataType::Float32) {
        return Err(PyTypeError::new_err(format!("Data type {d} not supported for pow2scale_cast_from_fp8")));
    }
    let s = scale_tensor(log2_scale)?;
    wrap(py, ops::pow2scale_cast_from_fp8(&tensor_of(t, "t")?, &s, d).py()?)
}

/// PopXL's check of the pow2-scaled products' operands.
fn fp8_operands(a: &popxl::Tensor, b: &popxl::Tensor, what: &str) -> PyResult<()> {
    if a.dtype().is_float8() && b.dtype().is_float8() {
        Ok(())
    } else {
        Err(PyTypeError::new_err(format!("{what} operands must be of dtype popxl.float8_143 or popxl.float8_152")))
    }
}

/// `ops.matmul_pow2scaled(lhs, rhs, log2_scale, available_memory_proportion=None)`:
/// `(lhs @ rhs) · 2^log2_scale` as float16.
#[pyfunction]
#[pyo3(signature = (lhs, rhs, log2_scale, available_memory_proportion=None))]
fn matmul_pow2scaled(
    py: Python<'_>,
    lhs: &Bound<'_, PyAny>,
    rhs: &Bound<'_, PyAny>,
    log2_scale: &Bound<'_, PyAny>,
    available_memory_proportion: Option<f64>,
) -> Out {
    let _ = available_memory_proportion; // an IPU memory-planning hint
    let (a, b) = (tensor_of(lhs, "lhs")?, tensor_of(rhs, "rhs")?);
    fp8_operands(&a, &b, "Scaled matmul")?;
    let s = scale_tensor(log2_scale)?;
    wrap(py, ops::matmul_pow2scaled(&a, &b, &s).py()?)
}

/// `ops.conv_pow2scaled(t, weight, log2_scale, stride=(1, 1), padding=(0, 0, 0, 0),
/// dilation=(1, 1), groups=1, pad_type='not_set', available_memory_proportions=None,
/// enable_conv_dithering=None)`: `conv(t, weight) · 2^log2_scale` as float16.
#[pyfunction]
#[pyo3(signature = (t, weight, log2_scale, stride=None, padding=None, dilation=None, groups=1, pad_type="not_set",
    available_memory_proportions=None, enable_conv_dithering=None))]
#[allow(clippy::too_many_arguments)]
fn conv_pow2scaled(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    log2_scale: &Bound<'_, PyAny>,
    stride: Option<Vec<i64>>,
    padding: Option<Vec<i64>>,
    dilation: Option<Vec<i64>>,
    groups: i64,
    pad_type: &str,
    available_memory_proportions: Option<Vec<f64>>,
    enable_conv_dithering: Option<Vec<i64>>,
) -> Out {
    // IPU planning hints.
    let _ = (available_memory_proportions, enable_conv_dithering);
    let (x, w) = (tensor_of(t, "t")?, tensor_of(weight, "weight")?);
    fp8_operands(&x, &w, "Scaled conv")?;
    let s = scale_tensor(log2_scale)?;
    let pad_type = parse_pad_type(pad_type)?;
    let options = ConvOptions {
        stride: stride.unwrap_or_default(),
        padding: padding.unwrap_or_default(),
        dilation: dilation.unwrap_or_default(),
        groups,
        pad_type,
    };
    wrap(py, ops::conv_pow2scaled(&x, &w, &s, &options).py()?)
}

/// `ops.conv_transpose_pow2scaled(t, weight, log2_scale, stride=(1, 1), padding=(0, 0, 0, 0),
/// dilation=(1, 1), groups=1, pad_type='not_set', output_padding=(), output_shape=(),
/// available_memory_proportions=None, enable_conv_dithering=None)`:
/// `conv_transpose(t, weight) · 2^log2_scale` as float16, `weight` `[C_in, C_out / groups, K..]`.
#[pyfunction]
#[pyo3(signature = (t, weight, log2_scale, stride=None, padding=None, dilation=None, groups=1, pad_type="not_set",
    output_padding=None, output_shape=None, available_memory_proportions=None, enable_conv_dithering=None))]
#[allow(clippy::too_many_arguments)]
fn conv_transpose_pow2scaled(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    log2_scale: &Bound<'_, PyAny>,
    stride: Option<Vec<i64>>,
    padding: Option<Vec<i64>>,
    dilation: Option<Vec<i64>>,
    groups: i64,
    pad_type: &str,
    output_padding: Option<Vec<i64>>,
    output_shape: Option<Vec<i64>>,
    available_memory_proportions: Option<Vec<f64>>,
    enable_conv_dithering: Option<Vec<i64>>,
) -> Out {
    // IPU planning hints.
    let _ = (available_memory_proportions, enable_conv_dithering);
    let (x, w) = (tensor_of(t, "t")?, tensor_of(weight, "weight")?);
    fp8_operands(&x, &w, "Scaled conv transpose")?;
    let s = scale_tensor(log2_scale)?;
    let options = ConvTransposeOptions {
        conv: ConvOptions {
            stride: stride.unwrap_or_default(),
            padding: padding.unwrap_or_default(),
            dilation: dilation.unwrap_or_default(),
            groups,
            pad_type: parse_pad_type(pad_type)?,
        },
        output_padding: output_padding.unwrap_or_default(),
        output_shape: output_shape.unwrap_or_default(),
    };
    wrap(py, ops::conv_transpose_pow2scaled(&x, &w, &s, &options).py()?)
}

/// A `pad_type` keyword, or a `ValueError` naming the accepted ones.
fn parse_pad_type(pad_type: &str) -> PyResult<PadType> {
    PadType::parse(pad_type).ok_or_else(|| {
        PyValueError::new_err(format!("pad_type {pad_type:?} is not one of not_set, same_upper, same_lower, valid"))
    })
}

/// Register the float8 functions in `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_host_pow2scale_cast_to_fp8, m)?)?;
    m.add_function(wrap_pyfunction!(crate::fp8_scale::_host_fp8_mse_scale, m)?)?;
    m.add_function(wrap_pyfunction!(_host_pow2scale_cast_from_fp8, m)?)?;
    m.add_function(wrap_pyfunction!(pow2scale_cast_to_fp8, m)?)?;
    m.add_function(wrap_pyfunction!(pow2scale_cast_from_fp8, m)?)?;
    m.add_function(wrap_pyfunction!(matmul_pow2scaled, m)?)?;
    m.add_function(wrap_pyfunction!(conv_pow2scaled, m)?)?;
    m.add_function(wrap_pyfunction!(conv_transpose_pow2scaled, m)?)?;
    Ok(())
}
