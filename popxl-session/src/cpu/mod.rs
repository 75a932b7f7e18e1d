//! The `cpu` device: executor and kernels.
pub mod executor;
pub mod gang;
pub mod kernel;
pub mod kernels;
pub mod replicas;
pub mod team;
