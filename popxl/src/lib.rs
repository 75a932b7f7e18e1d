//! # popxl
//!
//! Build PopART IRs the way PopXL users do, in idiomatic Rust: an [`Ir`] with a
//! main [`Graph`] and subgraphs traced from closures or [`Module`]s, [`Tensor`]
//! handles with operators, variables, constants, host streams, and every op of
//! the `popart-ir` catalogue as a fallible function in [`ops`].
//!
//! The current graph is a thread-local context, like Python's `with graph:`:
//! enter it with a guard ([`Graph::enter`]) or run a closure in it
//! ([`Graph::with`]). [`in_sequence`] and [`name_scope`] are guards too.
//!
//! ```
//! use popxl::{ops, Ir, Tensor};
//!
//! fn increment_fn(x: Tensor) -> popxl::Result<Tensor> {
//!     let one = popxl::constant(ndarray::Array2::<f32>::ones((2, 2)), "one")?;
//!     ops::add(&x, &one)
//! }
//!
//! let ir = Ir::new();
//! let main = ir.main_graph();
//! let _g = main.enter();
//! let input = popxl::h2d_stream([2, 2], popxl::float32, "input_stream")?;
//! let x = ops::host_load(&input, "x")?;
//! let increment_graph = ir.create_graph(increment_fn, &x)?;
//! let o = ops::call(&increment_graph, &[&x], &[])?;
//! let output = popxl::d2h_stream(o[0].shape(), o[0].dtype(), "output_stream")?;
//! ops::host_store(&output, &o[0])?;
//! assert_eq!(main.called_graphs()?, vec![increment_graph]);
//! # Ok::<(), popxl::PopXlError>(())
//! ```
//!
//! Every user mistake is a [`PopXlError`] naming what is wrong; only the
//! operators (`+ - * /`, unary `-`, `+=`) panic, like `ndarray`'s.

#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod build;
pub mod checkpoint;
mod context;
mod error;
mod graph;
mod host;
mod ir;
pub mod ops;
mod remote;
mod replication;
mod seeds;
mod stream;
mod tensor;
mod tensor_ops;
pub mod transforms;
mod unbound;
mod variables;

// Handles cross threads: an IR built on one thread is run, read or extended on
// another (the building context, `with graph:`, stays per thread).
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Ir>();
    send_sync::<Graph>();
    send_sync::<Tensor>();
    send_sync::<HostToDeviceStream>();
    send_sync::<DeviceToHostStream>();
    send_sync::<RemoteBuffer>();
    send_sync::<ReplicaGrouping>();
    send_sync::<transforms::GradGraphInfo>();
    send_sync::<ops::CallSiteInfo>();
    send_sync::<ops::ConditionalSiteInfo>();
};

pub use build::{FromGraphInputs, GraphArg, GraphFunction, IntoGraphArgs, IntoGraphOutputs, Module, TensorByRef};
pub use context::{
    current_graph, current_ir, current_main_graph, current_name_scope, in_sequence, io_tiles, ipu, name_scope,
    GraphContext, IoTilesContext, IpuContext, NameScope, SequenceContext, SequenceMode,
};
pub use error::{PopXlError, Result};
pub use graph::Graph;
pub use host::{HostArray, HostElement};
pub use ir::{instance_from_env, Ir};
pub use ops::SliceIndex;
pub use popart_ir::Instances;
pub use popart_ir::{DataType, Placement, TileSet};
pub use remote::{remote_buffer, remote_variable, RemoteBuffer};
pub use replication::{
    remote_replica_sharded_variable, remote_variable_grouped, replica_sharded_buffer, replica_sharded_variable,
    variable_grouped, ReplicaGrouping, ReplicaGroupingError, RetrievalMode,
};
pub use seeds::{create_seeds, create_seeds_with, SeedOptions};
pub use stream::{d2h_stream, h2d_stream, DeviceToHostStream, HostToDeviceStream};
pub use tensor::{IndexKey, Tensor, TensorSpec};
pub use variables::{constant, constant_as, graph_input, graph_input_by_ref, graph_output, variable, variable_as};

pub use dtypes::*;

/// The README's guide, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The data types under their PopXL names (`popxl::float32`...), also
/// re-exported at the crate root.
///
/// ```
/// assert_eq!(popxl::float32, popxl::DataType::Float32);
/// assert_eq!(popxl::dtypes::half, popxl::dtypes::float16);
/// ```
#[allow(non_upper_case_globals)]
pub mod dtypes {
    use popart_ir::DataType;

    /// `bool`.
    pub const bool: DataType = DataType::Bool;
    /// `int8`.
    pub const int8: DataType = DataType::Int8;
    /// `int16`.
    pub const int16: DataType = DataType::Int16;
    /// `int32`.
    pub const int32: DataType = DataType::Int32;
    /// `int64`.
    pub const int64: DataType = DataType::Int64;
    /// `uint8`.
    pub const uint8: DataType = DataType::Uint8;
    /// `uint16`.
    pub const uint16: DataType = DataType::Uint16;
    /// `uint32`.
    pub const uint32: DataType = DataType::Uint32;
    /// `uint64`.
    pub const uint64: DataType = DataType::Uint64;
    /// `float16`.
    pub const float16: DataType = DataType::Float16;
    /// `half`, an alias of `float16`.
    pub const half: DataType = DataType::Float16;
    /// `float32`.
    pub const float32: DataType = DataType::Float32;
    /// `float`, an alias of `float32`.
    pub const float: DataType = DataType::Float32;
    /// `float64`.
    pub const float64: DataType = DataType::Float64;
    /// `double`, an alias of `float64`.
    pub const double: DataType = DataType::Float64;
    /// `float8_143`: Graphcore's 8-bit float, 4 exponent and 3 mantissa bits
    /// (see [`popart_ir::float8`]).
    pub const float8_143: DataType = DataType::Float8_143;
    /// `float8_152`: Graphcore's 8-bit float, 5 exponent and 2 mantissa bits.
    pub const float8_152: DataType = DataType::Float8_152;
}
