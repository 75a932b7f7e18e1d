//! `Attention` and `AttentionGrad` (see `popart_ir::ops::attention`): one
//! task per (batch, head), its scores computed a block of query rows at a time
//! into scratch that stays in cache (the shared [`scratch`] slots, one per
//! piece, grown when the kernel is built); nothing of size `T × T` is written
//! to the arena.
//!
//! - The heads are read in place from `qkv` `[B, T, 3·D]` (row stride `3·D`)
//!   and `y` is written in place into `[B, T, D]`: no head transposes.
//! - Causal: query rows `r0..r1` need keys `0..r1` only, so the products of
//!   each row block stop at its diagonal ([`ROWS`] rows per block: 37.5% of the
//!   score products skipped at `T = 128`), and each register tile inside a
//!   block skips what its own rows do not need ([`Causal`]: scores past its
//!   last query, probability terms that are 0, query terms before a key).
//! - Forward per row block: `s = q kᵀ`, `p = softmax(scale · s)` with the
//!   masked positions at exactly 0 (as `exp(-1e9 - max)` in f32), the row's
//!   log-sum-exp kept in the second output, `y = p v`.
//! - Backward per row block (the probabilities recomputed from the log-sum-exp):
//!   `dp = g vᵀ`, `ds = p ⊙ (dp − rowsum(g ⊙ y)) · scale`, `dq = ds k`,
//!   `dk += dsᵀ q`, `dv += pᵀ g`.
//! - The products run unpacked on a register tile ([`tile`]), the keys and
//!   values transposed once per head where a product reads them as columns;
//!   each result element is summed in a fixed order whatever the thread count.

use super::nn::{exp_ftz, row_dot};
use super::par::Simd;
use super::ptr::{slice, slice_mut, SendPtr};
use super::scratch;
use super::spec::{boxed, BuildResult, SpecExt};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use crate::team;
use popart_ir::ops::all as ir;
use popart_ir::ops::attention::AttentionAttrs;
use std::sync::atomic::{AtomicUsize, Ordering};
use tile::{product, transpose, Causal, Mat};

mod tile;

/// Query rows per block.
const ROWS: usize = 32;

/// Lanes of the row loops' partial sums.
const LANES: usize = 16;

/// `row[..valid] = softmax(scale · row[..valid])` in place and the rest of
/// the row 0 (its length a multiple of [`LANES`] at least `valid` rounded up
/// to one, so every pass runs in whole vectors); returns the log-sum-exp of
/// `scale · row[..valid]`. Three passes over the live part (the largest
/// scaled score, the exponentials and their sum, the division by the sum),
/// the scaling inside the first two: the values of scaling, masking and
/// taking the softmax one after another.
#[inline(always)]
fn softmax_row(row: &mut [f32], valid: usize, scale: f32) -> f32 {
    let live = valid.next_multiple_of(LANES).min(row.len());
    let (row, tail) = row.split_at_mut(live);
    tail.fill(0.0);
    let max = row_max_scaled(&row[..valid], scale);
    let mut sums = [0.0f32; LANES];
    for_live_lanes(
        row,
        valid,
        |v, on| {
            // exp(-inf - max) is exactly 0: the masked positions add nothing.
            let e = if on { exp_ftz(*v * scale - max) } else { 0.0 };
            *v = e;
            e
        },
        &mut sums,
    );
    let sum = sums.iter().sum::<f32>();
    let inv = 1.0 / sum;
    row.iter_mut().for_each(|v| *v *= inv);
    max + sum.ln()
}

/// The largest of `scale · x` over `xs`, ignoring NaN (as `nn::row_max` over
/// the scaled row).
#[inline(always)]
fn row_max_scaled(xs: &[f32], scale: f32) -> f32 {
    let mut acc = [f32::MIN; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            let v = v * scale;
            *a = if v > *a { v } else { *a };
        }
    }
    let m = acc.iter().fold(f32::MIN, |m, &v| if v > m { v } else { m });
    rest.iter().fold(m, |m, &v| if v * scale > m { v * scale } else { m })
}

