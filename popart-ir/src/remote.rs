//! Streaming memory: remote buffers and remote variables.
//!
//! A [`RemoteBuffer`] is an array of `entries` tensors of one type in the
//! device's streaming memory (off-chip DRAM on an IPU). Ops move tensors between
//! it and tile memory (`RemoteLoad`, `RemoteLoadInplace`, `RemoteStore` in
//! [`crate::ops::remote`]) at an entry given by an integer attribute or an
//! int32 tensor computed at run time. Ids are 1, 2, ... in creation order per
//! IR, as PopXL's `remote_buffer`.
//!
//! A *remote variable* is a main-graph variable whose home is one entry of a
//! remote buffer: `weights_from_host` writes its value there and
//! `weights_to_host` reads it back; on device it is reached only through
//! remote loads and stores of that buffer (no op may read it directly).
//!
//! Graphs loaded by `RemoteCodeLoad` get an implicit code buffer each, which is
//! not a [`RemoteBuffer`] (its size is the graph's code, known after lowering).

use std::collections::BTreeMap;
use std::fmt;

use crate::{Ir, IrError, Result, TensorId, TensorInfo, TensorKind};

/// Id of a remote buffer: 1, 2, ... in creation order within its IR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RemoteBufferId(pub u32);

impl fmt::Display for RemoteBufferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An array of `entries` tensors of type `info` in streaming memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteBuffer {
    /// Its id.
    pub id: RemoteBufferId,
    /// Type and shape of one entry.
    pub info: TensorInfo,
    /// Number of entries (at least 1).
    pub entries: usize,
}

impl RemoteBuffer {
    /// Bytes of the whole buffer (`entries` times the entry's bytes), or `None`
    /// when that overflows.
    pub fn checked_nbytes(&self) -> Option<usize> {
        self.info.checked_nbytes()?.checked_mul(self.entries)
    }
}

/// Where a remote variable lives: entry `entry` of buffer `buffer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteSlot {
    /// The buffer.
    pub buffer: RemoteBufferId,
    /// The entry.
    pub entry: usize,
}

/// The remote buffers and remote variables of an IR.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RemoteState {
    /// Buffer `k + 1` at position `k`.
    pub(crate) buffers: Vec<RemoteBuffer>,
    /// Main-graph variables living in remote buffers.
    pub(crate) variables: BTreeMap<TensorId, RemoteSlot>,
}

impl Ir {
    /// Create a remote buffer of `entries` tensors of type `info` (PopXL's
    /// `remote_buffer`). Errors: `entries` of 0 ([`IrError::Invalid`]) and a
    /// buffer whose bytes exceed [`crate::size::MAX_TENSOR_BYTES`].
    ///
    /// ```
    /// use popart_ir::{DataType, Ir, RemoteBufferId, TensorInfo};
    /// let mut ir = Ir::new();
    /// let b = ir.add_remote_buffer(TensorInfo::new(DataType::Float32, [2, 3]), 4).unwrap();
    /// assert_eq!(b, RemoteBufferId(1));
    /// assert_eq!(ir.remote_buffer(b).unwrap().entries, 4);
    /// assert!(ir.add_remote_buffer(TensorInfo::new(DataType::Float32, [2]), 0).is_err());
    /// ```
    pub fn add_remote_buffer(&mut self, info: TensorInfo, entries: usize) -> Result<RemoteBufferId> {
        let n = u32::try_from(self.remote.buffers.len() + 1)
            .map_err(|_| IrError::Invalid("more than 2^32 remote buffers".into()))?;
        let buf = RemoteBuffer { id: RemoteBufferId(n), info, entries };
        check_buffer(&buf)?;
        self.remote.buffers.push(buf);
        Ok(RemoteBufferId(n))
    }

    /// The remote buffer `id`.
    pub fn remote_buffer(&self, id: RemoteBufferId) -> Result<&RemoteBuffer> {
        (id.0 as usize)
            .checked_sub(1)
            .and_then(|k| self.remote.buffers.get(k))
            .ok_or_else(|| IrError::Invalid(format!("remote buffer {id} does not exist")))
    }

    /// Every remote buffer, by id.
    pub fn remote_buffers(&self) -> &[RemoteBuffer] {
        &self.remote.buffers
    }

    /// Set the number of entries of buffer `id` (PopXL's settable
    /// `RemoteBuffer.entries`). Errors: 0 entries, an unknown buffer, a size
    /// overflow, and fewer entries than a remote variable or a load or store
    /// with a constant offset already uses.
    pub fn set_remote_buffer_entries(&mut self, id: RemoteBufferId, entries: usize) -> Result<()> {
        let mut buf = self.remote_buffer(id)?.clone();
        buf.entries = entries;
        check_buffer(&buf)?;
        if let Some(used) = self.max_used_entry(id) {
            if used >= entries {
                return Err(IrError::Invalid(format!(
                    "remote buffer {id}: entry {used} is in use, so it cannot have {entries} entries"
                )));
            }
        }
        self.remote.buffers[id.0 as usize - 1] = buf;
        Ok(())
    }

