//! The products inside one head: small (`64 × 128 × 64` at the gpt example's
//! size), their operands already in L1 or L2, so the packing a general GEMM
//! does at every call costs as much as the arithmetic. On AVX-512 they run
//! here instead, unpacked: a register tile of 8 rows × 32 columns (16 zmm
//! sums), the lhs read element by element through any strides (broadcast), the
//! rhs read as rows of unit stride, masked loads and stores at the right edge.
//! Each result element is summed over `p` in order. Elsewhere they run on the
//! GEMM of `matmul`.

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

/// `c = a @ b` (`m × k` by `k × n`), or `c += a @ b` when `acc`; `c` has row
/// stride `crs` and unit column stride, `b` unit column stride.
///
/// # Safety
/// The operands address valid `m × k`, `k × n` and `m × n` elements; `c`
/// overlaps neither operand.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) unsafe fn product(m: usize, n: usize, k: usize, a: Mat, b: Mat, c: *mut f32, crs: isize, acc: bool) {
    debug_assert_eq!(b.cs, 1);
    #[cfg(target_arch = "x86_64")]
    if Simd::best() == Simd::Avx512 {
        // SAFETY: the CPU has AVX-512 F; this function's contract.
        return unsafe { avx512::product(m, n, k, a, b, c, crs, acc) };
    }
    // SAFETY: this function's contract is `gemm`'s.
    unsafe { <f32 as MatElem>::gemm(m, n, k, c, crs, 1, acc, a.ptr, a.rs, a.cs, b.ptr, b.rs, 1, 1.0, 1.0) }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::Mat;
    use std::arch::x86_64::*;

    /// Rows of a register tile.
    const MR: usize = 8;

    /// # Safety
    /// As [`super::product`], on a CPU with AVX-512 F.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn product(m: usize, n: usize, k: usize, a: Mat, b: Mat, c: *mut f32, crs: isize, acc: bool) {
        for j0 in (0..n).step_by(32) {
            let cols = (n - j0).min(32);
            let lo = if cols >= 16 { 0xffff } else { (1u32 << cols) as u16 - 1 };
            let hi = if cols >= 32 {
                0xffff
            } else if cols > 16 {
                (1u32 << (cols - 16)) as u16 - 1
            } else {
                0
            };
            for i0 in (0..m).step_by(MR) {
                let rows = (m - i0).min(MR);
                // SAFETY: rows `i0..i0 + rows` and columns `j0..j0 + cols` of the
                // result, inside the operands (the caller's contract).
                unsafe {
                    let at = a.ptr.offset(i0 as isize * a.rs);
                    let bt = b.ptr.add(j0);
                    let ct = c.offset(i0 as isize * crs).add(j0);
                    let t = Tile { k, a: Mat { ptr: at, ..a }, b: bt, brs: b.rs, c: ct, crs, acc, lo, hi };
                    match rows {
                        8 => t.run::<8>(),
                        7 => t.run::<7>(),
                        6 => t.run::<6>(),
                        5 => t.run::<5>(),
                        4 => t.run::<4>(),
                        3 => t.run::<3>(),
                        2 => t.run::<2>(),
                        _ => t.run::<1>(),
                    }
                }
            }
        }
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
        /// The tile's `R` rows and masked columns lie in the operands.
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn run<const R: usize>(&self) {
            // SAFETY: the addressed elements are the tile's (the caller's contract);
            // masked lanes are neither read nor written.
            unsafe {
                let mut s = [[_mm512_setzero_ps(); 2]; R];
                let (mut a, mut b) = (self.a.ptr, self.b);
                for _ in 0..self.k {
                    let b0 = _mm512_maskz_loadu_ps(self.lo, b);
                    let b1 = _mm512_maskz_loadu_ps(self.hi, b.add(16));
                    for (r, s) in s.iter_mut().enumerate() {
                        let av = _mm512_set1_ps(*a.offset(r as isize * self.a.rs));
                        s[0] = _mm512_fmadd_ps(av, b0, s[0]);
                        s[1] = _mm512_fmadd_ps(av, b1, s[1]);
                    }
                    a = a.offset(self.a.cs);
                    b = b.offset(self.brs);
                }
                for (r, s) in s.iter().enumerate() {
                    let row = self.c.offset(r as isize * self.crs);
                    let (mut v0, mut v1) = (s[0], s[1]);
                    if self.acc {
                        v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(self.lo, row), v0);
                        v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(self.hi, row.add(16)), v1);
                    }
                    _mm512_mask_storeu_ps(row, self.lo, v0);
                    _mm512_mask_storeu_ps(row.add(16), self.hi, v1);
                }
            }
        }
    }
}
