//! Convolutions: `Conv`, `ConvDataGrad`, `ConvWeightsGrad` and `ConvTranspose`
//! (the data gradient of the convolution it inverts), float32 and float64,
//! any number of spatial dims: 1-D and 2-D here (2-D forward passes of at
//! least 16 input channels, strided or pointwise on batches of small planes,
//! and strided data gradients of batches of small planes, float32 on
//! AVX-512, as 3-D ones of depth 1 through `lanes3d`), 3-D
//! float32 on AVX-512
//! through `direct3d` where its tiles fit, others through `nd` (as
//! 2-D convolutions over the last two dims), pointwise ones of any rank as
//! 1-D.
//!
//! The builder resolves the op to a [`ConvGeometry`] (the only place the
//! attributes are read: [`geometry`]) and picks, by shape, once, a [`Plan`]:
//! one variant per method, owning the state that method needs:
//! - **Winograd** (`winograd`, float32) first, where it takes the
//!   shape: 3x3 stride-1 passes (all three) of one group with
//!   at least 128 channels on both sides (64 for a weight gradient, whose
//!   alternative is im2col) and 256 tiles of 2×2 in the batch: forward
//!   passes and data gradients by F(4×4, 3×3), 36 GEMMs over the channels
//!   (4x fewer multiply-adds), weight gradients by F(2×2, 3×3), 16 GEMMs
//!   (2.25x fewer);
//! - **pointwise** (1x1, stride 1, unpadded): the input planes already are the
//!   im2col matrix, so each product is one GEMM on the tensors, no copy;
//! - **direct** (depthwise-like: one input channel and at most 4 output
//!   channels per group): plane loops; stride 1 goes through a zero-padded
//!   plane so each tap is one long multiply-add over the whole plane;
//! - **im2col + GEMM** (`im2col`) otherwise: blocks of the im2col matrix are written to
//!   scratch sized here and multiplied by the `gemm` crate; a forward pass
//!   whose tasks split one image's output channels builds that image's matrix
//!   once, in parallel, and shares it (with fewer than 64 positions, float32
//!   on AVX-512: positions-major, multiplied by the dot-product tiles of
//!   `dot`, as the `gemm` crate's 64-position tiles would run partly empty);
//! - **batched im2col** for planes under 256 positions: several images side
//!   by side in one GEMM (`batched`); the stride-1 data gradient of such planes runs as
//!   the forward convolution of `dy` with flipped, transposed weights
//!   (`data_forward`);
//! - **masked** (`depthwise`, float32): stride-1 depthwise passes whose
//!   output rows are as wide as the input's, swept in place with masked
//!   loads (no padded copies): all three passes on AVX-512, forward passes
//!   and data gradients of planes up to 256 positions on AVX2 + FMA;
//! - **blocked** (`direct2d`, float32): on AVX-512 the stride-1 forward
//!   pass and data gradient of every shape with more than one tap and
//!   enough channels (not the data gradient of one image of fewer than 64
//!   positions: im2col's), and on AVX-512 or AVX2 + FMA (`direct2d_avx2`) all
//!   three passes of stride-1 depthwise convolutions, by a register-blocked
//!   direct kernel over zero-padded planes (small planes several images side
//!   by side);
//! - **implicit** (`implicit`, float32, CPUs whose widest tier is AVX2 +
//!   FMA): forward passes of row stride 1 or 2 and stride-1 data gradients
//!   with at least 16 output channels, as a packed GEMM whose packing of the
//!   positions is the im2col (no column matrix, no flipped weight copy), and
//!   the weight gradients of those shapes (`implicit_wgrad`: both
//!   operands packed transposed, the sum over positions in chunks).
//!
//! Pointwise passes of any rank, float32 on Intel's AVX-512 CPUs, run
//! before all of these (the weight gradient of every batch, the forward
//! pass and data gradient of batches of planes under 256 positions) as one
//! packed GEMM per group with the images folded into the positions axis
//! (`folded`: the packing gathers the images, the tiles store into them; no
//! column matrix).
//!
//! Weight gradients of 2-D float32 layers with more than one tap, at least
//! 64 output positions per image (256 unstrided; strided ones of fewer in
//! batches of 32 images, padded once per run) and 32 output channels per
//! group run first (before Winograd), on AVX-512,
//! with the output channels in the vector lanes (`lanes_wgrad`: register
//! tiles of 6 (input channel, tap) pairs × 64 output channels summed over
//! chunks of positions of a transposed `dy`, no column matrix).
//!
//! Weight gradients by im2col build the matrix of large planes in column
//! blocks that stay in cache; one large image (a stem) is summed in column
//! chunks over the team.
//!
//! Work is cut into tasks (images × groups × column or channel blocks) sized
//! for the cache and the worker team at build time. The forward pass and the
//! data gradient write disjoint outputs per task; the weight gradient sums over
//! the batch in a fixed number of chunks (fixed at build time) reduced in a
//! fixed order, so results do not depend on thread timing.
//!
//! Files: this one (geometry, passes, plans, tasks, the picker and the run),
//! `layout` (the 2-D geometry, im2col / col2im, the direct plane loops),
//! `im2col` (+ `dot`), `batched`, `data_forward`, `depthwise`, `direct2d` (+ `direct2d_avx2`),
//! `folded`, `lanes3d`, `lanes_wgrad`,
//! `implicit` (+ `implicit_wgrad`, its register tile in `gemm`),
//! `winograd`, `direct3d`, `nd`, and `tests` (shared test helpers).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use popart_ir::ops::all as ir;
use popart_ir::ops::conv::{conv_geometry, conv_transpose_geometry, ConvAttrs, ConvGeometry, ConvTransposeAttrs};
use popart_ir::DataType;

