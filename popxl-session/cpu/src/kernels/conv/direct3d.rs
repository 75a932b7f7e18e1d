//! The direct 3-d convolution of float32 on AVX-512: the forward pass of any
//! stride, the stride-1 data gradient (the forward convolution of `dy` with
//! the flipped, transposed weights, as in `direct2d`) and the weight
//! gradient, without the 2-d "virtual images" of `nd`.
//!
//! **Layout.** An input channel's depth slices are copied, zero-padded, into
//! *phase planes*: for strides `(sh, sw)`, slice `s` holds `sh · sw` planes of
//! `hp × wp`, plane `(a, b)` holding the padded input rows `r · sh + a` and
//! columns `c · sw + b`. Output position `(oy, ox)` of a depth slice is grid
//! position `q = oy · wp + ox`, and tap `(kd, ki, kj)` reads `q` plus a fixed
//! offset (its depth slice, phase plane, and row and column within it), so a
//! strided 3-d convolution is a stride-1 sweep over the grid with 3-d taps
//! (the columns `ow..wp` of the grid are discarded).
//!
//! **Forward** (and stride-1 data gradient, which reads the weights in
//! place, output row `ci` of `[co][ci][taps]` with the taps reversed): tasks
//! are (image, group, output
//! depth, block of output channels; up to 4 consecutive depths for fewer than
//! 16 input channels). A task copies a level-2-sized block of
//! input channels' slices for its output depths and runs the register tile of
//! `direct2d` (3 vectors of 16 grid positions × 8 output channels) over
//! every channel of the block and every tap whose depth is inside the input
//! (taps reading depth padding are skipped, not multiplied by zeros),
//! accumulating in the output grids, then copies the grids' rows to `y`.
//!
//! **Weight gradient**: `dw[o][k] = Σ_q dy[o][q] · x[k][q]` (`k` = input
//! channel and tap). Tasks are (group, block of `k`); a task pads its
//! channels' slices per image, packs blocks of output positions of
//! `dy` transposed (positions × channels), and runs a tile of 6 rows of `k`
//! × 4 vectors of 16 output channels: per position, 4 vector loads of `dy`
//! and 6 broadcasts of `x` feed 24 FMAs, the accumulators kept in a
//! transposed `dw` of the task's rows (written to `dw` at the end); each
//! block of positions is transposed once (8 × 8 blocks in registers) and
//! swept by every row of the task. Layers of few
//! rows (a stem) split chunks of output depths over the batch instead, each
//! into its own partial `dw`, added in chunk order at the end.
//!
//! Each output is summed in an order fixed at build time, whatever the
//! thread timing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use popart_ir::ops::conv::ConvGeometry;

use super::super::par::Simd;
use super::super::ptr::{slice_mut, SendPtr};
use super::super::scratch;
use super::super::spec::SpecExt;
#[cfg(target_arch = "x86_64")]
use super::direct2d::{tile_dispatch, TileAt};
use super::direct2d::{Sweep, LANES, PB, RB};
#[cfg(target_arch = "x86_64")]
use super::implicit_wgrad::transpose8;
use super::layout::copy_row;
use super::Pass;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use crate::team;

/// Elements of padded input a forward task keeps in the level-2 cache (1 MiB of f32).
const L2_ELEMS: usize = 1 << 18;
/// Multiply-adds below which a convolution runs on the calling thread only.
const PAR_MIN_MACS: usize = 1 << 18;
/// Input channels below which forward tasks take several output depths.
const MIN_CIN_SHARE: usize = 16;
/// Rows of `k` per weight-gradient tile.
const WT: usize = 6;
/// Vectors of 16 output channels per weight-gradient tile.
const WR: usize = 4;
/// Bytes of packed `dy` a weight-gradient tile sweeps per block of positions
/// (stays in the level-1 cache with the rows of `x` it reads).
const WBLOCK_BYTES: usize = 24 << 10;
/// Rows of `k` per task below which a weight gradient splits output depths instead.
const MIN_ROWS: usize = 256;

/// The computed forward convolution of one group (a data gradient's: of `dy`
/// into `dx`, channels swapped, taps reversed), per spatial dim `[d, h, w]`.
#[derive(Clone, Debug)]
pub(super) struct Geo3 {
    pub(super) n: usize,
    pub(super) groups: usize,
    pub(super) cin: usize,
    pub(super) cout: usize,
    pub(super) inp: [usize; 3],
    pub(super) out: [usize; 3],
    pub(super) k: [usize; 3],
    pub(super) s: [usize; 3],
    pub(super) d: [usize; 3],
    pub(super) p: [isize; 3],
    /// Weight strides between output channels and between input channels.
    pub(super) wr: usize,
    pub(super) wc: usize,
    /// The weights are the data gradient's (`[C_out, C_in / group, taps]` of the
    /// convolution, this geometry's output channels second), read in place
    /// through `wr`/`wc` with the taps reversed.
    pub(super) flip: bool,
}

impl Geo3 {
    pub(super) fn kk(&self) -> usize {
        self.k.iter().product()
    }
    pub(super) fn ivol(&self) -> usize {
        self.inp.iter().product()
    }
    pub(super) fn ovol(&self) -> usize {
        self.out.iter().product()
    }
}

/// The padded layout of one input channel (see the module doc).
#[derive(Clone, Debug)]
struct Lay {
    hp: usize,
    wp: usize,
    /// Elements of one phase plane, and of one depth slice (all its phase planes).
    phase: usize,
    slice: usize,
    /// Elements of one output grid (`oh · wp` in whole vectors), and its vectors holding outputs.
    ext: usize,
    nv: usize,
    /// Offset of each `(ki, kj)` tap within a slice.
    hw: Vec<usize>,
    /// Per column phase: the plane columns inside the input and the input column of the first.
    cols: Vec<(usize, usize, usize)>,
}

