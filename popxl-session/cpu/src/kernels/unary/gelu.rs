//! `Gelu` and `GeluGrad` of float32 on AVX-512 and on AVX2 + FMA, written
//! with intrinsics: the generic maps of the op table (`x / (1 + exp(-2u))`)
//! compile to a vector division per vector, which is most of their cost.
//! On AVX-512 the reciprocal is `vrcp14ps` refined by one Newton step
//! (relative error below 1e-7, as the division's rounding) and `exp` the
//! table's polynomial scaled by `vscalefps`. On AVX2 the 8-lane chain is
//! latency-bound (twice the vectors per value in flight): the reciprocal is
//! a division (`vdivps` of 8 lanes: shorter than `vrcpps` and two Newton
//! steps, measured 1.1x faster on AMD), the polynomial runs by Estrin's
//! scheme and `2^k` is built in the exponent bits. Both take the
//! derivative's `1 − s` as `e · s` (no cancellation). Other dtypes and CPUs
//! run the table's maps.
//!
//! `gelu(x) = x · s`, `s = sigmoid(2u) = 1 / (1 + e)`, `e = exp(−2u)`,
//! `u = c (x + a x³)`; `gelu'(x) = s (1 + 2 x e s u')`, `u' = c (1 + 3 a x²)`.
//! `−2u` is clamped to `[−87, 88]` (as the table's map): past `80` the
//! reciprocal of `1 + e` is below the normal range and `vrcp14ps` returns 0,
//! so the output is 0 there (the exact value rounds to 0 or a subnormal,
//! which AVX2's division keeps; `−inf` gives NaN, as `0.5 x (1 + tanh(u))`
//! does).

use popart_ir::DataType;

use super::super::par::{par_range_cost, Simd};
use super::super::ptr::{slice, slice_mut, SendPtr};
use super::super::spec::{BuildResult, SpecExt};
use super::{build_float, build_grad, derivative, fwd, GELU_A, GELU_C};
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};

/// Cost per element relative to an add (as the table's line).
const COST: usize = 16;

/// The tier of the hand-written maps this CPU runs, if any.
fn tier() -> Option<Simd> {
    let best = Simd::best();
    (cfg!(target_arch = "x86_64") && best >= Simd::Avx2).then_some(best)
}

/// `Gelu`: the hand-written map for float32 on AVX-512 or AVX2, else the table's.
pub(super) fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    match tier() {
        Some(tier) if x.dtype() == DataType::Float32 && x.info == y.info => {
            Ok(Box::new(GeluKernel { n: x.info.nelms(), grad: false, tier }))
        }
        _ => build_float::<fwd::Gelu>(spec),
    }
}

/// `GeluGrad(g, x)`: as [`build`].
pub(super) fn build_grad_kernel(spec: &KernelSpec<'_>) -> BuildResult {
    let (g, x, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    match tier() {
        Some(tier) if g.dtype() == DataType::Float32 && x.info == g.info && y.info == g.info => {
            Ok(Box::new(GeluKernel { n: g.info.nelms(), grad: true, tier }))
        }
        _ => build_grad::<derivative::Gelu>(spec),
    }
}

/// `Gelu` (input `x`) or `GeluGrad` (inputs `g`, `x`) over `n` float32 values.
struct GeluKernel {
    n: usize,
    grad: bool,
    /// AVX-512 or AVX2 (the CPU has it: [`tier`]).
    tier: Simd,
}

impl Kernel for GeluKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let y = SendPtr(args.outputs[0] as *mut f32);
        let a = SendPtr(args.inputs[0] as *mut f32);
        let b = SendPtr(if self.grad { args.inputs[1] } else { args.inputs[0] } as *mut f32);
        let (grad, wide) = (self.grad, self.tier == Simd::Avx512);
        par_range_cost(self.n, COST, move |r| {
            // SAFETY: the inputs and the output hold `n` float32 values (checked
            // at build), the output overlapping no input; tasks get disjoint
            // ranges; the kernel is built only where the CPU has its tier.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                let ys = slice_mut(y.get().add(r.start), r.len());
                let xs = slice(b.get().add(r.start), r.len());
                let gs = slice(a.get().add(r.start), r.len());
                match (grad, wide) {
                    (true, true) => avx512::backward(gs, xs, ys),
                    (false, true) => avx512::forward(xs, ys),
                    (true, false) => avx2::backward(gs, xs, ys),
                    (false, false) => avx2::forward(xs, ys),
                }
            }
        });
        Ok(())
    }
}

/// Values ahead of the one computed that the maps prefetch (2 KiB): with ~25
/// vector operations per value, the out-of-order window holds too few loads
/// to hide memory's latency and the hardware's prefetchers fall behind;
/// measured 9-15% faster on the gpt example's `[16, 128, 1024]` (BENCHMARKS.md).
#[cfg(target_arch = "x86_64")]
const AHEAD: usize = 512;

