//! `Graph.register_op_created_hook`: Python functions called after each op
//! created in a graph, with the op (an `Op`: id, name, type, graph).

use std::cell::RefCell;

use popart_ir::OpId;
use popxl::{Graph, PopXlError};
use pyo3::prelude::*;

use crate::errors::IntoPy;
use crate::graph::PyGraph;

thread_local! {
    /// The exception a hook raised, handed to the op function that ran it
    /// ([`crate::errors::build_err`] takes it).
    static HOOK_ERROR: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// The message of the error standing for a hook's exception.
pub const HOOK_RAISED: &str = "an op created hook raised an exception";

/// The exception a hook raised, if the error being converted comes from one.
pub fn take_hook_error() -> Option<PyErr> {
    HOOK_ERROR.with(|e| e.borrow_mut().take())
}

/// An op, as an op-created hook sees it (PopXL passes its internal op object).
#[pyclass(name = "Op", module = "popxl")]
pub struct PyOp {
    graph: Graph,
    op: OpId,
}

impl PyOp {
    fn read<R>(&self, f: impl FnOnce(&popart_ir::Op) -> R) -> PyResult<R> {
        let ir = self.graph.ir().py()?;
        ir.with_ir(|core| core.graph(self.graph.id()).and_then(|g| g.op(self.op)).map(f))
            .map_err(|e| crate::errors::build_err(PopXlError::from(e)))
    }
}

#[pymethods]
impl PyOp {
    /// The op's id, unique within its graph.
    #[getter]
    fn id(&self) -> u64 {
        slotmap::Key::data(&self.op).as_ffi()
    }
    /// The op's name.
    #[getter]
    fn name(&self) -> PyResult<String> {
        self.read(|o| o.name.clone())
    }
    /// The op's type (`"MatMul"`, `"HostLoad"`, ...).
    #[getter]
    fn op_type(&self) -> PyResult<&'static str> {
        self.read(|o| o.op_type())
    }
    /// PopART's spelling of `op_type`.
    #[allow(non_snake_case)]
    fn opType(&self) -> PyResult<&'static str> {
        self.op_type()
    }
    /// The graph of the op.
    #[getter]
    fn graph(&self) -> PyGraph {
        PyGraph::new(self.graph.clone())
    }
    /// Whether the op is still in its graph (a transform may have removed it).
    fn is_alive(&self) -> bool {
        self.read(|_| ()).is_ok()
    }
    fn __repr__(&self) -> String {
        let name = self.name().unwrap_or_default();
        let ty = self.op_type().unwrap_or("?");
        format!("Op({name}: {ty} in {})", self.graph.name())
    }
}

/// Register `hook` (a Python callable taking an `Op`) on `graph`; returns the handle.
pub fn register(graph: &Graph, hook: PyObject) -> u64 {
    graph.register_op_created_hook(move |g, op| {
        Python::with_gil(|py| {
            let arg = Py::new(py, PyOp { graph: g.clone(), op })?;
            hook.call1(py, (arg,)).map(drop)
        })
        .map_err(|e| {
            HOOK_ERROR.with(|slot| *slot.borrow_mut() = Some(e));
            PopXlError::OpCreatedHook { message: HOOK_RAISED.into() }
        })
    })
}

/// Register the class in `m`.
pub fn register_classes(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyOp>()
}
