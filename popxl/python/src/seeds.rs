//! `popxl.create_seeds`: seed tensors from a parent seed, as numpy arrays.

use numpy::{IntoPyArray, PyArrayDyn};
use popxl::SeedOptions;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPy;

fn count(n: i64, what: &str) -> PyResult<usize> {
    usize::try_from(n).map_err(|_| PyValueError::new_err(format!("create_seeds: {what} must be >= 0, not {n}")))
}

/// `popxl.create_seeds(seed, offset=0, batches_per_step=1, gradient_accumulation_factor=1, replicas=1)`:
/// a uint32 array of `batches_per_step * gradient_accumulation_factor * replicas` seed
/// tensors (each a uint64 as two uint32 elements), of shape
/// `[batches_per_step, gradient_accumulation_factor, replicas, 2]` with the size-1 dims
/// removed, drawn as numpy's `default_rng(seed + offset)`.
#[pyfunction]
#[pyo3(signature = (seed, offset=0, batches_per_step=1, gradient_accumulation_factor=1, replicas=1))]
fn create_seeds<'py>(
    py: Python<'py>,
    seed: u64,
    offset: u64,
    batches_per_step: i64,
    gradient_accumulation_factor: i64,
    replicas: i64,
) -> PyResult<Bound<'py, PyArrayDyn<u32>>> {
    let options = SeedOptions {
        offset,
        batches_per_step: count(batches_per_step, "batches_per_step")?,
        gradient_accumulation_factor: count(gradient_accumulation_factor, "gradient_accumulation_factor")?,
        replicas: count(replicas, "replicas")?,
    };
    let seeds = py.allow_threads(|| popxl::create_seeds_with(seed, options)).py()?;
    Ok(seeds.into_pyarray(py))
}

/// Register the function in `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(create_seeds, m)?)
}
