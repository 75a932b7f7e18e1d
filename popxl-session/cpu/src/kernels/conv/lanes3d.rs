//! The direct 3-d convolution of float32 on AVX-512 with the *output
//! channels in the vector lanes*: the forward pass of any stride and the
//! stride-1 data gradient, for layers of at least [`MIN_COUT`] computed
//! output channels (fewer go to [`super::direct3d`], whose lanes hold
//! output positions); and some 2-d passes as 3-d ones of depth 1
//! ([`lift_2d`]), among them strided data gradients, in phases.
//!
//! **Phases.** The data gradient of a layer of stride `s` in height or
//! width splits that dim's outputs (the layer's inputs) by their index
//! modulo `s`: each phase is a stride-1 convolution of `dy` by the taps
//! that reach it (for 3x3 stride 2: 1, 2, 2 and 4 taps of the 9), so no
//! multiply-add is of an inserted zero. The phases' positions are runs of
//! the tiles' position list, each run with its own tap set; the sums stay
//! in output order.
//!
//! **Why.** A tile of `direct3d` loads vectors of 16 consecutive positions
//! at every tap's offset, which straddles two cache lines for 15 taps in 16;
//! here every vector load is an aligned row of packed weights and the input
//! is read one element at a time (a broadcast never straddles), as oneDNN's
//! blocked direct convolutions do.
//!
//! **Weights.** Each run packs the weights of every group into blocks of
//! [`BW`] output channels, `[group][block][c][tap][BW]`, channels past the
//! layer's zero. A data gradient reads the convolution's `[C_out, C_in /
//! group, taps]` weights transposed (its output channel is the
//! convolution's input channel) with the taps reversed.
//!
//! **Tasks** are (image, group, output depth, block of output channels). A
//! task copies the depth slices its taps read of a level-2-sized block of
//! input channels, zero-padded in height and width (`hp × wq`: exactly the
//! padded extent the taps read), then sweeps sub-blocks of input channels
//! whose packed weights stay in the level-1 cache (one channel at least): for
//! each sub-block, the output positions (row-major, a tile may cross rows) in
//! tiles of up to [`PMAX`] positions × `R ≤ 4` vectors of 16
//! output channels, each (channel, tap) one vector load per 16 channels, one
//! broadcast per position and `P · R` multiply-adds. Partial sums live in the
//! task's position-major block (`[position][BW]`, level-2 sized), written
//! transposed to the output at the end. Taps whose depth reads padding are
//! skipped, not multiplied by zeros.
//!
//! Each output is summed in an order fixed at build time (channel, then
//! tap), whatever the thread count.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use popart_ir::ops::conv::ConvGeometry;

use super::super::par::{par_split, Simd, PAR_MIN_ELEMS};
use super::super::ptr::SendPtr;
use super::super::scratch;
use super::super::spec::SpecExt;
use super::direct3d::{select, Geo3};
#[cfg(target_arch = "x86_64")]
use super::implicit_wgrad::transpose8;
use super::layout::copy_row;
use super::Pass;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use crate::team;

/// f32 lanes of one AVX-512 vector.
const LANES: usize = 16;
/// Vectors of output channels of a full tile.
const RV: usize = 4;
/// Output channels per packed block.
const BW: usize = RV * LANES;
/// Output positions of a full tile (`PMAX · RV` accumulators).
const PMAX: usize = 6;
/// Computed output channels below which `direct3d` keeps the layer.
pub(super) const MIN_COUT: usize = 32;
/// Bytes of packed weights a channel sub-block keeps in the level-1 cache.
const L1_W_BYTES: usize = 32 << 10;
/// Elements of padded input a task keeps in the level-2 cache (1 MiB of f32).
const L2_ELEMS: usize = 1 << 18;
/// Input channels per piece of the weight packing.
const PACK_CHANNELS: usize = 8;
/// Positions per plane below which batched 2-d pointwise forward passes run here.
const SMALL_POINTWISE: usize = 256;
/// Multiply-adds below which a convolution runs on the calling thread only.
const PAR_MIN_MACS: usize = 1 << 18;

/// The taps of one output depth whose depth lies inside the input: their
/// offsets in the task's padded slices, and in a channel's packed weights.
#[derive(Clone, Debug)]
struct TapSet {
    xoff: Vec<usize>,
    woff: Vec<usize>,
    /// The padded slices the taps read (`kd · dilation`), each once.
    slices: Vec<usize>,
}

/// One dim (rows or columns) of the output positions, in phases: the
/// forward pass has one, positions `step` apart in the padded input; the
/// data gradient of stride `s` has `s`, phase `a` holding outputs `a + s · i`
/// (`i < count`), each reached by its own taps (the convolution's taps
/// `t` with `a + pad − t · dilation` a multiple of `s`), so that every phase
/// is a stride-1 convolution of `dy` and no product is of a zero.
#[derive(Clone, Debug)]
struct Phases {
    stride: usize,
    /// Padding before the input, and the padded extent the taps read.
    pad: isize,
    extent: usize,
    list: Vec<Phase>,
}

/// One phase of [`Phases`]: `count` positions, `step` apart in the padded
/// input, and its taps `(t, offset)`: tap `t` of the dim reads position `i`'s
/// input at `i · step + offset`.
#[derive(Clone, Debug)]
struct Phase {
    count: usize,
    step: usize,
    taps: Vec<(usize, usize)>,
}

impl Phases {
    /// The one phase of `out` positions of stride `s`, every tap of kernel
    /// `k` (dilation `d`) read, padding `pad` before the input.
    fn unit(out: usize, k: usize, s: usize, d: usize, pad: isize) -> Phases {
        let taps = (0..k).map(|t| (t, t * d)).collect();
        let extent = (out - 1) * s + (k - 1) * d + 1;
        Phases { stride: 1, pad, extent, list: vec![Phase { count: out, step: s, taps }] }
    }

