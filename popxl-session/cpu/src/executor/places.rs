//! Dynamic updates written in place.
//!
//! A `DynamicUpdateInplace(stash, index, x)` whose block is one contiguous
//! block of `stash` (one updated axis, every axis before it of size 1: a row
//! of a stacked tensor, as a `repeat` stashes its body's intermediates every
//! iteration) need not copy `x` when `x` is made by a kernel shortly before it:
//! that kernel writes its output straight into the block, its readers read it
//! there, and the copy is skipped. Which block is known only when the kernel
//! runs, so its output pointer and its readers' input pointers are set then
//! ([`Place::resolve`]). Exactly when:
//!
//! - `x` is an activation made by an output of a kernel earlier in the same
//!   sequence (the producer, not itself a slice read in place nor in place on
//!   `x`), referenced by nothing but that output and inputs of kernels after
//!   it in the sequence (no slice of `x` read in place among them), among
//!   them this update only, and no function's argument or result;
//! - from the producer to the update, only kernels run, none of which reads
//!   or writes the stash's arena bytes or writes the index's; from the update
//!   to `x`'s last reader, none writes the stash's bytes (the block then holds
//!   `x` either way), and no slice of the stash read in place is read from
//!   the producer to the update ([`disable_overlapping_views`]);
//! - a step along the updated axis is a multiple of 64 bytes (every block is
//!   as aligned as a buffer) and `x` fills the block.
//!
//! An index whose block is not in range (which the copy kernel clamps or
//! refuses, as its attributes say) leaves the producer writing `x` and runs
//! the copy: values and errors are the kernel's in every case.

use popart_ir::OpDefId;
use popart_lower::{BufferId, BufferKind, Executable, Program};

use super::views::{self, arg, Refs};

/// An update that can be written in place: what [`plan`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PlacePlan {
    /// The producer's position in the sequence.
    pub producer: usize,
    /// The producer's output (argument index) that is `x`.
    pub output: u32,
    /// As [`views::ViewPlan`]: the stash's updated axis.
    pub block: views::ViewPlan,
}

/// Whether the kernel call `seq[at]` is a `DynamicUpdateInplace` that can be
/// written in place (the module's conditions; `refs` from
/// [`views::count_refs`]).
pub(super) fn plan(exe: &Executable, refs: &Refs, seq: &[Program], at: usize) -> Option<PlacePlan> {
    let Program::Execute(k) = seq.get(at)? else { return None };
    if k.def.id() != OpDefId::of::<popart_ir::ops::all::DynamicUpdateInplace>() {
        return None;
    }
    let (stash, idx, x) = (arg(k, 0, true)?, arg(k, 1, true)?, arg(k, 2, true)?);
    let block = views::block(k, stash, idx, x)?;
    if block.step_bytes.checked_mul(usize::try_from(block.size).ok()?)? != x.info.nbytes() {
        return None;
    }
    let xb = exe.buffers.get(x.buffer.index())?;
    if xb.kind != BufferKind::Activation || x.buffer == stash.buffer || x.buffer == idx.buffer {
        return None;
    }
    if exe.functions.iter().any(|f| f.inputs.contains(&x.buffer) || f.outputs.contains(&x.buffer)) {
        return None;
    }
    let span = |b: BufferId| exe.buffers.get(b.index()).map(|x| (x.offset, x.offset + x.size));
    let overlaps = |b: BufferId, s: (usize, usize)| span(b).is_some_and(|(lo, hi)| lo < s.1 && s.0 < hi);
    let (stash_span, idx_span) = (span(stash.buffer)?, span(idx.buffer)?);
    // The producer: the kernel before the update writing `x`.
    let producer = (0..at).rev().find(|&p| match &seq[p] {
        Program::Execute(c) => c.outputs.iter().any(|o| o.buffer == x.buffer),
        _ => false,
    })?;
    let Program::Execute(pk) = &seq[producer] else { return None };
    let output = pk.outputs.iter().find(|o| o.buffer == x.buffer)?.index;
    if pk.inputs.iter().any(|i| i.buffer == x.buffer) || views::plan(exe, refs, seq, producer).is_some() {
        return None;
    }
    // Every reference to `x` from the producer on, the update's the only
    // update of it; the stash untouched up to the update, unwritten after.
    let total = *refs.buffers.get(x.buffer.index())?;
    let mut seen = 1u32;
    for (p, node) in seq.iter().enumerate().skip(producer) {
        if seen == total && p > at {
            break;
        }
        let Program::Execute(c) = node else { return None };
        let before = p <= at;
        for o in &c.outputs {
            let writes_stash = overlaps(o.buffer, stash_span) && p != at;
            if writes_stash || (before && overlaps(o.buffer, idx_span)) || (p != producer && o.buffer == x.buffer) {
                return None;
            }
        }
        if before && p != at && c.inputs.iter().any(|i| overlaps(i.buffer, stash_span)) {
            return None;
        }
        if p != producer {
            let reads = c.inputs.iter().filter(|i| i.buffer == x.buffer).count() as u32;
            let is_update = c.def.id() == OpDefId::of::<popart_ir::ops::all::DynamicUpdateInplace>();
            // A slice of `x` read in place would read `x`'s own buffer.
            if reads > 0 && ((is_update && p != at) || views::plan(exe, refs, seq, p).is_some()) {
                return None;
            }
            seen += reads;
        }
    }
    (seen == total).then_some(PlacePlan { producer, output, block })
}

