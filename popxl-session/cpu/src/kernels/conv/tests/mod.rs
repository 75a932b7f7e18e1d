//! What the convolution kernels' tests share: a case, the f64 loop every
//! method is checked against, random inputs, and a check through the kernel
//! builder.

use popart_ir::ops::conv::ConvAttrs;
use popart_ir::{Attributes, DataType, OpAttrs};

use super::super::testutil::{assert_close, infer, run_with_outputs, t, Rng};
use super::layout::Geo2;

/// (n, groups, ci_g, co_g, h, w, kh, kw, pads [t, l, b, r], dilations).
pub(crate) type Case = (usize, usize, usize, usize, usize, usize, usize, usize, [usize; 4], [usize; 2]);

/// The stride-`s` convolution `y` of `x` and `w`, and the data and weight
/// gradients `dx`, `dw` of `dy`, in f64.
pub(crate) fn naive(c: Case, s: usize, x: &[f64], w: &[f64], dy: &[f64]) -> [Vec<f64>; 3] {
    let (n, groups, ci_g, co_g, h, wd, kh, kw, p, d) = c;
    let oh = (h + p[0] + p[2] - (kh - 1) * d[0] - 1) / s + 1;
    let ow = (wd + p[1] + p[3] - (kw - 1) * d[1] - 1) / s + 1;
    let (ci, co) = (groups * ci_g, groups * co_g);
    let mut y = vec![0.0; n * co * oh * ow];
    let mut dx = vec![0.0; x.len()];
    let mut dw = vec![0.0; w.len()];
    for b in 0..n {
        for o in 0..co {
            let gi = o / co_g;
            for i in 0..ci_g {
                let c = gi * ci_g + i;
                for ki in 0..kh {
                    for kj in 0..kw {
                        let wi = ((o * ci_g + i) * kh + ki) * kw + kj;
                        let wv = w[wi];
                        for r in 0..oh {
                            for q in 0..ow {
                                let (ir, iq) = (
                                    (r * s + ki * d[0]) as isize - p[0] as isize,
                                    (q * s + kj * d[1]) as isize - p[1] as isize,
                                );
                                if ir < 0 || iq < 0 || ir as usize >= h || iq as usize >= wd {
                                    continue;
                                }
                                let xi = ((b * ci + c) * h + ir as usize) * wd + iq as usize;
                                let yi = ((b * co + o) * oh + r) * ow + q;
                                y[yi] += wv * x[xi];
                                dx[xi] += wv * dy[yi];
                                dw[wi] += x[xi] * dy[yi];
                            }
                        }
                    }
                }
            }
        }
    }
    [y, dx, dw]
}

/// The attributes of case `c` at stride `s`.
pub(crate) fn conv_attrs(c: Case, s: usize) -> ConvAttrs {
    let (groups, p, d) = (c.1, c.8, c.9);
    ConvAttrs {
        strides: Some(vec![s as i64; 2]),
        pads: Some(p.iter().map(|&v| v as i64).collect()),
        dilations: Some(d.iter().map(|&v| v as i64).collect()),
        group: groups as i64,
        auto_pad: None,
    }
}

/// The attribute map of case `c` at stride `s`.
fn attrs(c: Case, s: usize) -> Attributes {
    conv_attrs(c, s).to_attrs()
}

/// Runs case `c` (stride `s`, dtype `dt`) through the kernel builder — the
/// forward pass and both gradients — against [`naive`].
pub(crate) fn check(c: Case, s: usize, dt: DataType, seed: u64) {
    let tol = if dt == DataType::Float32 { 1e-4 } else { 1e-10 };
    check_tol(c, s, dt, seed, [tol, tol, tol * 10.0]);
}

/// [`check`] with the tolerances of `y`, `dx` and `dw` (see [`assert_close`]).
pub(crate) fn check_tol(c: Case, s: usize, dt: DataType, seed: u64, tol: [f64; 3]) {
    let (n, groups, ci_g, co_g, h, wd, kh, kw, ..) = c;
    let attrs = attrs(c, s);
    let mut rng = Rng::new(seed);
    let xs = [n, groups * ci_g, h, wd];
    let ws = [groups * co_g, ci_g, kh, kw];
    let (xv, wv) = (rng.vec(xs.iter().product(), -1.0, 1.0), rng.vec(ws.iter().product(), -1.0, 1.0));
    let (x, w) = (t(dt, &xs, &xv), t(dt, &ws, &wv));
    let y_info = infer("Conv", &attrs, &[(0, x.info.clone()), (1, w.info.clone())]).remove(0);
    let dyv = rng.vec(y_info.nelms(), -1.0, 1.0);
    let [want_y, want_dx, want_dw] = naive(c, s, &xv, &wv, &dyv);
    let y = run_with_outputs("Conv", &attrs, &[(0, x.clone()), (1, w.clone())], std::slice::from_ref(&y_info));
    let dy = t(dt, &y_info.shape, &dyv);
    let dx = run_with_outputs(
        "ConvDataGrad",
        &attrs,
        &[(0, dy.clone()), (1, w.clone()), (2, x.clone())],
        std::slice::from_ref(&x.info),
    );
    let dw =
        run_with_outputs("ConvWeightsGrad", &attrs, &[(0, dy), (1, x), (2, w.clone())], std::slice::from_ref(&w.info));
    assert_close(&y[0].to_f64_vec(), &want_y, tol[0]);
    assert_close(&dx[0].to_f64_vec(), &want_dx, tol[1]);
    assert_close(&dw[0].to_f64_vec(), &want_dw, tol[2]);
}

/// A case's geometry, float32 inputs and the f64 [`naive`] results.
pub(crate) struct Inputs {
    pub g: Geo2,
    /// `[y, dx, dw]`.
    pub want: [Vec<f64>; 3],
    pub x: Vec<f32>,
    pub w: Vec<f32>,
    pub dy: Vec<f32>,
}

/// The geometry of case `c` at stride `s`, random `x`, `w` and `dy`
/// (from `seed`) and the [`naive`] results.
pub(crate) fn inputs(c: Case, s: usize, seed: u64) -> Inputs {
    use popart_ir::ops::conv::conv_geometry;
    let (n, groups, ci_g, co_g, h, wd, kh, kw, ..) = c;
    let attrs = conv_attrs(c, s);
    let geo = conv_geometry(&[n, groups * ci_g, h, wd], &[groups * co_g, ci_g, kh, kw], &attrs).unwrap();
    let g = Geo2::new(&geo).unwrap();
    let mut rng = Rng::new(seed);
    let xv = rng.vec(n * groups * ci_g * h * wd, -1.0, 1.0);
    let wv = rng.vec(groups * co_g * ci_g * kh * kw, -1.0, 1.0);
    let dyv = rng.vec(n * groups * co_g * g.op(), -1.0, 1.0);
    let want = naive(c, s, &xv, &wv, &dyv);
    let f = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
    Inputs { g, want, x: f(&xv), w: f(&wv), dy: f(&dyv) }
}

#[cfg(target_arch = "x86_64")]
mod depthwise;
#[cfg(target_arch = "x86_64")]
mod dot;
#[cfg(target_arch = "x86_64")]
mod folded;
#[cfg(target_arch = "x86_64")]
mod implicit;
mod winograd;
