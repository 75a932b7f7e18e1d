//! The direct, register-blocked stride-1 convolution of float32 on AVX-512
//! (and, through [`super::direct2d_avx2`], on AVX2 + FMA):
//! the forward pass and the data gradient (itself a stride-1 convolution of
//! the output gradient with the flipped, transposed weights), and the weight
//! gradient of depthwise convolutions.
//!
//! The input planes of a task are copied, a cache-sized block of input
//! channels at a time (padded planes that stay in level 2, few enough that a
//! tile's window of them and its weights stay in L1), into zero-padded
//! planes of `wp` columns, so that every
//! output of the extended `oh × wp` grid (the columns past an image's `ow`
//! are discarded) is `Σ_c Σ_taps w · xp[c][q + tap]`. Small planes put several
//! images side by side in one padded plane (neighbours share their zero
//! columns, and so do consecutive rows: a row's right padding is the next
//! row's left), so grids are long and each weight read serves several images.
//! A register tile holds [`PB`] vectors of 16 consecutive grid positions for
//! [`RB`] output channels (24 accumulators; [`PB1`] vectors for a single
//! channel) across the block's input channels and taps: per input channel and
//! tap, `PB` vector loads and `RB` weight broadcasts feed `PB · RB` FMAs. The
//! weights are read where they are (strided rows of broadcasts), so nothing
//! is repacked; tiles accumulate in output grids in scratch, whose rows are
//! copied out at the end. Each output is summed in the same order whatever
//! the task split, so results do not depend on the thread count.
//!
//! The depthwise weight gradient spreads the output gradient over the grid
//! (zeros in the discarded columns) and sweeps it once with one vector
//! accumulator per tap.

use std::any::TypeId;

use super::super::par::Simd;
#[cfg(target_arch = "x86_64")]
use super::direct2d_avx2 as avx2;
use super::layout::{copy_row, ConvElem, Geo2};
use super::{ConvKernel, Cut, Io, Pass, PlanCx, Task};

/// Output channels per register tile.
pub(crate) const RB: usize = 8;
/// Vectors of 16 grid positions per register tile of several output channels.
pub(super) const PB: usize = 3;
/// Vectors per register tile of a single output channel.
const PB1: usize = 6;
/// Lanes of one vector.
pub(super) const LANES: usize = 16;
/// Output-grid positions worth putting side by side (small planes).
const GRID: usize = 1024;
/// Elements of padded input kept in the level-2 cache (1 MiB of f32).
const L2_ELEMS: usize = 1 << 18;
/// Elements of input window and weights a tile keeps in L1 (24 KiB: half of
/// an Ice Lake's L1, the rest for the lines streaming through): with all 64
/// input channels of a 3x3 layer under each tile, its window and weights
/// (78 KiB) came from level 2, 1.1x slower (BENCHMARKS.md).
const L1_ELEMS: usize = 6 * 1024;

/// A stride-1 correlation of `cin` input planes (`ih × iw`) into `cout` output
/// planes (`oh × ow`) per group, through the padded plane (see the module doc).
///
/// Up to `imgs` images go side by side in one padded plane, `pitch` columns
/// apart (neighbours share their zero columns when the padding allows it), so
/// that small planes make long grids and each block of weights read serves
/// several images.
#[derive(Debug)]
pub(crate) struct Blocked {
    pub cin: usize,
    pub cout: usize,
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    /// Row and column of the padded plane holding input row and column 0 of
    /// the first image (negative: the first input rows or columns are never read).
    top: isize,
    left: isize,
    /// Images per plane, and the columns between two images.
    pub imgs: usize,
    pitch: usize,
    /// Columns of the padded plane an image reads.
    reach: usize,
    hp: usize,
    wp: usize,
    /// Elements of one padded plane (with the slack the last taps read past its end).
    pub(super) plane: usize,
    /// Elements of one output grid (`oh · wp` rounded up to whole vectors).
    pub(super) ext: usize,
    /// Offset of each tap in the padded plane, and of its weight within a weight row.
    pub(super) taps: Vec<usize>,
    pub(super) woff: Vec<usize>,
    /// Weight strides between output channels and between input channels.
    pub(super) wr: usize,
    pub(super) wc: usize,
    /// Elements between two images of the input and of the output.
    xs: usize,
    ys: usize,
    /// Most input channels a tile sums between two stores of its grids: their
    /// window under the tile (each row of taps: the tile's vectors and the
    /// taps' reach, in whole lines) and the tile's weights within
    /// [`L1_ELEMS`].
    l1_cin: usize,
    /// The instruction set the tiles run: [`Simd::Avx512`] or [`Simd::Avx2`].
    simd: Simd,
}

/// The sizes of one side of a [`Blocked`] correlation: channels, plane, image stride.
type Side = (usize, (usize, usize), usize);

