//! Convolutions: `Conv`, `ConvDataGrad`, `ConvWeightsGrad` and `ConvTranspose`
//! (the data gradient of the convolution it inverts), float32 and float64,
//! any number of spatial dims: 1-D and 2-D here, 3-D float32 on AVX-512
//! through `conv_direct3d` where its tiles fit, others through `conv_nd` (as
//! 2-D convolutions over the last two dims), pointwise ones of any rank as
//! 1-D.
//!
//! The builder resolves the op to a [`ConvGeometry`] and picks, by shape, once:
//! - **pointwise** (1x1, stride 1, unpadded): the input planes already are the
//!   im2col matrix, so each product is one GEMM on the tensors, no copy;
//! - **direct** (depthwise-like: one input channel and at most 4 output
//!   channels per group): plane loops; stride 1 goes through a zero-padded
//!   plane so each tap is one long multiply-add over the whole plane;
//! - **im2col + GEMM** otherwise: blocks of the im2col matrix are written to
//!   scratch sized here and multiplied by the `gemm` crate; a forward pass
//!   whose tasks split one image's output channels builds that image's matrix
//!   once, in parallel, and shares it;
//! - **batched im2col** for planes under 256 positions: several images side
//!   by side in one GEMM; the stride-1 data gradient of such planes runs as
//!   the forward convolution of `dy` with flipped, transposed weights
//!   (`conv_data_forward`);
//! - **blocked** (`conv_direct`, float32): on AVX-512 the stride-1 forward
//!   pass and data gradient of every shape with more than one tap and
//!   enough channels, and on AVX-512 or AVX2 + FMA (`conv_direct_avx2`) all
//!   three passes of stride-1 depthwise convolutions, by a register-blocked
//!   direct kernel over zero-padded planes (small planes several images side
//!   by side);
//! - **implicit** (`conv_implicit`, float32, CPUs whose widest tier is AVX2 +
//!   FMA): forward passes of row stride 1 or 2 and stride-1 data gradients
//!   with at least 16 output channels, as a packed GEMM whose packing of the
//!   positions is the im2col (no column matrix, no flipped weight copy), and
//!   the weight gradients of those shapes (`conv_implicit_wgrad`: both
//!   operands packed transposed, the sum over positions in chunks).
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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use popart_ir::ops::all as ir;
use popart_ir::ops::conv::{conv_geometry, conv_transpose_geometry, ConvGeometry};
use popart_ir::DataType;

use super::conv_direct::Blocked;
use super::conv_direct3d::Direct3d;
use super::conv_implicit::Implicit;
use super::conv_layout::{
    col2im, direct_data_grad_plane, direct_fwd_plane, direct_weight_grad_plane, im2col, split_geometry, ConvElem, Geo2,
    Padded,
};
use super::conv_nd::NdKernel;
use super::dispatch::with_float;
use super::par::Simd;
use super::ptr::{slice_mut, SendPtr};
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};
use crate::team;

/// Registered kernels.
pub(crate) const KERNELS: &[KernelEntry] =
    &[(&ir::Conv, build), (&ir::ConvDataGrad, build), (&ir::ConvWeightsGrad, build), (&ir::ConvTranspose, build)];

/// Multiply-adds below which a convolution runs on the calling thread only.
const PAR_MIN_MACS: usize = 1 << 18;
/// Elements of one im2col block (4 MiB of f32): large blocks make few, large
/// GEMM calls, which the `gemm` crate runs closest to peak.
pub(super) const BLOCK_ELEMS: usize = 1 << 20;
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
pub(super) enum Pass {
    /// `y` from `x` and `w`.
    Forward,
    /// `x` from `y` and `w` (data gradient, transposed convolution).
    Data,
    /// `w` from `x` and `y`.
    Weights,
}

/// How products are formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Method {
    Pointwise,
    Direct,
    Im2col,
    /// im2col over `images` images side by side: one GEMM for several small
    /// planes (late layers, where one plane has too few columns for a fast GEMM).
    Batched {
        images: usize,
    },
    /// The register-blocked stride-1 kernel of `conv_direct` (f32; AVX-512, or AVX2 for depthwise).
    Blocked,
    /// The packed implicit GEMM of `conv_implicit` (f32 on AVX2 + FMA).
    Implicit,
}

