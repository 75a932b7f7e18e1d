//! Axis and slice arithmetic shared by shape inference and device kernels:
//! context-free functions returning [`AxisError`], which shape inference reports
//! as an inference error of its op and kernel factories as a kernel build error.

/// Why axis or slice attributes do not fit a tensor's rank or shape.
///
/// ```
/// use popart_ir::ops::{normalize_axis, AxisError};
/// assert_eq!(normalize_axis(3, 2), Err(AxisError::OutOfRange { axis: 3, rank: 2 }));
/// assert_eq!(AxisError::OutOfRange { axis: 3, rank: 2 }.to_string(), "axis 3 is out of range for rank 2");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AxisError {
    /// An axis outside `-rank..rank`.
    #[error("axis {axis} is out of range for rank {rank}")]
    OutOfRange {
        /// The axis given.
        axis: i64,
        /// The rank it was checked against.
        rank: usize,
    },
    /// A transpose `perm` that is not a permutation of the axes.
    #[error("{perm:?} is not a permutation of {rank} axes")]
    NotAPermutation {
        /// The `perm` given.
        perm: Vec<i64>,
        /// The rank of the transposed tensor.
        rank: usize,
    },
    /// Slice `starts`, `ends`, `steps` and `axes` of different lengths.
    #[error("starts, ends, steps and axes must have the same length")]
    SliceLengthMismatch,
    /// A slice step of 0.
    #[error("slice step cannot be 0")]
    ZeroSliceStep,
    /// The same axis listed twice (numpy: "duplicate value in 'axis'").
    #[error("axis {axis} is listed more than once in {axes:?}")]
    DuplicateAxis {
        /// The repeated axis, normalised.
        axis: usize,
        /// The axes given.
        axes: Vec<i64>,
    },
}

/// Normalise a possibly negative axis (`-1` is the last) against `rank`.
///
/// ```
/// use popart_ir::ops::normalize_axis;
/// assert_eq!(normalize_axis(-1, 3), Ok(2));
/// assert_eq!(normalize_axis(1, 3), Ok(1));
/// assert!(normalize_axis(-4, 3).is_err());
/// ```
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, AxisError> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(AxisError::OutOfRange { axis, rank });
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}

/// Normalise a list of axes against `rank`, sorted; empty means all axes. An axis
/// listed twice (`-1` and `2` of a rank-3 tensor, say) is an error, as in numpy.
///
/// ```
/// use popart_ir::ops::normalize_axes;
/// assert_eq!(normalize_axes(&[-1, 0], 3), Ok(vec![0, 2]));
/// assert!(normalize_axes(&[-1, 0, 2], 3).is_err());
/// assert_eq!(normalize_axes(&[], 2), Ok(vec![0, 1]));
/// assert!(normalize_axes(&[0, 5], 2).is_err());
/// ```
pub fn normalize_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>, AxisError> {
    if axes.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut v = axes.iter().map(|&a| normalize_axis(a, rank)).collect::<Result<Vec<_>, _>>()?;
    v.sort_unstable();
    if let Some(w) = v.windows(2).find(|w| w[0] == w[1]) {
        return Err(AxisError::DuplicateAxis { axis: w[0], axes: axes.to_vec() });
    }
    Ok(v)
}

/// The permutation of a transpose of a rank-`rank` tensor from its `perm`
/// attribute (axes may be negative; empty means reverse the axes).
///
/// ```
/// use popart_ir::ops::shape::transpose_perm;
/// assert_eq!(transpose_perm(&[], 3), Ok(vec![2, 1, 0]));
/// assert_eq!(transpose_perm(&[0, -1, 1], 3), Ok(vec![0, 2, 1]));
/// assert!(transpose_perm(&[0, 0, 1], 3).is_err());
/// ```
pub fn transpose_perm(perm: &[i64], rank: usize) -> Result<Vec<usize>, AxisError> {
    if perm.is_empty() {
        return Ok((0..rank).rev().collect());
    }
    let p: Vec<usize> = perm.iter().map(|&a| normalize_axis(a, rank)).collect::<Result<_, _>>()?;
    let mut sorted = p.clone();
    sorted.sort_unstable();
    if p.len() != rank || sorted != (0..rank).collect::<Vec<_>>() {
        return Err(AxisError::NotAPermutation { perm: perm.to_vec(), rank });
    }
    Ok(p)
}

/// One resolved slice along an axis: first index, step and number of elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceDim {
    /// Axis.
    pub axis: usize,
    /// First element taken.
    pub start: i64,
    /// Step (non-zero, may be negative).
    pub step: i64,
    /// Elements taken.
    pub len: usize,
}

