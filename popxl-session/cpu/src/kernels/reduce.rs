//! Reductions: `ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare`
//! over axes and `ReduceToShape` (the sum that undoes broadcasting).
//!
//! The plan iterates the input in order and maps each element to its output
//! with a broadcast plan of the keepdims output shape (stride 0 on reduced
//! dims), so contiguous runs are either folded into one output (innermost dim
//! reduced) or accumulated into a row of outputs (innermost dim kept).

use super::broadcast::Broadcast;
use std::ops::Range;
use std::sync::Mutex;

use super::dispatch::{with_float, with_num};
use super::elem::{Float, Num};
use super::float16::{f16_adapter, has_f16};
use super::par::{par_split, Simd, PAR_MIN_ELEMS};
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{norm_axes, BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use crate::team;
use popart_ir::ops::all as ir;
use popart_ir::ops::reduce::ReduceAttrs;

pub(super) mod groups;

/// How values combine. Implemented by zero-sized reducer types: each element is
/// `map`ped, then `combine`d into the accumulator (partial accumulators of a
/// split reduction are merged with `combine` too).
pub(crate) trait Reducer<T: Num>: Send + Sync + 'static {
    /// The identity of `combine`.
    fn init() -> T;
    /// Transform of each element before it is combined (`|x|` for l1, `x²` for sums of squares).
    #[inline(always)]
    fn map(x: T) -> T {
        x
    }
    /// Combine an accumulator with a mapped value (or another accumulator).
    fn combine(acc: T, x: T) -> T;
    /// Fold a contiguous run.
    #[inline(always)]
    fn fold(acc: T, xs: &[T]) -> T {
        xs.iter().fold(acc, |a, &x| Self::combine(a, Self::map(x)))
    }
    /// Final transform of each output given the number of reduced elements.
    #[inline(always)]
    fn finish(acc: T, _count: usize) -> T {
        acc
    }
    /// Whether `finish` is the identity.
    const PLAIN_FINISH: bool = true;
}

/// Pairwise sum (like numpy): halves recursively down to blocks of 256 that are
/// summed with eight independent accumulators (vectorises), so the rounding
/// error grows with `log n` rather than `n`.
#[inline(always)]
fn sum_fold<T: Num>(acc: T, xs: &[T]) -> T {
    acc.add(pairwise(xs, |x| x, T::ZERO, T::add))
}

/// [`sum_fold`] of `map(x)`.
#[inline(always)]
fn sum_fold_map<T: Num>(acc: T, xs: &[T], map: impl Fn(T) -> T + Copy) -> T {
    acc.add(pairwise(xs, map, T::ZERO, T::add))
}

/// The pairwise fold of `map(x)` with `op` (associative, identity `id`): halves
/// recursively down to blocks of 256, folded with eight independent lanes.
#[inline(always)]
pub(crate) fn pairwise<T: Num>(xs: &[T], map: impl Fn(T) -> T + Copy, id: T, op: impl Fn(T, T) -> T + Copy) -> T {
    if xs.len() > 256 {
        let (a, b) = xs.split_at(xs.len() / 2 / 8 * 8);
        return op(pairwise(a, map, id, op), pairwise(b, map, id, op));
    }
    let mut lanes = [id; 8];
    let chunks = xs.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = op(*l, map(v));
        }
    }
    let mut s = id;
    for x in rest {
        s = op(s, map(*x));
    }
    let l = [op(lanes[0], lanes[4]), op(lanes[1], lanes[5]), op(lanes[2], lanes[6]), op(lanes[3], lanes[7])];
    op(op(op(l[0], l[2]), op(l[1], l[3])), s)
}

pub(crate) struct SumR;
impl<T: Num> Reducer<T> for SumR {
    fn init() -> T {
        T::ZERO
    }
    #[inline(always)]
    fn combine(acc: T, x: T) -> T {
        acc.add(x)
    }
    #[inline(always)]
    fn fold(acc: T, xs: &[T]) -> T {
        sum_fold(acc, xs)
    }
}

pub(crate) struct MeanR;
impl<T: Num> Reducer<T> for MeanR {
    fn init() -> T {
        T::ZERO
    }
    #[inline(always)]
    fn combine(acc: T, x: T) -> T {
        acc.add(x)
    }
    #[inline(always)]
    fn fold(acc: T, xs: &[T]) -> T {
        sum_fold(acc, xs)
    }
    #[inline(always)]
    fn finish(acc: T, count: usize) -> T {
        acc.div(T::from_f64(count as f64))
    }
    const PLAIN_FINISH: bool = false;
}