impl Blocked {
    /// The blocked forward pass of a stride-1 geometry, `imgs` images per plane.
    pub(crate) fn forward(g: &Geo2, imgs: usize) -> Option<Self> {
        (g.sh == 1 && g.sw == 1).then(|| {
            let (kk, kdim) = (g.kk(), g.kdim());
            let x = (g.ci_g, (g.ih, g.iw), g.groups * g.ci_g * g.ip());
            let y = (g.co_g, (g.oh, g.ow), g.groups * g.co_g * g.op());
            Self::new(g, imgs, x, y, (g.ph, g.pw), (kdim, kk), |t| t)
        })
    }

    /// The blocked data gradient of a stride-1 geometry: `dy` padded by
    /// `(k − 1) · d − p`, correlated with the flipped taps, channels swapped.
    pub(crate) fn data(g: &Geo2, imgs: usize) -> Option<Self> {
        (g.sh == 1 && g.sw == 1).then(|| {
            let (kk, kdim) = (g.kk(), g.kdim());
            let top = ((g.kh - 1) * g.dh) as isize - g.ph;
            let left = ((g.kw - 1) * g.dw) as isize - g.pw;
            let x = (g.ci_g, (g.ih, g.iw), g.groups * g.ci_g * g.ip());
            let y = (g.co_g, (g.oh, g.ow), g.groups * g.co_g * g.op());
            Self::new(g, imgs, y, x, (top, left), (kk, kdim), |t| kk - 1 - t)
        })
    }

    fn new(
        g: &Geo2,
        imgs: usize,
        (cin, (ih, iw), xs): Side,
        (cout, (oh, ow), ys): Side,
        (top, left): (isize, isize),
        (wr, wc): (usize, usize),
        woff: impl Fn(usize) -> usize,
    ) -> Self {
        let imgs = imgs.max(1);
        let reach = ow + (g.kw - 1) * g.dw;
        // Zero columns right of the input within an image's reach.
        let right = reach as isize - left - iw as isize;
        let pitch = if left >= 0 && right >= 0 { ow.max(iw + left.max(right) as usize) } else { reach };
        // Rows `imgs · pitch` apart: the last image's taps past the row's end
        // read the next row's first columns, image 0's left padding (zeros:
        // `reach − pitch` is at most `left` when both pads are whole), and
        // the plane's slack past the last row. Without shared columns,
        // `pitch` is `reach`, as every image's own columns.
        let (hp, wp) = (oh + (g.kh - 1) * g.dh, imgs * pitch);
        let taps: Vec<usize> =
            (0..g.kh).flat_map(|ki| (0..g.kw).map(move |kj| (ki * g.dh, kj * g.dw))).map(|(r, c)| r * wp + c).collect();
        let ext = (oh * wp).next_multiple_of(LANES);
        let max_tap = taps.iter().copied().max().unwrap_or(0);
        let plane = (hp * wp).max(ext + max_tap).next_multiple_of(LANES);
        let woff = (0..g.kk()).map(woff).collect();
        let window = g.kh * ((PB * LANES + (g.kw - 1) * g.dw).div_ceil(LANES) + 1) * LANES + RB * g.kk();
        Blocked {
            cin,
            cout,
            ih,
            iw,
            oh,
            ow,
            top,
            left,
            imgs,
            pitch,
            reach,
            hp,
            wp,
            plane,
            ext,
            taps,
            woff,
            wr,
            wc,
            xs,
            ys,
            l1_cin: (L1_ELEMS / window).max(1),
            simd: Simd::best(),
        }
    }

    /// Positions of the output grid per useful output (the cost of the padding
    /// columns and of the rounding to whole vectors).
    #[allow(dead_code)]
    pub(crate) fn waste(&self) -> f64 {
        self.ext as f64 / (self.imgs * self.oh * self.ow).max(1) as f64
    }

    /// Input channels padded and swept at a time: a block that stays in the
    /// level-2 cache while every output channel of a task goes over it, and
    /// whose window under one tile stays in L1 with the tile's weights
    /// (`l1_cin`).
    fn cin_block(&self) -> usize {
        let cb = (L2_ELEMS / self.plane).min(self.l1_cin).clamp(1, self.cin.max(1));
        self.cin.div_ceil(self.cin.div_ceil(cb))
    }

    /// Scratch elements of a task of up to `ob` output channels: one block of
    /// padded input planes and the output grids.
    pub(crate) fn scratch_len(&self, ob: usize) -> usize {
        self.cin_block() * self.plane + ob.next_multiple_of(RB) * self.ext
    }

