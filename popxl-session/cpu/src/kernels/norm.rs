//! Group normalisation (`GroupNorm`, `GroupNormGrad`; layer norm is one
//! group), float32 and float64.
//!
//! A (sample, group) is a contiguous row of `C / groups · S` elements, so
//! both passes work on rows: the forward pass takes the mean, then the
//! variance around it (two vectorised reductions over a cache-resident row),
//! then writes `x · scale + shift` per channel; the gradient takes
//! `Σ g·w` and `Σ g·w·x̂` per row, then writes `dx`. Rows are split over the
//! worker team above a size threshold. The weight and bias gradients sum over
//! rows: each of a number of row chunks that depends on the shape only adds
//! into its own partial buffer, and the partials are added in chunk order, so
//! results depend neither on thread timing nor on the number of threads. The
//! gradient is bound by its arithmetic (two passes over each row, the first
//! also adding into the weight and bias sums), not by memory: it runs in the
//! widest SIMD build, AVX-512 where the CPU has it (2.3x the AVX2 build's
//! speed on the gpt example's 2048 × 256 rows).
//!
//! Batch normalisation in training mode (`BatchNorm`, `BatchNormGrad`) reduces
//! each channel over the batch and spatial dims. The `N · C` strips of `S`
//! spatial elements are cut into a number of chunks that depends on the shape
//! only; each chunk adds its strips, in order, into its own per-channel
//! partials (a strip is summed in vectorised lanes; with `S == 1` a row's
//! channels are added as one vector), and the partials are added in chunk
//! order: the results depend neither on thread timing nor on the number of
//! threads. The forward pass takes the mean, then the variance around it, then
//! writes `x · a[c] + b[c]`; the gradient takes `Σ g` and `Σ g · (x − μ)`, then
//! writes `dx`. Chunks run on the worker team above a size threshold.

use std::sync::Mutex;

use popart_ir::ops::all as ir;
use popart_ir::ops::norm::{BatchNormAttrs, GroupNormAttrs};

use super::dispatch::with_float;
use super::elem::Float;
use super::par::{par_split, Simd, PAR_MIN_ELEMS};
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};
use crate::team;

/// Registered kernels.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::GroupNorm, build),
    (&ir::GroupNormGrad, build),
    (&ir::BatchNorm, build_batch_norm),
    (&ir::BatchNormGrad, build_batch_norm),
];

