//! Pointwise convolutions (1x1 kernels of any rank, stride 1, unpadded),
//! float32 on Intel's AVX-512 CPUs, as one packed GEMM per pass and group
//! with the images *folded into the positions* (the forward pass and data
//! gradient of batches of small planes, the weight gradient of every
//! batch):
//! the batch's `N × P` positions are one axis of the product whose images
//! lie `C·P` elements apart ([`packed::Fold`]). The packing the GEMM does
//! anyway gathers the positions (no im2col copy of the batch side by side)
//! and the register tiles store straight into the images (no scatter):
//! - forward `y = W · x`: `co × N·P = [co × ci] · [ci × N·P]`;
//! - data gradient `dx = Wᵀ · dy`: `ci × N·P = [ci × co] · [co × N·P]`;
//! - weight gradient `dW = dy · xᵀ`: `co × ci = [co × N·P] · [N·P × ci]`,
//!   the batch summed inside the product's depth (its blocks in order).
//!
//! The per-image products of small planes have `P` (49 or 196) columns, a
//! poor fit for the 64-column tile, and the batched im2col method copies
//! its blocks of several images side by side through level 3 first. The
//! weight gradient's per-image products read both operands transposed
//! (`gemm` packs them slowly) and a batch of one ran on one thread.
//!
//! Tasks cut the result's rows or columns into one block per thread
//! (whichever makes the largest block's tiles and the operand each block
//! packs whole cheapest); every element is summed over the whole depth in
//! the blocking's fixed order, so the values do not depend on the thread
//! count.

use popart_ir::ops::conv::ConvGeometry;

use super::super::matmul::packed::{self, Blocking, Dst, Fold, Operand, Tiling};
use super::super::par::{self, Simd};
use super::super::ptr::SendPtr;
use super::super::scratch;
use super::super::spec::SpecExt;
use super::Pass;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use crate::team;

/// Positions per image from which the per-image GEMMs of the pointwise
/// method fill the tile's columns (and need no copy): those stay there.
const MAX_POSITIONS: usize = 256;
/// Multiply-adds below which a pass runs on the calling thread only.
const PAR_MIN_MACS: usize = 1 << 18;

/// Rows and columns of the packed GEMM's AVX-512 tile.
const ROWS: usize = 6;
const COLS: usize = 64;
/// Multiply-adds that cost about as much as packing one element (a copy
/// through the cache against 32 multiply-adds a cycle).
const PACK_MACS: usize = 8;

/// The cost, in multiply-adds, of an `m × k` by `k × n` product cut into
/// `pieces` blocks of rows (`by_rows`) or of columns: the tiles of the
/// largest block (partial tiles cost whole ones) and the operand every
/// block packs whole (the rhs when cutting rows, the lhs when cutting
/// columns). On the batch-32 1x1 c2048 7² layer: rows for the data gradient
/// (4% fewer tiles on two threads than 13 and 12 column tiles).
fn split_cost(m: usize, n: usize, k: usize, pieces: usize, by_rows: bool) -> usize {
    let tiles = |len: usize, unit: usize| len.div_ceil(pieces.max(1)).next_multiple_of(unit).min(len).div_ceil(unit);
    // Saturating: a geometry too large to run still gets a plan to refuse.
    let (tiles, packed) = match by_rows {
        true => (tiles(m, ROWS).saturating_mul(n.div_ceil(COLS)), k.saturating_mul(n)),
        false => (m.div_ceil(ROWS).saturating_mul(tiles(n, COLS)), m.saturating_mul(k)),
    };
    let shared = if pieces > 1 { packed.saturating_mul(PACK_MACS) } else { 0 };
    tiles.saturating_mul(ROWS * COLS).saturating_mul(k).saturating_add(shared)
}

