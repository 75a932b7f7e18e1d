//! Row-vector products: one contiguous row of `k` elements times a `k × n`
//! matrix, the products of decoding one position (a GEMM with `m = 1`). A
//! packed GEMM copies the matrix into its panel layout at every call, which
//! costs more than the product itself when the row is alone; these loops read
//! the matrix once, in its own layout:
//!
//! - rows contiguous (`rhs_cs == 1`, a weight `[k, n]`): the rows stream past
//!   in memory order, adding into a block of partial sums kept in L1;
//! - columns contiguous (`rhs_rs == 1`, a transposed weight `[n, k]`): one dot
//!   product per column, four columns at a time.
//!
//! Each result element is summed in a fixed order whatever the thread split:
//! over `k` (in lanes, then the lanes in a fixed tree, when columns are
//! contiguous). A large matrix of contiguous rows is summed in pieces of
//! [`piece_rows`] rows (a function of the shape only), then the pieces'
//! sums are added in order: one thread sums them one after another, a team
//! sums each piece on its own (one contiguous stretch of the matrix per task,
//! which the hardware prefetcher streams at the memory's full speed, where a
//! split over columns reads every row in short segments) and adds them
//! after, with the same values.

use super::super::par::Simd;

/// Result columns summed per pass over the rows (rows-contiguous case): a
/// block of partial sums that stays in L1.
const BLOCK: usize = 1024;
/// Lanes of a dot product's partial sums (columns-contiguous case).
const LANES: usize = 16;
/// Matrix elements from which a matrix of contiguous rows is summed in
/// pieces.
const PIECE_MIN: usize = 1 << 16;
/// Most pieces of one product (a piece is at least [`PIECE_MIN`] / 2 elements).
pub(crate) const MAX_PIECES: usize = 4;

/// Rows per piece of a `k × n` matrix of contiguous rows (`k` when it is
/// not cut): at least 64 and half of [`PIECE_MIN`] elements per piece, a
/// multiple of 4 (the loops' row groups), at most [`MAX_PIECES`] pieces.
/// A function of the shape only, so the sums do not depend on the threads.
pub(crate) fn piece_rows(k: usize, n: usize) -> usize {
    let elems = k.saturating_mul(n);
    if elems < PIECE_MIN {
        return k.max(1);
    }
    let pieces = (k / 64).min(elems / (PIECE_MIN / 2)).clamp(1, MAX_PIECES);
    k.div_ceil(pieces).next_multiple_of(4)
}

/// Element types the row-vector loops run on.
pub(crate) trait GemvElem: Copy + Default + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> {}
impl GemvElem for f32 {}
impl GemvElem for f64 {}

/// One row-vector product: `dst[j] = alpha · dst[j] + beta · Σ_p lhs[p] · rhs[p, j]`
/// when `read_dst`, else `beta · Σ_p ...`, for `j` in `0..n`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowProduct<T> {
    /// Columns.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Result column stride.
    pub dst_cs: isize,
    /// The matrix's (row, column) strides; one of them is 1.
    pub rhs_s: (isize, isize),
    /// Scale of the old result (with `read_dst`).
    pub alpha: T,
    /// Scale of the product.
    pub beta: T,
    /// Whether the old result is read.
    pub read_dst: bool,
    /// Rows per piece of a matrix of contiguous rows ([`piece_rows`]; `k`
    /// or more: one piece).
    pub piece_rows: usize,
}

/// Whether the loops take a product of `m` rows with these strides (one row,
/// contiguous; the matrix contiguous along its rows or its columns).
pub(crate) fn applies(m: usize, lhs_cs: isize, rhs_s: (isize, isize)) -> bool {
    m == 1 && lhs_cs == 1 && (rhs_s.1 == 1 || rhs_s.0 == 1)
}

