//! Streaming memory: `remote_buffer`, `remote_variable`, `ops.remote_load/store`,
//! and `ops.remote_code_load`.

use popxl::{ops, RemoteBuffer};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::{dtype_of, py_dtype, shape_of, type_name};
use crate::errors::IntoPy;
use crate::graph::graph_of;
use crate::tensor::{tensor_of, wrap, PyTensor};

/// An array of `entries` tensors in streaming memory (PopXL's `RemoteBuffer`).
#[pyclass(name = "RemoteBuffer", module = "popxl")]
#[derive(Clone)]
pub struct PyRemoteBuffer {
    pub b: RemoteBuffer,
}

#[pymethods]
impl PyRemoteBuffer {
    /// The buffer's id (1, 2... per IR).
    #[getter]
    fn remote_buffer_id(&self) -> u64 {
        u64::from(self.b.id().0)
    }
    /// The shape of each entry.
    #[getter]
    fn tensor_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.b.tensor_shape())
    }
    /// The dtype of each entry.
    #[getter]
    fn tensor_dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py_dtype(py, self.b.tensor_dtype())
    }
    /// The number of entries.
    #[getter]
    fn get_entries(&self) -> PyResult<usize> {
        self.b.entries().py()
    }
    #[setter]
    fn set_entries(&self, entries: i64) -> PyResult<()> {
        let n = usize::try_from(entries).ok().filter(|&n| n >= 1).ok_or_else(|| {
            PyValueError::new_err(format!("Entries must be a non-zero, positive integer, not {entries}"))
        })?;
        self.b.set_entries(n).py()
    }
    fn __repr__(&self) -> String {
        format!(
            "RemoteBuffer(id={}, shape={:?}, dtype={})",
            self.b.id().0,
            self.b.tensor_shape(),
            self.b.tensor_dtype().name()
        )
    }
}

fn buffer_of(obj: &Bound<'_, PyAny>) -> PyResult<RemoteBuffer> {
    obj.downcast::<PyRemoteBuffer>()
        .map(|b| b.borrow().b.clone())
        .map_err(|_| PyTypeError::new_err(format!("expected a popxl.RemoteBuffer, not {}", type_name(obj))))
}

/// `remote_buffer(tensor_shape, tensor_dtype, entries=1)`.
#[pyfunction]
#[pyo3(signature = (tensor_shape, tensor_dtype, entries=1))]
pub fn remote_buffer(
    tensor_shape: &Bound<'_, PyAny>,
    tensor_dtype: &Bound<'_, PyAny>,
    entries: i64,
) -> PyResult<PyRemoteBuffer> {
    let n = usize::try_from(entries)
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| PyValueError::new_err(format!("Entries must be a non-zero, positive integer, not {entries}")))?;
    Ok(PyRemoteBuffer { b: popxl::remote_buffer(shape_of(tensor_shape)?, dtype_of(tensor_dtype)?, n).py()? })
}

/// `remote_variable(data, remote_buffer, offset=0, dtype=None, name=None, downcast=True,
/// replica_grouping=None, retrieval_mode=None)`.
#[pyfunction]
#[pyo3(signature = (data, remote_buffer, offset=0, dtype=None, name=None, downcast=true, replica_grouping=None, retrieval_mode=None))]
#[allow(clippy::too_many_arguments)]
pub fn remote_variable(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    remote_buffer: &Bound<'_, PyAny>,
    offset: usize,
    dtype: Option<&Bound<'_, PyAny>>,
    name: Option<String>,
    downcast: bool,
    replica_grouping: Option<&Bound<'_, PyAny>>,
    retrieval_mode: Option<String>,
) -> PyResult<Py<PyTensor>> {
    let b = buffer_of(remote_buffer)?;
    let a = crate::graph::data_with_dtype(data, dtype, downcast)?;
    let name = name.as_deref().unwrap_or("t");
    let mode = crate::replication::retrieval_mode_of(retrieval_mode.as_deref())?;
    let t = match crate::replication::grouping_of(replica_grouping)? {
        Some(g) => popxl::remote_variable_grouped(a, &b, offset, name, &g, mode),
        None => popxl::remote_variable(a, &b, offset, name),
    };
    wrap(py, t.py()?)
}

