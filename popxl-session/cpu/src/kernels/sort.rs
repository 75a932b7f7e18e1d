//! Order statistics along one axis: `ArgMax`, `ArgMin`, `TopK`, `TopKGrad` and
//! `Histogram`.
//!
//! The input is viewed as `[outer, n, inner]` around the axis; a lane is one
//! `(outer, inner)` pair, whose `n` elements are `inner` apart. NaN compares
//! above every number (so `ArgMax`, `ArgMin` and `TopK{largest}` pick the first
//! NaN, `TopK{smallest}` never prefers it); ties keep the lower index.

use std::cmp::Ordering;
use std::sync::Mutex;

use popart_ir::DataType;

use super::dispatch::{with_float, with_num};
use super::elem::Num;
use super::float16::{f16_adapter, has_f16};
use super::par::Simd;
use super::ptr::{slice, slice_mut};
use super::spec::{boxed, norm_axis, BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelRunError, KernelSpec};
use popart_ir::ops::all as ir;
use popart_ir::ops::sort::{ArgReduceAttrs, HistogramAttrs, TopKAttrs, TopKGradAttrs};

/// Total order of the kernels: NaN above every number, NaNs equal.
#[inline(always)]
#[allow(clippy::eq_op)]
fn order<T: Num>(a: T, b: T) -> Ordering {
    match a.partial_cmp(&b) {
        Some(o) => o,
        None => (a != a).cmp(&(b != b)),
    }
}

/// `[outer, n, inner]` of `shape` around `axis`.
fn lanes(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

/// `ArgMax` (`MAX = true`) or `ArgMin` along one axis.
struct Arg<T, const MAX: bool> {
    outer: usize,
    n: usize,
    inner: usize,
    src: usize,
    _t: Types<T>,
}

impl<T: Num, const MAX: bool> Arg<T, MAX> {
    /// True when `v` replaces the current best `b` (a later element must be strictly better).
    #[inline(always)]
    #[allow(clippy::eq_op)]
    fn better(v: T, b: T) -> bool {
        let nan = v != v && b == b;
        nan || if MAX { v > b } else { v < b }
    }
    /// The first extreme of a contiguous row, in one pass over blocks of 64:
    /// per block, the extreme of each of 8 lanes (a tree of vector max or min)
    /// and a NaN detector (the block's sum added to a running sum: NaN if an
    /// element is NaN, or by overflow, which only costs the exact search);
    /// each lane keeps its running extreme and the first block that reached it.
    /// The answer is the first match in the earliest block holding the extreme,
    /// then the tail. A fired detector sends the row to the exact NaN search: a
    /// NaN anywhere returns the first NaN.
    #[inline(always)]
    #[allow(clippy::eq_op)]
    fn arg_row(xs: &[T]) -> usize {
        const L: usize = 8;
        const B: usize = 8 * L;
        let Some(&first) = xs.first() else { return 0 };
        let pick = |v: T, b: T| if (MAX && v > b) || (!MAX && v < b) { v } else { b };
        let mut best = [first; L];
        let mut block = [0usize; L];
        let mut chk = [T::ZERO; L];
        let blocks = xs.chunks_exact(B);
        let rest = blocks.remainder();
        let full = xs.len() / B;
        for (k, c) in blocks.enumerate() {
            let mut m = [T::ZERO; L];
            let mut sum = [T::ZERO; L];
            for l in 0..L {
                let v = |j: usize| c[j * L + l];
                m[l] = pick(pick(pick(v(0), v(1)), pick(v(2), v(3))), pick(pick(v(4), v(5)), pick(v(6), v(7))));
                sum[l] = v(0).add(v(1)).add(v(2).add(v(3))).add(v(4).add(v(5)).add(v(6).add(v(7))));
            }
            for l in 0..L {
                chk[l] = chk[l].add(sum[l]);
                let better = if MAX { m[l] > best[l] } else { m[l] < best[l] };
                best[l] = if better { m[l] } else { best[l] };
                block[l] = if better { k } else { block[l] };
            }
        }
        if chk.iter().any(|&c| c != c) || rest.iter().any(|&v| v != v) {
            if let Some(p) = xs.iter().position(|&v| v != v) {
                return p;
            }
        }
        let (mut m, mut pos) = (first, 0);
        if full > 0 {
            for &b in &best {
                m = pick(b, m);
            }
            let k = (0..L).filter(|&l| best[l] == m).map(|l| block[l]).min().unwrap_or(0);
            pos = k * B + xs[k * B..(k + 1) * B].iter().position(|&v| v == m).unwrap_or(0);
        }
        for (j, &v) in rest.iter().enumerate() {
            if if MAX { v > m } else { v < m } {
                m = v;
                pos = full * B + j;
            }
        }
        pos
    }
}

impl<T: Num, const MAX: bool> Kernel for Arg<T, MAX> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (x, y) = (args.inputs[self.src] as *const T, args.outputs[0] as *mut i32);
        // The compare-and-select loops need AVX2's blends to vectorise.
        Simd::for_cost(1).run_narrow(
            #[inline(always)]
            // SAFETY: `x` and `y` are this kernel's input and output buffers,
            // valid and disjoint (the `KernelArgs` contract of `run`).
            || unsafe { self.arg_all(x, y) },
        );
        Ok(())
    }
}

