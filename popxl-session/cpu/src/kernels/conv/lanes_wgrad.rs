//! The weight gradient of 2-d float32 convolutions on AVX-512 with
//! the *output channels in the vector lanes*, `lanes3d`'s layout read the
//! other way: `dw[o][c][t] = Σ_n Σ_q dy[n][o][q] · x[n][c][q·s + t·d − p]`
//! as register tiles of 6 (input channel, tap) pairs × up to 4 vectors of 16
//! output channels (`direct3d`'s weight-gradient tile), summed over the
//! output positions in registers (no im2col matrix, no packing of a GEMM's
//! operands).
//!
//! **Units.** The positions of each image are cut into chunks of at most
//! [`CHUNK`] (a chunk of `dy`, transposed position-major for one block of
//! [`BW`] output channels, stays in the level-2 cache); the (image, chunk)
//! units are summed into a number of partials fixed at build time (not by
//! the thread count), each a run of consecutive units, reduced in order at
//! the end. A task is one (partial, block of output channels): it pads the
//! input of each image it meets (every channel, zero rows and columns where
//! the taps read padding), transposes its chunks of `dy` through 16 × 16
//! register transposes and sweeps every pair tile over them, so every
//! weight gradient is one fixed sequence of operations whatever the thread
//! count. Where several blocks of output channels would each pad every
//! image of a large batch again and the padded batch is small enough
//! ([`PREPAD_ELEMS`]), the run pads the batch once, over the team, into a
//! slot the tasks share.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use popart_ir::ops::conv::ConvGeometry;

use super::super::par::Simd;
use super::super::ptr::SendPtr;
use super::super::scratch;
use super::super::spec::SpecExt;
use super::direct3d::{select, Geo3};
use super::direct3d::{wtile_dispatch, KRows};
use super::lanes3d::{depth_one, pad_plane};
use super::Pass;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use crate::team;

/// f32 lanes of one AVX-512 vector.
const LANES: usize = 16;
/// Output channels per block (4 vectors).
const BW: usize = 4 * LANES;
/// (input channel, tap) pairs of a full tile.
const PAIRS: usize = 6;

/// Most output positions of one unit.
const CHUNK: usize = 1024;
/// Most partial sums of a layer: the (partial, block) tasks number at least
/// `MIN_TASKS` where the units allow it.
const MAX_PARTS: usize = 4;
const MIN_TASKS: usize = 4;
/// Output positions per image below which the tiles' sums are loaded and
/// stored too often for too few multiply-adds (im2col + GEMM keeps those),
/// unless the batch has [`MIN_IMAGES`] images and the plan pads it once.
const MIN_POSITIONS: usize = 64;
/// Least images of a strided layer under [`MIN_POSITIONS`] positions (7x7
/// outputs), whose batch is padded once per run ([`PREPAD_ELEMS`]). Measured
/// on 3x3 stride 2, 256 to 512 channels on 14x14: 1.14-1.2x im2col + GEMM
/// at batch 32 on one thread (CPU time) and level to 1.07x on two (wall
/// time, noisy); level at batch 16, 0.7-0.97x at 8 and 0.6x at 1 (the
/// run's fixed costs, zeroing and writing out every gradient, on fewer
/// multiply-adds).
const MIN_IMAGES: usize = 32;
/// The same for stride 1, whose 3x3 layers of 14x14 planes and more than
/// 128 channels Winograd runs faster.
const MIN_POSITIONS_S1: usize = 256;
/// Multiply-adds below which the layer runs on the calling thread only.
const PAR_MIN_MACS: usize = 1 << 18;
/// Most padded input values (f32, the whole batch) padded once per run into
/// a slot the tasks share, when several blocks of output channels would
/// each pad every image again (beyond, each task pads its own images).
const PREPAD_ELEMS: usize = 4 << 20;