/// The plane indices `i < len` whose input index `i · s + phase − p` lies in `0..n`.
fn inside(n: usize, s: usize, phase: usize, p: isize, len: usize) -> (usize, usize) {
    let (s, lo_num, hi_num) = (s as isize, p - phase as isize, n as isize + p - phase as isize);
    let lo = if lo_num <= 0 { 0 } else { (lo_num + s - 1) / s };
    let hi = if hi_num <= 0 { 0 } else { (hi_num + s - 1) / s };
    let hi = (hi as usize).min(len);
    ((lo as usize).min(hi), hi)
}

impl Lay {
    fn new(g: &Geo3) -> Self {
        let [_, sh, sw] = g.s;
        let hp = g.out[1] + (g.k[1] - 1) * g.d[1] / sh;
        let wp = g.out[2] + (g.k[2] - 1) * g.d[2] / sw;
        let phase = hp * wp;
        let slice = sh * sw * phase;
        let hw = (0..g.k[1])
            .flat_map(|ki| (0..g.k[2]).map(move |kj| (ki * g.d[1], kj * g.d[2])))
            .map(|(r, c)| ((r % sh) * sw + c % sw) * phase + (r / sh) * wp + c / sw)
            .collect();
        let ext = (g.out[1] * wp).next_multiple_of(LANES);
        let nv = ((g.out[1] - 1) * wp + g.out[2]).div_ceil(LANES);
        let cols = (0..sw)
            .map(|pc| {
                let (lo, hi) = inside(g.inp[2], sw, pc, g.p[2], wp);
                (lo, hi, ((lo * sw + pc) as isize - g.p[2]).max(0) as usize)
            })
            .collect();
        Lay { hp, wp, phase, slice, ext, nv, hw, cols }
    }

    fn max_hw(&self) -> usize {
        self.hw.iter().copied().max().unwrap_or(0)
    }
}

/// One unit of work: image `n` (forward), group `g`, output depths `d0..d1`
/// and output channels `o0..o1` (forward), or rows `k0..k1` of the weight
/// gradient with their offsets in the task's padded channels.
#[derive(Clone, Debug)]
struct Task3 {
    n: usize,
    g: usize,
    d0: usize,
    d1: usize,
    o0: usize,
    o1: usize,
    k0: usize,
    k1: usize,
    offs: Vec<usize>,
}

/// The taps of one range of depth taps inside the input: offsets from the
/// output depth's first slice, and weight offsets.
#[derive(Clone, Debug)]
struct TapSet {
    taps: Vec<usize>,
    woff: Vec<usize>,
}

pub(super) struct Direct3d {
    g: Geo3,
    lay: Lay,
    pass: Pass,
    /// Positions of (x, w, y) in the kernel args (one of them is the output).
    pos: [usize; 3],
    tasks: Vec<Task3>,
    parallel: bool,
    /// Forward: input channels per padded block, elements between two padded channels.
    cb: usize,
    plane: usize,
    /// Forward: the tap sets, and the set of each output depth.
    sets: Vec<TapSet>,
    set_of: Vec<usize>,
    /// Weight gradient: positions per packed block, output channels rounded to vectors.
    wblock: usize,
    co16: usize,
    /// Weight gradient: chunks of output depths, and the partial dw of chunks 1...
    chunks: usize,
    partials: Mutex<Vec<f32>>,
    scratch: Vec<scratch::Slot>,
}

/// The computed forward geometry of pass `pass` over `geo`, when this
/// kernel takes it: f32 (checked by the caller) on an AVX-512 CPU, 3 spatial
/// dims, at least 4 computed output channels and 16 channel pairs per group;
/// data gradients of stride 1; weight gradients of at least 16 output
/// channels per group.
pub(super) fn select(geo: &ConvGeometry, pass: Pass) -> Option<Geo3> {
    if !cfg!(target_arch = "x86_64") || Simd::best() < Simd::Avx512 || geo.kernel.len() != 3 || geo.macs() == 0 {
        return None;
    }
    let a3 = |v: &[usize]| [v[0], v[1], v[2]];
    let (ci, co) = (geo.in_channels / geo.group, geo.out_channels / geo.group);
    let (k, d) = (a3(&geo.kernel), a3(&geo.dilations));
    let kk: usize = k.iter().product();
    let base = Geo3 {
        n: geo.batch,
        groups: geo.group,
        cin: ci,
        cout: co,
        inp: a3(&geo.in_size),
        out: a3(&geo.out_size),
        k,
        s: a3(&geo.strides),
        d,
        p: a3(&geo.pad_begin).map(|p| p as isize),
        wr: ci * kk,
        wc: kk,
        flip: false,
    };
    let g = match pass {
        Pass::Forward | Pass::Weights => base,
        Pass::Data => {
            if base.s != [1, 1, 1] {
                return None;
            }
            let p = [0, 1, 2].map(|i| ((k[i] - 1) * d[i]) as isize - base.p[i]);
            // Output row `ci` of the weights `[co][ci][taps]` is `kk` from the
            // next, input channel `co` `ci · kk` (read in place, taps reversed).
            Geo3 { cin: co, cout: ci, inp: base.out, out: base.inp, p, wr: kk, wc: ci * kk, flip: true, ..base }
        }
    };
    let fits = match pass {
        Pass::Weights => g.cout >= 16,
        _ => g.cout >= 4 && g.cin * g.cout >= 16,
    };
    fits.then_some(g)
}

