//! The AVX2 + FMA tier of the blocked direct convolution ([`super::direct2d`]),
//! for CPUs without AVX-512 (AMD Zen 2/3, Intel before Skylake-SP).
//!
//! It runs depthwise convolutions (one input and one output channel per
//! group, see `direct2d::suits`): the same padded planes, output grids and
//! summation order as the AVX-512 tier (each output is `Σ_taps` in the same
//! order, one fused multiply-add per term), so both tiers give the same
//! forward and data-gradient values. A register tile is [`PB`] accumulators of
//! 8 grid positions and one weight broadcast; the depthwise weight gradient
//! keeps one accumulator per tap for up to [`TAPS`] taps per sweep of the grid.

#![cfg(target_arch = "x86_64")]

use super::direct2d::Blocked;

/// Lanes of one `ymm` vector.
const LANES: usize = 8;
/// Vectors of 8 grid positions per register tile.
const PB: usize = 12;
/// Taps summed per sweep of the depthwise weight gradient.
const TAPS: usize = 12;

/// Accumulates the `cin` padded input planes at `x` into the output grid at
/// `e` of one output channel (weights at `w`), over the grid positions
/// `0..used`; `add`: the grid holds partial sums.
///
/// # Safety
/// The CPU has AVX2 and FMA; the pointers are valid as for the AVX-512 tier
/// (`used` rounded up to 8 stays within the grid and the plane's slack).
pub(super) unsafe fn sweep(b: &Blocked, used: usize, cin: usize, add: bool, x: *const f32, w: *const f32, e: *mut f32) {
    let nv = used.div_ceil(LANES);
    let mut v = 0;
    while v < nv {
        let p = PB.min(nv - v);
        // SAFETY: vectors `v..v + p` of the `nv` covering `used`: inside the grid
        // and the plane's slack (this function's contract), AVX2 + FMA present.
        let (x, e) = unsafe { (x.add(v * LANES), e.add(v * LANES)) };
        // SAFETY: as above: `tile` reads `p` vectors from `x`, writes them at `e`.
        unsafe {
            match p {
                12 => tile::<12>(b, cin, add, x, w, e),
                11 => tile::<11>(b, cin, add, x, w, e),
                10 => tile::<10>(b, cin, add, x, w, e),
                9 => tile::<9>(b, cin, add, x, w, e),
                8 => tile::<8>(b, cin, add, x, w, e),
                7 => tile::<7>(b, cin, add, x, w, e),
                6 => tile::<6>(b, cin, add, x, w, e),
                5 => tile::<5>(b, cin, add, x, w, e),
                4 => tile::<4>(b, cin, add, x, w, e),
                3 => tile::<3>(b, cin, add, x, w, e),
                2 => tile::<2>(b, cin, add, x, w, e),
                _ => tile::<1>(b, cin, add, x, w, e),
            }
        }
        v += p;
    }
}

/// One register tile: `P` vectors of grid positions from `x`, one output
/// channel from the weight row at `w`, summed over every input channel and
/// tap (the broadcast weight stays in a register, each FMA reads its
/// vector), stored to the grid at `e`.
///
/// # Safety
/// As [`sweep`].
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::needless_range_loop)] // explicit indices keep the register tile visible
unsafe fn tile<const P: usize>(b: &Blocked, cin: usize, add: bool, x: *const f32, w: *const f32, e: *mut f32) {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); P];
    if add {
        for p in 0..P {
            // SAFETY: `P` vectors of the grid at `e` (this function's contract).
            unsafe {
                acc[p] = _mm256_loadu_ps(e.add(p * LANES));
            }
        }
    }
    for c in 0..cin {
        // SAFETY: channel `c < cin` of the padded planes and of the weight row;
        // `tap` + the tile's `P` vectors stay within the plane's slack and
        // `wo` within a weight row (built with the plan); AVX2 + FMA present.
        unsafe {
            let xc = x.add(c * b.plane);
            let wcp = w.add(c * b.wc);
            for (&tap, &wo) in b.taps.iter().zip(&b.woff) {
                let xs = xc.add(tap);
                let wv = _mm256_set1_ps(*wcp.add(wo));
                for p in 0..P {
                    acc[p] = _mm256_fmadd_ps(_mm256_loadu_ps(xs.add(p * LANES)), wv, acc[p]);
                }
            }
        }
    }
    for p in 0..P {
        // SAFETY: `P` vectors of the grid at `e` (this function's contract).
        unsafe {
            _mm256_storeu_ps(e.add(p * LANES), acc[p]);
        }
    }
}

/// `dw[t] += <ext, xp shifted by tap t>` over the whole grid, for every tap.
///
/// # Safety
/// The CPU has AVX2 and FMA; `xp` and `ext` as for the AVX-512 tier.
pub(super) unsafe fn tap_dots(b: &Blocked, xp: *const f32, ext: *const f32, dw: &mut [f32]) {
    let kk = b.taps.len();
    let mut t = 0;
    while t < kk {
        let k = match kk - t {
            9 => 9,
            n if n >= TAPS => TAPS,
            n if n >= 8 => 8,
            n if n >= 4 => 4,
            _ => 1,
        };
        // SAFETY: `t + k <= kk` taps; AVX2 + FMA and the pointers as this
        // function's contract.
        unsafe {
            match k {
                9 => dots::<9>(b, xp, ext, t, dw),
                TAPS => dots::<TAPS>(b, xp, ext, t, dw),
                8 => dots::<8>(b, xp, ext, t, dw),
                4 => dots::<4>(b, xp, ext, t, dw),
                _ => dots::<1>(b, xp, ext, t, dw),
            }
        }
        t += k;
    }
}

/// [`tap_dots`] for the `K` taps from `t0`, one vector accumulator each.
///
/// # Safety
/// As [`tap_dots`].
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::needless_range_loop)] // explicit indices keep the accumulators visible
unsafe fn dots<const K: usize>(b: &Blocked, xp: *const f32, ext: *const f32, t0: usize, dw: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut taps = [0usize; K];
    taps.copy_from_slice(&b.taps[t0..t0 + K]);
    let mut acc = [_mm256_setzero_ps(); K];
    for v in 0..b.ext / LANES {
        // SAFETY: vector `v < ext / 8` of the grid, and the plane read at each
        // tap's offset plus it, within the plane's slack (this function's contract).
        unsafe {
            let e = _mm256_loadu_ps(ext.add(v * LANES));
            for k in 0..K {
                acc[k] = _mm256_fmadd_ps(e, _mm256_loadu_ps(xp.add(taps[k] + v * LANES)), acc[k]);
            }
        }
    }
    for k in 0..K {
        // Fixed pairwise order: (lo + hi), then halves, then the last pair.
        let s = _mm_add_ps(_mm256_castps256_ps128(acc[k]), _mm256_extractf128_ps(acc[k], 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        dw[b.woff[t0 + k]] += _mm_cvtss_f32(s);
    }
}