/// `remote_replica_sharded_variable(data, remote_buffer, offset=0, dtype=None, name=None,
/// downcast=True, replica_grouping=None, retrieval_mode=None)`.
#[pyfunction]
#[pyo3(signature = (data, remote_buffer, offset=0, dtype=None, name=None, downcast=true, replica_grouping=None, retrieval_mode=None))]
#[allow(clippy::too_many_arguments)]
pub fn remote_replica_sharded_variable(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    remote_buffer: &Bound<'_, PyAny>,
    offset: usize,
    dtype: Option<&Bound<'_, PyAny>>,
    name: Option<String>,
    downcast: bool,
    replica_grouping: Option<&Bound<'_, PyAny>>,
    retrieval_mode: Option<String>,
) -> PyResult<Py<PyTensor>> {
    let b = buffer_of(remote_buffer)?;
    let a = crate::graph::data_with_dtype(data, dtype, downcast)?;
    let g = crate::replication::grouping_of(replica_grouping)?;
    let mode = crate::replication::retrieval_mode_of(retrieval_mode.as_deref())?;
    let t = popxl::remote_replica_sharded_variable(a, &b, offset, name.as_deref().unwrap_or("t"), g.as_ref(), mode);
    wrap(py, t.py()?)
}

/// `replica_sharded_buffer(tensor_shape, tensor_dtype, replica_grouping=None, shard_over=None, entries=1)`.
#[pyfunction]
#[pyo3(signature = (tensor_shape, tensor_dtype, replica_grouping=None, shard_over=None, entries=1))]
pub fn replica_sharded_buffer(
    tensor_shape: &Bound<'_, PyAny>,
    tensor_dtype: &Bound<'_, PyAny>,
    replica_grouping: Option<&Bound<'_, PyAny>>,
    shard_over: Option<usize>,
    entries: usize,
) -> PyResult<PyRemoteBuffer> {
    let g = crate::replication::grouping_of(replica_grouping)?;
    let b = popxl::replica_sharded_buffer(
        &shape_of(tensor_shape)?,
        dtype_of(tensor_dtype)?,
        g.as_ref(),
        shard_over,
        entries,
    );
    Ok(PyRemoteBuffer { b: b.py()? })
}

/// `replica_sharded_variable(data, dtype=None, name=None, downcast=True, replica_grouping=None,
/// shard_over=None, retrieval_mode=None)` -> (remote variable, its loaded shard).
#[pyfunction]
#[pyo3(signature = (data, dtype=None, name=None, downcast=true, replica_grouping=None, shard_over=None, retrieval_mode=None))]
#[allow(clippy::too_many_arguments)]
pub fn replica_sharded_variable(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    name: Option<String>,
    downcast: bool,
    replica_grouping: Option<&Bound<'_, PyAny>>,
    shard_over: Option<usize>,
    retrieval_mode: Option<String>,
) -> PyResult<(Py<PyTensor>, Py<PyTensor>)> {
    let a = crate::graph::data_with_dtype(data, dtype, downcast)?;
    let g = crate::replication::grouping_of(replica_grouping)?;
    let mode = crate::replication::retrieval_mode_of(retrieval_mode.as_deref())?;
    let (v, shard) =
        popxl::replica_sharded_variable(a, name.as_deref().unwrap_or("t"), g.as_ref(), shard_over, mode).py()?;
    Ok((wrap(py, v)?, wrap(py, shard)?))
}

enum Offset {
    Entry(usize),
    Tensor(popxl::Tensor),
}