    /// Copies `cin` input planes of `nimg` images from `x` into the padded
    /// planes `xp` (zeros around).
    ///
    /// # Safety
    /// `x`: the images' input planes; `xp`: `cin · plane` writes.
    unsafe fn pad(&self, x: *const f32, cin: usize, nimg: usize, xp: *mut f32) {
        // Input columns of image j land at j·pitch + left + col, kept within its reach.
        let lo = self.left.clamp(0, self.reach.min(self.pitch) as isize) as usize;
        let hi = (self.left + self.iw as isize).clamp(0, self.reach.min(self.pitch) as isize) as usize;
        for c in 0..cin {
            // SAFETY: plane `c < cin` of `xp` (`cin · plane` writes: this function's contract).
            let dst = unsafe { xp.add(c * self.plane) };
            // SAFETY: as above.
            unsafe { std::ptr::write_bytes(dst, 0, self.plane) };
            if lo >= hi {
                continue;
            }
            for j in 0..nimg {
                // SAFETY: channel `c < cin` of image `j < nimg` of the input planes (this
                // function's contract).
                let src = unsafe { x.add(j * self.xs + c * self.ih * self.iw) };
                for r in 0..self.hp {
                    let ir = r as isize - self.top;
                    if ir < 0 || ir as usize >= self.ih {
                        continue;
                    }
                    // SAFETY: input row `ir < ih`; columns `lo - left..hi - left` lie in
                    // `0..iw` (`lo >= left`, `hi <= left + iw`); they land in row `r < hp` of
                    // the plane, image `j`'s columns `lo..hi` within its reach.
                    unsafe {
                        let s = src.add(ir as usize * self.iw).offset(lo as isize - self.left);
                        copy_row(s, dst.add(r * self.wp + j * self.pitch + lo), hi - lo);
                    }
                }
            }
        }
    }

