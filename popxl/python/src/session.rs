//! `popxl.Session`: prepare, lower and run an IR; numpy arrays in and out.

use popxl::{HostArray, Tensor};
use popxl_session::{Inputs, Outputs, Session, SessionOptions};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert::{host_array, to_numpy, type_name};
use crate::errors::IntoPy;
use crate::graph::PyIr;
use crate::tensor::{tensor_of, PyD2H, PyH2D};

/// Moves a value into `Python::allow_threads`.
///
/// SAFETY: `allow_threads` runs its closure on the calling thread; it only asks
/// for `Send` so that no GIL-bound reference escapes. The wrapped `popxl`
/// handles hold `Rc`s: they are only read inside the call, on this thread, and
/// every Python object holding one is `unsendable`, so no other thread can touch
/// (clone or drop) them while this thread runs without the GIL.
struct OnThisThread<T>(T);
unsafe impl<T> Send for OnThisThread<T> {}

/// A session on a device (PopXL's `popxl.Session`): `with session:` attaches and
/// copies the weights to the device; `run` runs the main graph.
#[pyclass(name = "Session", module = "popxl", unsendable)]
pub struct PySession {
    session: Session,
    ir: Py<PyIr>,
}

fn inputs_of(obj: Option<&Bound<'_, PyAny>>, downcast: bool) -> PyResult<Inputs> {
    let mut inputs = Inputs::new();
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(inputs) };
    let d = obj.downcast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!("inputs must be a dict {{h2d_stream: array}}, not {}", type_name(obj)))
    })?;
    for (k, v) in d.iter() {
        let s = k
            .downcast::<PyH2D>()
            .map_err(|_| {
                PyTypeError::new_err(format!("the keys of inputs must be HostToDeviceStreams, not {}", type_name(&k)))
            })?
            .borrow()
            .s
            .clone();
        // Python scalars and lists take the stream's dtype; arrays keep theirs (checked by the session).
        let is_array = v.hasattr("dtype")?;
        let a = if is_array { host_array(&v, None)? } else { host_array(&v, Some(s.dtype()))? };
        let a = if downcast && a.dtype() != s.dtype() && is_array && is_64bit(&a) {
            a.try_cast(s.dtype()).py()?
        } else {
            a
        };
        inputs.insert(s, a);
    }
    Ok(inputs)
}

fn is_64bit(a: &HostArray) -> bool {
    matches!(a, HostArray::F64(_) | HostArray::I64(_) | HostArray::U64(_))
}

fn outputs_dict<'py>(py: Python<'py>, outs: Outputs) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (s, a) in outs {
        d.set_item(Py::new(py, PyD2H { s })?, to_numpy(py, a)?)?;
    }
    Ok(d)
}

