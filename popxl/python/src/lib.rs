//! `popxl._native`: the Rust half of the `popxl` Python package.
//!
//! It wraps the `popxl` crate's handles (`Ir`, `Graph`, `Tensor`, streams, call
//! sites, gradient graph infos) as Python classes usable from any thread, the op functions
//! under PopXL's names, and `popxl_session::Session`, which runs with the GIL
//! released. Every Rust error becomes the Python exception PopXL raises
//! ([`errors`]). The pure-Python half (`python/popxl/`) adds what is naturally
//! Python: dtypes, `TensorSpec`, `Module`, tracing functions into graphs.

#![deny(clippy::unwrap_used, clippy::expect_used)]

mod convert;
mod dot;
mod errors;
mod fp8;
mod fp8_scale;
mod graph;
mod hooks;
mod nn;
mod ops;
mod remote;
mod replication;
mod seeds;
mod session;
mod tensor;
mod transforms;
mod with_guards;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("UndefinedValue", m.py().get_type::<errors::UndefinedValue>())?;
    m.add_class::<graph::PyIr>()?;
    m.add_class::<graph::PyGraph>()?;
    m.add_class::<graph::InSequence>()?;
    m.add_class::<graph::NameScope>()?;
    m.add_class::<graph::IpuScope>()?;
    m.add_class::<graph::IoTilesScope>()?;
    m.add_class::<tensor::PyTensor>()?;
    m.add_class::<tensor::PyH2D>()?;
    m.add_class::<tensor::PyD2H>()?;
    m.add_class::<session::PySession>()?;
    m.add_class::<transforms::PyGradGraphInfo>()?;
    m.add_class::<transforms::PyExpectedConnection>()?;
    m.add_function(wrap_pyfunction!(graph::variable, m)?)?;
    m.add_function(wrap_pyfunction!(graph::constant, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_input, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_output, m)?)?;
    m.add_function(wrap_pyfunction!(graph::gcg, m)?)?;
    m.add_function(wrap_pyfunction!(graph::gmg, m)?)?;
    m.add_function(wrap_pyfunction!(graph::gir, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::h2d_stream, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::d2h_stream, m)?)?;
    m.add_function(wrap_pyfunction!(transforms::autodiff, m)?)?;
    m.add_function(wrap_pyfunction!(transforms::merge_exchange, m)?)?;
    m.add_function(wrap_pyfunction!(transforms::decompose_sum, m)?)?;
    ops::register(m)?;
    remote::register(m)?;
    nn::register(m)?;
    replication::register(m)?;
    seeds::register(m)?;
    hooks::register_classes(m)?;
    fp8::register(m)?;
    Ok(())
}