    /// Output channels `outs` of `nimg` images (at most `imgs`) of one group:
    /// `x` the first image's `cin` input planes, `w` the group's weights, `y`
    /// the first image's `cout` output planes, `scratch` of
    /// [`Blocked::scratch_len`] elements.
    ///
    /// # Safety
    /// The CPU must run `self.simd` (AVX-512F, or AVX2 + FMA: see [`available`]); the
    /// pointers valid for the reads and writes above, `y` not overlapping the others.
    pub(crate) unsafe fn run(
        &self,
        x: *const f32,
        nimg: usize,
        w: *const f32,
        y: *mut f32,
        outs: std::ops::Range<usize>,
        scratch: *mut f32,
    ) {
        let (o0, o1) = (outs.start, outs.end);
        // SAFETY: the scratch holds [`Blocked::scratch_len`] elements: the
        // `cin_block` padded planes, then the output grids.
        let (xp, ext) = (scratch, unsafe { scratch.add(self.cin_block() * self.plane) });
        // Only the rows' vectors up to the last image's outputs are needed.
        let used = (self.oh - 1) * self.wp + (nimg - 1) * self.pitch + self.ow;
        let nv = used.div_ceil(LANES);
        let cb = self.cin_block();
        for c0 in (0..self.cin).step_by(cb) {
            let cn = cb.min(self.cin - c0);
            // SAFETY: input channels `c0..c0 + cn` of the images (this function's
            // contract) into the scratch's `cin_block >= cn` planes.
            unsafe { self.pad(x.add(c0 * self.ih * self.iw), cn, nimg, xp) };
            for ob in (o0..o1).step_by(RB) {
                let r = RB.min(o1 - ob);
                // SAFETY: output channels `ob..ob + r <= o1` of the weights, and their
                // grids in the scratch (sized for `outs` rounded up to `RB`).
                let (wb, eb) = unsafe { (w.add(ob * self.wr + c0 * self.wc), ext.add((ob - o0) * self.ext)) };
                #[cfg(target_arch = "x86_64")]
                if self.simd == Simd::Avx2 {
                    // One channel at a time (plans of this tier are depthwise: r = 1).
                    for k in 0..r {
                        // SAFETY: `simd` is AVX2: the CPU has AVX2 + FMA (this function's
                        // contract); channel `k < r` of the block, `used` within the grid.
                        unsafe { avx2::sweep(self, used, cn, c0 > 0, xp, wb.add(k * self.wr), eb.add(k * self.ext)) };
                    }
                    continue;
                }
                let mut v = 0;
                while v < nv {
                    let p = if r == 1 { PB1 } else { PB }.min(nv - v);
                    // SAFETY: vectors `v..v + p` of the `nv` covering `used`, within the
                    // grid and the plane's slack.
                    let (xv, ev) = unsafe { (xp.add(v * LANES), eb.add(v * LANES)) };
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above; the CPU runs `self.simd` (this function's contract).
                    unsafe {
                        tile_dispatch(p, r, &self.sweep(), TileAt { x: xv, w: wb, e: ev, cin: cn, add: c0 > 0 })
                    };
                    #[cfg(not(target_arch = "x86_64"))]
                    let _ = (r, cn, xv, wb, ev);
                    v += p;
                }
            }
        }
        for o in o0..o1 {
            // SAFETY: grid `o - o0` of the scratch; channel `o < o1` of image
            // `j < nimg` of `y` (this function's contract), its `oh` rows of `ow`
            // copied from the grid's rows `row · wp + j · pitch`.
            unsafe {
                let src = ext.add((o - o0) * self.ext);
                for j in 0..nimg {
                    let dst = y.add(j * self.ys + o * self.oh * self.ow);
                    for row in 0..self.oh {
                        let s = src.add(row * self.wp + j * self.pitch);
                        copy_row(s, dst.add(row * self.ow), self.ow);
                    }
                }
            }
        }
    }

    /// The weight gradient of a depthwise forward plan (one channel): `dw`
    /// gets `Σ_n Σ_q dy[n][q] · x[n][q + tap]` for every tap, over `n` images
    /// `xs` and `ys` elements apart, `imgs` at a time side by side: the input
    /// padded, the output gradient spread over the grid (zeros elsewhere),
    /// then one sweep with one vector accumulator per tap. `scratch`: of
    /// [`Blocked::scratch_len`]`(1)` elements.
    ///
    /// # Safety
    /// As [`Blocked::run`]; the pointers valid for those reads.
    pub(crate) unsafe fn depthwise_weight_grad(
        &self,
        x: *const f32,
        dy: *const f32,
        n: usize,
        dw: &mut [f32],
        scratch: *mut f32,
    ) {
        // SAFETY: the scratch holds [`Blocked::scratch_len`]`(1)` elements: the
        // padded plane, then the grid.
        let (xp, ext) = (scratch, unsafe { scratch.add(self.cin_block() * self.plane) });
        dw.fill(0.0);
        for n0 in (0..n).step_by(self.imgs) {
            let nimg = self.imgs.min(n - n0);
            // SAFETY: images `n0..n0 + nimg <= n` of `x` (this function's contract)
            // into the padded plane; the grid's `ext` elements.
            unsafe {
                self.pad(x.add(n0 * self.xs), 1, nimg, xp);
                std::ptr::write_bytes(ext, 0, self.ext);
            }
            for j in 0..nimg {
                // SAFETY: image `n0 + j < n` of `dy`, its `oh` rows of `ow` into the
                // grid's rows `row · wp + j · pitch` (within `ext`).
                unsafe {
                    let src = dy.add((n0 + j) * self.ys);
                    for row in 0..self.oh {
                        let d = ext.add(row * self.wp + j * self.pitch);
                        copy_row(src.add(row * self.ow), d, self.ow);
                    }
                }
            }
            #[cfg(target_arch = "x86_64")]
            if self.simd == Simd::Avx2 {
                // SAFETY: `simd` is AVX2: the CPU has AVX2 + FMA (this function's contract).
                unsafe { avx2::tap_dots(self, xp, ext, dw) };
            } else {
                // SAFETY: the CPU runs `self.simd`, AVX-512F (this function's contract).
                unsafe { tap_dots(self, xp, ext, dw) };
            }
        }
    }
}

/// True when this CPU runs the blocked kernel: AVX-512 or AVX2 + FMA
/// (the tier [`Simd::best`] picks, stored in each plan).
pub(crate) fn available() -> bool {
    cfg!(target_arch = "x86_64") && Simd::best() >= Simd::Avx2
}

/// Whether the blocked kernel suits a convolution of this geometry: stride 1,
/// more than one tap, and enough channels to fill a tile or depthwise (one
/// input and one output channel per group, images side by side).
///
/// The AVX2 tier runs depthwise convolutions only: its multi-channel tiles
/// (2 × 6 vectors of 8, the most 16 registers hold without spills) ran at
/// par with im2col + GEMM on ResNet's 3x3 forward passes and 10-35% slower
/// on their data gradients on a Zen 2 EPYC, while depthwise passes run 1.7-2x
/// faster than the plane loops of `Plan::Direct`.
fn suits(g: &Geo2) -> bool {
    let dense = g.ci_g * g.co_g >= 16 && Simd::best() >= Simd::Avx512;
    g.sh == 1 && g.sw == 1 && g.kk() > 1 && (dense || depthwise(g))
}

/// One input and one output channel per group.
fn depthwise(g: &Geo2) -> bool {
    g.ci_g == 1 && g.co_g == 1
}

impl<T: ConvElem> ConvKernel<T> {
    /// The blocked plan of a forward pass or data gradient, when the element
    /// type is f32, the CPU has AVX-512 or AVX2 + FMA and the shape suits it.
    pub(super) fn blocked_plan(g: &Geo2, pass: Pass) -> Option<Blocked> {
        if TypeId::of::<T>() != TypeId::of::<f32>() || !available() || !suits(g) {
            return None;
        }
        let make = |imgs| match pass {
            Pass::Forward => Blocked::forward(g, imgs),
            Pass::Data => Blocked::data(g, imgs),
            Pass::Weights => depthwise(g).then(|| Blocked::forward(g, imgs)).flatten(),
        };
        // Small planes: enough images side by side for a grid of GRID positions.
        let one = make(1)?;
        let per = (one.oh * one.pitch).max(1);
        let imgs = GRID.div_ceil(per).clamp(1, g.n.max(1));
        make(g.n.max(1).div_ceil(g.n.max(1).div_ceil(imgs)))
    }

