//! Replication: `Ir.replica_grouping`, `ReplicaGrouping`, and `popxl.ops.collectives`.

use popxl::ops::collectives::{self, AllGatherShape, CollectiveOp};
use popxl::{ReplicaGrouping, RetrievalMode};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::errors::IntoPy;
use crate::tensor::{tensor_of, wrap, PyTensor};

type Out = PyResult<Py<PyTensor>>;

/// How replicas form groups (PopXL's `ReplicaGrouping`, made by `ir.replica_grouping`).
#[pyclass(name = "ReplicaGrouping", module = "popxl")]
#[derive(Clone)]
pub struct PyReplicaGrouping {
    pub g: ReplicaGrouping,
}

#[pymethods]
impl PyReplicaGrouping {
    /// The distance between consecutive replicas of a group.
    #[getter]
    fn stride(&self) -> Option<usize> {
        self.g.stride()
    }
    /// The number of replicas in each group.
    #[getter]
    fn group_size(&self) -> usize {
        self.g.group_size()
    }
    /// The number of groups.
    #[getter]
    fn num_groups(&self) -> usize {
        self.g.num_groups()
    }
    /// The group of each replica.
    #[getter]
    fn assignment(&self) -> Vec<usize> {
        self.g.assignment().to_vec()
    }
    /// Whether the grouping is a (stride, group_size) pattern.
    #[getter]
    fn is_const(&self) -> bool {
        self.g.is_const()
    }
    /// The grouping whose groups take one replica of each of these groups.
    fn transpose(&self) -> PyReplicaGrouping {
        PyReplicaGrouping { g: self.g.transpose() }
    }
    fn __repr__(&self) -> String {
        format!("ReplicaGrouping(num_replicas={}, assignment={:?})", self.g.num_replicas(), self.g.assignment())
    }
}

/// A grouping argument (None: all replicas in one group).
pub fn grouping_of(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<ReplicaGrouping>> {
    match obj {
        Some(o) if !o.is_none() => {
            o.downcast::<PyReplicaGrouping>().map(|g| Some(g.borrow().g.clone())).map_err(|_| {
                PyTypeError::new_err("replica_grouping must be a popxl.ReplicaGrouping (ir.replica_grouping)")
            })
        }
        _ => Ok(None),
    }
}

/// A retrieval mode name (None: `one_per_group`).
pub fn retrieval_mode_of(s: Option<&str>) -> PyResult<RetrievalMode> {
    match s {
        None => Ok(RetrievalMode::OnePerGroup),
        Some(s) => RetrievalMode::parse(s).ok_or_else(|| {
            PyValueError::new_err(format!("retrieval_mode must be 'one_per_group' or 'all_replicas', not '{s}'"))
        }),
    }
}

fn op_of(s: &str) -> PyResult<CollectiveOp> {
    CollectiveOp::ALL
        .into_iter()
        .find(|o| {
            let n = format!("{o:?}").to_lowercase();
            n == s || (n == "squareadd" && s == "square_add")
        })
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "op must be one of 'add', 'mean', 'mul', 'min', 'max', 'and', 'or', 'square_add', not '{s}'"
            ))
        })
}

/// `ops.collectives.replicated_all_reduce(t, op='add', group=None)`.
#[pyfunction]
#[pyo3(signature = (t, op="add", group=None))]
fn replicated_all_reduce(py: Python<'_>, t: &Bound<'_, PyAny>, op: &str, group: Option<&Bound<'_, PyAny>>) -> Out {
    let g = grouping_of(group)?;
    wrap(py, collectives::replicated_all_reduce(&tensor_of(t, "t")?, op_of(op)?, g.as_ref()).py()?)
}

/// `ops.collectives.replicated_all_reduce_(t, op='add', group=None)`, in place.
#[pyfunction]
#[pyo3(signature = (t, op="add", group=None))]
fn replicated_all_reduce_(py: Python<'_>, t: &Bound<'_, PyAny>, op: &str, group: Option<&Bound<'_, PyAny>>) -> Out {
    let g = grouping_of(group)?;
    wrap(py, collectives::replicated_all_reduce_(&tensor_of(t, "t")?, op_of(op)?, g.as_ref()).py()?)
}

/// `ops.collectives.replicated_all_gather(t, axis=0, group=None, output_shape='auto')`.
#[pyfunction]
#[pyo3(signature = (t, axis=0, group=None, output_shape="auto"))]
fn replicated_all_gather(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    axis: i64,
    group: Option<&Bound<'_, PyAny>>,
    output_shape: &str,
) -> Out {
    let shape = match output_shape {
        "auto" => AllGatherShape::Auto,
        "new_axis" => AllGatherShape::NewAxis,
        "concat" => AllGatherShape::Concat,
        "meta_shape" => AllGatherShape::MetaShape,
        other => {
            return Err(PyValueError::new_err(format!(
                "output_shape must be 'auto', 'new_axis', 'concat' or 'meta_shape', not '{other}'"
            )))
        }
    };
    let g = grouping_of(group)?;
    wrap(py, collectives::replicated_all_gather(&tensor_of(t, "t")?, axis, g.as_ref(), shape).py()?)
}

