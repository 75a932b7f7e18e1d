//! `popxl.create_seeds`: seed tensors from a parent seed, as numpy arrays.

use numpy::{IntoPyArray, PyArrayDyn};
use popxl::SeedOptions;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPy;

fn count(n: i64, what: &str) -> PyResult<usize> {
    usize::try_from(n).map_err(|_| PyValueError::new_err(format!("create_seeds: {what} must be >= 0, not {n}")))
}

/// A non-negative Python int below 2^64.
fn uint64(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    obj.extract::<u64>().map_err(|_| {
        let shown = obj.repr().map(|r| r.to_string()).unwrap_or_default();
        PyValueError::new_err(format!("create_seeds: {what} must be an int in [0, 2**64), not {shown}"))
    })
}

/// `popxl.create_seeds(seed, offset=0, batches_per_step=1, gradient_accumulation_factor=1, replicas=1)`:
/// a uint32 array of `batches_per_step * gradient_accumulation_factor * replicas` seed
/// tensors (each a uint64 as two uint32 elements), of shape
/// `[batches_per_step, gradient_accumulation_factor, replicas, 2]` with the size-1 dims
/// removed, drawn as numpy's `default_rng(seed + offset)`.
#[pyfunction]
#[pyo3(signature = (seed, offset=None, batches_per_step=1, gradient_accumulation_factor=1, replicas=1))]
fn create_seeds<'py>(
    py: Python<'py>,
    seed: &Bound<'py, PyAny>,
    offset: Option<&Bound<'py, PyAny>>,
    batches_per_step: i64,
    gradient_accumulation_factor: i64,
    replicas: i64,
) -> PyResult<Bound<'py, PyArrayDyn<u32>>> {
    let seed = uint64(seed, "seed")?;
    let offset = offset.map(|o| uint64(o, "offset")).transpose()?.unwrap_or(0);
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
