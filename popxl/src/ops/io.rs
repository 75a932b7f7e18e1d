//! Host IO: `host_load` from a host-to-device stream, `host_store` to a
//! device-to-host stream; `io_tile_copy` between compute and IO tiles and
//! `ipu_copy` between IPUs.

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::io::StreamAttrs;
use popart_ir::ops::unary::IpuCopyAttrs;

use super::OpBuilder;
use crate::{DeviceToHostStream, HostToDeviceStream, PopXlError, Result, Tensor};

fn check_stream_ir(stream: &Tensor, what: &str) -> Result<()> {
    if let Some(g) = crate::context::try_current_graph() {
        if g.ir_id != stream.ir_id() {
            return Err(PopXlError::ForeignIr { name: stream.name().to_string(), what: what.to_string() });
        }
    }
    Ok(())
}

/// Load the next value of `stream` into a new tensor named `name` (op `HostLoad`;
/// PopXL's `ops.host_load`). Created in the current graph, or the main graph
/// when there is no current graph.
///
/// ```
/// use popxl::ops;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let input = popxl::h2d_stream([2, 2], popxl::float32, "input_stream").unwrap();
/// let x = ops::host_load(&input, "x").unwrap();
/// assert_eq!((x.name(), x.shape()), ("x", &[2usize, 2][..]));
/// ```
pub fn host_load(stream: &HostToDeviceStream, name: &str) -> Result<Tensor> {
    check_stream_ir(stream.tensor(), "host_load")?;
    let graph = crate::context::try_current_graph().unwrap_or_else(|| stream.tensor().graph());
    OpBuilder::new("host_load", &ir_ops::HostLoad)
        .typed(&StreamAttrs { stream: stream.name().to_string() })
        .output_name(name)
        .in_graph(graph)
        .create1()
}

/// Send `t` to the host through `stream` (op `HostStore`; PopXL's `ops.host_store`).
/// Shape and data type must match the stream's.
///
/// ```
/// use popxl::{ops, PopXlError};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
/// let out = popxl::d2h_stream([2], popxl::float32, "out").unwrap();
/// ops::host_store(&out, &x).unwrap();
/// let bad = popxl::d2h_stream([3], popxl::float32, "bad").unwrap();
/// assert!(matches!(ops::host_store(&bad, &x), Err(PopXlError::HostStoreShapeMismatch { .. })));
/// ```
pub fn host_store(stream: &DeviceToHostStream, t: &Tensor) -> Result<()> {
    check_stream_ir(stream.tensor(), "host_store")?;
    if t.ir_id() != stream.tensor().ir_id() {
        return Err(PopXlError::ForeignIr { name: t.name().to_string(), what: "host_store".into() });
    }
    if t.shape() != stream.shape() {
        return Err(PopXlError::HostStoreShapeMismatch {
            stream: stream.name().to_string(),
            stream_shape: stream.shape().to_vec(),
            tensor: t.name().to_string(),
            tensor_shape: t.shape().to_vec(),
        });
    }
    if t.dtype() != stream.dtype() {
        return Err(PopXlError::HostStoreDtypeMismatch {
            stream: stream.name().to_string(),
            stream_dtype: stream.dtype(),
            tensor: t.name().to_string(),
            tensor_dtype: t.dtype(),
        });
    }
    OpBuilder::new("host_store", &ir_ops::HostStore)
        .input(0, t)
        .typed(&StreamAttrs { stream: stream.name().to_string() })
        .create()?;
    Ok(())
}

/// Copy `t` between the compute and IO tiles of its IPU (op `IoTileCopy`;
/// PopXL's `ops.io_tile_copy`): inside [`crate::io_tiles`] the copy lands on
/// the IO tiles, outside it on the compute tiles. The values are unchanged;
/// the gradient passes through.
///
/// ```
/// use popxl::{ops, TileSet};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
/// let on_io = {
///     let _t = popxl::io_tiles();
///     ops::io_tile_copy(&x).unwrap()
/// };
/// let back = ops::io_tile_copy(&on_io).unwrap();
/// assert_eq!((on_io.tile_set().unwrap(), back.tile_set().unwrap()), (TileSet::Io, TileSet::Compute));
/// ```
pub fn io_tile_copy(t: &Tensor) -> Result<Tensor> {
    OpBuilder::new("io_tile_copy", &ir_ops::IoTileCopy).input(0, t).create1()
}

/// Copy `t` to IPU `destination` (op `IpuCopy`; PopXL's `ops.ipu_copy`). The
/// copy runs on `destination` whatever the current [`crate::ipu`] context;
/// `source` is the IPU `t` is on, by default [`Tensor::ipu`] (the IPU of its
/// producer, else of its first consumer). The output, named `<t>_c<destination>`,
/// has `t`'s type and shape; its gradient is copied back to `source`. The `cpu`
/// device runs it as a copy.
///
/// Errors: [`PopXlError::IpuCopySourceUnknown`] when `source` is `None` and
/// `t`'s IPU cannot be inferred.
///
/// ```
/// use popxl::{ops, PopXlError};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
/// // `x` is used by no op on an IPU yet: its IPU is unknown.
/// assert!(matches!(ops::ipu_copy(&x, 1, None), Err(PopXlError::IpuCopySourceUnknown { .. })));
/// let y = {
///     let _p = popxl::ipu(0);
///     ops::relu(&x).unwrap()
/// };
/// let y1 = ops::ipu_copy(&y, 1, None).unwrap();
/// assert_eq!((y1.name(), y1.ipu().unwrap()), ("Relu:0_c1", 1));
/// ```
pub fn ipu_copy(t: &Tensor, destination: u32, source: Option<u32>) -> Result<Tensor> {
    let source = match source {
        Some(s) => s,
        None => t.ipu().map_err(|e| match e {
            PopXlError::UndefinedValue { .. } => PopXlError::IpuCopySourceUnknown { tensor: t.name().to_string() },
            other => other,
        })?,
    };
    // The op runs on its destination (the output's IPU), as PopXL's.
    let _on_destination = crate::ipu(destination);
    let leaf = t.name().rsplit('/').next().unwrap_or_default();
    OpBuilder::new("ipu_copy", &ir_ops::IpuCopy)
        .input(0, t)
        .typed(&IpuCopyAttrs { source: i64::from(source), destination: i64::from(destination) })
        .output_name(&format!("{leaf}_c{destination}"))
        .create1()
}