/// Resolve numpy-style slices against `shape`: for each `k`, elements
/// `starts[k], starts[k] + steps[k], ..` up to (excluding) `ends[k]` along axis
/// `axes[k]`. Negative starts and ends count from the end of the axis; both are
/// then clamped to the axis (so out-of-range bounds mean "from the first" or
/// "past the last"), and steps may be negative. `steps` defaults to ones and
/// `axes` to `0..n`; all lists must have the length of `starts`.
///
/// ```
/// use popart_ir::ops::shape::{resolve_slices, SliceDim};
/// let s = resolve_slices(&[5, 4], &[1, -1], &[100, 0], Some(&[2, -1]), None).unwrap();
/// assert_eq!(s[0], SliceDim { axis: 0, start: 1, step: 2, len: 2 });
/// assert_eq!(s[1], SliceDim { axis: 1, start: 3, step: -1, len: 3 });
/// assert!(resolve_slices(&[5], &[0], &[1], Some(&[0]), None).is_err());
/// ```
pub fn resolve_slices(
    shape: &[usize],
    starts: &[i64],
    ends: &[i64],
    steps: Option<&[i64]>,
    axes: Option<&[i64]>,
) -> Result<Vec<SliceDim>, AxisError> {
    let n = starts.len();
    let steps: Vec<i64> = steps.map(<[i64]>::to_vec).unwrap_or_else(|| vec![1; n]);
    let axes: Vec<i64> = axes.map(<[i64]>::to_vec).unwrap_or_else(|| (0..n as i64).collect());
    if ends.len() != n || steps.len() != n || axes.len() != n {
        return Err(AxisError::SliceLengthMismatch);
    }
    let mut out: Vec<SliceDim> = Vec::with_capacity(n);
    for k in 0..n {
        let axis = normalize_axis(axes[k], shape.len())?;
        if out.iter().any(|d| d.axis == axis) {
            return Err(AxisError::DuplicateAxis { axis, axes });
        }
        let dim = i64::try_from(shape[axis]).unwrap_or(i64::MAX);
        let step = steps[k];
        if step == 0 {
            return Err(AxisError::ZeroSliceStep);
        }
        // In i128: `v + dim`, `end - start + step` and `-step` overflow i64 for
        // extreme attributes (`i64::MIN`, huge steps); the results fit back.
        let (dim, step128) = (dim as i128, step as i128);
        let norm = |v: i64, lo: i128, hi: i128| {
            let v = v as i128;
            (if v < 0 { v + dim } else { v }).clamp(lo, hi)
        };
        let (start, end) = if step > 0 {
            (norm(starts[k], 0, dim), norm(ends[k], 0, dim))
        } else {
            (norm(starts[k], -1, dim - 1), norm(ends[k], -1, dim - 1))
        };
        let len = if step > 0 && end > start {
            (end - start + step128 - 1) / step128
        } else if step < 0 && start > end {
            (start - end - step128 - 1) / -step128
        } else {
            0
        };
        // `start` is in -1..=dim and `len` in 0..=dim, so both fit their types.
        let (Ok(start), Ok(len)) = (i64::try_from(start), usize::try_from(len)) else {
            return Err(AxisError::OutOfRange { axis: axes[k], rank: shape.len() });
        };
        out.push(SliceDim { axis, start, step, len });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The indices a slice takes along one axis, the naive way.
    fn naive(dim: i64, start: i64, end: i64, step: i64) -> Vec<i64> {
        let fix = |v: i64| if v < 0 { v + dim } else { v };
        let (mut i, end) = (fix(start), fix(end));
        let mut out = Vec::new();
        if step > 0 {
            i = i.max(0);
            while i < end.min(dim) {
                out.push(i);
                i += step;
            }
        } else {
            i = i.min(dim - 1);
            while i > end.max(-1) {
                out.push(i);
                i += step;
            }
        }
        out
    }

    #[test]
    fn slices_match_naive_numpy_indexing() {
        for dim in [0i64, 1, 4, 7] {
            for start in -9..9 {
                for end in -9..9 {
                    for step in [-3i64, -2, -1, 1, 2, 3] {
                        let s = resolve_slices(&[dim as usize], &[start], &[end], Some(&[step]), None).unwrap()[0];
                        let got: Vec<i64> = (0..s.len as i64).map(|k| s.start + k * s.step).collect();
                        assert_eq!(got, naive(dim, start, end, step), "dim {dim} {start}:{end}:{step}");
                    }
                }
            }
        }
    }

    #[test]
    fn extreme_slice_attributes_do_not_overflow() {
        for v in [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX] {
            for step in [i64::MIN, i64::MIN + 1, -1, 1, i64::MAX] {
                let s = resolve_slices(&[7], &[v], &[-v.saturating_neg()], Some(&[step]), None).unwrap()[0];
                assert!(s.len <= 7);
                let s = resolve_slices(&[7], &[v], &[v], Some(&[step]), None).unwrap()[0];
                assert_eq!(s.len, 0);
            }
        }
        let s = resolve_slices(&[7], &[0], &[i64::MAX], Some(&[i64::MAX]), None).unwrap()[0];
        assert_eq!(s.len, 1);
        let s = resolve_slices(&[7], &[i64::MAX], &[i64::MIN], Some(&[i64::MIN]), None).unwrap()[0];
        assert_eq!((s.start, s.len), (6, 1));
    }

    #[test]
    fn slice_errors() {
        assert_eq!(resolve_slices(&[3], &[0], &[1, 2], None, None), Err(AxisError::SliceLengthMismatch));
        assert_eq!(resolve_slices(&[3], &[0], &[1], Some(&[0]), None), Err(AxisError::ZeroSliceStep));
        assert_eq!(resolve_slices(&[3], &[0], &[1], None, Some(&[1])), Err(AxisError::OutOfRange { axis: 1, rank: 1 }));
    }

    #[test]
    fn transpose_perm_rejects_short_and_repeated_axes() {
        assert_eq!(transpose_perm(&[1], 2), Err(AxisError::NotAPermutation { perm: vec![1], rank: 2 }));
        assert_eq!(transpose_perm(&[-2, 0], 2), Err(AxisError::NotAPermutation { perm: vec![-2, 0], rank: 2 }));
        assert_eq!(transpose_perm(&[2, 0], 2), Err(AxisError::OutOfRange { axis: 2, rank: 2 }));
    }
}
