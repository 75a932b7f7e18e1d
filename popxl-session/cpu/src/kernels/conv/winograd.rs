//! Winograd F(2×2, 3×3): the float32 3×3 stride-1 convolutions with enough
//! channels and tiles (forward passes, data gradients as the forward
//! convolution of `dy` with the flipped, transposed weights, and weight
//! gradients), in tiles of 2×2 outputs.
//!
//! Each tile's 4×4 input patch `d` becomes `Bᵀ d B` (16 values per input
//! channel), each 3×3 filter `g` becomes `G g Gᵀ` (16 values per channel
//! pair, once per run), the 16 positions are 16 independent GEMMs over the
//! channels, and each tile's 16 sums `m` give its outputs `Aᵀ m A`: 16
//! multiply-adds per channel pair and tile of 4 outputs, against 36 for the
//! direct convolution (2.25x fewer). The rounding stays that of sums over
//! the channels (the transforms only add, subtract and halve small groups of
//! values).
//!
//! Work: the filters are transformed first, over the team (`U`, laid out
//! `[16][cin][cout]`); then each task takes a block of tiles (in the order
//! image, tile row, tile column) and a block of output channels, transforms
//! the block's inputs into its scratch (`V`, `[16][tiles][cin]`), multiplies
//! (`M`, `[16][tiles][cout block]`, by the `gemm` crate, the output channels
//! its rows) and writes its outputs. The transforms run 16 channels side by
//! side. Tasks write disjoint outputs and every output is one fixed
//! sequence of operations, whatever the thread count.
//!
//! A weight gradient is the same product read backwards: the gradient of
//! `U` is `Σ (A dy Aᵀ) ⊙ (Bᵀ d B)` over the tiles (16 GEMMs whose inner
//! dimension is the tiles, `dy` past the plane's edge 0) and that of the
//! filters `Gᵀ dU G`. The tiles are summed in chunks fixed when the kernel
//! is built (one task each, the partials added in chunk order).

use std::any::TypeId;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::super::matmul::MatElem;
use super::super::par::Simd;
use super::super::ptr::SendPtr;
use super::super::scratch;
use super::super::spec::SpecExt;
use super::layout::{ConvElem, Geo2};
use super::{ConvKernel, Cut, Pass, PlanCx, Task};
use crate::kernel::KernelError;
use crate::team;

/// Least input and output channels of the convolution computed: below, the
/// transforms cost more than the GEMMs save (measured: batch 32, 64 channels
/// on 56x56 ran 1.15x slower than the direct method).
const MIN_CHANNELS: usize = 128;
/// Least channels on both sides of a weight gradient, whose alternative is
/// im2col rather than the direct kernel (measured: 64 channels on 56x56 ran
/// 1.16x faster at batch 32 and 1.09x at batch 1; with fewer than
/// [`MIN_TILES`] tiles it ran 1.3-6x slower).
const MIN_CHANNELS_WEIGHTS: usize = 64;
/// Least tiles of the batch: with fewer, the transformed filters are read for
/// too few tiles (measured: batch 1, 256 channels on 14x14, 49 tiles, ran 1.3x
/// slower than the direct method).
const MIN_TILES: usize = 256;
/// Most tiles of one task (the GEMMs' columns): up to 48 columns the `gemm`
/// crate reads the transformed filters in place rather than packing them at
/// every call.
const MAX_TILES: usize = 48;
/// Transformed filters (f32 values) beyond which they stream from memory:
/// tasks then take [`MAX_TILES_BIG`] tiles so the filters are read fewer times.
const BIG_FILTERS: usize = 2 << 20;
/// Most tiles of one task when the filters are big.
const MAX_TILES_BIG: usize = 128;
/// Filters and tiles transformed side by side (one AVX-512 vector of f32).
const LANES: usize = 16;
/// Tiles a weight gradient transforms and sums at a time (measured against
/// 128 and 512: 5-10% faster at batch 32 with 64 to 512 channels).
const WGRAD_TILES: usize = 256;

