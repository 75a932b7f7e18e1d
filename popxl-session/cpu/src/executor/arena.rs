//! The executor's device memory ([`Arena`]) and its large-copy helper.

use super::{oom, LINE};
use crate::CpuError;

/// The device memory: zeroed, 64-byte aligned lines owned through a raw
/// pointer. Every pointer the compiled instructions hold derives from
/// [`Arena::base`] and every access of the executor goes through it; a `Box`
/// would be retagged as unique on each move or `&mut` use and so invalidate
/// those pointers (Miri's Stacked Borrows reports exactly that).
pub(super) struct Arena {
    base: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

impl Arena {
    /// At least `bytes` bytes (at least one line), or
    /// [`CpuError::OutOfMemory`]. Zeroed pages come from the allocator
    /// (`alloc_zeroed`), so a large arena costs nothing until it is touched.
    pub(super) fn zeroed(bytes: usize) -> Result<Arena, CpuError> {
        let size = bytes.div_ceil(LINE).max(1).checked_mul(LINE).ok_or_else(|| oom(bytes, "the device arena"))?;
        let layout = std::alloc::Layout::from_size_align(size, LINE).map_err(|_| oom(bytes, "the device arena"))?;
        // SAFETY: the layout has a non-zero size (at least one 64-byte line).
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = std::ptr::NonNull::new(p).ok_or_else(|| oom(layout.size(), "the device arena"))?;
        Ok(Arena { base, layout })
    }

    /// The first byte; valid for reads and writes of `layout.size()` bytes.
    pub(super) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Zero every byte.
    pub(super) fn clear(&mut self) {
        // SAFETY: the allocation holds `layout.size()` bytes; no program runs (`&mut self`).
        unsafe { std::ptr::write_bytes(self.base(), 0, self.layout.size()) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` by the global allocator with this layout.
        unsafe { std::alloc::dealloc(self.base(), self.layout) }
    }
}

/// Bytes from which a copy is split over the worker team.
pub(super) const PAR_COPY_MIN: usize = 1 << 18;

/// `copy_nonoverlapping` of `len` bytes, split over the worker team when large.
///
/// # Safety
/// As `std::ptr::copy_nonoverlapping`.
pub(super) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    let threads = crate::team::num_threads();
    if len < PAR_COPY_MIN || threads < 2 {
        // SAFETY: the caller's contract, that of `copy_nonoverlapping`.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    struct Ptrs(*const u8, *mut u8);
    // SAFETY: the tasks copy disjoint ranges of buffers that outlive the call.
    unsafe impl Sync for Ptrs {}
    impl Ptrs {
        /// Copy bytes `start..start + n`.
        ///
        /// # Safety
        /// The range lies within both buffers.
        unsafe fn copy(&self, start: usize, n: usize) {
            // SAFETY: `start + n` is within both buffers (this method's contract), which
            // do not overlap (`copy_bytes`'s).
            unsafe { std::ptr::copy_nonoverlapping(self.0.add(start), self.1.add(start), n) }
        }
    }
    let p = Ptrs(src, dst);
    let chunk = len.div_ceil(threads).next_multiple_of(4096);
    crate::team::run(len.div_ceil(chunk), &|i| {
        let start = i * chunk;
        // SAFETY: `start + n <= len`; ranges of different tasks are disjoint.
        unsafe { p.copy(start, chunk.min(len - start)) };
    });
}