    /// The phases of the data gradient of `out` input positions of a
    /// convolution of `inp` output positions, kernel `k`, stride `s`,
    /// dilation `d`, padding `pf` before its input: input `a + s · i` is
    /// the sum over its phase's taps `t` of `dy[i + c_t]` times tap `t`,
    /// `c_t = (a + pf − t · d) / s`. Taps whose reads all fall outside `dy`
    /// are left out.
    fn new(out: usize, inp: usize, k: usize, s: usize, d: usize, pf: isize) -> Phases {
        let si = s as isize;
        let raw: Vec<(usize, Vec<(usize, isize)>)> = (0..s)
            .map(|a| {
                let count = out.saturating_sub(a).div_ceil(s);
                let taps = (0..k)
                    .filter_map(|t| {
                        let r = a as isize + pf - (t * d) as isize;
                        let c = r.div_euclid(si);
                        let meets = c < inp as isize && c + count as isize > 0;
                        (r.rem_euclid(si) == 0 && count > 0 && meets).then_some((t, c))
                    })
                    .collect();
                (count, taps)
            })
            .collect();
        let reads = || raw.iter().flat_map(|(n, taps)| taps.iter().map(move |&(_, c)| (c, *n as isize)));
        let pad = reads().map(|(c, _)| -c).max().unwrap_or(0).max(0);
        let extent = reads().map(|(c, n)| c + pad + n).max().unwrap_or(1).max(1) as usize;
        let list = raw
            .into_iter()
            .map(|(count, taps)| Phase {
                count,
                step: 1,
                taps: taps.into_iter().map(|(t, c)| (t, (c + pad) as usize)).collect(),
            })
            .collect();
        Phases { stride: s, pad, extent, list }
    }
}

/// One unit of work: image `n`, group `g`, output depth `od`, channel
/// blocks `b0..b1`.
#[derive(Clone, Copy, Debug)]
struct Task {
    n: usize,
    g: usize,
    od: usize,
    b0: usize,
    b1: usize,
}

pub(super) struct Lanes3d {
    g: Geo3,
    pass: Pass,
    /// Positions of (x, w, y) in the kernel args (one of them is the output).
    pos: [usize; 3],
    /// Padded rows and columns of a slice, elements of a slice, of a channel's slices.
    hp: usize,
    wq: usize,
    slice: usize,
    plane: usize,
    /// Blocks of `BW` output channels per group.
    blocks: usize,
    /// Input channels per level-2 block.
    cb: usize,
    /// Each output position's offset in a channel's padded slices, in runs
    /// (`runs`: one per phase pair, see [`Phases`]; positions row-major in each).
    qoff: Vec<usize>,
    runs: Vec<(usize, usize)>,
    /// Input channels per level-1 sub-block of each run (its taps' packed
    /// weights in the level-1 cache).
    run_cw: Vec<usize>,
    /// The offset in the sums (`BW` per output position) of each entry of `qoff`.
    eoff: Vec<usize>,
    /// The tap sets: those of output depth `od` start at `set_of[od]`, one per run.
    sets: Vec<TapSet>,
    set_of: Vec<usize>,
    tasks: Vec<Task>,
    parallel: bool,
    /// The packed weights, rewritten at every run.
    packed: Mutex<Vec<f32>>,
    scratch: Vec<scratch::Slot>,
}

/// The 2-d geometry `geo` as a 3-d one of depth 1, when its pass runs
/// here: f32 (checked by the caller) on AVX-512 ([`Lanes3d::plan`]), at
/// least 16 input channels per group (not the stem), and
/// - a forward pass either strided with more than one tap, not a batch-1
///   pass of fewer than 64 positions (which `dot` runs faster), or pointwise
///   on planes of fewer than [`SMALL_POINTWISE`] positions in a batch (which
///   im2col + GEMM runs as a copy of several images into one matrix);
/// - or the data gradient of a strided layer with more than one tap and at
///   least 16 output channels per group, on a batch of output planes of
///   fewer than [`SMALL_POINTWISE`] positions, in phases ([`Phases`]).
///
/// Measured 1.1-1.2x the im2col and GEMM method on ResNet's stride-2 3x3
/// layers at batch 32 and on the 56x56 one at batch 1, 1.03-1.07x on the
/// batch-32 1x1 layers of 14x14 and 7x7 planes, and 1.2x on the data
/// gradient of the batch-32 stride-2 layer of 7x7 outputs; stride-1 3x3
/// layers, larger pointwise ones, batch-1 strided data gradients (the
/// weights' packing dominates) and those of 28x28 outputs ran slower or
/// level.
pub(super) fn lift_2d(geo: &ConvGeometry, pass: Pass) -> Option<ConvGeometry> {
    let positions: usize = geo.out_size.iter().product();
    let taps: usize = geo.kernel.iter().product();
    let strided = geo.strides.iter().any(|&s| s > 1);
    let downsampling = strided && taps > 1 && (geo.batch > 1 || positions >= super::dot::MAX_POSITIONS);
    let small_pointwise = !strided && taps == 1 && geo.batch > 1 && positions < SMALL_POINTWISE;
    let g = geo.group.max(1);
    let takes = geo.kernel.len() == 2
        && geo.in_channels / g >= 16
        && match pass {
            Pass::Forward => downsampling || small_pointwise,
            Pass::Data => {
                strided && taps > 1 && geo.batch > 1 && positions < SMALL_POINTWISE && geo.out_channels / g >= 16
            }
            Pass::Weights => false,
        };
    takes.then(|| depth_one(geo))
}

/// The 2-d geometry `geo` as the 3-d one of depth 1 (kernel, stride and
/// dilation 1, no padding in depth).
pub(super) fn depth_one(geo: &ConvGeometry) -> ConvGeometry {
    let lift = |v: &[usize], one: usize| [&[one], v].concat();
    ConvGeometry {
        in_size: lift(&geo.in_size, 1),
        kernel: lift(&geo.kernel, 1),
        out_size: lift(&geo.out_size, 1),
        strides: lift(&geo.strides, 1),
        dilations: lift(&geo.dilations, 1),
        pad_begin: lift(&geo.pad_begin, 0),
        ..geo.clone()
    }
}

