//! `popxl.ops` gather and scatter variants: `groupedgather`, `tied_gather`,
//! `scatter_reduce`.

use popxl::ops::{self, GatherOptions, GroupedGatherOptions, ScatterReduceOptions};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::{t_of, Out};
use crate::errors::IntoPy;
use crate::tensor::wrap;

/// PopXL's `available_memory_proportion`: None or a proportion in (0, 1]
/// (a memory hint for the IPU planner; no effect on `cpu`).
pub(super) fn memory_proportion(p: Option<f64>, what: &str) -> PyResult<Option<f32>> {
    match p {
        None => Ok(None),
        Some(v) if v > 0.0 && v <= 1.0 => Ok(Some(v as f32)),
        Some(v) => {
            Err(PyValueError::new_err(format!("{what}: available_memory_proportion must be in (0, 1], not {v}")))
        }
    }
}

/// `ops.groupedgather(t, indices, axis=0, group_size=1, available_memory_proportion=None, zero_OOR=False)`:
/// a gather per group; `t` and `indices` have a leading dimension of `group_size`
/// groups and group `g` of the result is `gather(t[g], indices[g])` along `axis`.
#[pyfunction]
#[pyo3(signature = (t, indices, axis=0, group_size=1, available_memory_proportion=None, zero_OOR=false))]
#[allow(non_snake_case)]
fn groupedgather(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    indices: &Bound<'_, PyAny>,
    axis: i64,
    group_size: Option<i64>,
    available_memory_proportion: Option<f64>,
    zero_OOR: bool,
) -> Out {
    let group_size = group_size.unwrap_or(1);
    let group_size = usize::try_from(group_size)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| PyValueError::new_err(format!("groupedgather: group_size must be >= 1, not {group_size}")))?;
    let available_memory_proportion = memory_proportion(available_memory_proportion, "groupedgather")?;
    let o = GroupedGatherOptions { axis, group_size, available_memory_proportion, zero_OOR };
    wrap(py, ops::groupedgather(&t_of(t)?, &t_of(indices)?, o).py()?)
}

/// `ops.tied_gather(t, indices, axis=0, available_memory_proportion=None, zero_OOR=False)`:
/// `gather` of a weight tied to a matmul (same values and gradient as `gather`).
#[pyfunction]
#[pyo3(signature = (t, indices, axis=0, available_memory_proportion=None, zero_OOR=false))]
#[allow(non_snake_case)]
fn tied_gather(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    indices: &Bound<'_, PyAny>,
    axis: i64,
    available_memory_proportion: Option<f64>,
    zero_OOR: bool,
) -> Out {
    let available_memory_proportion = memory_proportion(available_memory_proportion, "tied_gather")?;
    let o = GatherOptions { axis, available_memory_proportion, zero_OOR };
    wrap(py, ops::tied_gather(&t_of(t)?, &t_of(indices)?, o).py()?)
}

/// `ops.scatter_reduce(data, indices, reduction, initial_values=None, axis=0, axis_size=None,
/// enable_index_broadcast=True, available_memory_proportion=None)`: reduce `data` into an
/// output at `indices` along `axis` (`reduction` one of 'sum', 'min', 'max', 'none').
#[pyfunction]
#[pyo3(signature = (data, indices, reduction, initial_values=None, axis=0, axis_size=None, enable_index_broadcast=true, available_memory_proportion=None))]
#[allow(clippy::too_many_arguments)]
fn scatter_reduce(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    indices: &Bound<'_, PyAny>,
    reduction: &str,
    initial_values: Option<&Bound<'_, PyAny>>,
    axis: i64,
    axis_size: Option<i64>,
    enable_index_broadcast: bool,
    available_memory_proportion: Option<f64>,
) -> Out {
    let (data, indices) = (t_of(data)?, t_of(indices)?);
    if !["sum", "min", "max", "none"].contains(&reduction) {
        return Err(PyValueError::new_err(format!(
            "The reduction must be one of ['sum', 'min', 'max', 'none'], not '{reduction}'"
        )));
    }
    let init = initial_values.filter(|o| !o.is_none()).map(t_of).transpose()?;
    if init.is_none() && axis_size.is_none() {
        return Err(PyValueError::new_err("One of initial_values and axis_size must be specified"));
    }
    let axis_size = axis_size
        .map(|n| {
            usize::try_from(n)
                .map_err(|_| PyValueError::new_err(format!("scatter_reduce: axis_size must be >= 0, not {n}")))
        })
        .transpose()?;
    if !enable_index_broadcast && indices.shape() != data.shape() {
        return Err(PyValueError::new_err(format!(
            "scatter_reduce: with enable_index_broadcast=False the indices must have the data's shape {:?}, not {:?}",
            data.shape(),
            indices.shape()
        )));
    }
    let available_memory_proportion = memory_proportion(available_memory_proportion, "scatter_reduce")?;
    let o = ScatterReduceOptions { initial_values: init.as_ref(), axis, axis_size, available_memory_proportion };
    wrap(py, ops::scatter_reduce(&data, &indices, reduction, o).py()?)
}

/// Register this family's functions in `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(groupedgather, m)?)?;
    m.add_function(wrap_pyfunction!(tied_gather, m)?)?;
    m.add_function(wrap_pyfunction!(scatter_reduce, m)?)?;
    Ok(())
}