impl<T: Num, const MAX: bool> Arg<T, MAX> {
    /// Every output of the kernel.
    ///
    /// # Safety
    /// `x` and `y` are the kernel's input and output buffers.
    #[inline(always)]
    unsafe fn arg_all(&self, x: *const T, y: *mut i32) {
        let (n, inner) = (self.n, self.inner);
        for o in 0..self.outer {
            // SAFETY: `o < outer`: lane block `o` of `x`'s `outer * n * inner`
            // elements starts in bounds (this function's contract).
            let xo = unsafe { x.add(o * n * inner) };
            if inner == 1 {
                // SAFETY: with `inner == 1`, row `o` is `n` contiguous elements of `x`
                // and `y` holds `outer` outputs; the output overlaps no input.
                unsafe { *y.add(o) = Self::arg_row(slice(xo, n)) as i32 };
                continue;
            }
            // Lanes in blocks: running best values and indices on the stack.
            const B: usize = 64;
            let mut c0 = 0;
            while c0 < inner {
                let w = B.min(inner - c0);
                let mut best = [T::ZERO; B];
                let mut idx = [0i32; B];
                // SAFETY: `c0 + w <= inner`: columns `c0..c0 + w` of row 0 of block `o`.
                best[..w].copy_from_slice(unsafe { slice(xo.add(c0), w) });
                for j in 1..n {
                    // SAFETY: `j < n` and `c0 + w <= inner`: within block `o` of `x`.
                    let row = unsafe { slice(xo.add(j * inner + c0), w) };
                    for ((b, i), &v) in best.iter_mut().zip(idx.iter_mut()).zip(row) {
                        if Self::better(v, *b) {
                            *b = v;
                            *i = j as i32;
                        }
                    }
                }
                // SAFETY: `y` holds `outer * inner` outputs and `c0 + w <= inner`; the
                // output overlaps no input.
                unsafe { slice_mut(y.add(o * inner + c0), w) }.copy_from_slice(&idx[..w]);
                c0 += w;
            }
        }
    }
}

fn build_arg(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_arg);
    }
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    let axis = norm_axis(spec, spec.typed::<ArgReduceAttrs>()?.axis, x.info.rank())?;
    let (outer, n, inner) = lanes(x.shape(), axis);
    if y.dtype() != DataType::Int32 || y.nelms() != outer * inner || (n == 0 && y.nelms() > 0) {
        return Err(spec.error(format!("output {} is not the int32 arg-reduction of {} along {axis}", y.info, x.info)));
    }
    let dt = x.dtype();
    let src = x.pos;
    if spec.is::<ir::ArgMax>() {
        with_num!(dt, T => boxed(Arg::<T, true> { outer, n, inner, src, _t: Types::default() }),
            _ => Err(spec.unsupported_dtype(dt)))
    } else {
        with_num!(dt, T => boxed(Arg::<T, false> { outer, n, inner, src, _t: Types::default() }),
            _ => Err(spec.unsupported_dtype(dt)))
    }
}

