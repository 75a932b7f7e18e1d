//! Neural-network kernels: `Softmax`, `SoftmaxGrad`, `NllLoss`,
//! `NllLossWithSoftmaxGrad` and `NllLossGrad`.
//!
//! Loss semantics (PopXL `nll_loss`): `probs` is `[N.., C]`, `labels` `[N..]`;
//! a row whose label equals `ignore_index` contributes 0 and is not counted;
//! `mean` divides by the number of counted rows (by 1 if every row is ignored,
//! so gradients stay finite). A label outside `[0, C)` that is not ignored is
//! treated like `ignore_index`: zero loss and zero gradient for its row, not
//! counted for `mean` (PopART's one-hot encoding leaves such a row all zero, so
//! its loss would be `-log(eps)`: a meaningless number we do not reproduce).
//! Built with run-time checks ([`KernelSpec::check_indices`]), the kernels
//! instead fail on such a label before writing anything.

use super::dispatch::{with_float, with_index};
use super::elem::{Float, IndexElem};
use super::float16::{f16_adapter, has_f16};
use super::par::{par_split, wide_simd, Simd, PAR_MIN_ELEMS};
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{boxed, norm_axis, BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelRunError, KernelSpec};
use popart_ir::ops::all as ir;
use popart_ir::ops::nn::{LossReduction, MaskedSoftmaxAttrs, NllLossAttrs, SoftmaxAttrs};

/// `[outer, len, inner]` view of a tensor around `axis`.
#[derive(Clone, Copy, Debug)]
struct AxisView {
    outer: usize,
    len: usize,
    inner: usize,
}

impl AxisView {
    fn new(shape: &[usize], axis: usize) -> Self {
        AxisView { outer: shape[..axis].iter().product(), len: shape[axis], inner: shape[axis + 1..].iter().product() }
    }
    /// Number of independent rows along the axis.
    fn rows(&self) -> usize {
        self.outer * self.inner
    }
    /// (first element, stride) of row `r`.
    fn row(&self, r: usize) -> (usize, usize) {
        let (o, j) = (r / self.inner, r % self.inner);
        (o * self.len * self.inner + j, self.inner)
    }
    /// Run `f(first, stride)` for every row, in parallel when large.
    fn for_rows(&self, f: impl Fn(usize, usize) + Sync + Send) {
        let total = self.rows() * self.len;
        let min_total = if total >= PAR_MIN_ELEMS { 0 } else { usize::MAX };
        par_split(
            self.rows(),
            min_total,
            (1 << 14) / self.len.max(1),
            #[inline(always)]
            |r| {
                for row in r {
                    let (first, stride) = self.row(row);
                    f(first, stride);
                }
            },
        );
    }
}

/// Lanes of the independent accumulators in the row loops below: 16 f32 (one
/// AVX-512 or two AVX2 registers), so the reductions vectorise.
const LANES: usize = 16;

/// `exp(x)` for softmax terms `x = v - max <= 0`, flushed to zero below -87
/// (`exp(-87) < 2^-125`): those terms cannot change a sum that contains
/// `exp(0) = 1`, and computing them would produce subnormal floats, whose
/// arithmetic is a hundred times slower on x86 (masked attention scores are
/// all such terms).
#[inline(always)]
pub(super) fn exp_ftz<T: Float>(x: T) -> T {
    if x < <T as super::elem::Num>::from_f64(-87.0) {
        T::ZERO
    } else {
        x.fast_exp()
    }
}

