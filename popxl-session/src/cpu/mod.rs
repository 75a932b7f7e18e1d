//! The `cpu` device: executor and kernels.
pub mod kernel;