impl<T: GemvElem> RowProduct<T> {
    /// Run it, compiled for the widest SIMD tier of this CPU.
    ///
    /// # Safety
    /// `lhs` holds `k` contiguous elements; `rhs` addresses a `k × n` matrix
    /// through `rhs_s`, and `dst` `n` elements through `dst_cs`, overlapping
    /// neither operand.
    pub(crate) unsafe fn run(&self, dst: *mut T, lhs: *const T, rhs: *const T) {
        Simd::best().run(
            #[inline(always)]
            || {
                if self.rhs_s.1 == 1 {
                    // SAFETY: this function's contract.
                    unsafe { self.rows_contiguous(dst, lhs, rhs) }
                } else {
                    // SAFETY: this function's contract.
                    unsafe { self.columns_contiguous(dst, lhs, rhs) }
                }
            },
        )
    }

    /// Store the sum `acc` of column `j`.
    ///
    /// # Safety
    /// `j < n`, `dst` as in [`Self::run`].
    #[inline(always)]
    unsafe fn store(&self, dst: *mut T, j: usize, acc: T) {
        // SAFETY: `j` is one of the `n` result elements.
        unsafe {
            let d = dst.offset(j as isize * self.dst_cs);
            *d = if self.read_dst { self.alpha * *d + self.beta * acc } else { self.beta * acc };
        }
    }

    /// The matrix is read row by row, in memory order (so the hardware
    /// prefetcher streams it), four rows per pass over a block of partial
    /// sums that stays in L1; each column's sum is taken over `p` in order
    /// within each piece of [`Self::piece_rows`] rows, then the pieces' sums
    /// are added in order.
    ///
    /// # Safety
    /// As [`Self::run`], with `rhs_s.1 == 1`.
    #[inline(always)]
    unsafe fn rows_contiguous(&self, dst: *mut T, lhs: *const T, rhs: *const T) {
        let (n, k) = (self.n, self.k);
        // SAFETY: `lhs` holds `k` elements (contract).
        let row = unsafe { std::slice::from_raw_parts(lhs, k) };
        let step = self.piece_rows.max(1);
        let mut sums = [T::default(); BLOCK];
        let mut piece = [T::default(); BLOCK];
        let mut j0 = 0;
        while j0 < n {
            let w = BLOCK.min(n - j0);
            for (i, p0) in (0..k).step_by(step).enumerate() {
                let acc = if i == 0 { &mut sums[..w] } else { &mut piece[..w] };
                // SAFETY: rows `p0..` of the `k` and columns `j0..j0 + w` of the `n`
                // (contract).
                unsafe { self.accumulate(acc, row, p0..(p0 + step).min(k), j0, rhs) };
                if i > 0 {
                    for (s, &v) in sums[..w].iter_mut().zip(&piece[..w]) {
                        *s = *s + v;
                    }
                }
            }
            if k == 0 {
                sums[..w].fill(T::default());
            }
            for (c, &s) in sums[..w].iter().enumerate() {
                // SAFETY: column `j0 + c < n`.
                unsafe { self.store(dst, j0 + c, s) };
            }
            j0 += w;
        }
    }

    /// `acc[c] = Σ_{p in rows} row[p] · rhs[p, j0 + c]`, in order over `p`
    /// (four rows per pass).
    ///
    /// # Safety
    /// As [`Self::rows_contiguous`]; `rows` lies in `0..k`, columns
    /// `j0..j0 + acc.len()` in `0..n`.
    #[inline(always)]
    unsafe fn accumulate(&self, acc: &mut [T], row: &[T], rows: std::ops::Range<usize>, j0: usize, rhs: *const T) {
        let w = acc.len();
        acc.fill(T::default());
        // SAFETY: row `p`, columns `j0..j0 + w` of the matrix, contiguous.
        let rhs_row =
            |p: usize| unsafe { std::slice::from_raw_parts(rhs.offset(p as isize * self.rhs_s.0).add(j0), w) };
        let quads = rows.start + (rows.len() - rows.len() % 4);
        for p in (rows.start..quads).step_by(4) {
            let (a0, a1, a2, a3) = (row[p], row[p + 1], row[p + 2], row[p + 3]);
            let (r0, r1, r2, r3) = (rhs_row(p), rhs_row(p + 1), rhs_row(p + 2), rhs_row(p + 3));
            for ((((s, &b0), &b1), &b2), &b3) in acc.iter_mut().zip(r0).zip(r1).zip(r2).zip(r3) {
                *s = *s + a0 * b0 + a1 * b1 + a2 * b2 + a3 * b3;
            }
        }
        for (p, &a) in row.iter().enumerate().take(rows.end).skip(quads) {
            for (s, &b) in acc.iter_mut().zip(rhs_row(p)) {
                *s = *s + a * b;
            }
        }
    }