pub(crate) struct MaxR;
impl<T: Num> Reducer<T> for MaxR {
    fn init() -> T {
        T::LOWEST
    }
    #[inline(always)]
    fn combine(acc: T, x: T) -> T {
        acc.maximum(x)
    }
}

pub(crate) struct MinR;
impl<T: Num> Reducer<T> for MinR {
    fn init() -> T {
        T::HIGHEST
    }
    #[inline(always)]
    fn combine(acc: T, x: T) -> T {
        acc.minimum(x)
    }
}

pub(crate) struct ProdR;
impl<T: Num> Reducer<T> for ProdR {
    fn init() -> T {
        T::ONE
    }
    #[inline(always)]
    fn combine(acc: T, x: T) -> T {
        acc.mul(x)
    }
    #[inline(always)]
    fn fold(acc: T, xs: &[T]) -> T {
        acc.mul(pairwise(xs, |x| x, T::ONE, T::mul))
    }
}

pub(crate) struct L1R;
impl<T: Num> Reducer<T> for L1R {
    fn init() -> T {
        T::ZERO
    }
    #[inline(always)]
    fn map(x: T) -> T {
        x.abs()
    }
    #[inline(always)]
    fn combine(acc: T, x: T) -> T {
        acc.add(x)
    }
    #[inline(always)]
    fn fold(acc: T, xs: &[T]) -> T {
        sum_fold_map(acc, xs, T::abs)
    }
}

pub(crate) struct SumSquareR;
impl<T: Num> Reducer<T> for SumSquareR {
    fn init() -> T {
        T::ZERO
    }
    #[inline(always)]
    fn map(x: T) -> T {
        x.mul(x)
    }
    #[inline(always)]
    fn combine(acc: T, x: T) -> T {
        acc.add(x)
    }
    #[inline(always)]
    fn fold(acc: T, xs: &[T]) -> T {
        sum_fold_map(acc, xs, |x| x.mul(x))
    }
}

pub(crate) struct L2R;
impl<T: Float> Reducer<T> for L2R {
    fn init() -> T {
        T::ZERO
    }
    #[inline(always)]
    fn map(x: T) -> T {
        x * x
    }
    #[inline(always)]
    fn combine(acc: T, x: T) -> T {
        acc + x
    }
    #[inline(always)]
    fn fold(acc: T, xs: &[T]) -> T {
        sum_fold_map(acc, xs, |x| x * x)
    }
    #[inline(always)]
    fn finish(acc: T, _count: usize) -> T {
        acc.sqrt()
    }
    const PLAIN_FINISH: bool = false;
}

pub(crate) struct LogSumR;
impl<T: Float> Reducer<T> for LogSumR {
    fn init() -> T {
        T::ZERO
    }
    #[inline(always)]
    fn combine(acc: T, x: T) -> T {
        acc + x
    }
    #[inline(always)]
    fn fold(acc: T, xs: &[T]) -> T {
        sum_fold(acc, xs)
    }
    #[inline(always)]
    fn finish(acc: T, _count: usize) -> T {
        acc.ln()
    }
    const PLAIN_FINISH: bool = false;
}

/// Rows per chunk of a large column reduction `[R, K] -> [K]` (see
/// [`Reduce::run_col_chunks`]).
const COL_CHUNK_ROWS: usize = 256;

/// `ys[j] = combine(ys[j], map(x[r, c0 + j]))` for the rows `rows` of the
/// row-major `x` with `cols` columns, in row order: four rows per pass over
/// `ys` (combined in row order, as one row at a time would), a quarter of
/// the output traffic.
///
/// # Safety
/// `x` holds the rows `rows` of `cols` elements; `c0 + ys.len() <= cols`.
#[inline(always)]
unsafe fn fold_rows<T: Num, R: Reducer<T>>(x: *const T, cols: usize, rows: Range<usize>, c0: usize, ys: &mut [T]) {
    let n = ys.len();
    // SAFETY: row `r` of `rows`, columns `c0..c0 + n` (this function's contract).
    let row = |r: usize| unsafe { slice(x.add(r * cols + c0), n) };
    let quads = rows.start + rows.len() / 4 * 4;
    for r in (rows.start..quads).step_by(4) {
        let (x0, x1, x2, x3) = (row(r), row(r + 1), row(r + 2), row(r + 3));
        for ((((o, &a), &b), &d), &e) in ys.iter_mut().zip(x0).zip(x1).zip(x2).zip(x3) {
            let v = R::combine(R::combine(*o, R::map(a)), R::map(b));
            *o = R::combine(R::combine(v, R::map(d)), R::map(e));
        }
    }
    for r in quads..rows.end {
        for (o, &v) in ys.iter_mut().zip(row(r)) {
            *o = R::combine(*o, R::map(v));
        }
    }
}