/// One (image, positions `q0..q1`) unit.
#[derive(Clone, Copy, Debug)]
struct Unit {
    n: usize,
    q0: usize,
    q1: usize,
}

pub(super) struct LanesWgrad {
    g: Geo3,
    /// Positions of `x` and `dy` in the kernel args.
    xpos: usize,
    ypos: usize,
    /// Padded rows × columns of one input channel (plus a vector of slack).
    hp: usize,
    wq: usize,
    plane: usize,
    blocks: usize,
    /// Each output position's offset in a padded channel, and each pair's.
    qoff: Vec<usize>,
    poff: Vec<usize>,
    units: Vec<Unit>,
    /// Units of each partial: `parts[k]..parts[k + 1]`.
    parts: Vec<usize>,
    parallel: bool,
    /// The whole batch's padded input (`[n][group][cin][plane]`), padded once
    /// per run over the team and read by every task; `None`: each task pads
    /// the images it meets into its own scratch.
    prepadded: Option<scratch::Slot>,
    /// The partials past the first (`[group][block][pair][BW]` each).
    partials: Mutex<Vec<f32>>,
    scratch: Vec<scratch::Slot>,
}

/// Whether the weight gradient of `geo` runs here: float32 (checked by the
/// caller) on AVX-512, 2-d, more than one tap, at least 32 output channels
/// per group and [`MIN_POSITIONS`] output positions per image when strided,
/// [`MIN_POSITIONS_S1`] otherwise. Measured, 2 threads: 1.15-1.25x im2col +
/// GEMM on the batch-1 stem and 3x3 stride-2 layer of 56x56 inputs,
/// 1.15-1.5x at batch 32; 1.3-1.5x Winograd or im2col on the 3x3 stride-1
/// layers of 56x56 and 28x28 planes at batch 1, 1.4x and 1.04x at batch 32;
/// 0.6x on the stride-2 layer of 7x7 outputs at batch 1 and level at 32
/// when every block padded its images (with the batch padded once, up to
/// 1.2x at batch 32: batches of [`MIN_IMAGES`] run here), 0.94x Winograd on
/// 14x14 planes at batch 32 (those stay).
pub(super) fn takes(geo: &ConvGeometry) -> Option<Geo3> {
    let strided = geo.strides.iter().any(|&s| s > 1);
    let taps: usize = geo.kernel.iter().product();
    let positions: usize = geo.out_size.iter().product();
    if geo.kernel.len() != 2 || taps < 2 {
        return None;
    }
    let g = select(&depth_one(geo), Pass::Weights).filter(|g| g.cout >= 32)?;
    let enough = if strided { positions >= MIN_POSITIONS || prepads(&g) } else { positions >= MIN_POSITIONS_S1 };
    enough.then_some(g)
}

/// Padded rows and columns of one input channel as the tiles read it, and
/// its plane (a multiple of [`LANES`], a vector of slack).
fn padded(g: &Geo3) -> (usize, usize, usize) {
    let [_, oh, ow] = g.out;
    let hp = (oh - 1) * g.s[1] + (g.k[1] - 1) * g.d[1] + 1;
    let wq = (ow - 1) * g.s[2] + (g.k[2] - 1) * g.d[2] + 1;
    (hp, wq, (hp * wq).next_multiple_of(LANES))
}

/// Whether the plan pads the whole batch once per run into a shared slot:
/// several blocks of output channels (each task would pad every image it
/// meets again), a batch of [`MIN_IMAGES`] images (with one image, its
/// padding runs on one thread while the others wait: 0.55-0.9x on the
/// batch-1 3x3 stride-2 layer of 56x56 inputs, two threads) and at most
/// [`PREPAD_ELEMS`] padded values.
fn prepads(g: &Geo3) -> bool {
    let plane = padded(g).2;
    let all = g.n.checked_mul(g.groups).and_then(|v| v.checked_mul(g.cin)).and_then(|v| v.checked_mul(plane));
    g.groups * g.cout.div_ceil(BW) > 1 && g.n >= MIN_IMAGES && all.is_some_and(|all| all <= PREPAD_ELEMS)
}

