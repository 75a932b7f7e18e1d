//! The products inside one head: small (`64 × 128 × 64` at the gpt example's
//! size), their operands already in L1 or L2, so the packing a general GEMM
//! does at every call costs as much as the arithmetic. On AVX-512 they run
//! here instead, unpacked: a register tile of 8 rows × 32 columns (16 zmm
//! sums), the lhs read element by element through any strides (broadcast), the
//! rhs read as rows of unit stride, masked loads and stores at the right edge.
//! Each result element is summed over `p` in order. On AVX2 the same tile is
//! 6 rows × 16 columns (12 ymm sums); elsewhere they run on the GEMM of `matmul`.

use super::super::matmul::MatElem;
use super::super::par::Simd;

/// An operand: pointer and (row, column) element strides.
#[derive(Clone, Copy)]
pub(super) struct Mat {
    pub ptr: *const f32,
    pub rs: isize,
    pub cs: isize,
}

impl Mat {
    pub fn new(ptr: *const f32, rs: isize, cs: isize) -> Mat {
        Mat { ptr, rs, cs }
    }
}

/// Which part of a product a causal attention needs, by result row `i`: the
/// register tiles skip what no row of theirs needs (whole tiles, columns
/// past the last needed one, the reduction's terms that are 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Causal {
    /// All of it.
    Full,
    /// Row `i` needs the columns below `off + i + 1` only: the others are
    /// left unwritten (the scores of query row `off + i`).
    Cols(isize),
    /// Row `i` needs the reduction's terms below `off + i + 1` only (the
    /// others are 0: the probabilities of query row `off + i` past it).
    KEnd(isize),
    /// Row `i` needs the reduction's terms from `off + i` on only (key row
    /// `i` gets nothing from the query rows before it).
    KStart(isize),
}

impl Causal {
    /// For the tile of rows `i0..i0 + rows`: the columns it computes (`0..`
    /// the returned end) and its range of the reduction.
    #[inline]
    fn tile(self, i0: usize, rows: usize, n: usize, k: usize) -> (usize, usize, usize) {
        let end = |off: isize, lim: usize| (off + (i0 + rows) as isize).clamp(0, lim as isize) as usize;
        match self {
            Causal::Full => (n, 0, k),
            Causal::Cols(off) => (end(off, n), 0, k),
            Causal::KEnd(off) => (n, 0, end(off, k)),
            Causal::KStart(off) => (n, (off + i0 as isize).clamp(0, k as isize) as usize, k),
        }
    }
}

/// `c = a @ b` (`m × k` by `k × n`), or `c += a @ b` when `acc`; `c` has row
/// stride `crs` and unit column stride, `b` unit column stride; only the
/// part `causal` says is needed (on the register tiles: elsewhere all of it,
/// which gives the same values).
///
/// # Safety
/// The operands address valid `m × k`, `k × n` and `m × n` elements; `c`
/// overlaps neither operand.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) unsafe fn product(
    m: usize,
    n: usize,
    k: usize,
    a: Mat,
    b: Mat,
    c: *mut f32,
    crs: isize,
    acc: bool,
    causal: Causal,
) {
    debug_assert_eq!(b.cs, 1);
    #[cfg(target_arch = "x86_64")]
    if Simd::best() == Simd::Avx512 {
        // SAFETY: the CPU has AVX-512 F; this function's contract.
        return unsafe { avx512::product(m, n, k, a, b, c, crs, acc, causal) };
    }
    #[cfg(target_arch = "x86_64")]
    if Simd::best() == Simd::Avx2 {
        // SAFETY: the CPU has AVX2 and FMA; this function's contract.
        return unsafe { avx2::product(m, n, k, a, b, c, crs, acc, causal) };
    }
    let _ = causal;
    // SAFETY: this function's contract is `gemm`'s.
    unsafe { <f32 as MatElem>::gemm(m, n, k, c, crs, 1, acc, a.ptr, a.rs, a.cs, b.ptr, b.rs, 1, 1.0, 1.0) }
}