/// Reduce an input of `in_shape` into an output whose keepdims shape broadcasts to it.
pub(crate) struct Reduce<T, R> {
    plan: Broadcast<1>,
    out_len: usize,
    count: usize,
    src: usize,
    /// A column reduction `[R, K] -> [K]` of at least two [`COL_CHUNK_ROWS`]
    /// chunks of rows: one partial of `K` per chunk (sized when built).
    col_chunks: Option<Mutex<Vec<T>>>,
    _t: Types<(T, R)>,
}

impl<T: Num, R: Reducer<T>> Reduce<T, R> {
    /// Reduce input position `src` of `in_shape` to `kept_shape` (same rank or
    /// right-aligned, size 1 on reduced dims).
    pub(crate) fn boxed(spec: &KernelSpec<'_>, in_shape: &[usize], kept_shape: &[usize], src: usize) -> BuildResult {
        Ok(Box::new(Self::new(spec, in_shape, kept_shape, src)?))
    }

    fn new(spec: &KernelSpec<'_>, in_shape: &[usize], kept_shape: &[usize], src: usize) -> Result<Self, KernelError> {
        let plan = Broadcast::new(in_shape, [kept_shape])
            .ok_or_else(|| spec.error(format!("{kept_shape:?} is not a reduction of {in_shape:?}")))?;
        let out_len: usize = kept_shape.iter().product();
        let in_len: usize = in_shape.iter().product();
        let count = in_len.checked_div(out_len).unwrap_or(0);
        let col_chunks = match plan.dims() {
            &[rows, cols] if plan.strides(0) == [0, 1] && rows >= 2 * COL_CHUNK_ROWS && in_len >= PAR_MIN_ELEMS => {
                let len = rows.div_ceil(COL_CHUNK_ROWS) * cols;
                let parts = popart_ir::size::try_zeroed_vec::<T>(len, "reduction partials")
                    .map_err(|_| spec.error("cannot allocate the reduction's partial results"))?;
                Some(Mutex::new(parts))
            }
            _ => None,
        };
        Ok(Reduce::<T, R> { plan, out_len, count, src, col_chunks, _t: Types::default() })
    }

    /// A column reduction `[rows, cols] -> [cols]` in chunks of
    /// [`COL_CHUNK_ROWS`] rows: each chunk folded into its partial (the
    /// threads take runs of consecutive chunks, the rows an elementwise
    /// producer split the same way left in their caches), then the partials
    /// combined in chunk order, columns split over the threads. The chunks
    /// depend on the shape only: results do not depend on the thread count.
    ///
    /// # Safety
    /// `x` holds `rows · cols` elements and `y` `cols`, not overlapping;
    /// `parts` holds a partial of `cols` per chunk.
    unsafe fn run_col_chunks(
        &self,
        x: SendPtr<T>,
        y: SendPtr<T>,
        rows: usize,
        cols: usize,
        parts: &Mutex<Vec<T>>,
        threads: usize,
    ) {
        let simd = Simd::for_cost(1);
        let chunks = rows.div_ceil(COL_CHUNK_ROWS);
        let mut parts = parts.lock().unwrap_or_else(|e| e.into_inner());
        let pp = SendPtr(parts.as_mut_ptr());
        let pieces = threads.clamp(1, chunks);
        team::run(pieces, &|t| {
            for c in t * chunks / pieces..(t + 1) * chunks / pieces {
                let r = c * COL_CHUNK_ROWS..((c + 1) * COL_CHUNK_ROWS).min(rows);
                simd.run_narrow(
                    #[inline(always)]
                    || {
                        // SAFETY: chunk `c`'s partial (this task's alone) and rows (inside
                        // the input: this function's contract).
                        unsafe {
                            let ys = slice_mut(pp.get().add(c * cols), cols);
                            ys.fill(R::init());
                            fold_rows::<T, R>(x.get(), cols, r, 0, ys);
                        }
                    },
                );
            }
        });
        let block = cols.div_ceil(pieces).next_multiple_of(16);
        team::run(cols.div_ceil(block), &|t| {
            let c = t * block..((t + 1) * block).min(cols);
            simd.run_narrow(
                #[inline(always)]
                || {
                    // SAFETY: columns `c` of the output (this task's alone) and of the
                    // partials, which the first pass finished writing.
                    unsafe {
                        let ys = slice_mut(y.get().add(c.start), c.len());
                        ys.copy_from_slice(slice(pp.get().add(c.start), c.len()));
                        for k in 1..chunks {
                            let part = slice(pp.get().add(k * cols + c.start), c.len());
                            ys.iter_mut().zip(part).for_each(|(o, &v)| *o = R::combine(*o, v));
                        }
                        self.finish(ys);
                    }
                },
            );
        });
    }