/// Lanes of the vectorised sums.
const LANES: usize = 16;

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
    /// `GroupNormGrad`'s optional addend of `dx` (input 5).
    addend: Option<usize>,
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
    let GroupNormAttrs { num_groups, epsilon: eps } = spec.typed()?;
    let groups = usize::try_from(num_groups)
        .ok()
        .filter(|&g| g >= 1 && c.is_multiple_of(g))
        .ok_or_else(|| spec.error("num_groups must divide the channels"))?;
    let addend = match spec.opt_input(5) {
        Some(r) if grad && r.info == x.info => Some(r.pos),
        Some(r) if grad => return Err(spec.error(format!("the addend {} must match the input {}", r.info, x.info))),
        _ => None,
    };
    let pos = if grad {
        (0..5).map(|i| spec.input(i).map(|s| s.pos)).collect::<Result<Vec<_>, _>>()?
    } else {
        (0..3).map(|i| spec.input(i).map(|s| s.pos)).collect::<Result<Vec<_>, _>>()?
    };
    let rows = n * groups;
    let len = (c / groups) * s;
    let parallel = team::num_threads() > 1 && rows > 1 && rows * len >= PAR_MIN_ELEMS / 4;
    // The shape alone sets the chunks, so `dw` and `db` do not depend on the
    // number of threads.
    let nchunks = if grad { (rows * len).div_ceil(GN_CHUNK_ELEMS).clamp(1, GN_MAX_CHUNKS).min(rows.max(1)) } else { 1 };
    let chunks: Vec<usize> = (0..=nchunks).map(|i| i * rows / nchunks).collect();
    let dt = x.dtype();
    with_float!(dt, T => {
        let partials = popart_ir::size::try_zeroed_vec::<T>(nchunks * 2 * c, "group norm partials")
            .map_err(|e| spec.error(e.to_string()))?;
        Ok(Box::new(GroupNormKernel::<T> {
            grad, rows, len, cg: c / groups, s, channels: c, eps: <T as super::elem::Num>::from_f64(eps), pos, addend, parallel, chunks,
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
    ///
    /// # Safety
    /// `x` and `y` hold `rows · len` elements, `mean` and `inv` `rows`; rows
    /// `range` (within `0..rows`) of `y`, `mean` and `inv` are touched by no one
    /// else during the call.
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
            // SAFETY: `r < rows`: row `r` of `x` and `y`, the latter this call's alone
            // (this function's contract).
            let (xr, yr) = unsafe { (slice(x.add(r * self.len), self.len), slice_mut(y.add(r * self.len), self.len)) };
            let m = lane_sum(xr, xr, |a, _| a) / n;
            let var = lane_sum(xr, xr, |a, _| (a - m) * (a - m)) / n;
            let is = T::ONE / (var + self.eps).sqrt();
            // SAFETY: `r < rows`, entry `r` of `mean` and `inv`, this call's alone.
            unsafe {
                *mean.add(r) = m;
                *inv.add(r) = is;
            }
            // An empty group (no channels or no positions): numpy's NaN mean
            // and deviation (0/0), nothing to normalise.
            if self.len == 0 {
                continue;
            }
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

    /// Gradient rows `range`: dx (plus `add`'s rows when not null), and dw/db
    /// added into `dwb` (`[dw.., db..]`).
    ///
    /// # Safety
    /// `g`, `x`, `dx` and a non-null `add` hold `rows · len` elements; rows
    /// `range` (within `0..rows`) of `dx` are touched by no one else during the call.
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
        add: *const T,
        dwb: &mut [T],
    ) {
        let n = T::from_f64(self.len as f64);
        let c = self.channels;
        for r in range {
            // An empty group adds nothing to dw and db and has no dx.
            if self.len == 0 {
                continue;
            }
            // SAFETY: `r < rows`: row `r` of `g`, `x` and `dx`, the last this call's
            // alone (this function's contract).
            let (gr, xr, dr) = unsafe {
                let at = r * self.len;
                (slice(g.add(at), self.len), slice(x.add(at), self.len), slice_mut(dx.add(at), self.len))
            };
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
            if !add.is_null() {
                // SAFETY: a non-null `add` holds `rows · len` elements (this function's contract).
                let ar = unsafe { slice(add.add(r * self.len), self.len) };
                dr.iter_mut().zip(ar).for_each(|(o, &v)| *o = *o + v);
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
        let add = SendPtr(self.addend.map_or(std::ptr::null_mut(), |p| args.inputs[p] as *mut T));
        // SAFETY: `dw` and `db` are outputs of `C` elements, overlapping no input
        // (the `KernelArgs` contract).
        unsafe {
            slice_mut(dw.get(), c).fill(T::ZERO);
            slice_mut(db.get(), c).fill(T::ZERO);
        }
        let mut partials = self.partials.lock().unwrap_or_else(|e| e.into_inner());
        partials.fill(T::ZERO);
        let parts = SendPtr(partials.as_mut_ptr());
        let nchunks = self.chunks.len() - 1;
        let simd = Simd::best();
        let chunk = |k: usize| {
            simd.run(
                #[inline(always)]
                // SAFETY: the buffers are the kernel's arguments (shapes checked at
                // build: `w` of `C`, `mean` and `inv` of `rows`, read only); chunk `k`
                // writes its own rows of dx and its own `[dw, db]` partial.
                || unsafe {
                    let (w, mean, inv) = (slice(w.get(), c), slice(mean.get(), self.rows), slice(inv.get(), self.rows));
                    let dwb = slice_mut(parts.get().add(k * 2 * c), 2 * c);
                    let rows = self.chunks[k]..self.chunks[k + 1];
                    self.backward(rows, g.get(), x.get(), w, mean, inv, dx.get(), add.get(), dwb);
                },
            )
        };
        if nchunks > 1 && self.parallel {
            team::run(nchunks, &chunk);
        } else {
            (0..nchunks).for_each(chunk);
        }
        // SAFETY: as above, the `C` elements of `dw` and `db`; the chunks are done.
        let (dwo, dbo) = unsafe { (slice_mut(dw.get(), c), slice_mut(db.get(), c)) };
        // No channels: dw and db are empty (`max(1)`: chunks of 0 would panic).
        for part in partials.chunks_exact((2 * c).max(1)).filter(|_| c > 0) {
            dwo.iter_mut().zip(&part[..c]).for_each(|(o, &p)| *o = *o + p);
            dbo.iter_mut().zip(&part[c..]).for_each(|(o, &p)| *o = *o + p);
        }
        Ok(())
    }
}

/// Elements per row chunk of a group norm gradient's weight and bias sums
/// (the chunk count depends on the shape only).
const GN_CHUNK_ELEMS: usize = 1 << 16;
/// Most row chunks of a group norm gradient's weight and bias sums.
const GN_MAX_CHUNKS: usize = 16;

/// Elements per chunk of a batch norm's channel sums (the chunk count depends
/// on the shape only, so sums do not depend on the number of threads).
const BN_CHUNK_ELEMS: usize = 1 << 14;
/// Most chunks of a batch norm's channel sums.
const BN_MAX_CHUNKS: usize = 64;

struct BatchNormKernel<T> {
    grad: bool,
    /// Channels, spatial elements per strip, elements per channel (`N · S`).
    c: usize,
    s: usize,
    m: usize,
    eps: T,
    momentum: T,
    /// `M / (M − 1)` for an unbiased running variance, else 1.
    var_factor: T,
    pos: [usize; 5],
    /// Strip boundaries of the chunks (strip `r` is sample `r / C`, channel `r % C`).
    chunks: Vec<usize>,
    parallel: bool,
    /// Per-chunk partials (`2 · C` each), then `4 · C` per-channel coefficients.
    scratch: Mutex<Vec<T>>,
    _t: Types<T>,
}

fn build_batch_norm(spec: &KernelSpec<'_>) -> BuildResult {
    let grad = spec.is::<ir::BatchNormGrad>();
    let x = spec.input(if grad { 1 } else { 0 })?;
    let shape = x.shape();
    let c = shape.get(1).copied().ok_or_else(|| spec.error(format!("input {} is not [N, C, ..]", x.info)))?;
    let s: usize = shape[2..].iter().product();
    let strips = shape[0] * c;
    let m = shape[0] * s;
    for i in 1..5 {
        let (slot, want) = if grad {
            (spec.input(if i == 1 { 0 } else { i })?, if i == 1 { shape } else { &[c][..] })
        } else {
            (spec.input(i)?, &[c][..])
        };
        if slot.shape() != want || slot.dtype() != x.dtype() {
            return Err(spec.error(format!("input {} does not match {}", slot.info, x.info)));
        }
    }
    let mut pos = [0; 5];
    for (i, p) in pos.iter_mut().enumerate() {
        *p = spec.input(i as u32)?.pos;
    }
    let total = strips * s;
    let nchunks = total.div_ceil(BN_CHUNK_ELEMS).clamp(1, BN_MAX_CHUNKS).min(strips.max(1));
    let chunks: Vec<usize> = (0..=nchunks).map(|i| i * strips / nchunks).collect();
    let parallel = team::num_threads() > 1 && nchunks > 1 && total >= PAR_MIN_ELEMS / 4;
    let BatchNormAttrs { epsilon: eps, momentum, unbiased_variance: unbiased } = spec.typed()?;
    let var_factor = if unbiased && m > 1 { m as f64 / (m - 1) as f64 } else { 1.0 };
    let dt = x.dtype();
    with_float!(dt, T => {
        let scratch = popart_ir::size::try_zeroed_vec::<T>((2 * nchunks + 4) * c, "batch norm partials")
            .map_err(|e| spec.error(e.to_string()))?;
        let f = <T as super::elem::Num>::from_f64;
        Ok(Box::new(BatchNormKernel::<T> {
            grad, c, s, m, eps: f(eps), momentum: f(momentum), var_factor: f(var_factor), pos, chunks, parallel,
            scratch: Mutex::new(scratch), _t: Types::default(),
        }))
    }, _ => Err(spec.unsupported_dtype(dt)))
}

impl<T: Float> BatchNormKernel<T> {
    /// Calls `f(n, c0..c1)` for each run of strips of one sample in strips `range`.
    #[inline(always)]
    fn segments(&self, range: std::ops::Range<usize>, mut f: impl FnMut(usize, std::ops::Range<usize>)) {
        let mut r = range.start;
        while r < range.end {
            let (n, c0) = (r / self.c, r % self.c);
            let c1 = self.c.min(c0 + (range.end - r));
            f(n, c0..c1);
            r += c1 - c0;
        }
    }

    /// Runs `f(k, strips)` for every chunk `k`, on the team when parallel; each
    /// in the AVX2 build where the CPU has it.
    #[inline(always)]
    fn over_chunks(&self, f: impl Fn(usize, std::ops::Range<usize>) + Sync) {
        let simd = Simd::for_cost(1);
        let task = |k: usize| {
            simd.run_narrow(
                #[inline(always)]
                || f(k, self.chunks[k]..self.chunks[k + 1]),
            )
        };
        let n = self.chunks.len() - 1;
        if self.parallel {
            team::run(n, &task);
        } else {
            (0..n).for_each(task);
        }
    }

    /// Adds, per channel, `Σ x` (`mean` empty) or `Σ (x − mean)²` over strips
    /// `range` into `part`.
    ///
    /// # Safety
    /// `x` holds the input's `N · C · S` elements and `range` lies in `0..N · C`.
    #[inline(always)]
    unsafe fn stat_sums(&self, range: std::ops::Range<usize>, x: *const T, mean: &[T], part: &mut [T]) {
        let (c, s) = (self.c, self.s);
        let squares = !mean.is_empty();
        self.segments(range, |n, cs| {
            // SAFETY: strips `n · C + cs` lie in `range`, inside `x` (this function's
            // contract).
            let xr = unsafe { slice(x.add((n * c + cs.start) * s), cs.len() * s) };
            if s == 1 {
                let p = &mut part[cs.clone()];
                if squares {
                    for ((o, &v), &mv) in p.iter_mut().zip(xr).zip(&mean[cs]) {
                        *o = *o + (v - mv) * (v - mv);
                    }
                } else {
                    for (o, &v) in p.iter_mut().zip(xr) {
                        *o = *o + v;
                    }
                }
            } else {
                for (xc, ch) in xr.chunks_exact(s).zip(cs) {
                    let v = if squares {
                        let mv = mean[ch];
                        lane_sum(xc, xc, |a, _| (a - mv) * (a - mv))
                    } else {
                        lane_sum(xc, xc, |a, _| a)
                    };
                    part[ch] = part[ch] + v;
                }
            }
        });
    }

    /// Adds, per channel, `Σ g` into `sg` and `Σ g · (x − mean)` into `sgx` over strips `range`.
    ///
    /// # Safety
    /// `g` and `x` hold the input's `N · C · S` elements and `range` lies in `0..N · C`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn grad_sums(
        &self,
        range: std::ops::Range<usize>,
        g: *const T,
        x: *const T,
        mean: &[T],
        sg: &mut [T],
        sgx: &mut [T],
    ) {
        let (c, s) = (self.c, self.s);
        self.segments(range, |n, cs| {
            let off = (n * c + cs.start) * s;
            // SAFETY: strips `n · C + cs` lie in `range`, inside `g` and `x` (this
            // function's contract).
            let (gr, xr) = unsafe { (slice(g.add(off), cs.len() * s), slice(x.add(off), cs.len() * s)) };
            if s == 1 {
                let (a, b, mr) = (&mut sg[cs.clone()], &mut sgx[cs.clone()], &mean[cs]);
                for ((((a, b), &gv), &xv), &mv) in a.iter_mut().zip(b.iter_mut()).zip(gr).zip(xr).zip(mr) {
                    *a = *a + gv;
                    *b = *b + gv * (xv - mv);
                }
            } else {
                for ((gc, xc), ch) in gr.chunks_exact(s).zip(xr.chunks_exact(s)).zip(cs) {
                    let mv = mean[ch];
                    sg[ch] = sg[ch] + lane_sum(gc, gc, |a, _| a);
                    sgx[ch] = sgx[ch] + lane_sum(gc, xc, |a, b| a * (b - mv));
                }
            }
        });
    }

    /// Writes `out = f(x, g, k0[c], k1[c], k2[c], k3[c])` over strips `range`,
    /// with `coef = [k0, k1, k2, k3]` (`C` each; `g` may be `x` when unused):
    /// the forward pass and the gradient `dx`.
    ///
    /// # Safety
    /// `x`, `g` and `out` hold the input's `N · C · S` elements, `range` lies in
    /// `0..N · C`, and strips `range` of `out` are touched by no one else during
    /// the call (`out` overlaps neither `x` nor `g`).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn apply(
        &self,
        range: std::ops::Range<usize>,
        x: *const T,
        g: *const T,
        coef: &[T],
        out: *mut T,
        f: impl Fn(T, T, [T; 4]) -> T,
    ) {
        let (c, s) = (self.c, self.s);
        let k: [&[T]; 4] = [&coef[..c], &coef[c..2 * c], &coef[2 * c..3 * c], &coef[3 * c..4 * c]];
        self.segments(range, |n, cs| {
            let off = (n * c + cs.start) * s;
            let len = cs.len() * s;
            // SAFETY: strips `n · C + cs` lie in `range`, inside the three buffers, and
            // are this call's alone in `out` (this function's contract).
            let (xr, gr, o) = unsafe { (slice(x.add(off), len), slice(g.add(off), len), slice_mut(out.add(off), len)) };
            if s == 1 {
                let [k0, k1, k2, k3] = k.map(|v| &v[cs.clone()]);
                for (i, ((o, &xv), &gv)) in o.iter_mut().zip(xr).zip(gr).enumerate() {
                    *o = f(xv, gv, [k0[i], k1[i], k2[i], k3[i]]);
                }
            } else {
                for (((oc, xc), gc), ch) in
                    o.chunks_exact_mut(s).zip(xr.chunks_exact(s)).zip(gr.chunks_exact(s)).zip(cs)
                {
                    let kc = k.map(|v| v[ch]);
                    for ((o, &xv), &gv) in oc.iter_mut().zip(xc).zip(gc) {
                        *o = f(xv, gv, kc);
                    }
                }
            }
        });
    }

    /// Adds the chunks' partials at `offset` (`C` each, `2 · C` apart) per channel, in chunk order.
    fn reduce_partials(&self, parts: &[T], offset: usize, out: &mut [T]) {
        out.fill(T::ZERO);
        // No channels: `out` is empty (`max(1)`: chunks of 0 would panic).
        for part in parts.chunks_exact((2 * self.c).max(1)).filter(|_| self.c > 0) {
            out.iter_mut().zip(&part[offset..offset + self.c]).for_each(|(o, &p)| *o = *o + p);
        }
    }
}

impl<T: Float> Kernel for BatchNormKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let inp = |i: usize| SendPtr(args.inputs[self.pos[i]] as *mut T);
        let out = |i: usize| SendPtr(args.outputs[i] as *mut T);
        let c = self.c;
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let nparts = (self.chunks.len() - 1) * 2 * c;
        let (parts, coef) = scratch.split_at_mut(nparts);
        parts.fill(T::ZERO);
        let pp = SendPtr(parts.as_mut_ptr());
        // SAFETY: `parts` holds `2 · C` partials for each chunk and `k` is a chunk;
        // each chunk's task asks only for its own `k`, once per pass.
        let part = move |k: usize| unsafe { slice_mut(pp.get().add(k * 2 * c), 2 * c) };
        let mcount = T::from_f64(self.m as f64);
        if !self.grad {
            let (x, scale, bias, rmean, rvar) = (inp(0), inp(1), inp(2), inp(3), inp(4));
            let (y, new_mean, new_var, mean, inv) = (out(0), out(1), out(2), out(3), out(4));
            self.over_chunks(
                #[inline(always)]
                // SAFETY: `x` is the input of `N · C · S` elements (checked at build);
                // the chunks' strips lie in `0..N · C`.
                |k, r| unsafe { self.stat_sums(r, x.get(), &[], &mut part(k)[..c]) },
            );
            // SAFETY: the output `mean` holds `C` elements and overlaps no input (the
            // `KernelArgs` contract); no chunk runs now.
            let mean_s = unsafe { slice_mut(mean.get(), c) };
            self.reduce_partials(parts, 0, mean_s);
            mean_s.iter_mut().for_each(|v| *v = *v / mcount);
            self.over_chunks(
                #[inline(always)]
                // SAFETY: as the first pass; the chunks only read `mean` (`C` elements).
                |k, r| unsafe { self.stat_sums(r, x.get(), slice(mean.get(), c), &mut part(k)[c..]) },
            );
            // SAFETY: the per-channel inputs and outputs hold `C` elements (checked at
            // build); the outputs overlap no input nor each other (the `KernelArgs`
            // contract), and no chunk runs now.
            let (mean_s, inv_s, scale, bias, rmean, rvar, nm, nv) = unsafe {
                (
                    slice(mean.get(), c),
                    slice_mut(inv.get(), c),
                    slice(scale.get(), c),
                    slice(bias.get(), c),
                    slice(rmean.get(), c),
                    slice(rvar.get(), c),
                    slice_mut(new_mean.get(), c),
                    slice_mut(new_var.get(), c),
                )
            };
            self.reduce_partials(parts, c, inv_s);
            let keep = T::ONE - self.momentum;
            // coef = [μ, scale · inv_std, bias, _]: y = (x − μ) · a + bias.
            coef[..c].copy_from_slice(mean_s);
            coef[2 * c..3 * c].copy_from_slice(bias);
            for ch in 0..c {
                let var = inv_s[ch] / mcount;
                let is = T::ONE / (var + self.eps).sqrt();
                inv_s[ch] = is;
                nm[ch] = self.momentum * rmean[ch] + keep * mean_s[ch];
                nv[ch] = self.momentum * rvar[ch] + keep * (var * self.var_factor);
                coef[c + ch] = scale[ch] * is;
            }
            let cf = SendPtr(coef.as_mut_ptr());
            self.over_chunks(
                #[inline(always)]
                // SAFETY: `x` and `y` have `N · C · S` elements and do not overlap (the
                // `KernelArgs` contract); chunk strips are disjoint; `cf` is the
                // scratch's `4 · C` coefficients, only read here.
                |_, r| unsafe {
                    self.apply(r, x.get(), x.get(), slice(cf.get(), 4 * c), y.get(), |xv, _, [m, a, b, _]| {
                        (xv - m) * a + b
                    })
                },
            );
            return Ok(());
        }
        let (g, x, scale, mean, inv) = (inp(0), inp(1), inp(2), inp(3), inp(4));
        let (dx, dscale, dbias) = (out(0), out(1), out(2));
        // SAFETY: the per-channel inputs hold `C` elements (checked at build).
        let (mean_s, inv_s) = unsafe { (slice(mean.get(), c), slice(inv.get(), c)) };
        self.over_chunks(
            #[inline(always)]
            |k, r| {
                let (sg, sgx) = part(k).split_at_mut(c);
                // SAFETY: `g` and `x` are inputs of `N · C · S` elements (checked at
                // build); the chunks' strips lie in `0..N · C`.
                unsafe { self.grad_sums(r, g.get(), x.get(), mean_s, sg, sgx) }
            },
        );
        // SAFETY: `dscale` and `dbias` are outputs of `C` elements, overlapping no
        // input nor each other (the `KernelArgs` contract); `scale` an input of `C`.
        let (ds, db, scale) = unsafe { (slice_mut(dscale.get(), c), slice_mut(dbias.get(), c), slice(scale.get(), c)) };
        self.reduce_partials(parts, 0, db);
        self.reduce_partials(parts, c, ds);
        // dx = p · (g − q − (x − μ) · r) with p = scale · inv_std, q = Σg / M
        // and r = inv_std · dscale / M; coef = [μ, p, q, r].
        coef[..c].copy_from_slice(mean_s);
        for ch in 0..c {
            let is = inv_s[ch];
            ds[ch] = ds[ch] * is;
            coef[c + ch] = scale[ch] * is;
            coef[2 * c + ch] = db[ch] / mcount;
            coef[3 * c + ch] = is * ds[ch] / mcount;
        }
        let cf = SendPtr(coef.as_mut_ptr());
        self.over_chunks(
            #[inline(always)]
            |_, rg| {
                let f = |xv: T, gv: T, [m, p, q, r]: [T; 4]| p * (gv - q - (xv - m) * r);
                // SAFETY: `x`, `g` and `dx` have `N · C · S` elements and `dx` overlaps
                // no input (the `KernelArgs` contract); chunk strips are disjoint;
                // `cf` is the scratch's `4 · C` coefficients, only read here.
                unsafe { self.apply(rg, x.get(), g.get(), slice(cf.get(), 4 * c), dx.get(), f) }
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, run_op, t, Rng};
    use crate::team;
    use popart_ir::ops::norm::GroupNormAttrs;
    use popart_ir::{DataType, HostTensor, OpAttrs};

    /// A layer norm's gradient over rows enough to split over the team: `dw`
    /// and `db` against f64 sums of `g · x̂` and `g`, and every output equal
    /// bit for bit with one thread and with two (the row chunks of the sums
    /// depend on the shape only).
    #[test]
    fn group_norm_grad_sums_do_not_depend_on_threads() {
        let (n, c) = (600, 256);
        let mut rng = Rng::new(3);
        let (x, g) = (rng.vec(n * c, -2.0, 2.0), rng.vec(n * c, -1.0, 1.0));
        let w = rng.vec(c, 0.5, 1.5);
        let attrs = GroupNormAttrs { num_groups: 1, epsilon: 1e-5 };
        let run = || -> Vec<HostTensor> {
            let (xt, wt) = (t(DataType::Float32, &[n, c], &x), t(DataType::Float32, &[c], &w));
            let bt = t(DataType::Float32, &[c], &vec![0.0; c]);
            let fwd = run_op("GroupNorm", attrs.to_attrs(), &[(0, xt.clone()), (1, wt.clone()), (2, bt)]);
            let gt = t(DataType::Float32, &[n, c], &g);
            let ins = [(0, gt), (1, xt), (2, wt), (3, fwd[1].clone()), (4, fwd[2].clone())];
            run_op("GroupNormGrad", attrs.to_attrs(), &ins)
        };
        let one = team::with_max_threads(1, run);
        let two = team::with_max_threads(2, run);
        for (k, (a, b)) in one.iter().zip(&two).enumerate() {
            assert!(a.bytes == b.bytes, "output {k} differs between one and two threads");
        }
        let (mut dw, mut db) = (vec![0.0; c], vec![0.0; c]);
        for r in 0..n {
            let row = &x[r * c..(r + 1) * c];
            let mean = row.iter().sum::<f64>() / c as f64;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / c as f64;
            let inv = 1.0 / (var + 1e-5).sqrt();
            for j in 0..c {
                dw[j] += g[r * c + j] * (row[j] - mean) * inv;
                db[j] += g[r * c + j];
            }
        }
        assert_close(&one[1].to_f64_vec(), &dw, 1e-4);
        assert_close(&one[2].to_f64_vec(), &db, 1e-4);
    }
}
