//! The AVX2 + FMA register tile of the packed GEMM: the 6 × 16 tile of
//! `kernels/tile` (shared with the implicit-GEMM convolutions), stored
//! through the packed GEMM's epilogue.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{Addends, Lanes, Store};
use crate::kernels::tile::{MR, NR};

/// The 6 × 16 tile.
pub(super) struct Tile6x16;

impl super::Tile for Tile6x16 {
    const MR: usize = MR;
    const NR: usize = NR;
    /// An rhs panel of `NR × KC` values is 16 KiB, half of an L1.
    const KC: usize = 256;
    /// 192 KiB: within a 512 KiB level 2 beside the rhs panels streaming through it.
    const MC_VALUES: usize = 48 * 1024;
    /// 4 MiB: 4096 columns at a depth of 256, in level 3.
    const NC_VALUES: usize = 1024 * 1024;
    const A_IN_L1: bool = false;

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
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
                // SAFETY: row `i` of the tile, a hint only.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(y.offset(i as isize * rs) as *const i8) };
            }
        }
        // SAFETY: steps `0..kb` of both panels, then the tile (the trait's contract).
        unsafe {
            let acc = crate::kernels::tile::sums(kb, a, b);
            super::store_tile(&acc, y, rs, cs, mr, nr, store, beta, add);
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for __m256 {
    const N: usize = 8;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the trait's contract.
        unsafe { _mm256_storeu_ps(p, self) }
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm256_add_ps(self, o) }
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm256_mul_ps(self, o) }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: the trait's contract.
        unsafe { _mm256_set1_ps(v) }
    }
}