    /// Reduce the flat input range `range` into the outputs (already initialised).
    ///
    /// # Safety
    /// `x` holds the plan's input and `y` its outputs; the outputs `range` reduces
    /// into are touched by no one else during the call.
    #[inline(always)]
    unsafe fn accumulate(&self, x: *const T, y: *mut T, range: std::ops::Range<usize>) {
        let [s] = self.plan.inner_strides();
        self.plan.for_segments(
            range,
            #[inline(always)]
            move |i, [o], len| {
                // SAFETY: the plan's segments lie inside its input (`x`) and outputs
                // (`y`), which this call alone touches (this function's contract).
                unsafe {
                    let xs = slice(x.add(i), len);
                    if s == 0 {
                        let out = &mut *y.add(o);
                        *out = R::fold(*out, xs);
                    } else {
                        for (out, &v) in slice_mut(y.add(o), len).iter_mut().zip(xs) {
                            *out = R::combine(*out, R::map(v));
                        }
                    }
                }
            },
        );
    }

    unsafe fn finish(&self, ys: &mut [T]) {
        if !R::PLAIN_FINISH {
            for v in ys {
                *v = R::finish(*v, self.count);
            }
        }
    }
}

impl<T: Num, R: Reducer<T>> Kernel for Reduce<T, R> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let x = SendPtr(args.inputs[self.src] as *mut T);
        let y = SendPtr(args.outputs[0] as *mut T);
        let in_len = self.plan.len();
        let dims = self.plan.dims();
        let ostr = self.plan.strides(0);
        let threads = team::num_threads();
        // Reductions are bound by memory: the AVX2 build where the CPU has it.
        let simd = Simd::for_cost(1);
        if self.out_len == 1 {
            // Full reduction: partial folds per piece, combined in order.
            // SAFETY: the output holds one element and overlaps no input (the
            // `KernelArgs` contract).
            let out = unsafe { &mut *y.get() };
            let acc = if in_len >= PAR_MIN_ELEMS && threads > 1 {
                // At most PIECES partial results, combined in piece order (deterministic).
                const PIECES: usize = 64;
                let chunk = in_len.div_ceil((threads * 4).min(PIECES)).max(1 << 14);
                let pieces = in_len.div_ceil(chunk);
                let mut partial = [R::init(); PIECES];
                let parts = SendPtr(partial.as_mut_ptr());
                team::run(pieces, &|p| {
                    let r = p * chunk..((p + 1) * chunk).min(in_len);
                    // SAFETY: `r` lies in `0..in_len`, inside the input, which no one writes.
                    let xs = unsafe { slice(x.get().add(r.start), r.len()) };
                    // SAFETY: the range lies inside the input; each task writes its own slot.
                    unsafe {
                        *parts.get().add(p) = simd.run_narrow(
                            #[inline(always)]
                            || R::fold(R::init(), xs),
                        )
                    };
                });
                partial[..pieces].iter().fold(R::init(), |a, &b| R::combine(a, b))
            } else {
                // SAFETY: the input holds the plan's `in_len` elements.
                let xs = unsafe { slice(x.get(), in_len) };
                simd.run_narrow(
                    #[inline(always)]
                    || R::fold(R::init(), xs),
                )
            };
            *out = R::finish(acc, self.count);
            return Ok(());
        }
        if in_len >= PAR_MIN_ELEMS && threads > 1 && ostr[0] != 0 && dims.len() > 1 {
            // Outermost dim kept: its slices write disjoint outputs.
            let (n0, in_blk, out_blk) = (dims[0], in_len / dims[0], ostr[0]);
            par_split(
                n0,
                2,
                1,
                #[inline(always)]
                move |r| {
                    // SAFETY: pieces own disjoint input and output blocks.
                    unsafe {
                        let ys = slice_mut(y.get().add(r.start * out_blk), r.len() * out_blk);
                        ys.fill(R::init());
                        self.accumulate(x.get(), y.get(), r.start * in_blk..r.end * in_blk);
                        self.finish(ys);
                    }
                },
            );
            return Ok(());
        }
        if let Some(parts) = &self.col_chunks {
            // SAFETY: the plan is `[rows, cols] -> [cols]` (checked when built) over the
            // kernel's input and output.
            unsafe { self.run_col_chunks(x, y, dims[0], dims[1], parts, threads) };
            return Ok(());
        }
        if in_len >= PAR_MIN_ELEMS && threads > 1 && dims.len() == 2 && ostr[0] == 0 {
            // [R, K] -> [K]: split the kept columns.
            let (rows, cols) = (dims[0], dims[1]);
            par_split(
                cols,
                2,
                64,
                #[inline(always)]
                move |c| {
                    // SAFETY: pieces own disjoint output columns; reads stay inside the input.
                    simd.run_narrow(
                        #[inline(always)]
                        || unsafe {
                            let ys = slice_mut(y.get().add(c.start), c.len());
                            ys.fill(R::init());
                            fold_rows::<T, R>(x.get(), cols, 0..rows, c.start, ys);
                            self.finish(ys);
                        },
                    )
                },
            );
            return Ok(());
        }
        simd.run_narrow(
            #[inline(always)]
            || {
                // SAFETY: `x` and `y` are the kernel's input and output (`out_len`
                // elements), disjoint by the `KernelArgs` contract, and this single
                // task reduces the whole range.
                unsafe {
                    let ys = slice_mut(y.get(), self.out_len);
                    ys.fill(R::init());
                    self.accumulate(x.get(), y.get(), 0..in_len);
                    self.finish(ys);
                }
            },
        );
        Ok(())
    }
}

