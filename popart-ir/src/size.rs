//! Checked sizes and fallible allocation.
//!
//! Every size that comes from a user (a shape, a repeat count, a number of host
//! transfers) is multiplied with checked arithmetic. A tensor admitted into an
//! [`Ir`](crate::Ir) has a byte size of at most [`MAX_TENSOR_BYTES`], so code
//! downstream of the IR may multiply its dimensions freely. Buffers whose size
//! comes from user data are allocated with [`try_zeroed_bytes`] and friends,
//! which return [`SizeError::OutOfMemory`] instead of aborting the process.

/// Largest byte size of one tensor: `isize::MAX`, Rust's limit on one allocation.
pub const MAX_TENSOR_BYTES: usize = isize::MAX as usize;

/// A size that overflows, or an allocation that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// A product or sum of sizes does not fit (in `usize`, or under [`MAX_TENSOR_BYTES`]).
    #[error("size of {what} overflows (more than {MAX_TENSOR_BYTES} bytes)")]
    Overflow {
        /// What was being sized, e.g. `tensor x float32[4294967296,4294967296]`.
        what: String,
    },
    /// The allocator refused a buffer.
    #[error("out of memory: cannot allocate {requested} bytes for {what}")]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
        /// What the buffer was for.
        what: String,
    },
}

/// Product of `dims`, or `None` on overflow (1 for no dims).
///
/// ```
/// use popart_ir::size::checked_product;
/// assert_eq!(checked_product(&[2, 3, 4]), Some(24));
/// assert_eq!(checked_product(&[usize::MAX, 2]), None);
/// assert_eq!(checked_product(&[usize::MAX, 0]), Some(0));
/// ```
pub fn checked_product(dims: &[usize]) -> Option<usize> {
    // A zero anywhere makes the product 0 however large the rest is.
    if dims.contains(&0) {
        return Some(0);
    }
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// A zero-filled byte buffer of length `n`, or [`SizeError::OutOfMemory`] if the
/// allocator refuses it (never an abort).
///
/// ```
/// use popart_ir::size::try_zeroed_bytes;
/// assert_eq!(try_zeroed_bytes(3, "demo").unwrap(), vec![0u8; 3]);
/// assert!(try_zeroed_bytes(usize::MAX / 2, "demo").is_err());
/// ```
pub fn try_zeroed_bytes(n: usize, what: &str) -> Result<Vec<u8>, SizeError> {
    if n > MAX_TENSOR_BYTES {
        return Err(SizeError::OutOfMemory { requested: n, what: what.to_string() });
    }
    // `alloc_zeroed` (calloc): fresh pages come zeroed from the kernel and cost
    // nothing until touched, as with `vec![0; n]`, but a refusal is an error.
    bytemuck::allocation::try_zeroed_slice_box::<u8>(n)
        .map(Vec::from)
        .map_err(|()| SizeError::OutOfMemory { requested: n, what: what.to_string() })
}

/// A vector of `n` default values, or [`SizeError::OutOfMemory`] if the allocator
/// refuses it or `n` elements of `T` exceed [`MAX_TENSOR_BYTES`].
pub fn try_zeroed_vec<T: Clone + Default>(n: usize, what: &str) -> Result<Vec<T>, SizeError> {
    let requested = n.saturating_mul(std::mem::size_of::<T>());
    let oom = || SizeError::OutOfMemory { requested, what: what.to_string() };
    if requested > MAX_TENSOR_BYTES {
        return Err(oom());
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| oom())?;
    v.resize(n, T::default());
    Ok(v)
}