/// The convolution pass `pass` computes here, when it runs here (see
/// [`Lanes3d::plan_phased`]): a data gradient's is the stride-1 one's
/// (channels swapped, taps reversed, depth padded as its forward pass) with
/// the layer's strides, its rows and columns split in [`Phases`] by the plan.
fn computed(geo: &ConvGeometry, pass: Pass, phased: bool) -> Option<Geo3> {
    let strided = geo.strides.iter().any(|&s| s > 1);
    let g = match pass {
        Pass::Weights => None,
        Pass::Data if strided => {
            if !phased || geo.strides.len() != 3 || geo.strides[0] != 1 {
                return None;
            }
            let unit = ConvGeometry { strides: vec![1; 3], ..geo.clone() };
            select(&unit, pass).map(|g| Geo3 { s: [1, geo.strides[1], geo.strides[2]], ..g })
        }
        _ => select(geo, pass),
    };
    g.filter(|g| g.cout >= MIN_COUT)
}

impl Lanes3d {
    /// The plan of a 2-d pass [`lift_2d`] takes (a ResNet downsampling
    /// 3x3's forward pass or data gradient, a pointwise forward pass on a
    /// batch of small planes), run as the 3-d convolution of depth 1.
    pub(super) fn plan_2d(
        spec: &KernelSpec<'_>,
        geo: &ConvGeometry,
        pass: Pass,
        pos: [usize; 3],
    ) -> Result<Option<Box<dyn Kernel>>, KernelError> {
        match lift_2d(geo, pass) {
            Some(g3) => Self::plan_phased(spec, &g3, pass, pos, true),
            None => Ok(None),
        }
    }

    /// The plan of pass `pass` (forward, or a stride-1 data gradient) over
    /// the 3-d geometry `geo` when the element type is f32 (checked by the
    /// caller), the CPU has AVX-512 and the layer computes at least
    /// [`MIN_COUT`] output channels per group; `None` otherwise.
    pub(super) fn plan(
        spec: &KernelSpec<'_>,
        geo: &ConvGeometry,
        pass: Pass,
        pos: [usize; 3],
    ) -> Result<Option<Box<dyn Kernel>>, KernelError> {
        Self::plan_phased(spec, geo, pass, pos, false)
    }

    /// [`Lanes3d::plan`], and with `phased` also the data gradients of
    /// layers strided in height or width (not in depth), in phases.
    fn plan_phased(
        spec: &KernelSpec<'_>,
        geo: &ConvGeometry,
        pass: Pass,
        pos: [usize; 3],
        phased: bool,
    ) -> Result<Option<Box<dyn Kernel>>, KernelError> {
        let Some(mut g) = computed(geo, pass, phased) else { return Ok(None) };
        let strided_data = pass == Pass::Data && g.s != [1; 3];
        let [_, oh, ow] = g.out;
        // Rows and columns: each dim's phases (one, of stride 1, unless strided data).
        let (rows, cols) = if strided_data {
            let dim = |i: usize| {
                let pf = geo.pad_begin[i] as isize;
                Phases::new(g.out[i], g.inp[i], g.k[i], geo.strides[i], g.d[i], pf)
            };
            (dim(1), dim(2))
        } else {
            (Phases::unit(oh, g.k[1], g.s[1], g.d[1], g.p[1]), Phases::unit(ow, g.k[2], g.s[2], g.d[2], g.p[2]))
        };
        (g.p[1], g.p[2]) = (rows.pad, cols.pad);
        let (hp, wq) = (rows.extent, cols.extent);
        let slice = hp * wq;
        let ns = (g.k[0] - 1) * g.d[0] + 1;
        // The last tap of the last tile reads one element past its position;
        // a vector's slack keeps every channel's slices apart.
        let plane = (ns * slice).next_multiple_of(LANES);
        let kk = g.kk();
        let blocks = g.cout.div_ceil(BW);
        let cb = (L2_ELEMS / plane).clamp(1, g.cin);
        let cb = g.cin.div_ceil(g.cin.div_ceil(cb));
        // Runs of positions, one per (row phase, column phase) holding
        // positions: each position's offset in a padded channel (tiles run over a
        // run's positions in row-major order, across rows), and the sums row of
        // each output position when runs reorder them.
        let mut qoff = Vec::with_capacity(oh * ow);
        let mut runs = Vec::new();
        let mut eoff = Vec::with_capacity(oh * ow);
        let mut run_cw = Vec::new();
        let mut pairs = Vec::new();
        for (ra, rp) in rows.list.iter().enumerate() {
            for (ca, cp) in cols.list.iter().enumerate() {
                if rp.count == 0 || cp.count == 0 {
                    continue;
                }
                let q0 = qoff.len();
                for i in 0..rp.count {
                    for j in 0..cp.count {
                        eoff.push(((ra + i * rows.stride) * ow + ca + j * cols.stride) * BW);
                        qoff.push(i * rp.step * wq + j * cp.step);
                    }
                }
                runs.push((q0, qoff.len()));
                pairs.push((rp, cp));
                let taps = (g.k[0] * rp.taps.len() * cp.taps.len()).max(1);
                run_cw.push((L1_W_BYTES / (taps * BW * 4)).clamp(1, cb));
            }
        }
        let (mut sets, mut set_of) = (Vec::<TapSet>::new(), Vec::new());
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for od in 0..g.out[0] {
            let ok = |kd: usize| {
                let i = (od * g.s[0] + kd * g.d[0]) as isize - g.p[0];
                i >= 0 && (i as usize) < g.inp[0]
            };
            let lo = (0..g.k[0]).find(|&kd| ok(kd)).unwrap_or(g.k[0]);
            let hi = (lo..g.k[0]).take_while(|&kd| ok(kd)).last().map_or(lo, |kd| kd + 1);
            let at = match ranges.iter().position(|&r| r == (lo, hi)) {
                Some(at) => at * pairs.len(),
                None => {
                    for (rp, cp) in &pairs {
                        let mut set = TapSet { xoff: Vec::new(), woff: Vec::new(), slices: Vec::new() };
                        for kd in lo..hi {
                            set.slices.push(kd * g.d[0]);
                            for &(ki, ri) in &rp.taps {
                                for &(kj, cj) in &cp.taps {
                                    set.xoff.push(kd * g.d[0] * slice + ri * wq + cj);
                                    let t = (kd * g.k[1] + ki) * g.k[2] + kj;
                                    // Strided data: tap `(ki, kj)` of the convolution, whose
                                    // packed row is reversed, as its depth's.
                                    let t = if strided_data {
                                        kk - 1 - ((g.k[0] - 1 - kd) * g.k[1] + ki) * g.k[2] - kj
                                    } else {
                                        t
                                    };
                                    set.woff.push(t * BW);
                                }
                            }
                        }
                        sets.push(set);
                    }
                    ranges.push((lo, hi));
                    (ranges.len() - 1) * pairs.len()
                }
            };
            set_of.push(at);
        }
        // A task takes every block of its output depth (padding its input
        // once when the channels fit one level-2 block) unless the team needs
        // more tasks than (image, group, depth) give.
        let threads = team::num_threads();
        let parallel = threads > 1 && geo.macs() >= PAR_MIN_MACS;
        let want = if parallel { 2 * threads } else { 1 };
        let per = g.n * g.groups * g.out[0];
        let bpt = blocks.div_ceil(want.div_ceil(per).min(blocks));
        let mut tasks = Vec::new();
        for n in 0..g.n {
            for gi in 0..g.groups {
                for od in 0..g.out[0] {
                    for b0 in (0..blocks).step_by(bpt) {
                        tasks.push(Task { n, g: gi, od, b0, b1: (b0 + bpt).min(blocks) });
                    }
                }
            }
        }
        let parallel = parallel && tasks.len() > 1;
        let plen = g.groups * blocks * g.cin * kk * BW;
        let packed = popart_ir::size::try_zeroed_vec::<f32>(plen, "packed conv weights")
            .map_err(|_| spec.error("cannot allocate the convolution's packed weights"))?;
        // Padded channels, then the position-major sums (f32, in u64 words).
        let words = (cb * plane + oh * ow * BW).div_ceil(2);
        let slots = if parallel { threads.min(tasks.len()).max(1) } else { 1 };
        let scratch = scratch::slots(spec, slots, words)?;
        Ok(Some(Box::new(Lanes3d {
            g,
            pass,
            pos,
            hp,
            wq,
            slice,
            plane,
            blocks,
            cb,
            qoff,
            runs,
            run_cw,
            eoff,
            sets,
            set_of,
            tasks,
            parallel,
            packed: Mutex::new(packed),
            scratch,
        })))
    }