/// A Winograd plan: the stride-1 3×3 convolution it computes (for a data
/// gradient, that of `dy` with the flipped, transposed filters), in tiles.
pub(super) struct Winograd {
    /// A data gradient: the filters are read flipped and transposed.
    flipped: bool,
    /// A weight gradient (of the forward convolution this plan describes).
    weights: bool,
    n: usize,
    /// Channels of the convolution computed (a data gradient's `cin` is the op's `co`).
    cin: usize,
    cout: usize,
    /// Its input and output planes and top-left padding.
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    ph: isize,
    pw: isize,
    /// Tile rows and columns of one image.
    th: usize,
    tw: usize,
    /// The shared slot of the transformed filters `[16][cin][cout]`, grown
    /// when planned and written at the start of each run (a weight gradient
    /// sums its own in its pieces' scratch and leaves it as it is).
    u: scratch::Slot,
}

impl Winograd {
    /// The plan of pass `pass` of `g`, if Winograd takes it: f32, one group,
    /// 3×3, stride and dilation 1, at least [`MIN_CHANNELS`] channels on
    /// both sides ([`MIN_CHANNELS_WEIGHTS`] for a weight gradient), [`MIN_TILES`] tiles; its
    /// filters in `u` (grown by the caller).
    fn new(g: &Geo2, pass: Pass, u: scratch::Slot) -> Option<Self> {
        let square = g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1;
        let least = if pass == Pass::Weights { MIN_CHANNELS_WEIGHTS } else { MIN_CHANNELS };
        if !square || g.groups != 1 || g.ci_g < least || g.co_g < least || g.oh == 0 || g.ow == 0 {
            return None;
        }
        let (flipped, cin, cout, ih, iw, oh, ow, ph, pw) = match pass {
            Pass::Forward => (false, g.ci_g, g.co_g, g.ih, g.iw, g.oh, g.ow, g.ph, g.pw),
            // dx[i] = Σ_a dy[i + a − (2 − p)] · w[2 − a]: the stride-1 convolution of
            // dy padded by 2 − p with the flipped filters.
            Pass::Data => (true, g.co_g, g.ci_g, g.oh, g.ow, g.ih, g.iw, 2 - g.ph, 2 - g.pw),
            Pass::Weights => (false, g.ci_g, g.co_g, g.ih, g.iw, g.oh, g.ow, g.ph, g.pw),
        };
        let (th, tw) = (oh.div_ceil(2), ow.div_ceil(2));
        if g.n.checked_mul(th * tw)? < MIN_TILES {
            return None;
        }
        let weights = pass == Pass::Weights;
        Some(Winograd { flipped, weights, n: g.n, cin, cout, ih, iw, oh, ow, ph, pw, th, tw, u })
    }

    /// Tiles of the batch.
    fn tiles(&self) -> usize {
        self.n * self.th * self.tw
    }