impl LanesWgrad {
    /// The plan of pass `pass` of the 2-d geometry `geo`, when it is a weight
    /// gradient this kernel takes ([`takes`]); `None` otherwise.
    pub(super) fn plan_2d(
        spec: &KernelSpec<'_>,
        geo: &ConvGeometry,
        pass: Pass,
        pos: [usize; 3],
    ) -> Result<Option<Box<dyn Kernel>>, KernelError> {
        if pass != Pass::Weights {
            return Ok(None);
        }
        let Some(g) = takes(geo) else { return Ok(None) };
        let [_, oh, ow] = g.out;
        let (hp, wq, plane) = padded(&g);
        let kk = g.kk();
        let blocks = g.cout.div_ceil(BW);
        let qoff = (0..oh * ow).map(|q| (q / ow) * g.s[1] * wq + (q % ow) * g.s[2]).collect();
        let poff = (0..g.cin * kk)
            .map(|ct| {
                let (c, t) = (ct / kk, ct % kk);
                c * plane + (t / g.k[2]) * g.d[1] * wq + (t % g.k[2]) * g.d[2]
            })
            .collect();
        let npos = oh * ow;
        let per = npos.div_ceil(CHUNK);
        let mut units = Vec::new();
        for n in 0..g.n {
            for i in 0..per {
                units.push(Unit { n, q0: i * npos / per, q1: (i + 1) * npos / per });
            }
        }
        let nparts = MIN_TASKS.div_ceil(g.groups * blocks).clamp(1, MAX_PARTS).min(units.len());
        let parts: Vec<usize> = (0..=nparts).map(|k| k * units.len() / nparts).collect();
        let threads = team::num_threads();
        let parallel = threads > 1 && geo.macs() >= PAR_MIN_MACS && nparts * g.groups * blocks > 1;
        let wlen = g.groups * blocks * g.cin * kk * BW;
        let partials = popart_ir::size::try_zeroed_vec::<f32>(nparts * wlen, "conv weight-gradient partials")
            .map_err(|_| spec.error("cannot allocate the convolution's weight-gradient partials"))?;
        let prepadded =
            if prepads(&g) { Some(scratch::shared(spec, (g.n * g.groups * g.cin * plane).div_ceil(2))?) } else { None };
        let own = if prepadded.is_some() { 0 } else { g.cin * plane };
        let words = (own + CHUNK * BW).div_ceil(2);
        let slots = if parallel { threads.min(nparts * g.groups * blocks) } else { 1 };
        let scratch = scratch::slots(spec, slots, words)?;
        Ok(Some(Box::new(LanesWgrad {
            g,
            xpos: pos[0],
            ypos: pos[2],
            hp,
            wq,
            plane,
            blocks,
            qoff,
            poff,
            units,
            parts,
            parallel,
            prepadded,
            partials: Mutex::new(partials),
            scratch,
        })))
    }

    /// Pads every input channel of image `n`, group `gi` into `xp`.
    ///
    /// # Safety
    /// `x` holds the input; `xp` `cin · plane` elements.
    #[inline(always)]
    unsafe fn pad(&self, x: *const f32, n: usize, gi: usize, xp: *mut f32) {
        let g = &self.g;
        let [_, ih, iw] = g.inp;
        for c in 0..g.cin {
            // SAFETY: channel `c` of image `n`, group `gi` of the input; its padded
            // plane in `xp`.
            unsafe {
                pad_plane(
                    x.add(((n * g.groups + gi) * g.cin + c) * ih * iw),
                    [ih, iw],
                    xp.add(c * self.plane),
                    [self.hp, self.wq],
                    [g.p[1], g.p[2]],
                )
            };
        }
    }

