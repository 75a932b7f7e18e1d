//! Group normalisation (`GroupNorm`, `GroupNormGrad`; layer norm is one
//! group), float32 and float64.
//!
//! A (sample, group) is a contiguous row of `C / groups · S` elements, so
//! both passes work on rows: the forward pass takes the mean, then the
//! variance around it (two vectorised reductions over a cache-resident row),
//! then writes `x · scale + shift` per channel; the gradient takes
//! `Σ g·w` and `Σ g·w·x̂` per row, then writes `dx`. Rows are split over the
//! worker team above a size threshold. The weight and bias gradients sum over
//! rows: each of a fixed number of row chunks (fixed at build time) adds into
//! its own partial buffer, and the partials are added in chunk order, so
//! results do not depend on thread timing.

use std::sync::Mutex;

use popart_ir::ops::all as ir;

use super::dispatch::with_float;
use super::elem::Float;
use super::par::{par_split, Simd, PAR_MIN_ELEMS};
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::cpu::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};
use crate::cpu::team;

/// Registered kernels.
pub(crate) const KERNELS: &[KernelEntry] = &[(&ir::GroupNorm, build), (&ir::GroupNormGrad, build)];

/// Lanes of the vectorised sums.
const LANES: usize = 8;

/// `Σ f(a_i, b_i)` in `LANES` partial sums (so the loop vectorises), then added.
#[inline(always)]
fn lane_sum<T: Float>(a: &[T], b: &[T], f: impl Fn(T, T) -> T) -> T {
    let mut part = [T::ZERO; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..LANES {
            part[l] = part[l] + f(x[l], y[l]);
        }
    }
    for (x, y) in ar.iter().zip(br) {
        part[0] = part[0] + f(*x, *y);
    }
    let mut s = T::ZERO;
    for p in part {
        s = s + p;
    }
    s
}

/// One pass over a row of a (one value per channel) group norm gradient:
/// returns `(Σ g·w, Σ g·w·x̂)` and adds `g·x̂` to `dw` and `g` to `db`.
#[inline(always)]
fn row_sums<T: Float>(g: &[T], x: &[T], w: &[T], m: T, is: T, dw: &mut [T], db: &mut [T]) -> (T, T) {
    let (mut a, mut b) = ([T::ZERO; LANES], [T::ZERO; LANES]);
    let n = g.len() / LANES * LANES;
    // Every slice cut to the row's length, so the loop's bounds checks fold away.
    let (x, w) = (&x[..g.len()], &w[..g.len()]);
    let (dw, db) = (&mut dw[..g.len()], &mut db[..g.len()]);
    for i in (0..n).step_by(LANES) {
        let (gc, xc, wc) = (&g[i..i + LANES], &x[i..i + LANES], &w[i..i + LANES]);
        let (dwc, dbc) = (&mut dw[i..i + LANES], &mut db[i..i + LANES]);
        for l in 0..LANES {
            let xh = (xc[l] - m) * is;
            let gw = gc[l] * wc[l];
            a[l] = a[l] + gw;
            b[l] = b[l] + gw * xh;
            dwc[l] = dwc[l] + gc[l] * xh;
            dbc[l] = dbc[l] + gc[l];
        }
    }
    for i in n..g.len() {
        let xh = (x[i] - m) * is;
        a[0] = a[0] + g[i] * w[i];
        b[0] = b[0] + g[i] * w[i] * xh;
        dw[i] = dw[i] + g[i] * xh;
        db[i] = db[i] + g[i];
    }
    let (mut sa, mut sb) = (T::ZERO, T::ZERO);
    for l in 0..LANES {
        sa = sa + a[l];
        sb = sb + b[l];
    }
    (sa, sb)
}

struct GroupNormKernel<T> {
    grad: bool,
    /// Rows (N · groups), row length, channels per group, elements per channel.
    rows: usize,
    len: usize,
    cg: usize,
    s: usize,
    channels: usize,
    eps: T,
    pos: Vec<usize>,
    parallel: bool,
    /// Row chunks of the gradient's weight/bias sums, and their partials
    /// (`[dw, db]`, `2 · channels` per chunk).
    chunks: Vec<usize>,
    partials: Mutex<Vec<T>>,
    _t: Types<T>,
}

fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let grad = spec.is::<ir::GroupNormGrad>();
    let x = if grad { spec.input(1)? } else { spec.input(0)? };
    let w = if grad { spec.input(2)? } else { spec.input(1)? };
    let shape = x.shape();
    if shape.len() < 2 || w.shape() != [shape[1]] {
        return Err(spec.error(format!("input {} and weight {} do not match", x.info, w.info)));
    }
    let (n, c) = (shape[0], shape[1]);
    let s: usize = shape[2..].iter().product();
    let groups = usize::try_from(spec.attr_int_or("num_groups", 1))
        .ok()
        .filter(|&g| g >= 1 && c.is_multiple_of(g))
        .ok_or_else(|| spec.error("num_groups must divide the channels"))?;
    let pos = if grad {
        (0..5).map(|i| spec.input(i).map(|s| s.pos)).collect::<Result<Vec<_>, _>>()?
    } else {
        (0..3).map(|i| spec.input(i).map(|s| s.pos)).collect::<Result<Vec<_>, _>>()?
    };
    let rows = n * groups;
    let len = (c / groups) * s;
    let parallel = team::num_threads() > 1 && rows > 1 && rows * len >= PAR_MIN_ELEMS / 4;
    let nchunks = if grad && parallel { (2 * team::num_threads()).min(rows) } else { 1 };
    let chunks: Vec<usize> = (0..=nchunks).map(|i| i * rows / nchunks).collect();
    let dt = x.dtype();
    let eps = spec.attr_float_or("epsilon", 1e-5);
    with_float!(dt, T => {
        let partials = popart_ir::size::try_zeroed_vec::<T>(nchunks * 2 * c, "group norm partials")
            .map_err(|e| spec.error(e.to_string()))?;
        Ok(Box::new(GroupNormKernel::<T> {
            grad, rows, len, cg: c / groups, s, channels: c, eps: <T as super::elem::Num>::from_f64(eps), pos, parallel, chunks,
            partials: Mutex::new(partials), _t: Types::default(),
        }))
    }, _ => Err(spec.unsupported_dtype(dt)))
}

impl<T: Float> GroupNormKernel<T> {
    /// Channel of row `r`'s first element.
    fn first_channel(&self, r: usize) -> usize {
        (r * self.cg) % self.channels
    }

    /// Forward rows `range`: y, mean, inv_std.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn forward(
        &self,
        range: std::ops::Range<usize>,
        x: *const T,
        w: &[T],
        b: &[T],
        y: *mut T,
        mean: *mut T,
        inv: *mut T,
    ) {
        let n = T::from_f64(self.len as f64);
        for r in range {
            let xr = slice(x.add(r * self.len), self.len);
            let yr = slice_mut(y.add(r * self.len), self.len);
            let m = lane_sum(xr, xr, |a, _| a) / n;
            let var = lane_sum(xr, xr, |a, _| (a - m) * (a - m)) / n;
            let is = T::ONE / (var + self.eps).sqrt();
            *mean.add(r) = m;
            *inv.add(r) = is;
            let c0 = self.first_channel(r);
            if self.s == 1 {
                let (wr, br) = (&w[c0..c0 + self.cg], &b[c0..c0 + self.cg]);
                for (((o, &v), &wv), &bv) in yr.iter_mut().zip(xr).zip(wr).zip(br) {
                    *o = (v - m) * is * wv + bv;
                }
            } else {
                for (k, (yc, xc)) in yr.chunks_exact_mut(self.s).zip(xr.chunks_exact(self.s)).enumerate() {
                    let scale = is * w[c0 + k];
                    let shift = b[c0 + k] - m * scale;
                    for (o, &v) in yc.iter_mut().zip(xc) {
                        *o = v * scale + shift;
                    }
                }
            }
        }
    }

    /// [`Self::forward`] of rows `range` with the kernel's buffers
    /// `[x, w, b, y, mean, inv_std]`.
    #[inline(always)]
    fn forward_at(&self, range: std::ops::Range<usize>, [x, w, b, y, mean, inv]: [SendPtr<T>; 6]) {
        let c = self.channels;
        // SAFETY: the buffers are the kernel's arguments (checked shapes); rows
        // are disjoint between tasks; w and b are read only.
        unsafe {
            let (w, b) = (slice(w.get(), c), slice(b.get(), c));
            self.forward(range, x.get(), w, b, y.get(), mean.get(), inv.get());
        }
    }

    /// Gradient rows `range`: dx, and dw/db added into `dwb` (`[dw.., db..]`).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn backward(
        &self,
        range: std::ops::Range<usize>,
        g: *const T,
        x: *const T,
        w: &[T],
        mean: &[T],
        inv: &[T],
        dx: *mut T,
        dwb: &mut [T],
    ) {
        let n = T::from_f64(self.len as f64);
        let c = self.channels;
        for r in range {
            let (gr, xr) = (slice(g.add(r * self.len), self.len), slice(x.add(r * self.len), self.len));
            let dr = slice_mut(dx.add(r * self.len), self.len);
            let (m, is) = (mean[r], inv[r]);
            let c0 = self.first_channel(r);
            // Σ g·w and Σ g·w·x̂ over the row; dw, db per channel.
            let (mut sg, mut sgx) = (T::ZERO, T::ZERO);
            if self.s == 1 {
                let wr = &w[c0..c0 + self.cg];
                let (dw, db) = dwb.split_at_mut(c);
                (sg, sgx) = row_sums(gr, xr, wr, m, is, &mut dw[c0..c0 + self.cg], &mut db[c0..c0 + self.cg]);
            } else {
                for (k, (gc, xc)) in gr.chunks_exact(self.s).zip(xr.chunks_exact(self.s)).enumerate() {
                    let s_g = lane_sum(gc, gc, |a, _| a);
                    let s_gx = lane_sum(gc, xc, |a, b| a * (b - m)) * is;
                    let wv = w[c0 + k];
                    sg = sg + s_g * wv;
                    sgx = sgx + s_gx * wv;
                    dwb[c0 + k] = dwb[c0 + k] + s_gx;
                    dwb[c + c0 + k] = dwb[c + c0 + k] + s_g;
                }
            }
            let (a, bcoef) = (sg / n, sgx / n);
            // dx = is · (g·w − mean(g·w) − x̂ · mean(g·w·x̂))
            if self.s == 1 {
                let wr = &w[c0..c0 + self.cg];
                for (((o, &gv), &xv), &wv) in dr.iter_mut().zip(gr).zip(xr).zip(wr) {
                    *o = is * (gv * wv - a - (xv - m) * is * bcoef);
                }
            } else {
                for (k, ((dc, gc), xc)) in
                    dr.chunks_exact_mut(self.s).zip(gr.chunks_exact(self.s)).zip(xr.chunks_exact(self.s)).enumerate()
                {
                    let wv = w[c0 + k];
                    for ((o, &gv), &xv) in dc.iter_mut().zip(gc).zip(xc) {
                        *o = is * (gv * wv - a - (xv - m) * is * bcoef);
                    }
                }
            }
        }
    }
}

