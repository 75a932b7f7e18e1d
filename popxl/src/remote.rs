//! Streaming memory: remote buffers and remote variables (PopXL's
//! `remote_buffer`, `RemoteBuffer` and `remote_variable`). The transfers are
//! [`crate::ops::remote_load`], [`crate::ops::remote_load_`] and
//! [`crate::ops::remote_store`].

use std::fmt;
use std::sync::Weak;

use popart_ir::{DataType, RemoteBufferId, RemoteSlot, TensorInfo};

use crate::ir::IrCell;
use crate::{context, HostArray, Ir, PopXlError, Result, Tensor};

/// A remote buffer: `entries` tensors of one shape and type in streaming
/// memory (PopXL's `RemoteBuffer`). Ids are 1, 2, ... per IR. The entry shape
/// and type are fixed; the number of entries can be changed while the IR is
/// being built.
#[derive(Clone)]
pub struct RemoteBuffer {
    ir: Weak<IrCell>,
    ir_id: u64,
    id: RemoteBufferId,
    info: TensorInfo,
}

impl fmt::Debug for RemoteBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteBuffer").field("id", &self.id.0).field("info", &self.info.to_string()).finish()
    }
}

impl PartialEq for RemoteBuffer {
    fn eq(&self, other: &Self) -> bool {
        (self.ir_id, self.id) == (other.ir_id, other.id)
    }
}

impl Eq for RemoteBuffer {}

impl RemoteBuffer {
    /// The buffer's id in its IR (PopXL's `remote_buffer_id`): 1, 2, ...
    pub fn id(&self) -> RemoteBufferId {
        self.id
    }

    /// Id of the IR the buffer belongs to.
    pub fn ir_id(&self) -> u64 {
        self.ir_id
    }

    /// Shape of one entry (PopXL's `tensor_shape`).
    pub fn tensor_shape(&self) -> &[usize] {
        &self.info.shape
    }

    /// Type of one entry (PopXL's `tensor_dtype`).
    pub fn tensor_dtype(&self) -> DataType {
        self.info.dtype
    }

    /// Shape and type of one entry.
    pub fn info(&self) -> &TensorInfo {
        &self.info
    }

    fn ir(&self) -> Result<Ir> {
        let state =
            self.ir.upgrade().ok_or_else(|| PopXlError::IrDropped { graph: format!("remote buffer {}", self.id) })?;
        Ok(Ir::from_state(state))
    }

    /// Number of entries.
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// let _g = ir.main_graph().enter();
    /// let buf = popxl::remote_buffer([2], popxl::float32, 3).unwrap();
    /// assert_eq!(buf.entries().unwrap(), 3);
    /// buf.set_entries(5).unwrap();
    /// assert_eq!(buf.entries().unwrap(), 5);
    /// assert!(buf.set_entries(0).is_err());
    /// ```
    pub fn entries(&self) -> Result<usize> {
        self.ir()?.with_ir(|core| Ok(core.remote_buffer(self.id)?.entries))
    }

    /// Change the number of entries (at least 1, and at least one more than
    /// the highest entry a remote variable or a constant offset uses);
    /// [`PopXlError::ValueOutOfRange`] otherwise, [`PopXlError::IrFrozen`] once
    /// a session holds the IR.
    pub fn set_entries(&self, entries: usize) -> Result<()> {
        if entries == 0 {
            return Err(PopXlError::ValueOutOfRange {
                what: format!("remote buffer {}: entries", self.id),
                expected: "at least 1",
                got: "0".to_string(),
            });
        }
        let ir = self.ir()?;
        let state = ir.state.clone();
        let mut st = state.borrow_mut();
        st.building("setting RemoteBuffer.entries")?
            .set_remote_buffer_entries(self.id, entries)
            .map_err(PopXlError::from)
    }
}

/// The IR of the current graph context (remote buffers belong to an IR).
fn current_ir(what: &str) -> Result<Ir> {
    let g = context::try_current_graph().ok_or_else(|| PopXlError::NoGraphContext { what: what.to_string() })?;
    g.ir()
}