    /// Runs task `t` (partial `t / (groups · blocks)`, then group and block)
    /// into `acc` (`[pair][BW]`), reading the padded input from `xall` when
    /// the plan pads it once per run.
    ///
    /// # Safety
    /// AVX-512; the tensors whole; `scratch` as planned; `acc` this task's;
    /// `xall` the padded batch when the plan has [`Self::prepadded`].
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn task(&self, t: usize, x: *const f32, xall: *const f32, dy: *const f32, acc: *mut f32, s: *mut f32) {
        let g = &self.g;
        let (part, gb) = (t / (g.groups * self.blocks), t % (g.groups * self.blocks));
        let (gi, blk) = (gb / self.blocks, gb % self.blocks);
        let npos = g.out[1] * g.out[2];
        let o0 = blk * BW;
        let valid = BW.min(g.cout - o0);
        let r = valid.div_ceil(LANES);
        let pairs = self.poff.len();
        let own = if self.prepadded.is_some() { 0 } else { g.cin * self.plane };
        // SAFETY: the scratch holds `cin · plane` padded values (unless
        // prepadded), then `CHUNK · BW`.
        let (mut xp, dyt) = (s, unsafe { s.add(own) });
        // SAFETY: the task's `pairs · BW` sums, added to by every unit.
        unsafe { std::ptr::write_bytes(acc, 0, pairs * BW) };
        let mut padded = usize::MAX;
        for u in &self.units[self.parts[part]..self.parts[part + 1]] {
            if self.prepadded.is_some() {
                // SAFETY: image `u.n`, group `gi` of the padded batch.
                xp = unsafe { xall.add((u.n * g.groups + gi) * g.cin * self.plane) } as *mut f32;
            } else if u.n != padded {
                // SAFETY: as this function's contract.
                unsafe { self.pad(x, u.n, gi, xp) };
                padded = u.n;
            }
            let len = u.q1 - u.q0;
            // SAFETY: channels `o0..o0 + valid` of image `u.n`, group `gi` of `dy`,
            // positions `q0..q1`; `len ≤ CHUNK` rows of `dyt`.
            unsafe { transpose_in(dy.add(((u.n * g.groups + gi) * g.cout + o0) * npos + u.q0), npos, valid, len, dyt) };
            for p0 in (0..pairs).step_by(PAIRS) {
                let p = PAIRS.min(pairs - p0);
                let rows = KRows { xp, offs: &self.poff[p0..p0 + p], pos: self.qoff[u.q0..].as_ptr(), np: len };
                // SAFETY: pairs `p0..p0 + p` of `acc`; every pair's read at each of
                // the unit's positions lies inside the padded input; `len` rows of `dyt`.
                unsafe { wtile_dispatch(p, r, rows, (dyt, BW), (acc.add(p0 * BW), BW)) };
            }
        }
    }
}