impl Direct3d {
    /// The plan of pass `pass` over the 3-d geometry `geo`, when the element
    /// type is f32, the CPU has AVX-512 and the shape suits the tiles (at
    /// least 4 computed output channels and 16 channel pairs per group; a
    /// stride-1 data gradient; a weight gradient of at least 16 output
    /// channels per group); `None` otherwise.
    pub(super) fn plan(
        spec: &KernelSpec<'_>,
        geo: &ConvGeometry,
        pass: Pass,
        pos: [usize; 3],
    ) -> Result<Option<Box<dyn Kernel>>, KernelError> {
        let Some(g) = select(geo, pass) else { return Ok(None) };
        let lay = Lay::new(&g);
        let threads = team::num_threads();
        let parallel = threads > 1 && geo.macs() >= PAR_MIN_MACS;
        let want = if parallel { 2 * threads } else { 1 };
        let mut k3 = Direct3d {
            g,
            lay,
            pass,
            pos,
            tasks: Vec::new(),
            parallel,
            cb: 0,
            plane: 0,
            sets: Vec::new(),
            set_of: Vec::new(),
            wblock: 0,
            co16: 0,
            chunks: 1,
            partials: Mutex::new(Vec::new()),
            scratch: Vec::new(),
        };
        let words = if pass == Pass::Weights { k3.plan_weights(want) } else { k3.plan_forward(want) };
        let wlen = k3.g.groups * k3.g.cout * k3.g.cin * k3.g.kk();
        let partials = popart_ir::size::try_zeroed_vec::<f32>((k3.chunks - 1) * wlen, "conv partials")
            .map_err(|_| spec.error("cannot allocate the convolution weight-gradient partials"))?;
        k3.partials = Mutex::new(partials);
        let slots = if parallel { threads.min(k3.tasks.len()).max(1) } else { 1 };
        k3.scratch = scratch::slots(spec, slots, words)?;
        Ok(Some(Box::new(k3)))
    }

    /// Cuts the forward tasks and tap sets; returns the scratch words of a task.
    fn plan_forward(&mut self, want: usize) -> usize {
        let (g, l) = (self.g.clone(), self.lay.clone());
        // Output depths: the tap sets of the depth taps inside the input.
        let mut sets: Vec<TapSet> = Vec::new();
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for od in 0..g.out[0] {
            let ok = |kd: usize| {
                let i = (od * g.s[0] + kd * g.d[0]) as isize - g.p[0];
                i >= 0 && (i as usize) < g.inp[0]
            };
            let lo = (0..g.k[0]).find(|&kd| ok(kd)).unwrap_or(g.k[0]);
            let hi = (lo..g.k[0]).take_while(|&kd| ok(kd)).last().map_or(lo, |kd| kd + 1);
            let at = match ranges.iter().position(|&r| r == (lo, hi)) {
                Some(at) => at,
                None => {
                    let khw = g.k[1] * g.k[2];
                    let (mut taps, mut woff) = (Vec::new(), Vec::new());
                    for kd in lo..hi {
                        for (j, &hw) in l.hw.iter().enumerate() {
                            taps.push(kd * g.d[0] * l.slice + hw);
                            let t = kd * khw + j;
                            woff.push(if g.flip { g.kk() - 1 - t } else { t });
                        }
                    }
                    ranges.push((lo, hi));
                    sets.push(TapSet { taps, woff });
                    ranges.len() - 1
                }
            };
            self.set_of.push(at);
        }
        self.sets = sets;
        // One output depth per task (its slices, every channel's grids), or
        // for few input channels (a stem), where padding the slices costs as
        // much as a fair share of the multiply-adds, up to 4 consecutive
        // depths, which pad the slices they share once, while tasks remain
        // for twice the team.
        let per = (g.n * g.groups * g.out[0]).max(1);
        let depths = if g.cin < MIN_CIN_SHARE { (per / (2 * want)).clamp(1, 4) } else { 1 };
        let ns = (depths - 1) * g.s[0] + (g.k[0] - 1) * g.d[0] + 1;
        let plane = ((ns - 1) * l.slice + l.slice.max(l.ext + l.max_hw())).next_multiple_of(LANES);
        let cb = (L2_ELEMS / plane).clamp(1, g.cin);
        let cb = g.cin.div_ceil(g.cin.div_ceil(cb));
        let split = want.div_ceil(per);
        let ob = g.cout.div_ceil(split).next_multiple_of(RB).min(g.cout.next_multiple_of(RB));
        for n in 0..g.n {
            for gi in 0..g.groups {
                for od in (0..g.out[0]).step_by(depths) {
                    for o0 in (0..g.cout).step_by(ob) {
                        let t = Task3 {
                            n,
                            g: gi,
                            d0: od,
                            d1: (od + depths).min(g.out[0]),
                            o0,
                            o1: (o0 + ob).min(g.cout),
                            k0: 0,
                            k1: 0,
                            offs: vec![],
                        };
                        self.tasks.push(t);
                    }
                }
            }
        }
        (self.cb, self.plane) = (cb, plane);
        (cb * plane + depths * ob * l.ext).div_ceil(2)
    }

