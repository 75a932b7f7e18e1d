//! Host IO: `HostLoad` pops the next element of a host-to-device stream, `HostStore`
//! pushes to a device-to-host stream. Both name a main-graph stream tensor in `stream`.

use super::op_types;
use crate::{
    op_attrs, AttrSpec, Attributes, InferContext, OpAttrs, OpDef, OpFlags, Result, StreamDirection, TensorInfo,
    TensorKind,
};

op_attrs! {
    /// Attributes of `HostLoad` and `HostStore`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct StreamAttrs {
        /// The main-graph stream tensor's name.
        pub stream: String,
    }
}

op_types!(
    /// `HostLoad() -> t`: next element of stream `stream`
    HostLoad,
    /// `HostStore(t)`: push `t` to stream `stream`
    HostStore,
);

fn stream_info<'a>(ctx: &InferContext<'a>, dir: StreamDirection) -> Result<&'a TensorInfo> {
    let name = &StreamAttrs::infer(ctx)?.stream;
    let t = ctx
        .ir
        .main_graph()
        .tensor_by_name(name)
        .map_err(|_| ctx.error(format!("no stream named `{name}` in the main graph")))?;
    match t.kind {
        TensorKind::Stream(d) if d == dir => Ok(&t.info),
        _ => Err(ctx.error(format!(
            "`{name}` is not a {} stream",
            if dir == StreamDirection::HostToDevice { "host-to-device" } else { "device-to-host" }
        ))),
    }
}

impl OpDef for HostLoad {
    fn op_type(&self) -> &'static str {
        "HostLoad"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        StreamAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        Ok(vec![stream_info(ctx, StreamDirection::HostToDevice)?.clone()])
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::SIDE_EFFECT | OpFlags::HOST_IO
    }
}

impl OpDef for HostStore {
    fn op_type(&self) -> &'static str {
        "HostStore"
    }
    fn attributes(&self) -> &'static [AttrSpec] {
        StreamAttrs::SCHEMA
    }
    fn infer(&self, ctx: &InferContext<'_>) -> Result<Vec<TensorInfo>> {
        let s = stream_info(ctx, StreamDirection::DeviceToHost)?;
        let t = ctx.input(0)?;
        if t != s {
            return Err(ctx.error(format!("tensor {t} does not match stream {s}")));
        }
        Ok(vec![])
    }
    fn properties(&self, _: &Attributes) -> OpFlags {
        OpFlags::SIDE_EFFECT | OpFlags::HOST_IO
    }
}

pub(crate) const ALL: &[&dyn OpDef] = &[&HostLoad, &HostStore];