/// The largest element of `xs`, ignoring NaN (a NaN still makes the softmax row
/// NaN: `NaN - max` is NaN); `T::LOWEST` for an empty row.
#[inline(always)]
pub(super) fn row_max<T: Float>(xs: &[T]) -> T {
    let mut acc = [T::LOWEST; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    let m = acc.iter().fold(T::LOWEST, |m, &v| if v > m { v } else { m });
    rest.iter().fold(m, |m, &v| if v > m { v } else { m })
}

/// `sum(xs · ys)`, in lanes.
#[inline(always)]
pub(super) fn row_dot<T: Float>(xs: &[T], ys: &[T]) -> T {
    let mut acc = [T::ZERO; LANES];
    let (cx, cy) = (xs.chunks_exact(LANES), ys.chunks_exact(LANES));
    let (rx, ry) = (cx.remainder(), cy.remainder());
    for (a, b) in cx.zip(cy) {
        for ((s, &u), &v) in acc.iter_mut().zip(a).zip(b) {
            *s = *s + u * v;
        }
    }
    let tail = rx.iter().zip(ry).fold(T::ZERO, |s, (&u, &v)| s + u * v);
    acc.iter().fold(tail, |s, &v| s + v)
}

/// One contiguous softmax row: `ys = exp(xs - max) / sum`.
#[inline(always)]
fn softmax_row_loop<T: Float>(xs: &[T], ys: &mut [T]) {
    let max = row_max(xs);
    let mut acc = [T::ZERO; LANES];
    let (cx, cy) = (xs.chunks_exact(LANES), ys.chunks_exact_mut(LANES));
    let rx = cx.remainder();
    for (a, o) in cx.zip(cy) {
        for ((s, &v), y) in acc.iter_mut().zip(a).zip(o) {
            *y = exp_ftz(v - max);
            *s = *s + *y;
        }
    }
    let n = xs.len() - rx.len();
    let mut sum = acc.iter().fold(T::ZERO, |s, &v| s + v);
    for (&v, y) in rx.iter().zip(&mut ys[n..]) {
        *y = exp_ftz(v - max);
        sum = sum + *y;
    }
    let inv = T::ONE / sum;
    for y in ys {
        *y = *y * inv;
    }
}
wide_simd!(fn softmax_row<T: Float>(xs: &[T], ys: &mut [T]) => softmax_row_loop);

/// One masked softmax row: `ys = softmax(where(mask, xs · scale, fill))`; `mask`
/// has one byte per element, or one for the whole row.
#[inline(always)]
fn masked_softmax_row_loop<T: Float>(xs: &[T], mask: &[u8], scale: T, fill: T, ys: &mut [T]) {
    if mask.len() == 1 {
        let keep = mask[0] != 0;
        for (y, &x) in ys.iter_mut().zip(xs) {
            *y = if keep { x * scale } else { fill };
        }
    } else {
        for ((y, &x), &m) in ys.iter_mut().zip(xs).zip(mask) {
            *y = if m != 0 { x * scale } else { fill };
        }
    }
    let max = row_max(ys);
    let mut acc = [T::ZERO; LANES];
    let mut chunks = ys.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (s, y) in acc.iter_mut().zip(c) {
            *y = exp_ftz(*y - max);
            *s = *s + *y;
        }
    }
    let mut sum = acc.iter().fold(T::ZERO, |s, &v| s + v);
    for y in chunks.into_remainder() {
        *y = exp_ftz(*y - max);
        sum = sum + *y;
    }
    let inv = T::ONE / sum;
    for y in ys {
        *y = *y * inv;
    }
}
wide_simd!(fn masked_softmax_row<T: Float>(xs: &[T], mask: &[u8], scale: T, fill: T, ys: &mut [T]) => masked_softmax_row_loop);

/// `MaskedSoftmax{scale, fill}(x, mask)` along the last axis.
struct MaskedSoftmax<T> {
    len: usize,
    /// Offset of each row's mask in the mask tensor.
    mask_rows: Vec<usize>,
    /// The mask has one byte per element of a row (else one per row).
    mask_per_element: bool,
    scale: T,
    fill: T,
    simd: Simd,
}

impl<T: Float> Kernel for MaskedSoftmax<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (x, y) = (SendPtr(args.inputs[0] as *mut T), SendPtr(args.outputs[0] as *mut T));
        let mask = SendPtr(args.inputs[1] as *mut u8);
        let (len, rows) = (self.len, self.mask_rows.len());
        let mlen = if self.mask_per_element { len } else { 1 };
        let min_total = if rows * len >= PAR_MIN_ELEMS { 0 } else { usize::MAX };
        par_split(
            rows,
            min_total,
            (1 << 14) / len.max(1),
            #[inline(always)]
            |r| {
                for row in r {
                    // SAFETY: rows are disjoint; the mask offsets were computed from the
                    // mask's shape at build time.
                    unsafe {
                        let xs = slice(x.get().add(row * len), len);
                        let ys = slice_mut(y.get().add(row * len), len);
                        let m = slice(mask.get().add(self.mask_rows[row]), mlen);
                        masked_softmax_row(self.simd, xs, m, self.scale, self.fill, ys);
                    }
                }
            },
        );
        Ok(())
    }
}