    /// Cuts the weight-gradient tasks; returns the scratch words of a task.
    ///
    /// Layers of many rows of `k` split the rows (each task sums all
    /// positions of its rows); layers of few (a stem) split the output
    /// depths of the batch in chunks, each summed into its own partial `dw`
    /// (chunk 0 into the result), reduced in chunk order at the end.
    fn plan_weights(&mut self, want: usize) -> usize {
        let (g, l) = (self.g.clone(), self.lay.clone());
        let (kk, kdim) = (g.kk(), g.cin * g.kk());
        let khw = g.k[1] * g.k[2];
        let co16 = g.cout.next_multiple_of(LANES);
        let per_group = want.div_ceil(g.groups);
        let units = g.n * g.out[0];
        // Blocks of rows: twice as many as the team wants, so that a thread
        // slowed by the host does not hold the others (measured faster on
        // 3x3x3 layers of 64 and 256 channels); chunks of depths: as many as
        // it wants (each adds a partial `dw`).
        let (blocks, chunks) = if kdim >= per_group * MIN_ROWS {
            (per_group * want.min(2), 1)
        } else {
            (1, per_group.clamp(1, units.max(1)))
        };
        let rows = kdim.div_ceil(blocks).next_multiple_of(WT);
        let span = units.div_ceil(chunks);
        let chunks = units.div_ceil(span.max(1)).max(1);
        let depths = if chunks > 1 { span.min(g.out[0]) } else { g.out[0] };
        let ns = (depths - 1) * g.s[0] + (g.k[0] - 1) * g.d[0] + 1;
        let plane = (ns * l.slice).next_multiple_of(LANES);
        let mut most = 0;
        for c in 0..chunks {
            for gi in 0..g.groups {
                for k0 in (0..kdim).step_by(rows) {
                    let k1 = (k0 + rows).min(kdim);
                    let c0 = k0 / kk;
                    let offs = (k0..k1)
                        .map(|k| {
                            let (c, t) = (k / kk - c0, k % kk);
                            c * plane + (t / khw) * g.d[0] * l.slice + l.hw[t % khw]
                        })
                        .collect();
                    let chans = (k1 - 1) / kk + 1 - c0;
                    most = most.max(chans * plane + (k1 - k0) * co16);
                    let (d0, d1) = (c * span, ((c + 1) * span).min(units));
                    self.tasks.push(Task3 { n: c, g: gi, d0, d1, o0: 0, o1: 0, k0, k1, offs });
                }
            }
        }
        let wblock = (WBLOCK_BYTES / 4 / co16.min(WR * LANES)).max(16);
        (self.wblock, self.co16, self.plane, self.chunks) = (wblock, co16, plane, chunks);
        // Position offsets (one word each), then f32: padded channels, task dw, packed dy.
        wblock + (most + wblock * co16 + LANES).div_ceil(2)
    }