    /// Cuts the tasks of the blocked method: (image block, group, block of
    /// output channels), the blocks cut so the team has at least `want` tasks.
    pub(super) fn cut_blocked(cx: &PlanCx<'_, '_>, b: &Blocked) -> Cut {
        let (g, pass, parallel, want) = (&cx.g, cx.pass, cx.parallel, cx.want);
        let per = (g.n.div_ceil(b.imgs) * g.groups).max(1);
        let k = if parallel { want.div_ceil(per) } else { 1 };
        let ob = b.cout.div_ceil(k).next_multiple_of(RB);
        let mut tasks = Vec::new();
        // Depthwise weight gradients: tasks over the whole batch.
        let starts = if pass == Pass::Weights { 0..1 } else { 0..g.n };
        if depthwise(g) {
            // Runs `lo..hi` of consecutive channels, so that pieces work on
            // distant memory: planes of neighbouring channels share cache
            // lines, which two pieces writing them in step fought over
            // (batch-32 passes on 7x7 planes ran 2x slower in some runs).
            let blocks = starts.len().div_ceil(b.imgs);
            let runs = if parallel { (4 * want).div_ceil(blocks).min(g.groups) } else { 1 };
            let per = g.groups.div_ceil(runs.max(1));
            for n in starts.step_by(b.imgs) {
                for lo in (0..g.groups).step_by(per.max(1)) {
                    tasks.push(Task { n, g: lo, lo, hi: (lo + per).min(g.groups), o0: 0, o1: 1 });
                }
            }
        } else {
            for n in starts.step_by(b.imgs) {
                for gi in 0..g.groups {
                    for o0 in (0..b.cout).step_by(ob) {
                        tasks.push(Task { n, g: gi, lo: 0, hi: 0, o0, o1: (o0 + ob).min(b.cout) });
                    }
                }
            }
        }
        Cut { tasks, chunks: vec![0, g.n], scratch: b.scratch_len(ob.min(b.cout)) }
    }

    /// Runs task `t` of the blocked plan `b` with the scratch `io.col`.
    ///
    /// # Safety
    /// As [`Blocked::run`]; `T` is f32 (see [`ConvKernel::blocked_plan`]).
    pub(super) unsafe fn blocked_task(&self, b: &Blocked, t: Task, io: Io<T>) {
        // SAFETY: this function's contract, group by group.
        unsafe {
            if depthwise(&self.geo) {
                // A run of channels (see `cut_blocked`), one group each.
                for gi in t.lo..t.hi {
                    self.blocked_group(b, Task { g: gi, ..t }, io);
                }
            } else {
                self.blocked_group(b, t, io);
            }
        }
    }

    /// Runs the blocked method on group `t.g` of task `t`.
    ///
    /// # Safety
    /// As [`Self::blocked_task`].
    unsafe fn blocked_group(&self, b: &Blocked, t: Task, io: Io<T>) {
        let Io { x, w, y, col, .. } = io;
        let g = &self.geo;
        // SAFETY: image `t.n < g.n`, group `t.g < groups` of the tensors `io`
        // holds (this function's contract).
        let (xg, yg, wg) = unsafe {
            (
                x.add((t.n * g.groups + t.g) * g.ci_g * g.ip()),
                y.add((t.n * g.groups + t.g) * g.co_g * g.op()),
                w.add(t.g * g.co_g * g.kdim()),
            )
        };
        let (src, dst) = match self.pass {
            Pass::Forward => (xg, yg),
            Pass::Data => (yg, xg),
            Pass::Weights => {
                // SAFETY: `T` is f32 (this function's contract); the group's `kk` weight
                // gradients (depthwise: one channel), this task's alone; `col` the scratch.
                unsafe {
                    let dw = std::slice::from_raw_parts_mut(wg as *mut f32, g.kk());
                    return b.depthwise_weight_grad(xg as *const f32, yg as *const f32, g.n, dw, col as *mut f32);
                }
            }
        };
        let nimg = b.imgs.min(g.n - t.n);
        // SAFETY: `T` is f32; images `t.n..t.n + nimg <= g.n`, the task's output
        // channels; `col` the scratch (this function's contract).
        unsafe { b.run(src as *const f32, nimg, wg as *const f32, dst as *mut f32, t.o0..t.o1, col as *mut f32) };
    }
}

/// What a register tile sweeps: the offsets of the taps in a padded plane
/// and of their weights within a weight row, the weight strides between
/// output and input channels, the elements between two input channels'
/// planes and between two output channels' grids.
pub(super) struct Sweep<'a> {
    pub taps: &'a [usize],
    pub woff: &'a [usize],
    pub wr: usize,
    pub wc: usize,
    pub plane: usize,
    pub ext: usize,
}

impl Blocked {
    /// The sweep of this plan's tiles.
    fn sweep(&self) -> Sweep<'_> {
        Sweep { taps: &self.taps, woff: &self.woff, wr: self.wr, wc: self.wc, plane: self.plane, ext: self.ext }
    }
}

/// Where one register tile works: `x` the padded planes at its first grid
/// position, `w` the weight row of its first output channel, `e` its first
/// output grid; `cin` input channels, `add`: the grids hold partial sums.
#[derive(Clone, Copy)]
pub(super) struct TileAt {
    pub x: *const f32,
    pub w: *const f32,
    pub e: *mut f32,
    pub cin: usize,
    pub add: bool,
}

