//! `popxl.ops.matmul` with PopXL's keyword arguments.

use popart_ir::DataType;
use popxl::ops;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use super::indexing::memory_proportion;
use super::{t_of, Out};
use crate::convert::dtype_of;
use crate::errors::IntoPy;
use crate::tensor::wrap;

/// `ops.matmul(lhs, rhs, available_memory_proportion=None, output_type=None, partials_type=None)`:
/// the matrix product with numpy's `matmul` rules.
///
/// `output_type` (default: the inputs' dtype) is the dtype of the result: a wider
/// type computes the product in it (as the IPU does with float partials, so
/// `float16` inputs give the exact `float32` products summed in `float32`), a
/// narrower one rounds the product. `partials_type` (`float16` or `float32`) and
/// `available_memory_proportion` (in (0, 1]) are IPU planning hints: checked,
/// no effect on `cpu`.
#[pyfunction]
#[pyo3(signature = (lhs, rhs, available_memory_proportion=None, output_type=None, partials_type=None))]
pub(crate) fn matmul(
    py: Python<'_>,
    lhs: &Bound<'_, PyAny>,
    rhs: &Bound<'_, PyAny>,
    available_memory_proportion: Option<f64>,
    output_type: Option<&Bound<'_, PyAny>>,
    partials_type: Option<&Bound<'_, PyAny>>,
) -> Out {
    let l = t_of(lhs)?;
    let r = crate::tensor::coerce(&l, rhs)?;
    memory_proportion(available_memory_proportion, "matmul")?;
    if let Some(p) = partials_type.filter(|p| !p.is_none()) {
        let d = dtype_of(p)?;
        if !matches!(d, DataType::Float16 | DataType::Float32) {
            return Err(PyValueError::new_err(format!("dtype {} is not valid, must be float16 or float32", d.name())));
        }
    }
    let Some(out) = output_type.filter(|o| !o.is_none()).map(dtype_of).transpose()? else {
        return wrap(py, ops::matmul(&l, &r).py()?);
    };
    let input = l.dtype();
    if out == input {
        return wrap(py, ops::matmul(&l, &r).py()?);
    }
    if out.is_floating_point() != input.is_floating_point() || out == DataType::Bool {
        return Err(PyTypeError::new_err(format!(
            "matmul: output_type {} is not of the kind of the inputs' dtype {}",
            out.name(),
            input.name()
        )));
    }
    let y = if out.size_bytes() > input.size_bytes() {
        ops::matmul(&ops::cast(&l, out).py()?, &ops::cast(&r, out).py()?)
    } else {
        ops::matmul(&l, &r).and_then(|y| ops::cast(&y, out))
    };
    wrap(py, y.py()?)
}

/// Register the function in `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(matmul, m)?)?;
    Ok(())
}