    /// Copies `cn` input channels of one image (`x`: the first's volume) into
    /// padded slices `sp0..sp0 + ns` (padded depths) at `xp`, `plane` apart.
    ///
    /// # Safety
    /// `x` holds the channels' volumes, `xp` `cn · plane` elements.
    #[inline(always)]
    unsafe fn pad(&self, x: *const f32, cn: usize, sp0: usize, ns: usize, plane: usize, xp: *mut f32) {
        let (g, l) = (&self.g, &self.lay);
        let [id, ih, iw] = g.inp;
        let [_, sh, sw] = g.s;
        let (hp, wp) = (l.hp, l.wp);
        for c in 0..cn {
            // SAFETY: channel `c < cn` of `xp` (`cn · plane` elements: this function's
            // contract).
            let dst = unsafe { xp.add(c * plane) };
            // Only the padding is zeroed (slices past the input, rows and
            // columns outside it, the tail past the slices): the copies write the rest.
            // SAFETY: the tail past the `ns` slices, inside the channel's `plane`
            // (the layout puts `ns · slice <= plane`).
            unsafe { std::ptr::write_bytes(dst.add(ns * l.slice), 0, plane - ns * l.slice) };
            for s in 0..ns {
                let di = (sp0 + s) as isize - g.p[0];
                if di < 0 || di as usize >= id {
                    // SAFETY: slice `s < ns` of the channel's padded slices.
                    unsafe { std::ptr::write_bytes(dst.add(s * l.slice), 0, l.slice) };
                    continue;
                }
                // SAFETY: input depth `di < id` of channel `c < cn` (this function's
                // contract).
                let src = unsafe { x.add(c * g.ivol() + di as usize * ih * iw) };
                for pr in 0..sh {
                    let (r0, r1) = inside(ih, sh, pr, g.p[1], hp);
                    for (pc, &(lo, hi, ic)) in l.cols.iter().enumerate() {
                        // SAFETY: phase `(pr, pc)` of slice `s < ns`, its `hp` rows of `wp`
                        // (`phase` elements); `inside` keeps the rows `r0..r1` whose input row
                        // `r · sh + pr − ph` lies in `0..ih`, and the layout's columns the
                        // phase columns `lo..hi <= wp` whose input columns `ic + j · sw`
                        // (`j < hi − lo`) lie in `0..iw`.
                        unsafe {
                            let ph = dst.add(s * l.slice + (pr * sw + pc) * l.phase);
                            if lo >= hi || r0 >= r1 {
                                std::ptr::write_bytes(ph, 0, l.phase);
                                continue;
                            }
                            std::ptr::write_bytes(ph, 0, r0 * wp);
                            std::ptr::write_bytes(ph.add(r1 * wp), 0, (hp - r1) * wp);
                            for r in r0..r1 {
                                let ir = (r * sh + pr) as isize - g.p[1];
                                let srow = src.add(ir as usize * iw + ic);
                                let drow = ph.add(r * wp + lo);
                                std::ptr::write_bytes(ph.add(r * wp), 0, lo);
                                std::ptr::write_bytes(drow.add(hi - lo), 0, wp - hi);
                                if sw == 1 {
                                    copy_row(srow, drow, hi - lo);
                                } else if sw == 2 {
                                    // Even elements, as slices the loop vectorizes.
                                    let len = hi - lo;
                                    let src = std::slice::from_raw_parts(srow, 2 * len - 1);
                                    let (head, last) = std::slice::from_raw_parts_mut(drow, len).split_at_mut(len - 1);
                                    for (d, pair) in head.iter_mut().zip(src.chunks_exact(2)) {
                                        *d = pair[0];
                                    }
                                    last[0] = src[2 * (len - 1)];
                                } else {
                                    for j in 0..hi - lo {
                                        *drow.add(j) = *srow.add(j * sw);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Runs forward task `t`: `x` the computed input, `y` its output.
    ///
    /// # Safety
    /// The CPU has AVX-512; the tensors are whole; `scratch` as planned.
    #[inline(always)]
    unsafe fn forward_task(&self, t: &Task3, x: *const f32, w: *const f32, y: *mut f32, scratch: *mut f32) {
        let (g, l) = (&self.g, &self.lay);
        let (ivol, ovol) = (g.ivol(), g.ovol());
        // SAFETY: image `t.n`, group `t.g` of the whole tensors (this function's
        // contract); the scratch holds `cb` padded channels of `plane` and then
        // the task's grids (as planned).
        let (xi, yi, wg, xp, grids) = unsafe {
            (
                x.add((t.n * g.groups + t.g) * g.cin * ivol),
                y.add((t.n * g.groups + t.g) * g.cout * ovol),
                w.add(t.g * g.cin * g.cout * g.kk()),
                scratch,
                scratch.add(self.cb * self.plane),
            )
        };
        let ns = (t.d1 - t.d0 - 1) * g.s[0] + (g.k[0] - 1) * g.d[0] + 1;
        for c0 in (0..g.cin).step_by(self.cb) {
            let cn = self.cb.min(g.cin - c0);
            // SAFETY: channels `c0..c0 + cn <= cin` of the image, the padded depths
            // the task's output depths read, into the scratch's `cb >= cn` channels.
            unsafe { self.pad(xi.add(c0 * ivol), cn, t.d0 * g.s[0], ns, self.plane, xp) };
            for od in t.d0..t.d1 {
                let set = &self.sets[self.set_of[od]];
                let sweep =
                    Sweep { taps: &set.taps, woff: &set.woff, wr: g.wr, wc: g.wc, plane: self.plane, ext: l.ext };
                // SAFETY: output depth `od` of the task's: its first padded slice, and
                // its grids (`o1 − o0` rounded up to `RB` of `ext`) in the scratch.
                let (xb, gb) = unsafe {
                    (
                        xp.add((od - t.d0) * g.s[0] * l.slice),
                        grids.add((od - t.d0) * (t.o1 - t.o0).next_multiple_of(RB) * l.ext),
                    )
                };
                for o in (t.o0..t.o1).step_by(RB) {
                    let r = RB.min(t.o1 - o);
                    // SAFETY: output channels `o..o + r <= o1` of the weights and of the grids.
                    let (wb, eb) = unsafe { (wg.add(o * g.wr + c0 * g.wc), gb.add((o - t.o0) * l.ext)) };
                    let mut v = 0;
                    while v < l.nv {
                        let p = PB.min(l.nv - v);
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: vectors `v..v + p` of the `nv` covering the grid, within the
                        // slices' slack; the CPU has AVX-512 (this function's contract).
                        unsafe {
                            tile_dispatch(
                                p,
                                r,
                                &sweep,
                                TileAt { x: xb.add(v * LANES), w: wb, e: eb.add(v * LANES), cin: cn, add: c0 > 0 },
                            )
                        };
                        #[cfg(not(target_arch = "x86_64"))]
                        let _ = (r, wb, eb, &sweep);
                        v += p;
                    }
                }
            }
        }
        let [_, oh, ow] = g.out;
        for od in t.d0..t.d1 {
            // SAFETY: the task's grids of depth `od` (as above); output depth `od`,
            // channels `o0..o1` of image `t.n` (this task's alone), their `oh` rows
            // of `ow`, copied from grid rows `wp >= ow` apart.
            unsafe {
                let gb = grids.add((od - t.d0) * (t.o1 - t.o0).next_multiple_of(RB) * l.ext);
                for o in t.o0..t.o1 {
                    let src = gb.add((o - t.o0) * l.ext);
                    let dst = yi.add(o * ovol + od * oh * ow);
                    for row in 0..oh {
                        copy_row(src.add(row * l.wp), dst.add(row * ow), ow);
                    }
                }
            }
        }
    }

    /// Runs weight-gradient task `t` into `dw` (the result for chunk 0, else
    /// the chunk's partial).
    ///
    /// # Safety
    /// The CPU has AVX-512; the tensors are whole; `scratch` as planned.
    #[inline(always)]
    unsafe fn weights_task(&self, t: &Task3, x: *const f32, dy: *const f32, dw: *mut f32, scratch: *mut u64) {
        let (g, l) = (&self.g, &self.lay);
        let (kk, kdim, ivol, ovol) = (g.kk(), g.cin * g.kk(), g.ivol(), g.ovol());
        let (wb, co16, plane) = (self.wblock, self.co16, self.plane);
        let (c0, rows) = (t.k0 / kk, t.k1 - t.k0);
        let chans = (t.k1 - 1) / kk + 1 - c0;
        let posv = scratch as *mut usize;
        // SAFETY: the scratch as planned: `wb` words of position offsets, then
        // the padded channels, the task's transposed `dw` and the packed `dy`.
        let (xp, dwt, dyt) = unsafe {
            let xp = scratch.add(wb) as *mut f32;
            let dwt = xp.add(chans * plane);
            let dyt = dwt.add(rows * co16);
            std::ptr::write_bytes(dwt, 0, rows * co16);
            std::ptr::write_bytes(dyt, 0, wb * co16);
            (xp, dwt, dyt)
        };
        let [od_all, oh, ow] = g.out;
        let mut u = t.d0;
        while u < t.d1 {
            // A run of output depths a..b of image n.
            let (n, a) = (u / od_all, u % od_all);
            let b = (a + t.d1 - u).min(od_all);
            u += b - a;
            let ns = (b - a - 1) * g.s[0] + (g.k[0] - 1) * g.d[0] + 1;
            // SAFETY: image `n`, group `t.g` of the whole tensors, channels
            // `c0..c0 + chans` of the task's rows (this function's contract); the
            // depths of the run into the scratch's padded channels.
            let yi = unsafe {
                let xi = x.add(((n * g.groups + t.g) * g.cin + c0) * ivol);
                self.pad(xi, chans, a * g.s[0], ns, plane, xp);
                dy.add((n * g.groups + t.g) * g.cout * ovol)
            };
            let (q_lo, q_hi) = (a * oh * ow, b * oh * ow);
            let (mut od, mut oy, mut ox) = (0, 0, 0);
            for q0 in (q_lo..q_hi).step_by(wb) {
                let np = wb.min(q_hi - q0);
                for p in 0..np {
                    // SAFETY: `p < np <= wb` words of position offsets.
                    unsafe { *posv.add(p) = od * g.s[0] * l.slice + oy * l.wp + ox };
                    ox += 1;
                    if ox == ow {
                        ox = 0;
                        oy += 1;
                        if oy == oh {
                            oy = 0;
                            od += 1;
                        }
                    }
                }
                // dy transposed once per block of positions, in blocks of WR
                // vectors of channels (positions × up to 64 channels each,
                // contiguous), then every row of the task's dw over it.
                #[cfg(target_arch = "x86_64")]
                // SAFETY: positions `q0..q0 + np` of the image's `dy`, into the packed
                // `dy` of `co16 · wb`; the CPU has AVX-512 (this function's contract).
                unsafe {
                    transpose_dy(yi.add(q0), ovol, g.cout, co16, np, wb, dyt)
                };
                for ob in (0..co16).step_by(WR * LANES) {
                    let width = (co16 - ob).min(WR * LANES);
                    for r0 in (0..rows).step_by(WT) {
                        let tr = WT.min(rows - r0);
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: rows `r0..r0 + tr` of the task's, their offsets in the padded
                        // channels; channel block `ob` of the packed `dy` (`np` rows of `width`)
                        // and of the transposed `dw`; AVX-512.
                        unsafe {
                            wtile_dispatch(
                                tr,
                                width / LANES,
                                KRows { xp, offs: &t.offs[r0..r0 + tr], pos: posv, np },
                                (dyt.add(ob * wb), width),
                                (dwt.add(r0 * co16 + ob), co16),
                            )
                        };
                        #[cfg(not(target_arch = "x86_64"))]
                        let _ = (tr, width, r0);
                    }
                }
            }
        }
        // dw rows written contiguously, from blocks of 16 rows of the transposed sums.
        // SAFETY: the task's rows `k0..k1` of group `t.g`'s weights of `dw` (this
        // task's alone: the result or the chunk's partial), from the transposed
        // sums (`rows` of `co16`).
        unsafe {
            let wg = dw.add(t.g * g.cout * kdim + t.k0);
            for r0 in (0..rows).step_by(LANES) {
                let rn = LANES.min(rows - r0);
                for o in 0..g.cout {
                    for r in r0..r0 + rn {
                        *wg.add(o * kdim + r) = *dwt.add(r * co16 + o);
                    }
                }
            }
        }
    }
}

impl Kernel for Direct3d {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let out = self.pass.out_role();
        let ptr = |role: usize| {
            SendPtr(if role == out { args.outputs[0] as *mut f32 } else { args.inputs[self.pos[role]] as *mut f32 })
        };
        let (x, w, y) = (ptr(0), ptr(1), ptr(2));
        let wlen = self.g.groups * self.g.cout * self.g.cin * self.g.kk();
        let mut partials = self.partials.lock().unwrap_or_else(|e| e.into_inner());
        let parts = SendPtr(partials.as_mut_ptr());
        // SAFETY: chunk `c > 0` has partial `c − 1` of the `chunks − 1` partials
        // of `wlen` elements (sized at build time).
        let wpart = |chunk: usize| if chunk == 0 { w.get() } else { unsafe { parts.get().add((chunk - 1) * wlen) } };
        let next = AtomicUsize::new(0);
        let piece = |p: usize| {
            let mut buf = self.scratch[p].lock().unwrap_or_else(|e| e.into_inner());
            let s = SendPtr(buf.as_mut_ptr());
            while let Some(t) = self.tasks.get(next.fetch_add(1, Ordering::Relaxed)) {
                // SAFETY: tasks write disjoint outputs (output depths and
                // channels, rows of dw); the scratch is this piece's own; the
                // plan exists only on AVX-512 CPUs. The layout loops run the AVX2 build.
                Simd::Avx2.run(
                    #[inline(always)]
                    || unsafe {
                        match self.pass {
                            Pass::Forward => self.forward_task(t, x.get(), w.get(), y.get(), s.get() as *mut f32),
                            Pass::Data => self.forward_task(t, y.get(), w.get(), x.get(), s.get() as *mut f32),
                            Pass::Weights => self.weights_task(t, x.get(), y.get(), wpart(t.n), s.get()),
                        }
                    },
                );
            }
        };
        if self.parallel && self.scratch.len() > 1 {
            team::run(self.scratch.len(), &piece);
        } else {
            piece(0);
        }
        // Chunked weight gradients: add the partials in chunk order.
        if self.pass == Pass::Weights && self.chunks > 1 {
            // SAFETY: the weight gradient (this call's output) holds `wlen` elements;
            // the pieces have finished.
            let out = unsafe { slice_mut(w.get(), wlen) };
            for part in partials.chunks_exact(wlen) {
                out.iter_mut().zip(part).for_each(|(o, &p)| *o += p);
            }
        }
        Ok(())
    }
}

/// Writes `dy[o][p]` (channel `o < cout` at `dy + o · ovol`, positions
/// `p < np`) transposed into `dyt`: blocks of up to `WR · 16` channels
/// (`co16` in all), block `ob` at `dyt + ob · wb` holding `np` rows of its
/// channels; 8 × 8 blocks transposed in registers, channels past `cout` zero.
///
/// # Safety
/// The CPU has AVX2; `dy` valid for those reads, `dyt` for `co16 · wb` writes; `np ≤ wb`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_dy(dy: *const f32, ovol: usize, cout: usize, co16: usize, np: usize, wb: usize, dyt: *mut f32) {
    use std::arch::x86_64::*;
    let full = np / 8 * 8;
    for ob in (0..co16).step_by(WR * LANES) {
        let width = (co16 - ob).min(WR * LANES);
        // SAFETY: block `ob < co16` of `dyt` (`co16 · wb` writes: this function's
        // contract).
        let blk = unsafe { dyt.add(ob * wb) };
        for o8 in (ob..ob + width).step_by(8) {
            // SAFETY: channels `o8..o8 + 8` of the block, within its `width`.
            let d = unsafe { blk.add(o8 - ob) };
            for p8 in (0..full).step_by(8) {
                // SAFETY: channels `o8 + i < cout` of `dy`, positions `p8..p8 + 8 <= np`
                // (this function's contract), into rows `p8..p8 + 8 < wb` of the block;
                // AVX2.
                unsafe {
                    let r: [__m256; 8] = std::array::from_fn(|i| {
                        if o8 + i < cout {
                            _mm256_loadu_ps(dy.add((o8 + i) * ovol + p8))
                        } else {
                            _mm256_setzero_ps()
                        }
                    });
                    let c = transpose8(r);
                    for (j, v) in c.iter().enumerate() {
                        _mm256_storeu_ps(d.add((p8 + j) * width), *v);
                    }
                }
            }
            for p in full..np {
                // SAFETY: as above, position `p < np`.
                unsafe {
                    for i in 0..8 {
                        *d.add(p * width + i) = if o8 + i < cout { *dy.add((o8 + i) * ovol + p) } else { 0.0 };
                    }
                }
            }
        }
    }
}

/// The rows of `k` a weight-gradient tile reads: the padded channels `xp`,
/// each row's offset in them, and the grid offsets of the `np` positions.
#[derive(Clone, Copy)]
pub(super) struct KRows<'a> {
    pub(super) xp: *const f32,
    pub(super) offs: &'a [usize],
    pub(super) pos: *const usize,
    pub(super) np: usize,
}

/// Runs the `t × r` weight-gradient tile (`t ≤ WT`, `r ≤ WR`) with const sizes.
///
/// # Safety
/// As [`wtile`].
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn wtile_dispatch(
    t: usize,
    r: usize,
    rows: KRows<'_>,
    dyt: (*const f32, usize),
    acc: (*mut f32, usize),
) {
    let KRows { xp, offs, pos, np } = rows;
    macro_rules! rs {
        ($t:literal) => {
            match r {
                1 => wtile::<$t, 1>(xp, offs, pos, np, dyt, acc),
                2 => wtile::<$t, 2>(xp, offs, pos, np, dyt, acc),
                3 => wtile::<$t, 3>(xp, offs, pos, np, dyt, acc),
                _ => wtile::<$t, 4>(xp, offs, pos, np, dyt, acc),
            }
        };
    }
    // SAFETY: this function's contract, `t ≤ WT`, `r ≤ WR`.
    unsafe {
        match t {
            1 => rs!(1),
            2 => rs!(2),
            3 => rs!(3),
            4 => rs!(4),
            5 => rs!(5),
            _ => rs!(6),
        }
    }
}

/// `acc[t][r·16..] += Σ_p x[pos[p] + offs[t]] · dyt[p][r·16..]`: `T` rows of
/// `k` × `R` vectors of output channels; `dyt` and `acc` with their row strides.
///
/// # Safety
/// The CPU has AVX-512F; `xp` valid at every `pos[p] + offs[t]`, `dyt` for
/// `np` rows, `acc` for `T` rows, of `R` vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
#[allow(clippy::needless_range_loop)] // explicit indices keep the register tile visible
unsafe fn wtile<const T: usize, const R: usize>(
    xp: *const f32,
    offs: &[usize],
    pos: *const usize,
    np: usize,
    (dyt, ds): (*const f32, usize),
    (acc, co16): (*mut f32, usize),
) {
    use std::arch::x86_64::*;
    // The sums start from zero and are added to `acc` at the end: the
    // multiply-adds do not wait for the accumulators' loads.
    let mut a = [[_mm512_setzero_ps(); R]; T];
    let mut off = [0usize; T];
    off.copy_from_slice(&offs[..T]);
    for p in 0..np {
        // SAFETY: position `p < np`: its offset in the padded channels, where
        // every row's `offs[t]` reads (this function's contract), and row `p` of
        // `dyt`, `R` vectors.
        unsafe {
            let base = xp.add(*pos.add(p));
            let d = dyt.add(p * ds);
            let mut dv = [_mm512_setzero_ps(); R];
            for r in 0..R {
                dv[r] = _mm512_loadu_ps(d.add(r * LANES));
            }
            for t in 0..T {
                let xv = _mm512_set1_ps(*base.add(off[t]));
                for r in 0..R {
                    a[t][r] = _mm512_fmadd_ps(xv, dv[r], a[t][r]);
                }
            }
        }
    }
    for t in 0..T {
        for r in 0..R {
            // SAFETY: row `t < T` of `acc`, its `R` vectors (this function's contract).
            unsafe {
                let at = acc.add(t * co16 + r * LANES);
                _mm512_storeu_ps(at, _mm512_add_ps(_mm512_loadu_ps(at), a[t][r]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use popart_ir::DataType;

    use super::super::nd::tests::{case, check_routes, data, run_passes, Case};
    use super::super::Pass;
    use super::select;
    use crate::team;

    /// Which passes of case `c` this kernel takes: forward, data, weights.
    fn taken(c: &Case) -> [bool; 3] {
        let geo = c.geometry();
        [Pass::Forward, Pass::Data, Pass::Weights].map(|p| select(&geo, p).is_some())
    }

    #[test]
    fn direct3d_matches_the_definition() {
        // Each case: the passes it must take here (on AVX-512), then the check
        // of all three passes (and ConvTranspose) against the naive loop.
        let mut cases: Vec<(Case, [bool; 3])> = Vec::new();
        // Odd sizes, channels not a multiple of the tiles, padding: all three passes.
        let mut c = case(2, 1, 5, 19, &[5, 7, 9], &[3, 3, 3]);
        c.p = vec![1; 6];
        cases.push((c, [true, true, true]));
        // Uneven padding, dilation, and padding past the kernel's reach (depths
        // whose every tap reads padding, a data gradient with negative padding).
        let mut c = case(1, 1, 6, 16, &[4, 6, 5], &[2, 3, 2]);
        (c.d, c.p) = (vec![2, 1, 2], vec![3, 0, 2, 1, 2, 0]);
        cases.push((c, [true, true, true]));
        // Strides 2 and 3 (phase planes; the data gradient keeps nd), groups.
        let mut c = case(2, 2, 4, 17, &[7, 9, 8], &[3, 3, 3]);
        (c.s, c.p) = (vec![2, 2, 2], vec![1, 1, 1, 1, 0, 1]);
        cases.push((c, [true, false, true]));
        let mut c = case(1, 1, 3, 16, &[5, 17, 16], &[3, 7, 7]);
        (c.s, c.d, c.p) = (vec![1, 3, 2], vec![1, 1, 2], vec![1, 3, 3, 1, 3, 3]);
        cases.push((c, [true, false, true]));
        // A 1x1x1 stride-2 convolution (one phase read of four), a 1-deep kernel.
        let mut c = case(2, 1, 8, 16, &[5, 5, 6], &[1, 1, 1]);
        c.s = vec![2, 2, 2];
        cases.push((c, [true, false, true]));
        let mut c = case(1, 3, 4, 16, &[3, 6, 6], &[1, 3, 3]);
        c.p = vec![0, 1, 1, 0, 1, 1];
        cases.push((c, [true, true, true]));
        // A stem of many output depths: forward tasks of several depths
        // (the last one shorter).
        let mut c = case(2, 1, 3, 16, &[13, 9, 10], &[3, 3, 3]);
        (c.s, c.p) = (vec![1, 2, 2], vec![1; 6]);
        cases.push((c, [true, false, true]));
        // Few output channels: forward and data only where the tiles fit.
        cases.push((case(2, 1, 8, 4, &[4, 5, 6], &[3, 3, 3]), [true, true, false]));
        // Large enough to run on the team, input channels in several blocks,
        // weight-gradient rows split in blocks that cross channels.
        let mut c = case(1, 1, 40, 24, &[6, 30, 31], &[3, 3, 3]);
        c.p = vec![1; 6];
        cases.push((c, [true, true, true]));
        // Few rows of k on the team: chunks of output depths across images,
        // summed in partials.
        let mut c = case(3, 1, 2, 16, &[4, 10, 11], &[3, 3, 3]);
        c.p = vec![1; 6];
        cases.push((c, [true, false, true]));
        check_routes(&cases, taken, 40);
    }

    #[test]
    fn direct3d_does_not_depend_on_the_thread_count() {
        // The team split (output channels; weight rows) changes no bit.
        // One image of two output depths: the forward tasks split output channels.
        // Weight gradients of 40 · 27 rows split the rows.
        let mut c = case(1, 1, 40, 40, &[2, 20, 21], &[3, 3, 3]);
        (c.s, c.p) = (vec![1, 2, 1], vec![1; 6]);
        let d = data(&c, DataType::Float32, 7);
        let run = || run_passes(&c, &d);
        let one = team::with_max_threads(1, run);
        let all = run();
        assert_eq!(one, all);
    }
}