/// `TopK`: per lane, small `k` keeps a sorted buffer of the best `k` seen (most
/// elements cost one comparison); larger `k` selects over an index buffer.
struct TopK<T> {
    outer: usize,
    n: usize,
    inner: usize,
    k: usize,
    largest: bool,
    sorted: bool,
    src: usize,
    scratch: Mutex<(Vec<T>, Vec<u32>)>,
}

/// Below this `k` the insertion buffer is used.
const SMALL_K: usize = 32;

impl<T: Num> TopK<T> {
    /// True when `(a, ia)` ranks before `(b, ib)`.
    #[inline(always)]
    fn before(&self, a: T, ia: u32, b: T, ib: u32) -> bool {
        let o = order(a, b);
        let o = if self.largest { o.reverse() } else { o };
        o == Ordering::Less || (o == Ordering::Equal && ia < ib)
    }

    /// The top `k` of `vals` (the lane's `n` values) into `bv`, `bi` (length `k`), best first.
    fn select(&self, vals: &[T], bv: &mut [T], bi: &mut [u32], idx: &mut [u32]) {
        let k = self.k;
        if k == 0 {
            return;
        }
        if k <= SMALL_K {
            let mut filled = 0;
            for (i, &v) in vals.iter().enumerate() {
                let i = i as u32;
                if filled == k {
                    // Most elements: one comparison with the k-th best (a number).
                    let t = bv[k - 1];
                    // Negated comparisons on purpose: NaN never passes `v > t` nor `v < t`.
                    #[allow(clippy::eq_op, clippy::neg_cmp_op_on_partial_ord)]
                    let reject = t == t && if self.largest { !(v > t) && v == v } else { !(v < t) };
                    if reject || !self.before(v, i, t, bi[k - 1]) {
                        continue;
                    }
                }
                // Insert after every element ranking before (or tied with, lower index) it.
                let mut p = filled.min(k - 1);
                while p > 0 && self.before(v, i, bv[p - 1], bi[p - 1]) {
                    bv[p] = bv[p - 1];
                    bi[p] = bi[p - 1];
                    p -= 1;
                }
                bv[p] = v;
                bi[p] = i;
                filled = (filled + 1).min(k);
            }
        } else {
            for (j, slot) in idx.iter_mut().enumerate() {
                *slot = j as u32;
            }
            let cmp = |a: &u32, b: &u32| {
                let (va, vb) = (vals[*a as usize], vals[*b as usize]);
                if self.before(va, *a, vb, *b) {
                    Ordering::Less
                } else if self.before(vb, *b, va, *a) {
                    Ordering::Greater
                } else {
                    Ordering::Equal
                }
            };
            if k < idx.len() {
                idx.select_nth_unstable_by(k - 1, cmp);
            }
            idx[..k].sort_unstable_by(cmp);
            for ((v, i), &j) in bv.iter_mut().zip(bi.iter_mut()).zip(&idx[..k]) {
                *v = vals[j as usize];
                *i = j;
            }
        }
        if !self.sorted {
            // Index order.
            let mut pairs = [(T::ZERO, 0u32); SMALL_K];
            if k <= SMALL_K {
                for (p, (&v, &i)) in pairs.iter_mut().zip(bv.iter().zip(bi.iter())) {
                    *p = (v, i);
                }
                pairs[..k].sort_unstable_by_key(|p| p.1);
                for (p, (v, i)) in pairs.iter().zip(bv.iter_mut().zip(bi.iter_mut())) {
                    (*v, *i) = *p;
                }
            } else {
                idx[..k].sort_unstable();
                for ((v, i), &j) in bv.iter_mut().zip(bi.iter_mut()).zip(&idx[..k]) {
                    *v = vals[j as usize];
                    *i = j;
                }
            }
        }
    }
}