    /// `U = G g Gᵀ` for input channels `cols` of the convolution computed,
    /// from the op's filters `w` `[co][ci][3][3]`, [`LANES`] output channels
    /// at a time.
    ///
    /// # Safety
    /// `w` holds the op's filters; `u` the `16 · cin · cout` transformed ones,
    /// whose rows `cols` no one else writes during the call.
    #[inline(always)]
    unsafe fn transform_filters(&self, w: *const f32, u: *mut f32, cols: std::ops::Range<usize>) {
        let (cin, cout) = (self.cin, self.cout);
        let plane = cin * cout;
        for i in cols {
            for o0 in (0..cout).step_by(LANES) {
                let n = LANES.min(cout - o0);
                // g[r][c][l]: tap (r, c) of the filter of (o0 + l, i): w[o][i] forward,
                // w[i][o] flipped for a data gradient.
                let mut g = [[[0.0f32; LANES]; 3]; 3];
                for l in 0..n {
                    let o = o0 + l;
                    let f = if self.flipped { (i * cout + o) * 9 } else { (o * cin + i) * 9 };
                    for (r, row) in g.iter_mut().enumerate() {
                        for (c, tap) in row.iter_mut().enumerate() {
                            let k = if self.flipped { (2 - r) * 3 + (2 - c) } else { r * 3 + c };
                            // SAFETY: the filter lies inside `w` (this function's contract).
                            tap[l] = unsafe { *w.add(f + k) };
                        }
                    }
                }
                // G g: rows g0, (g0 + g1 + g2) / 2, (g0 − g1 + g2) / 2, g2; then the same on the columns.
                let gt = |a: &[f32; LANES], b: &[f32; LANES], d: &[f32; LANES]| {
                    let (mut p, mut q) = ([0.0f32; LANES], [0.0f32; LANES]);
                    for l in 0..LANES {
                        p[l] = 0.5 * (a[l] + b[l] + d[l]);
                        q[l] = 0.5 * (a[l] - b[l] + d[l]);
                    }
                    [*a, p, q, *d]
                };
                let gg: [[[f32; LANES]; 4]; 3] = [0, 1, 2].map(|c| gt(&g[0][c], &g[1][c], &g[2][c]));
                let out = [0, 1, 2, 3].map(|r| gt(&gg[0][r], &gg[1][r], &gg[2][r]));
                // SAFETY: row i, columns o0..o0 + n of `u` (this function's contract).
                unsafe { store16(&out, u.add(i * cout + o0), plane, n) };
            }
        }
    }

    /// Image, tile row and tile column of tile `t`.
    fn tile(&self, t: usize) -> (usize, usize, usize) {
        (t / (self.th * self.tw), t / self.tw % self.th, t % self.tw)
    }

    /// `V = Bᵀ d B` of tiles `t0..t0 + len` of every input channel into `v`
    /// (`[16][len][cin]`), [`LANES`] channels at a time.
    ///
    /// # Safety
    /// `x` holds the input of the convolution computed; `v` `16 · len · cin` values.
    #[inline(always)]
    unsafe fn transform_inputs(&self, x: *const f32, t0: usize, len: usize, v: *mut f32) {
        let (ih, iw, cin) = (self.ih as isize, self.iw as isize, self.cin);
        let plane = self.ih * self.iw;
        let stride = len * cin;
        for tl in 0..len {
            let (img, ty, tx) = self.tile(t0 + tl);
            let (r0, c0) = (2 * ty as isize - self.ph, 2 * tx as isize - self.pw);
            let inside = r0 >= 0 && c0 >= 0 && r0 + 4 <= ih && c0 + 4 <= iw;
            // The patch's offsets in the plane, or none where it is padding.
            let mut offs = [[None::<usize>; 4]; 4];
            for (u, row) in offs.iter_mut().enumerate() {
                for (c, off) in row.iter_mut().enumerate() {
                    let (r, q) = (r0 + u as isize, c0 + c as isize);
                    if inside || (r >= 0 && r < ih && q >= 0 && q < iw) {
                        *off = Some((r * iw + q) as usize);
                    }
                }
            }
            // SAFETY: image `img` of the input (this function's contract).
            let src = unsafe { x.add(img * cin * plane) };
            for ch0 in (0..cin).step_by(LANES) {
                let n = LANES.min(cin - ch0);
                // d[u][c][l]: patch value (u, c) of channel ch0 + l.
                let mut d = [[[0.0f32; LANES]; 4]; 4];
                for (row, offs) in d.iter_mut().zip(&offs) {
                    for (val, off) in row.iter_mut().zip(offs) {
                        if let Some(off) = *off {
                            for (l, v) in val.iter_mut().enumerate().take(n) {
                                // SAFETY: (channel ch0 + l, offset off) lies inside the input.
                                *v = unsafe { *src.add((ch0 + l) * plane + off) };
                            }
                        }
                    }
                }
                // Bᵀ d: rows d0 − d2, d1 + d2, d2 − d1, d1 − d3; then the same on the columns.
                let bt = |a: &[f32; LANES], b: &[f32; LANES], c: &[f32; LANES], e: &[f32; LANES]| {
                    let mut o = [[0.0f32; LANES]; 4];
                    for l in 0..LANES {
                        o[0][l] = a[l] - c[l];
                        o[1][l] = b[l] + c[l];
                        o[2][l] = c[l] - b[l];
                        o[3][l] = b[l] - e[l];
                    }
                    o
                };
                let cols: [[[f32; LANES]; 4]; 4] = [0, 1, 2, 3].map(|c| bt(&d[0][c], &d[1][c], &d[2][c], &d[3][c]));
                let out = [0, 1, 2, 3].map(|r| bt(&cols[0][r], &cols[1][r], &cols[2][r], &cols[3][r]));
                // SAFETY: tile tl, channels ch0..ch0 + n of `v` (this function's contract).
                unsafe { store16(&out, v.add(tl * cin + ch0), stride, n) };
            }
        }
    }

