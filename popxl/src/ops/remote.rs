//! Streaming memory transfers (PopXL's `ops.remote_load`, `ops.remote_load_`,
//! `ops.remote_store`) and code loading (`ops.remote_code_load`).
//!
//! As in PopXL, transfers are ordered only by data edges: put a store and the
//! loads that must see it inside [`crate::in_sequence`].

use popart_ir::ops::all as ir_ops;
use popart_ir::ops::remote::{RemoteAttrs, RemoteCodeLoadAttrs};

use super::OpBuilder;
use crate::{Graph, PopXlError, RemoteBuffer, Result, Tensor};

/// The entry of a remote transfer: a number known while building, or an int32
/// or uint32 scalar tensor computed at run time (an out-of-range value then stops the
/// run with `SessionError::RemoteOffsetOutOfRange` naming the buffer).
#[derive(Clone, Copy, Debug)]
pub enum RemoteOffset<'a> {
    /// A fixed entry (checked against the buffer when the op is created).
    Entry(usize),
    /// An int32 or uint32 scalar tensor.
    Tensor(&'a Tensor),
}

impl From<usize> for RemoteOffset<'_> {
    fn from(e: usize) -> Self {
        RemoteOffset::Entry(e)
    }
}

impl<'a> From<&'a Tensor> for RemoteOffset<'a> {
    fn from(t: &'a Tensor) -> Self {
        RemoteOffset::Tensor(t)
    }
}

/// An op builder on `buf` at `offset`.
fn remote_op<'a>(
    what: &'static str,
    def: &'static dyn popart_ir::OpDef,
    buf: &RemoteBuffer,
    offset: RemoteOffset<'a>,
) -> Result<OpBuilder<'a>> {
    if let Some(g) = crate::context::try_current_graph() {
        if g.ir_id() != buf.ir_id() {
            return Err(PopXlError::ForeignIr { name: format!("remote buffer {}", buf.id()), what: what.into() });
        }
    }
    let b = OpBuilder::new(what, def).mixed_placement();
    let remote_buffer = i64::from(buf.id().0);
    Ok(match offset {
        RemoteOffset::Entry(e) => {
            let e = i64::try_from(e).map_err(|_| PopXlError::IntegerOutOfRange {
                what: format!("{what}: offset"),
                value: e.to_string(),
                ty: "i64",
            })?;
            b.typed(&RemoteAttrs { remote_buffer, offset: Some(e) })
        }
        RemoteOffset::Tensor(t) => b.input(1, t).typed(&RemoteAttrs { remote_buffer, offset: None }),
    })
}

/// Load entry `offset` of `buf` into a new tensor named `name` (op
/// `RemoteLoad`; PopXL's `ops.remote_load`). Gradients stop here.
///
/// ```
/// use popxl::ops;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let buf = popxl::remote_buffer([2, 2], popxl::float32, 4).unwrap();
/// let x = ops::remote_load(&buf, 3, "x").unwrap();
/// assert_eq!((x.name(), x.shape()), ("x", &[2usize, 2][..]));
/// let i = popxl::constant(1i32, "i").unwrap();
/// let y = ops::remote_load(&buf, &i, "y").unwrap(); // entry chosen at run time
/// assert!(ops::remote_load(&buf, 4, "z").is_err()); // 4 entries: 0..=3
/// # let _ = y;
/// ```
pub fn remote_load<'a>(buf: &RemoteBuffer, offset: impl Into<RemoteOffset<'a>>, name: &str) -> Result<Tensor> {
    remote_op("remote_load", &ir_ops::RemoteLoad, buf, offset.into())?.output_name(name).create1()
}

/// Load entry `offset` of `buf` into `t` in place (op `RemoteLoadInplace`;
/// PopXL's `ops.remote_load_`); returns the updated tensor. `t` must have the
/// buffer's shape and type.
///
/// ```
/// use popxl::ops;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let buf = popxl::remote_buffer([2], popxl::float32, 1).unwrap();
/// let t = popxl::variable(vec![0.0f32, 0.0], "t").unwrap();
/// let t2 = ops::remote_load_(&buf, 0, &t).unwrap();
/// assert_eq!(t2.shape(), t.shape());
/// ```
pub fn remote_load_<'a>(buf: &RemoteBuffer, offset: impl Into<RemoteOffset<'a>>, t: &'a Tensor) -> Result<Tensor> {
    remote_op("remote_load_", &ir_ops::RemoteLoadInplace, buf, offset.into())?.input(0, t).create1()
}

/// Store `t` into entry `offset` of `buf` (op `RemoteStore`; PopXL's
/// `ops.remote_store`). `t` must have the buffer's shape and type.
///
/// ```
/// use popxl::ops;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let buf = popxl::remote_buffer([2], popxl::float32, 2).unwrap();
/// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
/// ops::remote_store(&buf, 1, &x).unwrap();
/// let wrong = popxl::variable(vec![1.0f32, 2.0, 3.0], "wrong").unwrap();
/// assert!(ops::remote_store(&buf, 0, &wrong).is_err());
/// ```
pub fn remote_store<'a>(buf: &RemoteBuffer, offset: impl Into<RemoteOffset<'a>>, t: &'a Tensor) -> Result<()> {
    remote_op("remote_store", &ir_ops::RemoteStore, buf, offset.into())?.input(0, t).create()?;
    Ok(())
}

/// Load the code of `graph` into tile memory (op `RemoteCodeLoad`; PopXL's
/// `ops.remote_code_load`). `destination` is `"executable"` (the only
/// destination PopXL offers). Values are unaffected; the load tells the
/// lowering when the graph's code must be live (see
/// `popart_lower::CodeLiveness`): from this load to the last call before the
/// next load. Put the load and the calls in [`crate::in_sequence`], as PopXL
/// requires, so the load is scheduled before them. A session on the `cpu`
/// device keeps loaded graphs as functions (it does not inline them).
///
/// ```
/// use popxl::{ops, Tensor};
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
/// let g = ir.create_graph(|x: Tensor| ops::relu(&x), &x).unwrap();
/// let _s = popxl::in_sequence(true);
/// ops::remote_code_load(&g, "executable").unwrap();
/// ops::call(&g, &[&x], &[]).unwrap();
/// assert!(ops::remote_code_load(&g, "stream").is_err());
/// assert!(ops::remote_code_load(&ir.main_graph(), "executable").is_err());
/// ```
pub fn remote_code_load(graph: &Graph, destination: &str) -> Result<()> {
    if crate::context::try_current_graph().is_some_and(|g| g.ir_id() != graph.ir_id()) {
        return Err(PopXlError::ForeignIr { name: graph.name().to_string(), what: "remote_code_load".into() });
    }
    OpBuilder::new("remote_code_load", &ir_ops::RemoteCodeLoad)
        .typed(&RemoteCodeLoadAttrs { graph: graph.id(), destination: destination.to_string() })
        .create()?;
    Ok(())
}