/// `f(v, on)` for every element of `row` (a whole number of [`LANES`]), `on`
/// for the first `valid`, its results summed in lanes into `sums`: whole
/// vectors, the last one partly on.
#[inline(always)]
fn for_live_lanes(row: &mut [f32], valid: usize, mut f: impl FnMut(&mut f32, bool) -> f32, sums: &mut [f32; LANES]) {
    let full = valid / LANES * LANES;
    let (body, last) = row.split_at_mut(full.min(row.len()));
    for c in body.chunks_exact_mut(LANES) {
        for (s, v) in sums.iter_mut().zip(c) {
            *s += f(v, true);
        }
    }
    for (j, (s, v)) in sums.iter_mut().zip(last.iter_mut()).enumerate() {
        *s += f(v, full + j < valid);
    }
}

/// One row of the backward: the scores `p` (`q kᵀ` in, probabilities
/// `exp(scale · s − lse)` out) and `dp` (`g vᵀ` in, `p ⊙ (dp − dot) · scale`
/// out), both 0 from `valid` on (the whole rows in whole vectors, as
/// [`softmax_row`]), in one pass.
#[inline(always)]
fn score_grad_row(p: &mut [f32], dp: &mut [f32], valid: usize, dot: f32, lse: f32, scale: f32) {
    let live = valid.next_multiple_of(LANES).min(p.len());
    p[live..].fill(0.0);
    dp[live..].fill(0.0);
    let full = valid / LANES * LANES;
    let one = |p: &mut f32, dp: &mut f32, on: bool| {
        let v = if on { exp_ftz(*p * scale - lse) } else { 0.0 };
        *p = v;
        *dp = if on { v * (*dp - dot) * scale } else { 0.0 };
    };
    for (pc, dc) in p[..full].chunks_exact_mut(LANES).zip(dp[..full].chunks_exact_mut(LANES)) {
        for (p, dp) in pc.iter_mut().zip(dc) {
            one(p, dp, true);
        }
    }
    for (j, (p, dp)) in p[full..live].iter_mut().zip(&mut dp[full..live]).enumerate() {
        one(p, dp, full + j < valid);
    }
}

/// The dimensions of one attention, fixed at build time.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    seq: usize,
    width: usize,
    heads: usize,
    scale: f32,
    causal: bool,
}

impl Dims {
    fn dh(&self) -> usize {
        self.width / self.heads
    }
    /// Keys row block `r0..r1` attends to.
    fn keys(&self, r1: usize) -> usize {
        if self.causal {
            r1
        } else {
            self.seq
        }
    }
    /// Row stride of a block of scores over `keys` keys, and of the keys and
    /// values transposed (`keys` = `seq`): whole vectors, an odd number of
    /// them, so that successive rows fall in different sets of the L1 cache
    /// (a stride of 512 bytes maps 64 rows onto 8 of its 64 sets).
    fn stride(&self, keys: usize) -> usize {
        let s = keys.next_multiple_of(LANES);
        if (s / LANES).is_multiple_of(2) {
            s + LANES
        } else {
            s
        }
    }
    /// `c` when causal, else the whole product.
    fn cut(&self, c: Causal) -> Causal {
        if self.causal {
            c
        } else {
            Causal::Full
        }
    }
    /// Keys query row `i` attends to.
    fn valid(&self, i: usize) -> usize {
        if self.causal {
            i + 1
        } else {
            self.seq
        }
    }
    /// Offsets of head `bh`'s first element in `qkv` (its queries; the keys
    /// and values `width` and `2 · width` further) and in `y`.
    fn offsets(&self, bh: usize) -> (usize, usize) {
        let (b, h) = (bh / self.heads, bh % self.heads);
        (b * self.seq * 3 * self.width + h * self.dh(), b * self.seq * self.width + h * self.dh())
    }
    /// Whether the heads are split over the team: from 2^18 multiply-adds.
    fn parallel(&self) -> bool {
        [self.heads, self.seq, self.seq, self.dh()].iter().fold(self.batch, |a, &b| a.saturating_mul(b)) >= 1 << 18
    }
    /// Scratch of one forward head: a block of scores and the transposed keys.
    fn forward_scratch(&self) -> usize {
        (ROWS + self.dh()) * self.stride(self.seq)
    }
    /// Scratch of one gradient head: scores, their gradients, keys and values transposed.
    fn grad_scratch(&self) -> usize {
        2 * (ROWS + self.dh()) * self.stride(self.seq)
    }
}