    /// `y = Aᵀ m A` of tiles `t0..t0 + len` for output channels `o0..o0 + rows`
    /// from `m` (`[16][len][rows]`), [`LANES`] channels at a time, the outputs
    /// past the plane's edge dropped.
    ///
    /// # Safety
    /// `y` holds the output of the convolution computed; `m` `16 · len · rows`
    /// values; no one else writes these channels of these tiles.
    #[inline(always)]
    unsafe fn transform_outputs(&self, m: *const f32, t0: usize, len: usize, o0: usize, rows: usize, y: *mut f32) {
        let plane = self.oh * self.ow;
        let stride = len * rows;
        for tl in 0..len {
            let (img, ty, tx) = self.tile(t0 + tl);
            let (r0, q0) = (2 * ty, 2 * tx);
            // The two rows and columns of the tile's outputs inside the plane.
            let (nr, nq) = ((self.oh - r0).min(2), (self.ow - q0).min(2));
            // SAFETY: image `img`, channel `o0` of the output.
            let dst = unsafe { y.add((img * self.cout + o0) * plane + r0 * self.ow + q0) };
            for ol0 in (0..rows).step_by(LANES) {
                let n = LANES.min(rows - ol0);
                // SAFETY: tile tl, channels ol0..ol0 + n of `m` (this function's contract).
                let s = unsafe { load16(m.add(tl * rows + ol0), stride, n) };
                // Aᵀ s: rows s0 + s1 + s2 and s1 − s2 − s3; then the same on the columns.
                let at = |a: &[f32; LANES], b: &[f32; LANES], c: &[f32; LANES], e: &[f32; LANES]| {
                    let mut o = [[0.0f32; LANES]; 2];
                    for l in 0..LANES {
                        o[0][l] = a[l] + b[l] + c[l];
                        o[1][l] = b[l] - c[l] - e[l];
                    }
                    o
                };
                let cols: [[[f32; LANES]; 2]; 4] = [0, 1, 2, 3].map(|c| at(&s[0][c], &s[1][c], &s[2][c], &s[3][c]));
                let out = [0, 1].map(|i| at(&cols[0][i], &cols[1][i], &cols[2][i], &cols[3][i]));
                for (i, row) in out.iter().enumerate().take(nr) {
                    for (j, val) in row.iter().enumerate().take(nq) {
                        for (l, &v) in val.iter().enumerate().take(n) {
                            // SAFETY: (r0 + i, q0 + j) lies inside the plane of channel o0 + ol0 + l.
                            unsafe { *dst.add((ol0 + l) * plane + i * self.ow + j) = v };
                        }
                    }
                }
            }
        }
    }

