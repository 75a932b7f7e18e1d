//! The AVX-512 register tile of the packed GEMM: 6 rows × 64 columns, 24
//! accumulators of sixteen lanes. Per step four vector loads of the rhs
//! panel and six broadcasts of the lhs panel feed 24 FMAs: 10 loads for 24
//! FMAs keeps both of an Intel core's 512-bit FMA pipes busy. The loops run
//! in [`super::Tile::A_IN_L1`]'s order: the lhs panel (6 × 384 values, 9
//! KiB) stays in L1 while the rhs panels of a block in level 2 stream past
//! it (BLIS's Skylake-X order, the operands' roles swapped).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{Addends, Lanes, Store};

/// Rows of the tile.
const MR: usize = 6;
/// Vectors of sixteen columns in a row of the tile.
const NV: usize = 4;
/// Columns of the tile.
const NR: usize = 16 * NV;
/// Steps of the tile's loop unrolled.
const UNROLL: usize = 4;

/// The 6 × 64 tile.
pub(super) struct Tile6x64;

impl super::Tile for Tile6x64 {
    const MR: usize = MR;
    const NR: usize = NR;
    const KC: usize = 384;
    /// 4 MiB: the lhs block in level 3.
    const MC_VALUES: usize = 1024 * 1024;
    /// 576 KiB: the rhs block in a 1.25 MiB level 2.
    const NC_VALUES: usize = 384 * 384;
    const A_IN_L1: bool = true;

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn tile(
        kb: usize,
        a: *const f32,
        b: *const f32,
        y: *mut f32,
        rs: isize,
        cs: isize,
        mr: usize,
        nr: usize,
        store: Store,
        beta: f32,
        add: Addends,
    ) {
        if mr == MR && nr == NR && cs == 1 {
            for i in 0..MR {
                for h in 0..NV {
                    // SAFETY: row `i` of the tile, a hint only.
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(y.offset(i as isize * rs + 16 * h as isize) as *const i8) };
                }
            }
        }
        // SAFETY: steps `0..kb` of both panels, then the tile (the trait's contract).
        unsafe {
            let acc = sums(kb, a, b);
            super::store_tile(&acc, y, rs, cs, mr, nr, store, beta, add);
        }
    }
}

/// The tile's sums over `kc` steps: `a` holds `kc` groups of [`MR`] values,
/// `b` `kc` groups of [`NR`]; row `i`'s sums of columns `16·h..` are
/// `[i][h]`, each summed over `k` in order.
///
/// # Safety
/// The CPU has AVX-512F; `a`, `b` valid for `kc · MR`, `kc · NR` reads.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sums(kc: usize, a: *const f32, b: *const f32) -> [[__m512; NV]; MR] {
    /// One step: `b`'s 64 values times each of `a`'s six.
    #[inline(always)]
    unsafe fn step(acc: &mut [[__m512; NV]; MR], a: *const f32, b: *const f32) {
        // SAFETY: one group of each panel, AVX-512F (the caller's contract).
        unsafe {
            let bv: [__m512; NV] = std::array::from_fn(|h| _mm512_loadu_ps(b.add(16 * h)));
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm512_set1_ps(*a.add(i));
                for (r, &bh) in row.iter_mut().zip(&bv) {
                    *r = _mm512_fmadd_ps(ai, bh, *r);
                }
            }
        }
    }
    // SAFETY: AVX-512F (this function's contract); steps `0..kc` read groups
    // inside the panels' `kc · MR` and `kc · NR` valid reads.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        let mut k = 0;
        while k + UNROLL <= kc {
            for u in 0..UNROLL {
                step(&mut acc, a.add((k + u) * MR), b.add((k + u) * NR));
            }
            k += UNROLL;
        }
        while k < kc {
            step(&mut acc, a.add(k * MR), b.add(k * NR));
            k += 1;
        }
        acc
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for __m512 {
    const N: usize = 16;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the trait's contract.
        unsafe { _mm512_storeu_ps(p, self) }
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_add_ps(self, o) }
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_mul_ps(self, o) }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm512_set1_ps(v) }
    }
}
