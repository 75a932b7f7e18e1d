//! `popxl.Ir`, `popxl.Graph`, the context managers and the tensor constructors.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use popxl::{Graph, Ir};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::convert::{dtype_of, host_array, shape_of};
use crate::errors::IntoPy;
use crate::tensor::{tensor_of, wrap, PyD2H, PyH2D, PyTensor};
use crate::with_guards::WithGuards;

/// An IR (PopXL's `popxl.Ir`): its main graph, subgraphs and host streams.
#[pyclass(name = "Ir", module = "popxl")]
#[derive(Clone)]
pub struct PyIr {
    pub ir: Ir,
}

#[pymethods]
impl PyIr {
    #[new]
    #[pyo3(signature = (replication=None))]
    fn new(replication: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let ir = Ir::new();
        let Some(replication) = replication else { return Ok(PyIr { ir }) };
        if replication.extract::<String>().is_ok_and(|s| s == "popdist") {
            // This process's place in an MPI launch and the replicas per
            // process (POPDIST_NUM_LOCAL_REPLICAS) from the environment.
            return Ok(PyIr { ir: Ir::replication_from_env().py()? });
        }
        let rf: usize = replication.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "replication must be a positive int, not {}",
                replication.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?;
        if rf < 1 {
            return Err(PyValueError::new_err("replication must be at least 1"));
        }
        ir.set_replication_factor(rf).py()?;
        Ok(PyIr { ir })
    }
    /// The IR's id.
    #[getter]
    fn id(&self) -> u64 {
        self.ir.id()
    }
    /// The number of replicas this process runs: `replication_factor` divided
    /// by the processes of the launch (`Ir(replication="popdist")`).
    #[getter]
    fn instance_replication_factor(&self) -> usize {
        self.ir.instance_replication_factor()
    }
    /// Output a graphical representation of the IR in Graphviz DOT format, to
    /// `<save_dir>/<check>_all.dot`. `save_dir` (created if needed) stays the
    /// directory of this IR's later checkpoints; the default is the current
    /// directory. If the `POPART_DOT_CHECKS` environment variable is set (names
    /// separated by `:`), only the checkpoints it names (or all with `ALL`) are written.
    #[pyo3(signature = (check, save_dir=None))]
    fn dot_checkpoint(&self, check: &str, save_dir: Option<std::path::PathBuf>) -> PyResult<()> {
        crate::dot::checkpoint(&self.ir, check, save_dir)
    }
    /// The main graph.
    #[getter]
    fn main_graph(&self) -> PyGraph {
        PyGraph::new(self.ir.main_graph())
    }
    /// Batches per `run` per stream.
    #[getter]
    fn get_num_host_transfers(&self) -> usize {
        self.ir.num_host_transfers()
    }
    #[setter]
    fn set_num_host_transfers(&self, n: usize) -> PyResult<()> {
        self.ir.set_num_host_transfers(n).py()
    }
    /// The number of replicas.
    #[getter]
    fn get_replication_factor(&self) -> usize {
        self.ir.replication_factor()
    }
    #[setter]
    fn set_replication_factor(&self, n: usize) -> PyResult<()> {
        if self.ir.is_frozen() {
            return Err(PyRuntimeError::new_err(
                "Cannot set replication_factor: the IR has already been prepared by a Session",
            ));
        }
        self.ir.set_replication_factor(n).py()
    }
    /// An empty subgraph, to fill with `with graph:`.
    #[pyo3(signature = (name=None))]
    fn create_empty_graph(&self, name: Option<String>) -> PyResult<PyGraph> {
        Ok(PyGraph::new(self.ir.create_empty_graph(name.as_deref().unwrap_or("graph")).py()?))
    }
    /// Trace `fn(*args, **kwargs)` (a function or `popxl.Module`) into a new
    /// subgraph: every Tensor / TensorSpec argument becomes a graph input.
    #[pyo3(signature = (fn_, *args, **kwargs))]
    fn create_graph<'py>(
        slf: &Bound<'py, Self>,
        fn_: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        py.import("popxl._tracing")?.getattr("create_graph")?.call1((slf, fn_, args, kwargs))
    }
    /// All host-to-device streams.
    fn get_all_h2d_streams(&self) -> Vec<PyH2D> {
        self.ir.h2d_streams().into_iter().map(|s| PyH2D { s }).collect()
    }
    /// All device-to-host streams.
    fn get_all_d2h_streams(&self) -> Vec<PyD2H> {
        self.ir.d2h_streams().into_iter().map(|s| PyD2H { s }).collect()
    }
    fn __hash__(&self) -> u64 {
        self.ir.id()
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.downcast::<PyIr>().map(|o| o.borrow().ir.id() == self.ir.id()).unwrap_or(false)
    }
    fn __repr__(&self) -> String {
        format!("Ir[id={}]", self.ir.id())
    }
    /// `ir.replica_grouping(stride=1, group_size=None)` (group_size defaults to
    /// replication_factor // stride).
    #[pyo3(signature = (stride=1, group_size=None))]
    fn replica_grouping(
        &self,
        stride: usize,
        group_size: Option<usize>,
    ) -> PyResult<crate::replication::PyReplicaGrouping> {
        Ok(crate::replication::PyReplicaGrouping { g: self.ir.replica_grouping(stride, group_size).py()? })
    }
    /// `ir.replica_grouping_from_assignments(assignment)`.
    fn replica_grouping_from_assignments(
        &self,
        assignment: Vec<usize>,
    ) -> PyResult<crate::replication::PyReplicaGrouping> {
        Ok(crate::replication::PyReplicaGrouping { g: self.ir.replica_grouping_from_assignments(&assignment).py()? })
    }
}