/// `ops.collectives.replicated_reduce_scatter(t, op='add', group=None,
/// configure_output_for_replicated_tensor_sharding=False)`.
#[pyfunction]
#[pyo3(signature = (t, op="add", group=None, configure_output_for_replicated_tensor_sharding=false))]
fn replicated_reduce_scatter(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    op: &str,
    group: Option<&Bound<'_, PyAny>>,
    configure_output_for_replicated_tensor_sharding: bool,
) -> Out {
    let g = grouping_of(group)?;
    let r = collectives::replicated_reduce_scatter(
        &tensor_of(t, "t")?,
        op_of(op)?,
        g.as_ref(),
        configure_output_for_replicated_tensor_sharding,
    );
    wrap(py, r.py()?)
}

/// `ops.collectives.replica_sharded_slice(t, group=None)`.
#[pyfunction]
#[pyo3(signature = (t, group=None))]
fn replica_sharded_slice(py: Python<'_>, t: &Bound<'_, PyAny>, group: Option<&Bound<'_, PyAny>>) -> Out {
    let g = grouping_of(group)?;
    wrap(py, collectives::replica_sharded_slice(&tensor_of(t, "t")?, g.as_ref()).py()?)
}

/// `ops.collectives.replicated_slice(t, axis=0, group=None)`.
#[pyfunction]
#[pyo3(signature = (t, axis=0, group=None))]
fn replicated_slice(py: Python<'_>, t: &Bound<'_, PyAny>, axis: i64, group: Option<&Bound<'_, PyAny>>) -> Out {
    let g = grouping_of(group)?;
    wrap(py, collectives::replicated_slice(&tensor_of(t, "t")?, axis, g.as_ref()).py()?)
}

fn all_reduce_args(ts: &Bound<'_, PyAny>, ipus: Option<Vec<i64>>) -> PyResult<(Vec<popxl::Tensor>, Option<Vec<u32>>)> {
    if ts.downcast::<PyTensor>().is_ok() {
        return Err(PyTypeError::new_err("ts must be a list of popxl.Tensor, not a single Tensor"));
    }
    let ts: Vec<popxl::Tensor> = ts
        .try_iter()
        .map_err(|_| PyTypeError::new_err("ts must be a list of popxl.Tensor"))?
        .map(|t| tensor_of(&t?, "ts"))
        .collect::<PyResult<_>>()?;
    let ipus = ipus.map(|v| v.into_iter().map(|i| crate::ops::ipu_number(i, "ipus")).collect()).transpose()?;
    Ok((ts, ipus))
}

macro_rules! all_reduce {
    ($($name:ident: $doc:literal),* $(,)?) => {$(
        #[doc = $doc]
        #[pyfunction]
        #[pyo3(signature = (ts, ipus=None, op="add"))]
        fn $name(py: Python<'_>, ts: &Bound<'_, PyAny>, ipus: Option<Vec<i64>>, op: &str) -> PyResult<Vec<Py<PyTensor>>> {
            let (ts, ipus) = all_reduce_args(ts, ipus)?;
            let refs: Vec<&popxl::Tensor> = ts.iter().collect();
            let outs = collectives::$name(&refs, ipus.as_deref(), op_of(op)?).py()?;
            outs.into_iter().map(|t| wrap(py, t)).collect()
        }
    )*};
}

all_reduce!(
    all_reduce: "`ops.collectives.all_reduce(ts, ipus=None, op='add')`: reduce the tensors `ts`, one per \
IPU of a replica (`ipus`, by default the tensors' IPUs), giving one result per IPU.",
    all_reduce_identical_inputs: "`ops.collectives.all_reduce_identical_inputs(ts, ipus=None, op='add')`: \
`all_reduce` of tensors known to be identical: each output is its input; the gradient is all-reduced.",
    all_reduce_identical_grad_inputs: "`ops.collectives.all_reduce_identical_grad_inputs(ts, ipus=None, \
op='add')`: `all_reduce` whose gradients are known to be identical: each input's gradient is its output's.",
);

/// Register the functions and classes in `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyReplicaGrouping>()?;
    m.add_function(wrap_pyfunction!(replicated_all_reduce, m)?)?;
    m.add_function(wrap_pyfunction!(replicated_all_reduce_, m)?)?;
    m.add_function(wrap_pyfunction!(replicated_all_gather, m)?)?;
    m.add_function(wrap_pyfunction!(replicated_reduce_scatter, m)?)?;
    m.add_function(wrap_pyfunction!(replica_sharded_slice, m)?)?;
    m.add_function(wrap_pyfunction!(replicated_slice, m)?)?;
    m.add_function(wrap_pyfunction!(all_reduce, m)?)?;
    m.add_function(wrap_pyfunction!(all_reduce_identical_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(all_reduce_identical_grad_inputs, m)?)?;
    Ok(())
}