/// A new remote buffer of `entries` tensors of `shape` and `dtype` in the
/// current IR (PopXL's `popxl.remote_buffer`). `entries` below 1 is a
/// [`PopXlError::ValueOutOfRange`] (PopXL's `ValueError`).
///
/// ```
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let a = popxl::remote_buffer([2, 3], popxl::float32, 1).unwrap();
/// let b = popxl::remote_buffer([4], popxl::int32, 2).unwrap();
/// assert_eq!((a.id().0, b.id().0), (1, 2));
/// assert_eq!((b.tensor_shape(), b.tensor_dtype()), (&[4usize][..], popxl::int32));
/// assert!(popxl::remote_buffer([2], popxl::float32, 0).is_err());
/// ```
pub fn remote_buffer(shape: impl Into<Vec<usize>>, dtype: DataType, entries: usize) -> Result<RemoteBuffer> {
    let ir = current_ir("remote_buffer")?;
    let info = TensorInfo::new(dtype, shape.into());
    if entries == 0 {
        return Err(PopXlError::ValueOutOfRange {
            what: "remote_buffer: entries".to_string(),
            expected: "at least 1",
            got: "0".to_string(),
        });
    }
    let state = ir.state.clone();
    let id = {
        let mut st = state.borrow_mut();
        st.building("remote_buffer")?.add_remote_buffer(info.clone(), entries)?
    };
    Ok(RemoteBuffer { ir: std::sync::Arc::downgrade(&state), ir_id: ir.id(), id, info })
}

/// A variable initialised with `data` that lives in entry `offset` of remote
/// buffer `buf` (PopXL's `popxl.remote_variable`): `weights_from_host` writes
/// it there and `weights_to_host` reads it back; a session reads and writes it
/// with `get_tensor_data` / `write_variable_data` like any variable. On the
/// device, reach it with [`crate::ops::remote_load`] and
/// [`crate::ops::remote_store`] on `buf` at `offset`; no op may read the
/// returned tensor directly. The data is converted to the buffer's type
/// (checked); its shape must be the buffer's.
///
/// ```
/// use popxl::ops;
/// let ir = popxl::Ir::new();
/// let _g = ir.main_graph().enter();
/// let buf = popxl::remote_buffer([2], popxl::float32, 2).unwrap();
/// let w = popxl::remote_variable(vec![1.0f32, 2.0], &buf, 1, "w").unwrap();
/// assert!(w.is_variable());
/// let loaded = ops::remote_load(&buf, 1, "w_loaded").unwrap();
/// assert_eq!(loaded.shape(), &[2]);
/// assert!(popxl::remote_variable(vec![1.0f32, 2.0], &buf, 2, "bad").is_err()); // no entry 2
/// assert!(popxl::remote_variable(vec![3.0f32, 4.0], &buf, 1, "twice").is_err()); // entry 1 is taken
/// assert_eq!(ir.main_graph().variables().unwrap().len(), 1); // refused calls add nothing
/// assert!(ops::relu(&w).is_err()); // live in streaming memory: load them first
/// ```
pub fn remote_variable(data: impl Into<HostArray>, buf: &RemoteBuffer, offset: usize, name: &str) -> Result<Tensor> {
    let graph = context::try_current_graph()
        .ok_or_else(|| PopXlError::NoGraphContext { what: "remote_variable".to_string() })?;
    if graph.ir_id() != buf.ir_id {
        return Err(PopXlError::ForeignIr {
            name: format!("remote buffer {}", buf.id),
            what: "remote_variable".into(),
        });
    }
    let entries = buf.entries()?;
    if offset >= entries {
        return Err(PopXlError::IndexOutOfRange {
            what: format!("remote_variable `{name}`: offset into the entries of remote buffer {}:", buf.id),
            index: offset,
            len: entries,
        });
    }
    let data = data.into().cast_as(buf.tensor_dtype(), &format!("data of remote variable `{name}`"), true)?;
    if data.shape() != buf.tensor_shape() {
        return Err(PopXlError::ShapeMismatch {
            what: format!("remote_variable `{name}`: data for remote buffer {}", buf.id),
            expected: format!("of shape {:?}", buf.tensor_shape()),
            got: format!("{:?}", data.shape()),
        });
    }
    // Check the slot before creating the variable, so a refused call adds nothing.
    let taken = buf
        .ir()?
        .with_ir(|core| core.remote_variables().any(|(_, s)| s == RemoteSlot { buffer: buf.id, entry: offset }));
    if taken {
        return Err(PopXlError::RemoteEntryTaken { name: name.to_string(), buffer: buf.id.to_string(), entry: offset });
    }
    let t = crate::variables::variable_in_main(&graph, data, name)?;
    let state = graph.state()?;
    let mut st = state.borrow_mut();
    st.building("remote_variable")?.set_remote_variable(t.tensor_id(), RemoteSlot { buffer: buf.id, entry: offset })?;
    Ok(t)
}

impl Tensor {
    /// The remote buffer slot of a remote variable (`None` for any other tensor).
    pub fn remote_slot(&self) -> Option<RemoteSlot> {
        let g = self.graph();
        let ir = g.ir().ok()?;
        ir.with_ir(|core| if g.id() == core.main_graph_id() { core.remote_variable(self.tensor_id()) } else { None })
    }
}