impl<T: Num> Kernel for TopK<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let x = args.inputs[self.src] as *const T;
        let (yv, yi) = (args.outputs[0] as *mut T, args.outputs[1] as *mut i32);
        let (n, inner, k) = (self.n, self.inner, self.k);
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let (vals, idx) = &mut *guard;
        // Scratch: a gathered lane and the selection slots (n each), then the best
        // values and indices of a large k.
        let (lane_buf, big_v) = vals.split_at_mut(n);
        let (sel, big_i) = idx.split_at_mut(n);
        let mut bv_small = [T::ZERO; SMALL_K];
        let mut bi_small = [0u32; SMALL_K];
        let (bv, bi): (&mut [T], &mut [u32]) =
            if k <= SMALL_K { (&mut bv_small[..k], &mut bi_small[..k]) } else { (&mut big_v[..k], &mut big_i[..k]) };
        for o in 0..self.outer {
            for c in 0..inner {
                let base = o * n * inner + c;
                let lane: &[T] = if inner == 1 {
                    // SAFETY: with `inner == 1` lane `o` is `n` contiguous elements of
                    // the input's `outer * n` (the `KernelArgs` contract).
                    unsafe { slice(x.add(base), n) }
                } else {
                    for (j, v) in lane_buf.iter_mut().enumerate() {
                        // SAFETY: `base + j * inner < outer * n * inner` for `j < n`
                        // (`lane_buf` has `n` elements): inside the input.
                        *v = unsafe { *x.add(base + j * inner) };
                    }
                    lane_buf
                };
                self.select(lane, bv, bi, sel);
                let out = o * k * inner + c;
                for j in 0..k {
                    // SAFETY: both outputs hold `outer * k * inner` elements and
                    // `out + j * inner` is below that for `j < k`; they overlap no
                    // input nor each other (the `KernelArgs` contract).
                    unsafe {
                        *yv.add(out + j * inner) = bv[j];
                        *yi.add(out + j * inner) = bi[j] as i32;
                    }
                }
            }
        }
        Ok(())
    }
}

fn build_topk(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_topk);
    }
    let (x, yv, yi) = (spec.input(0)?, spec.output(0)?, spec.output(1)?);
    let TopKAttrs { k, axis, largest, sorted } = spec.typed()?;
    let axis = norm_axis(spec, axis, x.info.rank())?;
    let (outer, n, inner) = lanes(x.shape(), axis);
    let k = usize::try_from(k).ok().filter(|&k| k <= n && n <= i32::MAX as usize);
    let Some(k) = k else {
        return Err(spec.error(format!("`k` must be in [0, {n}] for {} along axis {axis}", x.info)));
    };
    let mut shape = x.shape().to_vec();
    shape[axis] = k;
    if yv.dtype() != x.dtype() || yv.shape() != shape || yi.dtype() != DataType::Int32 || yi.shape() != shape {
        return Err(spec.error(format!("outputs {} and {} are not the top-{k} of {}", yv.info, yi.info, x.info)));
    }
    let dt = x.dtype();
    let alloc = |what: &str, e: popart_ir::size::SizeError| -> KernelError { spec.error(format!("{what}: {e}")) };
    with_num!(dt, T => {
        // Values scratch: a gathered lane (n) then the best values of large k (k);
        // index scratch: n selection slots then the best indices of large k.
        let vals = popart_ir::size::try_zeroed_vec::<T>(n + k, "top-k scratch").map_err(|e| alloc("values", e))?;
        let idx = popart_ir::size::try_zeroed_vec::<u32>(n + k, "top-k scratch").map_err(|e| alloc("indices", e))?;
        let scratch = Mutex::new((vals, idx));
        boxed(TopK::<T> { outer, n, inner, k, largest, sorted, src: x.pos, scratch })
    }, _ => Err(spec.unsupported_dtype(dt)))
}

/// `TopKGrad(g, indices)`: zeros of the forward input's shape, `g` added at `indices` along the axis.
struct TopKGrad<T> {
    outer: usize,
    n: usize,
    inner: usize,
    k: usize,
    pos: [usize; 2],
    check: bool,
    _t: Types<T>,
}

