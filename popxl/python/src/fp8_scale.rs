//! The search behind `popxl.fp8_utils.host_fp8_mse_scale`: the power-of-two
//! scale that makes float data lose the least (by a mean-square-error model)
//! when cast to a float8 format.
//!
//! PopXL's model, followed here to the same numbers:
//! - a histogram of `|x|` over the float32 binades: bin 0 holds what is below
//!   `2^-126`, bin `k` (1..=252) `[2^(k-127), 2^(k-126))`, bin 253 from `2^126` up
//!   (a NaN counts in bin 126, as numpy's `frexp` puts it);
//! - for each scaling bias `b` in `[-31, 31]`, the format's binades, shifted by
//!   `b`, start at binade `start = lo + b + 31`; the error is the sum, over the
//!   normalised histogram `h`, of `edge_i^2·h[i+1]` for the binades below
//!   (`edge_i = 2^(i-126)`, plus `2^-254` once), `edge_i^2·h[i+1]·q` for those
//!   inside (`q = 2^(-2·(source mantissa bits − float8 mantissa bits))`), and
//!   `(edge_{b+31+span-1} − edge_i)^2·h[i+1]` for those above (PopXL indexes the
//!   largest edge by the bias, not by `start`: kept, so results match);
//! - the lowest error wins; among equal errors the median bias (the upper one
//!   of an even count). The scale returned is the negated bias.

use half::f16;
use numpy::{PyArrayDyn, PyArrayMethods};
use popart_ir::float8::Float8Format;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// Edges `2^-126 ..= 2^126` of the float32 binades.
const EDGES: usize = 253;
/// Smallest float32 binade exponent (no denormals), less one for `frexp`'s convention.
const SRC_MIN_EXP: i32 = -126;
/// Largest float32 binade exponent.
const SRC_MAX_EXP: i32 = 127;
/// The scaling bias range.
const MAX_BIAS: i32 = 31;

/// The histogram bin of one value (see the module docs).
fn bin(x: f32) -> usize {
    let a = x.abs();
    if a.is_nan() {
        // frexp(NaN) has exponent 0.
        (-SRC_MIN_EXP) as usize
    } else if a < f32::MIN_POSITIVE {
        0
    } else if a > 2f32.powi(126) {
        EDGES
    } else {
        // The biased exponent field of a normal float32 is its frexp exponent + 126.
        ((a.to_bits() >> 23) & 0xff) as usize
    }
}

/// Counts per bin of `xs`.
fn histogram(xs: impl Iterator<Item = f32>) -> [u64; EDGES + 1] {
    let mut h = [0u64; EDGES + 1];
    for x in xs {
        h[bin(x)] += 1;
    }
    h
}

/// `(error, bias)` of the best scaling bias for `hist` (of `n` values) cast to
/// `fmt` from data with `src_mantissa` mantissa bits.
fn best_bias(hist: &[u64; EDGES + 1], n: u64, fmt: Float8Format, src_mantissa: i32) -> (f64, i32) {
    let (e_bits, m_bits, bias) = match fmt {
        Float8Format::F143 => (4, 3, 8),
        Float8Format::F152 => (5, 2, 16),
    };
    // The format's binade exponents with its denormals, no NaN binade.
    let (fmt_min, fmt_max) = (1 - bias - m_bits, (1 << e_bits) - 1 - bias);
    let span = (fmt_max - fmt_min + 1) as usize;
    let q = 2f64.powi(-2 * (src_mantissa - m_bits));
    let lo = (fmt_min - MAX_BIAS - SRC_MIN_EXP).max(0);
    let hi = (fmt_min + MAX_BIAS - SRC_MIN_EXP).min(SRC_MAX_EXP - SRC_MIN_EXP);
    let edge = |i: usize| 2f64.powi(i as i32 + SRC_MIN_EXP);
    let total = n as f64;
    let h: Vec<f64> = hist.iter().map(|&c| c as f64 / total).collect();
    let mut errors: Vec<(f64, i32)> = Vec::with_capacity((hi - lo + 1).max(0) as usize);
    for (j, start) in (lo..=hi).enumerate() {
        let start = start as usize;
        let mut e = 0.0f64;
        for i in 0..start.min(EDGES) {
            if i == 0 {
                e += (edge(0) / 2.0).powi(2);
            }
            e += edge(i).powi(2) * h[i + 1];
        }
        for i in start..(start + span).min(EDGES) {
            e += edge(i).powi(2) * h[i + 1] * q;
        }
        let top = edge(j + span - 1);
        for i in (start + span)..EDGES {
            e += (top - edge(i)).powi(2) * h[i + 1];
        }
        errors.push((e, j as i32 - MAX_BIAS));
    }
    let lowest = errors.iter().map(|&(e, _)| e).fold(f64::INFINITY, f64::min);
    let tied: Vec<i32> = errors.iter().filter(|&&(e, _)| e == lowest).map(|&(_, b)| b).collect();
    (lowest, tied.get(tied.len() / 2).copied().unwrap_or(0))
}

/// `fp8_utils.host_fp8_mse_scale(src, dtype)` on a float16 or float32 numpy
/// array: `(error, scale)` with `scale` the log2 scale to multiply `src` by
/// before the cast (the negated best bias).
#[pyfunction]
pub fn _host_fp8_mse_scale(py: Python<'_>, src: &Bound<'_, PyAny>, float8_152: bool) -> PyResult<(f64, i64)> {
    let fmt = if float8_152 { Float8Format::F152 } else { Float8Format::F143 };
    let (hist, n, mantissa) = if let Ok(a) = src.downcast::<PyArrayDyn<f32>>() {
        let a = a.readonly();
        let v = a.as_array();
        (py.allow_threads(|| histogram(v.iter().copied())), v.len(), 23)
    } else if let Ok(a) = src.downcast::<PyArrayDyn<f16>>() {
        let a = a.readonly();
        let v = a.as_array();
        (py.allow_threads(|| histogram(v.iter().map(|x| x.to_f32()))), v.len(), 10)
    } else {
        let d = src.getattr("dtype").map(|d| d.to_string()).unwrap_or_else(|_| "unknown".into());
        return Err(PyRuntimeError::new_err(format!("dtype {d} not currently supported.")));
    };
    if n == 0 {
        return Err(PyValueError::new_err("host_fp8_mse_scale: src is empty, there is no data to choose a scale for"));
    }
    let (error, bias) = best_bias(&hist, n as u64, fmt, mantissa);
    Ok((error, -i64::from(bias)))
}
