//! The executor's device memory ([`Arena`]) and its large-copy helper.

use super::{oom, LINE};
use crate::CpuError;

/// The device memory: zeroed, 64-byte aligned lines owned through a raw
/// pointer. Every pointer the compiled instructions hold derives from
/// [`Arena::base`] and every access of the executor goes through it; a `Box`
/// would be retagged as unique on each move or `&mut` use and so invalidate
/// those pointers (Miri's Stacked Borrows reports exactly that).
///
/// On Linux an arena of at least [`HUGE_MIN`] bytes is mapped by itself,
/// 2 MiB aligned and advised for transparent huge pages: a step walks tens to
/// hundreds of MiB of activations, which 4 KiB pages cover with more TLB
/// entries than a core has.
pub(super) struct Arena {
    base: std::ptr::NonNull<u8>,
    size: usize,
    source: Source,
}

/// Where an arena's bytes come from.
enum Source {
    /// The global allocator, with this layout.
    Heap(std::alloc::Layout),
    /// An anonymous mapping of `len` bytes at `start` (Linux), `base` inside it.
    #[cfg(target_os = "linux")]
    Mapped { start: *mut u8, len: usize },
}

/// Bytes from which an arena is mapped for huge pages (Linux).
#[cfg(target_os = "linux")]
const HUGE_MIN: usize = 8 << 20;

/// A huge page of x86-64 and aarch64 Linux.
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

impl Arena {
    /// At least `bytes` bytes (at least one line), or
    /// [`CpuError::OutOfMemory`]. Zeroed pages come from the allocator
    /// (`alloc_zeroed`, or a fresh mapping), so a large arena costs nothing
    /// until it is touched.
    pub(super) fn zeroed(bytes: usize) -> Result<Arena, CpuError> {
        let size = bytes.div_ceil(LINE).max(1).checked_mul(LINE).ok_or_else(|| oom(bytes, "the device arena"))?;
        #[cfg(target_os = "linux")]
        if size >= HUGE_MIN {
            if let Some(arena) = Self::mapped(size) {
                return Ok(arena);
            }
        }
        let layout = std::alloc::Layout::from_size_align(size, LINE).map_err(|_| oom(bytes, "the device arena"))?;
        // SAFETY: the layout has a non-zero size (at least one 64-byte line).
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = std::ptr::NonNull::new(p).ok_or_else(|| oom(layout.size(), "the device arena"))?;
        Ok(Arena { base, size, source: Source::Heap(layout) })
    }

    /// `size` bytes of a fresh anonymous mapping (zeroed by the kernel),
    /// starting on a huge-page boundary and advised for huge pages; `None`
    /// when the mapping fails (the caller falls back to the allocator, which
    /// reports running out of memory).
    #[cfg(target_os = "linux")]
    fn mapped(size: usize) -> Option<Arena> {
        let len = size.checked_add(HUGE_PAGE)?;
        // Not `MAP_NORESERVE`: the kernel's overcommit check refuses a size the
        // machine cannot hold, here as in the allocator, so such an arena is
        // `OutOfMemory` at attach rather than a process killed on first touch.
        // SAFETY: a new private anonymous mapping; no existing memory is touched.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return None;
        }
        let start = start as *mut u8;
        let base = start.wrapping_add(start.align_offset(HUGE_PAGE));
        // SAFETY: `base..base + size` lies in the mapping (at most one huge page
        // of `len` precedes it). The advice is a hint: where the kernel has no
        // transparent huge pages it fails and the arena keeps small pages.
        unsafe { libc::madvise(base as *mut libc::c_void, size, libc::MADV_HUGEPAGE) };
        Some(Arena { base: std::ptr::NonNull::new(base)?, size, source: Source::Mapped { start, len } })
    }

    /// The first byte; valid for reads and writes of the arena's size in bytes.
    pub(super) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Zero every byte.
    pub(super) fn clear(&mut self) {
        // SAFETY: the arena holds `size` bytes; no program runs (`&mut self`).
        unsafe { std::ptr::write_bytes(self.base(), 0, self.size) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        match self.source {
            // SAFETY: allocated in `zeroed` by the global allocator with this layout.
            Source::Heap(layout) => unsafe { std::alloc::dealloc(self.base(), layout) },
            // SAFETY: the mapping `mapped` made; nothing points into it any more.
            #[cfg(target_os = "linux")]
            Source::Mapped { start, len } => unsafe {
                libc::munmap(start as *mut libc::c_void, len);
            },
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Small and large arenas are zeroed, writable and cleared; a large one on
    /// Linux starts on a huge-page boundary.
    #[test]
    fn arenas_are_zeroed_aligned_and_cleared() {
        for bytes in [1, 100, 9 << 20] {
            let mut a = Arena::zeroed(bytes).unwrap();
            assert_eq!(a.base() as usize % LINE, 0);
            #[cfg(target_os = "linux")]
            if bytes >= HUGE_MIN {
                assert_eq!(a.base() as usize % HUGE_PAGE, 0);
            }
            // SAFETY: the arena holds at least `bytes` bytes.
            let all = unsafe { std::slice::from_raw_parts_mut(a.base(), bytes) };
            assert!(all.iter().all(|&b| b == 0));
            all.iter_mut().for_each(|b| *b = 7);
            a.clear();
            // SAFETY: as above.
            let all = unsafe { std::slice::from_raw_parts(a.base(), bytes) };
            assert!(all.iter().all(|&b| b == 0));
        }
    }
}