/// `sum(exp(x - m))` over a contiguous run, in blocks of 16 lanes (vectorises;
/// the blocks are summed pairwise as [`pairwise`] does). Each block of at most
/// 1024 elements runs the widest build ([`Simd::for_cost`]).
fn sum_exp_shifted<T: Float>(xs: &[T], m: T) -> T {
    if xs.len() > 1024 {
        let (a, b) = xs.split_at(xs.len() / 2 / 16 * 16);
        return sum_exp_shifted(a, m) + sum_exp_shifted(b, m);
    }
    Simd::for_cost(16).run(
        #[inline(always)]
        || sum_exp_block(xs, m),
    )
}

/// [`sum_exp_shifted`] of one block.
#[inline(always)]
fn sum_exp_block<T: Float>(xs: &[T], m: T) -> T {
    let mut lanes = [T::ZERO; 16];
    let chunks = xs.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = *l + (v - m).fast_exp();
        }
    }
    let mut s = T::ZERO;
    for &v in rest {
        s = s + (v - m).fast_exp();
    }
    pairwise(&lanes, |v| v, T::ZERO, <T as Num>::add) + s
}

/// `ReduceLogSumExp`, stable: the maximum `m` of each group goes to the output,
/// `s = sum(exp(x - m))` to a scratch buffer sized at build time, then
/// `y = m + ln(s)` (`y = m` where `m` is not finite: all `-inf`, `+inf` or NaN).
pub(crate) struct LogSumExp<T: Num> {
    max: Reduce<T, MaxR>,
    scratch: Mutex<Vec<T>>,
}

impl<T: Float> LogSumExp<T> {
    fn boxed(spec: &KernelSpec<'_>, in_shape: &[usize], kept_shape: &[usize], src: usize) -> BuildResult {
        let max = Reduce::<T, MaxR>::new(spec, in_shape, kept_shape, src)?;
        let scratch = popart_ir::size::try_zeroed_vec::<T>(max.out_len, "logsumexp scratch")
            .map_err(|e| spec.error(e.to_string()))?;
        Ok(Box::new(LogSumExp { max, scratch: Mutex::new(scratch) }))
    }

