//! Sessions, devices and the cpu executor.
pub mod cpu;