/// Run `f(bh, next, scratch)` for every head `bh` in `0..dims.batch ·
/// dims.heads`: one piece per scratch slot (over the team when there are
/// several), each claiming heads in turn with its slot's first `len` f32
/// values as scratch, one claim ahead: `next` is the head the piece runs
/// after `bh` (if any), whose rows `f` can prefetch while it computes `bh`.
fn for_each_head(d: &Dims, slots: &[scratch::Slot], len: usize, f: impl Fn(usize, Option<usize>, &mut [f32]) + Sync) {
    let heads = d.batch * d.heads;
    let counter = AtomicUsize::new(0);
    let claim = || Some(counter.fetch_add(1, Ordering::Relaxed)).filter(|&bh| bh < heads);
    let piece = |p: usize| {
        let mut words = slots[p].lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the slot holds at least `len` f32 values in its u64 words
        // (grown at build time, aligned) and is this piece's alone while locked.
        let s = unsafe { slice_mut(words.as_mut_ptr() as *mut f32, len) };
        let mut next = claim();
        while let Some(bh) = next {
            next = claim();
            f(bh, next, s);
        }
    };
    match slots.len() {
        0 | 1 => piece(0),
        n => team::run(n, &piece),
    }
}

/// Prefetch into level 2 the `rows` rows from `first` (row stride `rs`) of
/// `len` f32 values each of the region at `base` (row `first` of a head's
/// operand): the operand of the head a piece runs next, fetched from memory
/// while the current head computes (a head's rows are 256 bytes every 3·D
/// values, which the hardware prefetchers do not follow).
#[inline(always)]
fn prefetch_rows(base: *const f32, first: usize, rows: usize, rs: isize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
        for r in first..first + rows {
            for c in (0..len).step_by(16) {
                // A prefetch is a hint: it never faults, whatever the address.
                let p = base.wrapping_offset(r as isize * rs).wrapping_add(c);
                // SAFETY: prefetching has no architectural effect.
                unsafe { _mm_prefetch::<_MM_HINT_T1>(p as *const i8) };
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (base, first, rows, rs, len);
}

/// The scratch slots of an attention whose heads need `len` f32 values each:
/// one per thread (at most one per head) above the size threshold, else one.
fn head_slots(spec: &KernelSpec<'_>, d: &Dims, len: usize) -> Result<Vec<scratch::Slot>, KernelError> {
    let pieces = if d.parallel() { team::num_threads().min(d.batch * d.heads).max(1) } else { 1 };
    scratch::slots(spec, pieces, len.div_ceil(2))
}

struct AttentionKernel {
    d: Dims,
    scratch: Vec<scratch::Slot>,
}

impl AttentionKernel {
    /// Forward of head `bh` (head `bh % heads` of batch `bh / heads`); `next`:
    /// the head this task runs after it, whose rows are prefetched.
    ///
    /// # Safety
    /// `qkv`, `y` and `lse` are the kernel's buffers; no other task writes this head.
    unsafe fn head(&self, bh: usize, next: Option<usize>, qkv: *const f32, y: *mut f32, lse: *mut f32, s: &mut [f32]) {
        let d = &self.d;
        let (t, w, dh) = (d.seq, d.width, d.dh());
        let (base, ybase) = d.offsets(bh);
        let ws = 3 * w as isize;
        let (s, kt) = s.split_at_mut(ROWS * d.stride(t));
        // SAFETY: head `bh` lies inside the buffers (shapes checked at build).
        unsafe {
            let q = qkv.add(base);
            let (k, v) = (q.add(w), q.add(2 * w));
            let y = y.add(ybase);
            let lse = lse.add(bh * t);
            let ts = d.stride(t);
            transpose(k, ws, t, dh, kt, ts);
            let kt = kt.as_ptr();
            for r0 in (0..t).step_by(ROWS) {
                let r1 = (r0 + ROWS).min(t);
                let (rows, keys) = (r1 - r0, d.keys(r1));
                let ks = d.stride(keys);
                if let Some(n) = next {
                    let (nq, _) = d.offsets(n);
                    for part in 0..3 {
                        prefetch_rows(qkv.wrapping_add(nq + part * w), r0, rows, ws, dh);
                    }
                }
                let p = s.as_mut_ptr();
                let qr = q.offset(r0 as isize * ws);
                let (cols, terms) = (d.cut(Causal::Cols(r0 as isize)), d.cut(Causal::KEnd(r0 as isize)));
                product(rows, keys, dh, Mat::new(qr, ws, 1), Mat::new(kt, ts as isize, 1), p, ks as isize, false, cols);
                let simd = Simd::best();
                simd.run(
                    #[inline(always)]
                    || {
                        for i in 0..rows {
                            let row = &mut s[i * ks..i * ks + keys.next_multiple_of(LANES)];
                            *lse.add(r0 + i) = softmax_row(row, d.valid(r0 + i), d.scale);
                        }
                    },
                );
                let yr = y.offset(r0 as isize * w as isize);
                product(rows, dh, keys, Mat::new(p, ks as isize, 1), Mat::new(v, ws, 1), yr, w as isize, false, terms);
            }
        }
    }
}

impl Kernel for AttentionKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let d = self.d;
        let (qkv, y, lse) = (
            SendPtr(args.inputs[0] as *mut f32),
            SendPtr(args.outputs[0] as *mut f32),
            SendPtr(args.outputs[1] as *mut f32),
        );
        for_each_head(&d, &self.scratch, d.forward_scratch(), |bh, next, s| {
            // SAFETY: each head is claimed once; the buffers are the kernel's.
            unsafe { self.head(bh, next, qkv.get(), y.get(), lse.get(), s) };
        });
        Ok(())
    }
}