    /// Packs the weights `w` into `dst` (see the module doc), rows (group,
    /// block, [`PACK_CHANNELS`] channels) split over the team: each row reads
    /// its channels' weights of every output channel of the block (contiguous
    /// runs of the forward's `[C_out, C_in / group, taps]`) and writes one
    /// contiguous run of `dst`, through 8 × 8 transposes ([`pack_piece`]).
    ///
    /// # Safety
    /// `w` holds the layer's weights; `dst` `groups · blocks · cin · taps · BW` elements.
    unsafe fn pack(&self, w: *const f32, dst: SendPtr<f32>) {
        let g = &self.g;
        let kk = g.kk();
        let src = SendPtr(w as *mut f32);
        let chunks = g.cin.div_ceil(PACK_CHANNELS);
        let rows = g.groups * self.blocks * chunks;
        par_split(rows, PAR_MIN_ELEMS.div_ceil(PACK_CHANNELS * kk * BW), 1, move |range| {
            for row in range {
                let (gb, ck) = (row / chunks, row % chunks);
                let (gi, blk) = (gb / self.blocks, gb % self.blocks);
                let (o0, c0) = (blk * BW, ck * PACK_CHANNELS);
                let (valid, cn) = (BW.min(g.cout - o0), PACK_CHANNELS.min(g.cin - c0));
                // SAFETY: channels `c0..c0 + cn` of block `blk` of group `gi` of `dst`
                // (`cn · kk · BW` elements) are this piece's own; `w` is read only, at
                // weight `(o, c, tap)` of group `gi` for `o < cout`, `c < cin`.
                unsafe {
                    let d = dst.get().add(((gi * self.blocks + blk) * g.cin + c0) * kk * BW);
                    let base = src.get().add(gi * g.cin * g.cout * kk + c0 * g.wc + o0 * g.wr);
                    #[cfg(target_arch = "x86_64")]
                    pack_piece(g, base, d, valid, cn);
                    #[cfg(not(target_arch = "x86_64"))]
                    for j in 0..BW {
                        for ct in 0..cn * kk {
                            let (c, t) = (ct / kk, ct % kk);
                            let tap = if g.flip { kk - 1 - t } else { t };
                            *d.add(ct * BW + j) = if j < valid { *base.add(j * g.wr + c * g.wc + tap) } else { 0.0 };
                        }
                    }
                }
            }
        });
    }

    /// Copies the slices `set` reads of `cn` input channels of one image
    /// (`x`: the first's volume) for output depth `od` into `xp`, `plane`
    /// apart, zero-padded in height and width.
    ///
    /// # Safety
    /// `x` holds the channels' volumes, `xp` `cn · plane` elements.
    #[inline(always)]
    unsafe fn pad(&self, x: *const f32, cn: usize, od: usize, set: &TapSet, xp: *mut f32) {
        let g = &self.g;
        let [_, ih, iw] = g.inp;
        for c in 0..cn {
            for &s in &set.slices {
                let di = ((od * g.s[0] + s) as isize - g.p[0]) as usize;
                // SAFETY: input depth `di < id` (the set's taps are inside the input)
                // of channel `c < cn`; padded slice `s` of channel `c` in `xp`
                // (`s · slice + hp · wq <= plane`).
                unsafe {
                    pad_plane(
                        x.add(c * g.ivol() + di * ih * iw),
                        [ih, iw],
                        xp.add(c * self.plane + s * self.slice),
                        [self.hp, self.wq],
                        [g.p[1], g.p[2]],
                    )
                };
            }
        }
    }