    /// Both passes over the input range `range`, whose outputs (and scratch
    /// entries) `outs` no other range touches.
    ///
    /// # Safety
    /// `x` holds the plan's input, `y` and `s` its `out_len` outputs; outputs and
    /// scratch entries `outs` (those `range` reduces into) are touched by no one
    /// else during the call.
    #[inline(always)]
    unsafe fn pass(
        &self,
        x: *const T,
        y: *mut T,
        s: *mut T,
        range: std::ops::Range<usize>,
        outs: std::ops::Range<usize>,
    ) {
        // SAFETY: `outs` lies within the `out_len` entries of `y` and `s`, and this
        // call alone touches them (this function's contract); `accumulate`'s contract
        // is this one's.
        unsafe {
            slice_mut(y.add(outs.start), outs.len()).fill(T::LOWEST);
            slice_mut(s.add(outs.start), outs.len()).fill(T::ZERO);
            self.max.accumulate(x, y, range.clone());
        }
        let [st] = self.max.plan.inner_strides();
        self.max.plan.for_segments(range, |i, [o], len| {
            // SAFETY: the plan's segments lie inside the input and the outputs; `s`
            // has the outputs' layout; the entries of `range` are this call's alone.
            unsafe {
                let xs = slice(x.add(i), len);
                if st == 0 {
                    let m = *y.add(o);
                    *s.add(o) = (*s.add(o)) + sum_exp_shifted(xs, m);
                } else {
                    let (ms, ss) = (slice(y.add(o), len), slice_mut(s.add(o), len));
                    for ((acc, &v), &m) in ss.iter_mut().zip(xs).zip(ms) {
                        *acc = *acc + (v - m).fast_exp();
                    }
                }
            }
        });
        // SAFETY: as the first block: entries `outs` of `y` and `s`, this call's alone.
        let (ys, ss) = unsafe { (slice_mut(y.add(outs.start), outs.len()), slice(s.add(outs.start), outs.len())) };
        for (m, &sum) in ys.iter_mut().zip(ss) {
            if *m > T::LOWEST && *m < T::HIGHEST {
                *m = *m + sum.ln();
            }
        }
    }
}

impl<T: Float> Kernel for LogSumExp<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let x = SendPtr(args.inputs[self.max.src] as *mut T);
        let y = SendPtr(args.outputs[0] as *mut T);
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let s = SendPtr(guard.as_mut_ptr());
        let (plan, out_len) = (&self.max.plan, self.max.out_len);
        let (in_len, dims, ostr) = (plan.len(), plan.dims(), plan.strides(0));
        if in_len >= PAR_MIN_ELEMS / 16 && team::num_threads() > 1 && ostr[0] != 0 && dims.len() > 1 {
            // Outermost dim kept: its slices own disjoint outputs.
            let (n0, in_blk, out_blk) = (dims[0], in_len / dims[0], ostr[0]);
            par_split(
                n0,
                2,
                1,
                #[inline(always)]
                move |r| {
                    // SAFETY: pieces own disjoint input blocks, outputs and scratch entries.
                    unsafe {
                        self.pass(
                            x.get(),
                            y.get(),
                            s.get(),
                            r.start * in_blk..r.end * in_blk,
                            r.start * out_blk..r.end * out_blk,
                        )
                    }
                },
            );
        } else {
            Simd::for_cost(16).run(
                #[inline(always)]
                // SAFETY: `x` and `y` are the kernel's input and output, disjoint (the
                // `KernelArgs` contract); `s` is the locked scratch of `out_len`
                // entries; this single task covers every output.
                || unsafe { self.pass(x.get(), y.get(), s.get(), 0..in_len, 0..out_len) },
            );
        }
        Ok(())
    }
}