/// Build `MaskedSoftmax`: the mask offset of every row, from the broadcast of the
/// mask's shape (right-aligned) to the input's.
fn build_masked_softmax(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, mask, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    if y.info != x.info || x.info.rank() == 0 || mask.dtype() != popart_ir::DataType::Bool {
        return Err(spec.error(format!("masked softmax of {} with mask {} into {}", x.info, mask.info, y.info)));
    }
    let shape = x.shape();
    let rank = shape.len();
    let ms = mask.shape();
    if ms.len() > rank {
        return Err(spec.error(format!("mask {} has a higher rank than the input {}", mask.info, x.info)));
    }
    let mut mshape = vec![1; rank - ms.len()];
    mshape.extend_from_slice(ms);
    if mshape.iter().zip(shape).any(|(&m, &d)| m != d && m != 1) {
        return Err(spec.error(format!("mask {} does not broadcast to {}", mask.info, x.info)));
    }
    // Row-major strides of the mask, 0 along broadcast dims.
    let mut strides = vec![0usize; rank];
    let mut acc = 1;
    for d in (0..rank).rev() {
        strides[d] = if mshape[d] == 1 { 0 } else { acc };
        acc *= mshape[d];
    }
    let len = shape[rank - 1];
    let rows: usize = shape[..rank - 1].iter().product();
    let mut mask_rows = Vec::with_capacity(rows);
    let mut idx = vec![0usize; rank.saturating_sub(1)];
    for _ in 0..rows {
        mask_rows.push(idx.iter().zip(&strides).map(|(&i, &s)| i * s).sum());
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    let mask_per_element = mshape[rank - 1] != 1 || len == 1;
    let MaskedSoftmaxAttrs { scale, fill, .. } = spec.typed()?;
    let dt = x.dtype();
    with_float!(dt, T => Ok(Box::new(MaskedSoftmax::<T> {
            len,
            mask_rows,
            mask_per_element,
            scale: <T as super::elem::Num>::from_f64(scale),
            fill: <T as super::elem::Num>::from_f64(fill),
            simd: Simd::best(),
        }) as Box<dyn Kernel>),
        _ => Err(spec.unsupported_dtype(dt)))
}

/// One contiguous softmax gradient row: `dx = y · (g - sum(g · y))`.
#[inline(always)]
fn softmax_grad_row_loop<T: Float>(g: &[T], y: &[T], dx: &mut [T]) {
    let dot = row_dot(g, y);
    for ((o, &gv), &yv) in dx.iter_mut().zip(g).zip(y) {
        *o = yv * (gv - dot);
    }
}
wide_simd!(fn softmax_grad_row<T: Float>(g: &[T], y: &[T], dx: &mut [T]) => softmax_grad_row_loop);

/// Softmax along an axis: `y = exp(x - max) / sum(exp(x - max))`.
struct Softmax<T> {
    view: AxisView,
    simd: Simd,
    _t: Types<T>,
}

impl<T: Float> Kernel for Softmax<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (x, y) = (SendPtr(args.inputs[0] as *mut T), SendPtr(args.outputs[0] as *mut T));
        let (len, simd) = (self.view.len, self.simd);
        self.view.for_rows(move |first, stride| {
            // SAFETY: rows are disjoint; all indices are inside the buffers.
            unsafe {
                let (x, y) = (x.get().add(first), y.get().add(first));
                if stride == 1 {
                    softmax_row(simd, slice(x, len), slice_mut(y, len));
                } else {
                    let max = (0..len).fold(T::LOWEST, |m, i| m.maximum(*x.add(i * stride)));
                    let mut sum = T::ZERO;
                    for i in 0..len {
                        let e = exp_ftz(*x.add(i * stride) - max);
                        *y.add(i * stride) = e;
                        sum = sum + e;
                    }
                    let inv = T::ONE / sum;
                    for i in 0..len {
                        *y.add(i * stride) = *y.add(i * stride) * inv;
                    }
                }
            }
        });
        Ok(())
    }
}

/// `dx = y · (g - sum(g · y))` along an axis.
struct SoftmaxGrad<T> {
    view: AxisView,
    pos: [usize; 2],
    simd: Simd,
    _t: Types<T>,
}

impl<T: Float> Kernel for SoftmaxGrad<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let g = SendPtr(args.inputs[self.pos[0]] as *mut T);
        let y = SendPtr(args.inputs[self.pos[1]] as *mut T);
        let dx = SendPtr(args.outputs[0] as *mut T);
        let (len, simd) = (self.view.len, self.simd);
        self.view.for_rows(move |first, s| {
            // SAFETY: rows are disjoint; all indices are inside the buffers.
            unsafe {
                let (g, y, dx) = (g.get().add(first), y.get().add(first), dx.get().add(first));
                if s == 1 {
                    softmax_grad_row(simd, slice(g, len), slice(y, len), slice_mut(dx, len));
                    return;
                }
                let dot = (0..len).fold(T::ZERO, |acc, i| acc + *g.add(i * s) * *y.add(i * s));
                for i in 0..len {
                    *dx.add(i * s) = *y.add(i * s) * (*g.add(i * s) - dot);
                }
            }
        });
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reduction {
    Mean,
    Sum,
    None,
}

/// Shared configuration of the loss kernels.
#[derive(Clone, Copy, Debug)]
struct Nll {
    rows: usize,
    classes: usize,
    reduction: Reduction,
    ignore: Option<i64>,
    /// Fail on labels out of range instead of ignoring them.
    check: bool,
    /// The inputs are log-probabilities (PopXL `log_prob=True`).
    log_prob: bool,
}

impl Nll {
    fn from_spec(spec: &KernelSpec<'_>, probs: u32, labels: u32) -> Result<Self, crate::kernel::KernelError> {
        let (p, l) = (spec.input(probs)?, spec.input(labels)?);
        if p.info.rank() < 1 || l.shape() != &p.shape()[..p.info.rank() - 1] {
            return Err(spec.error(format!("labels {} do not match probs {} without the class dim", l.info, p.info)));
        }
        let NllLossAttrs { reduction, ignore_index, log_prob } = spec.typed()?;
        let reduction = match reduction {
            LossReduction::Mean => Reduction::Mean,
            LossReduction::Sum => Reduction::Sum,
            LossReduction::None => Reduction::None,
        };
        let Some(&classes) = p.shape().last() else { return Err(spec.error("probs must have a class dimension")) };
        let check = spec.check_indices;
        if log_prob && spec.is::<ir::NllLossWithSoftmaxGrad>() {
            return Err(spec.error("log_prob inputs have no softmax gradient form"));
        }
        Ok(Nll { rows: l.nelms(), classes, reduction, ignore: ignore_index, check, log_prob })
    }