mod batched;
mod data_forward;
mod depthwise;
mod direct2d;
mod direct2d_avx2;
mod direct3d;
mod dot;
mod folded;
mod im2col;
mod implicit;
mod implicit_wgrad;
/// The AVX 8 × 8 register transpose, also the attention's.
#[cfg(target_arch = "x86_64")]
pub(crate) use implicit_wgrad::transpose8;
mod lanes3d;
mod lanes_wgrad;
mod layout;
mod nd;
#[cfg(test)]
mod tests;
mod winograd;

pub(super) use layout::{split_geometry, Geo2, Outer};

use super::dispatch::with_float;
use super::par::Simd;
use super::ptr::{slice_mut, SendPtr};
use super::scratch;
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use crate::team;
use depthwise::Masked;
use direct2d::Blocked;
use direct3d::Direct3d;
use folded::Folded;
use implicit::Implicit;
use lanes3d::Lanes3d;
use lanes_wgrad::LanesWgrad;
use layout::{ConvElem, Padded};
use nd::NdKernel;
use winograd::Winograd;

/// Registered kernels.
pub(crate) const KERNELS: &[KernelEntry] =
    &[(&ir::Conv, build), (&ir::ConvDataGrad, build), (&ir::ConvWeightsGrad, build), (&ir::ConvTranspose, build)];

/// Multiply-adds below which a convolution runs on the calling thread only.
const PAR_MIN_MACS: usize = 1 << 18;
/// Elements of one im2col block (4 MiB of f32): large blocks make few, large
/// GEMM calls, which the `gemm` crate runs closest to peak.
const BLOCK_ELEMS: usize = 1 << 20;
/// Elements of one im2col block of a weight gradient: a level-2-cache-sized
/// slice of columns, multiplied while it is still in cache.
const WGRAD_COL_ELEMS: usize = 1 << 18;
/// Output planes from which weight-gradient im2col blocks are cut in columns
/// (on smaller planes the shorter products cost more than the cache saves).
const WGRAD_MIN_OP: usize = 2048;
/// Narrowest column block a forward task is cut to before it splits output channels.
const MIN_COLS: usize = 256;

/// What a kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    /// `y` from `x` and `w`.
    Forward,
    /// `x` from `y` and `w` (data gradient, transposed convolution).
    Data,
    /// `w` from `x` and `y`.
    Weights,
}

impl Pass {
    /// The role (0: `x`, 1: `w`, 2: `y`) of the pass's result.
    fn out_role(self) -> usize {
        match self {
            Pass::Forward => 2,
            Pass::Data => 0,
            Pass::Weights => 1,
        }
    }
}