/// A pointwise pass over a folded batch (see the module doc).
pub(super) struct Folded {
    pass: Pass,
    /// Groups, input and output channels per group, positions per image.
    groups: usize,
    ci: usize,
    co: usize,
    p: usize,
    /// Positions of `x`, `w` and `y` in the kernel args (`y` the output
    /// position for the forward pass, an input's for the gradients).
    pos: [usize; 3],
    /// The product's `m × k` by `k × n` dimensions (per group) and blocking.
    mkn: [usize; 3],
    bl: Blocking,
    /// Tasks per group, and whether they cut the result's rows (else its columns).
    pieces: usize,
    by_rows: bool,
    /// Rows or columns per task (the last task's fewer).
    width: usize,
    packs: Vec<scratch::Slot>,
}

impl Folded {
    /// Whether pass `pass` of `geo` runs here (float32 checked by the
    /// caller): on an Intel CPU running AVX-512, the weight gradient of
    /// every pointwise geometry, and the forward pass and data gradient of
    /// pointwise geometries of several images of fewer than
    /// [`MAX_POSITIONS`] positions.
    pub(super) fn takes(geo: &ConvGeometry, pass: Pass) -> bool {
        let p: usize = geo.in_size.iter().product();
        let shape = pass == Pass::Weights || (geo.batch >= 2 && p < MAX_POSITIONS);
        super::pointwise(geo) && shape && Simd::best() == Simd::Avx512 && par::intel()
    }

    /// The plan of `pass` where it runs here ([`Self::takes`]).
    pub(super) fn plan(
        spec: &KernelSpec<'_>,
        geo: &ConvGeometry,
        pass: Pass,
        pos: [usize; 3],
    ) -> Result<Option<Box<dyn Kernel>>, KernelError> {
        if !Self::takes(geo, pass) {
            return Ok(None);
        }
        let p: usize = geo.in_size.iter().product();
        let (n, groups) = (geo.batch, geo.group.max(1));
        let (ci, co) = (geo.in_channels / groups, geo.out_channels / groups);
        let cols = n * p;
        // The product's m × k by k × n.
        let mkn = match pass {
            Pass::Forward => [co, ci, cols],
            Pass::Data => [ci, co, cols],
            Pass::Weights => [co, cols, ci],
        };
        let [m, k, width_n] = mkn;
        let bl = Blocking::new(Tiling::Avx512, m, width_n, k);
        let threads = team::num_threads();
        let want = if threads > 1 && geo.macs() >= PAR_MIN_MACS { threads } else { 1 };
        // Each group's result cut into one block of rows or of columns per
        // thread, whichever costs least ([`split_cost`]).
        let per = want.div_ceil(groups);
        let by_rows = split_cost(m, width_n, k, per, true) < split_cost(m, width_n, k, per, false);
        let (len, unit) = if by_rows { (m, ROWS) } else { (width_n, COLS) };
        let width = len.div_ceil(per).next_multiple_of(unit).min(len);
        let pieces = len.div_ceil(width.max(1));
        let values = bl.pack_len().ok_or_else(|| spec.error("the convolution's packing buffer is too large"))?;
        let slots = if want > 1 { (groups * pieces).min(threads) } else { 1 };
        let packs = scratch::slots(spec, slots, values.div_ceil(2))?;
        Ok(Some(Box::new(Folded { pass, groups, ci, co, p, pos, mkn, bl, pieces, by_rows, width, packs })))
    }