    /// The highest entry of buffer `id` used by a remote variable or a constant
    /// offset of a remote load or store.
    fn max_used_entry(&self, id: RemoteBufferId) -> Option<usize> {
        let vars = self.remote.variables.values().filter(|s| s.buffer == id).map(|s| s.entry);
        let ops = self.graphs().flat_map(|g| g.ops()).filter_map(|op| {
            let b = op.attrs.int("remote_buffer")?;
            if b != i64::from(id.0) || op.input(1).is_some() {
                return None;
            }
            usize::try_from(op.attrs.int("offset").unwrap_or(0)).ok()
        });
        vars.chain(ops).max()
    }

    /// Make main-graph variable `tensor` a remote variable living at `slot`
    /// (PopXL's `remote_variable`). Errors: `tensor` is not a variable of the
    /// main graph, its type differs from the buffer's, the entry is out of
    /// range or already holds another remote variable, or an op reads it.
    pub fn set_remote_variable(&mut self, tensor: TensorId, slot: RemoteSlot) -> Result<()> {
        let buf = self.remote_buffer(slot.buffer)?;
        let t = self.main_graph().tensor(tensor)?;
        if !matches!(t.kind, TensorKind::Variable(_)) {
            return Err(IrError::Invalid(format!("`{}` is not a variable of the main graph", t.name)));
        }
        if t.info != buf.info {
            return Err(IrError::Invalid(format!(
                "variable `{}` is {} but remote buffer {} holds {}",
                t.name, t.info, slot.buffer, buf.info
            )));
        }
        if slot.entry >= buf.entries {
            return Err(IrError::Invalid(format!(
                "entry {} of remote buffer {} is out of range (it has {} entries)",
                slot.entry, slot.buffer, buf.entries
            )));
        }
        if let Some((&other, _)) = self.remote.variables.iter().find(|&(&o, s)| *s == slot && o != tensor) {
            let name = self.main_graph().tensor(other).map_or("?", |t| t.name.as_str());
            return Err(IrError::Invalid(format!(
                "entry {} of remote buffer {} already holds remote variable `{name}`",
                slot.entry, slot.buffer
            )));
        }
        if !t.consumers().is_empty() {
            return Err(IrError::Invalid(format!(
                "variable `{}` is read by ops, so it cannot live in streaming memory",
                t.name
            )));
        }
        self.remote.variables.insert(tensor, slot);
        Ok(())
    }

    /// Where main-graph variable `tensor` lives, if it is a remote variable.
    pub fn remote_variable(&self, tensor: TensorId) -> Option<RemoteSlot> {
        self.remote.variables.get(&tensor).copied()
    }

    /// Every remote variable (main-graph tensor, slot), in tensor-id order.
    pub fn remote_variables(&self) -> impl Iterator<Item = (TensorId, RemoteSlot)> + '_ {
        self.remote.variables.iter().map(|(&t, &s)| (t, s))
    }

    /// The remote-memory invariants (part of [`Ir::verify`]): every buffer has
    /// at least one entry and a representable size; every remote variable is a
    /// main-graph variable of its buffer's type, at a distinct in-range entry,
    /// read by no op.
    pub(crate) fn verify_remote(&self) -> Result<()> {
        for b in &self.remote.buffers {
            check_buffer(b)?;
        }
        let mut seen = std::collections::HashSet::new();
        for (&t, &slot) in &self.remote.variables {
            let buf = self.remote_buffer(slot.buffer)?;
            let tensor = self.main_graph().tensor(t)?;
            let bad = |msg: String| Err(IrError::Invalid(format!("remote variable `{}`: {msg}", tensor.name)));
            if !matches!(tensor.kind, TensorKind::Variable(_)) {
                return bad("not a variable".into());
            }
            if tensor.info != buf.info {
                return bad(format!("{} differs from its buffer's {}", tensor.info, buf.info));
            }
            if slot.entry >= buf.entries {
                return bad(format!("entry {} of buffer {} is out of range", slot.entry, slot.buffer));
            }
            if !seen.insert(slot) {
                return bad(format!("entry {} of buffer {} holds two variables", slot.entry, slot.buffer));
            }
            if let Some(port) = tensor.consumers().first() {
                let op = self.main_graph().op(port.op).map_or("?", |o| o.name.as_str());
                return bad(format!("read by op `{op}` (load it with a remote load instead)"));
            }
        }
        Ok(())
    }
}

fn check_buffer(b: &RemoteBuffer) -> Result<()> {
    if b.entries == 0 {
        return Err(IrError::Invalid(format!("remote buffer {} must have at least 1 entry, not 0", b.id)));
    }
    match b.checked_nbytes() {
        Some(n) if n <= crate::size::MAX_TENSOR_BYTES => Ok(()),
        _ => Err(IrError::Invalid(format!(
            "remote buffer {} is too large: {} entries of {} overflow the maximum tensor size",
            b.id, b.entries, b.info
        ))),
    }
}
