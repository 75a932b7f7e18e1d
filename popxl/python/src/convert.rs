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
    // numpy bools are bytes that a view can set to anything: checked as bytes,
    // since a Rust bool other than 0 or 1 is undefined behaviour.
    if arr.getattr("dtype")?.getattr("kind")?.extract::<String>()? == "b" {
        let bytes = arr.call_method1("view", ("uint8",))?;
        let b = bytes.downcast::<PyArrayDyn<u8>>()?.readonly();
        let b = b.as_array();
        if let Some((i, v)) = b.iter().enumerate().find(|(_, &v)| v > 1) {
            return Err(PyValueError::new_err(format!("bool element {i} is byte {v}; bool data must be 0 or 1")));
        }
        return Ok(HostArray::from(b.mapv(|v| v == 1)));
    }
    macro_rules! try_as {
        ($($t:ty),*) => {$(
            if let Ok(a) = arr.downcast::<PyArrayDyn<$t>>() {
                return Ok(HostArray::from(a.readonly().as_array().to_owned()));
            }
        )*};
    }
    try_as!(f32, f64, i32, i64, u32, u8, i8, i16, u16, u64, f16);
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

/// The data type of a numpy dtype in native byte order (None: another type or
/// byte order), from the descriptor's kind, size and byte order fields.
fn numpy_data_type(descr: &Bound<'_, numpy::PyArrayDescr>) -> Option<DataType> {
    use numpy::PyArrayDescrMethods;
    if descr.kind() == b'V' {
        // Structured: PopXL's one-byte float8 views of the codes, or unsupported.
        return crate::fp8::float8_of_numpy(descr.as_any());
    }
    // '=' native, '|' not applicable, '<' little endian (every host we build for).
    if !matches!(descr.byteorder(), b'=' | b'|' | b'<') {
        return None;
    }
    Some(match (descr.kind(), descr.itemsize()) {
        (b'f', 4) => DataType::Float32,
        (b'f', 8) => DataType::Float64,
        (b'f', 2) => DataType::Float16,
        (b'i', 4) => DataType::Int32,
        (b'i', 8) => DataType::Int64,
        (b'i', 1) => DataType::Int8,
        (b'i', 2) => DataType::Int16,
        (b'u', 1) => DataType::Uint8,
        (b'u', 2) => DataType::Uint16,
        (b'u', 4) => DataType::Uint32,
        (b'u', 8) => DataType::Uint64,
        (b'b', 1) => DataType::Bool,
        _ => return None,
    })
}

/// A zero-filled C-contiguous numpy array of `dtype` and `shape` (numpy's
/// `MemoryError` or `ValueError` when it cannot be made).
pub fn numpy_zeros<'py>(py: Python<'py>, dtype: DataType, shape: &[usize]) -> PyResult<Bound<'py, PyAny>> {
    use numpy::npyffi::{npy_intp, PY_ARRAY_API};
    use numpy::{PyArrayDescr, PyArrayDescrMethods};
    if dtype.is_float8() {
        // PopXL's structured one-byte view of the codes.
        let codes = numpy_zeros(py, DataType::Uint8, shape)?;
        let np_dtype = py.import("popxl.dtypes")?.getattr(format!("np_dtype_{}", dtype.name()))?;
        return codes.call_method1("view", (np_dtype,));
    }
    let descr = match dtype {
        DataType::Float32 => PyArrayDescr::of::<f32>(py),
        DataType::Float64 => PyArrayDescr::of::<f64>(py),
        DataType::Float16 => PyArrayDescr::of::<f16>(py),
        DataType::Int32 => PyArrayDescr::of::<i32>(py),
        DataType::Int64 => PyArrayDescr::of::<i64>(py),
        DataType::Int8 => PyArrayDescr::of::<i8>(py),
        DataType::Int16 => PyArrayDescr::of::<i16>(py),
        DataType::Uint8 => PyArrayDescr::of::<u8>(py),
        DataType::Uint16 => PyArrayDescr::of::<u16>(py),
        DataType::Uint32 => PyArrayDescr::of::<u32>(py),
        DataType::Uint64 => PyArrayDescr::of::<u64>(py),
        DataType::Bool => PyArrayDescr::of::<bool>(py),
        // Data types added later have no numpy twin here yet.
        #[allow(unreachable_patterns)]
        other => return Err(PyTypeError::new_err(format!("no numpy array type for {}", other.name()))),
    };
    let mut dims: Vec<npy_intp> = shape
        .iter()
        .map(|&d| npy_intp::try_from(d).map_err(|_| value_error(format!("array dimension {d} is too large"))))
        .collect::<PyResult<_>>()?;
    let nd = std::ffi::c_int::try_from(dims.len()).map_err(|_| value_error("too many dimensions"))?;
    // SAFETY: `dims` holds `nd` dimensions; PyArray_Zeros steals the descriptor
    // reference `into_dtype_ptr` hands over and returns a new reference or null
    // with a Python exception set (MemoryError, ValueError for too large a size).
    unsafe {
        let ptr = PY_ARRAY_API.PyArray_Zeros(py, nd, dims.as_mut_ptr(), descr.into_dtype_ptr(), 0);
        Bound::from_owned_ptr_or_err(py, ptr)
    }
}

