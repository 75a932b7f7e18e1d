//! Winograd convolutions: the float32 3×3 stride-1 convolutions with enough
//! channels and tiles. Forward passes and data gradients (the forward
//! convolution of `dy` with the flipped, transposed weights) run F(4×4,
//! 3×3), in tiles of 4×4 outputs; weight gradients F(2×2, 3×3), in tiles of
//! 2×2.
//!
//! **F(4×4, 3×3).** Each tile's 6×6 input patch `d` becomes `Bᵀ d B` (36
//! values per input channel), each 3×3 filter `g` becomes `G g Gᵀ` (36
//! values per channel pair, once per run), the 36 positions are 36
//! independent GEMMs over the channels, and each tile's 36 sums `m` give its
//! 16 outputs `Aᵀ m A` (the matrices of Lavin and Gray, points 0, ±1, ±2):
//! 36 multiply-adds per channel pair and tile of 16 outputs, against 144 for
//! the direct convolution (4x fewer; 2.25x for F(2×2, 3×3), which measured
//! 1.0-1.4x slower on ResNet's 3x3 layers of 128 to 512 channels at batch
//! 32). The price is rounding: the transforms scale values by up to 5 and 8
//! and by 1/4 to 1/24, so outputs carry errors of about 5e-5 of the
//! outputs' RMS at most (1.3e-6 on average; measured over 128 channels,
//! against 2e-6 and 3e-7 for F(2×2, 3×3)), as in cuDNN's and oneDNN's
//! Winograd convolutions.
//!
//! **F(2×2, 3×3)** is the same with 4×4 patches, 16 positions and the
//! transforms of Lavin and Gray's F(2, 3), which only add, subtract and halve
//! small groups of values (the rounding stays that of sums over the
//! channels).
//!
//! Work: the filters are transformed first, over the team (`U`, laid out
//! `[positions][cin][cout]`); then each task takes a block of tiles (in the
//! order image, tile row, tile column) and a block of output channels,
//! transforms the block's inputs into its scratch (`V`,
//! `[positions][tiles][cin]`; when tasks split the output channels, the
//! inputs of every tile are transformed once, over the team, before the
//! tasks, into a `V` they share), multiplies (`M`, `[positions][tiles][cout
//! block]`, by the `gemm` crate, the output channels its rows) and writes
//! its outputs. The transforms run 16 channels side by side. Tasks write
//! disjoint outputs and every output is one fixed sequence of operations,
//! whatever the thread count.
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
    /// Outputs per tile side: 2 (F(2×2, 3×3)) or 4 (F(4×4, 3×3), forward
    /// passes and data gradients only).
    m: usize,
    /// Tile rows and columns of one image.
    th: usize,
    tw: usize,
    /// The shared slot of the transformed filters `[16][cin][cout]`, grown
    /// when planned and written at the start of each run (a weight gradient
    /// sums its own in its pieces' scratch and leaves it as it is), followed
    /// by the transformed inputs of every tile when `shared_v`.
    u: scratch::Slot,
    /// The tasks split the output channels: the inputs are transformed once,
    /// over the team, before the products (not again by each channel block).
    shared_v: bool,
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
        if g.n.checked_mul(oh.div_ceil(2) * ow.div_ceil(2))? < MIN_TILES {
            return None;
        }
        let weights = pass == Pass::Weights;
        let m = if weights { 2 } else { 4 };
        let (th, tw) = (oh.div_ceil(m), ow.div_ceil(m));
        Some(Winograd { flipped, weights, n: g.n, cin, cout, ih, iw, oh, ow, ph, pw, m, th, tw, u, shared_v: false })
    }

    /// Tiles of the batch.
    fn tiles(&self) -> usize {
        self.n * self.th * self.tw
    }

    /// Values of a transformed tile (`(m + 2)²`): the GEMMs of a run.
    pub(super) fn positions(&self) -> usize {
        (self.m + 2) * (self.m + 2)
    }

    /// `U = G g Gᵀ` for input channels `cols` of the convolution computed,
    /// from the op's filters `w` `[co][ci][3][3]`, [`LANES`] output channels
    /// at a time.
    ///
    /// # Safety
    /// `w` holds the op's filters; `u` the `positions · cin · cout` transformed ones,
    /// whose rows `cols` no one else writes during the call.
    #[inline(always)]
    unsafe fn transform_filters(&self, w: *const f32, u: *mut f32, cols: std::ops::Range<usize>) {
        if self.m == 4 {
            // SAFETY: this function's contract.
            return unsafe { self.transform_filters4(w, u, cols) };
        }
        let (cin, cout) = (self.cin, self.cout);
        let plane = cin * cout;
        for i in cols {
            for o0 in (0..cout).step_by(LANES) {
                let n = LANES.min(cout - o0);
                // SAFETY: this function's contract.
                let g = unsafe { self.filters(w, i, o0, n) };
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
                unsafe { store_tile(&out, u.add(i * cout + o0), plane, n) };
            }
        }
    }

    /// The 3×3 filters of (output channels `o0..o0 + n`, input channel `i`)
    /// of the convolution computed: `g[r][c][l]` tap (r, c) of `o0 + l`
    /// (`w[o][i]` forward, `w[i][o]` flipped for a data gradient).
    ///
    /// # Safety
    /// `w` holds the op's filters.
    #[inline(always)]
    unsafe fn filters(&self, w: *const f32, i: usize, o0: usize, n: usize) -> [[[f32; LANES]; 3]; 3] {
        let (cin, cout) = (self.cin, self.cout);
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
        g
    }

    /// [`Self::transform_filters`] of F(4×4, 3×3): `U = G g Gᵀ`, 36 values.
    ///
    /// # Safety
    /// As [`Self::transform_filters`].
    #[inline(always)]
    unsafe fn transform_filters4(&self, w: *const f32, u: *mut f32, cols: std::ops::Range<usize>) {
        let (cin, cout) = (self.cin, self.cout);
        let plane = cin * cout;
        for i in cols {
            for o0 in (0..cout).step_by(LANES) {
                let n = LANES.min(cout - o0);
                // SAFETY: this function's contract.
                let g = unsafe { self.filters(w, i, o0, n) };
                // G g: rows g0/4, −(g0 + g1 + g2)/6, −(g0 − g1 + g2)/6,
                // g0/24 + g1/12 + g2/6, g0/24 − g1/12 + g2/6, g2; then the columns.
                let gt = |a: &[f32; LANES], b: &[f32; LANES], d: &[f32; LANES]| {
                    let mut o = [[0.0f32; LANES]; 6];
                    for l in 0..LANES {
                        let (s, t) = (a[l] + d[l], b[l]);
                        o[0][l] = a[l] * 0.25;
                        o[1][l] = -(s + t) * (1.0 / 6.0);
                        o[2][l] = -(s - t) * (1.0 / 6.0);
                        let (p, q) = (a[l] * (1.0 / 24.0) + d[l] * (1.0 / 6.0), t * (1.0 / 12.0));
                        o[3][l] = p + q;
                        o[4][l] = p - q;
                        o[5][l] = d[l];
                    }
                    o
                };
                let gg: [[[f32; LANES]; 6]; 3] = [0, 1, 2].map(|c| gt(&g[0][c], &g[1][c], &g[2][c]));
                let out = [0, 1, 2, 3, 4, 5].map(|r| gt(&gg[0][r], &gg[1][r], &gg[2][r]));
                // SAFETY: row i, columns o0..o0 + n of `u` (this function's contract).
                unsafe { store_tile(&out, u.add(i * cout + o0), plane, n) };
            }
        }
    }

    /// The `A × A` patch of input tile `tl` (of the tiles from `t0`) whose
    /// tile step is `A − 2`: its image and each value's offset in the plane,
    /// or none where it is padding.
    #[inline(always)]
    fn patch<const A: usize>(&self, t: usize) -> (usize, [[Option<usize>; A]; A]) {
        let (ih, iw) = (self.ih as isize, self.iw as isize);
        let (img, ty, tx) = self.tile(t);
        let step = (A - 2) as isize;
        let (r0, c0) = (step * ty as isize - self.ph, step * tx as isize - self.pw);
        let inside = r0 >= 0 && c0 >= 0 && r0 + A as isize <= ih && c0 + A as isize <= iw;
        let mut offs = [[None::<usize>; A]; A];
        for (u, row) in offs.iter_mut().enumerate() {
            for (c, off) in row.iter_mut().enumerate() {
                let (r, q) = (r0 + u as isize, c0 + c as isize);
                if inside || (r >= 0 && r < ih && q >= 0 && q < iw) {
                    *off = Some((r * iw + q) as usize);
                }
            }
        }
        (img, offs)
    }

    /// [`Self::transform_inputs`] of F(4×4, 3×3): `V = Bᵀ d B` of 6×6 patches, 36 values.
    ///
    /// # Safety
    /// As [`Self::transform_inputs`].
    #[inline(always)]
    unsafe fn transform_inputs4(&self, x: *const f32, t0: usize, len: usize, v: *mut f32, stride: usize) {
        let cin = self.cin;
        let plane = self.ih * self.iw;
        for tl in 0..len {
            let (img, offs) = self.patch::<6>(t0 + tl);
            // SAFETY: image `img` of the input (this function's contract).
            let src = unsafe { x.add(img * cin * plane) };
            for ch0 in (0..cin).step_by(LANES) {
                let n = LANES.min(cin - ch0);
                // SAFETY: image `img` of the input holds channels `ch0..ch0 + n`.
                let d = unsafe { gather(src, plane, &offs, ch0, n) };
                // Bᵀ d: rows 4d0 − 5d2 + d4, −4(d1 + d2) + d3 + d4, 4(d1 − d2) − d3 + d4,
                // 2(d3 − d1) − d2 + d4, 2(d1 − d3) − d2 + d4, 4d1 − 5d3 + d5; then the columns.
                let bt = |d: [&[f32; LANES]; 6]| {
                    let mut o = [[0.0f32; LANES]; 6];
                    for l in 0..LANES {
                        let (d0, d1, d2, d3, d4, d5) = (d[0][l], d[1][l], d[2][l], d[3][l], d[4][l], d[5][l]);
                        let (a, b) = (d4 - 4.0 * d2, d3 - 4.0 * d1);
                        let (c, e) = (d4 - d2, 2.0 * (d3 - d1));
                        o[0][l] = 4.0 * d0 - 5.0 * d2 + d4;
                        o[1][l] = a + b;
                        o[2][l] = a - b;
                        o[3][l] = c + e;
                        o[4][l] = c - e;
                        o[5][l] = 4.0 * d1 - 5.0 * d3 + d5;
                    }
                    o
                };
                let cols: [[[f32; LANES]; 6]; 6] = [0, 1, 2, 3, 4, 5].map(|c| bt([0, 1, 2, 3, 4, 5].map(|r| &d[r][c])));
                let out = [0, 1, 2, 3, 4, 5].map(|r| bt([0, 1, 2, 3, 4, 5].map(|c| &cols[c][r])));
                // SAFETY: tile tl, channels ch0..ch0 + n of `v` (this function's contract).
                unsafe { store_tile(&out, v.add(tl * cin + ch0), stride, n) };
            }
        }
    }

    /// [`Self::transform_outputs`] of F(4×4, 3×3): `y = Aᵀ m A`, 4×4 outputs per tile.
    ///
    /// # Safety
    /// As [`Self::transform_outputs`].
    #[inline(always)]
    unsafe fn transform_outputs4(&self, m: *const f32, t0: usize, len: usize, o0: usize, rows: usize, y: *mut f32) {
        let plane = self.oh * self.ow;
        let stride = len * rows;
        for tl in 0..len {
            let (img, ty, tx) = self.tile(t0 + tl);
            let (r0, q0) = (4 * ty, 4 * tx);
            let (nr, nq) = ((self.oh - r0).min(4), (self.ow - q0).min(4));
            // SAFETY: image `img`, channel `o0` of the output.
            let dst = unsafe { y.add((img * self.cout + o0) * plane + r0 * self.ow + q0) };
            for ol0 in (0..rows).step_by(LANES) {
                let n = LANES.min(rows - ol0);
                // SAFETY: tile tl, channels ol0..ol0 + n of `m` (this function's contract).
                let s: [[[f32; LANES]; 6]; 6] = unsafe { load_tile(m.add(tl * rows + ol0), stride, n) };
                // Aᵀ s: rows s0 + s1 + s2 + s3 + s4, s1 − s2 + 2(s3 − s4),
                // s1 + s2 + 4(s3 + s4), s1 − s2 + 8(s3 − s4) + s5; then the columns.
                let at = |s: [&[f32; LANES]; 6]| {
                    let mut o = [[0.0f32; LANES]; 4];
                    for l in 0..LANES {
                        let (a, b) = (s[1][l] + s[2][l], s[1][l] - s[2][l]);
                        let (c, d) = (s[3][l] + s[4][l], s[3][l] - s[4][l]);
                        o[0][l] = s[0][l] + a + c;
                        o[1][l] = b + 2.0 * d;
                        o[2][l] = a + 4.0 * c;
                        o[3][l] = b + 8.0 * d + s[5][l];
                    }
                    o
                };
                let cols: [[[f32; LANES]; 4]; 6] = [0, 1, 2, 3, 4, 5].map(|c| at([0, 1, 2, 3, 4, 5].map(|r| &s[r][c])));
                let out = [0, 1, 2, 3].map(|i| at([0, 1, 2, 3, 4, 5].map(|c| &cols[c][i])));
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

    /// Tiles and output channels per task of a forward pass or data
    /// gradient for a team that wants `want` tasks: even blocks of at most
    /// [`MAX_TILES`] tiles, then blocks of output channels (multiples of 16).
    fn blocks(&self, want: usize) -> (usize, usize) {
        let tiles = self.tiles();
        let most = if self.positions() * self.cin * self.cout > BIG_FILTERS { MAX_TILES_BIG } else { MAX_TILES };
        let blocks = tiles.div_ceil(most);
        let tb = tiles.div_ceil(blocks);
        let cb = want.div_ceil(blocks).max(1);
        (tb, self.cout.div_ceil(cb).next_multiple_of(16).min(self.cout))
    }

    /// Image, tile row and tile column of tile `t`.
    fn tile(&self, t: usize) -> (usize, usize, usize) {
        (t / (self.th * self.tw), t / self.tw % self.th, t % self.tw)
    }

    /// `V = Bᵀ d B` of tiles `t0..t0 + len` of every input channel into `v`
    /// (`[16][len][cin]`, positions `stride` apart), [`LANES`] channels at a time.
    ///
    /// # Safety
    /// `x` holds the input of the convolution computed; `v + k · stride`
    /// `len · cin` values for each position `k`.
    #[inline(always)]
    unsafe fn transform_inputs(&self, x: *const f32, t0: usize, len: usize, v: *mut f32, stride: usize) {
        if self.m == 4 {
            // SAFETY: this function's contract.
            return unsafe { self.transform_inputs4(x, t0, len, v, stride) };
        }
        let cin = self.cin;
        let plane = self.ih * self.iw;
        for tl in 0..len {
            let (img, offs) = self.patch::<4>(t0 + tl);
            // SAFETY: image `img` of the input (this function's contract).
            let src = unsafe { x.add(img * cin * plane) };
            for ch0 in (0..cin).step_by(LANES) {
                let n = LANES.min(cin - ch0);
                // SAFETY: image `img` of the input holds channels `ch0..ch0 + n`.
                let d = unsafe { gather(src, plane, &offs, ch0, n) };
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
                unsafe { store_tile(&out, v.add(tl * cin + ch0), stride, n) };
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
        if self.m == 4 {
            // SAFETY: this function's contract.
            return unsafe { self.transform_outputs4(m, t0, len, o0, rows, y) };
        }
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
                let s: Positions = unsafe { load_tile(m.add(tl * rows + ol0), stride, n) };
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
                unsafe { store_tile(&out, e.add(tl * cout + o0), stride, n) };
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
                let m: Positions = unsafe { load_tile(du.add(i * cout + o0), plane, n) };
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
        } else if self.shared_v {
            self.positions() * rows * tiles
        } else {
            self.positions() * (self.cin + rows) * tiles
        }
    }
}

/// `d[u][c][l]`: the patch value at `offs[u][c]` of channel `ch0 + l < ch0 + n`
/// (planes `plane` apart from `src`), zero where the patch is padding.
///
/// # Safety
/// `src` holds channels `ch0..ch0 + n`; every offset lies inside a plane.
#[inline(always)]
unsafe fn gather<const A: usize>(
    src: *const f32,
    plane: usize,
    offs: &[[Option<usize>; A]; A],
    ch0: usize,
    n: usize,
) -> [[[f32; LANES]; A]; A] {
    let mut d = [[[0.0f32; LANES]; A]; A];
    for (row, offs) in d.iter_mut().zip(offs) {
        for (val, off) in row.iter_mut().zip(offs) {
            if let Some(off) = *off {
                for (l, v) in val.iter_mut().enumerate().take(n) {
                    // SAFETY: (channel ch0 + l, offset off) lies inside the input.
                    *v = unsafe { *src.add((ch0 + l) * plane + off) };
                }
            }
        }
    }
    d
}

/// The 16 positions of an F(2×2, 3×3) transform, [`LANES`] values each.
type Positions = [[[f32; LANES]; 4]; 4];

/// Stores position (r, c) of the `A × A` transform `vals` to
/// `dst + (A·r + c) · stride`, `n` values each (whole vectors when `n` is
/// [`LANES`]).
///
/// # Safety
/// `dst + (A·r + c) · stride` is valid for `n ≤ LANES` writes for every position.
#[inline(always)]
unsafe fn store_tile<const A: usize>(vals: &[[[f32; LANES]; A]; A], dst: *mut f32, stride: usize, n: usize) {
    for (r, row) in vals.iter().enumerate() {
        for (c, v) in row.iter().enumerate() {
            // SAFETY: this function's contract.
            unsafe {
                let d = dst.add((r * A + c) * stride);
                if n == LANES {
                    std::ptr::copy_nonoverlapping(v.as_ptr(), d, LANES);
                } else {
                    std::ptr::copy_nonoverlapping(v.as_ptr(), d, n);
                }
            }
        }
    }
}

/// Loads position (r, c) of an `A × A` transform from
/// `src + (A·r + c) · stride`, `n` values each (whole vectors when `n` is
/// [`LANES`]), the rest 0.
///
/// # Safety
/// `src + (A·r + c) · stride` is valid for `n ≤ LANES` reads for every position.
#[inline(always)]
unsafe fn load_tile<const A: usize>(src: *const f32, stride: usize, n: usize) -> [[[f32; LANES]; A]; A] {
    let mut vals = [[[0.0f32; LANES]; A]; A];
    for (r, row) in vals.iter_mut().enumerate() {
        for (c, v) in row.iter_mut().enumerate() {
            // SAFETY: this function's contract.
            unsafe {
                let p = src.add((r * A + c) * stride);
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
    /// Outputs per tile side of the Winograd plan of pass `pass` of `g`, if
    /// Winograd takes it.
    #[cfg(test)]
    pub(super) fn winograd_tile(g: &Geo2, pass: Pass) -> Option<usize> {
        let takes = TypeId::of::<T>() == TypeId::of::<f32>();
        takes.then(|| Winograd::new(g, pass, scratch::Slot::default()).map(|wi| wi.m)).flatten()
    }

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
        let Some(mut wi) = Winograd::new(g, cx.pass, scratch::Slot::default()) else { return Ok(None) };
        wi.shared_v = !wi.weights && wi.blocks(cx.want).1 < wi.cout;
        let words = if cx.pass == Pass::Weights {
            0
        } else {
            // `U` (`cout` per input channel), then `V` (`tiles` per input channel).
            let v = if wi.shared_v { wi.tiles() } else { 0 };
            wi.cout
                .checked_add(v)
                .and_then(|v| v.checked_mul(wi.cin))
                .and_then(|v| v.checked_mul(wi.positions()))
                .ok_or_else(|| spec.error("the Winograd filters overflow"))?
                .div_ceil(2)
        };
        wi.u = scratch::shared(spec, words)?;
        Ok(Some(wi))
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
        let (tb, ob) = wi.blocks(cx.want);
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
        let npos = wi.positions();
        // The filters, in even blocks of input channels.
        team::run(pieces, &|p| {
            let rows = wi.cin * p / pieces..wi.cin * (p + 1) / pieces;
            // SAFETY: the filters of the op; each piece writes its own rows of `u`.
            simd.run(
                #[inline(always)]
                || unsafe { wi.transform_filters(w.get(), up.get(), rows) },
            );
        });
        // Shared: the inputs of every tile, after the filters, in even blocks of tiles.
        let tiles = wi.tiles();
        // SAFETY: the slot holds the filters and then, when shared, `V` (grown when planned).
        let vs = SendPtr(unsafe { up.get().add(npos * wi.cin * wi.cout) });
        if wi.shared_v {
            team::run(pieces, &|p| {
                let (lo, hi) = (tiles * p / pieces, tiles * (p + 1) / pieces);
                // SAFETY: each piece writes the tiles `lo..hi` of every position of `V`.
                simd.run(
                    #[inline(always)]
                    || unsafe {
                        wi.transform_inputs(src.get(), lo, hi - lo, vs.get().add(lo * wi.cin), tiles * wi.cin)
                    },
                );
            });
        }
        let next = AtomicUsize::new(0);
        let piece = |p: usize| {
            let mut s = self.scratch[p].lock().unwrap_or_else(|e| e.into_inner());
            let s = s.as_mut_ptr() as *mut f32;
            while let Some(t) = self.tasks.get(next.fetch_add(1, Ordering::Relaxed)) {
                let (len, rows) = (t.hi - t.lo, t.o1 - t.o0);
                // SAFETY: the scratch holds `M` (and `V` unless shared) of the largest
                // task (sized when cutting); the task's outputs are its own.
                unsafe {
                    let (v, vstride, m) = if wi.shared_v {
                        (vs.get().add(t.lo * wi.cin), tiles * wi.cin, s)
                    } else {
                        (s, len * wi.cin, s.add(npos * wi.cin * len))
                    };
                    if !wi.shared_v {
                        simd.run(
                            #[inline(always)]
                            || wi.transform_inputs(src.get(), t.lo, len, v, vstride),
                        );
                    }
                    for xi in 0..npos {
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
                            v.add(xi * vstride),
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
                                wi.transform_inputs(x.get(), lo, len, v, len * cin);
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
