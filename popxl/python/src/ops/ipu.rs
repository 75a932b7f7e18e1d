//! `popxl.ops` copies between IPUs and tile sets: `ipu_copy`, `io_tile_copy`.

use popxl::ops;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::{t_of, Out};
use crate::errors::IntoPy;
use crate::tensor::wrap;

/// An IPU number given by the user.
pub(crate) fn ipu_number(n: i64, what: &str) -> PyResult<u32> {
    u32::try_from(n).map_err(|_| PyValueError::new_err(format!("{what} must be an IPU number >= 0, not {n}")))
}

/// `ops.ipu_copy(t, destination, source=None)`: copy a tensor to IPU `destination`.
/// By default the source is the IPU of the tensor's producer; a tensor without one
/// needs `source`.
#[pyfunction]
#[pyo3(signature = (t, destination, source=None))]
pub(crate) fn ipu_copy(py: Python<'_>, t: &Bound<'_, PyAny>, destination: i64, source: Option<i64>) -> Out {
    let destination = ipu_number(destination, "destination")?;
    let source = source.map(|s| ipu_number(s, "source")).transpose()?;
    wrap(py, ops::ipu_copy(&t_of(t)?, destination, source).py()?)
}

/// `ops.io_tile_copy(t)`: copy a tensor between the compute and IO tiles (to the IO
/// tiles inside `popxl.io_tiles()`, to the compute tiles outside it).
#[pyfunction]
fn io_tile_copy(py: Python<'_>, t: &Bound<'_, PyAny>) -> Out {
    wrap(py, ops::io_tile_copy(&t_of(t)?).py()?)
}

/// Register this family's functions in `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ipu_copy, m)?)?;
    m.add_function(wrap_pyfunction!(io_tile_copy, m)?)?;
    Ok(())
}