/// Build the reductions of this file and `ReduceToShape`.
pub(crate) fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    if x.dtype() != y.dtype() {
        return Err(spec.error(format!("output dtype {} differs from input {}", y.dtype(), x.dtype())));
    }
    if has_f16(spec) {
        return f16_adapter(spec, false, build);
    }
    let kept: Vec<usize> = if spec.is::<ir::ReduceToShape>() {
        y.shape().to_vec()
    } else {
        let axes = norm_axes(spec, &spec.typed::<ReduceAttrs>()?.axes, x.info.rank())?;
        x.shape().iter().enumerate().map(|(d, &n)| if axes.contains(&d) { 1 } else { n }).collect()
    };
    if kept.iter().product::<usize>() != y.nelms() {
        return Err(spec.error(format!("output {} does not match the reduced shape {kept:?}", y.info)));
    }
    let dt = x.dtype();
    macro_rules! red {
        ($r:ty) => {
            with_num!(dt, T => Reduce::<T, $r>::boxed(spec, x.shape(), &kept, x.pos),
                _ => Err(spec.unsupported_dtype(dt)))
        };
    }
    macro_rules! redf {
        ($r:ty) => {
            with_float!(dt, T => Reduce::<T, $r>::boxed(spec, x.shape(), &kept, x.pos),
                _ => Err(spec.unsupported_dtype(dt)))
        };
    }
    match () {
        _ if spec.is::<ir::ReduceSum>() || spec.is::<ir::ReduceToShape>() => red!(SumR),
        _ if spec.is::<ir::ReduceMean>() => red!(MeanR),
        _ if spec.is::<ir::ReduceMax>() => red!(MaxR),
        _ if spec.is::<ir::ReduceMin>() => red!(MinR),
        _ if spec.is::<ir::ReduceProd>() => red!(ProdR),
        _ if spec.is::<ir::ReduceL1>() => red!(L1R),
        _ if spec.is::<ir::ReduceSumSquare>() => red!(SumSquareR),
        _ if spec.is::<ir::ReduceL2>() => redf!(L2R),
        _ if spec.is::<ir::ReduceLogSum>() => redf!(LogSumR),
        _ if spec.is::<ir::ReduceLogSumExp>() => {
            with_float!(dt, T => LogSumExp::<T>::boxed(spec, x.shape(), &kept, x.pos),
                _ => Err(spec.unsupported_dtype(dt)))
        }
        _ => Err(spec.error(format!("`{}` is not a reduction", spec.op_type()))),
    }
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::ReduceSum, build),
    (&ir::ReduceMean, build),
    (&ir::ReduceMax, build),
    (&ir::ReduceMin, build),
    (&ir::ReduceToShape, build),
    (&ir::ReduceProd, build),
    (&ir::ReduceL1, build),
    (&ir::ReduceL2, build),
    (&ir::ReduceLogSum, build),
    (&ir::ReduceLogSumExp, build),
    (&ir::ReduceSumSquare, build),
];

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, run_op, t, Rng};
    use popart_ir::ops::grad::ShapeAttrs;
    use popart_ir::ops::reduce::ReduceAttrs;
    use popart_ir::{Attributes, DataType, OpAttrs};

    /// Naive reduction over `axes` of a row-major tensor.
    fn naive(x: &[f64], shape: &[usize], axes: &[usize], op: &str) -> Vec<f64> {
        let out_shape: Vec<usize> =
            shape.iter().enumerate().map(|(d, &n)| if axes.contains(&d) { 1 } else { n }).collect();
        let out_len: usize = out_shape.iter().product();
        let mut acc: Vec<Vec<f64>> = vec![Vec::new(); out_len];
        for (flat, &v) in x.iter().enumerate() {
            let mut rem = flat;
            let mut idx = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = rem % shape[d];
                rem /= shape[d];
            }
            let mut o = 0;
            for d in 0..shape.len() {
                o = o * out_shape[d] + if axes.contains(&d) { 0 } else { idx[d] };
            }
            acc[o].push(v);
        }
        acc.iter()
            .map(|vs| match op.strip_prefix("Reduce") {
                Some("Sum") => vs.iter().sum(),
                Some("Mean") => vs.iter().sum::<f64>() / vs.len() as f64,
                Some("Max") => vs.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                _ => vs.iter().cloned().fold(f64::INFINITY, f64::min),
            })
            .collect()
    }

    fn attrs(axes: &[i64], keepdims: bool) -> Attributes {
        ReduceAttrs { axes: axes.to_vec(), keepdims }.to_attrs()
    }

    #[test]
    fn reductions_match_naive_loops() {
        let mut rng = Rng::new(3);
        let cases: &[(&[usize], &[i64])] = &[
            (&[4, 5], &[1]),
            (&[4, 5], &[0]),
            (&[4, 5], &[]),
            (&[2, 3, 4], &[0, 2]),
            (&[2, 3, 4], &[1]),
            (&[2, 3, 4], &[-1, -2]),
            (&[3, 1, 4, 2], &[1, 3]),
            (&[300, 260], &[0]),
            (&[300, 260], &[1]),
            (&[70_000], &[0]),
            (&[5, 200, 70], &[1]),
            // Column reductions in row chunks (a partial chunk at the end).
            (&[1100, 257], &[0]),
            (&[4, 260, 300], &[0, 1]),
        ];
        for &(shape, ax) in cases {
            let n: usize = shape.iter().product();
            let xs = rng.vec(n, -2.0, 2.0);
            let rank = shape.len() as i64;
            let axes: Vec<usize> = if ax.is_empty() {
                (0..shape.len()).collect()
            } else {
                ax.iter().map(|&a| ((a + rank) % rank) as usize).collect()
            };
            // float32 column sums of over 512 rows (rounded as they go, as numpy's
            // are) get a wider tolerance; whole-range sums are pairwise.
            let count: usize = axes.iter().map(|&a| shape[a]).product();
            let tol32 = if shape.len() > 1 && count > 512 { 1e-4 } else { 1e-5 };
            for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"] {
                let want = naive(&xs, shape, &axes, op);
                for (dt, tol) in [(DataType::Float64, 1e-12), (DataType::Float32, tol32)] {
                    let x = t(dt, shape, &xs);
                    let xv = x.to_f64_vec();
                    let want = if dt == DataType::Float64 { want.clone() } else { naive(&xv, shape, &axes, op) };
                    for keep in [false, true] {
                        let out = &run_op(op, attrs(ax, keep), &[(0, x.clone())])[0];
                        assert_close(&out.to_f64_vec(), &want, tol);
                    }
                }
            }
        }
    }

    #[test]
    fn integer_and_half_reductions() {
        let x = t(DataType::Int32, &[2, 3], &[1.0, -2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(run_op("ReduceSum", attrs(&[1], false), &[(0, x.clone())])[0].to_f64_vec(), vec![2.0, 15.0]);
        assert_eq!(run_op("ReduceMax", attrs(&[0], false), &[(0, x.clone())])[0].to_f64_vec(), vec![4.0, 5.0, 6.0]);
        assert_eq!(run_op("ReduceMean", attrs(&[], false), &[(0, x)])[0].to_f64_vec(), vec![2.0]);
        let h = t(DataType::Float16, &[4], &[0.5, 1.5, 2.0, 4.0]);
        assert_eq!(run_op("ReduceMean", attrs(&[], false), &[(0, h)])[0].to_f64_vec(), vec![2.0]);
    }

    #[test]
    fn long_float32_sums_stay_accurate() {
        // 2^20 copies of 0.1f32: naive sequential f32 summation drifts by about 1%.
        let n = 1 << 20;
        let x = t(DataType::Float32, &[n], &vec![0.1; n]);
        let want = n as f64 * (0.1f32 as f64);
        let got = run_op("ReduceSum", attrs(&[], false), &[(0, x)])[0].to_f64_vec()[0];
        assert!((got - want).abs() / want < 1e-6, "{got} vs {want}");
    }

    #[test]
    fn max_propagates_nan() {
        let x = t(DataType::Float32, &[3], &[1.0, f64::NAN, 2.0]);
        assert!(run_op("ReduceMax", attrs(&[], false), &[(0, x)])[0].to_f64_vec()[0].is_nan());
    }

    #[test]
    fn reduce_to_shape_sums_broadcast_dims() {
        let mut rng = Rng::new(5);
        for (xs, target) in [(&[2usize, 3, 4][..], &[3usize, 1][..]), (&[2, 3, 4], &[4]), (&[500, 300], &[300])] {
            let n: usize = xs.iter().product();
            let v = rng.vec(n, -1.0, 1.0);
            let a = ShapeAttrs { shape: target.iter().map(|&d| d as i64).collect() }.to_attrs();
            let out = &run_op("ReduceToShape", a, &[(0, t(DataType::Float64, xs, &v))])[0];
            assert_eq!(out.info.shape, target);
            // Reference: the dims broadcast from `target` are reduced.
            let off = xs.len() - target.len();
            let axes: Vec<usize> = (0..xs.len()).filter(|&d| d < off || target[d - off] == 1).collect();
            assert_close(&out.to_f64_vec(), &naive(&v, xs, &axes, "ReduceSum"), 1e-12);
        }
    }

    /// A column reduction in row chunks gives the same bits on one thread and on
    /// the whole team (its chunks depend on the shape only).
    #[test]
    fn column_chunks_do_not_depend_on_the_thread_count() {
        let v = Rng::new(6).vec(1500 * 300, -1.0, 1.0);
        let x = t(DataType::Float32, &[1500, 300], &v);
        let a = || ShapeAttrs { shape: vec![300] }.to_attrs();
        let one = crate::team::with_max_threads(1, || run_op("ReduceToShape", a(), &[(0, x.clone())]));
        let all = run_op("ReduceToShape", a(), &[(0, x.clone())]);
        assert_eq!(one[0].to_f64_vec(), all[0].to_f64_vec());
        assert_close(&all[0].to_f64_vec(), &naive(&x.to_f64_vec(), &[1500, 300], &[0], "ReduceSum"), 1e-5);
    }
}