    /// Runs task `t`: `x` the computed input, `pk` the packed weights, `y`
    /// the computed output.
    ///
    /// # Safety
    /// The CPU has AVX-512; the tensors are whole; `scratch` as planned.
    #[inline(always)]
    unsafe fn task(&self, t: Task, x: *const f32, pk: *const f32, y: *mut f32, scratch: *mut f32) {
        let g = &self.g;
        let (kk, ivol, ovol) = (g.kk(), g.ivol(), g.ovol());
        let [_, oh, ow] = g.out;
        let first = self.set_of[t.od];
        let slices = &self.sets[first];
        // SAFETY: image `t.n`, group `t.g` of the whole tensors; the scratch holds
        // `cb` padded channels of `plane` and then `oh · ow · BW` sums (as planned).
        let (xi, xp, sums) =
            unsafe { (x.add((t.n * g.groups + t.g) * g.cin * ivol), scratch, scratch.add(self.cb * self.plane)) };
        // With one level-2 block of channels, the first block's padding serves all.
        let once = self.cb == g.cin;
        for blk in t.b0..t.b1 {
            let o0 = blk * BW;
            let valid = BW.min(g.cout - o0);
            // SAFETY: output depth `t.od` of channels `o0..o0 + valid` of image `t.n`
            // (this task's alone).
            let yo = unsafe { y.add(((t.n * g.groups + t.g) * g.cout + o0) * ovol + t.od * oh * ow) };
            if slices.slices.is_empty() {
                // Every tap of this depth reads padding: zeros.
                for j in 0..valid {
                    // SAFETY: as above, channel `o0 + j`'s `oh · ow` outputs of the depth.
                    unsafe { std::ptr::write_bytes(yo.add(j * ovol), 0, oh * ow) };
                }
                continue;
            }
            let r = valid.div_ceil(LANES);
            // SAFETY: block `blk` of the group's packed weights.
            let wb = unsafe { pk.add((t.g * self.blocks + blk) * g.cin * kk * BW) };
            for c0 in (0..g.cin).step_by(self.cb) {
                let cn = self.cb.min(g.cin - c0);
                if !once || blk == t.b0 {
                    // SAFETY: channels `c0..c0 + cn <= cin` of the image into the
                    // scratch's `cb >= cn` padded channels (every run's set reads
                    // the same slices).
                    unsafe { self.pad(xi.add(c0 * ivol), cn, t.od, slices, xp) };
                }
                for (run, &(lo, hi)) in self.runs.iter().enumerate() {
                    let set = &self.sets[first + run];
                    let cw = self.run_cw[run];
                    for c1 in (c0..c0 + cn).step_by(cw) {
                        let cm = cw.min(c0 + cn - c1);
                        // Tiles of a run as even as `PMAX` allows (49 positions: 5 and 6, not 6 and 1).
                        let (n, tiles) = (hi - lo, (hi - lo).div_ceil(PMAX));
                        let mut q0 = lo;
                        for i in 0..tiles {
                            let p = n / tiles + usize::from(i < n % tiles);
                            #[cfg(target_arch = "x86_64")]
                            // SAFETY: channels `c1..c1 + cm` of the padded block and of the
                            // packed weights; output positions `q0..q0 + p` of the sums;
                            // every tap of the set stays inside the plane.
                            unsafe {
                                tile_dispatch(
                                    p,
                                    r,
                                    Tile {
                                        x: xp.add((c1 - c0) * self.plane),
                                        qoff: &self.qoff[q0..q0 + p],
                                        xoff: &set.xoff,
                                        woff: &set.woff,
                                        cin: cm,
                                        plane: self.plane,
                                        w: wb.add(c1 * kk * BW),
                                        wstride: kk * BW,
                                        e: sums,
                                        eoff: &self.eoff[q0..q0 + p],
                                        add: c1 > 0,
                                    },
                                )
                            };
                            #[cfg(not(target_arch = "x86_64"))]
                            let _ = (p, r, cm, wb, sums, set);
                            q0 += p;
                        }
                    }
                }
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `yo` as above; the sums of every position; AVX-512 (the plan's).
            unsafe {
                write_out(yo, sums, valid, oh * ow, ovol)
            };
        }
    }
}

impl Kernel for Lanes3d {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let out = self.pass.out_role();
        let ptr = |role: usize| {
            SendPtr(if role == out { args.outputs[0] as *mut f32 } else { args.inputs[self.pos[role]] as *mut f32 })
        };
        // The computed convolution's input and output (a data gradient's: `dy`, `dx`).
        let (x, w, y) = match self.pass {
            Pass::Data => (ptr(2), ptr(1), ptr(0)),
            _ => (ptr(0), ptr(1), ptr(2)),
        };
        let mut packed = self.packed.lock().unwrap_or_else(|e| e.into_inner());
        let pk = SendPtr(packed.as_mut_ptr());
        // SAFETY: `w` is the weight input (this function's contract); `packed` was
        // sized for this layer at build time and is locked for the call.
        unsafe { self.pack(w.get(), pk) };
        let next = AtomicUsize::new(0);
        let piece = |p: usize| {
            let mut buf = self.scratch[p].lock().unwrap_or_else(|e| e.into_inner());
            let s = SendPtr(buf.as_mut_ptr() as *mut f32);
            while let Some(&t) = self.tasks.get(next.fetch_add(1, Ordering::Relaxed)) {
                // SAFETY: tasks write disjoint outputs (output depth and channel
                // block of one image); the scratch is this piece's own; the plan
                // exists only on AVX-512 CPUs. The layout loops run the AVX2 build.
                Simd::Avx2.run(
                    #[inline(always)]
                    || unsafe { self.task(t, x.get(), pk.get(), y.get(), s.get()) },
                );
            }
        };
        if self.parallel && self.scratch.len() > 1 {
            team::run(self.scratch.len(), &piece);
        } else {
            piece(0);
        }
        Ok(())
    }
}

/// Copies the `ih × iw` plane at `src` into the `hp × wq` plane at `dst`:
/// padded row `r`, column `q` holds input `(r − ph, q − pw)`, zero outside
/// the input.
///
/// # Safety
/// `src` valid for `ih · iw` reads, `dst` for `hp · wq` writes.
#[inline(always)]
pub(super) unsafe fn pad_plane(
    src: *const f32,
    [ih, iw]: [usize; 2],
    dst: *mut f32,
    [hp, wq]: [usize; 2],
    [ph, pw]: [isize; 2],
) {
    // Padded column q reads input column q − pw: columns lo..hi are inside.
    let lo = pw.clamp(0, wq as isize) as usize;
    let hi = (iw as isize + pw).clamp(lo as isize, wq as isize) as usize;
    let ic0 = (lo as isize - pw) as usize;
    for r in 0..hp {
        // SAFETY: row `r < hp` of `dst` (`wq` values); input row `ir < ih`,
        // columns `ic0..ic0 + hi − lo <= iw` (this function's contract).
        unsafe {
            let drow = dst.add(r * wq);
            let ir = r as isize - ph;
            if ir < 0 || ir as usize >= ih || lo >= hi {
                std::ptr::write_bytes(drow, 0, wq);
                continue;
            }
            std::ptr::write_bytes(drow, 0, lo);
            copy_row(src.add(ir as usize * iw + ic0), drow.add(lo), hi - lo);
            std::ptr::write_bytes(drow.add(hi), 0, wq - hi);
        }
    }
}

/// Where one register tile works: `x` the padded input of its first
/// channel, `qoff` its positions' offsets there, `xoff`/`woff` the
/// taps' offsets, `cin` channels `plane` apart (their packed weights at `w`,
/// `wstride` apart), `e` the sums (`BW` per position, its positions' at
/// `eoff`); `add`: they hold partial sums.
#[derive(Clone, Copy)]
struct Tile<'a> {
    x: *const f32,
    qoff: &'a [usize],
    xoff: &'a [usize],
    woff: &'a [usize],
    cin: usize,
    plane: usize,
    w: *const f32,
    wstride: usize,
    e: *mut f32,
    eoff: &'a [usize],
    add: bool,
}