impl<T: Float> Kernel for GroupNormKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let inp = |i: usize| SendPtr(args.inputs[self.pos[i]] as *mut T);
        let out = |i: usize| SendPtr(args.outputs[i] as *mut T);
        let c = self.channels;
        if !self.grad {
            let ptrs = [inp(0), inp(1), inp(2), out(0), out(1), out(2)];
            // The work closures are `#[inline(always)]` so that the forward
            // pass compiles inside the SIMD tier's build (see `par`).
            if self.parallel {
                par_split(
                    self.rows,
                    2,
                    1,
                    #[inline(always)]
                    move |range| self.forward_at(range, ptrs),
                );
            } else {
                Simd::for_cost(1).run_narrow(
                    #[inline(always)]
                    || self.forward_at(0..self.rows, ptrs),
                );
            }
            return Ok(());
        }
        let (g, x, w, mean, inv) = (inp(0), inp(1), inp(2), inp(3), inp(4));
        let (dx, dw, db) = (out(0), out(1), out(2));
        slice_mut(dw.get(), c).fill(T::ZERO);
        slice_mut(db.get(), c).fill(T::ZERO);
        let mut partials = self.partials.lock().unwrap_or_else(|e| e.into_inner());
        partials.fill(T::ZERO);
        let parts = SendPtr(partials.as_mut_ptr());
        let nchunks = self.chunks.len() - 1;
        let simd = Simd::for_cost(1);
        let chunk = |k: usize| {
            // SAFETY: chunk k writes its own rows of dx and its own [dw, db] partial.
            simd.run_narrow(
                #[inline(always)]
                || unsafe {
                    let (w, mean, inv) = (slice(w.get(), c), slice(mean.get(), self.rows), slice(inv.get(), self.rows));
                    let dwb = slice_mut(parts.get().add(k * 2 * c), 2 * c);
                    self.backward(self.chunks[k]..self.chunks[k + 1], g.get(), x.get(), w, mean, inv, dx.get(), dwb);
                },
            )
        };
        if nchunks > 1 {
            team::run(nchunks, &chunk);
        } else {
            chunk(0);
        }
        let (dwo, dbo) = (slice_mut(dw.get(), c), slice_mut(db.get(), c));
        for part in partials.chunks_exact(2 * c) {
            dwo.iter_mut().zip(&part[..c]).for_each(|(o, &p)| *o = *o + p);
            dbo.iter_mut().zip(&part[c..]).for_each(|(o, &p)| *o = *o + p);
        }
        Ok(())
    }
}
