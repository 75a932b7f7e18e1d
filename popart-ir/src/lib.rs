//! # popart-ir
//!
//! The intermediate representation at the bottom of the stack: an [`Ir`] owns one
//! main [`Graph`] and any number of subgraphs; a graph owns its [`Op`]s and
//! [`Tensor`]s in arenas with typed ids; ops connect to tensors through
//! [`TensorIndexMap`]s; [`TopoCons`] add ordering beyond data edges; the
//! [scheduler](Ir::schedule) orders ops; the [verifier](Ir::verify) checks every
//! invariant; [`text`] prints and parses a whole IR; [`dot`] exports Graphviz.
//!
//! This crate knows nothing of devices, kernels or ndarray.

#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod alias;
mod attr;
mod cost;
pub mod dot;
mod dtype;
mod error;
pub mod float8;
mod graph;
mod hash;
mod ir;
mod op;
pub mod ops;
mod placement;
mod remote;
mod replica_grouping;
mod schedule;
pub mod size;
mod tensor;
pub mod text;
mod topocons;
mod variable_settings;
mod verify;

#[doc(hidden)]
pub use attr::decode_field;
pub use attr::{check_schema, AttrError, AttrKind, AttrSpec, AttrType, AttrValue, Attributes, OpAttrs};
pub use cost::{CostContext, CostEngine, OpCost};
pub use dtype::{DataType, UnknownDataType};
pub use error::{InplaceAmbiguity, IrError, Result};
pub use graph::Graph;
pub use ir::{Instances, Ir, MAIN_GRAPH_NAME};
pub use op::{
    check_attributes, lookup_op, register_op, registered_op_types, registered_ops, Alias, AliasKind, AsAny,
    GradContext, GradOpSpec, GradRule, GradSource, InferContext, Op, OpDef, OpDefId, OpFlags, OpTypeRef,
    TensorIndexMap,
};
pub use placement::{IpuRoute, Placement, TileSet};
pub use remote::{RemoteBuffer, RemoteBufferId, RemoteError, RemoteSlot};
pub use replica_grouping::{ReplicaGrouping, ReplicaGroupingError, RetrievalMode};
pub use schedule::ScheduleOptions;
pub use size::SizeError;
pub use tensor::{HostDataError, HostTensor, Port, StreamDirection, Tensor, TensorInfo, TensorKind};
pub use topocons::{TopoCon, TopoCons};
pub use variable_settings::VariableSettings;
#[doc(hidden)]
pub use verify::test_hooks;

slotmap::new_key_type! {
    /// Id of a graph within its [`Ir`].
    pub struct GraphId;
    /// Id of an op within its [`Graph`].
    pub struct OpId;
    /// Id of a tensor within its [`Graph`].
    pub struct TensorId;
}