struct AttentionGradKernel {
    d: Dims,
    scratch: Vec<scratch::Slot>,
}

impl AttentionGradKernel {
    /// Gradient of head `bh` (as `AttentionKernel::head`, `next` too).
    ///
    /// # Safety
    /// The pointers are the kernel's buffers; no other task writes this head.
    #[allow(clippy::too_many_arguments)]
    unsafe fn head(
        &self,
        bh: usize,
        next: Option<usize>,
        g: *const f32,
        qkv: *const f32,
        y: *const f32,
        lse: *const f32,
        dqkv: *mut f32,
        s: &mut [f32],
    ) {
        let d = &self.d;
        let (t, w, dh) = (d.seq, d.width, d.dh());
        let (base, ybase) = d.offsets(bh);
        let (ws, wy) = (3 * w as isize, w as isize);
        let (pbuf, rest) = s.split_at_mut(ROWS * d.stride(t));
        let (dpbuf, rest) = rest.split_at_mut(ROWS * d.stride(t));
        let ts = d.stride(t);
        let (kt, vt) = rest.split_at_mut(dh * ts);
        // SAFETY: head `bh` lies inside the buffers (shapes checked at build).
        unsafe {
            let (q, k, v) = (qkv.add(base), qkv.add(base + w), qkv.add(base + 2 * w));
            let (dq, dk, dv) = (dqkv.add(base), dqkv.add(base + w), dqkv.add(base + 2 * w));
            let (g_all, y_all) = (g, y);
            let (g, y) = (g.add(ybase), y.add(ybase));
            let lse = lse.add(bh * t);
            transpose(k, ws, t, dh, kt, ts);
            transpose(v, ws, t, dh, vt, ts);
            let (kt, vt) = (kt.as_ptr(), vt.as_ptr());
            for r0 in (0..t).step_by(ROWS) {
                let r1 = (r0 + ROWS).min(t);
                let (rows, keys) = (r1 - r0, d.keys(r1));
                let ks = d.stride(keys) as isize;
                if let Some(n) = next {
                    let (nq, ny) = d.offsets(n);
                    for part in 0..3 {
                        prefetch_rows(qkv.wrapping_add(nq + part * w), r0, rows, ws, dh);
                        prefetch_rows(dqkv.wrapping_add(nq + part * w), r0, rows, ws, dh);
                    }
                    prefetch_rows(g_all.wrapping_add(ny), r0, rows, wy, dh);
                    prefetch_rows(y_all.wrapping_add(ny), r0, rows, wy, dh);
                }
                let (p, dp) = (pbuf.as_mut_ptr(), dpbuf.as_mut_ptr());
                let (qr, gr, yr) = (q.offset(r0 as isize * ws), g.offset(r0 as isize * wy), y.offset(r0 as isize * wy));
                let ts = ts as isize;
                let (cols, terms) = (d.cut(Causal::Cols(r0 as isize)), d.cut(Causal::KEnd(r0 as isize)));
                product(rows, keys, dh, Mat::new(qr, ws, 1), Mat::new(kt, ts, 1), p, ks, false, cols);
                product(rows, keys, dh, Mat::new(gr, wy, 1), Mat::new(vt, ts, 1), dp, ks, false, cols);
                Simd::best().run(
                    #[inline(always)]
                    || {
                        for i in 0..rows {
                            let gi = slice(gr.offset(i as isize * wy), dh);
                            let yi = slice(yr.offset(i as isize * wy), dh);
                            let row = i * ks as usize..i * ks as usize + keys.next_multiple_of(LANES);
                            let (prow, dprow) = (&mut pbuf[row.clone()], &mut dpbuf[row]);
                            let (dot, lse) = (row_dot(gi, yi), *lse.add(r0 + i));
                            score_grad_row(prow, dprow, d.valid(r0 + i), dot, lse, d.scale);
                        }
                    },
                );
                // dq = ds k; dk += dsᵀ q (dsᵀ(j, i) = ds[i, j]); dv += pᵀ g. The keys
                // no earlier block reached are written, not added to.
                let dqr = dq.offset(r0 as isize * ws);
                product(rows, dh, keys, Mat::new(dp, ks, 1), Mat::new(k, ws, 1), dqr, ws, false, terms);
                let seen = if r0 == 0 { 0 } else { d.keys(r0) };
                for (j0, j1, acc) in [(0, seen, true), (seen, keys, false)] {
                    let (jn, js) = (j1 - j0, j0 as isize);
                    let (dkj, dvj) = (dk.offset(js * ws), dv.offset(js * ws));
                    // Key `j0 + i` gets nothing from the query rows before it.
                    let from = d.cut(Causal::KStart(js - r0 as isize));
                    product(jn, dh, rows, Mat::new(dp.offset(js), 1, ks), Mat::new(qr, ws, 1), dkj, ws, acc, from);
                    product(jn, dh, rows, Mat::new(p.offset(js), 1, ks), Mat::new(gr, wy, 1), dvj, ws, acc, from);
                }
            }
        }
    }
}

