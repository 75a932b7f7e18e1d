//! The register tile of the packed products on AVX2 + FMA: `Σ_k a[k] ⊗ b[k]`
//! over packed panels, the 6 × 16 shape of BLIS's Haswell kernel. Twelve
//! accumulators of 8 lanes, two vector loads of `b` and six broadcasts of `a`
//! per `k`: 12 FMAs for 8 loads, so the two FMA pipes stay busy from the
//! level-1 cache. The packed GEMM (`matmul/packed`) stores the sums through
//! its own epilogue ([`sums`]); the implicit-GEMM convolution
//! (`conv/implicit`, `conv/implicit_wgrad`) adds or writes them ([`tile`]).

/// Rows of a tile (the `a` panel's width); the panel shapes are defined on
/// every target, the tile on x86-64 only.
pub(crate) const MR: usize = 6;
/// Columns of a tile (the `b` panel's width).
pub(crate) const NR: usize = 16;
/// Steps of the tile's loop unrolled (fewer loop instructions per FMA).
const UNROLL: usize = 4;

/// The tile's sums over `kc` steps: `a` holds `kc` groups of [`MR`] values,
/// `b` `kc` groups of [`NR`]; row `i`'s 16 sums are `[i][0]` (columns 0-7)
/// and `[i][1]` (8-15), each summed over `k` in order.
///
/// # Safety
/// The CPU has AVX2 and FMA; `a`, `b` valid for `kc · MR`, `kc · NR` reads.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn sums(kc: usize, a: *const f32, b: *const f32) -> [[std::arch::x86_64::__m256; 2]; MR] {
    use std::arch::x86_64::*;
    /// One step: `b`'s 16 values times each of `a`'s six.
    #[inline(always)]
    unsafe fn step(acc: &mut [[__m256; 2]; MR], a: *const f32, b: *const f32) {
        // SAFETY: one group of each panel, AVX2 + FMA (the caller's contract).
        unsafe {
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm256_broadcast_ss(&*a.add(i));
                row[0] = _mm256_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm256_fmadd_ps(ai, b1, row[1]);
            }
        }
    }
    // SAFETY: AVX2 (this function's contract); steps `0..kc` read groups
    // inside the panels' `kc · MR` and `kc · NR` valid reads.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
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

/// `C (+)= A · B` over `kc` steps ([`sums`]); row `i` of `C` starts at
/// `c + i · ldc`, its 16 values contiguous. `add`: add to `C`, else
/// overwrite it.
///
/// # Safety
/// The CPU has AVX2 and FMA; `a`, `b` valid for `kc · MR`, `kc · NR` reads;
/// `C`'s six rows valid for 16 reads and writes each.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn tile(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
    use std::arch::x86_64::*;
    // SAFETY: this function's contract is `sums`'s, then rows `0..MR` of `C`,
    // each valid for 16 reads and writes.
    unsafe {
        let acc = sums(kc, a, b);
        for (i, row) in acc.iter().enumerate() {
            let p = c.add(i * ldc);
            for (h, &v) in row.iter().enumerate() {
                let v = if add { _mm256_add_ps(_mm256_loadu_ps(p.add(8 * h)), v) } else { v };
                _mm256_storeu_ps(p.add(8 * h), v);
            }
        }
    }
}
