//! `popxl.Session`: prepare, lower and run an IR; numpy arrays in and out.

use popart_ir::DataType;
use popxl::{DeviceToHostStream, HostArray, HostToDeviceStream, Tensor};
use popxl_session::{InputView, OutputView, Outputs, Session, SessionOptions};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use std::sync::Mutex;

use crate::convert::{
    bytes_mut, host_array, numpy_buffer_mut, numpy_zeros, stream_input, to_numpy, type_name, value_error, StreamInput,
};
use crate::errors::IntoPy;
use crate::graph::PyIr;
use crate::tensor::{tensor_of, PyD2H, PyH2D};

/// A session on a device (PopXL's `popxl.Session`): `with session:` attaches and
/// copies the weights to the device; `run` runs the main graph.
///
/// Any Python thread may use it: the session sits behind a mutex that is only
/// waited for with the GIL released and only held by Rust code, so calls from
/// several threads take turns (a thread that runs the session while another
/// reads a variable waits for it) and a waiting thread never holds the GIL that
/// the holder may need.
#[pyclass(name = "Session", module = "popxl")]
pub struct PySession {
    session: Mutex<Session>,
    ir: Py<PyIr>,
    /// Each device-to-host stream, its key object in `run`'s result, dtype and host array shape.
    outputs: Vec<(DeviceToHostStream, Py<PyD2H>, DataType, Vec<usize>)>,
}

/// The stream inputs of `run`: each numpy array read in place where its
/// layout allows ([`stream_input`]).
fn inputs_of<'py>(
    obj: Option<&Bound<'py, PyAny>>,
    downcast: bool,
) -> PyResult<Vec<(HostToDeviceStream, StreamInput<'py>)>> {
    let mut inputs = Vec::new();
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(inputs) };
    let d = obj.downcast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!("inputs must be a dict {{h2d_stream: array}}, not {}", type_name(obj)))
    })?;
    inputs.reserve(d.len());
    for (k, v) in d.iter() {
        let s = k
            .downcast::<PyH2D>()
            .map_err(|_| {
                PyTypeError::new_err(format!("the keys of inputs must be HostToDeviceStreams, not {}", type_name(&k)))
            })?
            .borrow()
            .s
            .clone();
        let input = stream_input(&v, s.dtype(), s.name(), downcast)?;
        inputs.push((s, input));
    }
    Ok(inputs)
}

/// Borrowed views of `inputs` for the session.
fn views<'a>(
    inputs: &'a [(HostToDeviceStream, StreamInput<'_>)],
) -> PyResult<Vec<(&'a HostToDeviceStream, InputView<'a>)>> {
    inputs.iter().map(|(s, i)| Ok((s, i.view()?))).collect()
}

fn outputs_dict<'py>(py: Python<'py>, outs: Outputs) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (s, a) in outs {
        d.set_item(Py::new(py, PyD2H { s })?, to_numpy(py, a)?)?;
    }
    Ok(d)
}

impl PySession {
    /// Run `f` on the session with the GIL released, once no other thread uses it.
    fn with<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut Session) -> R + Send) -> PyResult<R> {
        py.allow_threads(|| match self.session.lock() {
            Ok(mut s) => Ok(f(&mut s)),
            Err(_) => Err(PyRuntimeError::new_err(
                "the session is unusable: an earlier call on it stopped in the middle (a Rust panic)",
            )),
        })
    }
}

