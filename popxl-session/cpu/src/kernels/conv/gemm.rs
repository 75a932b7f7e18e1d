//! The register tile of the implicit-GEMM convolution ([`super::implicit`])
//! on AVX2 + FMA: `C[6 × 16] (+)= Σ_k a[k] ⊗ b[k]` over packed panels, the
//! 6 × 16 shape of BLIS's Haswell kernel. Twelve accumulators of 8 lanes,
//! two vector loads of `b` and six broadcasts of `a` per `k`: 12 FMAs for 8
//! loads, so the two FMA pipes stay busy from the level-1 cache.

/// Rows of a tile (the `a` panel's width); the panel shapes are defined on
/// every target, the tile on x86-64 only.
pub(super) const MR: usize = 6;
/// Columns of a tile (the `b` panel's width).
pub(super) const NR: usize = 16;

/// `C (+)= A · B` over `kc` steps: `a` holds `kc` groups of [`MR`] values,
/// `b` `kc` groups of [`NR`]; row `i` of `C` starts at `c + i · ldc`, its 16
/// values contiguous. `add`: add to `C`, else overwrite it.
///
/// # Safety
/// The CPU has AVX2 and FMA; `a`, `b` valid for `kc · MR`, `kc · NR` reads;
/// `C`'s six rows valid for 16 reads and writes each.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn tile(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
    use std::arch::x86_64::*;
    // SAFETY: the CPU has AVX2 (this function's contract).
    let z = unsafe { _mm256_setzero_ps() };
    let (mut c00, mut c01, mut c10, mut c11, mut c20, mut c21) = (z, z, z, z, z, z);
    let (mut c30, mut c31, mut c40, mut c41, mut c50, mut c51) = (z, z, z, z, z, z);
    let (mut a, mut b) = (a, b);
    macro_rules! row {
        ($i:expr, $b0:ident, $b1:ident, $x:ident, $y:ident) => {
            let ai = _mm256_broadcast_ss(&*a.add($i));
            $x = _mm256_fmadd_ps(ai, $b0, $x);
            $y = _mm256_fmadd_ps(ai, $b1, $y);
        };
    }
    for _ in 0..kc {
        // SAFETY: AVX2 + FMA (this function's contract); step `k < kc` reads
        // group `k` of `a` (`MR` values) and of `b` (`NR` values), inside their
        // `kc · MR` and `kc · NR` valid reads.
        unsafe {
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            row!(0, b0, b1, c00, c01);
            row!(1, b0, b1, c10, c11);
            row!(2, b0, b1, c20, c21);
            row!(3, b0, b1, c30, c31);
            row!(4, b0, b1, c40, c41);
            row!(5, b0, b1, c50, c51);
            a = a.add(MR);
            b = b.add(NR);
        }
    }
    macro_rules! out {
        ($i:expr, $x:ident, $y:ident) => {
            let p = c.add($i * ldc);
            if add {
                $x = _mm256_add_ps(_mm256_loadu_ps(p), $x);
                $y = _mm256_add_ps(_mm256_loadu_ps(p.add(8)), $y);
            }
            _mm256_storeu_ps(p, $x);
            _mm256_storeu_ps(p.add(8), $y);
        };
    }
    // SAFETY: AVX2 (this function's contract); rows `0..MR` of `C`, each
    // valid for 16 reads and writes (this function's contract).
    unsafe {
        out!(0, c00, c01);
        out!(1, c10, c11);
        out!(2, c20, c21);
        out!(3, c30, c31);
        out!(4, c40, c41);
        out!(5, c50, c51);
    }
}