/// One unit of work: image `n` (or the batch chunk `n` for weight gradients),
/// group `g` (output channel for direct weight gradients), a block `lo..hi` of
/// output columns (forward) or of input channels within the group
/// (gradients), and a block `o0..o1` of output channels within the group.
#[derive(Clone, Copy, Debug)]
pub(super) struct Task {
    pub(super) n: usize,
    pub(super) g: usize,
    pub(super) lo: usize,
    pub(super) hi: usize,
    pub(super) o0: usize,
    pub(super) o1: usize,
}

/// Scratch buffers shared by every convolution kernel of the process: piece
/// `p` of a running kernel uses slot `p`. Kernels grow the slots they use when
/// they are built, never while they run; a slot is locked while in use, so
/// sessions running convolutions on different threads take turns.
pub(super) fn scratch_slot(p: usize) -> Arc<Mutex<Vec<u64>>> {
    static SLOTS: Mutex<Vec<Arc<Mutex<Vec<u64>>>>> = Mutex::new(Vec::new());
    let mut slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    while slots.len() <= p {
        slots.push(Arc::new(Mutex::new(Vec::new())));
    }
    slots[p].clone()
}

pub(super) struct ConvKernel<T> {
    pub(super) geo: Geo2,
    pub(super) pass: Pass,
    pub(super) method: Method,
    /// The padded plane of the stride-1 direct path.
    pub(super) padded: Option<Padded>,
    /// The plan of the blocked method.
    pub(super) blocked: Option<Blocked>,
    /// The plan of the implicit method.
    pub(super) implicit: Option<Implicit>,
    pub(super) tasks: Vec<Task>,
    /// Batch chunks of the weight gradient (chunk `c` covers images `chunks[c]..chunks[c + 1]`).
    pub(super) chunks: Vec<usize>,
    /// The chunks are of columns (output positions) of a batch of one image.
    pub(super) col_chunks: bool,
    /// Positions of (x, w, y) in the kernel args (one of them is the output).
    pub(super) pos: [usize; 3],
    pub(super) parallel: bool,
    /// Forward tasks split one image's output channels: its im2col matrix is
    /// built once, by all threads, then shared by the tasks' GEMMs.
    pub(super) shared_col: bool,
    /// No multiply-add at all (an empty dim): the result is zeros of `out_len` elements.
    pub(super) zero_fill: Option<usize>,
    /// The shared scratch slots of the pieces (see [`scratch_slot`]).
    pub(super) scratch: Vec<Arc<Mutex<Vec<u64>>>>,
    /// Partial weight gradients of chunks 1.. (chunk 0 writes the output).
    pub(super) partials: Mutex<Vec<T>>,
    pub(super) _t: Types<T>,
}

/// Resolve the geometry of any of the four ops from its spec.
fn geometry(spec: &KernelSpec<'_>) -> Result<(ConvGeometry, Pass), crate::kernel::KernelError> {
    let shape = |i: u32| spec.input(i).map(|s| s.shape().to_vec());
    let (geo, pass) = if spec.is::<ir::Conv>() {
        (conv_geometry(&shape(0)?, &shape(1)?, spec.attrs), Pass::Forward)
    } else if spec.is::<ir::ConvDataGrad>() {
        (conv_geometry(&shape(2)?, &shape(1)?, spec.attrs), Pass::Data)
    } else if spec.is::<ir::ConvWeightsGrad>() {
        (conv_geometry(&shape(1)?, &shape(2)?, spec.attrs), Pass::Weights)
    } else {
        (conv_transpose_geometry(&shape(0)?, &shape(1)?, spec.attrs), Pass::Data)
    };
    Ok((geo.map_err(|m| spec.error(m))?, pass))
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
    let pointwise = geo.kernel.iter().all(|&k| k == 1)
        && geo.strides.iter().all(|&s| s == 1)
        && geo.pad_begin.iter().all(|&p| p == 0)
        && geo.in_size == geo.out_size;
    // N-d: pointwise as 1-d over the flattened positions, else as 2-d (`conv_nd`).
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
    if geo.kernel.len() > 2 {
        if dt == DataType::Float32 {
            if let Some(k) = Direct3d::plan(spec, &geo, pass, pos)? {
                return Ok(k);
            }
        }
        let (inner, outer) = split;
        return with_float!(dt, T => NdKernel::<T>::plan(spec, &geo, &inner, outer, pass, pos, out_len),
            _ => Err(spec.unsupported_dtype(dt)));
    }
    let g2 = Geo2::new(&split.0).ok_or_else(|| spec.error("the convolution has no spatial dims"))?;
    with_float!(dt, T => ConvKernel::<T>::plan(spec, g2, pass, pos, geo.macs(), out_len), _ => Err(spec.unsupported_dtype(dt)))
}