/// How a 2-D kernel forms its products: one variant per method, each
/// holding the state its tasks need (picked once, by shape, at build time).
enum Plan {
    /// 1x1, stride 1, unpadded: the input planes already are the im2col
    /// matrix, each product one GEMM on the tensors.
    Pointwise,
    /// Plane loops (one input channel and at most 4 output channels per
    /// group), through the zero-padded plane of stride 1 when there is one.
    Direct(Option<Padded>),
    /// Blocks of the im2col matrix in scratch, multiplied by the `gemm` crate.
    Im2col(Im2colSplit),
    /// im2col over `images` images side by side: one GEMM for several small
    /// planes (late layers, where one plane has too few columns for a fast GEMM).
    Batched { images: usize },
    /// The register-blocked stride-1 kernel of `direct2d` (f32; AVX-512, or
    /// AVX2 for depthwise).
    Blocked(Blocked),
    /// Masked sweeps of depthwise planes of equal input and output widths
    /// (`depthwise`, f32 on AVX-512, or AVX2 + FMA for small planes).
    Masked(Masked),
    /// The packed implicit GEMM of `implicit` (f32 on AVX2 + FMA).
    Implicit(Implicit),
    /// Winograd (`winograd`, f32): F(4×4, 3×3) or F(2×2, 3×3), 36 or 16
    /// GEMMs over the channels.
    Winograd(Winograd),
}

/// How the im2col method's work is shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Im2colSplit {
    /// Each task builds the blocks of its own columns or channels.
    Tasks,
    /// Forward tasks split one image's output channels: its matrix is
    /// built once, by all threads, then shared by the tasks' GEMMs.
    SharedCol,
    /// [`Im2colSplit::SharedCol`] for few positions (float32, AVX-512): the
    /// matrix is built positions-major and the tasks multiply it by
    /// dot-product tiles (`dot`).
    SharedColT,
    /// The weight gradient of one large image (a stem): the chunks are of
    /// its columns (output positions), not of the batch.
    ColumnChunks,
}

/// One unit of work: image `n` (or the batch chunk `n` for weight gradients),
/// group `g` (output channel for direct weight gradients), a block `lo..hi` of
/// output columns (forward) or of input channels within the group
/// (gradients), and a block `o0..o1` of output channels within the group.
#[derive(Clone, Copy, Debug)]
struct Task {
    n: usize,
    g: usize,
    lo: usize,
    hi: usize,
    o0: usize,
    o1: usize,
}

/// A plan's work: its tasks, the chunks of a weight gradient (chunk `c`
/// covers images, or columns, `chunks[c]..chunks[c + 1]`; chunk 0 writes the
/// result, the others partials added in order) and the scratch elements of a task.
struct Cut {
    tasks: Vec<Task>,
    chunks: Vec<usize>,
    scratch: usize,
}

/// What planning a 2-D pass starts from: the spec (for errors), the
/// geometry and pass, argument positions of `[x, w, y]` (the output's is
/// unused), the multiply-adds, the result's elements, whether the team runs
/// it and how many tasks it wants.
struct PlanCx<'a, 'b> {
    spec: &'a KernelSpec<'b>,
    g: Geo2,
    pass: Pass,
    pos: [usize; 3],
    macs: usize,
    out_len: usize,
    parallel: bool,
    want: usize,
}

impl<'a, 'b> PlanCx<'a, 'b> {
    fn new(spec: &'a KernelSpec<'b>, g: Geo2, pass: Pass, pos: [usize; 3], macs: usize, out_len: usize) -> Self {
        let threads = team::num_threads();
        let parallel = threads > 1 && macs >= PAR_MIN_MACS;
        let want = if parallel { 2 * threads } else { 1 };
        PlanCx { spec, g, pass, pos, macs, out_len, parallel, want }
    }
}

/// The pointers a task works on: the tensors `x`, `w`, `y` (one of them
/// the result), its piece's scratch `col`, and `wpart`, where its chunk of
/// a weight gradient goes (the result or a partial).
#[derive(Clone, Copy)]
struct Io<T> {
    x: *mut T,
    w: *mut T,
    y: *mut T,
    col: *mut T,
    wpart: *mut T,
}