    /// The class of a row's label: `None` if ignored or out of range.
    #[inline(always)]
    fn class<L: IndexElem>(&self, label: L) -> Option<usize> {
        let v = label.to_i64();
        (self.ignore != Some(v) && v >= 0 && (v as usize) < self.classes).then_some(v as usize)
    }

    /// With run-time checks, the first label that is neither ignored nor in
    /// range as an error.
    ///
    /// # Safety
    /// `labels` holds `rows` labels.
    unsafe fn check_labels<L: IndexElem>(&self, labels: *const L) -> KernelResult {
        if self.check {
            // SAFETY: `rows` labels (this function's contract).
            for &l in unsafe { slice(labels, self.rows) } {
                let v = l.to_i64();
                if self.ignore != Some(v) && self.class(l).is_none() {
                    return Err(KernelRunError::IndexOutOfRange { index: v, bound: self.classes });
                }
            }
        }
        Ok(())
    }

    /// Number of counted rows (in range, not ignored), at least 1.
    ///
    /// # Safety
    /// `labels` holds `rows` labels.
    unsafe fn count<L: IndexElem>(&self, labels: *const L) -> usize {
        // SAFETY: `rows` labels (this function's contract).
        let ls = unsafe { slice(labels, self.rows) };
        ls.iter().filter(|&&l| self.class(l).is_some()).count().max(1)
    }

    /// Write the loss (per row or reduced) from `probs` and `labels`.
    ///
    /// # Safety
    /// `p` holds `rows · classes` probabilities, `labels` `rows` labels and `out`
    /// the loss (`rows` elements for `none`, else one), overlapping neither.
    unsafe fn loss<T: Float, L: IndexElem>(&self, p: *const T, labels: *const L, out: *mut T) {
        // SAFETY: `rows` labels (this function's contract).
        let ls = unsafe { slice(labels, self.rows) };
        // SAFETY: `i < rows` (callers below) and `class` only returns `c < classes`:
        // inside the `rows · classes` probabilities.
        let row_loss = |i: usize| unsafe {
            match self.class(ls[i]) {
                Some(c) if self.log_prob => -*p.add(i * self.classes + c),
                Some(c) => -(*p.add(i * self.classes + c)).ln(),
                None => T::ZERO,
            }
        };
        match self.reduction {
            Reduction::None => {
                // SAFETY: for `none` the loss holds `rows` elements (this function's
                // contract).
                for (i, o) in unsafe { slice_mut(out, self.rows) }.iter_mut().enumerate() {
                    *o = row_loss(i);
                }
            }
            r => {
                let sum = (0..self.rows).fold(T::ZERO, |acc, i| acc + row_loss(i));
                // SAFETY: a reduced loss is one element; `labels` as above.
                unsafe {
                    *out = if r == Reduction::Mean { sum / T::from_f64(self.count(labels) as f64) } else { sum };
                }
            }
        }
    }
}

/// `NllLoss(probs, labels) -> loss`.
struct NllLoss<T, L> {
    nll: Nll,
    _t: Types<(T, L)>,
}

impl<T: Float, L: IndexElem> Kernel for NllLoss<T, L> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let labels = args.inputs[1] as *const L;
        // SAFETY: inputs 0 and 1 are the `[rows, classes]` probabilities and the
        // `rows` labels (checked at build), output 0 the loss (its shape inferred
        // from the reduction), which overlaps no input (the `KernelArgs` contract).
        unsafe {
            self.nll.check_labels(labels)?;
            self.nll.loss::<T, L>(args.inputs[0] as *const T, labels, args.outputs[0] as *mut T);
        }
        Ok(())
    }
}

/// `NllLossWithSoftmaxGrad(probs, labels[, loss_grad]) -> (loss, dlogits)` with
/// `dlogits = (probs - onehot(label)) · loss_grad / N` (`N`: counted rows for mean, else 1).
struct NllSoftmaxGrad<T, L> {
    nll: Nll,
    loss_grad: Option<usize>,
    _t: Types<(T, L)>,
}

impl<T: Float, L: IndexElem> Kernel for NllSoftmaxGrad<T, L> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let nll = self.nll;
        let p = args.inputs[0] as *const T;
        let labels = args.inputs[1] as *const L;
        // SAFETY: inputs 0 and 1 are the `[rows, classes]` probabilities and the
        // `rows` labels (checked at build), output 0 the loss (its shape inferred
        // from the reduction), which overlaps no input (the `KernelArgs` contract);
        // `loss_grad` is a scalar input (checked at build).
        let mut scale = unsafe {
            nll.check_labels(labels)?;
            nll.loss::<T, L>(p, labels, args.outputs[0] as *mut T);
            self.loss_grad.map_or(T::ONE, |pos| *(args.inputs[pos] as *const T))
        };
        if nll.reduction == Reduction::Mean {
            // SAFETY: `rows` labels, as above.
            scale = scale / T::from_f64(unsafe { nll.count(labels) } as f64);
        }
        let (p, l, dx) = (SendPtr(p as *mut T), SendPtr(labels as *mut L), SendPtr(args.outputs[1] as *mut T));
        let c = nll.classes;
        par_split(
            nll.rows,
            if nll.rows * c >= PAR_MIN_ELEMS { 0 } else { usize::MAX },
            1,
            #[inline(always)]
            move |r| {
                // SAFETY: each row writes its own block of dlogits.
                unsafe {
                    for i in r {
                        let (ps, ds) = (slice(p.get().add(i * c), c), slice_mut(dx.get().add(i * c), c));
                        match nll.class(*l.get().add(i)) {
                            Some(k) => {
                                for (d, &v) in ds.iter_mut().zip(ps) {
                                    *d = v * scale;
                                }
                                ds[k] = (ps[k] - T::ONE) * scale;
                            }
                            None => ds.fill(T::ZERO),
                        }
                    }
                }
            },
        );
        Ok(())
    }
}