/// `out[c · ors + j] = src[j · rs + c]`: the `rows × cols` block at `src`
/// (row stride `rs`, unit column stride) transposed into `out` (row stride
/// `ors ≥ rows`; on AVX-512 in 16 × 16 blocks held in registers, on AVX2 in
/// 8 × 8 blocks).
///
/// # Safety
/// `src` addresses the block; `out` holds `cols` rows of stride `ors`.
pub(super) unsafe fn transpose(src: *const f32, rs: isize, rows: usize, cols: usize, out: &mut [f32], ors: usize) {
    debug_assert!(ors >= rows && out.len() >= cols.saturating_sub(1) * ors + rows);
    #[cfg(target_arch = "x86_64")]
    if Simd::best() == Simd::Avx512 {
        // SAFETY: the CPU has AVX-512 F; this function's contract.
        return unsafe { avx512::transpose(src, rs, rows, cols, out.as_mut_ptr(), ors) };
    }
    #[cfg(target_arch = "x86_64")]
    if Simd::best() == Simd::Avx2 {
        // SAFETY: the CPU has AVX2; this function's contract.
        return unsafe { avx2::transpose(src, rs, rows, cols, out.as_mut_ptr(), ors) };
    }
    // SAFETY: this function's contract.
    unsafe { transpose_rest(src, rs, rows, cols, (0, 0), out.as_mut_ptr(), ors) }
}