/// A graph of an IR (PopXL's `popxl.Graph`); `with graph:` makes it current.
#[pyclass(name = "Graph", module = "popxl")]
pub struct PyGraph {
    pub g: Graph,
    guards: WithGuards,
}

impl PyGraph {
    /// Wrap a graph handle.
    pub fn new(g: Graph) -> Self {
        PyGraph { g, guards: WithGuards::default() }
    }
}

/// The graph behind a Python object.
pub fn graph_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Graph> {
    match obj.downcast::<PyGraph>() {
        Ok(g) => Ok(g.borrow().g.clone()),
        Err(_) => {
            Err(PyTypeError::new_err(format!("{what} must be a popxl.Graph, not {}", crate::convert::type_name(obj))))
        }
    }
}

fn tensors(py: Python<'_>, ts: Vec<popxl::Tensor>) -> PyResult<Vec<Py<PyTensor>>> {
    ts.into_iter().map(|t| wrap(py, t)).collect()
}

#[pymethods]
impl PyGraph {
    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyResult<PyRefMut<'_, Self>> {
        let guard = slf.g.enter();
        slf.guards.enter(guard)?;
        Ok(slf)
    }
    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.guards.exit("graph")?;
        Ok(false)
    }
    /// The graph's name.
    #[getter]
    fn name(&self) -> String {
        self.g.name().to_string()
    }
    /// The graph's id.
    #[getter]
    fn id(&self) -> String {
        self.g.name().to_string()
    }
    /// The IR.
    #[getter]
    fn ir(&self) -> PyResult<PyIr> {
        Ok(PyIr { ir: self.g.ir().py()? })
    }
    /// The graph's inputs, in order.
    #[getter]
    fn inputs(&self, py: Python<'_>) -> PyResult<Vec<Py<PyTensor>>> {
        tensors(py, self.g.inputs().py()?)
    }
    /// The graph's inputs by name.
    #[getter]
    fn inputs_by_name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.g.inputs_by_name().py()? {
            d.set_item(k, wrap(py, v)?)?;
        }
        Ok(d)
    }
    /// The graph's outputs, in order.
    #[getter]
    fn outputs(&self, py: Python<'_>) -> PyResult<Vec<Py<PyTensor>>> {
        tensors(py, self.g.outputs().py()?)
    }
    /// Every tensor of the graph.
    #[getter]
    fn tensors(&self, py: Python<'_>) -> PyResult<Vec<Py<PyTensor>>> {
        tensors(py, self.g.tensors().py()?)
    }
    /// The variables of the graph.
    #[getter]
    fn variables(&self, py: Python<'_>) -> PyResult<Vec<Py<PyTensor>>> {
        tensors(py, self.g.variables().py()?)
    }
    /// The constants of the graph.
    #[getter]
    fn constants(&self, py: Python<'_>) -> PyResult<Vec<Py<PyTensor>>> {
        tensors(py, self.g.constants().py()?)
    }
    /// The graphs this graph calls.
    #[getter]
    fn called_graphs(&self) -> PyResult<Vec<PyGraph>> {
        Ok(self.g.called_graphs().py()?.into_iter().map(PyGraph::new).collect())
    }
    /// The tensor named `tensor_id`.
    fn get_tensor(&self, py: Python<'_>, tensor_id: &str) -> PyResult<Py<PyTensor>> {
        wrap(py, self.g.get_tensor(tensor_id).py()?)
    }
    /// Register a function to be called after an op is created in the graph;
    /// it gets the op (`popxl.Op`). Returns a handle for `remove_op_created_hook`.
    fn register_op_created_hook(&self, fn_: PyObject) -> u64 {
        crate::hooks::register(&self.g, fn_)
    }
    /// Remove an op created hook (`handle` from `register_op_created_hook`);
    /// KeyError for an unknown handle.
    fn remove_op_created_hook(&self, handle: u64) -> PyResult<()> {
        self.g.remove_op_created_hook(handle).map_err(|_| pyo3::exceptions::PyKeyError::new_err(handle))
    }
    fn __contains__(&self, t: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.g.contains(&tensor_of(t, "`in` operand")?))
    }
    fn __hash__(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.g.hash(&mut h);
        h.finish()
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.downcast::<PyGraph>().map(|o| o.borrow().g == self.g).unwrap_or(false)
    }
    fn __repr__(&self) -> String {
        format!("Graph[{}]", self.g.name())
    }
}