impl Kernel for AttentionGradKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let d = self.d;
        let (g, qkv, y, lse) = (
            SendPtr(args.inputs[0] as *mut f32),
            SendPtr(args.inputs[1] as *mut f32),
            SendPtr(args.inputs[2] as *mut f32),
            SendPtr(args.inputs[3] as *mut f32),
        );
        let dqkv = SendPtr(args.outputs[0] as *mut f32);
        for_each_head(&d, &self.scratch, d.grad_scratch(), |bh, next, s| {
            // SAFETY: each head is claimed once; the buffers are the kernel's.
            unsafe { self.head(bh, next, g.get(), qkv.get(), y.get(), lse.get(), dqkv.get(), s) };
        });
        Ok(())
    }
}

/// The checked dimensions of an attention over `qkv` (input `qkv_pos`).
fn dims(spec: &KernelSpec<'_>, qkv_pos: u32) -> Result<Dims, KernelError> {
    let qkv = spec.input(qkv_pos)?;
    let AttentionAttrs { heads, scale, causal } = spec.typed()?;
    let dt = qkv.dtype();
    if dt != popart_ir::DataType::Float32 {
        return Err(spec.unsupported_dtype(dt));
    }
    let &[batch, seq, w3] = qkv.shape() else {
        return Err(spec.error(format!("qkv must be [B, T, 3·D], got {}", qkv.info)));
    };
    let width = w3 / 3;
    let heads = usize::try_from(heads).unwrap_or(0);
    if w3 % 3 != 0 || heads == 0 || width % heads != 0 {
        return Err(spec.error(format!("qkv {} does not split into 3 × {heads} heads", qkv.info)));
    }
    Ok(Dims { batch, seq, width, heads, scale: scale as f32, causal })
}

