//! Scratch buffers shared by every kernel of the process that needs per-piece
//! working memory (convolutions' column buffers, attention's score blocks):
//! piece `p` of a running kernel uses slot `p`. Kernels grow the slots they use
//! when they are built (fallibly: a typed error, never an abort), never while
//! they run; a slot is locked while in use, so sessions running such kernels
//! on different threads take turns. A model with many such kernels pays for
//! one set of buffers.

use std::sync::{Arc, Mutex};

use super::spec::SpecExt;
use crate::kernel::{KernelError, KernelSpec};

/// One piece's scratch: `u64` words, so any element type up to 8 bytes is aligned.
pub(crate) type Slot = Arc<Mutex<Vec<u64>>>;

/// Slot `p`, created empty if it does not exist yet.
fn slot(p: usize) -> Slot {
    static SLOTS: Mutex<Vec<Slot>> = Mutex::new(Vec::new());
    let mut slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    while slots.len() <= p {
        slots.push(Arc::new(Mutex::new(Vec::new())));
    }
    slots[p].clone()
}

/// Grows `slot` to at least `words` words.
fn grow(spec: &KernelSpec<'_>, slot: &Slot, words: usize) -> Result<(), KernelError> {
    let mut v = slot.lock().unwrap_or_else(|e| e.into_inner());
    if v.len() < words {
        let extra = words - v.len();
        v.try_reserve_exact(extra)
            .map_err(|_| spec.error(format!("cannot allocate {words} words of kernel scratch")))?;
        v.resize(words, 0);
    }
    Ok(())
}

/// The scratch slots of `pieces` pieces, each grown to at least `words` words.
pub(crate) fn slots(spec: &KernelSpec<'_>, pieces: usize, words: usize) -> Result<Vec<Slot>, KernelError> {
    let mut scratch = Vec::with_capacity(pieces);
    for p in 0..pieces {
        let slot = slot(p);
        grow(spec, &slot, words)?;
        scratch.push(slot);
    }
    Ok(scratch)
}

/// The one slot the pieces of a kernel share (written once per run and read
/// by every piece, as the Winograd convolutions' transformed filters and
/// `lanes_wgrad`'s padded batch, or written by the pieces and read after
/// them, as the sums of a one-row product's pieces of rows), grown to at least `words` words. A kernel locks it before its pieces'
/// slots, and no kernel holding a piece's slot waits for it.
pub(crate) fn shared(spec: &KernelSpec<'_>, words: usize) -> Result<Slot, KernelError> {
    static SHARED: Mutex<Option<Slot>> = Mutex::new(None);
    let slot = SHARED.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(Slot::default).clone();
    grow(spec, &slot, words)?;
    Ok(slot)
}