impl Offset {
    fn of(obj: &Bound<'_, PyAny>) -> PyResult<Offset> {
        if obj.downcast::<PyTensor>().is_ok() {
            return Ok(Offset::Tensor(tensor_of(obj, "offset")?));
        }
        obj.extract::<usize>()
            .map(Offset::Entry)
            .map_err(|_| PyTypeError::new_err("offset must be a non-negative int or a popxl.Tensor"))
    }
    fn get(&self) -> ops::RemoteOffset<'_> {
        match self {
            Offset::Entry(n) => ops::RemoteOffset::Entry(*n),
            Offset::Tensor(t) => ops::RemoteOffset::Tensor(t),
        }
    }
}

/// `ops.remote_load(remote_buffer, offset, name=None)`.
#[pyfunction]
#[pyo3(signature = (remote_buffer, offset, name=None))]
pub fn remote_load(
    py: Python<'_>,
    remote_buffer: &Bound<'_, PyAny>,
    offset: &Bound<'_, PyAny>,
    name: Option<String>,
) -> PyResult<Py<PyTensor>> {
    let o = Offset::of(offset)?;
    wrap(py, ops::remote_load(&buffer_of(remote_buffer)?, o.get(), name.as_deref().unwrap_or("remote_load")).py()?)
}

/// `ops.remote_load_(remote_buffer, offset, t)`.
#[pyfunction]
pub fn remote_load_(
    py: Python<'_>,
    remote_buffer: &Bound<'_, PyAny>,
    offset: &Bound<'_, PyAny>,
    t: &Bound<'_, PyAny>,
) -> PyResult<Py<PyTensor>> {
    let o = Offset::of(offset)?;
    let t = tensor_of(t, "t")?;
    wrap(py, ops::remote_load_(&buffer_of(remote_buffer)?, o.get(), &t).py()?)
}

/// `ops.remote_store(remote_buffer, offset, t)`.
#[pyfunction]
pub fn remote_store(remote_buffer: &Bound<'_, PyAny>, offset: &Bound<'_, PyAny>, t: &Bound<'_, PyAny>) -> PyResult<()> {
    let o = Offset::of(offset)?;
    let t = tensor_of(t, "t")?;
    ops::remote_store(&buffer_of(remote_buffer)?, o.get(), &t).py()
}

/// `ops.remote_code_load(graph, destination)`: the graph's code must be in tile memory from here.
#[pyfunction]
pub fn remote_code_load(graph: &Bound<'_, PyAny>, destination: &str) -> PyResult<()> {
    ops::remote_code_load(&graph_of(graph, "remote_code_load's graph")?, destination).py()
}

/// `ops.init(shape, dtype, name=None, init_type="zero")`.
#[pyfunction]
#[pyo3(signature = (shape, dtype, name=None, init_type="zero"))]
pub fn init(
    py: Python<'_>,
    shape: &Bound<'_, PyAny>,
    dtype: &Bound<'_, PyAny>,
    name: Option<String>,
    init_type: &str,
) -> PyResult<Py<PyTensor>> {
    let kind = match init_type {
        "zero" => ops::InitType::Zero,
        "undef" => ops::InitType::Undef,
        other => return Err(PyValueError::new_err(format!("init_type must be 'zero' or 'undef', not '{other}'"))),
    };
    let shape = shape_of(shape)?;
    wrap(py, ops::init(&shape, dtype_of(dtype)?, name.as_deref().unwrap_or("init"), kind).py()?)
}

/// Register the functions and classes in `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRemoteBuffer>()?;
    m.add_function(wrap_pyfunction!(remote_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(remote_variable, m)?)?;
    m.add_function(wrap_pyfunction!(remote_replica_sharded_variable, m)?)?;
    m.add_function(wrap_pyfunction!(replica_sharded_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(replica_sharded_variable, m)?)?;
    m.add_function(wrap_pyfunction!(remote_load, m)?)?;
    m.add_function(wrap_pyfunction!(remote_load_, m)?)?;
    m.add_function(wrap_pyfunction!(remote_store, m)?)?;
    m.add_function(wrap_pyfunction!(remote_code_load, m)?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    Ok(())
}