    /// `A dy Aᵀ` of tiles `t0..t0 + len` of every output channel into `e`
    /// (`[16][len][cout]`), [`LANES`] channels at a time: the weight
    /// gradient's transform of the output gradient (its values past the
    /// plane's edge 0).
    ///
    /// # Safety
    /// `dy` holds the output gradient; `e` `16 · len · cout` values.
    #[inline(always)]
    unsafe fn transform_grads(&self, dy: *const f32, t0: usize, len: usize, e: *mut f32) {
        let (cout, plane) = (self.cout, self.oh * self.ow);
        let stride = len * cout;
        for tl in 0..len {
            let (img, ty, tx) = self.tile(t0 + tl);
            let (r0, q0) = (2 * ty, 2 * tx);
            let mut offs = [[None::<usize>; 2]; 2];
            for (i, row) in offs.iter_mut().enumerate() {
                for (j, off) in row.iter_mut().enumerate() {
                    if r0 + i < self.oh && q0 + j < self.ow {
                        *off = Some((r0 + i) * self.ow + q0 + j);
                    }
                }
            }
            // SAFETY: image `img` of the output gradient (this function's contract).
            let src = unsafe { dy.add(img * cout * plane) };
            for o0 in (0..cout).step_by(LANES) {
                let n = LANES.min(cout - o0);
                let mut d = [[[0.0f32; LANES]; 2]; 2];
                for (row, offs) in d.iter_mut().zip(&offs) {
                    for (val, off) in row.iter_mut().zip(offs) {
                        if let Some(off) = *off {
                            for (l, v) in val.iter_mut().enumerate().take(n) {
                                // SAFETY: (channel o0 + l, offset off) lies inside the gradient.
                                *v = unsafe { *src.add((o0 + l) * plane + off) };
                            }
                        }
                    }
                }
                // A d: rows d0, d0 + d1, d0 − d1, −d1; then the same on the columns.
                let a = |p: &[f32; LANES], q: &[f32; LANES]| {
                    let mut o = [[0.0f32; LANES]; 4];
                    for l in 0..LANES {
                        o[0][l] = p[l];
                        o[1][l] = p[l] + q[l];
                        o[2][l] = p[l] - q[l];
                        o[3][l] = -q[l];
                    }
                    o
                };
                let cols: [[[f32; LANES]; 4]; 2] = [0, 1].map(|c| a(&d[0][c], &d[1][c]));
                let out = [0, 1, 2, 3].map(|r| a(&cols[0][r], &cols[1][r]));
                // SAFETY: tile tl, channels o0..o0 + n of `e` (this function's contract).
                unsafe { store16(&out, e.add(tl * cout + o0), stride, n) };
            }
        }
    }

    /// `dw = Gᵀ dU G` of input channels `cols` from the summed `dU`
    /// (`[16][cin][cout]`) into the weight gradient `dw` `[co][ci][3][3]`.
    ///
    /// # Safety
    /// `du` holds `16 · cin · cout` values; `dw` the op's weight gradient,
    /// whose input channels `cols` no one else writes during the call.
    #[inline(always)]
    unsafe fn untransform_filters(&self, du: *const f32, dw: *mut f32, cols: std::ops::Range<usize>) {
        let (cin, cout) = (self.cin, self.cout);
        let plane = cin * cout;
        for i in cols {
            for o0 in (0..cout).step_by(LANES) {
                let n = LANES.min(cout - o0);
                // SAFETY: row i, columns o0..o0 + n of `du` (this function's contract).
                let m = unsafe { load16(du.add(i * cout + o0), plane, n) };
                // Gᵀ m: rows m0 + (m1 + m2) / 2, (m1 − m2) / 2, (m1 + m2) / 2 + m3;
                // then the same on the columns.
                let gt = |a: &[f32; LANES], b: &[f32; LANES], c: &[f32; LANES], d: &[f32; LANES]| {
                    let mut o = [[0.0f32; LANES]; 3];
                    for l in 0..LANES {
                        let (h, k) = (0.5 * (b[l] + c[l]), 0.5 * (b[l] - c[l]));
                        o[0][l] = a[l] + h;
                        o[1][l] = k;
                        o[2][l] = h + d[l];
                    }
                    o
                };
                let rows: [[[f32; LANES]; 3]; 4] = [0, 1, 2, 3].map(|c| gt(&m[0][c], &m[1][c], &m[2][c], &m[3][c]));
                for (p, (((a, b), c), d)) in rows[0].iter().zip(&rows[1]).zip(&rows[2]).zip(&rows[3]).enumerate() {
                    for (q, vals) in gt(a, b, c, d).iter().enumerate() {
                        for (l, &v) in vals.iter().enumerate().take(n) {
                            // SAFETY: tap (p, q) of the filter of (o0 + l, i) in `dw`.
                            unsafe { *dw.add(((o0 + l) * cin + i) * 9 + p * 3 + q) = v };
                        }
                    }
                }
            }
        }
    }