#[pymethods]
impl PySession {
    #[new]
    #[pyo3(signature = (ir, device_desc="cpu", weights_to_host_on_exit=true))]
    fn new(ir: &Bound<'_, PyAny>, device_desc: &str, weights_to_host_on_exit: bool) -> PyResult<Self> {
        let pyir = ir
            .downcast::<PyIr>()
            .map_err(|_| PyTypeError::new_err(format!("Session expects a popxl.Ir, not {}", type_name(ir))))?;
        let handle = pyir.borrow().ir.clone();
        let options = SessionOptions { weights_to_host_on_exit, ..SessionOptions::default() };
        let session = Session::with_options(handle, device_desc, options).py()?;
        Ok(PySession { session, ir: pyir.clone().unbind() })
    }
    /// The IR the session runs.
    #[getter]
    fn ir(&self, py: Python<'_>) -> Py<PyIr> {
        self.ir.clone_ref(py)
    }
    /// Whether the session is attached to its device.
    #[getter]
    fn is_attached(&self) -> bool {
        self.session.is_attached()
    }
    fn __enter__(slf: PyRefMut<'_, Self>) -> PyResult<PyRefMut<'_, Self>> {
        let mut slf = slf;
        slf.session.enter_context().py()?;
        Ok(slf)
    }
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &mut self,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let success = exc_type.is_none_or(|e| e.is_none());
        self.session.exit_context(success).py()?;
        Ok(false)
    }
    /// Run the main graph once: `{h2d_stream: array}` in, `{d2h_stream: array}` out.
    #[pyo3(signature = (inputs=None, downcast_inputs=true))]
    fn run<'py>(
        &mut self,
        py: Python<'py>,
        inputs: Option<&Bound<'py, PyAny>>,
        downcast_inputs: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let inputs = OnThisThread(inputs_of(inputs, downcast_inputs)?);
        let session = OnThisThread(&mut self.session);
        let outs = py.allow_threads(move || {
            let (s, i) = (session, inputs);
            s.0.run(&i.0).map(OnThisThread)
        });
        outputs_dict(py, outs.py()?.0)
    }
    /// Run, writing into the given output arrays (`{d2h_stream: array}`, as
    /// `create_host_outputs` makes them).
    #[pyo3(signature = (inputs, outputs, downcast_inputs=true))]
    fn run_with_outputs(
        &mut self,
        py: Python<'_>,
        inputs: Option<&Bound<'_, PyAny>>,
        outputs: &Bound<'_, PyAny>,
        downcast_inputs: bool,
    ) -> PyResult<()> {
        let outputs = outputs
            .downcast::<PyDict>()
            .map_err(|_| PyTypeError::new_err("outputs must be a dict {d2h_stream: numpy array}"))?;
        let mut outs = Outputs::new();
        let mut targets = Vec::new();
        for (k, v) in outputs.iter() {
            let s = k
                .downcast::<PyD2H>()
                .map_err(|_| PyTypeError::new_err("the keys of outputs must be DeviceToHostStreams"))?
                .borrow()
                .s
                .clone();
            outs.insert(s.clone(), host_array(&v, None)?);
            targets.push((s, v));
        }
        let inputs = OnThisThread(inputs_of(inputs, downcast_inputs)?);
        let session = OnThisThread(&mut self.session);
        let mut outs = OnThisThread(outs);
        let r = py.allow_threads(|| {
            let (s, i) = (session, inputs);
            let o = &mut outs;
            s.0.run_with_outputs(&i.0, &mut o.0)
        });
        r.py()?;
        let np = py.import("numpy")?;
        for (s, target) in targets {
            if let Some(a) = outs.0.remove(&s) {
                np.call_method1("copyto", (target, to_numpy(py, a)?))?;
            }
        }
        Ok(())
    }
    /// Zeroed output arrays for `run_with_outputs`.
    fn create_host_outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        outputs_dict(py, self.session.create_host_outputs().py()?)
    }
    /// The host-to-device streams `run` expects.
    fn expected_inputs(&self) -> Vec<PyH2D> {
        self.session.expected_inputs().into_iter().map(|s| PyH2D { s }).collect()
    }
    /// Copy the variables' host values to the device.
    fn weights_from_host(&mut self) -> PyResult<()> {
        self.session.weights_from_host().py()
    }
    /// Copy the variables' device values to the host.
    fn weights_to_host(&mut self) -> PyResult<()> {
        self.session.weights_to_host().py()
    }
    /// The value of a variable or constant, as a numpy array.
    fn get_tensor_data(&mut self, py: Python<'_>, tensor: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        let t = tensor_of(tensor, "get_tensor_data's argument")?;
        to_numpy(py, self.session.get_tensor_data(&t).py()?)
    }
    /// The values of several variables or constants: `{tensor: array}`.
    fn get_tensors_data<'py>(&mut self, py: Python<'py>, tensors: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let objs: Vec<Bound<'py, PyAny>> = tensors.try_iter()?.collect::<PyResult<_>>()?;
        let ts: Vec<Tensor> =
            objs.iter().map(|o| tensor_of(o, "get_tensors_data's argument")).collect::<PyResult<_>>()?;
        let data = self.session.get_tensors_data(ts.iter()).py()?;
        let d = PyDict::new(py);
        for (o, a) in objs.into_iter().zip(data) {
            d.set_item(o, to_numpy(py, a)?)?;
        }
        Ok(d)
    }
    /// Write a variable's value (host, and device if attached).
    fn write_variable_data(&mut self, tensor: &Bound<'_, PyAny>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let t = tensor_of(tensor, "write_variable_data's tensor")?;
        let a = write_array(&t, data)?;
        self.session.write_variable_data(&t, &a).py()
    }
    /// Write several variables: `{tensor: array}`.
    fn write_variables_data(&mut self, tensors: &Bound<'_, PyAny>) -> PyResult<()> {
        let d = tensors
            .downcast::<PyDict>()
            .map_err(|_| PyTypeError::new_err("write_variables_data expects a dict {variable: array}"))?;
        let mut pairs: Vec<(Tensor, HostArray)> = Vec::new();
        for (k, v) in d.iter() {
            let t = tensor_of(&k, "a key of write_variables_data")?;
            let a = write_array(&t, &v)?;
            pairs.push((t, a));
        }
        self.session.write_variables_data(pairs.iter().map(|(t, a)| (t, a))).py()
    }
    fn __repr__(&self) -> String {
        format!(
            "Session[ir={} device={} attached={}]",
            self.session.ir_id(),
            self.session.device().name(),
            self.session.is_attached()
        )
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