/// Runs the `p × r` tile (`p ≤ PB`, `r ≤ RB`) with const sizes.
///
/// # Safety
/// As [`Blocked::run`].
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn tile_dispatch(p: usize, r: usize, b: &Sweep<'_>, at: TileAt) {
    let TileAt { x, w, e, cin, add } = at;
    macro_rules! rs {
        ($p:literal) => {
            match r {
                1 => tile::<$p, 1>(b, cin, add, x, w, e),
                2 => tile::<$p, 2>(b, cin, add, x, w, e),
                3 => tile::<$p, 3>(b, cin, add, x, w, e),
                4 => tile::<$p, 4>(b, cin, add, x, w, e),
                5 => tile::<$p, 5>(b, cin, add, x, w, e),
                6 => tile::<$p, 6>(b, cin, add, x, w, e),
                7 => tile::<$p, 7>(b, cin, add, x, w, e),
                _ => tile::<$p, 8>(b, cin, add, x, w, e),
            }
        };
    }
    // SAFETY: the CPU has AVX-512F and the tile's reads and writes are valid
    // (this function's contract, `p ≤ PB`, `r ≤ RB`).
    unsafe {
        match (p, r) {
            (4, 1) => tile::<4, 1>(b, cin, add, x, w, e),
            (5, 1) => tile::<5, 1>(b, cin, add, x, w, e),
            (6, 1) => tile::<6, 1>(b, cin, add, x, w, e),
            (1, _) => rs!(1),
            (2, _) => rs!(2),
            _ => rs!(3),
        }
    }
}

/// One register tile: `P` vectors of grid positions from `x` (padded planes),
/// `R` output channels from the weight rows at `w`, summed over every input
/// channel and tap, stored to the grids at `e` (stride `ext`).
///
/// # Safety
/// As [`Blocked::run`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
#[allow(clippy::needless_range_loop)] // explicit indices keep the register tile visible
unsafe fn tile<const P: usize, const R: usize>(
    b: &Sweep<'_>,
    cin: usize,
    add: bool,
    x: *const f32,
    w: *const f32,
    e: *mut f32,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); R]; P];
    if add {
        for (p, row) in acc.iter_mut().enumerate() {
            // SAFETY: grid `r < R` at `e`, its `P` vectors (this function's contract).
            unsafe {
                for (r, a) in row.iter_mut().enumerate() {
                    *a = _mm512_loadu_ps(e.add(r * b.ext + p * LANES));
                }
            }
        }
    }
    let (wr, wc, plane) = (b.wr, b.wc, b.plane);
    for c in 0..cin {
        // SAFETY: input channel `c < cin` of the padded planes and of the weight
        // rows; each tap's offset plus the tile's `P` vectors stays within the
        // plane's slack, `wo + r · wr` within the `R` weight rows (built with the
        // plan, this function's contract).
        unsafe {
            let xc = x.add(c * plane);
            let wcp = w.add(c * wc);
            for (&tap, &wo) in b.taps.iter().zip(b.woff) {
                let xs = xc.add(tap);
                let mut xv = [_mm512_setzero_ps(); P];
                for (p, v) in xv.iter_mut().enumerate() {
                    *v = _mm512_loadu_ps(xs.add(p * LANES));
                }
                let wt = wcp.add(wo);
                for r in 0..R {
                    let wv = _mm512_set1_ps(*wt.add(r * wr));
                    for p in 0..P {
                        acc[p][r] = _mm512_fmadd_ps(xv[p], wv, acc[p][r]);
                    }
                }
            }
        }
    }
    for (p, row) in acc.iter().enumerate() {
        // SAFETY: grid `r < R` at `e`, its `P` vectors (this function's contract).
        unsafe {
            for (r, a) in row.iter().enumerate() {
                _mm512_storeu_ps(e.add(r * b.ext + p * LANES), *a);
            }
        }
    }
}

/// `dw[t] += <ext, xp shifted by tap t>` over the whole grid, for every tap.
///
/// # Safety
/// As [`Blocked::depthwise_weight_grad`].
#[cfg(target_arch = "x86_64")]
unsafe fn tap_dots(b: &Blocked, xp: *const f32, ext: *const f32, dw: &mut [f32]) {
    let kk = b.taps.len();
    // SAFETY: taps `t0..t0 + K` within `kk`; the CPU and the pointers as this
    // function's contract.
    unsafe {
        match kk {
            9 => dots::<9>(b, xp, ext, 0, dw),
            25 => dots::<25>(b, xp, ext, 0, dw),
            _ => {
                let mut t = 0;
                while t + 8 <= kk {
                    dots::<8>(b, xp, ext, t, dw);
                    t += 8;
                }
                for t in t..kk {
                    dots::<1>(b, xp, ext, t, dw);
                }
            }
        }
    }
}