fn build_attention(spec: &KernelSpec<'_>) -> BuildResult {
    let d = dims(spec, 0)?;
    let (y, lse) = (spec.output(0)?, spec.output(1)?);
    if y.shape() != [d.batch, d.seq, d.width] || lse.shape() != [d.batch, d.heads, d.seq] {
        return Err(spec.error(format!("outputs {} and {} do not match the attention", y.info, lse.info)));
    }
    let scratch = head_slots(spec, &d, d.forward_scratch())?;
    boxed(AttentionKernel { d, scratch })
}

fn build_attention_grad(spec: &KernelSpec<'_>) -> BuildResult {
    let d = dims(spec, 1)?;
    let y = [d.batch, d.seq, d.width];
    let ok = spec.input(0)?.shape() == y
        && spec.input(2)?.shape() == y
        && spec.input(3)?.shape() == [d.batch, d.heads, d.seq]
        && spec.output(0)?.shape() == spec.input(1)?.shape();
    if !ok {
        return Err(spec.error("the gradient, output and log-sum-exp do not match the attention"));
    }
    let scratch = head_slots(spec, &d, d.grad_scratch())?;
    boxed(AttentionGradKernel { d, scratch })
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] =
    &[(&ir::Attention, build_attention), (&ir::AttentionGrad, build_attention_grad)];

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, numeric_grad, run_op, t, Rng};
    use popart_ir::ops::attention::AttentionAttrs;
    use popart_ir::{DataType, OpAttrs};

    /// `y` of the attention over `qkv` `[b, t, 3d]` in f64, from the definition
    /// (`softmax(scale · q kᵀ) v` per head, positions `j > i` left out when causal).
    fn reference(qkv: &[f64], (b, t, d, heads): (usize, usize, usize, usize), causal: bool) -> Vec<f64> {
        let dh = d / heads;
        let scale = 1.0 / (dh as f64).sqrt();
        let at = |bi: usize, i: usize, c: usize| qkv[(bi * t + i) * 3 * d + c];
        let mut y = vec![0.0; b * t * d];
        for bi in 0..b {
            for h in 0..heads {
                for i in 0..t {
                    let keys = if causal { i + 1 } else { t };
                    let dot =
                        |j: usize| (0..dh).map(|c| at(bi, i, h * dh + c) * at(bi, j, d + h * dh + c)).sum::<f64>();
                    let s: Vec<f64> = (0..keys).map(|j| dot(j) * scale).collect();
                    let m = s.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for c in 0..dh {
                        let v: f64 = (0..keys).map(|j| e[j] * at(bi, j, 2 * d + h * dh + c)).sum();
                        y[(bi * t + i) * d + h * dh + c] = v / z;
                    }
                }
            }
        }
        y
    }

    /// The kernels at this CPU's widest tier (the register tiles on AVX-512,
    /// the GEMM elsewhere, as in a build without the `avx512` feature): the
    /// forward against the f64 reference, the gradient against its central
    /// differences, at sizes that leave partial row blocks and partial vectors.
    #[test]
    fn attention_kernels_match_the_definition() {
        for &(b, tt, d, heads, causal) in &[(2, 37, 16, 2, true), (1, 20, 24, 3, false), (1, 70, 8, 1, true)] {
            let dims = (b, tt, d, heads);
            let mut rng = Rng::new(7 + tt as u64);
            let qkv = rng.vec(b * tt * 3 * d, -1.0, 1.0);
            let g = rng.vec(b * tt * d, -1.0, 1.0);
            let attrs = AttentionAttrs { heads: heads as i64, scale: 1.0 / ((d / heads) as f64).sqrt(), causal };
            let qkv_t = t(DataType::Float32, &[b, tt, 3 * d], &qkv);
            let out = run_op("Attention", attrs.to_attrs(), &[(0, qkv_t.clone())]);
            let want = reference(&qkv, dims, causal);
            assert_close(&out[0].to_f64_vec(), &want, 1e-5);
            let g_t = t(DataType::Float32, &[b, tt, d], &g);
            let ins = [(0, g_t), (1, qkv_t), (2, out[0].clone()), (3, out[1].clone())];
            let got = run_op("AttentionGrad", attrs.to_attrs(), &ins)[0].to_f64_vec();
            let loss = |x: &[f64]| reference(x, dims, causal).iter().zip(&g).map(|(y, g)| y * g).sum::<f64>();
            assert_close(&got, &numeric_grad(&qkv, 1e-6, loss), 1e-4);
        }
    }
}