    /// Scratch of one task: `V` and `M` of a block of tiles (a weight
    /// gradient: `V`, the transformed gradient and the summed `dU`).
    fn scratch(&self, tiles: usize, rows: usize) -> usize {
        if self.weights {
            16 * ((self.cin + self.cout) * tiles + self.cin * self.cout)
        } else {
            16 * (self.cin + rows) * tiles
        }
    }
}

/// The 16 positions of a transform, [`LANES`] values each.
type Positions = [[[f32; LANES]; 4]; 4];

/// Stores position (r, c) of `vals` to `dst + (4r + c) · stride`, `n`
/// values each (whole vectors when `n` is [`LANES`]).
///
/// # Safety
/// `dst + (4r + c) · stride` is valid for `n ≤ LANES` writes for every position.
#[inline(always)]
unsafe fn store16(vals: &Positions, dst: *mut f32, stride: usize, n: usize) {
    for (r, row) in vals.iter().enumerate() {
        for (c, v) in row.iter().enumerate() {
            // SAFETY: this function's contract.
            unsafe {
                let d = dst.add((r * 4 + c) * stride);
                if n == LANES {
                    std::ptr::copy_nonoverlapping(v.as_ptr(), d, LANES);
                } else {
                    std::ptr::copy_nonoverlapping(v.as_ptr(), d, n);
                }
            }
        }
    }
}

/// Loads position (r, c) from `src + (4r + c) · stride`, `n` values each
/// (whole vectors when `n` is [`LANES`]), the rest 0.
///
/// # Safety
/// `src + (4r + c) · stride` is valid for `n ≤ LANES` reads for every position.
#[inline(always)]
unsafe fn load16(src: *const f32, stride: usize, n: usize) -> Positions {
    let mut vals = [[[0.0f32; LANES]; 4]; 4];
    for (r, row) in vals.iter_mut().enumerate() {
        for (c, v) in row.iter_mut().enumerate() {
            // SAFETY: this function's contract.
            unsafe {
                let p = src.add((r * 4 + c) * stride);
                if n == LANES {
                    std::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), LANES);
                } else {
                    std::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), n);
                }
            }
        }
    }
    vals
}

impl<T: ConvElem> ConvKernel<T> {
    /// Whether Winograd takes pass `pass` of `g`: `T` is f32 and [`Winograd::new`] takes the shape.
    pub(super) fn winograd_takes(g: &Geo2, pass: Pass) -> bool {
        TypeId::of::<T>() == TypeId::of::<f32>() && Winograd::new(g, pass, scratch::Slot::default()).is_some()
    }

    /// The Winograd plan of the pass `cx` plans, if Winograd takes it, with
    /// the shared slot of its transformed filters grown to their size.
    pub(super) fn winograd_plan(cx: &PlanCx<'_, '_>) -> Result<Option<Winograd>, KernelError> {
        if !Self::winograd_takes(&cx.g, cx.pass) {
            return Ok(None);
        }
        let (g, spec) = (&cx.g, cx.spec);
        let words = if cx.pass == Pass::Weights {
            0
        } else {
            16usize
                .checked_mul(g.ci_g)
                .and_then(|v| v.checked_mul(g.co_g))
                .ok_or_else(|| spec.error("the Winograd filters overflow"))?
                .div_ceil(2)
        };
        Ok(Winograd::new(g, cx.pass, scratch::shared(spec, words)?))
    }