/// The part of a [`transpose`] the register blocks leave, element by element:
/// the columns from `full.1` on of the first `full.0` rows, and the rows from
/// `full.0` on.
///
/// # Safety
/// As [`transpose`], `out` holding `rows · cols` values.
unsafe fn transpose_rest(
    src: *const f32,
    rs: isize,
    rows: usize,
    cols: usize,
    full: (usize, usize),
    out: *mut f32,
    ors: usize,
) {
    let copy = |j: usize, c: usize| {
        // SAFETY: element `(j, c)` of the block and its transposed place.
        unsafe { *out.add(c * ors + j) = *src.offset(j as isize * rs + c as isize) };
    };
    for j in 0..full.0 {
        (full.1..cols).for_each(|c| copy(j, c));
    }
    for j in full.0..rows {
        (0..cols).for_each(|c| copy(j, c));
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Causal, Mat};
    use std::arch::x86_64::*;

    /// Rows of a register tile.
    const MR: usize = 8;

    /// # Safety
    /// As [`super::product`], on a CPU with AVX-512 F.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn product(
        m: usize,
        n: usize,
        k: usize,
        a: Mat,
        b: Mat,
        c: *mut f32,
        crs: isize,
        acc: bool,
        causal: Causal,
    ) {
        let mask = |cols: usize| if cols >= 16 { 0xffff } else { (1u32 << cols) as u16 - 1 };
        for j0 in (0..n).step_by(32) {
            for i0 in (0..m).step_by(MR) {
                let rows = (m - i0).min(MR);
                let (n1, k0, k1) = causal.tile(i0, rows, n, k);
                if j0 >= n1 {
                    continue;
                }
                let cols = (n1 - j0).min(32);
                let (lo, hi) = (mask(cols), mask(cols.saturating_sub(16)));
                // SAFETY: rows `i0..i0 + rows`, columns `j0..j0 + cols` and terms
                // `k0..k1` of the product, inside the operands (the caller's contract).
                unsafe {
                    let at = a.ptr.offset(i0 as isize * a.rs + k0 as isize * a.cs);
                    let bt = b.ptr.add(j0).offset(k0 as isize * b.rs);
                    let ct = c.offset(i0 as isize * crs).add(j0);
                    let t = Tile { k: k1 - k0, a: Mat { ptr: at, ..a }, b: bt, brs: b.rs, c: ct, crs, acc, lo, hi };
                    macro_rules! run {
                        ($two:literal) => {
                            match rows {
                                8 => t.run::<8, $two>(),
                                7 => t.run::<7, $two>(),
                                6 => t.run::<6, $two>(),
                                5 => t.run::<5, $two>(),
                                4 => t.run::<4, $two>(),
                                3 => t.run::<3, $two>(),
                                2 => t.run::<2, $two>(),
                                _ => t.run::<1, $two>(),
                            }
                        };
                    }
                    // Up to 16 columns: one vector per row.
                    if cols > 16 {
                        run!(true)
                    } else {
                        run!(false)
                    }
                }
            }
        }
    }

    /// 16 × 16 blocks transposed in registers: four stages, stage `k` swapping
    /// bit `k` of the row index with bit `k` of the lane index between rows
    /// `i` and `i | 2^k` (two two-source permutes per pair). The rest of the
    /// block (rows or columns beyond a multiple of 16) is copied element by element.
    ///
    /// # Safety
    /// As [`super::transpose`], on a CPU with AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose(src: *const f32, rs: isize, rows: usize, cols: usize, out: *mut f32, ors: usize) {
        let index = |k: usize, upper: bool| {
            let b = 1 << k;
            let lanes: [i32; 16] = std::array::from_fn(|l| match (l & b == 0, upper) {
                (true, false) => l as i32,
                (false, false) => 16 + (l ^ b) as i32,
                (true, true) => (l ^ b) as i32,
                (false, true) => 16 + l as i32,
            });
            // SAFETY: 16 i32 values are one 512-bit vector.
            unsafe { _mm512_loadu_si512(lanes.as_ptr() as *const _) }
        };
        let lo = [index(0, false), index(1, false), index(2, false), index(3, false)];
        let hi = [index(0, true), index(1, true), index(2, true), index(3, true)];
        let (full_r, full_c) = (rows / 16 * 16, cols / 16 * 16);
        for j0 in (0..full_r).step_by(16) {
            for c0 in (0..full_c).step_by(16) {
                // SAFETY: rows `j0..j0 + 16`, columns `c0..c0 + 16` of the block, and
                // their transposed places in `out` (the caller's contract).
                unsafe {
                    let mut r: [__m512; 16] =
                        std::array::from_fn(|i| _mm512_loadu_ps(src.offset((j0 + i) as isize * rs).add(c0)));
                    for k in 0..4 {
                        let b = 1 << k;
                        for i in (0..16).filter(|i| i & b == 0) {
                            let (x, y) = (r[i], r[i | b]);
                            r[i] = _mm512_permutex2var_ps(x, lo[k], y);
                            r[i | b] = _mm512_permutex2var_ps(x, hi[k], y);
                        }
                    }
                    for (l, v) in r.iter().enumerate() {
                        _mm512_storeu_ps(out.add((c0 + l) * ors + j0), *v);
                    }
                }
            }
        }
        // SAFETY: as this function's.
        unsafe { super::transpose_rest(src, rs, rows, cols, (full_r, full_c), out, ors) };
    }

    /// One register tile of up to `MR × 32`.
    struct Tile {
        k: usize,
        a: Mat,
        b: *const f32,
        brs: isize,
        c: *mut f32,
        crs: isize,
        acc: bool,
        /// Column masks of the two halves.
        lo: u16,
        hi: u16,
    }

    impl Tile {
        /// # Safety
        /// The tile's `R` rows and masked columns lie in the operands (`TWO`:
        /// both halves, else only the first 16 columns, `hi` unused).
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn run<const R: usize, const TWO: bool>(&self) {
            // SAFETY: the addressed elements are the tile's (the caller's contract);
            // masked lanes are neither read nor written.
            unsafe {
                let mut s = [[_mm512_setzero_ps(); 2]; R];
                let (mut a, mut b) = (self.a.ptr, self.b);
                for _ in 0..self.k {
                    let b0 = _mm512_maskz_loadu_ps(self.lo, b);
                    let b1 = if TWO { _mm512_maskz_loadu_ps(self.hi, b.add(16)) } else { b0 };
                    for (r, s) in s.iter_mut().enumerate() {
                        let av = _mm512_set1_ps(*a.offset(r as isize * self.a.rs));
                        s[0] = _mm512_fmadd_ps(av, b0, s[0]);
                        if TWO {
                            s[1] = _mm512_fmadd_ps(av, b1, s[1]);
                        }
                    }
                    a = a.offset(self.a.cs);
                    b = b.offset(self.brs);
                }
                for (r, s) in s.iter().enumerate() {
                    let row = self.c.offset(r as isize * self.crs);
                    let (mut v0, mut v1) = (s[0], s[1]);
                    if self.acc {
                        v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(self.lo, row), v0);
                        if TWO {
                            v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(self.hi, row.add(16)), v1);
                        }
                    }
                    _mm512_mask_storeu_ps(row, self.lo, v0);
                    if TWO {
                        _mm512_mask_storeu_ps(row.add(16), self.hi, v1);
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::super::conv::transpose8;
    use super::{Causal, Mat};
    use std::arch::x86_64::*;

    /// Rows of a register tile.
    const MR: usize = 6;

    /// The lanes `0..n` of a ymm mask (n clamped to 0..=8).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn lanes(n: usize) -> __m256i {
        let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n.min(8) as i32), idx)
    }

    /// # Safety
    /// As [`super::product`], on a CPU with AVX2 and FMA.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn product(
        m: usize,
        n: usize,
        k: usize,
        a: Mat,
        b: Mat,
        c: *mut f32,
        crs: isize,
        acc: bool,
        causal: Causal,
    ) {
        for j0 in (0..n).step_by(16) {
            for i0 in (0..m).step_by(MR) {
                let rows = (m - i0).min(MR);
                let (n1, k0, k1) = causal.tile(i0, rows, n, k);
                if j0 >= n1 {
                    continue;
                }
                let cols = (n1 - j0).min(16);
                let (lo, hi) = (lanes(cols), lanes(cols.saturating_sub(8)));
                // SAFETY: rows `i0..i0 + rows`, columns `j0..j0 + cols` and terms
                // `k0..k1` of the product, inside the operands (the caller's contract).
                unsafe {
                    let at = a.ptr.offset(i0 as isize * a.rs + k0 as isize * a.cs);
                    let bt = b.ptr.add(j0).offset(k0 as isize * b.rs);
                    let ct = c.offset(i0 as isize * crs).add(j0);
                    let t = Tile { k: k1 - k0, a: Mat { ptr: at, ..a }, b: bt, brs: b.rs, c: ct, crs, acc, lo, hi };
                    // Whole-width tiles use plain loads and stores: masked stores are
                    // slow on some CPUs (microcoded on AMD's).
                    match (rows, cols == 16) {
                        (6, true) => t.run::<6, true>(),
                        (6, false) => t.run::<6, false>(),
                        (5, true) => t.run::<5, true>(),
                        (5, false) => t.run::<5, false>(),
                        (4, true) => t.run::<4, true>(),
                        (4, false) => t.run::<4, false>(),
                        (3, true) => t.run::<3, true>(),
                        (3, false) => t.run::<3, false>(),
                        (2, true) => t.run::<2, true>(),
                        (2, false) => t.run::<2, false>(),
                        (_, true) => t.run::<1, true>(),
                        (_, false) => t.run::<1, false>(),
                    }
                }
            }
        }
    }

    /// 8 × 8 blocks transposed in registers (the convolutions' `transpose8`);
    /// the rest of the block is copied element by element.
    ///
    /// # Safety
    /// As [`super::transpose`], on a CPU with AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose(src: *const f32, rs: isize, rows: usize, cols: usize, out: *mut f32, ors: usize) {
        let (full_r, full_c) = (rows / 8 * 8, cols / 8 * 8);
        for j0 in (0..full_r).step_by(8) {
            for c0 in (0..full_c).step_by(8) {
                // SAFETY: rows `j0..j0 + 8`, columns `c0..c0 + 8` of the block, and
                // their transposed places in `out` (the caller's contract).
                unsafe {
                    let r: [__m256; 8] =
                        std::array::from_fn(|i| _mm256_loadu_ps(src.offset((j0 + i) as isize * rs).add(c0)));
                    let o = transpose8(r);
                    for (l, v) in o.iter().enumerate() {
                        _mm256_storeu_ps(out.add((c0 + l) * ors + j0), *v);
                    }
                }
            }
        }
        // SAFETY: as this function's.
        unsafe { super::transpose_rest(src, rs, rows, cols, (full_r, full_c), out, ors) };
    }

    /// One register tile of up to `MR × 16`.
    struct Tile {
        k: usize,
        a: Mat,
        b: *const f32,
        brs: isize,
        c: *mut f32,
        crs: isize,
        acc: bool,
        /// Column masks of the two halves.
        lo: __m256i,
        hi: __m256i,
    }

    impl Tile {
        /// # Safety
        /// The tile's `R` rows and masked columns lie in the operands (`FULL`:
        /// all 16 columns, the masks unused).
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn run<const R: usize, const FULL: bool>(&self) {
            // SAFETY: the addressed elements are the tile's (the caller's contract);
            // masked lanes are neither read nor written.
            unsafe {
                let load = |p: *const f32, mask: __m256i| {
                    if FULL {
                        _mm256_loadu_ps(p)
                    } else {
                        _mm256_maskload_ps(p, mask)
                    }
                };
                let mut s = [[_mm256_setzero_ps(); 2]; R];
                let (mut a, mut b) = (self.a.ptr, self.b);
                for _ in 0..self.k {
                    let b0 = load(b, self.lo);
                    let b1 = load(b.wrapping_add(8), self.hi);
                    for (r, s) in s.iter_mut().enumerate() {
                        let av = _mm256_set1_ps(*a.offset(r as isize * self.a.rs));
                        s[0] = _mm256_fmadd_ps(av, b0, s[0]);
                        s[1] = _mm256_fmadd_ps(av, b1, s[1]);
                    }
                    a = a.offset(self.a.cs);
                    b = b.offset(self.brs);
                }
                for (r, s) in s.iter().enumerate() {
                    let row = self.c.offset(r as isize * self.crs);
                    let (mut v0, mut v1) = (s[0], s[1]);
                    if self.acc {
                        v0 = _mm256_add_ps(load(row, self.lo), v0);
                        v1 = _mm256_add_ps(load(row.wrapping_add(8), self.hi), v1);
                    }
                    if FULL {
                        _mm256_storeu_ps(row, v0);
                        _mm256_storeu_ps(row.wrapping_add(8), v1);
                    } else {
                        _mm256_maskstore_ps(row, self.lo, v0);
                        _mm256_maskstore_ps(row.wrapping_add(8), self.hi, v1);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Transpose = unsafe fn(*const f32, isize, usize, usize, *mut f32, usize);
    type Product = unsafe fn(usize, usize, usize, Mat, Mat, *mut f32, isize, bool, Causal);

    /// The tiers' builds this CPU runs, whatever the build's widest tier: the
    /// dispatching functions, then each SIMD module directly.
    fn tiers() -> Vec<(&'static str, Transpose, Product)> {
        // SAFETY (both wrappers): the callers' contract, that of `transpose`.
        unsafe fn dispatch_transpose(src: *const f32, rs: isize, rows: usize, cols: usize, out: *mut f32, ors: usize) {
            // SAFETY: `out` holds `cols` rows of stride `ors` (the caller's contract).
            unsafe { transpose(src, rs, rows, cols, std::slice::from_raw_parts_mut(out, cols * ors), ors) }
        }
        let mut v: Vec<(&'static str, Transpose, Product)> = vec![("dispatch", dispatch_transpose, product)];
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("fma") {
                v.push(("avx2", avx2::transpose, avx2::product));
            }
            if has!("avx512f") {
                v.push(("avx512", avx512::transpose, avx512::product));
            }
        }
        v
    }

    #[test]
    fn transposes_and_products_match_loops() {
        let vals = |n: usize, seed: f32| (0..n).map(|i| (i as f32 * 0.37 + seed).sin()).collect::<Vec<f32>>();
        for (tier, transpose, product) in tiers() {
            for &(rows, cols) in &[(16, 16), (128, 64), (33, 20), (7, 3), (48, 17), (8, 8), (9, 15)] {
                let rs = cols + 5;
                let src = vals(rows * rs, 1.0);
                let ors = rows + 3;
                let mut out = vec![0.0; cols * ors];
                // SAFETY: `src` holds `rows` rows of stride `rs`; `out` `cols` rows of
                // stride `ors`; `tiers` lists only what this CPU runs.
                unsafe { transpose(src.as_ptr(), rs as isize, rows, cols, out.as_mut_ptr(), ors) };
                for j in 0..rows {
                    for c in 0..cols {
                        assert_eq!(out[c * ors + j], src[j * rs + c], "{tier} {rows}x{cols} ({j}, {c})");
                    }
                }
            }
            let shapes = [(32, 128, 64), (5, 37, 9), (64, 64, 32), (1, 1, 1), (7, 8, 3), (13, 17, 5), (20, 40, 33)];
            let limits = [0, 3, -2, 12, 40];
            let causals = std::iter::once(Causal::Full)
                .chain(limits.iter().flat_map(|&o| [Causal::Cols(o), Causal::KEnd(o), Causal::KStart(o)]));
            for causal in causals {
                for &(m, n, k) in &shapes {
                    // Terms a causal product skips are 0 in `a`, as the attention's are.
                    let needs = |i: usize, p: usize| match causal {
                        Causal::KEnd(o) => (p as isize) < o + i as isize + 1,
                        Causal::KStart(o) => p as isize >= o + i as isize,
                        _ => true,
                    };
                    let mut a = vals(m * k, 2.0);
                    for p in 0..k {
                        for i in 0..m {
                            if !needs(i, p) {
                                a[p * m + i] = 0.0;
                            }
                        }
                    }
                    let b = vals(k * n, 3.0);
                    for acc in [true, false] {
                        let mut c = vals(m * n, 4.0);
                        let old = c.clone();
                        // `a` read transposed (column-major), `c (+)= a @ b`.
                        // SAFETY: the buffers hold what the strides address; `tiers` lists
                        // only what this CPU runs.
                        unsafe {
                            product(
                                m,
                                n,
                                k,
                                Mat::new(a.as_ptr(), 1, m as isize),
                                Mat::new(b.as_ptr(), n as isize, 1),
                                c.as_mut_ptr(),
                                n as isize,
                                acc,
                                causal,
                            )
                        };
                        for i in 0..m {
                            // The columns the row needs.
                            let cols = match causal {
                                Causal::Cols(o) => (o + i as isize + 1).clamp(0, n as isize) as usize,
                                _ => n,
                            };
                            for j in 0..cols {
                                let sum = (0..k).map(|p| a[p * m + i] as f64 * b[p * n + j] as f64).sum::<f64>();
                                let want = if acc { old[i * n + j] as f64 + sum } else { sum };
                                let at = format!("{tier} {causal:?} {m}x{n}x{k} ({i}, {j})");
                                assert!((c[i * n + j] as f64 - want).abs() < 1e-4, "{at}");
                            }
                        }
                    }
                }
            }
        }
    }
}