#[pymethods]
impl PySession {
    #[new]
    #[pyo3(signature = (ir, device_desc="cpu", weights_to_host_on_exit=true))]
    fn new(ir: &Bound<'_, PyAny>, device_desc: &str, weights_to_host_on_exit: bool) -> PyResult<Self> {
        let pyir = ir
            .downcast::<PyIr>()
            .map_err(|_| PyTypeError::new_err(format!("Session expects a popxl.Ir, not {}", type_name(ir))))?;
        let options = SessionOptions { weights_to_host_on_exit, ..SessionOptions::default() };
        let handle = pyir.borrow().ir.clone();
        // Preparing, lowering and compiling take long: other Python threads run meanwhile.
        let session = ir.py().allow_threads(move || Session::with_options(handle, device_desc, options)).py()?;
        let py = ir.py();
        let outputs = session
            .expected_outputs()
            .into_iter()
            .map(|s| {
                let (dtype, shape) = (s.dtype(), session.host_shape(s.shape()));
                Ok((s.clone(), Py::new(py, PyD2H { s })?, dtype, shape))
            })
            .collect::<PyResult<_>>()?;
        Ok(PySession { session: Mutex::new(session), ir: pyir.clone().unbind(), outputs })
    }
    /// The IR the session runs.
    #[getter]
    fn ir(&self, py: Python<'_>) -> Py<PyIr> {
        self.ir.clone_ref(py)
    }
    /// Whether the session is attached to its device.
    #[getter]
    fn is_attached(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |s| s.is_attached())
    }
    fn __enter__(slf: PyRef<'_, Self>) -> PyResult<PyRef<'_, Self>> {
        slf.with(slf.py(), |s| s.enter_context())?.py()?;
        Ok(slf)
    }
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let success = exc_type.is_none_or(|e| e.is_none());
        self.with(py, |s| s.exit_context(success))?.py()?;
        Ok(false)
    }
    /// Run the main graph once: `{h2d_stream: array}` in, `{d2h_stream: array}` out.
    #[pyo3(signature = (inputs=None, downcast_inputs=true))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Option<&Bound<'py, PyAny>>,
        downcast_inputs: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let held = inputs_of(inputs, downcast_inputs)?;
        let in_views = views(&held)?;
        // The output arrays are made by numpy and written in place.
        let arrays: Vec<Bound<'py, PyAny>> =
            self.outputs.iter().map(|(_, _, dtype, shape)| numpy_zeros(py, *dtype, shape)).collect::<PyResult<_>>()?;
        let mut raw = Vec::with_capacity(arrays.len());
        for ((s, _, _, _), a) in self.outputs.iter().zip(&arrays) {
            let (dtype, shape, p, n) =
                numpy_buffer_mut(a).ok_or_else(|| PyValueError::new_err("numpy made a non-contiguous output array"))?;
            // SAFETY: the arrays were just made here, nothing else holds them, and they
            // outlive `raw`.
            raw.push((s, dtype, shape, unsafe { bytes_mut(p, n) }));
        }
        let mut out_views: Vec<(&DeviceToHostStream, OutputView<'_>)> = raw
            .iter_mut()
            .map(|(s, dtype, shape, bytes)| Ok((&**s, OutputView::new(*dtype, shape, bytes).map_err(value_error)?)))
            .collect::<PyResult<_>>()?;
        // The views borrow numpy buffers that `held` and `arrays` keep alive. Like
        // numpy's own GIL-free loops, a thread that writes into an input array during
        // the run races with the session's reads of it (the values read are unspecified).
        self.with(py, |s| s.run_views_into(&in_views, &mut out_views))?.py()?;
        drop(out_views);
        drop(raw);
        drop(held);
        let d = PyDict::new(py);
        for ((_, key, _, _), a) in self.outputs.iter().zip(arrays) {
            d.set_item(key.clone_ref(py), a)?;
        }
        Ok(d)
    }
    /// Run, writing into the given output arrays (`{d2h_stream: array}`, as
    /// `create_host_outputs` makes them).
    #[pyo3(signature = (inputs, outputs, downcast_inputs=true))]
    fn run_with_outputs(
        &self,
        py: Python<'_>,
        inputs: Option<&Bound<'_, PyAny>>,
        outputs: &Bound<'_, PyAny>,
        downcast_inputs: bool,
    ) -> PyResult<()> {
        let outputs = outputs
            .downcast::<PyDict>()
            .map_err(|_| PyTypeError::new_err("outputs must be a dict {d2h_stream: numpy array}"))?;
        let held = inputs_of(inputs, downcast_inputs)?;
        let in_views = views(&held)?;
        // Each output array is written in place when it is C-contiguous, writeable, of a
        // supported dtype and shares no memory with an input or another output; otherwise
        // through a C-contiguous copy, copied back after the run.
        let np = py.import("numpy")?;
        let mut spans: Vec<(usize, usize)> =
            in_views.iter().map(|(_, v)| (v.bytes().as_ptr() as usize, v.bytes().len())).collect();
        let mut objs: Vec<(DeviceToHostStream, Bound<'_, PyAny>, Option<Bound<'_, PyAny>>)> = Vec::new();
        for (k, v) in outputs.iter() {
            let s = k
                .downcast::<PyD2H>()
                .map_err(|_| PyTypeError::new_err("the keys of outputs must be DeviceToHostStreams"))?
                .borrow()
                .s
                .clone();
            let direct = numpy_buffer_mut(&v).map(|(_, _, p, n)| (p as usize, n));
            let fresh = direct.filter(|&(p, n)| !spans.iter().any(|&(q, m)| n > 0 && m > 0 && p < q + m && q < p + n));
            match fresh {
                Some(span) => {
                    spans.push(span);
                    objs.push((s, v, None));
                }
                None => {
                    let kwargs = PyDict::new(py);
                    kwargs.set_item("order", "C")?;
                    let copy = np.call_method("array", (&v,), Some(&kwargs))?;
                    objs.push((s, copy, Some(v)));
                }
            }
        }
        let mut raw = Vec::with_capacity(objs.len());
        for (s, a, _) in &objs {
            let (dtype, shape, p, n) = numpy_buffer_mut(a).ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "the output array of stream `{}` must be a writeable numpy array of a popxl dtype",
                    s.name()
                ))
            })?;
            // SAFETY: each array's memory is disjoint from the inputs' and the other
            // outputs' (checked above, or a fresh copy), the arrays outlive `raw`, and
            // the GIL-free run is the only user of them until `raw` is dropped.
            raw.push((s, dtype, shape, unsafe { bytes_mut(p, n) }));
        }
        let mut out_views: Vec<(&DeviceToHostStream, OutputView<'_>)> = raw
            .iter_mut()
            .map(|(s, dtype, shape, bytes)| Ok((&**s, OutputView::new(*dtype, shape, bytes).map_err(value_error)?)))
            .collect::<PyResult<_>>()?;
        // The views borrow numpy buffers that `held` and `arrays` keep alive. Like
        // numpy's own GIL-free loops, a thread that writes into an input array during
        // the run races with the session's reads of it (the values read are unspecified).
        self.with(py, |s| s.run_views_into(&in_views, &mut out_views))?.py()?;
        drop(out_views);
        drop(raw);
        drop(held);
        for (_, copy, target) in objs {
            if let Some(target) = target {
                np.call_method1("copyto", (target, copy))?;
            }
        }
        Ok(())
    }
    /// Zeroed output arrays for `run_with_outputs`.
    fn create_host_outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        outputs_dict(py, self.with(py, |s| s.create_host_outputs())?.py()?)
    }
    /// The host-to-device streams `run` expects.
    fn expected_inputs(&self, py: Python<'_>) -> PyResult<Vec<PyH2D>> {
        Ok(self.with(py, |s| s.expected_inputs())?.into_iter().map(|s| PyH2D { s }).collect())
    }
    /// Copy the variables' host values to the device.
    fn weights_from_host(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |s| s.weights_from_host())?.py()
    }
    /// Copy the variables' device values to the host.
    fn weights_to_host(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |s| s.weights_to_host())?.py()
    }
    /// The value of a variable or constant, as a numpy array.
    fn get_tensor_data(&self, py: Python<'_>, tensor: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        let t = tensor_of(tensor, "get_tensor_data's argument")?;
        to_numpy(py, self.with(py, |s| s.get_tensor_data(&t))?.py()?)
    }
    /// The values of several variables or constants: `{tensor: array}`.
    fn get_tensors_data<'py>(&self, py: Python<'py>, tensors: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let objs: Vec<Bound<'py, PyAny>> = tensors.try_iter()?.collect::<PyResult<_>>()?;
        let ts: Vec<Tensor> =
            objs.iter().map(|o| tensor_of(o, "get_tensors_data's argument")).collect::<PyResult<_>>()?;
        let data = self.with(py, |s| s.get_tensors_data(ts.iter()))?.py()?;
        let d = PyDict::new(py);
        for (o, a) in objs.into_iter().zip(data) {
            d.set_item(o, to_numpy(py, a)?)?;
        }
        Ok(d)
    }
    /// Write a variable's value (host, and device if attached).
    fn write_variable_data(&self, tensor: &Bound<'_, PyAny>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let t = tensor_of(tensor, "write_variable_data's tensor")?;
        let a = write_array(&t, data)?;
        self.with(tensor.py(), |s| s.write_variable_data(&t, &a))?.py()
    }
    /// Write several variables: `{tensor: array}`.
    fn write_variables_data(&self, tensors: &Bound<'_, PyAny>) -> PyResult<()> {
        let d = tensors
            .downcast::<PyDict>()
            .map_err(|_| PyTypeError::new_err("write_variables_data expects a dict {variable: array}"))?;
        let mut pairs: Vec<(Tensor, HostArray)> = Vec::new();
        for (k, v) in d.iter() {
            let t = tensor_of(&k, "a key of write_variables_data")?;
            let a = write_array(&t, &v)?;
            pairs.push((t, a));
        }
        self.with(tensors.py(), |s| s.write_variables_data(pairs.iter().map(|(t, a)| (t, a))))?.py()
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |s| {
            format!("Session[ir={} device={} attached={}]", s.ir_id(), s.device().name(), s.is_attached())
        })
    }
}

/// Data for a variable: Python scalars and lists take the variable's dtype;
/// numpy arrays keep theirs (a mismatch is PopXL's `TypeError`).
fn write_array(t: &Tensor, data: &Bound<'_, PyAny>) -> PyResult<HostArray> {
    if data.hasattr("dtype")? && !data.hasattr("__array__").map(|h| !h)? {
        let a = host_array(data, None)?;
        if a.dtype() != t.dtype() && a.shape().is_empty() {
            return a.try_cast(t.dtype()).py();
        }
        Ok(a)
    } else {
        host_array(data, Some(t.dtype()))
    }
}