    /// The tasks of the Winograd method: even blocks of at most [`MAX_TILES`]
    /// tiles, then blocks of output channels (multiples of 16) until the team
    /// has `want`. A task's `lo..hi` are its tiles and `o0..o1` its channels.
    pub(super) fn cut_winograd(cx: &PlanCx<'_, '_>, wi: &Winograd) -> Cut {
        let tiles = wi.tiles();
        if wi.weights {
            // Chunks of tiles, one task each, summed in chunk order.
            let c = cx.want.min(tiles.div_ceil(MIN_TILES)).max(1);
            let chunks: Vec<usize> = (0..=c).map(|i| i * tiles / c).collect();
            let tasks =
                chunks.windows(2).enumerate().map(|(k, b)| Task { n: k, g: 0, lo: b[0], hi: b[1], o0: 0, o1: wi.cout });
            return Cut { tasks: tasks.collect(), chunks, scratch: wi.scratch(WGRAD_TILES, wi.cout) };
        }
        let most = if 16 * wi.cin * wi.cout > BIG_FILTERS { MAX_TILES_BIG } else { MAX_TILES };
        let blocks = tiles.div_ceil(most);
        let tb = tiles.div_ceil(blocks);
        let cb = cx.want.div_ceil(blocks).max(1);
        let ob = wi.cout.div_ceil(cb).next_multiple_of(16).min(wi.cout);
        let mut tasks = Vec::new();
        for lo in (0..tiles).step_by(tb) {
            for o0 in (0..wi.cout).step_by(ob) {
                tasks.push(Task { n: 0, g: 0, lo, hi: (lo + tb).min(tiles), o0, o1: (o0 + ob).min(wi.cout) });
            }
        }
        Cut { tasks, chunks: vec![0, wi.n], scratch: wi.scratch(tb, ob) }
    }

    /// Runs a Winograd plan: the filters transformed over the team, then the
    /// tasks claimed in turn by the pieces.
    ///
    /// # Safety
    /// `x`, `w`, `y` are this call's operands, of the geometry the plan was
    /// built for; `T` is f32 (checked when planning).
    pub(super) unsafe fn run_winograd(&self, wi: &Winograd, x: SendPtr<T>, w: SendPtr<T>, y: SendPtr<T>) {
        if wi.weights {
            // SAFETY: this function's contract.
            unsafe { self.run_winograd_weights(wi, x, w, y) };
            return;
        }
        let (src, dst) = if wi.flipped { (y, x) } else { (x, y) };
        let (src, w, dst) =
            (SendPtr(src.get() as *mut f32), SendPtr(w.get() as *mut f32), SendPtr(dst.get() as *mut f32));
        let mut u = wi.u.lock().unwrap_or_else(|e| e.into_inner());
        // u64 words reinterpreted as f32: aligned, grown at build time to the filters.
        let up = SendPtr(u.as_mut_ptr() as *mut f32);
        let pieces = if self.parallel { self.scratch.len().max(1) } else { 1 };
        let simd = Simd::best();
        // The filters, in even blocks of input channels.
        team::run(pieces, &|p| {
            let rows = wi.cin * p / pieces..wi.cin * (p + 1) / pieces;
            // SAFETY: the filters of the op; each piece writes its own rows of `u`.
            simd.run(
                #[inline(always)]
                || unsafe { wi.transform_filters(w.get(), up.get(), rows) },
            );
        });
        let next = AtomicUsize::new(0);
        let piece = |p: usize| {
            let mut s = self.scratch[p].lock().unwrap_or_else(|e| e.into_inner());
            let s = s.as_mut_ptr() as *mut f32;
            while let Some(t) = self.tasks.get(next.fetch_add(1, Ordering::Relaxed)) {
                let (len, rows) = (t.hi - t.lo, t.o1 - t.o0);
                // SAFETY: the scratch holds `V` and `M` of the largest task (sized when
                // cutting); the task's outputs are its own.
                unsafe {
                    let v = s;
                    let m = s.add(16 * wi.cin * len);
                    simd.run(
                        #[inline(always)]
                        || wi.transform_inputs(src.get(), t.lo, len, v),
                    );
                    for xi in 0..16 {
                        // M (rows × len, column-major) = U (rows × cin) · V (cin × len),
                        // both column-major: the channels are the GEMM's long side.
                        f32::gemm(
                            rows,
                            len,
                            wi.cin,
                            m.add(xi * rows * len),
                            1,
                            rows as isize,
                            false,
                            up.get().add(xi * wi.cin * wi.cout + t.o0),
                            1,
                            wi.cout as isize,
                            v.add(xi * wi.cin * len),
                            1,
                            wi.cin as isize,
                            1.0,
                            1.0,
                        );
                    }
                    simd.run(
                        #[inline(always)]
                        || wi.transform_outputs(m, t.lo, len, t.o0, rows, dst.get()),
                    );
                }
            }
        };
        if pieces > 1 {
            team::run(pieces, &piece);
        } else {
            piece(0);
        }
    }

