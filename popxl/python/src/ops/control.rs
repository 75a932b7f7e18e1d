//! `popxl.ops` control flow with call-site information: `conditional_with_info` and its `ConditionalSiteInfo`.

use popxl::ops::{self, Branch, ConditionalSiteInfo};
use popxl::Tensor;
use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::{t_of, Out};
use crate::errors::IntoPy;
use crate::graph::{graph_of, PyGraph};
use crate::tensor::{tensor_of, wrap, PyTensor};

/// A branch's inputs: tensors or lists of tensors (flattened), None for none.
fn branch_inputs(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Vec<Tensor>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(Vec::new()) };
    if obj.downcast::<PyTensor>().is_ok() {
        return Err(PyTypeError::new_err(format!("{what} must be a list of popxl.Tensor, not a single Tensor")));
    }
    let mut out = Vec::new();
    for item in obj.try_iter().map_err(|_| PyTypeError::new_err(format!("{what} must be a list of popxl.Tensor")))? {
        let item = item?;
        if item.downcast::<PyList>().is_ok() || item.downcast::<PyTuple>().is_ok() {
            for t in item.try_iter()? {
                out.push(tensor_of(&t?, what)?);
            }
        } else {
            out.push(tensor_of(&item, what)?);
        }
    }
    Ok(out)
}

/// A branch's `inputs_dict` {branch graph input: parent tensor}.
fn branch_dict(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Vec<(Tensor, Tensor)>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(Vec::new()) };
    let d = obj
        .downcast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a dict {{subgraph tensor: parent tensor}}")))?;
    d.iter().map(|(k, v)| Ok((tensor_of(&k, what)?, tensor_of(&v, what)?))).collect()
}

/// `ops.conditional_with_info(cond, then_branch, else_branch, then_inputs=None, else_inputs=None,
/// then_inputs_dict=None, else_inputs_dict=None, check_inputs=True)` -> `ConditionalSiteInfo`:
/// run `then_branch` if `cond` else `else_branch` (graphs with the same outputs).
/// The branch inputs are checked whatever `check_inputs` says.
#[pyfunction]
#[pyo3(signature = (cond, then_branch, else_branch, then_inputs=None, else_inputs=None, then_inputs_dict=None, else_inputs_dict=None, check_inputs=true))]
#[allow(clippy::too_many_arguments)]
fn conditional_with_info(
    cond: &Bound<'_, PyAny>,
    then_branch: &Bound<'_, PyAny>,
    else_branch: &Bound<'_, PyAny>,
    then_inputs: Option<&Bound<'_, PyAny>>,
    else_inputs: Option<&Bound<'_, PyAny>>,
    then_inputs_dict: Option<&Bound<'_, PyAny>>,
    else_inputs_dict: Option<&Bound<'_, PyAny>>,
    check_inputs: bool,
) -> PyResult<PyConditionalSiteInfo> {
    let _ = check_inputs;
    let cond = t_of(cond)?;
    let then_g = graph_of(then_branch, "then_branch")?;
    let else_g = graph_of(else_branch, "else_branch")?;
    let then_ins = branch_inputs(then_inputs, "then_inputs")?;
    let else_ins = branch_inputs(else_inputs, "else_inputs")?;
    let then_dict = branch_dict(then_inputs_dict, "then_inputs_dict")?;
    let else_dict = branch_dict(else_inputs_dict, "else_inputs_dict")?;
    let then_refs: Vec<&Tensor> = then_ins.iter().collect();
    let else_refs: Vec<&Tensor> = else_ins.iter().collect();
    let then_pairs: Vec<(&Tensor, &Tensor)> = then_dict.iter().map(|(a, b)| (a, b)).collect();
    let else_pairs: Vec<(&Tensor, &Tensor)> = else_dict.iter().map(|(a, b)| (a, b)).collect();
    let info = ops::conditional_with_info(
        &cond,
        Branch::new(&then_g, &then_refs).with_inputs_dict(&then_pairs),
        Branch::new(&else_g, &else_refs).with_inputs_dict(&else_pairs),
    )
    .py()?;
    Ok(PyConditionalSiteInfo { info })
}

/// The call site of a `conditional_with_info` (PopXL's `ConditionalSiteInfo`).
#[pyclass(name = "ConditionalSiteInfo", module = "popxl.ops")]
#[derive(Clone)]
pub struct PyConditionalSiteInfo {
    pub info: ConditionalSiteInfo,
}

fn index_error(what: &str, idx: usize) -> PyErr {
    PyIndexError::new_err(format!("Invalid {what} index {idx}"))
}

impl PyConditionalSiteInfo {
    fn branch(&self, then_branch: bool) -> popxl::Graph {
        let (t, e) = self.info.called_graphs();
        if then_branch {
            t
        } else {
            e
        }
    }
}