/// A pass without multiply-adds: writes `bytes` zero bytes to output 0
/// (all-zero bits are 0 in every float type).
struct ZeroKernel {
    bytes: usize,
}

impl Kernel for ZeroKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: output 0 holds the result's `bytes` bytes (the kernel contract).
        unsafe { std::ptr::write_bytes(args.outputs[0], 0, self.bytes) };
        Ok(())
    }
}

/// A 1-D or 2-D convolution pass run by its [`Plan`].
struct ConvKernel<T> {
    geo: Geo2,
    pass: Pass,
    plan: Plan,
    tasks: Vec<Task>,
    /// Chunks of the weight gradient (see [`Cut::chunks`]).
    chunks: Vec<usize>,
    /// Positions of (x, w, y) in the kernel args (one of them is the output).
    pos: [usize; 3],
    parallel: bool,
    /// No multiply-add at all (an empty dim): the result is zeros of `out_len` elements.
    zero_fill: Option<usize>,
    /// The shared scratch slots of the pieces (see [`scratch::slots`]).
    scratch: Vec<scratch::Slot>,
    /// Partial weight gradients of chunks 1.. (chunk 0 writes the output).
    partials: Mutex<Vec<T>>,
    _t: Types<T>,
}

/// Resolves the geometry of any of the four ops from its spec: the one
/// place the convolution attributes are read.
fn geometry(spec: &KernelSpec<'_>) -> Result<(ConvGeometry, Pass), KernelError> {
    let shape = |i: u32| spec.input(i).map(|s| s.shape().to_vec());
    let (geo, pass) = if spec.is::<ir::Conv>() {
        (conv_geometry(&shape(0)?, &shape(1)?, &spec.typed::<ConvAttrs>()?), Pass::Forward)
    } else if spec.is::<ir::ConvDataGrad>() {
        (conv_geometry(&shape(2)?, &shape(1)?, &spec.typed::<ConvAttrs>()?), Pass::Data)
    } else if spec.is::<ir::ConvWeightsGrad>() {
        (conv_geometry(&shape(1)?, &shape(2)?, &spec.typed::<ConvAttrs>()?), Pass::Weights)
    } else {
        (conv_transpose_geometry(&shape(0)?, &shape(1)?, &spec.typed::<ConvTransposeAttrs>()?), Pass::Data)
    };
    Ok((geo.map_err(|m| spec.error(m))?, pass))
}

/// Whether `geo` is a pointwise convolution of any rank: 1x1 taps, stride
/// 1, unpadded (each output position reads its own input position).
fn pointwise(geo: &ConvGeometry) -> bool {
    geo.kernel.iter().all(|&k| k == 1)
        && geo.strides.iter().all(|&s| s == 1)
        && geo.pad_begin.iter().all(|&p| p == 0)
        && geo.in_size == geo.out_size
}

fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let (geo, pass) = geometry(spec)?;
    let dt = spec.output(0)?.dtype();
    if spec.inputs.iter().any(|(_, i)| i.dtype != dt) {
        return Err(spec.error("operands and result must have the same dtype"));
    }
    let want = match pass {
        Pass::Forward => geo.y_shape(),
        Pass::Data => geo.x_shape(),
        Pass::Weights => geo.w_shape(),
    };
    if spec.output(0)?.shape() != want.as_slice() {
        return Err(
            spec.error(format!("the result {} does not match the convolution ({want:?})", spec.output(0)?.info))
        );
    }
    let nd = geo.kernel.len();
    let pointwise = pointwise(&geo);
    // N-d: pointwise as 1-d over the flattened positions, else as 2-d (`nd`).
    let geo = if nd > 2 && pointwise {
        let flat = vec![geo.in_size.iter().product::<usize>()];
        ConvGeometry {
            in_size: flat.clone(),
            out_size: flat,
            kernel: vec![1],
            strides: vec![1],
            dilations: vec![1],
            pad_begin: vec![0],
            ..geo
        }
    } else {
        geo
    };
    let split = split_geometry(&geo).ok_or_else(|| spec.error("the convolution has no spatial dims"))?;
    // Argument positions of x, w and y.
    let pos = if spec.is::<ir::Conv>() {
        [spec.input(0)?.pos, spec.input(1)?.pos, 0]
    } else if spec.is::<ir::ConvDataGrad>() || spec.is::<ir::ConvTranspose>() {
        // The transposed convolution's input plays the convolution's `y`.
        [0, spec.input(1)?.pos, spec.input(0)?.pos]
    } else {
        [spec.input(1)?.pos, 0, spec.input(0)?.pos]
    };
    let out_len = spec.output(0)?.nelms();
    // No multiply-add at all (an empty batch, channel or spatial dim): the
    // result is zeros (empty when its own dims are), with no plan to cut.
    if geo.macs() == 0 {
        return Ok(Box::new(ZeroKernel { bytes: spec.output(0)?.info.nbytes() }));
    }
    if dt == DataType::Float32 {
        if let Some(k) = Folded::plan(spec, &geo, pass, pos)? {
            return Ok(k);
        }
    }
    if geo.kernel.len() > 2 {
        if dt == DataType::Float32 {
            if let Some(k) = Lanes3d::plan(spec, &geo, pass, pos)? {
                return Ok(k);
            }
            if let Some(k) = Direct3d::plan(spec, &geo, pass, pos)? {
                return Ok(k);
            }
        }
        let (inner, outer) = split;
        return with_float!(dt, T => NdKernel::<T>::plan(spec, &geo, &inner, outer, pass, pos, out_len),
            _ => Err(spec.unsupported_dtype(dt)));
    }
    if dt == DataType::Float32 {
        if let Some(k) = Lanes3d::plan_2d(spec, &geo, pass, pos)? {
            return Ok(k);
        }
        if let Some(k) = LanesWgrad::plan_2d(spec, &geo, pass, pos)? {
            return Ok(k);
        }
    }
    let g2 = Geo2::new(&split.0).ok_or_else(|| spec.error("the convolution has no spatial dims"))?;
    let cx = PlanCx::new(spec, g2, pass, pos, geo.macs(), out_len);
    with_float!(dt, T => ConvKernel::<T>::plan(cx), _ => Err(spec.unsupported_dtype(dt)))
}

impl<T: ConvElem> ConvKernel<T> {
    /// Picks the plan of a pass (the methods in the order of the module
    /// doc: the first that takes the shape) and cuts its tasks.
    fn plan(cx: PlanCx<'_, '_>) -> BuildResult {
        let g = &cx.g;
        let direct = !g.pointwise() && g.ci_g == 1 && g.co_g <= 4;
        // Small planes: several images per GEMM, keeping enough tasks for the team.
        let op = g.op();
        let images = if !direct && op < MIN_COLS && g.n > 1 {
            let per = g.groups * if cx.pass == Pass::Forward { 1 } else { g.ci_g.min(cx.want) };
            let mut images = MIN_COLS.div_ceil(op).next_power_of_two().min(g.n);
            while images > 1 && g.n.div_ceil(images) * per < cx.want {
                images /= 2;
            }
            (images > 1).then_some(images)
        } else {
            None
        };
        if let Some(wi) = Self::winograd_plan(&cx)? {
            let cut = Self::cut_winograd(&cx, &wi);
            return Self::finish(&cx, Plan::Winograd(wi), cut);
        }
        if let Some(m) = Masked::plan::<T>(g, cx.pass) {
            let cut = m.cut(g, cx.pass, cx.want);
            return Self::finish(&cx, Plan::Masked(m), cut);
        }
        // The blocked data pass broadcasts the weights of one input channel
        // per step from rows `kdim` apart; on one image of fewer than 64
        // positions (a 7x7 plane) nothing amortises that and im2col + GEMM
        // ran 1.2-1.45x faster (b1 3x3 c512 7², 2 threads).
        let one_small_image = cx.pass == Pass::Data && g.n == 1 && g.op() < dot::MAX_POSITIONS && !direct;
        if let Some(b) = Self::blocked_plan(g, cx.pass).filter(|_| !one_small_image) {
            let cut = Self::cut_blocked(&cx, &b);
            return Self::finish(&cx, Plan::Blocked(b), cut);
        }
        if !direct {
            if let Some(im) = Self::implicit_plan(g, cx.pass) {
                let cut = if cx.pass == Pass::Weights {
                    Self::cut_implicit_weights(&cx, &im)
                } else {
                    Self::cut_implicit(&cx, &im)
                };
                return Self::finish(&cx, Plan::Implicit(im), cut);
            }
        }
        if let Some(images) = images {
            if cx.pass == Pass::Data {
                if let Some(k) = Self::data_as_forward(&cx) {
                    return k;
                }
            }
            let cut = Self::cut_batched(&cx, images);
            return Self::finish(&cx, Plan::Batched { images }, cut);
        }
        if direct {
            let padded = Padded::new(g);
            let cut = Self::cut_direct(&cx, padded);
            return Self::finish(&cx, Plan::Direct(padded), cut);
        }
        let (cut, split) = Self::cut_im2col(&cx, g.pointwise());
        let plan = if g.pointwise() { Plan::Pointwise } else { Plan::Im2col(split) };
        Self::finish(&cx, plan, cut)
    }