    /// Runs a Winograd weight gradient: each chunk of tiles (one task) sums
    /// `dU = Σ (A dy Aᵀ) ⊙ (Bᵀ d B)` over its tiles, blocks of
    /// [`WGRAD_TILES`] at a time, as 16 GEMMs whose inner dimension is the
    /// tiles, and writes `Gᵀ dU G` to the result (chunk 0) or its partial,
    /// the partials then added in chunk order.
    ///
    /// # Safety
    /// As [`Self::run_winograd`].
    unsafe fn run_winograd_weights(&self, wi: &Winograd, x: SendPtr<T>, w: SendPtr<T>, y: SendPtr<T>) {
        let (x, y) = (SendPtr(x.get() as *mut f32), SendPtr(y.get() as *mut f32));
        let wlen = wi.cin * wi.cout * 9;
        let mut partials = self.partials.lock().unwrap_or_else(|e| e.into_inner());
        let parts = SendPtr(partials.as_mut_ptr() as *mut f32);
        let wpart = |chunk: usize| {
            if chunk == 0 {
                w.get() as *mut f32
            } else {
                // SAFETY: chunk `c > 0` has partial `c - 1` of `wlen` values (sized at build time).
                unsafe { parts.get().add((chunk - 1) * wlen) }
            }
        };
        let pieces = if self.parallel { self.scratch.len().max(1) } else { 1 };
        let simd = Simd::best();
        let (cin, cout) = (wi.cin, wi.cout);
        let next = AtomicUsize::new(0);
        let piece = |p: usize| {
            let mut s = self.scratch[p].lock().unwrap_or_else(|e| e.into_inner());
            let s = s.as_mut_ptr() as *mut f32;
            while let Some(t) = self.tasks.get(next.fetch_add(1, Ordering::Relaxed)) {
                // SAFETY: the scratch holds `dU` and a block's `V` and `E` (sized when
                // cutting); the chunk's partial is this task's alone.
                unsafe {
                    let du = s;
                    let v = s.add(16 * cin * cout);
                    let e = v.add(16 * WGRAD_TILES * cin);
                    for lo in (t.lo..t.hi).step_by(WGRAD_TILES) {
                        let len = WGRAD_TILES.min(t.hi - lo);
                        simd.run(
                            #[inline(always)]
                            || {
                                wi.transform_inputs(x.get(), lo, len, v);
                                wi.transform_grads(y.get(), lo, len, e);
                            },
                        );
                        for xi in 0..16 {
                            // dU (cout × cin, column-major) += Eᵀ (cout × len) · V (len × cin).
                            f32::gemm(
                                cout,
                                cin,
                                len,
                                du.add(xi * cin * cout),
                                1,
                                cout as isize,
                                lo > t.lo,
                                e.add(xi * len * cout),
                                1,
                                cout as isize,
                                v.add(xi * len * cin),
                                cin as isize,
                                1,
                                1.0,
                                1.0,
                            );
                        }
                    }
                    simd.run(
                        #[inline(always)]
                        || wi.untransform_filters(du, wpart(t.n), 0..cin),
                    );
                }
            }
        };
        if pieces > 1 {
            team::run(pieces, &piece);
        } else {
            piece(0);
        }
        // SAFETY: the weight gradient holds `wlen` values; the pieces have finished.
        unsafe { self.add_partials(w.get(), &partials) };
    }
}