/// `NllLossGrad(g, probs, labels) -> dprobs`: `-g / p` (`-g` for log-probabilities)
/// at each label (divided by the counted rows for mean), zero elsewhere; `g` is
/// per row for `none`.
struct NllLossGrad<T, L> {
    nll: Nll,
    pos: [usize; 3],
    _t: Types<(T, L)>,
}

impl<T: Float, L: IndexElem> Kernel for NllLossGrad<T, L> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let nll = self.nll;
        let g = args.inputs[self.pos[0]] as *const T;
        let p = args.inputs[self.pos[1]] as *const T;
        let labels = args.inputs[self.pos[2]] as *const L;
        // SAFETY: `rows` labels (checked at build).
        unsafe { nll.check_labels(labels)? };
        let c = nll.classes;
        // SAFETY: the output has the probabilities' `rows · classes` elements and
        // overlaps no input (the `KernelArgs` contract).
        let dx = unsafe { slice_mut(args.outputs[0] as *mut T, nll.rows * c) };
        dx.fill(T::ZERO);
        // SAFETY: a reduced loss's `g` is one element (checked at build); `rows`
        // labels. For `none` (`g` of `rows` elements, maybe none) `g` is not read
        // here and `scale` is unused.
        let scale = unsafe {
            match nll.reduction {
                Reduction::Mean => *g / T::from_f64(nll.count(labels) as f64),
                Reduction::Sum => *g,
                Reduction::None => T::ZERO,
            }
        };
        // SAFETY: `rows` labels (checked at build).
        for (i, &label) in unsafe { slice(labels, nll.rows) }.iter().enumerate() {
            // SAFETY: for `none`, `g` holds `rows` elements and `i < rows`.
            let gi = if nll.reduction == Reduction::None { unsafe { *g.add(i) } } else { scale };
            if let Some(k) = nll.class(label) {
                // SAFETY: `i < rows` and `k < classes` (`class`): inside the
                // `rows · classes` probabilities.
                dx[i * c + k] = if nll.log_prob { -gi } else { -(gi / unsafe { *p.add(i * c + k) }) };
            }
        }
        Ok(())
    }
}