    /// The tasks of the direct method: forward and data, one per input
    /// plane (its group's output planes); weights, one per output channel.
    fn cut_direct(cx: &PlanCx<'_, '_>, padded: Option<Padded>) -> Cut {
        let g = &cx.g;
        let (outer, inner) = if cx.pass == Pass::Weights { (1, g.groups * g.co_g) } else { (g.n, g.groups) };
        let mut tasks = Vec::new();
        for n in 0..outer {
            for c in 0..inner {
                tasks.push(Task { n, g: c, lo: 0, hi: 0, o0: 0, o1: g.co_g });
            }
        }
        Cut { tasks, chunks: vec![0, g.n], scratch: padded.map_or(0, |p| p.scratch_len(g)) }
    }

    /// The tasks of the im2col method (or of the pointwise one, which needs
    /// no matrix): forward passes in column blocks, then output-channel
    /// blocks; gradients in blocks of input channels, weight gradients of
    /// too few blocks also in chunks of the batch (or of the columns of
    /// one large image).
    fn cut_im2col(cx: &PlanCx<'_, '_>, pointwise: bool) -> (Cut, Im2colSplit) {
        let (g, want, pass) = (&cx.g, cx.want, cx.pass);
        let (kk, op) = (g.kk(), g.op());
        let mut tasks = Vec::new();
        let mut chunks = vec![0, g.n];
        let mut split = Im2colSplit::Tasks;
        let task = |n, g, lo, hi, o0, o1| Task { n, g, lo, hi, o0, o1 };
        let scratch = match pass {
            Pass::Forward => {
                // Column blocks: cache-sized, and enough of them for the team, down to
                // MIN_COLS; then blocks of output channels.
                let per_img = g.n * g.groups;
                let mut cols = if !pointwise { (BLOCK_ELEMS / g.kdim().max(1)).max(16).min(op) } else { op };
                if op.div_ceil(cols) * per_img < want {
                    cols = op.div_ceil(want.div_ceil(per_img)).next_multiple_of(16).max(MIN_COLS).min(op);
                }
                // Even blocks, so no thread is left with a sliver.
                let cols = op.div_ceil(op.div_ceil(cols.max(1))).next_multiple_of(16).min(op);
                let pieces = op.div_ceil(cols.max(1)) * per_img;
                let ob =
                    if pieces < want { g.co_g.div_ceil(want.div_ceil(pieces)).next_multiple_of(8) } else { g.co_g };
                if !pointwise && cols == op && ob < g.co_g && cx.parallel {
                    split = if dot::suits::<T>(op) { Im2colSplit::SharedColT } else { Im2colSplit::SharedCol };
                }
                for n in 0..g.n {
                    for gi in 0..g.groups {
                        for lo in (0..op).step_by(cols.max(1)) {
                            for o0 in (0..g.co_g).step_by(ob.max(1)) {
                                tasks.push(task(n, gi, lo, (lo + cols).min(op), o0, (o0 + ob).min(g.co_g)));
                            }
                        }
                    }
                }
                if pointwise {
                    0
                } else {
                    g.kdim() * cols
                }
            }
            Pass::Data | Pass::Weights => {
                // Blocks of input channels (their im2col rows are independent).
                let mut cb = (BLOCK_ELEMS / (kk * op).max(1)).min(g.ci_g).max(1);
                let per = if pass == Pass::Data { g.n * g.groups } else { g.groups };
                if g.ci_g.div_ceil(cb) * per < want {
                    cb = g.ci_g.div_ceil(want.div_ceil(per)).max(1);
                }
                let blocks = g.ci_g.div_ceil(cb);
                if pass == Pass::Weights && blocks * per < want && g.n > 1 {
                    // Too little work per batch: sum the batch in chunks, reduced at the end.
                    let c = want.div_ceil(blocks * per).min(g.n);
                    chunks = (0..=c).map(|i| i * g.n / c).collect();
                } else if pass == Pass::Weights && blocks * per < want && !pointwise && op >= WGRAD_MIN_OP {
                    // One large image (a stem): sum its columns in chunks instead.
                    let c = want.div_ceil(per);
                    chunks = (0..=c).map(|i| i * op / c).collect();
                    split = Im2colSplit::ColumnChunks;
                    cb = (BLOCK_ELEMS / (kk * op.div_ceil(c)).max(1)).clamp(1, g.ci_g);
                }
                let outer = if pass == Pass::Data { g.n } else { chunks.len() - 1 };
                for n in 0..outer {
                    for gi in 0..g.groups {
                        for lo in (0..g.ci_g).step_by(cb) {
                            tasks.push(task(n, gi, lo, (lo + cb).min(g.ci_g), 0, g.co_g));
                        }
                    }
                }
                if pointwise {
                    0
                } else {
                    cb * kk * op
                }
            }
        };
        (Cut { tasks, chunks, scratch }, split)
    }