/// Runs the tile of `p ≤ PMAX` positions and `r ≤ RV` vectors of channels.
///
/// # Safety
/// The CPU has AVX-512F; the tile's reads and writes are valid.
#[cfg(target_arch = "x86_64")]
unsafe fn tile_dispatch(p: usize, r: usize, at: Tile<'_>) {
    macro_rules! rs {
        ($p:literal) => {
            match r {
                1 => tile::<$p, 1>(at),
                2 => tile::<$p, 2>(at),
                3 => tile::<$p, 3>(at),
                _ => tile::<$p, 4>(at),
            }
        };
    }
    // SAFETY: as this function's contract, `p ≤ PMAX`, `r ≤ RV`.
    unsafe {
        match p {
            1 => rs!(1),
            2 => rs!(2),
            3 => rs!(3),
            4 => rs!(4),
            5 => rs!(5),
            _ => rs!(6),
        }
    }
}

/// Writes the position-major sums (`npos` rows of `BW`) to `valid` output
/// channels at `yi`, `ovol` apart: blocks of 16 positions × 16 channels
/// transposed in registers.
///
/// # Safety
/// The CPU has AVX-512F; `yi` valid for those writes, `sums` for `npos · BW` reads.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn write_out(yi: *mut f32, sums: *const f32, valid: usize, npos: usize, ovol: usize) {
    use std::arch::x86_64::*;
    for q0 in (0..npos).step_by(LANES) {
        let qn = LANES.min(npos - q0);
        let mask: __mmask16 = if qn == LANES { !0 } else { (1 << qn) - 1 };
        for j0 in (0..valid).step_by(LANES) {
            let mut r = [_mm512_setzero_ps(); LANES];
            for (i, v) in r.iter_mut().enumerate().take(qn) {
                // SAFETY: row `q0 + i < npos` of the sums, channels `j0..j0 + 16 <= BW`.
                *v = unsafe { _mm512_loadu_ps(sums.add((q0 + i) * BW + j0)) };
            }
            let cols = transpose16(r);
            for (j, v) in cols.iter().enumerate().take(valid - j0) {
                // SAFETY: positions `q0..q0 + qn` of channel `j0 + j < valid`.
                unsafe { _mm512_mask_storeu_ps(yi.add((j0 + j) * ovol + q0), mask, *v) };
            }
        }
    }
}

/// The 16 × 16 transpose of `r` (row `i` of the result: lane `i` of every vector).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) fn transpose16(r: [std::arch::x86_64::__m512; 16]) -> [std::arch::x86_64::__m512; 16] {
    use std::arch::x86_64::*;
    let mut t = r;
    // Pairs of rows interleaved: 2 × 2 blocks.
    for k in 0..8 {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    // 4 × 4 blocks within each 128-bit lane.
    let mut u = t;
    for k in 0..4 {
        let b = 4 * k;
        u[b] = _mm512_shuffle_ps::<0x44>(t[b], t[b + 2]);
        u[b + 1] = _mm512_shuffle_ps::<0xEE>(t[b], t[b + 2]);
        u[b + 2] = _mm512_shuffle_ps::<0x44>(t[b + 1], t[b + 3]);
        u[b + 3] = _mm512_shuffle_ps::<0xEE>(t[b + 1], t[b + 3]);
    }
    // 128-bit lanes: rows 4 apart, then 8 apart.
    let mut v = u;
    for h in 0..2 {
        let b = 8 * h;
        for i in 0..4 {
            v[b + i] = _mm512_shuffle_f32x4::<0x88>(u[b + i], u[b + 4 + i]);
            v[b + 4 + i] = _mm512_shuffle_f32x4::<0xDD>(u[b + i], u[b + 4 + i]);
        }
    }
    let mut w = v;
    for i in 0..8 {
        w[i] = _mm512_shuffle_f32x4::<0x88>(v[i], v[8 + i]);
        w[8 + i] = _mm512_shuffle_f32x4::<0xDD>(v[i], v[8 + i]);
    }
    w
}

/// Packs one piece of weights: `valid` output channels (`s`'s rows, `wr`
/// apart; rows `valid..BW` are written as zeros) of `cn` channels (`wc`
/// apart) of every tap into `d[(c · taps + t) · BW + j]`, tap `t` read from
/// `taps − 1 − t` when `g.flip`. Blocks of 8 outputs × 8 taps are transposed
/// in registers, so reads and writes are runs of 8.
///
/// # Safety
/// `s` holds the piece's weights as above, `d` `cn · taps · BW` elements; the
/// CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_piece(g: &Geo3, s: *const f32, d: *mut f32, valid: usize, cn: usize) {
    use std::arch::x86_64::*;
    let kk = g.kk();
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for j0 in (0..BW).step_by(8) {
        let rows = valid.saturating_sub(j0).min(8);
        for c in 0..cn {
            for t0 in (0..kk).step_by(8) {
                let tn = (kk - t0).min(8);
                let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(tn as i32), lane);
                let mut r = [_mm256_setzero_ps(); 8];
                for (i, v) in r.iter_mut().enumerate().take(rows) {
                    // SAFETY: output row `j0 + i < valid`, channel `c < cn`, taps
                    // `t0..t0 + tn` of `s` (masked past `tn`: not read).
                    *v = unsafe { _mm256_maskload_ps(s.add((j0 + i) * g.wr + c * g.wc + t0), mask) };
                }
                // SAFETY: AVX (this function's contract).
                let cols = unsafe { transpose8(r) };
                for (i, v) in cols.iter().enumerate().take(tn) {
                    let t = if g.flip { kk - 1 - (t0 + i) } else { t0 + i };
                    // SAFETY: row `c · kk + t < cn · kk` of `d`, outputs `j0..j0 + 8 <= BW`.
                    unsafe { _mm256_storeu_ps(d.add((c * kk + t) * BW + j0), *v) };
                }
            }
        }
    }
}

