//! `popxl.transforms`: `autodiff` and its `GradGraphInfo`.

use std::collections::HashMap;

use popxl::transforms::{ExpectedConnection, GradGraphInfo};
use popxl::Tensor;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::IntoPy;
use crate::graph::{graph_of, PyGraph};
use crate::ops::PyCallSiteInfo;
use crate::tensor::{tensor_of, wrap, PyTensor};

/// A tensor the gradient graph connects to: the forward tensor itself
/// (`ExpectedConnectionType.Fwd`) or its gradient (`FwdGrad`).
#[pyclass(name = "ExpectedConnection", module = "popxl.transforms")]
pub struct PyExpectedConnection {
    c: ExpectedConnection,
}

#[pymethods]
impl PyExpectedConnection {
    /// The forward graph's tensor.
    #[getter]
    fn fwd_tensor(&self, py: Python<'_>) -> PyResult<Py<PyTensor>> {
        wrap(py, self.c.fwd_tensor().clone())
    }
    /// `"Fwd"` or `"FwdGrad"`.
    #[getter]
    fn connection_type(&self) -> &'static str {
        match self.c.connection_type() {
            popxl::transforms::ExpectedConnectionType::Fwd => "Fwd",
            popxl::transforms::ExpectedConnectionType::FwdGrad => "FwdGrad",
        }
    }
    fn __repr__(&self) -> String {
        format!("ExpectedConnection({}, {})", self.c.fwd_tensor().id(), self.connection_type())
    }
}

/// The result of `autodiff` (PopXL's `GradGraphInfo`).
#[pyclass(name = "GradGraphInfo", module = "popxl.transforms")]
#[derive(Clone)]
pub struct PyGradGraphInfo {
    pub info: GradGraphInfo,
}

fn tensor_map<'py>(py: Python<'py>, m: impl IntoIterator<Item = (Tensor, Tensor)>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in m {
        d.set_item(wrap(py, k)?, wrap(py, v)?)?;
    }
    Ok(d)
}

fn site(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<popxl::ops::CallSiteInfo> {
    obj.downcast::<PyCallSiteInfo>()
        .map(|c| c.borrow().info.clone())
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a CallSiteInfo (ops.call_with_info)")))
}

#[pymethods]
impl PyGradGraphInfo {
    /// The gradient graph.
    #[getter]
    fn graph(&self) -> PyGraph {
        PyGraph::new(self.info.graph())
    }
    /// The forward graph.
    #[getter]
    fn forward_graph(&self) -> PyGraph {
        PyGraph::new(self.info.forward_graph())
    }
    /// What each gradient graph input is, in order.
    #[getter]
    fn expected_inputs(&self) -> PyResult<Vec<PyExpectedConnection>> {
        Ok(self.info.expected_inputs().py()?.into_iter().map(|c| PyExpectedConnection { c }).collect())
    }
    /// What each gradient graph output is (the gradient of a forward input), in order.
    #[getter]
    fn expected_outputs(&self) -> PyResult<Vec<PyExpectedConnection>> {
        Ok(self.info.expected_outputs().py()?.into_iter().map(|c| PyExpectedConnection { c }).collect())
    }
    /// `{gradient graph input: forward parent tensor}` for the activations of a forward call.
    fn inputs_dict<'py>(&self, py: Python<'py>, fwd_call_info: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        tensor_map(py, self.info.inputs_dict(&site(fwd_call_info, "fwd_call_info")?).py()?)
    }
    /// `{forward graph input: gradient parent output}`.
    fn fwd_graph_ins_to_grad_parent_outs<'py>(
        &self,
        py: Python<'py>,
        grad_call_info: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        tensor_map(py, self.info.fwd_graph_ins_to_grad_parent_outs(&site(grad_call_info, "grad_call_info")?).py()?)
    }
    /// `{forward parent input: gradient parent output}`.
    fn fwd_parent_ins_to_grad_parent_outs<'py>(
        &self,
        py: Python<'py>,
        fwd_call_info: &Bound<'py, PyAny>,
        grad_call_info: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let m = self
            .info
            .fwd_parent_ins_to_grad_parent_outs(
                &site(fwd_call_info, "fwd_call_info")?,
                &site(grad_call_info, "grad_call_info")?,
            )
            .py()?;
        tensor_map(py, m)
    }
    fn __repr__(&self) -> String {
        format!("GradGraphInfo[graph={} forward_graph={}]", self.info.graph().name(), self.info.forward_graph().name())
    }
}

fn opt_tensors(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Vec<Tensor>>> {
    match obj {
        Some(o) if !o.is_none() => o.try_iter()?.map(|t| tensor_of(&t?, what)).collect::<PyResult<Vec<_>>>().map(Some),
        _ => Ok(None),
    }
}

/// `transforms.autodiff(graph, grads_provided=None, grads_required=None,
/// called_graphs_grad_info=None, return_all_grad_graphs=False)`.
#[pyfunction]
#[pyo3(signature = (graph, grads_provided=None, grads_required=None, called_graphs_grad_info=None, return_all_grad_graphs=false))]
pub fn autodiff(
    py: Python<'_>,
    graph: &Bound<'_, PyAny>,
    grads_provided: Option<&Bound<'_, PyAny>>,
    grads_required: Option<&Bound<'_, PyAny>>,
    called_graphs_grad_info: Option<&Bound<'_, PyAny>>,
    return_all_grad_graphs: bool,
) -> PyResult<PyObject> {
    let g = graph_of(graph, "autodiff's graph")?;
    let provided = opt_tensors(grads_provided, "grads_provided")?;
    let required = opt_tensors(grads_required, "grads_required")?;
    let mut called = HashMap::new();
    if let Some(d) = called_graphs_grad_info.filter(|d| !d.is_none()) {
        let d = d
            .downcast::<PyDict>()
            .map_err(|_| PyTypeError::new_err("called_graphs_grad_info must be a dict {Graph: GradGraphInfo}"))?;
        for (k, v) in d.iter() {
            let info = v
                .downcast::<PyGradGraphInfo>()
                .map_err(|_| PyTypeError::new_err("called_graphs_grad_info values must be GradGraphInfo"))?
                .borrow()
                .info
                .clone();
            called.insert(graph_of(&k, "a called_graphs_grad_info key")?, info);
        }
    }
    let out =
        popxl::transforms::autodiff(&g, provided.as_deref(), required.as_deref(), &called, return_all_grad_graphs)
            .py()?;
    if return_all_grad_graphs {
        let d = PyDict::new(py);
        for (k, v) in out.all {
            d.set_item(Py::new(py, PyGraph::new(k))?, Py::new(py, PyGradGraphInfo { info: v })?)?;
        }
        Ok(d.into_any().unbind())
    } else {
        Ok(Py::new(py, PyGradGraphInfo { info: out.grad_info })?.into_any())
    }
}

/// `transforms.merge_exchange()`: merge the current graph's host and remote transfers.
#[pyfunction]
pub fn merge_exchange() -> PyResult<usize> {
    popxl::transforms::merge_exchange().py()
}

/// `transforms.decompose_sum(graph)` -> graph: transform the graph by decomposing Sum
/// operations with >2 inputs into a liveness optimal tree of additions.
#[pyfunction]
pub fn decompose_sum(graph: &Bound<'_, PyAny>) -> PyResult<crate::graph::PyGraph> {
    let g = crate::graph::graph_of(graph, "decompose_sum's graph")?;
    popxl::transforms::decompose_sum(&g).py()?;
    Ok(crate::graph::PyGraph::new(g))
}
