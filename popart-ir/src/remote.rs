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
    /// `remote_buffer`). Errors: `entries` of 0 ([`RemoteError::NoEntries`]) and a
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
        let n = u32::try_from(self.remote.buffers.len() + 1).map_err(|_| RemoteError::TooManyBuffers)?;
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
            .ok_or(IrError::Remote(RemoteError::UnknownBuffer(id)))
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
                return Err(RemoteError::EntryInUse { buffer: id, entry: used, entries }.into());
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
            let a = crate::ops::remote::transfer_attrs(op)?;
            if a.remote_buffer != i64::from(id.0) || op.input(1).is_some() {
                return None;
            }
            // No offset input and no offset attribute: entry 0.
            usize::try_from(a.offset.unwrap_or(0)).ok()
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
            return Err(RemoteError::NotAVariable { tensor: t.name.clone() }.into());
        }
        if t.info != buf.info {
            return Err(RemoteError::TypeMismatch {
                variable: t.name.clone(),
                info: t.info.clone(),
                buffer: slot.buffer,
                buffer_info: buf.info.clone(),
            }
            .into());
        }
        if slot.entry >= buf.entries {
            return Err(
                RemoteError::EntryOutOfRange { buffer: slot.buffer, entry: slot.entry, entries: buf.entries }.into()
            );
        }
        if let Some((&other, _)) = self.remote.variables.iter().find(|&(&o, s)| *s == slot && o != tensor) {
            let name = self.main_graph().tensor(other).map_or("?", |t| t.name.as_str());
            return Err(
                RemoteError::EntryTaken { buffer: slot.buffer, entry: slot.entry, holder: name.to_string() }.into()
            );
        }
        if let Some(port) = t.consumers().first() {
            let op = self.main_graph().op(port.op).map_or_else(|_| "?".to_string(), |o| o.name.clone());
            return Err(RemoteError::ReadByOp { variable: t.name.clone(), op }.into());
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
            if !matches!(tensor.kind, TensorKind::Variable(_)) {
                return Err(RemoteError::NotAVariable { tensor: tensor.name.clone() }.into());
            }
            if tensor.info != buf.info {
                return Err(RemoteError::TypeMismatch {
                    variable: tensor.name.clone(),
                    info: tensor.info.clone(),
                    buffer: slot.buffer,
                    buffer_info: buf.info.clone(),
                }
                .into());
            }
            if slot.entry >= buf.entries {
                return Err(RemoteError::EntryOutOfRange {
                    buffer: slot.buffer,
                    entry: slot.entry,
                    entries: buf.entries,
                }
                .into());
            }
            if !seen.insert(slot) {
                return Err(RemoteError::EntryTaken {
                    buffer: slot.buffer,
                    entry: slot.entry,
                    holder: tensor.name.clone(),
                }
                .into());
            }
            if let Some(port) = tensor.consumers().first() {
                let op = self.main_graph().op(port.op).map_or_else(|_| "?".to_string(), |o| o.name.clone());
                return Err(RemoteError::ReadByOp { variable: tensor.name.clone(), op }.into());
            }
        }
        Ok(())
    }
}

fn check_buffer(b: &RemoteBuffer) -> Result<()> {
    if b.entries == 0 {
        return Err(RemoteError::NoEntries(b.id).into());
    }
    match b.checked_nbytes() {
        Some(n) if n <= crate::size::MAX_TENSOR_BYTES => Ok(()),
        _ => Err(RemoteError::TooLarge { buffer: b.id, entries: b.entries, info: b.info.clone() }.into()),
    }
}

/// What is wrong with a remote buffer or remote variable request
/// ([`IrError::Remote`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RemoteError {
    /// More than 2^32 remote buffers.
    #[error("more than 2^32 remote buffers")]
    TooManyBuffers,
    /// A remote buffer id the IR does not hold.
    #[error("remote buffer {0} does not exist")]
    UnknownBuffer(RemoteBufferId),
    /// A remote buffer of 0 entries.
    #[error("remote buffer {0} must have at least 1 entry, not 0")]
    NoEntries(RemoteBufferId),
    /// A remote buffer whose byte size overflows the maximum tensor size.
    #[error("remote buffer {buffer} is too large: {entries} entries of {info} overflow the maximum tensor size")]
    TooLarge {
        /// The buffer.
        buffer: RemoteBufferId,
        /// Its entries.
        entries: usize,
        /// The type of one entry.
        info: TensorInfo,
    },
    /// Fewer entries than a remote variable or a constant offset uses.
    #[error("remote buffer {buffer}: entry {entry} is in use, so it cannot have {entries} entries")]
    EntryInUse {
        /// The buffer.
        buffer: RemoteBufferId,
        /// The highest entry in use.
        entry: usize,
        /// The entries asked for.
        entries: usize,
    },
    /// A remote variable that is not a variable of the main graph.
    #[error("`{tensor}` is not a variable of the main graph")]
    NotAVariable {
        /// The tensor's name.
        tensor: String,
    },
    /// A remote variable of another type than its buffer's entries.
    #[error("variable `{variable}` is {info} but remote buffer {buffer} holds {buffer_info}")]
    TypeMismatch {
        /// The variable's name.
        variable: String,
        /// Its type.
        info: TensorInfo,
        /// The buffer.
        buffer: RemoteBufferId,
        /// The type of the buffer's entries.
        buffer_info: TensorInfo,
    },
    /// An entry beyond the buffer's last.
    #[error("entry {entry} of remote buffer {buffer} is out of range (it has {entries} entries)")]
    EntryOutOfRange {
        /// The buffer.
        buffer: RemoteBufferId,
        /// The entry.
        entry: usize,
        /// The buffer's entries.
        entries: usize,
    },
    /// An entry that already holds another remote variable.
    #[error("entry {entry} of remote buffer {buffer} already holds remote variable `{holder}`")]
    EntryTaken {
        /// The buffer.
        buffer: RemoteBufferId,
        /// The entry.
        entry: usize,
        /// The variable already there.
        holder: String,
    },
    /// A variable in streaming memory read directly by an op (load it with a
    /// remote load first).
    #[error(
        "variable `{variable}` lives in streaming memory but op `{op}` reads it: load it with a remote load first"
    )]
    ReadByOp {
        /// The variable's name.
        variable: String,
        /// The op reading it.
        op: String,
    },
}