impl Kernel for LanesWgrad {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let g = &self.g;
        let (x, dy, dw) = (
            SendPtr(args.inputs[self.xpos] as *mut f32),
            SendPtr(args.inputs[self.ypos] as *mut f32),
            SendPtr(args.outputs[0] as *mut f32),
        );
        let nparts = self.parts.len() - 1;
        let pairs = self.poff.len();
        let wlen = g.groups * self.blocks * pairs * BW;
        let mut partials = self.partials.lock().unwrap_or_else(|e| e.into_inner());
        let pp = SendPtr(partials.as_mut_ptr());
        let ntasks = nparts * g.groups * self.blocks;
        // The padded batch first, (image, group) planes claimed in turn.
        let mut all = self.prepadded.as_ref().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()));
        let xall = SendPtr(all.as_mut().map_or(std::ptr::null_mut(), |v| v.as_mut_ptr() as *mut f32));
        if all.is_some() {
            let images = g.n * g.groups;
            let next = AtomicUsize::new(0);
            let pad = |_: usize| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= images {
                    break;
                }
                // SAFETY: image `i / groups`, group `i % groups` of the input, and
                // its planes in the shared slot (sized for the batch when
                // planned), padded by this piece alone.
                Simd::Avx2.run(
                    #[inline(always)]
                    || unsafe { self.pad(x.get(), i / g.groups, i % g.groups, xall.get().add(i * g.cin * self.plane)) },
                );
            };
            if self.parallel && self.scratch.len() > 1 {
                team::run(self.scratch.len().min(images), &pad);
            } else {
                pad(0);
            }
        }
        let next = AtomicUsize::new(0);
        let piece = |p: usize| {
            let mut buf = self.scratch[p].lock().unwrap_or_else(|e| e.into_inner());
            let s = SendPtr(buf.as_mut_ptr() as *mut f32);
            loop {
                let t = next.fetch_add(1, Ordering::Relaxed);
                if t >= ntasks {
                    break;
                }
                let (part, gb) = (t / (g.groups * self.blocks), t % (g.groups * self.blocks));
                // SAFETY: partial `part`'s block `gb` is this task's alone.
                let acc = unsafe { pp.get().add(part * wlen + gb * pairs * BW) };
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the plan exists only on AVX-512 CPUs; the tensors are whole.
                Simd::Avx2.run(
                    #[inline(always)]
                    || unsafe { self.task(t, x.get(), xall.get(), dy.get(), acc, s.get()) },
                );
                #[cfg(not(target_arch = "x86_64"))]
                let _ = (acc, s, xall);
            }
        };
        if self.parallel && self.scratch.len() > 1 {
            team::run(self.scratch.len(), &piece);
        } else {
            piece(0);
        }
        // The partials summed in order, written transposed into `dw`.
        for k in 1..nparts {
            for i in 0..wlen {
                // SAFETY: partials `0` and `k` hold `wlen` values each.
                unsafe { *pp.get().add(i) += *pp.get().add(k * wlen + i) };
            }
        }
        for gb in 0..g.groups * self.blocks {
            let (gi, blk) = (gb / self.blocks, gb % self.blocks);
            let o0 = blk * BW;
            let valid = BW.min(g.cout - o0);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: rows `o0..o0 + valid` of group `gi` of `dw` (`pairs` values
            // each); the block's `pairs` rows of sums; AVX-512 (the plan's).
            unsafe {
                super::lanes3d::write_out(
                    dw.get().add((gi * g.cout + o0) * pairs),
                    pp.get().add(gb * pairs * BW),
                    valid,
                    pairs,
                    pairs,
                )
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (gi, valid, dw);
        }
        Ok(())
    }
}

