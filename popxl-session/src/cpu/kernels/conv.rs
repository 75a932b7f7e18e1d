//! Convolutions: `Conv`, `ConvDataGrad`, `ConvWeightsGrad` and `ConvTranspose`
//! (the data gradient of the convolution it inverts), float32 and float64,
//! 1-D and 2-D.
//!
//! The builder resolves the op to a [`ConvGeometry`] and picks, by shape, once:
//! - **pointwise** (1x1, stride 1, unpadded): the input planes already are the
//!   im2col matrix, so each product is one GEMM on the tensors, no copy;
//! - **direct** (each output channel reads one input channel: depthwise,
//!   `C_in / group == 1`): plane loops vectorised along the output row;
//! - **im2col + GEMM** otherwise: blocks of the im2col matrix are written to a
//!   per-thread scratch buffer sized here and multiplied by the `gemm` crate.
//!
//! Work is cut into tasks (images × groups × column or channel blocks) sized
//! for the cache and the worker team at build time. The forward pass and the
//! data gradient write disjoint outputs per task; the weight gradient sums over
//! the batch in a fixed number of chunks (fixed at build time) reduced in a
//! fixed order, so results do not depend on thread timing.

use std::sync::Mutex;

use popart_ir::ops::all as ir;
use popart_ir::ops::conv::{conv_geometry, conv_transpose_geometry, ConvGeometry};

use super::conv_layout::{
    col2im, direct_data_grad_plane, direct_fwd_plane, direct_weight_grad_plane, im2col, ConvElem, Geo2,
};
use super::dispatch::with_float;
use super::ptr::{slice_mut, SendPtr};
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::cpu::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};
use crate::cpu::team;

/// Registered kernels.
pub(crate) const KERNELS: &[KernelEntry] =
    &[(&ir::Conv, build), (&ir::ConvDataGrad, build), (&ir::ConvWeightsGrad, build), (&ir::ConvTranspose, build)];

/// Multiply-adds below which a convolution runs on the calling thread only.
const PAR_MIN_MACS: usize = 1 << 18;
/// Elements of one im2col block (1 MiB of f32): keeps a block in L2.
const BLOCK_ELEMS: usize = 1 << 18;

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

/// How products are formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Pointwise,
    Direct,
    Im2col,
}

/// One unit of work: image `n` (or the batch chunk `n` for weight gradients),
/// group `g`, and a block `lo..hi` of output columns (forward) or of input
/// channels within the group (gradients).
#[derive(Clone, Copy, Debug)]
struct Task {
    n: usize,
    g: usize,
    lo: usize,
    hi: usize,
}

struct ConvKernel<T> {
    geo: Geo2,
    pass: Pass,
    method: Method,
    tasks: Vec<Task>,
    /// Batch chunks of the weight gradient (chunk `c` covers images `chunks[c]..chunks[c + 1]`).
    chunks: Vec<usize>,
    /// Positions of (x, w, y) in the kernel args (one of them is the output).
    pos: [usize; 3],
    parallel: bool,
    /// No multiply-add at all (an empty dim): the result is zeros of `out_len` elements.
    zero_fill: Option<usize>,
    /// One im2col buffer per concurrent piece.
    scratch: Vec<Mutex<Vec<T>>>,
    /// Partial weight gradients of chunks 1.. (chunk 0 writes the output).
    partials: Mutex<Vec<T>>,
    _t: Types<T>,
}

/// Resolve the geometry of any of the four ops from its spec.
fn geometry(spec: &KernelSpec<'_>) -> Result<(ConvGeometry, Pass), crate::cpu::kernel::KernelError> {
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
    let g2 = Geo2::new(&geo).ok_or_else(|| {
        spec.error(format!("{}-d convolutions are not supported (1-d and 2-d are)", geo.kernel.len()))
    })?;
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
    with_float!(dt, T => ConvKernel::<T>::plan(spec, g2, pass, pos, geo.macs(), out_len), _ => Err(spec.unsupported_dtype(dt)))
}