impl<T: ConvElem> ConvKernel<T> {
    /// Picks the method of a pass over geometry `g` and cuts its tasks;
    /// `pos`: argument positions of `[x, w, y]` (the output's is unused).
    pub(super) fn plan(
        spec: &KernelSpec<'_>,
        g: Geo2,
        pass: Pass,
        pos: [usize; 3],
        macs: usize,
        out_len: usize,
    ) -> BuildResult {
        let threads = team::num_threads();
        let parallel = threads > 1 && macs >= PAR_MIN_MACS;
        let want = if parallel { 2 * threads } else { 1 };
        let method = if g.pointwise() {
            Method::Pointwise
        } else if g.ci_g == 1 && g.co_g <= 4 {
            Method::Direct
        } else {
            Method::Im2col
        };
        // Small planes: several images per GEMM, keeping enough tasks for the team.
        let op = g.op();
        let method = if method != Method::Direct && op < MIN_COLS && g.n > 1 {
            let per = g.groups * if pass == Pass::Forward { 1 } else { g.ci_g.min(want) };
            let mut images = MIN_COLS.div_ceil(op).next_power_of_two().min(g.n);
            while images > 1 && g.n.div_ceil(images) * per < want {
                images /= 2;
            }
            if images > 1 {
                Method::Batched { images }
            } else {
                method
            }
        } else {
            method
        };
        if let Some(b) = Self::blocked_plan(&g, pass) {
            return Self::plan_blocked(spec, g, pass, pos, macs, out_len, b, parallel, want);
        }
        if method != Method::Direct {
            if let Some(im) = Self::implicit_plan(&g, pass) {
                if pass == Pass::Weights {
                    return Self::plan_implicit_weights(spec, g, pos, macs, out_len, im, parallel, want);
                }
                return Self::plan_implicit(spec, g, pass, pos, macs, out_len, im, parallel, want);
            }
        }
        if pass == Pass::Data && matches!(method, Method::Batched { .. }) {
            if let Some(k) = Self::data_as_forward(spec, &g, pos, macs, out_len) {
                return k;
            }
        }
        if let Method::Batched { images } = method {
            return Self::plan_batched(spec, g, pass, pos, macs, out_len, images, parallel, want);
        }
        let padded = if method == Method::Direct { Padded::new(&g) } else { None };
        let (kk, op) = (g.kk(), g.op());
        let mut tasks = Vec::new();
        let mut chunks = vec![0, g.n];
        let mut shared_col = false;
        let mut col_chunks = false;
        let task = |n, g, lo, hi, o0, o1| Task { n, g, lo, hi, o0, o1 };
        let block_elems = match (pass, method) {
            (_, Method::Direct) => {
                // Forward and data: one task per input plane (its group's output planes);
                // weights: one per output channel.
                let (outer, inner) = if pass == Pass::Weights { (1, g.groups * g.co_g) } else { (g.n, g.groups) };
                for n in 0..outer {
                    for c in 0..inner {
                        tasks.push(task(n, c, 0, 0, 0, g.co_g));
                    }
                }
                padded.map_or(0, |p| p.scratch_len(&g))
            }
            (Pass::Forward, _) => {
                // Column blocks: cache-sized, and enough of them for the team, down to
                // MIN_COLS; then blocks of output channels.
                let per_img = g.n * g.groups;
                let mut cols =
                    if method == Method::Im2col { (BLOCK_ELEMS / g.kdim().max(1)).max(16).min(op) } else { op };
                if op.div_ceil(cols) * per_img < want {
                    cols = op.div_ceil(want.div_ceil(per_img)).next_multiple_of(16).max(MIN_COLS).min(op);
                }
                // Even blocks, so no thread is left with a sliver.
                let cols = op.div_ceil(op.div_ceil(cols.max(1))).next_multiple_of(16).min(op);
                let pieces = op.div_ceil(cols.max(1)) * per_img;
                let ob =
                    if pieces < want { g.co_g.div_ceil(want.div_ceil(pieces)).next_multiple_of(8) } else { g.co_g };
                shared_col = method == Method::Im2col && cols == op && ob < g.co_g && parallel;
                for n in 0..g.n {
                    for gi in 0..g.groups {
                        for lo in (0..op).step_by(cols.max(1)) {
                            for o0 in (0..g.co_g).step_by(ob.max(1)) {
                                tasks.push(task(n, gi, lo, (lo + cols).min(op), o0, (o0 + ob).min(g.co_g)));
                            }
                        }
                    }
                }
                if method == Method::Im2col {
                    g.kdim() * cols
                } else {
                    0
                }
            }
            (Pass::Data | Pass::Weights, _) => {
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
                } else if pass == Pass::Weights && blocks * per < want && method == Method::Im2col && op >= WGRAD_MIN_OP
                {
                    // One large image (a stem): sum its columns in chunks instead.
                    let c = want.div_ceil(per);
                    chunks = (0..=c).map(|i| i * op / c).collect();
                    col_chunks = true;
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
                if method == Method::Im2col {
                    cb * kk * op
                } else {
                    0
                }
            }
        };
        let mut k =
            Self::finish(spec, g, pass, method, padded, tasks, chunks, pos, parallel, macs, out_len, block_elems)?;
        k.shared_col = shared_col;
        k.col_chunks = col_chunks;
        Ok(k)
    }