/// A compiled update written in place: see the module.
pub(super) struct Place {
    /// The stash, the index and `x`'s own buffer.
    pub stash: *const u8,
    pub index: *const u8,
    pub own: *mut u8,
    /// `x`'s buffer, whose readers these are.
    pub buffer: BufferId,
    /// The stash's arena bytes.
    pub stash_span: (usize, usize),
    /// As [`PlacePlan::block`].
    pub block: views::ViewPlan,
    /// The producer's output pointer position.
    pub out_slot: u32,
    /// Input pointer positions of the kernels from the producer to the update.
    pub in_range: (u32, u32),
    /// Positions in the executor's input pointers of the readers' arguments.
    pub slots: Vec<u32>,
    /// Off when a slice of the stash read in place may be read in
    /// `in_range` (then the producer always writes `x` and the copy runs).
    pub enabled: bool,
    /// This run's producer wrote into the stash: the update is skipped.
    pub placed: bool,
}

impl Place {
    /// The block of the stash `x` is written to this run, or `None` when the
    /// producer writes `x` and the copy runs (see the module).
    ///
    /// # Safety
    /// `index` points to one element of `block.index`'s type and `stash` to
    /// the stash, `block.dim` steps of `block.step_bytes` (as compiled).
    pub unsafe fn resolve(&self) -> Option<*mut u8> {
        if !self.enabled {
            return None;
        }
        // SAFETY: this function's contract.
        let v = unsafe { views::read_index(self.index, self.block.index) }?;
        let fits = v >= 0 && v <= self.block.dim - self.block.size;
        // SAFETY: `v + size <= dim`: the block lies within the stash.
        fits.then(|| unsafe { self.stash.add(v as usize * self.block.step_bytes) as *mut u8 })
    }
}

/// Turns off every place where a slice of its stash read in place (`views`)
/// has a reader from the producer to the update: that reader would see the
/// block's new value early. `views` gives each view's reader slots and sliced arena bytes.
pub(super) fn disable_overlapping_views(places: &mut [Place], views: &[(Vec<u32>, (usize, usize))]) {
    for p in places.iter_mut() {
        let (lo, hi) = p.in_range;
        let hit = views.iter().any(|(slots, src)| {
            src.0 < p.stash_span.1 && p.stash_span.0 < src.1 && slots.iter().any(|&s| lo <= s && s < hi)
        });
        if hit {
            p.enabled = false;
        }
    }
}