    /// Task `t`: group `t / pieces`, its block `t % pieces` of the result's
    /// rows or columns, through packing buffer `pack`.
    ///
    /// # Safety
    /// The CPU runs AVX-512 (`plan`); `x`, `w` and `y` are the whole tensors
    /// of the geometry, the pass's result writable and overlapping neither
    /// operand; tasks write disjoint blocks of the result.
    unsafe fn task(&self, t: usize, x: *mut f32, w: *mut f32, y: *mut f32, pack: &mut [f32]) {
        let (gi, piece) = (t / self.pieces, t % self.pieces);
        let (p, ci, co, groups) = (self.p, self.ci, self.co, self.groups);
        let (cin, cout) = ((groups * ci) as isize, (groups * co) as isize);
        let pi = p as isize;
        // Group `gi`'s channels of x and y, and its weights.
        // SAFETY: offsets inside the tensors (this function's contract).
        let (xg, yg, wg) = unsafe { (x.add(gi * ci * p), y.add(gi * co * p), w.add(gi * co * ci)) };
        let x_images = Fold::images(p, cin * pi);
        let y_images = Fold::images(p, cout * pi);
        let [m, k, n] = self.mkn;
        let (dst, lhs, rhs) = match self.pass {
            Pass::Forward => (
                Dst { ptr: yg, rs: pi, cs: 1, cols: y_images },
                Operand::matrix(wg, ci as isize, 1),
                Operand { ptr: xg, rs: pi, cs: 1, rows: Fold::NONE, cols: x_images },
            ),
            Pass::Data => (
                Dst { ptr: xg, rs: pi, cs: 1, cols: x_images },
                Operand::matrix(wg, 1, ci as isize),
                Operand { ptr: yg, rs: pi, cs: 1, rows: Fold::NONE, cols: y_images },
            ),
            Pass::Weights => (
                Dst::matrix(wg, ci as isize, 1),
                Operand { ptr: yg, rs: pi, cs: 1, rows: Fold::NONE, cols: y_images },
                Operand { ptr: xg, rs: 1, cs: pi, rows: x_images, cols: Fold::NONE },
            ),
        };
        let len = if self.by_rows { m } else { n };
        let (b0, b1) = (piece * self.width, ((piece + 1) * self.width).min(len));
        // SAFETY: the block's rows or columns of the operands and the result,
        // addressed through their strides and folds (this function's contract).
        unsafe {
            let (mb, nb, dst, lhs, rhs) = if self.by_rows {
                let dst = Dst { ptr: dst.ptr.offset(b0 as isize * dst.rs), ..dst };
                let lhs = Operand { ptr: lhs.ptr.offset(b0 as isize * lhs.rs), ..lhs };
                (b1 - b0, n, dst, lhs, rhs)
            } else {
                let dst = Dst { ptr: dst.ptr.offset(dst.cols.offset(b0, dst.cs)), cols: dst.cols.from(b0), ..dst };
                let rhs = Operand { ptr: rhs.ptr.offset(rhs.cols.offset(b0, rhs.cs)), cols: rhs.cols.from(b0), ..rhs };
                (m, b1 - b0, dst, lhs, rhs)
            };
            let none = packed::Addends::NONE;
            packed::gemm(&self.bl, mb, nb, k, dst, false, lhs, rhs, 1.0, 1.0, none, std::ptr::null_mut(), pack);
        }
    }
}

impl Kernel for Folded {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // The pass's result is the output; the two operands are inputs.
        let input = |i: usize| args.inputs[self.pos[i]] as *mut f32;
        let out = args.outputs[0] as *mut f32;
        let (x, w, y) = match self.pass {
            Pass::Forward => (input(0), input(1), out),
            Pass::Data => (out, input(1), input(2)),
            Pass::Weights => (input(0), out, input(2)),
        };
        let (x, w, y) = (SendPtr(x), SendPtr(w), SendPtr(y));
        let tasks = self.groups * self.pieces;
        let slots = self.packs.len();
        let per = tasks.div_ceil(slots);
        let run = |s: usize| {
            let mut guard = self.packs[s].lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: a `u64` holds two `f32`s, at an alignment `f32` accepts.
            let pack = unsafe { std::slice::from_raw_parts_mut(guard.as_mut_ptr() as *mut f32, guard.len() * 2) };
            for t in s * per..((s + 1) * per).min(tasks) {
                // SAFETY: the tensors of the geometry (the `KernelArgs` contract);
                // tasks write disjoint blocks; AVX-512 checked at build time.
                unsafe { self.task(t, x.get(), w.get(), y.get(), pack) };
            }
        };
        if slots > 1 {
            team::run(tasks.div_ceil(per), &run);
        } else {
            run(0);
        }
        Ok(())
    }
}