/// The default name PopXL gives an unnamed tensor.
fn name_or<'a>(name: &'a Option<String>, default: &'a str) -> &'a str {
    name.as_deref().unwrap_or(default)
}

/// The data of a variable or constant: `dtype` if given, else numpy's, with
/// 64-bit types cast to 32 bits as numpy casts (`downcast`, PopXL's default).
pub fn data_with_dtype(
    data: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    downcast: bool,
) -> PyResult<popxl::HostArray> {
    data_with_dtype_fp8(data, dtype, downcast, None, None)
}

/// [`data_with_dtype`] with PopXL's float8 keywords: float data for a float8 tensor is
/// multiplied by `2^log2_scale` (default 0) and rounded, overflow giving NaN if
/// `nan_on_overflow` (default true) or saturating; ignored for other types, as in PopXL.
fn data_with_dtype_fp8(
    data: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    downcast: bool,
    log2_scale: Option<i32>,
    nan_on_overflow: Option<bool>,
) -> PyResult<popxl::HostArray> {
    use popart_ir::DataType as D;
    let mut dtype = dtype.filter(|d| !d.is_none()).map(dtype_of).transpose()?;
    if let Some(d) = dtype.filter(|d| d.is_float8()) {
        let scale = log2_scale.unwrap_or(0);
        if !popart_ir::float8::LOG2_SCALE_RANGE.contains(&scale) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "log2_scale {scale} is out of range: it must be in [{}, {})",
                popart_ir::float8::LOG2_SCALE_RANGE.start,
                popart_ir::float8::LOG2_SCALE_RANGE.end
            )));
        }
        return crate::fp8::host_array_fp8_scaled(data, d, scale, nan_on_overflow.unwrap_or(true));
    }
    if dtype.is_none() && downcast {
        let np_dtype = data.py().import("numpy")?.call_method1("asarray", (data,))?.getattr("dtype")?;
        dtype = match dtype_of(&np_dtype) {
            Ok(D::Float64) => Some(D::Float32),
            Ok(D::Int64) => Some(D::Int32),
            Ok(D::Uint64) => Some(D::Uint32),
            _ => None,
        };
    }
    host_array(data, dtype)
}

/// `variable(data, dtype=None, name=None, downcast=True, replica_grouping=None,
/// retrieval_mode=None, log2_scale=None, nan_on_overflow=None)`: a variable of the main
/// graph (grouped data has a leading `num_groups` dimension; the last two apply to
/// float data for a float8 variable).
#[pyfunction]
#[pyo3(signature = (data, dtype=None, name=None, downcast=true, replica_grouping=None, retrieval_mode=None, log2_scale=None, nan_on_overflow=None))]
#[allow(clippy::too_many_arguments)]
pub fn variable(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    name: Option<String>,
    downcast: bool,
    replica_grouping: Option<&Bound<'_, PyAny>>,
    retrieval_mode: Option<String>,
    log2_scale: Option<i32>,
    nan_on_overflow: Option<bool>,
) -> PyResult<Py<PyTensor>> {
    let a = data_with_dtype_fp8(data, dtype, downcast, log2_scale, nan_on_overflow)?;
    let d = a.dtype();
    let grouping = crate::replication::grouping_of(replica_grouping)?;
    let mode = crate::replication::retrieval_mode_of(retrieval_mode.as_deref())?;
    let t = match grouping {
        Some(g) => popxl::variable_grouped(a, name_or(&name, "t"), &g, mode),
        None => popxl::variable_as(a, d, name_or(&name, "t")),
    };
    wrap(py, t.py()?)
}

/// `constant(data, dtype=None, name=None, downcast=True, log2_scale=None,
/// nan_on_overflow=None)` (the last two apply to float data for a float8 constant).
#[pyfunction]
#[pyo3(signature = (data, dtype=None, name=None, downcast=true, log2_scale=None, nan_on_overflow=None))]
pub fn constant(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    name: Option<String>,
    downcast: bool,
    log2_scale: Option<i32>,
    nan_on_overflow: Option<bool>,
) -> PyResult<Py<PyTensor>> {
    let a = data_with_dtype_fp8(data, dtype, downcast, log2_scale, nan_on_overflow)?;
    let d = a.dtype();
    wrap(py, popxl::constant_as(a, d, name_or(&name, "t")).py()?)
}