    /// # Safety
    /// As [`Self::run`], with `rhs_s.0 == 1`.
    #[inline(always)]
    unsafe fn columns_contiguous(&self, dst: *mut T, lhs: *const T, rhs: *const T) {
        let (n, k) = (self.n, self.k);
        // SAFETY: `lhs` holds `k` elements (contract).
        let row = unsafe { std::slice::from_raw_parts(lhs, k) };
        // SAFETY: column `j` of the matrix, `k` contiguous elements.
        let column = |j: usize| unsafe { std::slice::from_raw_parts(rhs.offset(j as isize * self.rhs_s.1), k) };
        let mut j = 0;
        while j + 4 <= n {
            let cols = [column(j), column(j + 1), column(j + 2), column(j + 3)];
            let mut acc = [[T::default(); LANES]; 4];
            let body = k - k % LANES;
            for (i, a) in row.chunks_exact(LANES).enumerate() {
                let Ok(a) = <&[T; LANES]>::try_from(a) else { continue };
                for (acc, col) in acc.iter_mut().zip(&cols) {
                    let Ok(b) = <&[T; LANES]>::try_from(&col[i * LANES..(i + 1) * LANES]) else { continue };
                    for l in 0..LANES {
                        acc[l] = acc[l] + a[l] * b[l];
                    }
                }
            }
            for (c, (acc, col)) in acc.iter().zip(&cols).enumerate() {
                let tail = row[body..].iter().zip(&col[body..]).fold(T::default(), |s, (&a, &b)| s + a * b);
                // SAFETY: column `j + c < n`.
                unsafe { self.store(dst, j + c, reduce_lanes(acc) + tail) };
            }
            j += 4;
        }
        for j in j..n {
            let col = column(j);
            let mut acc = [T::default(); LANES];
            let body = k - k % LANES;
            for (a, b) in row.chunks_exact(LANES).zip(col.chunks_exact(LANES)) {
                let (Ok(a), Ok(b)) = (<&[T; LANES]>::try_from(a), <&[T; LANES]>::try_from(b)) else { continue };
                for l in 0..LANES {
                    acc[l] = acc[l] + a[l] * b[l];
                }
            }
            let tail = row[body..].iter().zip(&col[body..]).fold(T::default(), |s, (&a, &b)| s + a * b);
            // SAFETY: column `j < n`.
            unsafe { self.store(dst, j, reduce_lanes(&acc) + tail) };
        }
    }
}