impl<T: Num> Kernel for TopKGrad<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (g, ind) = (args.inputs[self.pos[0]] as *const T, args.inputs[self.pos[1]] as *const i32);
        let out = args.outputs[0] as *mut T;
        let (n, inner, k) = (self.n, self.inner, self.k);
        let m = self.outer * k * inner;
        if self.check {
            // SAFETY: the indices input has `g`'s shape, `outer * k * inner` elements
            // (checked at build).
            if let Some(&bad) = unsafe { slice(ind, m) }.iter().find(|&&i| i < 0 || i as usize >= n) {
                return Err(KernelRunError::IndexOutOfRange { index: bad.into(), bound: n });
            }
        }
        // SAFETY: the output has the forward input's `outer * n * inner` elements and
        // overlaps no input (the `KernelArgs` contract).
        unsafe { slice_mut(out, self.outer * n * inner) }.fill(T::ZERO);
        for o in 0..self.outer {
            for j in 0..k {
                let src = (o * k + j) * inner;
                // SAFETY: `g` and the indices hold `outer * k * inner` elements; row
                // `(o, j)` is `inner` of them.
                let (gs, is) = unsafe { (slice(g.add(src), inner), slice(ind.add(src), inner)) };
                for (c, (&gv, &i)) in gs.iter().zip(is).enumerate() {
                    if i >= 0 && (i as usize) < n {
                        // SAFETY: `0 <= i < n` (just checked) and `c < inner`: inside the
                        // output's `outer * n * inner` elements, which no input aliases.
                        unsafe {
                            let p = out.add((o * n + i as usize) * inner + c);
                            *p = (*p).add(gv);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn build_topk_grad(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_topk_grad);
    }
    // The output has the forward input's shape (attribute `shape`).
    let (g, ind, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    let x = y;
    let axis = norm_axis(spec, spec.typed::<TopKGradAttrs>()?.axis, x.info.rank())?;
    let (outer, n, inner) = lanes(x.shape(), axis);
    let k = g.shape().get(axis).copied().unwrap_or(0);
    let fits = y.info == x.info
        && g.dtype() == x.dtype()
        && g.nelms() == outer * k * inner
        && ind.dtype() == DataType::Int32
        && ind.shape() == g.shape();
    if !fits {
        return Err(spec.error(format!("gradient {} and indices {} do not fit {}", g.info, ind.info, x.info)));
    }
    let dt = x.dtype();
    let (pos, check) = ([g.pos, ind.pos], spec.check_indices);
    with_num!(dt, T => boxed(TopKGrad::<T> { outer, n, inner, k, pos, check, _t: Types::default() }),
        _ => Err(spec.unsupported_dtype(dt)))
}

/// `Histogram`: bin of `v` = number of levels `l` with `!(v < l)` (NaN: the last bin).
struct Histogram<T> {
    levels: Vec<T>,
    abs: bool,
    n: usize,
    src: usize,
}

impl<T: Num> Kernel for Histogram<T> {
    // `!(v < l)` rather than `v >= l`: NaN counts in the last bin.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the input holds `n` elements and the output `levels + 1` bins
        // (checked at build); the output overlaps no input (the `KernelArgs` contract).
        let (xs, counts) = unsafe {
            (
                slice(args.inputs[self.src] as *const T, self.n),
                slice_mut(args.outputs[0] as *mut u32, self.levels.len() + 1),
            )
        };
        counts.fill(0);
        let levels = &self.levels[..];
        for &v in xs {
            let v = if self.abs { v.abs() } else { v };
            let bin = if levels.len() <= 16 {
                levels.iter().map(|&l| usize::from(!(v < l))).sum()
            } else {
                levels.partition_point(|&l| !(v < l))
            };
            counts[bin] = counts[bin].wrapping_add(1);
        }
        Ok(())
    }
}

fn build_histogram(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_histogram);
    }
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    let HistogramAttrs { levels, absolute_of_input: abs } = spec.typed()?;
    if y.dtype() != DataType::Uint32 || y.nelms() != levels.len() + 1 {
        return Err(spec.error(format!("output {} must be uint32 of {} bins", y.info, levels.len() + 1)));
    }
    let dt = x.dtype();
    let n = x.nelms();
    with_float!(dt, T => {
        let levels: Vec<T> = levels.iter().map(|&l| T::from_f64(l)).collect();
        boxed(Histogram::<T> { levels, abs, n, src: x.pos })
    }, _ => Err(spec.unsupported_dtype(dt)))
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::ArgMax, build_arg),
    (&ir::ArgMin, build_arg),
    (&ir::TopK, build_topk),
    (&ir::TopKGrad, build_topk_grad),
    (&ir::Histogram, build_histogram),
];