/// Transposes `valid` channels (`stride` apart) of `len` positions at `src`
/// into `dst[q][BW]`, channels past `valid` zero.
///
/// # Safety
/// AVX-512F; the reads and `len · BW` writes valid.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_in(src: *const f32, stride: usize, valid: usize, len: usize, dst: *mut f32) {
    use std::arch::x86_64::*;
    for q0 in (0..len).step_by(LANES) {
        let qn = LANES.min(len - q0);
        let mask: __mmask16 = if qn == LANES { !0 } else { (1 << qn) - 1 };
        for j0 in (0..BW).step_by(LANES) {
            let mut rows = [_mm512_setzero_ps(); LANES];
            for (j, v) in rows.iter_mut().enumerate().take(valid.saturating_sub(j0)) {
                // SAFETY: channel `j0 + j < valid`, positions `q0..q0 + qn` of `src`.
                *v = unsafe { _mm512_maskz_loadu_ps(mask, src.add((j0 + j) * stride + q0)) };
            }
            let cols = super::lanes3d::transpose16(rows);
            for (q, v) in cols.iter().enumerate().take(qn) {
                // SAFETY: row `q0 + q < len` of `dst`, channels `j0..j0 + 16 <= BW`.
                unsafe { _mm512_storeu_ps(dst.add((q0 + q) * BW + j0), *v) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use popart_ir::DataType;

    use super::super::nd::tests::{case, check_routes, data, run_passes, Case};
    use super::takes;
    use crate::team;

    /// Whether case `c`'s weight gradient runs here.
    fn taken(c: &Case) -> bool {
        takes(&c.geometry()).is_some()
    }

    /// A plane of 70x75 outputs (6 units of positions, partials past the
    /// first), 32 output channels.
    fn large() -> Case {
        let mut c = case(1, 1, 4, 32, &[140, 150], &[3, 3]);
        (c.s, c.p) = (vec![2, 2], vec![1; 4]);
        c
    }

    /// 7x7 outputs (3x3 stride 2 on 14x14) of `n` images, `co_g` output channels.
    fn small_planes(n: usize, groups: usize, co_g: usize) -> Case {
        let mut c = case(n, groups, 16, co_g, &[14, 14], &[3, 3]);
        (c.s, c.p) = (vec![2, 2], vec![1; 4]);
        c
    }

    #[test]
    fn weight_gradients_with_channels_in_lanes_match_the_definition() {
        // (case, taken): a stem (7x7 stride 2, 3 input channels, 40 output
        // channels: a partial block of 2.5 vectors); groups with a (2, 1)
        // stride, a dilation, uneven pads and two blocks of output channels;
        // large planes; stride 1 on 18x18 planes; 7x7 outputs of 32 images
        // with two blocks (one group; two groups), the batch padded once; and
        // the shapes left to the other methods: 7x7 outputs of 2 and 16
        // images, and of 32 images in one block, stride 1 on 12x12, fewer than 32 output
        // channels.
        let mut cases: Vec<(Case, bool)> = Vec::new();
        let mut c = case(2, 1, 3, 40, &[21, 20], &[7, 7]);
        (c.s, c.p) = (vec![2, 2], vec![3; 4]);
        cases.push((c, true));
        let mut c = case(2, 2, 5, 70, &[17, 10], &[3, 2]);
        (c.s, c.d, c.p) = (vec![2, 1], vec![1, 2], vec![1, 0, 2, 1]);
        cases.push((c, true));
        cases.push((large(), true));
        let mut c = case(1, 1, 8, 33, &[18, 18], &[3, 3]);
        c.p = vec![1; 4];
        cases.push((c, true));
        cases.push((small_planes(32, 1, 80), true));
        let mut c = case(32, 2, 8, 40, &[13, 13], &[3, 3]);
        (c.s, c.p) = (vec![2, 2], vec![1; 4]);
        cases.push((c, true));
        let mut c = case(2, 1, 16, 32, &[14, 14], &[3, 3]);
        (c.s, c.p) = (vec![2, 2], vec![1; 4]);
        cases.push((c, false));
        cases.push((small_planes(16, 1, 80), false));
        cases.push((small_planes(32, 1, 32), false));
        let mut c = case(1, 1, 8, 32, &[12, 12], &[3, 3]);
        c.p = vec![1; 4];
        cases.push((c, false));
        let mut c = case(1, 1, 8, 16, &[20, 20], &[3, 3]);
        (c.s, c.p) = (vec![2, 2], vec![1; 4]);
        cases.push((c, false));
        check_routes(&cases, taken, 130);
    }

    #[test]
    fn weight_gradients_with_channels_in_lanes_do_not_depend_on_the_thread_count() {
        // One image's partials; and a batch padded once, over the team.
        for c in [large(), small_planes(32, 1, 80)] {
            if !taken(&c) {
                // Not AVX-512: im2col runs it, summing one image's columns in chunks
                // cut for the team it was built with.
                return;
            }
            let d = data(&c, DataType::Float32, 12);
            let run = || run_passes(&c, &d);
            let one = team::with_max_threads(1, run);
            assert_eq!(one, run());
        }
    }
}
