//! Atomic runs: what a failed run must undo, and the copy that undoes it.
//!
//! A program *may fail* when it has a kernel that may fail (the predicate given
//! at compile time: kernels built with run-time index checks, float8 scale
//! checks, custom kernels) or a remote transfer at a run-time offset. Only such
//! programs get a [`Saved`] copy, allocated once at compile time: the
//! permanent region of the arena (variables, seeds, constants) and every remote
//! buffer a remote store writes (remote buffers and remote variables). The
//! caller saves before a run ([`CpuExecutor::save_state`]) and restores after a
//! failure ([`CpuExecutor::restore_state`]); a program that cannot fail pays
//! nothing. The streams a program transfers are checked to be bound before it
//! starts ([`CpuExecutor::run`]), so an unbound stream never stops a program
//! halfway.

use super::{CpuError, CpuExecutor, Instr};

/// The device state a failed run restores, sized at compile time.
#[derive(Debug)]
pub(super) struct Saved {
    /// Bytes `0..permanent.len()` of the arena.
    permanent: Vec<u8>,
    /// (remote buffer index, its bytes) of every remote buffer a store writes.
    remote: Vec<(usize, Vec<u8>)>,
}

impl Saved {
    /// Buffers for `permanent_bytes` of the arena and the remote buffers
    /// `written` (indices) of `remote`.
    pub(super) fn allocate(permanent_bytes: usize, remote: &[Vec<u8>], written: &[bool]) -> Result<Saved, CpuError> {
        let what = "the device-state copy of a run that may fail";
        let permanent = popart_ir::size::try_zeroed_bytes(permanent_bytes, what)?;
        let mut copies = Vec::new();
        for (k, r) in remote.iter().enumerate() {
            if written.get(k).copied().unwrap_or(false) {
                copies.push((k, popart_ir::size::try_zeroed_bytes(r.len(), what)?));
            }
        }
        Ok(Saved { permanent, remote: copies })
    }
}

impl CpuExecutor {
    /// True when the main program may stop with an error (see the module
    /// docs): [`CpuExecutor::save_state`] then copies the device state.
    pub fn may_fail(&self) -> bool {
        self.saved.is_some()
    }

    /// Copy the state a failed run must undo (variables, constants, the
    /// remote buffers the programs store into). Does nothing for a program
    /// that cannot fail.
    pub fn save_state(&mut self) {
        if let Some(saved) = &mut self.saved {
            let n = saved.permanent.len();
            // SAFETY: `permanent_bytes <= arena_bytes` (checked at compile time);
            // the arena is initialised memory and no program is running (`&mut self`).
            let arena = unsafe { std::slice::from_raw_parts(self.arena.base() as *const u8, n) };
            saved.permanent.copy_from_slice(arena);
            for (k, copy) in &mut saved.remote {
                copy.copy_from_slice(&self.remote[*k]);
            }
        }
    }

    /// Put back the state [`CpuExecutor::save_state`] copied. Returns false
    /// (and changes nothing) for a program that cannot fail.
    pub fn restore_state(&mut self) -> bool {
        let Some(saved) = &self.saved else { return false };
        // SAFETY: as in `save_state`, for writes.
        unsafe { std::ptr::copy_nonoverlapping(saved.permanent.as_ptr(), self.arena.base(), saved.permanent.len()) };
        for (k, copy) in &saved.remote {
            self.remote[*k].copy_from_slice(copy);
        }
        true
    }

    /// The host streams the blocks reachable from `block` transfer (sorted,
    /// without repeats).
    pub(super) fn streams_of(blocks: &[Vec<Instr>], block: u32) -> Vec<u32> {
        let mut seen = vec![false; blocks.len()];
        let mut todo = vec![block];
        let mut streams = Vec::new();
        while let Some(b) = todo.pop() {
            let Some(slot) = seen.get_mut(b as usize) else { continue };
            if std::mem::replace(slot, true) {
                continue;
            }
            for instr in &blocks[b as usize] {
                match *instr {
                    Instr::Call { block } | Instr::Repeat { block, .. } => todo.push(block),
                    Instr::If { then_block, else_block, .. } => todo.extend([then_block, else_block]),
                    Instr::HostToDevice { stream, .. }
                    | Instr::DeviceToHost { stream, .. }
                    | Instr::HostToRemote { stream, .. }
                    | Instr::RemoteToHost { stream, .. } => streams.push(stream),
                    _ => {}
                }
            }
        }
        streams.sort_unstable();
        streams.dedup();
        streams
    }
}