#[pymethods]
impl PyConditionalSiteInfo {
    /// The called graphs of the conditional op: `(then_branch, else_branch)`.
    #[getter]
    fn called_graph(&self) -> (PyGraph, PyGraph) {
        let (t, e) = self.info.called_graphs();
        (PyGraph::new(t), PyGraph::new(e))
    }
    /// The graph of the conditional op.
    #[getter]
    fn graph(&self) -> PyGraph {
        PyGraph::new(self.info.graph())
    }
    /// The op's inputs in the parent graph: the condition, then each distinct branch input.
    #[getter]
    fn inputs(&self, py: Python<'_>) -> PyResult<Vec<Py<PyTensor>>> {
        self.info.inputs().py()?.into_iter().map(|t| wrap(py, t)).collect()
    }
    /// The op's outputs in the parent graph.
    #[getter]
    fn outputs(&self, py: Python<'_>) -> PyResult<Vec<Py<PyTensor>>> {
        self.info.outputs().py()?.into_iter().map(|t| wrap(py, t)).collect()
    }
    /// The parent tensor at op input `idx` (0 is the condition).
    fn parent_input(&self, py: Python<'_>, idx: usize) -> Out {
        wrap(py, self.info.parent_input(idx).py()?)
    }
    /// The parent tensor at op output `idx`.
    fn parent_output(&self, py: Python<'_>, idx: usize) -> Out {
        wrap(py, self.info.parent_output(idx).py()?)
    }
    /// The parent tensor of a branch graph's input or output.
    fn graph_to_parent(&self, py: Python<'_>, graph_tensor: &Bound<'_, PyAny>) -> Out {
        wrap(py, self.info.graph_to_parent(&t_of(graph_tensor)?).py()?)
    }
    /// The branch graph input receiving a parent tensor (the then branch's first).
    fn parent_to_graph(&self, py: Python<'_>, parent_tensor: &Bound<'_, PyAny>) -> Out {
        wrap(py, self.info.parent_to_graph(&t_of(parent_tensor)?).py()?)
    }
    /// Get the parent graph input tensor index given the graph input tensor index.
    #[pyo3(signature = (idx, then_branch=true))]
    fn graph_to_parent_input_index(&self, idx: usize, then_branch: bool) -> PyResult<usize> {
        let g = self.branch(then_branch);
        let t = g.inputs().py()?.into_iter().nth(idx).ok_or_else(|| index_error("graph input", idx))?;
        let parent = self.info.graph_to_parent(&t).map_err(|_| index_error("graph input", idx))?;
        let ins = self.info.inputs().py()?;
        ins.iter().position(|p| *p == parent).ok_or_else(|| index_error("graph input", idx))
    }
    /// Get the graph input tensor index given the parent graph input tensor index.
    fn parent_to_graph_input_index(&self, idx: usize) -> PyResult<usize> {
        let (t, _) = self.graph_input_of(idx)?;
        let g = self.branch(self.is_parent_index_in_then_branch(idx)?);
        g.inputs().py()?.iter().position(|i| *i == t).ok_or_else(|| index_error("parent graph input", idx))
    }
    /// Whether parent input `idx` goes to the then branch (else the else branch);
    /// IndexError if it goes to neither.
    fn is_parent_index_in_then_branch(&self, idx: usize) -> PyResult<bool> {
        Ok(self.graph_input_of(idx)?.1)
    }
    /// Get the parent graph output tensor index given the graph output tensor index.
    #[pyo3(signature = (idx, then_branch=true))]
    fn graph_to_parent_output_index(&self, idx: usize, then_branch: bool) -> PyResult<usize> {
        let n = self.branch(then_branch).outputs().py()?.len();
        if idx < n {
            Ok(idx)
        } else {
            Err(index_error("graph output", idx))
        }
    }
    /// Get the graph output tensor index given the parent graph output tensor index.
    #[pyo3(signature = (idx, then_branch=true))]
    fn parent_to_graph_output_index(&self, idx: usize, then_branch: bool) -> PyResult<usize> {
        let _ = then_branch;
        if idx < self.info.outputs().py()?.len() {
            Ok(idx)
        } else {
            Err(index_error("parent graph output", idx))
        }
    }
    fn __repr__(&self) -> String {
        format!("{:?}", self.info)
    }
}

impl PyConditionalSiteInfo {
    /// The branch input receiving parent input `idx`, and whether it is the then branch's.
    fn graph_input_of(&self, idx: usize) -> PyResult<(Tensor, bool)> {
        if idx == 0 {
            return Err(index_error("parent graph input (0 is the condition)", idx));
        }
        let parent = self.info.parent_input(idx).map_err(|_| index_error("parent graph input", idx))?;
        let t = self.info.parent_to_graph(&parent).map_err(|_| index_error("parent graph input", idx))?;
        let in_then = self.branch(true).inputs().py()?.contains(&t);
        Ok((t, in_then))
    }
}

/// Register the function and class in `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyConditionalSiteInfo>()?;
    m.add_function(wrap_pyfunction!(conditional_with_info, m)?)?;
    Ok(())
}
