//! Broadcast and stride plans: row-major strides and the collapsed iteration plan
//! of elementwise ops over broadcast operands.

use std::ops::Range;

/// Largest rank a kernel plan supports after collapsing contiguous dims.
pub(crate) const MAX_RANK: usize = 16;

/// Row-major strides (in elements) of `shape`.
pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Iteration plan of an elementwise op whose `N` operands broadcast to a
/// contiguous output: dims are collapsed wherever every operand stays contiguous,
/// so same-shape and scalar-broadcast cases become a single flat loop.
#[derive(Clone, Debug)]
pub(crate) struct Broadcast<const N: usize> {
    dims: Vec<usize>,
    strides: [Vec<usize>; N],
    len: usize,
}

impl<const N: usize> Broadcast<N> {
    /// Plan for operands of shapes `ins` broadcast to `out`; `None` if an operand
    /// does not broadcast to `out` or the collapsed rank exceeds [`MAX_RANK`].
    pub(crate) fn new(out: &[usize], ins: [&[usize]; N]) -> Option<Self> {
        let rank = out.len();
        let mut dims: Vec<usize> = Vec::with_capacity(rank);
        let mut strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::with_capacity(rank));
        let mut in_strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::new());
        for (k, s) in ins.iter().enumerate() {
            if s.len() > rank {
                return None;
            }
            in_strides[k] = contiguous_strides(s);
        }
        for (d, &od) in out.iter().enumerate() {
            if od == 1 {
                continue;
            }
            let mut st = [0usize; N];
            for k in 0..N {
                let s = ins[k];
                let off = rank - s.len();
                if d >= off {
                    let id = s[d - off];
                    if id == od {
                        st[k] = in_strides[k][d - off];
                    } else if id != 1 {
                        return None;
                    }
                }
            }
            // Merge with the previous dim when every operand stays contiguous.
            // (`strides[k]` has one entry per entry of `dims`.)
            if let Some(last) = dims.last_mut() {
                if (0..N).all(|k| strides[k].last() == Some(&(st[k] * od))) {
                    *last *= od;
                    for k in 0..N {
                        if let Some(s) = strides[k].last_mut() {
                            *s = st[k];
                        }
                    }
                    continue;
                }
            }
            dims.push(od);
            for k in 0..N {
                strides[k].push(st[k]);
            }
        }
        // Input dims that are not 1 where out is 1 would be invalid.
        for s in ins {
            let off = rank - s.len();
            if s.iter().enumerate().any(|(i, &id)| id != 1 && id != out[i + off]) {
                return None;
            }
        }
        if dims.is_empty() {
            dims.push(1);
            for st in strides.iter_mut() {
                st.push(0);
            }
        }
        if dims.len() > MAX_RANK {
            return None;
        }
        let len = out.iter().product();
        Some(Broadcast { dims, strides, len })
    }

    /// Number of output elements.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The collapsed output dims (at least one).
    pub(crate) fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Element strides of operand `k` per collapsed dim (0 where it broadcasts).
    pub(crate) fn strides(&self, k: usize) -> &[usize] {
        &self.strides[k]
    }

    /// Stride of the innermost collapsed dim per operand: 0 (broadcast) or 1.
    pub(crate) fn inner_strides(&self) -> [usize; N] {
        // `new` gives every operand at least one collapsed dim.
        std::array::from_fn(|k| self.strides[k].last().copied().unwrap_or(0))
    }

    /// Call `f(out_offset, operand_offsets, len)` for the contiguous output
    /// segments covering `range` (flat output indices), in order.
    #[inline(always)]
    pub(crate) fn for_segments(&self, range: Range<usize>, mut f: impl FnMut(usize, [usize; N], usize)) {
        if range.is_empty() {
            return;
        }
        let r = self.dims.len();
        let last = r - 1;
        let inner = self.dims[last];
        if r == 1 {
            let offs = std::array::from_fn(|k| range.start * self.strides[k][0]);
            f(range.start, offs, range.len());
            return;
        }
        let mut idx = [0usize; MAX_RANK];
        let mut rem = range.start;
        let mut offs = [0usize; N];
        for d in (0..r).rev() {
            idx[d] = rem % self.dims[d];
            rem /= self.dims[d];
            for (o, st) in offs.iter_mut().zip(&self.strides) {
                *o += idx[d] * st[d];
            }
        }
        let mut pos = range.start;
        while pos < range.end {
            let seg = (inner - idx[last]).min(range.end - pos);
            f(pos, offs, seg);
            pos += seg;
            if pos >= range.end {
                break;
            }
            // Advance the odometer by `seg` (which finishes the current row).
            idx[last] += seg;
            for (o, st) in offs.iter_mut().zip(&self.strides) {
                *o += seg * st[last];
            }
            let mut d = last;
            while idx[d] == self.dims[d] && d > 0 {
                for (o, st) in offs.iter_mut().zip(&self.strides) {
                    *o = *o + st[d - 1] - self.dims[d] * st[d];
                }
                idx[d] = 0;
                idx[d - 1] += 1;
                d -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments<const N: usize>(p: &Broadcast<N>, r: Range<usize>) -> Vec<(usize, [usize; N], usize)> {
        let mut v = Vec::new();
        p.for_segments(r, |o, offs, l| v.push((o, offs, l)));
        v
    }

    #[test]
    fn same_shape_collapses_to_one_segment() {
        let p = Broadcast::<2>::new(&[2, 3, 4], [&[2, 3, 4], &[2, 3, 4]]).unwrap();
        assert_eq!(segments(&p, 0..24), vec![(0, [0, 0], 24)]);
        assert_eq!(p.inner_strides(), [1, 1]);
    }

    #[test]
    fn scalar_broadcast_is_flat() {
        let p = Broadcast::<2>::new(&[5, 6], [&[5, 6], &[]]).unwrap();
        assert_eq!(segments(&p, 3..30), vec![(3, [3, 0], 27)]);
        assert_eq!(p.inner_strides(), [1, 0]);
    }

    #[test]
    fn row_and_column_broadcast_offsets_match_naive_indexing() {
        let out = [3usize, 4, 5];
        let shapes: [&[usize]; 3] = [&[3, 1, 5], &[4, 1], &[1, 4, 5]];
        let p = Broadcast::<3>::new(&out, shapes).unwrap();
        for (start, end) in [(0, 60), (7, 53), (19, 20)] {
            let mut covered = start;
            p.for_segments(start..end, |o, offs, len| {
                assert_eq!(o, covered);
                covered += len;
                for i in 0..len {
                    let flat = o + i;
                    let (a, b, c) = (flat / 20, (flat / 5) % 4, flat % 5);
                    let inner = p.inner_strides();
                    assert_eq!(offs[0] + i * inner[0], a * 5 + c);
                    assert_eq!(offs[1] + i * inner[1], b);
                    assert_eq!(offs[2] + i * inner[2], b * 5 + c);
                }
            });
            assert_eq!(covered, end);
        }
    }

    #[test]
    fn incompatible_shapes_are_rejected() {
        assert!(Broadcast::<2>::new(&[2, 3], [&[2, 3], &[2]]).is_none());
        assert!(Broadcast::<1>::new(&[3], [&[2, 3]]).is_none());
    }
}
