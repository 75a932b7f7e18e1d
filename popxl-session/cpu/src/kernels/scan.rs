//! Scans: `CumSum{axis, exclusive, reverse}`.
//!
//! The input is viewed as `[outer, n, inner]` around the scanned axis. With
//! `inner > 1` each step adds a contiguous row of `inner` lanes to the previous
//! output row (vectorised); with `inner == 1` eight rows are scanned at once so
//! their dependency chains overlap.

use super::dispatch::with_num;
use super::elem::Num;
use super::float16::{f16_adapter, has_f16};
use super::par::{par_split, PAR_MIN_ELEMS};
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{boxed, norm_axis, BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};
use popart_ir::ops::all as ir;
use popart_ir::ops::scan::CumSumAttrs;

struct CumSum<T> {
    outer: usize,
    n: usize,
    inner: usize,
    exclusive: bool,
    reverse: bool,
    src: usize,
    _t: Types<T>,
}

impl<T: Num> CumSum<T> {
    /// Position `j` of the scan order (`reverse` runs from the end).
    #[inline(always)]
    fn at(&self, j: usize) -> usize {
        if self.reverse {
            self.n - 1 - j
        } else {
            j
        }
    }

    /// Scan lanes `cols` of the outer slices `rows` (`inner > 1`).
    ///
    /// # Safety
    /// `x` and `y` hold the `[outer, n, inner]` tensor, `rows` and `cols` lie in
    /// `0..outer` and `0..inner`, `y` overlaps not `x`, and no one else touches
    /// these lanes of `y` meanwhile.
    unsafe fn scan_columns(&self, x: *const T, y: *mut T, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>) {
        let (n, inner, w) = (self.n, self.inner, cols.len());
        for r in rows {
            let base = r * n * inner + cols.start;
            let row = |j: usize| base + self.at(j) * inner;
            if n == 0 {
                continue;
            }
            // SAFETY: `row(j) + w` stays within slice `r`'s lanes `cols` of both
            // tensors (this method's contract).
            let first = unsafe { slice_mut(y.add(row(0)), w) };
            if self.exclusive {
                first.fill(T::ZERO);
            } else {
                // SAFETY: as above.
                first.copy_from_slice(unsafe { slice(x.add(row(0)), w) });
            }
            for j in 1..n {
                // SAFETY: as above; `row(j - 1)` and `row(j)` are different rows of `y`
                // (`at` is a permutation), so `prev` and the output do not overlap.
                let (prev, xs, out) = unsafe {
                    (
                        slice(y.add(row(j - 1)), w),
                        slice(x.add(if self.exclusive { row(j - 1) } else { row(j) }), w),
                        slice_mut(y.add(row(j)), w),
                    )
                };
                for ((out, &p), &v) in out.iter_mut().zip(prev).zip(xs) {
                    *out = p.add(v);
                }
            }
        }
    }

    /// Scan the contiguous rows `rows` (`inner == 1`), eight at a time.
    ///
    /// # Safety
    /// `x` and `y` hold the `[outer, n]` tensor, `rows` lies in `0..outer`, `y`
    /// overlaps not `x`, and no one else touches these rows of `y` meanwhile.
    unsafe fn scan_rows(&self, x: *const T, y: *mut T, rows: std::ops::Range<usize>) {
        const L: usize = 8;
        let n = self.n;
        let mut r = rows.start;
        while r < rows.end {
            let k = L.min(rows.end - r);
            let mut acc = [T::ZERO; L];
            // SAFETY: rows `r..r + k` lie in `rows` (this method's contract), and
            // `l < k`, `p < n` address element `p` of row `r + l` below.
            let (xb, yb) = unsafe { (x.add(r * n), y.add(r * n)) };
            for j in 0..n {
                let p = self.at(j);
                for (l, a) in acc.iter_mut().enumerate().take(k) {
                    // SAFETY: as above.
                    let v = unsafe { *xb.add(l * n + p) };
                    if self.exclusive {
                        // SAFETY: as above.
                        unsafe { *yb.add(l * n + p) = *a };
                        *a = a.add(v);
                    } else {
                        *a = a.add(v);
                        // SAFETY: as above.
                        unsafe { *yb.add(l * n + p) = *a };
                    }
                }
            }
            r += k;
        }
    }
}

impl<T: Num> Kernel for CumSum<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let x = SendPtr(args.inputs[self.src] as *mut T);
        let y = SendPtr(args.outputs[0] as *mut T);
        let (outer, inner) = (self.outer, self.inner);
        let total = outer * self.n * inner;
        if inner == 1 {
            par_split(
                outer,
                if total >= PAR_MIN_ELEMS { 2 } else { usize::MAX },
                8,
                #[inline(always)]
                |r| {
                    // SAFETY: pieces own disjoint rows of input and output.
                    unsafe { self.scan_rows(x.get(), y.get(), r) }
                },
            );
        } else if outer >= 8 || total < PAR_MIN_ELEMS {
            par_split(
                outer,
                if total >= PAR_MIN_ELEMS { 2 } else { usize::MAX },
                1,
                #[inline(always)]
                |r| {
                    // SAFETY: pieces own disjoint outer slices.
                    unsafe { self.scan_columns(x.get(), y.get(), r, 0..inner) }
                },
            );
        } else {
            par_split(
                inner,
                2,
                256,
                #[inline(always)]
                |c| {
                    // SAFETY: pieces own disjoint lanes of every row.
                    unsafe { self.scan_columns(x.get(), y.get(), 0..outer, c) }
                },
            );
        }
        Ok(())
    }
}

fn build_cumsum(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_cumsum);
    }
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    if y.info != x.info {
        return Err(spec.error(format!("output {} must match the input {}", y.info, x.info)));
    }
    let CumSumAttrs { axis, exclusive, reverse } = spec.typed()?;
    let axis = norm_axis(spec, axis, x.info.rank())?;
    let shape = x.shape();
    let (outer, n, inner) = (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product());
    let dt = x.dtype();
    with_num!(dt, T => boxed(CumSum::<T> { outer, n, inner, exclusive, reverse, src: x.pos, _t: Types::default() }),
        _ => Err(spec.unsupported_dtype(dt)))
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[(&ir::CumSum, build_cumsum)];