/// The data type, shape and buffer (pointer, byte length) of a C-contiguous,
/// writeable numpy array of a supported dtype (None otherwise). The buffer
/// lives as long as the array.
pub fn numpy_buffer_mut(arr: &Bound<'_, PyAny>) -> Option<(DataType, Vec<usize>, *mut u8, usize)> {
    use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
    let a = arr.downcast::<PyUntypedArray>().ok()?;
    let descr = a.dtype();
    let dt = numpy_data_type(&descr)?;
    // SAFETY: reading the flags and data fields of a live array object.
    let (flags, data) = unsafe { ((*a.as_array_ptr()).flags, (*a.as_array_ptr()).data) };
    const NPY_ARRAY_WRITEABLE: std::ffi::c_int = 0x0400;
    if !a.is_c_contiguous() || flags & NPY_ARRAY_WRITEABLE == 0 {
        return None;
    }
    let n = a.len().checked_mul(descr.itemsize())?;
    Some((dt, a.shape().to_vec(), data as *mut u8, n))
}

/// The bytes at `(p, n)` from [`numpy_buffer_mut`] as a slice.
///
/// # Safety
/// The array must outlive the slice, and nothing else may read or write its
/// buffer while the slice lives.
pub unsafe fn bytes_mut<'a>(p: *mut u8, n: usize) -> &'a mut [u8] {
    if n == 0 {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(p, n)
    }
}

/// A stream input ready to cross into the session: a C-contiguous numpy array
/// of a supported dtype, read in place, or (64-bit data downcast) an array the
/// conversion made. Holding it keeps the memory alive.
pub struct StreamInput<'py> {
    /// Keeps the numpy array (and so its buffer) alive.
    _array: Option<Bound<'py, PyAny>>,
    owned: Option<HostArray>,
    dtype: DataType,
    shape: Vec<usize>,
    data: *const u8,
    nbytes: usize,
}

impl StreamInput<'_> {
    /// The session's borrowed view of the data.
    pub fn view(&self) -> PyResult<popxl_session::InputView<'_>> {
        if let Some(a) = &self.owned {
            return popxl_session::InputView::new(a.dtype(), a.shape(), owned_bytes(a)).map_err(value_error);
        }
        let bytes: &[u8] = if self.nbytes == 0 {
            &[]
        } else {
            // SAFETY: `data` is the buffer of the C-contiguous numpy array held in
            // `_array`, `nbytes` long; it stays allocated while the array lives
            // (numpy refuses to resize an array with other references).
            unsafe { std::slice::from_raw_parts(self.data, self.nbytes) }
        };
        popxl_session::InputView::new(self.dtype, &self.shape, bytes).map_err(value_error)
    }
}

/// A `ValueError` with the message of `e`.
pub fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// The bytes of an array in standard layout (every array made here is).
fn owned_bytes(a: &HostArray) -> &[u8] {
    fn view<T>(s: &[T]) -> &[u8] {
        // SAFETY: every element type of HostArray is plain data (bool is one
        // byte, f16 a transparent u16, the float8 codes transparent u8s).
        unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
    }
    macro_rules! each {
        ($($v:ident),*) => {
            match a { $(HostArray::$v(x) => x.as_slice().map(view),)* }
        };
    }
    each!(Bool, I8, I16, I32, I64, U8, U16, U32, U64, F16, F32, F64, F8_143, F8_152).unwrap_or(&[])
}

/// Checked 64-bit to 32-bit conversion of a numpy array (PopXL's
/// `downcast_inputs`): one copy; values the 32-bit type cannot hold are a `ValueError`.
fn downcast_numpy(arr: &Bound<'_, PyAny>, from: DataType, stream: &str) -> PyResult<HostArray> {
    let bad = |i: usize, v: String, to: &str| {
        PyValueError::new_err(format!(
            "input for stream `{stream}`: element {i} ({v}) cannot be represented as {to} (downcast_inputs)"
        ))
    };
    macro_rules! conv {
        ($from:ty, $to:ty, $name:expr, $f:expr) => {{
            let a = arr.downcast::<PyArrayDyn<$from>>()?.readonly();
            let a = a.as_array();
            let mut out = Vec::with_capacity(a.len());
            for (i, &v) in a.iter().enumerate() {
                out.push($f(v).ok_or_else(|| bad(i, v.to_string(), $name))?);
            }
            let r: ndarray::ArrayD<$to> =
                ndarray::ArrayD::from_shape_vec(a.raw_dim(), out).map_err(|e| PyValueError::new_err(e.to_string()))?;
            HostArray::from(r)
        }};
    }
    Ok(match from {
        DataType::Int64 => conv!(i64, i32, "int32", |v: i64| i32::try_from(v).ok()),
        DataType::Uint64 => conv!(u64, u32, "uint32", |v: u64| u32::try_from(v).ok()),
        _ => conv!(f64, f32, "float32", |v: f64| {
            let f = v as f32;
            (f.is_finite() || !v.is_finite()).then_some(f)
        }),
    })
}