    /// Reserves the scratch slots and partial buffers of a plan's cut and makes the kernel.
    fn finish(cx: &PlanCx<'_, '_>, plan: Plan, cut: Cut) -> BuildResult {
        let Cut { tasks, chunks, scratch } = cut;
        let g = &cx.g;
        let slots = if cx.parallel { team::num_threads().min(tasks.len()).max(1) } else { 1 };
        // Scratch in u64 words (aligned for f32 and f64).
        let words = (scratch * std::mem::size_of::<T>()).div_ceil(8);
        let scratch = scratch::slots(cx.spec, slots, words)?;
        let wlen = g.groups * g.co_g * g.kdim();
        let partials = popart_ir::size::try_zeroed_vec::<T>((chunks.len() - 2) * wlen, "conv partials")
            .map_err(|_| cx.spec.error("cannot allocate the convolution weight-gradient partials"))?;
        Ok(Box::new(ConvKernel::<T> {
            geo: g.clone(),
            pass: cx.pass,
            plan,
            tasks,
            chunks,
            pos: cx.pos,
            parallel: cx.parallel,
            zero_fill: (cx.macs == 0).then_some(cx.out_len),
            scratch,
            partials: Mutex::new(partials),
            _t: Types::default(),
        }))
    }

    /// Runs task `t` on `io` by the plan's method (inlined into the run's
    /// SIMD tier build).
    ///
    /// # Safety
    /// `t` is one of the plan's tasks; `io` holds the whole tensors, the
    /// partial of chunk `t.n` and a scratch of the plan's size; tasks running
    /// at the same time write disjoint outputs.
    #[inline(always)]
    unsafe fn task(&self, t: Task, io: Io<T>) {
        // SAFETY: each method's contract is this function's: the plan it was
        // built for (`Blocked` and `Implicit` plans only for f32, checked when
        // planning), `io` and disjoint tasks.
        unsafe {
            match &self.plan {
                Plan::Pointwise => self.gemm_task(t, true, false, io),
                Plan::Im2col(split) => self.gemm_task(t, false, *split == Im2colSplit::ColumnChunks, io),
                Plan::Direct(padded) => self.direct_task(t, *padded, io),
                Plan::Batched { images } => self.batched_task(t, *images, io),
                Plan::Blocked(b) => self.blocked_task(b, t, io),
                Plan::Masked(m) => self.masked_task(m, t, io),
                Plan::Implicit(im) if self.pass == Pass::Weights => self.implicit_weights_task(im, t, io),
                Plan::Implicit(im) => self.implicit_task(im, t, io),
                // Runs whole (`run_winograd`), never as single tasks.
                Plan::Winograd(_) => {}
            }
        }
    }
}