/// `graph_input(shape, dtype, name=None, by_ref=False)`: an input of the current subgraph.
#[pyfunction]
#[pyo3(signature = (shape, dtype, name=None, by_ref=false))]
pub fn graph_input(
    py: Python<'_>,
    shape: &Bound<'_, PyAny>,
    dtype: &Bound<'_, PyAny>,
    name: Option<String>,
    by_ref: bool,
) -> PyResult<Py<PyTensor>> {
    let shape = shape_of(shape)?;
    let d = dtype_of(dtype)?;
    let n = name_or(&name, "t");
    let t = if by_ref { popxl::graph_input_by_ref(shape, d, n) } else { popxl::graph_input(shape, d, n) };
    wrap(py, t.py()?)
}

/// `graph_output(t)`: mark `t` an output of the current subgraph.
#[pyfunction]
pub fn graph_output(t: &Bound<'_, PyAny>) -> PyResult<()> {
    popxl::graph_output(&tensor_of(t, "graph_output's argument")?).py()
}

/// The current graph (`gcg`).
#[pyfunction]
pub fn gcg() -> PyResult<PyGraph> {
    Ok(PyGraph::new(popxl::current_graph().py()?))
}

/// The current IR's main graph (`gmg`).
#[pyfunction]
pub fn gmg() -> PyResult<PyGraph> {
    Ok(PyGraph::new(popxl::current_main_graph().py()?))
}

/// The current IR (`gir`).
#[pyfunction]
pub fn gir() -> PyResult<PyIr> {
    Ok(PyIr { ir: popxl::current_ir().py()? })
}

/// `with popxl.in_sequence(enabled=True):` ops run in creation order.
#[pyclass(name = "in_sequence", module = "popxl")]
pub struct InSequence {
    mode: popxl::SequenceMode,
    guards: WithGuards,
}

#[pymethods]
impl InSequence {
    #[new]
    #[pyo3(signature = (enabled=None))]
    fn new(enabled: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let mode = match enabled {
            None => popxl::SequenceMode::On,
            Some(e) if e.is_none() => popxl::SequenceMode::On,
            Some(e) => {
                if let Ok(s) = e.extract::<String>() {
                    if s == "pass" {
                        popxl::SequenceMode::Pass
                    } else {
                        return Err(PyValueError::new_err(format!(
                            "in_sequence: expected True, False or 'pass', not '{s}'"
                        )));
                    }
                } else {
                    popxl::SequenceMode::from(e.is_truthy()?)
                }
            }
        };
        Ok(InSequence { mode, guards: WithGuards::default() })
    }
    fn __enter__(&mut self) -> PyResult<()> {
        self.guards.enter(popxl::in_sequence(self.mode))
    }
    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.guards.exit("popxl.in_sequence()")?;
        Ok(false)
    }
}

/// `with popxl.name_scope(name):` prefixes tensor names with `name/`.
#[pyclass(name = "name_scope", module = "popxl")]
pub struct NameScope {
    name: String,
    guards: WithGuards,
}

#[pymethods]
impl NameScope {
    #[new]
    fn new(name: String) -> Self {
        NameScope { name, guards: WithGuards::default() }
    }
    fn __enter__(&mut self) -> PyResult<()> {
        self.guards.enter(popxl::name_scope(&self.name))
    }
    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.guards.exit("popxl.name_scope(...)")?;
        Ok(false)
    }
}

/// `with popxl.ipu(n):` places ops on IPU `n`.
#[pyclass(name = "ipu", module = "popxl")]
pub struct IpuScope {
    n: u32,
    guards: WithGuards,
}

#[pymethods]
impl IpuScope {
    #[new]
    fn new(ipu: i64) -> PyResult<Self> {
        let n = u32::try_from(ipu)
            .map_err(|_| PyValueError::new_err(format!("ipu must be a non-negative int, not {ipu}")))?;
        Ok(IpuScope { n, guards: WithGuards::default() })
    }
    fn __enter__(&mut self) -> PyResult<()> {
        self.guards.enter(popxl::ipu(self.n))
    }
    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.guards.exit("popxl.ipu(...)")?;
        Ok(false)
    }
}

/// `with popxl.io_tiles():` places ops on the IO tiles.
#[pyclass(name = "io_tiles", module = "popxl")]
pub struct IoTilesScope {
    guards: WithGuards,
}

#[pymethods]
impl IoTilesScope {
    #[new]
    fn new() -> Self {
        IoTilesScope { guards: WithGuards::default() }
    }
    fn __enter__(&mut self) -> PyResult<()> {
        self.guards.enter(popxl::io_tiles())
    }
    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.guards.exit("popxl.io_tiles()")?;
        Ok(false)
    }
}