    /// Reserves the scratch slots and partial buffers of a plan and makes the kernel.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish(
        spec: &KernelSpec<'_>,
        g: Geo2,
        pass: Pass,
        method: Method,
        padded: Option<Padded>,
        tasks: Vec<Task>,
        chunks: Vec<usize>,
        pos: [usize; 3],
        parallel: bool,
        macs: usize,
        out_len: usize,
        block_elems: usize,
    ) -> Result<Box<Self>, crate::kernel::KernelError> {
        let threads = team::num_threads();
        let slots = if parallel { threads.min(tasks.len()).max(1) } else { 1 };
        let err = |what: &str| spec.error(format!("cannot allocate the {what}"));
        // Scratch in u64 words (aligned for f32 and f64).
        let words = (block_elems * std::mem::size_of::<T>()).div_ceil(8);
        let mut scratch = Vec::with_capacity(slots);
        for p in 0..slots {
            let slot = scratch_slot(p);
            {
                let mut v = slot.lock().unwrap_or_else(|e| e.into_inner());
                if v.len() < words {
                    let extra = words - v.len();
                    v.try_reserve_exact(extra).map_err(|_| err("convolution scratch"))?;
                    v.resize(words, 0);
                }
            }
            scratch.push(slot);
        }
        let wlen = g.groups * g.co_g * g.kdim();
        let partials = popart_ir::size::try_zeroed_vec::<T>((chunks.len() - 2) * wlen, "conv partials")
            .map_err(|_| err("convolution weight-gradient partials"))?;
        Ok(Box::new(ConvKernel::<T> {
            geo: g,
            pass,
            method,
            padded,
            blocked: None,
            implicit: None,
            tasks,
            chunks,
            pos,
            parallel,
            shared_col: false,
            col_chunks: false,
            zero_fill: (macs == 0).then_some(out_len),
            scratch,
            partials: Mutex::new(partials),
            _t: Types::default(),
        }))
    }

    /// Runs a task of the direct method with the scratch `col` (inlined into
    /// [`Self::task`], so it compiles inside the SIMD tier's build).
    #[inline(always)]
    unsafe fn direct_task(&self, t: Task, x: *mut T, w: *mut T, y: *mut T, col: *mut T) {
        let g = &self.geo;
        let (kk, ip, op) = (g.kk(), g.ip(), g.op());
        // Output channel o (of all groups) reads input channel o / co_g.
        let y_plane = |n: usize, o: usize| y.add((n * g.groups * g.co_g + o) * op);
        let (xp, ext) = match self.padded {
            Some(p) => (col, col.add(p.plane_len(g))),
            None => (col, col),
        };
        match self.pass {
            Pass::Forward => {
                let (n, c) = (t.n, t.g);
                let xi = x.add((n * g.groups + c) * ip);
                if let Some(p) = self.padded {
                    p.pad(g, xi, xp);
                }
                for o in c * g.co_g..(c + 1) * g.co_g {
                    match self.padded {
                        Some(p) => p.fwd(g, xp, w.add(o * kk), ext, y_plane(n, o)),
                        None => direct_fwd_plane(g, xi, w.add(o * kk), y_plane(n, o)),
                    }
                }
            }
            Pass::Data => {
                let (n, c) = (t.n, t.g);
                let dx = x.add((n * g.groups + c) * ip);
                match self.padded {
                    Some(p) => std::ptr::write_bytes(xp, 0, p.plane_len(g)),
                    None => std::ptr::write_bytes(dx, 0, ip),
                }
                for o in c * g.co_g..(c + 1) * g.co_g {
                    match self.padded {
                        Some(p) => {
                            p.spread(g, y_plane(n, o), ext);
                            p.data_grad(g, ext, w.add(o * kk), xp);
                        }
                        None => direct_data_grad_plane(g, y_plane(n, o), w.add(o * kk), dx),
                    }
                }
                if let Some(p) = self.padded {
                    p.crop(g, xp, dx);
                }
            }
            Pass::Weights => {
                let o = t.g;
                let dw = w.add(o * kk);
                std::ptr::write_bytes(dw, 0, kk);
                for n in 0..g.n {
                    let xi = x.add((n * g.groups + o / g.co_g) * ip);
                    match self.padded {
                        Some(p) => {
                            p.pad(g, xi, xp);
                            p.spread(g, y_plane(n, o), ext);
                            p.weight_grad(g, ext, xp, dw);
                        }
                        None => direct_weight_grad_plane(g, y_plane(n, o), xi, dw),
                    }
                }
            }
        }
    }

    /// Runs task `t` with the scratch buffer `col`; `wpart` is where chunk `t.n`
    /// of a weight gradient goes.
    #[inline(always)]
    unsafe fn task(&self, t: Task, x: SendPtr<T>, w: SendPtr<T>, y: SendPtr<T>, col: *mut T, wpart: *mut T) {
        let g = &self.geo;
        let (kk, kdim, ip, op) = (g.kk(), g.kdim(), g.ip(), g.op());
        let (x, w, y) = (x.get(), w.get(), y.get());
        // Group g of image n: its input planes, output planes and weight rows.
        let xg = |n: usize| x.add((n * g.groups + t.g) * g.ci_g * ip);
        let yg = |n: usize| y.add((n * g.groups + t.g) * g.co_g * op);
        let wg = w.add(t.g * g.co_g * kdim);
        match (self.pass, self.method) {
            (_, Method::Direct) => self.direct_task(t, x, w, y, col),
            (_, Method::Batched { images }) => self.batched_task(t, images, x, w, y, col, wpart),
            (_, Method::Blocked) => self.blocked_task(t, x, w, y, col),
            (Pass::Weights, Method::Implicit) => self.implicit_weights_task(t, x, y, col, wpart),
            (_, Method::Implicit) => self.implicit_task(t, x, w, y, col),
            (Pass::Forward, m) => {
                let cols = t.hi - t.lo;
                let (rhs, rs) = if m == Method::Pointwise {
                    (xg(t.n).add(t.lo) as *const T, ip)
                } else {
                    im2col(g, xg(t.n), 0..kdim, t.lo..t.hi, col, cols);
                    (col as *const T, cols)
                };
                T::gemm(
                    t.o1 - t.o0,
                    cols,
                    kdim,
                    yg(t.n).add(t.o0 * op + t.lo),
                    op as isize,
                    1,
                    false,
                    wg.add(t.o0 * kdim),
                    kdim as isize,
                    1,
                    rhs,
                    rs as isize,
                    1,
                    T::ONE,
                    T::ONE,
                );
            }
            (Pass::Data, m) => {
                // dcol rows of channels lo..hi = wgᵀ[rows] @ dy.
                let rows = (t.lo * kk)..(t.hi * kk);
                let dx = xg(t.n).add(t.lo * ip);
                let (dst, ld) = if m == Method::Pointwise { (dx, ip) } else { (col, op) };
                T::gemm(
                    rows.len(),
                    op,
                    g.co_g,
                    dst,
                    ld as isize,
                    1,
                    false,
                    wg.add(rows.start),
                    1,
                    kdim as isize,
                    yg(t.n),
                    op as isize,
                    1,
                    T::ONE,
                    T::ONE,
                );
                if m == Method::Im2col {
                    std::ptr::write_bytes(dx, 0, (t.hi - t.lo) * ip);
                    col2im(g, col, op, (t.lo * kk)..(t.hi * kk), xg(t.n));
                }
            }
            (Pass::Weights, m) => {
                // dw[:, rows] (+)= dy @ colᵀ over the images of chunk t.n, the
                // im2col matrix built in column blocks that stay in cache.
                let rows = (t.lo * kk)..(t.hi * kk);
                let dst = wpart.add(t.g * g.co_g * kdim + rows.start);
                let cb = if m == Method::Pointwise || op < WGRAD_MIN_OP {
                    op
                } else {
                    let cb = (WGRAD_COL_ELEMS / rows.len().max(1)).max(256);
                    op.div_ceil(op.div_ceil(cb))
                };
                let chunk = self.chunks[t.n]..self.chunks[t.n + 1];
                let (images, span) = if self.col_chunks { (0..1, chunk) } else { (chunk, 0..op) };
                for (i, n) in images.enumerate() {
                    for lo in (span.start..span.end).step_by(cb.max(1)) {
                        let cols = lo..(lo + cb).min(span.end);
                        let (rhs, cs) = if m == Method::Pointwise {
                            (xg(n).add(t.lo * ip + cols.start) as *const T, ip)
                        } else {
                            im2col(g, xg(n), rows.clone(), cols.clone(), col, cols.len());
                            (col as *const T, cols.len())
                        };
                        T::gemm(
                            g.co_g,
                            rows.len(),
                            cols.len(),
                            dst,
                            kdim as isize,
                            1,
                            i > 0 || lo > span.start,
                            yg(n).add(lo),
                            op as isize,
                            1,
                            rhs,
                            1,
                            cs as isize,
                            T::ONE,
                            T::ONE,
                        );
                    }
                }
            }
        }
    }
}