impl<T: ConvElem> ConvKernel<T> {
    fn plan(spec: &KernelSpec<'_>, g: Geo2, pass: Pass, pos: [usize; 3], macs: usize, out_len: usize) -> BuildResult {
        let threads = team::num_threads();
        let parallel = threads > 1 && macs >= PAR_MIN_MACS;
        let want = if parallel { 2 * threads } else { 1 };
        let method = if g.pointwise() {
            Method::Pointwise
        } else if g.ci_g == 1 {
            Method::Direct
        } else {
            Method::Im2col
        };
        let (kk, op) = (g.kk(), g.op());
        let mut tasks = Vec::new();
        let mut chunks = vec![0, g.n];
        let mut block_elems = 0;
        match (pass, method) {
            (_, Method::Direct) => {
                // Forward: one task per output plane; data: per input plane; weights: per output channel.
                let (outer, inner) = match pass {
                    Pass::Forward => (g.n, g.groups * g.co_g),
                    Pass::Data => (g.n, g.groups),
                    Pass::Weights => (1, g.groups * g.co_g),
                };
                for n in 0..outer {
                    for c in 0..inner {
                        tasks.push(Task { n, g: c, lo: 0, hi: 0 });
                    }
                }
            }
            (Pass::Forward, _) => {
                // Column blocks: cache-sized, and enough of them for the team.
                let per_img = g.n * g.groups;
                let mut cols =
                    if method == Method::Im2col { (BLOCK_ELEMS / g.kdim().max(1)).max(16).min(op) } else { op };
                let pieces = op.div_ceil(cols) * per_img;
                if pieces < want {
                    cols = op.div_ceil(want.div_ceil(per_img)).next_multiple_of(16).min(op);
                }
                for n in 0..g.n {
                    for gi in 0..g.groups {
                        for lo in (0..op).step_by(cols.max(1)) {
                            tasks.push(Task { n, g: gi, lo, hi: (lo + cols).min(op) });
                        }
                    }
                }
                block_elems = if method == Method::Im2col { g.kdim() * cols } else { 0 };
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
                }
                let outer = if pass == Pass::Data { g.n } else { chunks.len() - 1 };
                for n in 0..outer {
                    for gi in 0..g.groups {
                        for lo in (0..g.ci_g).step_by(cb) {
                            tasks.push(Task { n, g: gi, lo, hi: (lo + cb).min(g.ci_g) });
                        }
                    }
                }
                block_elems = if method == Method::Im2col { cb * kk * op } else { 0 };
            }
        }
        let slots = if parallel { threads.min(tasks.len()).max(1) } else { 1 };
        let alloc = |n: usize, what: &str| {
            popart_ir::size::try_zeroed_vec::<T>(n, what)
                .map_err(|e| spec.error(format!("cannot allocate {what}: {e}")))
        };
        let mut scratch = Vec::with_capacity(slots);
        for _ in 0..slots {
            scratch.push(Mutex::new(alloc(block_elems, "convolution scratch")?));
        }
        let wlen = g.groups * g.co_g * g.kdim();
        let partials = Mutex::new(alloc((chunks.len() - 2) * wlen, "convolution weight-gradient partials")?);
        Ok(Box::new(ConvKernel::<T> {
            geo: g,
            pass,
            method,
            tasks,
            chunks,
            pos,
            parallel,
            zero_fill: (macs == 0).then_some(out_len),
            scratch,
            partials,
            _t: Types::default(),
        }))
    }

    /// Runs task `t` with the scratch buffer `col`; `wpart` is where chunk `t.n`
    /// of a weight gradient goes.
    unsafe fn task(&self, t: Task, x: SendPtr<T>, w: SendPtr<T>, y: SendPtr<T>, col: *mut T, wpart: *mut T) {
        let g = &self.geo;
        let (kk, kdim, ip, op) = (g.kk(), g.kdim(), g.ip(), g.op());
        let (x, w, y) = (x.get(), w.get(), y.get());
        // Group g of image n: its input planes, output planes and weight rows.
        let xg = |n: usize| x.add((n * g.groups + t.g) * g.ci_g * ip);
        let yg = |n: usize| y.add((n * g.groups + t.g) * g.co_g * op);
        let wg = w.add(t.g * g.co_g * kdim);
        match (self.pass, self.method) {
            (Pass::Forward, Method::Direct) => {
                // t.g is the output channel; its input channel is its group.
                let (n, o) = (t.n, t.g);
                let xi = x.add((n * g.groups + o / g.co_g) * ip);
                direct_fwd_plane(g, xi, w.add(o * kk), y.add((n * g.groups * g.co_g + o) * op));
            }
            (Pass::Data, Method::Direct) => {
                let (n, c) = (t.n, t.g);
                let dx = x.add((n * g.groups + c) * ip);
                std::ptr::write_bytes(dx, 0, ip);
                for o in c * g.co_g..(c + 1) * g.co_g {
                    direct_data_grad_plane(g, y.add((n * g.groups * g.co_g + o) * op), w.add(o * kk), dx);
                }
            }
            (Pass::Weights, Method::Direct) => {
                let o = t.g;
                let dw = w.add(o * kk);
                std::ptr::write_bytes(dw, 0, kk);
                for n in 0..g.n {
                    let xi = x.add((n * g.groups + o / g.co_g) * ip);
                    direct_weight_grad_plane(g, y.add((n * g.groups * g.co_g + o) * op), xi, dw);
                }
            }
            (Pass::Forward, m) => {
                let cols = t.hi - t.lo;
                let (rhs, rs) = if m == Method::Pointwise {
                    (xg(t.n).add(t.lo) as *const T, ip)
                } else {
                    im2col(g, xg(t.n), 0..kdim, t.lo..t.hi, col, cols);
                    (col as *const T, cols)
                };
                T::gemm(
                    g.co_g,
                    cols,
                    kdim,
                    yg(t.n).add(t.lo),
                    op as isize,
                    1,
                    false,
                    wg,
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
                    col2im(g, col, (t.lo * kk)..(t.hi * kk), xg(t.n));
                }
            }
            (Pass::Weights, m) => {
                // dw[:, rows] (+)= dy @ colᵀ over the images of chunk t.n.
                let rows = (t.lo * kk)..(t.hi * kk);
                let dst = wpart.add(t.g * g.co_g * kdim + rows.start);
                for (i, n) in (self.chunks[t.n]..self.chunks[t.n + 1]).enumerate() {
                    let (rhs, cs) = if m == Method::Pointwise {
                        (xg(n).add(t.lo * ip) as *const T, ip)
                    } else {
                        im2col(g, xg(n), rows.clone(), 0..op, col, op);
                        (col as *const T, op)
                    };
                    T::gemm(
                        g.co_g,
                        rows.len(),
                        op,
                        dst,
                        kdim as isize,
                        1,
                        i > 0,
                        yg(n),
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
        let pieces = self.scratch.len();
        let piece = |p: usize| {
            let mut col = self.scratch[p].lock().unwrap_or_else(|e| e.into_inner());
            let col = SendPtr(col.as_mut_ptr());
            for t in self.tasks.iter().skip(p).step_by(pieces) {
                // SAFETY: tasks write disjoint outputs (planes, column blocks,
                // channel blocks, weight rows of one chunk); `col` is this piece's own.
                unsafe { self.task(*t, x, w, y, col.get(), wpart(t.n)) };
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
            for part in partials.chunks_exact(wlen) {
                out.iter_mut().zip(part).for_each(|(o, &p)| *o += p);
            }
        }
        Ok(())
    }
}