/// One register tile: `P` positions × `R` vectors of 16 output channels,
/// summed over every channel and tap (see [`Tile`]).
///
/// # Safety
/// As [`tile_dispatch`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
#[allow(clippy::needless_range_loop)] // explicit indices keep the register tile visible
unsafe fn tile<const P: usize, const R: usize>(at: Tile<'_>) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); R]; P];
    let mut q = [0usize; P];
    q.copy_from_slice(&at.qoff[..P]);
    let mut e = [at.e; P];
    for p in 0..P {
        // SAFETY: position `p`'s sums (this function's contract).
        e[p] = unsafe { at.e.add(at.eoff[p]) };
    }
    if at.add {
        for p in 0..P {
            for r in 0..R {
                // SAFETY: position `p < P` of the sums, its vector `r < R` (this
                // function's contract).
                acc[p][r] = unsafe { _mm512_loadu_ps(e[p].add(r * LANES)) };
            }
        }
    }
    for c in 0..at.cin {
        // SAFETY: channel `c < cin` of the padded input and of the packed weights;
        // every tap's offset plus a position's stays in the channel's plane, every
        // weight offset plus `R · 16` in its packed row (this function's contract).
        unsafe {
            let xc = at.x.add(c * at.plane);
            let wc = at.w.add(c * at.wstride);
            for (&xo, &wo) in at.xoff.iter().zip(at.woff) {
                let mut wv = [_mm512_setzero_ps(); R];
                for r in 0..R {
                    wv[r] = _mm512_loadu_ps(wc.add(wo + r * LANES));
                }
                let xs = xc.add(xo);
                for p in 0..P {
                    let xb = _mm512_set1_ps(*xs.add(q[p]));
                    for r in 0..R {
                        acc[p][r] = _mm512_fmadd_ps(wv[r], xb, acc[p][r]);
                    }
                }
            }
        }
    }
    for p in 0..P {
        for r in 0..R {
            // SAFETY: as the loads above.
            unsafe { _mm512_storeu_ps(e[p].add(r * LANES), acc[p][r]) };
        }
    }
}

#[cfg(test)]
mod tests {
    use popart_ir::DataType;

    use super::super::super::par::Simd;

    use super::super::nd::tests::{case, check, check_routes, data, run_passes, Case};
    use super::super::Pass;
    use super::{computed, lift_2d, select, Phases, MIN_COUT};
    use crate::team;

    /// Whether this kernel takes the forward and the data pass of case `c`.
    fn taken(c: &Case) -> [bool; 2] {
        let geo = c.geometry();
        [Pass::Forward, Pass::Data].map(|p| select(&geo, p).is_some_and(|g| g.cout >= MIN_COUT))
    }

    #[test]
    fn lanes3d_matches_the_definition() {
        let mut cases: Vec<(Case, [bool; 2])> = Vec::new();
        // Output channels past one block (64 + a partial vector), odd sizes, padding.
        let mut c = case(2, 1, 5, 83, &[4, 7, 9], &[3, 3, 3]);
        c.p = vec![1; 6];
        cases.push((c, [true, false]));
        // The data gradient of that layer: 83 computed output channels.
        let mut c = case(1, 1, 83, 6, &[4, 7, 9], &[3, 3, 3]);
        c.p = vec![1; 6];
        cases.push((c, [false, true]));
        // Uneven padding, dilation, padding past the kernel's reach, groups
        // (negative padding in the data gradient).
        let mut c = case(1, 2, 40, 36, &[4, 6, 5], &[2, 3, 2]);
        (c.d, c.p) = (vec![2, 1, 2], vec![3, 0, 2, 1, 2, 0]);
        cases.push((c, [true, true]));
        // Strides (a stem's (1, 2, 2) and 3), rows of positions in uneven tiles.
        let mut c = case(2, 1, 3, 32, &[5, 17, 16], &[3, 7, 7]);
        (c.s, c.d, c.p) = (vec![1, 3, 2], vec![1, 1, 2], vec![1, 3, 3, 1, 3, 3]);
        cases.push((c, [true, false]));
        // Large enough for the team, input channels in several level-2 blocks
        // and level-1 sub-blocks.
        let mut c = case(1, 1, 40, 48, &[6, 30, 31], &[3, 3, 3]);
        c.p = vec![1; 6];
        cases.push((c, [true, true]));
        check_routes(&cases, taken, 70);
    }