/// Prefetches the line `AHEAD` values past `xs[i]` into L1 (a hint only).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn ahead(xs: &[f32], i: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: a prefetch never faults, wherever it points.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(xs.as_ptr().wrapping_add(i + AHEAD) as *const i8) };
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{GELU_A, GELU_C};
    use std::arch::x86_64::*;

    /// `(s, e)`: `1 / (1 + exp(−2u))` and `exp(−2u)` of 16 values (see the module doc).
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,avx512dq")]
    fn parts(x: __m512) -> (__m512, __m512) {
        let k1 = _mm512_set1_ps((-2.0 * GELU_C) as f32);
        let k2 = _mm512_set1_ps((-2.0 * GELU_C * GELU_A) as f32);
        let t = _mm512_mul_ps(x, x);
        let z = _mm512_mul_ps(x, _mm512_fmadd_ps(t, k2, k1));
        let z = _mm512_min_ps(_mm512_set1_ps(88.0), _mm512_max_ps(_mm512_set1_ps(-87.0), z));
        // exp(z) = 2^k · exp(r), |r| <= ln 2 / 2: the table's degree-7 polynomial.
        let k = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
            z,
            _mm512_set1_ps(std::f32::consts::LOG2_E),
        ));
        let r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693_145_75), z);
        let r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428_606_8e-6), r);
        let mut p = _mm512_set1_ps(1.0 / 5040.0);
        for c in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let e = _mm512_scalef_ps(p, k);
        let one = _mm512_set1_ps(1.0);
        let d = _mm512_add_ps(one, e);
        // One Newton step on the 14-bit reciprocal: s (2 − d s).
        let s = _mm512_rcp14_ps(d);
        let s = _mm512_fmadd_ps(s, _mm512_fnmadd_ps(d, s, one), s);
        (s, e)
    }

    /// `ys = gelu(xs)`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, VL and DQ.
    #[target_feature(enable = "avx512f,avx512vl,avx512dq")]
    pub(super) unsafe fn forward(xs: &[f32], ys: &mut [f32]) {
        let n = xs.len().min(ys.len());
        let mut i = 0;
        while i < n {
            super::ahead(xs, i);
            let m = if n - i >= 16 { 0xffff } else { ((1u32 << (n - i)) - 1) as u16 };
            // SAFETY: lanes `i..i + 16` masked to `n`, inside both slices.
            unsafe {
                let x = _mm512_maskz_loadu_ps(m, xs.as_ptr().add(i));
                let (s, _) = parts(x);
                _mm512_mask_storeu_ps(ys.as_mut_ptr().add(i), m, _mm512_mul_ps(x, s));
            }
            i += 16;
        }
    }

    /// `dxs = gs · gelu'(xs)`.
    ///
    /// # Safety
    /// As [`forward`].
    #[target_feature(enable = "avx512f,avx512vl,avx512dq")]
    pub(super) unsafe fn backward(gs: &[f32], xs: &[f32], dxs: &mut [f32]) {
        let n = gs.len().min(xs.len()).min(dxs.len());
        // 2u' = 2c + 6ac x².
        let (c2, c6) = (_mm512_set1_ps((2.0 * GELU_C) as f32), _mm512_set1_ps((6.0 * GELU_A * GELU_C) as f32));
        let one = _mm512_set1_ps(1.0);
        let mut i = 0;
        while i < n {
            super::ahead(xs, i);
            super::ahead(gs, i);
            let m = if n - i >= 16 { 0xffff } else { ((1u32 << (n - i)) - 1) as u16 };
            // SAFETY: lanes `i..i + 16` masked to `n`, inside the three slices.
            unsafe {
                // Past ±20 the derivative is 1 or 0 to f32 precision; clamping
                // keeps `x · u'` finite (`inf · 0` would make NaN) for huge `x`.
                let x = _mm512_maskz_loadu_ps(m, xs.as_ptr().add(i));
                // (NaN stays NaN: `min` and `max` return their second operand then.)
                let x = _mm512_min_ps(_mm512_set1_ps(20.0), _mm512_max_ps(_mm512_set1_ps(-20.0), x));
                let g = _mm512_maskz_loadu_ps(m, gs.as_ptr().add(i));
                let (s, e) = parts(x);
                let du2 = _mm512_fmadd_ps(_mm512_mul_ps(x, x), c6, c2);
                // s (1 + 2u' x · e s)
                let inner = _mm512_fmadd_ps(_mm512_mul_ps(x, du2), _mm512_mul_ps(e, s), one);
                _mm512_mask_storeu_ps(dxs.as_mut_ptr().add(i), m, _mm512_mul_ps(_mm512_mul_ps(g, s), inner));
            }
            i += 16;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{GELU_A, GELU_C};
    use std::arch::x86_64::*;

    /// `(s, e)`: `1 / (1 + exp(−2u))` and `exp(−2u)` of 8 values (see the module doc).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn parts(x: __m256) -> (__m256, __m256) {
        let k1 = _mm256_set1_ps((-2.0 * GELU_C) as f32);
        let k2 = _mm256_set1_ps((-2.0 * GELU_C * GELU_A) as f32);
        let t = _mm256_mul_ps(x, x);
        let z = _mm256_mul_ps(x, _mm256_fmadd_ps(t, k2, k1));
        let z = _mm256_min_ps(_mm256_set1_ps(88.0), _mm256_max_ps(_mm256_set1_ps(-87.0), z));
        // exp(z) = 2^k · exp(r), |r| <= ln 2 / 2: the table's degree-7 polynomial.
        let k = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
            z,
            _mm256_set1_ps(std::f32::consts::LOG2_E),
        ));
        let r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693_145_75), z);
        let r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428_606_8e-6), r);
        // The same polynomial by Estrin's scheme: AVX2 runs twice the
        // vectors of AVX-512 per value, so the latency of Horner's 7
        // dependent steps, not the FMA count, bounds the throughput.
        let c = |v: f32| _mm256_set1_ps(v);
        let r2 = _mm256_mul_ps(r, r);
        let p01 = _mm256_fmadd_ps(r, c(1.0), c(1.0));
        let p23 = _mm256_fmadd_ps(r, c(1.0 / 6.0), c(0.5));
        let p45 = _mm256_fmadd_ps(r, c(1.0 / 120.0), c(1.0 / 24.0));
        let p67 = _mm256_fmadd_ps(r, c(1.0 / 5040.0), c(1.0 / 720.0));
        let r4 = _mm256_mul_ps(r2, r2);
        let p03 = _mm256_fmadd_ps(p23, r2, p01);
        let p47 = _mm256_fmadd_ps(p67, r2, p45);
        let p = _mm256_fmadd_ps(p47, r4, p03);
        // z in [−87, 88] gives k in [−126, 127]: 2^k is the normal float of
        // biased exponent k + 127 (a NaN `z` makes `p` NaN, whatever `k` is).
        let two_k = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(k),
            _mm256_set1_epi32(127),
        )));
        let e = _mm256_mul_ps(p, two_k);
        let one = _mm256_set1_ps(1.0);
        let d = _mm256_add_ps(one, e);
        let s = _mm256_div_ps(one, d);
        (s, e)
    }

    /// Runs `f` over the vectors of `n` values: whole vectors in place, the
    /// tail of fewer than 8 through copies padded with zeros.
    #[inline(always)]
    fn tail<const N: usize>(n: usize, srcs: [&[f32]; N], dst: &mut [f32], mut f: impl FnMut([__m256; N]) -> __m256) {
        let mut i = 0;
        while i + 8 <= n {
            srcs.iter().for_each(|s| super::ahead(s, i));
            // SAFETY: lanes `i..i + 8` lie inside every slice (`n` is the shortest's length).
            unsafe {
                let v = srcs.map(|s| _mm256_loadu_ps(s.as_ptr().add(i)));
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), f(v));
            }
            i += 8;
        }
        if i < n {
            let mut out = [0f32; 8];
            let v = srcs.map(|s| {
                let mut buf = [0f32; 8];
                buf[..n - i].copy_from_slice(&s[i..n]);
                // SAFETY: `buf` holds 8 values.
                unsafe { _mm256_loadu_ps(buf.as_ptr()) }
            });
            // SAFETY: `out` holds 8 values.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), f(v)) };
            dst[i..n].copy_from_slice(&out[..n - i]);
        }
    }

    /// `ys = gelu(xs)`.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn forward(xs: &[f32], ys: &mut [f32]) {
        let n = xs.len().min(ys.len());
        tail(n, [xs], ys, |[x]| {
            let (s, _) = parts(x);
            _mm256_mul_ps(x, s)
        });
    }

    /// `dxs = gs · gelu'(xs)`.
    ///
    /// # Safety
    /// As [`forward`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn backward(gs: &[f32], xs: &[f32], dxs: &mut [f32]) {
        let n = gs.len().min(xs.len()).min(dxs.len());
        // 2u' = 2c + 6ac x².
        let (c2, c6) = (_mm256_set1_ps((2.0 * GELU_C) as f32), _mm256_set1_ps((6.0 * GELU_A * GELU_C) as f32));
        let one = _mm256_set1_ps(1.0);
        tail(n, [gs, xs], dxs, |[g, x]| {
            // Past ±20 the derivative is 1 or 0 to f32 precision (as AVX-512's).
            let x = _mm256_min_ps(_mm256_set1_ps(20.0), _mm256_max_ps(_mm256_set1_ps(-20.0), x));
            let (s, e) = parts(x);
            let du2 = _mm256_fmadd_ps(_mm256_mul_ps(x, x), c6, c2);
            let inner = _mm256_fmadd_ps(_mm256_mul_ps(x, du2), _mm256_mul_ps(e, s), one);
            _mm256_mul_ps(_mm256_mul_ps(g, s), inner)
        });
    }
}
