//! `Gelu` and `GeluGrad` of float32 on AVX-512, written with intrinsics: the
//! generic maps of the op table (`x / (1 + exp(-2u))`) compile to a vector
//! division per 16 values, which is most of their cost. Here the reciprocal
//! is `vrcp14ps` refined by one Newton step (relative error below 1e-7, as
//! the division's rounding), `exp` is the table's polynomial scaled by
//! `vscalefps`, and the derivative takes `1 − s` as `e · s` (no
//! cancellation). Other dtypes and CPUs run the table's maps.
//!
//! `gelu(x) = x · s`, `s = sigmoid(2u) = 1 / (1 + e)`, `e = exp(−2u)`,
//! `u = c (x + a x³)`; `gelu'(x) = s (1 + 2 x e s u')`, `u' = c (1 + 3 a x²)`.
//! `−2u` is clamped to `[−87, 88]` (as the table's map): past `80` the
//! reciprocal of `1 + e` is below the normal range and `vrcp14ps` returns 0,
//! so the output is 0 there (the exact value rounds to 0 or a subnormal;
//! `−inf` gives NaN, as `0.5 x (1 + tanh(u))` does).

use popart_ir::DataType;

use super::super::par::{par_range_cost, Simd};
use super::super::ptr::{slice, slice_mut, SendPtr};
use super::super::spec::{BuildResult, SpecExt};
use super::{build_float, build_grad, derivative, fwd, GELU_A, GELU_C};
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};

/// Cost per element relative to an add (as the table's line).
const COST: usize = 16;

/// Whether this CPU runs the hand-written maps.
fn wide() -> bool {
    cfg!(target_arch = "x86_64") && Simd::best() == Simd::Avx512
}

/// `Gelu`: the hand-written map for float32 on AVX-512, else the table's.
pub(super) fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    if !wide() || x.dtype() != DataType::Float32 || x.info != y.info {
        return build_float::<fwd::Gelu>(spec);
    }
    Ok(Box::new(GeluKernel { n: x.info.nelms(), grad: false }))
}

/// `GeluGrad(g, x)`: as [`build`].
pub(super) fn build_grad_kernel(spec: &KernelSpec<'_>) -> BuildResult {
    let (g, x, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    if !wide() || g.dtype() != DataType::Float32 || x.info != g.info || y.info != g.info {
        return build_grad::<derivative::Gelu>(spec);
    }
    Ok(Box::new(GeluKernel { n: g.info.nelms(), grad: true }))
}

/// `Gelu` (input `x`) or `GeluGrad` (inputs `g`, `x`) over `n` float32 values.
struct GeluKernel {
    n: usize,
    grad: bool,
}

impl Kernel for GeluKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let y = SendPtr(args.outputs[0] as *mut f32);
        let a = SendPtr(args.inputs[0] as *mut f32);
        let b = SendPtr(if self.grad { args.inputs[1] } else { args.inputs[0] } as *mut f32);
        let grad = self.grad;
        par_range_cost(self.n, COST, move |r| {
            // SAFETY: the inputs and the output hold `n` float32 values (checked
            // at build), the output overlapping no input; tasks get disjoint
            // ranges; the kernel is built only where the CPU has AVX-512.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                let ys = slice_mut(y.get().add(r.start), r.len());
                let xs = slice(b.get().add(r.start), r.len());
                if grad {
                    avx512::backward(slice(a.get().add(r.start), r.len()), xs, ys);
                } else {
                    avx512::forward(xs, ys);
                }
            }
        });
        Ok(())
    }
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