/// An input for stream `stream` of `dtype` from any object numpy converts:
/// numpy arrays keep their dtype (64-bit ones are downcast to the stream's
/// 32-bit type when `downcast`), Python scalars and lists take the stream's.
/// A C-contiguous array of a supported dtype crosses without a copy; any other
/// layout or byte order is copied once (`numpy.ascontiguousarray`).
pub fn stream_input<'py>(
    obj: &Bound<'py, PyAny>,
    dtype: DataType,
    stream: &str,
    downcast: bool,
) -> PyResult<StreamInput<'py>> {
    use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
    let py = obj.py();
    if dtype.is_float8() {
        // Float8 data: PopXL's structured one-byte arrays, or floats to encode (one copy).
        let owned = host_array(obj, Some(dtype))?;
        return Ok(StreamInput {
            _array: None,
            dtype: owned.dtype(),
            shape: owned.shape().to_vec(),
            owned: Some(owned),
            data: std::ptr::null(),
            nbytes: 0,
        });
    }
    let convert = |o: &Bound<'py, PyAny>, how: &str, dt: Option<&str>| -> PyResult<Bound<'py, PyAny>> {
        let np = py.import("numpy")?;
        let kwargs = PyDict::new(py);
        if let Some(d) = dt {
            kwargs.set_item("dtype", d)?;
        }
        np.call_method(how, (o,), Some(&kwargs)).map_err(|e| {
            if e.is_instance_of::<PyValueError>(py) || e.is_instance_of::<PyTypeError>(py) {
                PyTypeError::new_err(format!("cannot convert {} to a numpy array: {e}", type_name(o)))
            } else {
                e
            }
        })
    };
    let mut arr = if obj.downcast::<PyUntypedArray>().is_ok() {
        obj.clone()
    } else if obj.hasattr("dtype")? {
        convert(obj, "asarray", None)?
    } else {
        convert(obj, "asarray", Some(numpy_name(dtype)))?
    };
    for attempt in 0..2 {
        let a = arr
            .downcast::<PyUntypedArray>()
            .map_err(|_| PyTypeError::new_err(format!("cannot convert {} to a numpy array", type_name(obj))))?;
        let descr = a.dtype();
        let Some(dt) = numpy_data_type(&descr) else {
            if attempt == 0 && descr.is_native_byteorder() == Some(false) {
                // Another byte order: one copy into the native one (C order).
                let native = descr.call_method1("newbyteorder", ("=",))?;
                let kwargs = PyDict::new(py);
                kwargs.set_item("dtype", native)?;
                arr = py.import("numpy")?.call_method("ascontiguousarray", (&arr,), Some(&kwargs))?;
                continue;
            }
            let dt = descr.str().map(|s| s.to_string()).unwrap_or_default();
            return Err(TypeError_unsupported(&dt));
        };
        if downcast && dt != dtype && matches!(dt, DataType::Int64 | DataType::Uint64 | DataType::Float64) {
            let owned = downcast_numpy(&arr, dt, stream)?;
            return Ok(StreamInput {
                _array: None,
                dtype: owned.dtype(),
                shape: owned.shape().to_vec(),
                owned: Some(owned),
                data: std::ptr::null(),
                nbytes: 0,
            });
        }
        if !a.is_c_contiguous() {
            if attempt == 0 {
                arr = convert(&arr, "ascontiguousarray", None)?;
                continue;
            }
            return Err(PyValueError::new_err("numpy.ascontiguousarray returned a non-contiguous array"));
        }
        let nbytes = a.len().checked_mul(descr.itemsize()).ok_or_else(|| value_error("array size overflows"))?;
        // SAFETY: reading the data pointer field of a live array object.
        let data = unsafe { (*a.as_array_ptr()).data } as *const u8;
        return Ok(StreamInput { dtype: dt, shape: a.shape().to_vec(), data, nbytes, owned: None, _array: Some(arr) });
    }
    Err(value_error("could not make a contiguous array of the input"))
}