/// [`tap_dots`] for the `K` taps from `t0`, one vector accumulator each.
///
/// # Safety
/// As [`Blocked::depthwise_weight_grad`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
#[allow(clippy::needless_range_loop)] // explicit indices keep the accumulators visible
unsafe fn dots<const K: usize>(b: &Blocked, xp: *const f32, ext: *const f32, t0: usize, dw: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut taps = [0usize; K];
    taps.copy_from_slice(&b.taps[t0..t0 + K]);
    let mut acc = [_mm512_setzero_ps(); K];
    for v in 0..b.ext / LANES {
        // SAFETY: vector `v < ext / 16` of the grid, and the plane read at each
        // tap's offset plus it, within the plane's slack (this function's contract).
        unsafe {
            let e = _mm512_loadu_ps(ext.add(v * LANES));
            for k in 0..K {
                acc[k] = _mm512_fmadd_ps(e, _mm512_loadu_ps(xp.add(taps[k] + v * LANES)), acc[k]);
            }
        }
    }
    for k in 0..K {
        dw[b.woff[t0 + k]] += _mm512_reduce_add_ps(acc[k]);
    }
}

#[cfg(test)]
mod tests {
    use popart_ir::DataType;

    use super::super::super::par::Simd;
    use super::super::super::testutil::assert_close;
    use super::super::tests::{check, inputs, Case, Inputs};
    use super::Blocked;

    #[test]
    fn blocked_stride_one_matches_a_naive_loop() {
        // Depthwise (images side by side, one tile width per tap count), tiles
        // of every width, remainder channels, asymmetric and large padding,
        // dilation, groups, planes narrower than the kernel's reach, and one
        // case big enough to be split over threads and into input-channel blocks,
        // and a depthwise one split into runs of channels.
        let cases: [Case; 17] = [
            (4, 37, 1, 1, 20, 20, 3, 3, [1, 1, 1, 1], [1, 1]),
            (3, 8, 1, 1, 7, 7, 3, 3, [1, 1, 1, 1], [1, 1]),
            (5, 4, 1, 1, 9, 6, 5, 5, [2, 2, 2, 2], [1, 1]),
            (2, 3, 1, 1, 5, 11, 3, 2, [0, 1, 2, 0], [2, 1]),
            (3, 2, 1, 1, 8, 8, 4, 4, [3, 0, 1, 2], [1, 1]),
            (40, 2, 1, 1, 3, 3, 2, 3, [1, 1, 0, 0], [1, 1]),
            (1, 1, 72, 9, 64, 64, 3, 3, [1, 1, 1, 1], [1, 1]),
            (1, 1, 3, 16, 7, 7, 3, 3, [1, 1, 1, 1], [1, 1]),
            (2, 1, 5, 13, 9, 11, 3, 3, [1, 1, 1, 1], [1, 1]),
            (3, 2, 4, 9, 6, 5, 2, 3, [0, 2, 1, 0], [1, 1]),
            (3, 1, 8, 8, 10, 10, 3, 3, [2, 2, 2, 2], [2, 2]),
            (4, 3, 2, 11, 5, 13, 5, 1, [3, 0, 4, 0], [1, 1]),
            (2, 1, 16, 24, 20, 20, 3, 3, [1, 1, 1, 1], [1, 1]),
            (1, 1, 7, 17, 4, 4, 4, 4, [0, 0, 0, 0], [1, 1]),
            (3, 1, 6, 6, 3, 8, 3, 3, [5, 4, 0, 1], [1, 1]),
            (2, 2, 1, 20, 12, 12, 5, 5, [0, 0, 0, 0], [1, 1]),
            (1, 1, 20, 3, 8, 8, 5, 5, [2, 2, 2, 2], [1, 2]),
        ];
        for (i, c) in cases.into_iter().enumerate() {
            check(c, 1, DataType::Float32, i as u64);
            check(c, 1, DataType::Float64, i as u64 + 100);
        }
    }

    /// Runs the blocked plans of case `c` (stride 1) with the tiles of `simd`
    /// directly, `imgs` images side by side, and checks the forward pass, the
    /// data gradient and (depthwise) the weight gradient against [`naive`].
    fn check_tier(c: Case, imgs: usize, simd: Simd, seed: u64) {
        let (n, groups, ci_g, co_g, ..) = c;
        let Inputs { g, want: [want_y, want_dx, want_dw], x, w, dy } = inputs(c, 1, seed);
        let mut y = vec![0.0f32; want_y.len()];
        let mut dx = vec![0.0f32; want_dx.len()];
        let mut dw = vec![0.0f32; want_dw.len()];
        let plans = [Blocked::forward(&g, imgs).unwrap(), Blocked::data(&g, imgs).unwrap()];
        for (pass, mut b) in plans.into_iter().enumerate() {
            b.simd = simd;
            let mut scratch = vec![0.0f32; b.scratch_len(b.cout)];
            let (src, dst) = if pass == 0 { (&x, &mut y) } else { (&dy, &mut dx) };
            let (sp, dp) = (b.cin * if pass == 0 { g.ip() } else { g.op() }, b.cout);
            let dp = dp * if pass == 0 { g.op() } else { g.ip() };
            for n0 in (0..n).step_by(b.imgs) {
                for gi in 0..groups {
                    let at = |base: usize, per: usize| (n0 * groups + gi) * per + base;
                    // SAFETY: the slices hold every plane the plan reads and writes.
                    unsafe {
                        b.run(
                            src.as_ptr().add(at(0, sp)),
                            b.imgs.min(n - n0),
                            w.as_ptr().add(gi * co_g * g.kdim()),
                            dst.as_mut_ptr().add(at(0, dp)),
                            0..b.cout,
                            scratch.as_mut_ptr(),
                        );
                    }
                }
            }
            if pass == 0 && ci_g == 1 && co_g == 1 {
                for gi in 0..groups {
                    let k = g.kk();
                    // SAFETY: as above; one group's taps of `dw`.
                    unsafe {
                        b.depthwise_weight_grad(
                            x.as_ptr().add(gi * g.ip()),
                            dy.as_ptr().add(gi * g.op()),
                            n,
                            &mut dw[gi * k..(gi + 1) * k],
                            scratch.as_mut_ptr(),
                        );
                    }
                }
                let got: Vec<f64> = dw.iter().map(|&v| v as f64).collect();
                assert_close(&got, &want_dw, 1e-3);
            }
        }
        let back = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<f64>>();
        assert_close(&back(&y), &want_y, 1e-4);
        assert_close(&back(&dx), &want_dx, 1e-4);
    }

