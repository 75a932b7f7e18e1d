//! Streaming memory of the executor: entries of remote buffers, read and
//! written by the session (remote variables) and addressed by the remote
//! transfer instructions.

use popart_ir::RemoteBufferId;

use super::{BindError, CpuExecutor, Offset, Stop};

impl CpuExecutor {
    /// The bytes of entry `entry` of remote buffer `id` (streaming memory).
    pub fn remote_entry(&self, id: RemoteBufferId, entry: usize) -> Result<&[u8], BindError> {
        let (k, len) = self.remote_range(id, entry)?;
        Ok(&self.remote[k][entry * len..(entry + 1) * len])
    }

    /// Overwrite entry `entry` of remote buffer `id` with `bytes` (one entry's bytes).
    pub fn write_remote_entry(&mut self, id: RemoteBufferId, entry: usize, bytes: &[u8]) -> Result<(), BindError> {
        let (k, len) = self.remote_range(id, entry)?;
        if bytes.len() != len {
            return Err(BindError::RemoteEntry { buffer: id.0, entry, entries: self.remote_entries[k] });
        }
        self.remote[k][entry * len..(entry + 1) * len].copy_from_slice(bytes);
        Ok(())
    }

    /// (index, entry bytes) of remote buffer `id`, checking that `entry` exists.
    pub(super) fn remote_range(&self, id: RemoteBufferId, entry: usize) -> Result<(usize, usize), BindError> {
        let k = (id.0 as usize).wrapping_sub(1);
        let (Some(&len), Some(&entries)) = (self.remote_entry_bytes.get(k), self.remote_entries.get(k)) else {
            return Err(BindError::RemoteEntry { buffer: id.0, entry, entries: 0 });
        };
        if entry >= entries {
            return Err(BindError::RemoteEntry { buffer: id.0, entry, entries });
        }
        Ok((k, len))
    }

    /// First byte of the entry a remote transfer addresses, checked against the
    /// buffer (an offset tensor holding an entry the buffer lacks stops the run).
    pub(super) fn remote_start(&self, buffer: u32, offset: Offset, len: usize) -> Result<usize, Stop> {
        let entry = match offset {
            Offset::Entry(e) => e as i64,
            // SAFETY: a 4-byte int32 or uint32 buffer within the arena (checked
            // at compile time); the arena is 64-byte aligned with 64-byte aligned offsets.
            Offset::Tensor { ptr, signed: true } => i64::from(unsafe { *(ptr as *const i32) }),
            // SAFETY: as above.
            Offset::Tensor { ptr, signed: false } => i64::from(unsafe { *(ptr as *const u32) }),
        };
        let total = self.remote[buffer as usize].len();
        match usize::try_from(entry).ok().and_then(|e| e.checked_mul(len)) {
            Some(start) if start.checked_add(len).is_some_and(|end| end <= total) => Ok(start),
            _ => Err(Stop::RemoteOffset(buffer, entry)),
        }
    }
}
