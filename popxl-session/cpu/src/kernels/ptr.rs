//! Raw-pointer helpers of the kernels: [`SendPtr`] for moving output pointers
//! into parallel tasks, and slices from pointers that never touch them when empty.

/// A raw pointer that may be moved into parallel tasks. The kernels guarantee
/// that tasks touch disjoint parts of output buffers.
#[derive(Debug)]
pub(crate) struct SendPtr<T>(pub *mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: only used for buffers the executor hands to a kernel run, which outlive
// the run; concurrent tasks write disjoint ranges.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the whole `SendPtr`).
    #[inline(always)]
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

/// A read-only slice from a raw pointer; empty slices do not touch the pointer.
///
/// # Safety
/// `p` must be valid for `n` reads of `T` for the chosen lifetime.
#[inline(always)]
pub(crate) unsafe fn slice<'a, T>(p: *const T, n: usize) -> &'a [T] {
    if n == 0 {
        &[]
    } else {
        // SAFETY: `p` is valid for `n > 0` reads (this function's contract).
        unsafe { std::slice::from_raw_parts(p, n) }
    }
}

/// A mutable slice from a raw pointer; empty slices do not touch the pointer.
///
/// # Safety
/// `p` must be valid for `n` writes of `T` and not aliased for the chosen lifetime.
#[inline(always)]
pub(crate) unsafe fn slice_mut<'a, T>(p: *mut T, n: usize) -> &'a mut [T] {
    if n == 0 {
        &mut []
    } else {
        // SAFETY: `p` is valid for `n > 0` writes and not aliased (this function's contract).
        unsafe { std::slice::from_raw_parts_mut(p, n) }
    }
}