    #[test]
    fn every_tier_matches_a_naive_loop() {
        // Whatever tier the CPU picks for the other tests, run each tier it
        // has directly (AVX2 plans are depthwise, but its sweep serves any
        // channel count), one image and several side by side, tiles of every width.
        let cases: [Case; 8] = [
            (3, 8, 1, 1, 7, 7, 3, 3, [1, 1, 1, 1], [1, 1]),
            (2, 4, 1, 1, 31, 29, 3, 3, [1, 1, 1, 1], [1, 1]),
            (2, 3, 1, 1, 5, 11, 3, 2, [0, 1, 2, 0], [2, 1]),
            (4, 2, 1, 1, 9, 9, 5, 5, [2, 2, 2, 2], [1, 1]),
            (2, 1, 5, 13, 9, 11, 3, 3, [1, 1, 1, 1], [1, 1]),
            (3, 2, 4, 9, 6, 5, 2, 3, [0, 2, 1, 0], [1, 1]),
            (1, 1, 16, 7, 20, 20, 3, 3, [1, 1, 1, 1], [1, 1]),
            (2, 1, 6, 6, 3, 8, 3, 3, [5, 4, 0, 1], [1, 1]),
        ];
        for simd in [Simd::Avx2, Simd::Avx512].into_iter().filter(|&s| s <= Simd::best()) {
            for (i, c) in cases.into_iter().enumerate() {
                check_tier(c, 1, simd, 200 + i as u64);
                check_tier(c, c.0, simd, 300 + i as u64);
            }
        }
    }

    #[test]
    fn small_plane_data_gradients_match_a_naive_loop() {
        // Batches of small planes: the stride-1 data gradient runs as the
        // forward convolution of dy with flipped, transposed weights
        // (`data_forward`; float64 always, float32 where the blocked
        // kernel does not take it), groups, dilation, asymmetric padding,
        // a 1-d-like plane; and padding past the kernel's reach, which keeps
        // the im2col path (as do more output than input channels per group).
        let cases: [Case; 8] = [
            (8, 1, 7, 5, 7, 7, 3, 3, [1, 1, 1, 1], [1, 1]),
            (6, 2, 4, 3, 6, 8, 3, 3, [2, 0, 1, 2], [1, 1]),
            (9, 1, 3, 2, 9, 9, 3, 3, [2, 2, 2, 2], [2, 2]),
            (20, 1, 4, 2, 1, 15, 1, 5, [0, 2, 0, 2], [1, 1]),
            (5, 3, 2, 2, 8, 7, 2, 3, [1, 0, 0, 2], [1, 1]),
            (8, 1, 5, 3, 7, 7, 3, 3, [3, 3, 3, 3], [1, 1]),
            // Pointwise, more input than output channels: the batched columns are
            // copied to the planes.
            (8, 1, 24, 16, 5, 5, 1, 1, [0, 0, 0, 0], [1, 1]),
            (7, 2, 40, 9, 3, 4, 1, 1, [0, 0, 0, 0], [1, 1]),
        ];
        for (i, c) in cases.into_iter().enumerate() {
            check(c, 1, DataType::Float32, 400 + i as u64);
            check(c, 1, DataType::Float64, 500 + i as u64);
        }
    }

    #[test]
    fn one_image_weight_gradient_in_column_chunks_matches_a_naive_loop() {
        // A stem-like stride-2 convolution of one large image: its weight
        // gradient sums column chunks (and column blocks) over the team.
        check((1, 1, 3, 8, 30, 30, 3, 3, [1, 1, 1, 1], [1, 1]), 2, DataType::Float64, 9);
        check((1, 1, 3, 8, 100, 98, 7, 7, [3, 3, 3, 2], [1, 1]), 2, DataType::Float32, 7);
        check((1, 1, 2, 4, 70, 70, 3, 3, [1, 1, 1, 1], [1, 1]), 1, DataType::Float64, 8);
    }
}