/// Build the kernels of this family.
pub(crate) fn build(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build);
    }
    match () {
        _ if spec.is::<ir::Softmax>() || spec.is::<ir::SoftmaxGrad>() => {
            let x = spec.input(if spec.is::<ir::Softmax>() { 0 } else { 1 })?;
            let y = spec.output(0)?;
            if y.info != x.info {
                return Err(spec.error(format!("output {} differs from input {}", y.info, x.info)));
            }
            if x.info.rank() == 0 {
                return Err(spec.error("softmax of a scalar"));
            }
            let axis = norm_axis(spec, spec.typed::<SoftmaxAttrs>()?.axis, x.info.rank())?;
            let view = AxisView::new(x.shape(), axis);
            let dt = x.dtype();
            if spec.is::<ir::Softmax>() {
                with_float!(dt, T => boxed(Softmax::<T> { view, simd: Simd::best(), _t: Types::default() }),
                    _ => Err(spec.unsupported_dtype(dt)))
            } else {
                let g = spec.input(0)?;
                if g.info != x.info {
                    return Err(spec.error(format!("gradient {} differs from the softmax output {}", g.info, x.info)));
                }
                let pos = [g.pos, x.pos];
                with_float!(dt, T => boxed(SoftmaxGrad::<T> { view, pos, simd: Simd::best(), _t: Types::default() }),
                    _ => Err(spec.unsupported_dtype(dt)))
            }
        }
        _ if spec.is::<ir::NllLoss>() || spec.is::<ir::NllLossWithSoftmaxGrad>() => {
            let nll = Nll::from_spec(spec, 0, 1)?;
            let (p, l) = (spec.input(0)?, spec.input(1)?);
            let bad_labels = || spec.error(format!("labels must be integers, got {}", l.dtype()));
            if p.pos != 0 || l.pos != 1 {
                return Err(spec.error("probs and labels must be inputs 0 and 1"));
            }
            let dt = p.dtype();
            if spec.output(0)?.dtype() != dt {
                return Err(spec.error("loss dtype must equal probs dtype"));
            }
            if spec.is::<ir::NllLoss>() {
                with_float!(dt, T => with_index!(l.dtype(), L => boxed(NllLoss::<T, L> { nll, _t: Types::default() }),
                    _ => Err(bad_labels())),
                    _ => Err(spec.unsupported_dtype(dt)))
            } else {
                let lg = spec.opt_input(2);
                if lg.is_some_and(|g| g.nelms() != 1 || g.dtype() != dt) {
                    return Err(spec.error("loss_grad must be a scalar of the probs dtype"));
                }
                if spec.output(1)?.info != p.info {
                    return Err(spec.error("dlogits must have the type and shape of probs"));
                }
                let loss_grad = lg.map(|g| g.pos);
                with_float!(dt, T => with_index!(l.dtype(), L =>
                    boxed(NllSoftmaxGrad::<T, L> { nll, loss_grad, _t: Types::default() }),
                    _ => Err(bad_labels())),
                    _ => Err(spec.unsupported_dtype(dt)))
            }
        }
        _ if spec.is::<ir::NllLossGrad>() => {
            let nll = Nll::from_spec(spec, 1, 2)?;
            let (g, p, l) = (spec.input(0)?, spec.input(1)?, spec.input(2)?);
            let bad_labels = || spec.error(format!("labels must be integers, got {}", l.dtype()));
            let dt = p.dtype();
            let want_g = if nll.reduction == Reduction::None { nll.rows } else { 1 };
            if g.nelms() != want_g || g.dtype() != dt {
                return Err(spec.error(format!("gradient {} does not match the loss", g.info)));
            }
            if spec.output(0)?.info != p.info {
                return Err(spec.error("output must have the type and shape of probs"));
            }
            let pos = [g.pos, p.pos, l.pos];
            with_float!(dt, T => with_index!(l.dtype(), L =>
                boxed(NllLossGrad::<T, L> { nll, pos, _t: Types::default() }),
                _ => Err(bad_labels())),
                _ => Err(spec.unsupported_dtype(dt)))
        }
        _ => Err(spec.error(format!("`{}` is not an nn op", spec.op_type()))),
    }
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::Softmax, build),
    (&ir::NllLoss, build),
    (&ir::NllLossWithSoftmaxGrad, build),
    (&ir::SoftmaxGrad, build),
    (&ir::NllLossGrad, build),
    (&ir::MaskedSoftmax, build_masked_softmax),
];

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, numeric_grad, run_op, t, try_run_op_checked, Rng};
    use crate::kernel::KernelRunError;
    use popart_ir::ops::nn::LossReduction::{Mean, Sum};
    use popart_ir::ops::nn::{LossReduction, MaskedSoftmaxAttrs, NllLossAttrs, SoftmaxAttrs};
    use popart_ir::{Attributes, DataType, OpAttrs};

    fn softmax_ref(x: &[f64], shape: &[usize], axis: usize) -> Vec<f64> {
        let outer: usize = shape[..axis].iter().product();
        let len = shape[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        let mut y = vec![0.0; x.len()];
        for o in 0..outer {
            for j in 0..inner {
                let idx = |i: usize| o * len * inner + i * inner + j;
                let m = (0..len).map(|i| x[idx(i)]).fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = (0..len).map(|i| (x[idx(i)] - m).exp()).sum();
                for i in 0..len {
                    y[idx(i)] = (x[idx(i)] - m).exp() / s;
                }
            }
        }
        y
    }

    fn axis(a: i64) -> Attributes {
        SoftmaxAttrs { axis: a }.to_attrs()
    }

    #[test]
    fn softmax_matches_reference_on_every_axis() {
        let mut rng = Rng::new(1);
        let shape = [3, 4, 5];
        let x = rng.vec(60, -3.0, 3.0);
        for ax in 0..3 {
            let want = softmax_ref(&x, &shape, ax);
            for (dt, tol) in [(DataType::Float64, 1e-14), (DataType::Float32, 1e-6), (DataType::Float16, 2e-3)] {
                let out = &run_op("Softmax", axis(ax as i64 - 3), &[(0, t(dt, &shape, &x))])[0];
                assert_close(&out.to_f64_vec(), &want, tol);
            }
        }
        // Large logits do not overflow; large tensors run in parallel.
        let out = &run_op("Softmax", axis(-1), &[(0, t(DataType::Float32, &[2], &[1000.0, 1000.0]))])[0];
        assert_eq!(out.to_f64_vec(), vec![0.5, 0.5]);
        let big = rng.vec(300 * 257, -5.0, 5.0);
        let out = &run_op("Softmax", axis(1), &[(0, t(DataType::Float64, &[300, 257], &big))])[0];
        assert_close(&out.to_f64_vec(), &softmax_ref(&big, &[300, 257], 1), 1e-14);
    }

    #[test]
    fn masked_softmax_matches_where_then_softmax() {
        let mut rng = Rng::new(7);
        let (b, h, n) = (2, 3, 37);
        let shape = [b, h, n, n];
        let x = rng.vec(b * h * n * n, -4.0, 4.0);
        let (scale, fill) = (0.125, -1e9);
        // Causal [n, n] mask, a per-row [n, 1] mask, and a full-shape mask.
        let causal: Vec<f64> = (0..n * n).map(|k| f64::from(u8::from(k % n <= k / n))).collect();
        let per_row: Vec<f64> = (0..n).map(|i| f64::from(u8::from(i % 3 != 0))).collect();
        let full: Vec<f64> = (0..x.len()).map(|k| f64::from(u8::from(k % 5 != 1))).collect();
        for (mshape, mask) in [(vec![n, n], &causal), (vec![n, 1], &per_row), (shape.to_vec(), &full)] {
            // Independent reference: broadcast the mask by index arithmetic, then softmax in f64.
            let (mr, mc) = (mshape[mshape.len() - 2.min(mshape.len())], mshape[mshape.len() - 1]);
            let masked: Vec<f64> = (0..x.len())
                .map(|k| {
                    let (j, i) = (k % n, (k / n) % n);
                    let m = if mshape.len() == 4 { mask[k] } else { mask[(i % mr) * mc + j % mc] };
                    if m != 0.0 {
                        x[k] * scale
                    } else {
                        fill
                    }
                })
                .collect();
            let want = softmax_ref(&masked, &shape, 3);
            let attrs = MaskedSoftmaxAttrs { scale, fill, axis: -1 }.to_attrs();
            for (dt, tol) in [(DataType::Float64, 1e-12), (DataType::Float32, 1e-6)] {
                let ins = [(0, t(dt, &shape, &x)), (1, t(DataType::Bool, &mshape, mask))];
                let out = &run_op("MaskedSoftmax", attrs.clone(), &ins)[0];
                assert_close(&out.to_f64_vec(), &want, tol);
            }
        }
    }

    #[test]
    fn softmax_grad_matches_finite_differences() {
        let mut rng = Rng::new(2);
        let shape = [3, 4];
        let x = rng.vec(12, -2.0, 2.0);
        let w = rng.vec(12, -1.0, 1.0);
        for ax in [0usize, 1] {
            let y = softmax_ref(&x, &shape, ax);
            let want = numeric_grad(&x, 1e-6, |x| softmax_ref(x, &shape, ax).iter().zip(&w).map(|(a, b)| a * b).sum());
            let ins = [(0, t(DataType::Float64, &shape, &w)), (1, t(DataType::Float64, &shape, &y))];
            let got = &run_op("SoftmaxGrad", axis(ax as i64), &ins)[0];
            assert_close(&got.to_f64_vec(), &want, 1e-8);
        }
    }

    fn nll_attrs(reduction: LossReduction, ignore: Option<i64>) -> Attributes {
        NllLossAttrs { reduction, ignore_index: ignore, log_prob: false }.to_attrs()
    }

    #[test]
    fn nll_loss_reductions_and_ignore_index() {
        let probs = t(DataType::Float64, &[3, 2], &[0.25, 0.75, 0.5, 0.5, 0.9, 0.1]);
        let labels = t(DataType::Int32, &[3], &[1.0, 0.0, 1.0]);
        let run =
            |r, ig| run_op("NllLoss", nll_attrs(r, ig), &[(0, probs.clone()), (1, labels.clone())])[0].to_f64_vec();
        let l = [-(0.75f64).ln(), -(0.5f64).ln(), -(0.1f64).ln()];
        assert_close(&run(LossReduction::None, None), &l, 1e-15);
        assert_close(&run(Sum, None), &[l.iter().sum()], 1e-15);
        assert_close(&run(Mean, None), &[l.iter().sum::<f64>() / 3.0], 1e-15);
        assert_close(&run(Mean, Some(0)), &[(l[0] + l[2]) / 2.0], 1e-15);
        assert_close(&run(LossReduction::None, Some(1)), &[0.0, l[1], 0.0], 1e-15);
        // Every row ignored: mean is 0, not NaN.
        let none = t(DataType::Int64, &[3], &[-100.0, -100.0, -100.0]);
        let out = run_op("NllLoss", nll_attrs(Mean, Some(-100)), &[(0, probs.clone()), (1, none)]);
        assert_eq!(out[0].to_f64_vec(), vec![0.0]);
    }

    /// Labels outside `[0, C)` count as ignored (zero loss and gradient, not in
    /// the mean); with run-time checks they are an error, `ignore_index` is not.
    #[test]
    // Miri perturbs `ln` on purpose, so the helper's two runs differ in the last bits.
    #[cfg_attr(miri, ignore)]
    fn out_of_range_labels_are_ignored_or_with_checks_an_error() {
        let probs = t(DataType::Float64, &[3, 2], &[0.25, 0.75, 0.5, 0.5, 0.9, 0.1]);
        let l = [-(0.75f64).ln(), -(0.1f64).ln()];
        for bad in [2.0, -1.0, 1e12] {
            let labels = t(DataType::Int64, &[3], &[1.0, bad, 1.0]);
            let ins = [(0, probs.clone()), (1, labels.clone())];
            let none = run_op("NllLoss", nll_attrs(LossReduction::None, None), &ins)[0].to_f64_vec();
            assert_close(&none, &[l[0], 0.0, l[1]], 1e-15);
            let mean = run_op("NllLoss", nll_attrs(Mean, None), &ins)[0].to_f64_vec();
            assert_close(&mean, &[(l[0] + l[1]) / 2.0], 1e-15);
            let out = run_op("NllLossWithSoftmaxGrad", nll_attrs(Mean, None), &ins);
            assert_eq!(out[0].to_f64_vec(), mean);
            assert_eq!(&out[1].to_f64_vec()[2..4], &[0.0, 0.0], "no gradient for the bad row");
            assert!(out[1].to_f64_vec().iter().all(|v| v.is_finite()));
            let g = t(DataType::Float64, &[], &[1.0]);
            let grad_ins = [(0, g), (1, probs.clone()), (2, labels.clone())];
            let dp = run_op("NllLossGrad", nll_attrs(Sum, None), &grad_ins)[0].to_f64_vec();
            assert_eq!(&dp[2..4], &[0.0, 0.0]);
            let want = KernelRunError::IndexOutOfRange { index: bad as i64, bound: 2 };
            for op in ["NllLoss", "NllLossWithSoftmaxGrad"] {
                assert_eq!(try_run_op_checked(op, nll_attrs(Mean, None), &ins).unwrap_err(), want, "{op}");
            }
            let err = try_run_op_checked("NllLossGrad", nll_attrs(Sum, None), &grad_ins).unwrap_err();
            assert_eq!(err, want);
        }
        let ignored = t(DataType::Int32, &[3], &[1.0, -100.0, 0.0]);
        let ins = [(0, probs), (1, ignored)];
        assert!(try_run_op_checked("NllLoss", nll_attrs(Mean, Some(-100)), &ins).is_ok());
    }

    /// NllLossGrad against finite differences of NllLoss itself (f64).
    #[test]
    fn nll_loss_grad_matches_finite_differences() {
        let mut rng = Rng::new(9);
        let p = rng.vec(12, 0.1, 0.9);
        let labels = t(DataType::Int32, &[2, 2], &[2.0, 0.0, 2.0, 1.0]);
        for (red, ig) in [(Mean, None), (Sum, None), (Mean, Some(2)), (LossReduction::None, None)] {
            let gvals: Vec<f64> = if red == LossReduction::None { vec![0.5, -1.0, 2.0, 0.25] } else { vec![1.5] };
            let gshape: &[usize] = if red == LossReduction::None { &[2, 2] } else { &[] };
            let loss = |x: &[f64]| {
                let out = &run_op(
                    "NllLoss",
                    nll_attrs(red, ig),
                    &[(0, t(DataType::Float64, &[2, 2, 3], x)), (1, labels.clone())],
                );
                out[0].to_f64_vec().iter().zip(&gvals).map(|(a, b)| a * b).sum::<f64>()
            };
            let want = numeric_grad(&p, 1e-7, loss);
            let ins = [
                (0, t(DataType::Float64, gshape, &gvals)),
                (1, t(DataType::Float64, &[2, 2, 3], &p)),
                (2, labels.clone()),
            ];
            let got = &run_op("NllLossGrad", nll_attrs(red, ig), &ins)[0];
            assert_close(&got.to_f64_vec(), &want, 1e-6);
        }
    }

    /// dlogits of NllLossWithSoftmaxGrad equals the finite-difference gradient of
    /// nll(softmax(logits)) scaled by loss_grad.
    #[test]
    fn nll_loss_with_softmax_grad_matches_finite_differences() {
        let mut rng = Rng::new(4);
        let logits = rng.vec(12, -2.0, 2.0);
        let labels = t(DataType::Int32, &[4], &[0.0, 2.0, 1.0, 2.0]);
        for (red, ig, lg) in [
            (Mean, None, None),
            (Sum, None, Some(0.5)),
            (Mean, Some(1), Some(2.0)),
            (LossReduction::None, None, Some(1.0)),
        ] {
            let probs = softmax_ref(&logits, &[4, 3], 1);
            let mut ins = vec![(0, t(DataType::Float64, &[4, 3], &probs)), (1, labels.clone())];
            if let Some(v) = lg {
                ins.push((2, t(DataType::Float64, &[], &[v])));
            }
            let out = run_op("NllLossWithSoftmaxGrad", nll_attrs(red, ig), &ins);
            let plain = run_op("NllLoss", nll_attrs(red, ig), &ins[..2]);
            assert_eq!(out[0], plain[0], "loss output equals NllLoss");
            let scale = lg.unwrap_or(1.0);
            let want = numeric_grad(&logits, 1e-6, |x| {
                let p = softmax_ref(x, &[4, 3], 1);
                let l = run_op(
                    "NllLoss",
                    nll_attrs(red, ig),
                    &[(0, t(DataType::Float64, &[4, 3], &p)), (1, labels.clone())],
                );
                l[0].to_f64_vec().iter().sum::<f64>() * scale
            });
            assert_close(&out[1].to_f64_vec(), &want, 1e-7);
        }
        // float32 with int64 labels, hand-derived: probs [0.2, 0.8], label 1, mean over 1 row.
        let out = run_op(
            "NllLossWithSoftmaxGrad",
            nll_attrs(Mean, None),
            &[(0, t(DataType::Float32, &[1, 2], &[0.2, 0.8])), (1, t(DataType::Int64, &[1], &[1.0]))],
        );
        assert_close(&out[0].to_f64_vec(), &[-(0.8f32 as f64).ln()], 1e-6);
        assert_close(&out[1].to_f64_vec(), &[0.2, -0.2], 1e-6);
    }
}