    #[test]
    fn strided_and_small_pointwise_2d_forward_passes_run_as_depth_one_match_the_definition() {
        // (case, taken): stride 2 with padding; groups, a (2, 3) stride, a
        // dilation and uneven pads; batch 1 of 100 positions; batch 1 of 25
        // positions (the `dot` tiles'); the stem-like 3 input channels; and
        // pointwise passes.
        let mut cases: Vec<(Case, bool)> = Vec::new();
        let mut c = case(2, 1, 16, 40, &[9, 11], &[3, 3]);
        (c.s, c.p) = (vec![2, 2], vec![1; 4]);
        cases.push((c, true));
        let mut c = case(3, 2, 20, 33, &[8, 13], &[3, 2]);
        (c.s, c.d, c.p) = (vec![2, 3], vec![1, 2], vec![1, 0, 2, 1]);
        cases.push((c, true));
        let mut c = case(1, 1, 16, 32, &[20, 20], &[3, 3]);
        (c.s, c.p) = (vec![2, 2], vec![1; 4]);
        cases.push((c, true));
        let mut c = case(1, 1, 16, 32, &[9, 9], &[3, 3]);
        (c.s, c.p) = (vec![2, 2], vec![1; 4]);
        cases.push((c, false));
        let mut c = case(2, 1, 3, 32, &[15, 15], &[7, 7]);
        (c.s, c.p) = (vec![2, 2], vec![3; 4]);
        cases.push((c, false));
        // Pointwise: a batch of 7x7 planes, groups; one image; large planes.
        cases.push((case(3, 1, 24, 40, &[7, 7], &[1, 1]), true));
        cases.push((case(2, 2, 16, 36, &[5, 9], &[1, 1]), true));
        cases.push((case(1, 1, 24, 40, &[7, 7], &[1, 1]), false));
        cases.push((case(2, 1, 16, 32, &[16, 16], &[1, 1]), false));
        for (i, (c, want)) in cases.iter().enumerate() {
            if Simd::best() >= Simd::Avx512 {
                let geo = c.geometry();
                let taken = lift_2d(&geo, Pass::Forward)
                    .and_then(|g3| select(&g3, Pass::Forward))
                    .is_some_and(|g| g.cout >= MIN_COUT);
                assert_eq!(taken, *want, "case {i}");
                assert!(lift_2d(&geo, Pass::Weights).is_none());
            }
            check(c, DataType::Float32, 90 + i as u64);
        }
    }

    #[test]
    fn strided_data_gradients_in_phases_match_the_definition() {
        // (case, taken): ResNet's 3x3 stride 2 of odd and even sizes (phases of
        // unequal counts); a (2, 3) stride with a dilation, uneven pads and groups;
        // kernel 2 stride 3 (one phase no tap reaches: zeros, and input positions
        // past the last window); 1x3 kernel of row stride 2 (row phases of no
        // tap); and passes left to the other methods: batch 1, output planes of
        // 256 positions, stride 1.
        let mut cases: Vec<(Case, bool)> = Vec::new();
        let mut c = case(2, 1, 33, 16, &[15, 14], &[3, 3]);
        (c.s, c.p) = (vec![2, 2], vec![1; 4]);
        cases.push((c, true));
        let mut c = case(3, 2, 40, 17, &[13, 17], &[3, 2]);
        (c.s, c.d, c.p) = (vec![2, 3], vec![1, 2], vec![1, 0, 2, 1]);
        cases.push((c, true));
        let mut c = case(2, 1, 32, 20, &[11, 12], &[2, 2]);
        c.s = vec![3, 3];
        cases.push((c, true));
        let mut c = case(2, 1, 36, 16, &[9, 10], &[1, 3]);
        (c.s, c.p) = (vec![2, 1], vec![0, 1, 0, 1]);
        cases.push((c, true));
        let mut c = case(1, 1, 33, 16, &[15, 14], &[3, 3]);
        (c.s, c.p) = (vec![2, 2], vec![1; 4]);
        cases.push((c, false));
        let mut c = case(2, 1, 32, 16, &[32, 32], &[3, 3]);
        (c.s, c.p) = (vec![2, 2], vec![1; 4]);
        cases.push((c, false));
        let mut c = case(2, 1, 32, 16, &[7, 7], &[3, 3]);
        c.p = vec![1; 4];
        cases.push((c, false));
        for (i, (c, want)) in cases.iter().enumerate() {
            if Simd::best() >= Simd::Avx512 {
                let geo = c.geometry();
                let taken = lift_2d(&geo, Pass::Data).and_then(|g3| computed(&g3, Pass::Data, true)).is_some();
                assert_eq!(taken, *want, "case {i}");
            }
            check(c, DataType::Float32, 110 + i as u64);
        }
    }

    #[test]
    fn phases_split_each_output_by_the_taps_that_reach_it() {
        // 3x3, stride 2, pad 1, 7 outputs of `dy`, 14 inputs: even inputs read
        // tap 1 at `dy[i]`, odd ones taps 0 and 2 at `dy[i + 1]` and `dy[i]`,
        // the first read past `dy`'s end by the last odd input (padding 0,
        // extent 8).
        let p = Phases::new(14, 7, 3, 2, 1, 1);
        assert_eq!((p.stride, p.pad, p.extent), (2, 0, 8));
        assert_eq!(
            p.list.iter().map(|f| (f.count, f.taps.clone())).collect::<Vec<_>>(),
            [(7, vec![(1, 0)]), (7, vec![(0, 1), (2, 0)])]
        );
        // Kernel 2, stride 3, no padding, 11 inputs, 4 outputs: inputs 3i read
        // tap 0 and 3i + 1 tap 1, both at `dy[i]`; no tap reaches 3i + 2.
        let p = Phases::new(11, 4, 2, 3, 1, 0);
        assert_eq!((p.pad, p.extent), (0, 4));
        assert_eq!(
            p.list.iter().map(|f| (f.count, f.taps.clone())).collect::<Vec<_>>(),
            [(4, vec![(0, 0)]), (4, vec![(1, 0)]), (3, vec![])]
        );
        // Padding 2, kernel 2, stride 2, 5 inputs, 4 outputs: input 2i reads
        // tap 0 and input 2i + 1 tap 1, both at `dy[i + 1]` (`dy[0]`'s window
        // is all padding), so no padding before `dy`.
        let p = Phases::new(5, 4, 2, 2, 1, 2);
        assert_eq!((p.pad, p.extent), (0, 4));
        assert_eq!(
            p.list.iter().map(|f| (f.count, f.taps.clone())).collect::<Vec<_>>(),
            [(3, vec![(0, 1)]), (2, vec![(1, 1)])]
        );
    }

    #[test]
    fn lanes3d_does_not_depend_on_the_thread_count() {
        // One image of three output depths and 80 channels: tasks split the
        // channel blocks on the team (the weight gradient runs `direct3d`).
        let mut c = case(1, 1, 80, 80, &[3, 9, 10], &[3, 3, 3]);
        c.p = vec![1; 6];
        let d = data(&c, DataType::Float32, 11);
        let run = || run_passes(&c, &d);
        let one = team::with_max_threads(1, run);
        let all = run();
        assert_eq!(one, all);
    }
}