/// The lanes summed in a fixed tree.
#[inline(always)]
fn reduce_lanes<T: GemvElem>(acc: &[T; LANES]) -> T {
    let mut v = *acc;
    let mut w = LANES / 2;
    while w > 0 {
        for l in 0..w {
            v[l] = v[l] + v[l + w];
        }
        w /= 2;
    }
    v[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The f64 definition, row-major `rhs` of `k × n` read through `rhs_s`.
    fn naive(row: &[f32], rhs: &[f32], rhs_s: (isize, isize), n: usize) -> Vec<f64> {
        (0..n)
            .map(|j| {
                (0..row.len())
                    .map(|p| row[p] as f64 * rhs[(p as isize * rhs_s.0 + j as isize * rhs_s.1) as usize] as f64)
                    .sum()
            })
            .collect()
    }

    /// Values in `-0.5..0.5` from a linear congruential generator seeded by `seed`.
    fn uniform(mut seed: u64) -> impl FnMut() -> f32 {
        move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        }
    }

    #[test]
    fn both_layouts_match_the_definition() {
        let mut next = uniform(7);
        for &(k, n) in &[(1, 1), (3, 5), (16, 64), (17, 65), (64, 130), (256, 768), (100, 3), (1030, 70), (258, 1100)] {
            let row: Vec<f32> = (0..k).map(|_| next()).collect();
            let rhs: Vec<f32> = (0..k * n).map(|_| next()).collect();
            for rhs_s in [(n as isize, 1), (1, k as isize)] {
                let want = naive(&row, &rhs, rhs_s, n);
                for (read_dst, piece_rows) in [(false, k), (true, k), (false, 8), (true, piece_rows(k, n))] {
                    let old: Vec<f32> = (0..2 * n).map(|_| next()).collect();
                    let mut dst = old.clone();
                    let p = RowProduct { n, k, dst_cs: 2, rhs_s, alpha: 0.5f32, beta: 2.0, read_dst, piece_rows };
                    assert!(applies(1, 1, rhs_s));
                    // SAFETY: the buffers hold what the strides address.
                    unsafe { p.run(dst.as_mut_ptr(), row.as_ptr(), rhs.as_ptr()) };
                    for j in 0..n {
                        let base = if read_dst { 0.5 * old[2 * j] as f64 } else { 0.0 };
                        let w = base + 2.0 * want[j];
                        assert!((dst[2 * j] as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()), "{k}x{n} {rhs_s:?} col {j}");
                        assert_eq!(dst[2 * j + 1], old[2 * j + 1], "the gap between result elements is untouched");
                    }
                }
            }
        }
    }

    /// A matrix of contiguous rows summed in pieces gives, bit for bit, the
    /// sums of the pieces run one by one (as the team runs them), added in order.
    #[test]
    fn pieces_sum_as_their_separate_products() {
        let mut next = uniform(11);
        for &(k, n) in &[(256, 1024), (1024, 256), (256, 256), (1030, 70), (258, 1100)] {
            let rows = piece_rows(k, n);
            assert!(
                rows < k && k.div_ceil(rows) <= MAX_PIECES && rows.is_multiple_of(4),
                "{k}x{n}: {rows} rows per piece"
            );
            let row: Vec<f32> = (0..k).map(|_| next()).collect();
            let rhs: Vec<f32> = (0..k * n).map(|_| next()).collect();
            let whole = |k, piece_rows, row: &[f32], rhs: &[f32]| {
                let mut dst = vec![0f32; n];
                let p = RowProduct {
                    n,
                    k,
                    dst_cs: 1,
                    rhs_s: (n as isize, 1),
                    alpha: 1.0,
                    beta: 1.0,
                    read_dst: false,
                    piece_rows,
                };
                // SAFETY: the buffers hold what the strides address.
                unsafe { p.run(dst.as_mut_ptr(), row.as_ptr(), rhs.as_ptr()) };
                dst
            };
            let pieced = whole(k, rows, &row, &rhs);
            let mut sum: Option<Vec<f32>> = None;
            for p0 in (0..k).step_by(rows) {
                let p1 = (p0 + rows).min(k);
                let part = whole(p1 - p0, p1 - p0, &row[p0..p1], &rhs[p0 * n..p1 * n]);
                sum = Some(match sum {
                    None => part,
                    Some(s) => s.iter().zip(&part).map(|(a, b)| a + b).collect(),
                });
            }
            assert_eq!(Some(pieced.clone()), sum, "{k}x{n}");
            let unpieced = whole(k, k, &row, &rhs);
            let want = naive(&row, &rhs, (n as isize, 1), n);
            for j in 0..n {
                assert!((pieced[j] as f64 - want[j]).abs() <= 1e-5 * (1.0 + want[j].abs()), "{k}x{n} col {j}");
                assert!((unpieced[j] as f64 - want[j]).abs() <= 1e-5 * (1.0 + want[j].abs()), "{k}x{n} col {j}");
            }
        }
    }
}
