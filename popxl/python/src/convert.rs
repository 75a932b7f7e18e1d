//! Crossing the boundary: data types, numpy arrays and host arrays.

use half::f16;
use numpy::{PyArrayDyn, PyArrayMethods};
use popart_ir::DataType;
use popxl::HostArray;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A data type from a `popxl.dtype`, its name, or anything `numpy.dtype` accepts.
pub fn dtype_of(obj: &Bound<'_, PyAny>) -> PyResult<DataType> {
    let py = obj.py();
    let name: String = if let Ok(n) = obj.getattr("_popxl_name") {
        n.extract()?
    } else if let Ok(s) = obj.extract::<String>() {
        s
    } else {
        let np = py.import("numpy")?;
        match np.call_method1("dtype", (obj,)) {
            Ok(d) => match crate::fp8::float8_of_numpy(&d) {
                Some(f8) => return Ok(f8),
                None => d.getattr("name")?.extract()?,
            },
            Err(_) => {
                return Err(PyTypeError::new_err(format!(
                    "{} is not a popxl dtype (popxl.float32, popxl.int32...)",
                    obj.repr()?
                )))
            }
        }
    };
    name.parse::<DataType>().map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The `popxl.dtype` object of a data type.
pub fn py_dtype<'py>(py: Python<'py>, d: DataType) -> PyResult<Bound<'py, PyAny>> {
    py.import("popxl.dtypes")?.getattr(d.name())
}

fn numpy_name(d: DataType) -> &'static str {
    match d {
        DataType::Bool => "bool",
        other => other.name(),
    }
}

/// `numpy.asarray(obj, dtype)`, then into a host array (one copy, into a
/// C-contiguous array the session owns).
pub fn host_array(obj: &Bound<'_, PyAny>, dtype: Option<DataType>) -> PyResult<HostArray> {
    let py = obj.py();
    if let Some(d) = dtype.filter(|d| d.is_float8()) {
        return crate::fp8::host_array_fp8(obj, d);
    }
    if let Some(d) = obj.getattr("dtype").ok().and_then(|d| crate::fp8::float8_of_numpy(&d)) {
        return crate::fp8::codes_array(obj, d);
    }
    let np = py.import("numpy")?;
    let kwargs = PyDict::new(py);
    if let Some(d) = dtype {
        kwargs.set_item("dtype", numpy_name(d))?;
    }
    let arr = np.call_method("asarray", (obj,), Some(&kwargs)).map_err(|e| {
        if e.is_instance_of::<PyValueError>(py) || e.is_instance_of::<PyTypeError>(py) {
            PyTypeError::new_err(format!("cannot convert {} to a numpy array: {e}", type_name(obj)))
        } else {
            e
        }
    })?;
    macro_rules! try_as {
        ($($t:ty),*) => {$(
            if let Ok(a) = arr.downcast::<PyArrayDyn<$t>>() {
                return Ok(HostArray::from(a.readonly().as_array().to_owned()));
            }
        )*};
    }
    try_as!(f32, f64, i32, i64, bool, u32, u8, i8, i16, u16, u64, f16);
    let dt = arr.getattr("dtype").and_then(|d| d.str().map(|s| s.to_string())).unwrap_or_default();
    Err(TypeError_unsupported(&dt))
}

#[allow(non_snake_case)]
fn TypeError_unsupported(dt: &str) -> PyErr {
    PyTypeError::new_err(format!("numpy arrays of dtype `{dt}` are not supported by popxl"))
}

/// The Python type name of an object, for messages.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into())
}

/// A host array as a numpy array (the array's buffer moves into numpy, no copy).
pub fn to_numpy(py: Python<'_>, a: HostArray) -> PyResult<PyObject> {
    Ok(match a {
        HostArray::Bool(a) => numpy::PyArray::from_owned_array(py, a).into_any().unbind(),
        HostArray::I8(a) => numpy::PyArray::from_owned_array(py, a).into_any().unbind(),
        HostArray::I16(a) => numpy::PyArray::from_owned_array(py, a).into_any().unbind(),
        HostArray::I32(a) => numpy::PyArray::from_owned_array(py, a).into_any().unbind(),
        HostArray::I64(a) => numpy::PyArray::from_owned_array(py, a).into_any().unbind(),
        HostArray::U8(a) => numpy::PyArray::from_owned_array(py, a).into_any().unbind(),
        HostArray::U16(a) => numpy::PyArray::from_owned_array(py, a).into_any().unbind(),
        HostArray::U32(a) => numpy::PyArray::from_owned_array(py, a).into_any().unbind(),
        HostArray::U64(a) => numpy::PyArray::from_owned_array(py, a).into_any().unbind(),
        HostArray::F16(a) => numpy::PyArray::from_owned_array(py, a).into_any().unbind(),
        HostArray::F32(a) => numpy::PyArray::from_owned_array(py, a).into_any().unbind(),
        HostArray::F64(a) => numpy::PyArray::from_owned_array(py, a).into_any().unbind(),
        a @ (HostArray::F8_143(_) | HostArray::F8_152(_)) => crate::fp8::to_numpy_fp8(py, &a)?,
    })
}

/// A shape from a Python sequence of ints (negative sizes refused).
pub fn shape_of(obj: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    if let Ok(n) = obj.extract::<i64>() {
        return usize::try_from(n)
            .map(|n| vec![n])
            .map_err(|_| PyValueError::new_err(format!("negative size {n} in a shape")));
    }
    let items: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .and_then(|it| it.collect::<PyResult<_>>())
        .map_err(|_| PyTypeError::new_err(format!("a shape must be a sequence of ints, not {}", type_name(obj))))?;
    items
        .iter()
        .map(|d| {
            // Python ints beyond i64 raise OverflowError here.
            let d: i64 = d.extract()?;
            usize::try_from(d).map_err(|_| PyValueError::new_err(format!("negative size {d} in a shape")))
        })
        .collect()
}