impl<T: ConvElem> Kernel for ConvKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let out = self.pass.out_role();
        let ptr = |role: usize| -> SendPtr<T> {
            if role == out {
                SendPtr(args.outputs[0] as *mut T)
            } else {
                SendPtr(args.inputs[self.pos[role]] as *mut T)
            }
        };
        let (x, w, y) = (ptr(0), ptr(1), ptr(2));
        if let Some(len) = self.zero_fill {
            // SAFETY: the output holds the plan's `out_len` elements (this
            // function's contract).
            unsafe { slice_mut(args.outputs[0] as *mut T, len).fill(T::ZERO) };
            return Ok(());
        }
        if let Plan::Winograd(wi) = &self.plan {
            // SAFETY: as below; the plan was built for f32 only.
            unsafe { self.run_winograd(wi, x, w, y) };
            return Ok(());
        }
        if let Plan::Im2col(Im2colSplit::SharedCol | Im2colSplit::SharedColT) = self.plan {
            // SAFETY: `x`, `w`, `y` are this call's operands (this function's
            // contract), of the geometry the plan was built for.
            unsafe { self.run_shared_col(x, w, y) };
            return Ok(());
        }
        let g = &self.geo;
        let wlen = g.groups * g.co_g * g.kdim();
        let mut partials = self.partials.lock().unwrap_or_else(|e| e.into_inner());
        let parts = SendPtr(partials.as_mut_ptr());
        // SAFETY: chunk `c > 0` has partial `c - 1` of the `chunks.len() - 2`
        // partials of `wlen` elements (sized at build time).
        let wpart = |chunk: usize| if chunk == 0 { w.get() } else { unsafe { parts.get().add((chunk - 1) * wlen) } };
        let pieces = self.scratch.len();
        // Pieces claim tasks in order as they finish the last, so a core
        // slowed by another process takes fewer.
        let next = AtomicUsize::new(0);
        let piece = |p: usize| {
            let mut col = self.scratch[p].lock().unwrap_or_else(|e| e.into_inner());
            // u64 words reinterpreted as T (f32 or f64): aligned, sized at build time.
            let col = SendPtr(col.as_mut_ptr() as *mut T);
            while let Some(t) = self.tasks.get(next.fetch_add(1, Ordering::Relaxed)) {
                let io = Io { x: x.get(), w: w.get(), y: y.get(), col: col.get(), wpart: wpart(t.n) };
                // SAFETY: tasks write disjoint outputs (planes, column blocks,
                // channel blocks, weight rows of one chunk); `col` is this piece's own.
                // The layout loops run their AVX2 build where the CPU has it.
                Simd::for_cost(1).run_narrow(
                    #[inline(always)]
                    || unsafe { self.task(*t, io) },
                );
            }
        };
        if self.parallel && pieces > 1 {
            team::run(pieces, &piece);
        } else {
            piece(0);
        }
        // SAFETY: the weight gradient (this call's output) holds `wlen`
        // elements; the pieces have finished.
        unsafe { self.add_partials(w.get(), &partials) };
        Ok(())
    }
}

impl<T: ConvElem> ConvKernel<T> {
    /// A chunked weight gradient: adds the partials of chunks 1.. to the
    /// result (chunk 0's) in chunk order; nothing for one chunk.
    ///
    /// # Safety
    /// `w` is the weight gradient (`groups · co_g · kdim` elements), which
    /// no one else touches during the call.
    unsafe fn add_partials(&self, w: *mut T, partials: &[T]) {
        if self.chunks.len() <= 2 {
            return;
        }
        let g = &self.geo;
        let wlen = g.groups * g.co_g * g.kdim();
        // SAFETY: this function's contract.
        let out = unsafe { slice_mut(w, wlen) };
        Simd::for_cost(1).run_narrow(
            #[inline(always)]
            || {
                for part in partials.chunks_exact(wlen) {
                    out.iter_mut().zip(part).for_each(|(o, &p)| *o += p);
                }
            },
        );
    }
}