impl<T: ConvElem> Kernel for ConvKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let ptr = |role: usize| -> SendPtr<T> {
            let out = match self.pass {
                Pass::Forward => 2,
                Pass::Data => 0,
                Pass::Weights => 1,
            };
            if role == out {
                SendPtr(args.outputs[0] as *mut T)
            } else {
                SendPtr(args.inputs[self.pos[role]] as *mut T)
            }
        };
        let (x, w, y) = (ptr(0), ptr(1), ptr(2));
        if let Some(len) = self.zero_fill {
            slice_mut(args.outputs[0] as *mut T, len).fill(T::ZERO);
            return Ok(());
        }
        let g = &self.geo;
        let wlen = g.groups * g.co_g * g.kdim();
        let mut partials = self.partials.lock().unwrap_or_else(|e| e.into_inner());
        let parts = SendPtr(partials.as_mut_ptr());
        let wpart = |chunk: usize| if chunk == 0 { w.get() } else { parts.get().add((chunk - 1) * wlen) };
        if self.shared_col {
            self.run_shared_col(x, w, y);
            return Ok(());
        }
        let pieces = self.scratch.len();
        // Pieces claim tasks in order as they finish the last, so a core
        // slowed by another process takes fewer.
        let next = AtomicUsize::new(0);
        let piece = |p: usize| {
            let mut col = self.scratch[p].lock().unwrap_or_else(|e| e.into_inner());
            // u64 words reinterpreted as T (f32 or f64): aligned, sized at build time.
            let col = SendPtr(col.as_mut_ptr() as *mut T);
            while let Some(t) = self.tasks.get(next.fetch_add(1, Ordering::Relaxed)) {
                // SAFETY: tasks write disjoint outputs (planes, column blocks,
                // channel blocks, weight rows of one chunk); `col` is this piece's own.
                // The layout loops run their AVX2 build where the CPU has it.
                Simd::for_cost(1).run_narrow(
                    #[inline(always)]
                    || unsafe { self.task(*t, x, w, y, col.get(), wpart(t.n)) },
                );
            }
        };
        if self.parallel && pieces > 1 {
            team::run(pieces, &piece);
        } else {
            piece(0);
        }
        // Chunked weight gradients: add the partials in chunk order.
        if self.chunks.len() > 2 {
            let out = slice_mut(w.get(), wlen);
            Simd::for_cost(1).run_narrow(
                #[inline(always)]
                || {
                    for part in partials.chunks_exact(wlen) {
                        out.iter_mut().zip(part).for_each(|(o, &p)| *o += p);
                    }
                },
            );
        }
        Ok(())
    }
}
