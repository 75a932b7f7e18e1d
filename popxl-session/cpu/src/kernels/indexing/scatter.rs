//! Scatter kernels: `Scatter`, `ScatterReduce` and their gradient
//! `ScatterReduceGrad`. Index semantics are documented in
//! `popart_ir::ops::indexing`: an index in `[-len, len)` of the output's axis
//! picks a row, any other is skipped (with `check_indices`, an error).
//!
//! One plan walks the scattered (source) tensor in row-major order and gives,
//! for each contiguous run, where it lands in the output: with indices per row
//! (PopART's index broadcasting) a run is a whole row of the trailing dims,
//! so the reductions are vectorisable loops over two slices.

use std::sync::Mutex;

use super::check_out;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelRunError, KernelSpec};
use crate::kernels::broadcast::{contiguous_strides, MAX_RANK};
use crate::kernels::dispatch::{with_bits, with_index, with_num};
use crate::kernels::elem::{IndexElem, Num};
use crate::kernels::float16::{f16_adapter, has_f16};
use crate::kernels::ptr::{slice, slice_mut};
use crate::kernels::spec::{boxed, norm_axis, BuildResult, SpecExt, Types};
use crate::kernels::KernelEntry;
use popart_ir::ops::all as ir;
use popart_ir::ops::indexing::{scatter_indices, Reduction, ScatterIndices};
use popart_ir::ops::indexing::{ScatterAttrs, ScatterReduceAttrs};
use popart_ir::ops::indexing_grad::ScatterReduceGradAttrs;
use popart_ir::TensorInfo;

/// Where the elements of a source of shape `[outer.., rows, inner..]` land in
/// an output whose `axis` has `out_rows` rows.
#[derive(Clone, Debug)]
struct ScatterPlan {
    /// Source dims before the axis, and the output's strides for them.
    pre_dims: Vec<usize>,
    pre_strides: Vec<usize>,
    rows: usize,
    inner: usize,
    out_rows: usize,
    /// Output stride of the axis.
    out_axis_stride: usize,
    /// Output offsets of the trailing source elements when they are not one
    /// contiguous run of the output (the output is larger off the axis).
    post: Option<Vec<usize>>,
    /// Indices per row (`true`) or per element.
    per_row: bool,
    src_len: usize,
    out_len: usize,
    idx_len: usize,
}

impl ScatterPlan {
    fn new(spec: &KernelSpec<'_>, src: &TensorInfo, idx: &TensorInfo, out: &[usize]) -> Result<Self, KernelError> {
        let rank = src.rank();
        if rank == 0 || rank > MAX_RANK || out.len() != rank {
            return Err(spec.error(format!("cannot scatter {src} into {out:?}")));
        }
        let axis = if spec.is::<ir::Scatter>() {
            spec.typed::<ScatterAttrs>()?.axis
        } else if spec.is::<ir::ScatterReduce>() {
            spec.typed::<ScatterReduceAttrs>()?.axis
        } else {
            spec.typed::<ScatterReduceGradAttrs>()?.axis
        };
        let axis = norm_axis(spec, axis, rank)?;
        if (0..rank).any(|d| d != axis && out[d] < src.shape[d]) {
            return Err(spec.error(format!("{src} does not fit the output {out:?} off axis {axis}")));
        }
        let per_row = match scatter_indices(&idx.shape, &src.shape, axis).map_err(|m| spec.error(m))? {
            ScatterIndices::Rows => true,
            ScatterIndices::Elements => false,
        };
        let os = contiguous_strides(out);
        let inner: usize = src.shape[axis + 1..].iter().product();
        let post = if src.shape[axis + 1..] == out[axis + 1..] {
            None
        } else {
            let mut table = popart_ir::size::try_zeroed_vec::<usize>(inner, "scatter offset table")
                .map_err(|e| spec.error(e.to_string()))?;
            let dims = &src.shape[axis + 1..];
            for (i, t) in table.iter_mut().enumerate() {
                let (mut rem, mut off) = (i, 0);
                for d in (0..dims.len()).rev() {
                    off += (rem % dims[d]) * os[axis + 1 + d];
                    rem /= dims[d];
                }
                *t = off;
            }
            Some(table)
        };
        Ok(ScatterPlan {
            pre_dims: src.shape[..axis].to_vec(),
            pre_strides: os[..axis].to_vec(),
            rows: src.shape[axis],
            inner,
            out_rows: out[axis],
            out_axis_stride: os[axis],
            post,
            per_row,
            src_len: src.nelms(),
            out_len: out.iter().product(),
            idx_len: idx.nelms(),
        })
    }

    /// The output row picked by index value `v`, if in range.
    #[inline(always)]
    fn row(&self, v: i64) -> Option<usize> {
        let s = self.out_rows as i64;
        let v = if v < 0 { v + s } else { v };
        (0..s).contains(&v).then_some(v as usize)
    }

    fn check<I: IndexElem>(&self, check: bool, idx: &[I]) -> KernelResult {
        if check {
            if let Some(&v) = idx.iter().find(|&&v| self.row(v.to_i64()).is_none()) {
                return Err(KernelRunError::IndexOutOfRange { index: v.to_i64(), bound: self.out_rows });
            }
        }
        Ok(())
    }

    /// Call `f(source offset, output offset or None if the index is skipped, len)`
    /// for every run of the source, in row-major order.
    #[inline]
    fn visit<I: IndexElem>(&self, idx: &[I], mut f: impl FnMut(usize, Option<usize>, usize)) {
        let outer: usize = self.pre_dims.iter().product();
        if self.src_len == 0 {
            return;
        }
        let mut pre = [0usize; MAX_RANK];
        let mut pre_off = 0usize;
        for o in 0..outer {
            for k in 0..self.rows {
                let src = (o * self.rows + k) * self.inner;
                let base = |r: usize| pre_off + r * self.out_axis_stride;
                match (&self.post, self.per_row) {
                    (None, true) => f(src, self.row(idx[k].to_i64()).map(base), self.inner),
                    (None, false) => {
                        for i in 0..self.inner {
                            f(src + i, self.row(idx[src + i].to_i64()).map(|r| base(r) + i), 1);
                        }
                    }
                    (Some(post), _) => {
                        let row_of_k = self.per_row.then(|| self.row(idx[k].to_i64()));
                        for (i, &p) in post.iter().enumerate() {
                            let r = row_of_k.unwrap_or_else(|| self.row(idx[src + i].to_i64()));
                            f(src + i, r.map(|r| base(r) + p), 1);
                        }
                    }
                }
            }
            let mut d = self.pre_dims.len();
            while d > 0 {
                d -= 1;
                pre[d] += 1;
                pre_off += self.pre_strides[d];
                if pre[d] < self.pre_dims[d] {
                    break;
                }
                pre_off -= self.pre_strides[d] * self.pre_dims[d];
                pre[d] = 0;
            }
        }
    }
}

/// `Scatter` and `ScatterReduce{none}`: copy (or zero) the output, write the source.
struct ScatterNoneKernel<E, I> {
    plan: ScatterPlan,
    /// Positions of the source, the indices and the initial values (if any).
    pos: [usize; 2],
    init: Option<usize>,
    check: bool,
    _t: Types<(E, I)>,
}

impl<E: Copy + Default + Send + Sync + 'static, I: IndexElem> Kernel for ScatterNoneKernel<E, I> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let p = &self.plan;
        // SAFETY: the plan's lengths are the spec's element counts of the indices,
        // the source, the output and the initial values, which `args` holds; the
        // output overlaps no input (`KernelArgs`).
        let (idx, src, out, init) = unsafe {
            (
                slice(args.inputs[self.pos[1]] as *const I, p.idx_len),
                slice(args.inputs[self.pos[0]] as *const E, p.src_len),
                slice_mut(args.outputs[0] as *mut E, p.out_len),
                self.init.map(|i| slice(args.inputs[i] as *const E, p.out_len)),
            )
        };
        p.check(self.check, idx)?;
        match init {
            Some(init) => out.copy_from_slice(init),
            None => out.fill(E::default()),
        }
        p.visit(idx, |s, o, n| {
            if let Some(o) = o {
                out[o..o + n].copy_from_slice(&src[s..s + n]);
            }
        });
        Ok(())
    }
}

/// `ScatterReduce{sum, max, min}`.
struct ScatterReduceKernel<T, I> {
    plan: ScatterPlan,
    pos: [usize; 2],
    init: Option<usize>,
    reduction: Reduction,
    check: bool,
    /// Max and min without initial values: which outputs were written (the
    /// others are zero, as PopART's masked fill).
    touched: Option<Mutex<Vec<u8>>>,
    _t: Types<(T, I)>,
}

impl<T: Num, I: IndexElem> Kernel for ScatterReduceKernel<T, I> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let p = &self.plan;
        // SAFETY: the plan's lengths are the spec's element counts of the indices,
        // the source, the output and the initial values, which `args` holds; the
        // output overlaps no input (`KernelArgs`).
        let (idx, src, out, init) = unsafe {
            (
                slice(args.inputs[self.pos[1]] as *const I, p.idx_len),
                slice(args.inputs[self.pos[0]] as *const T, p.src_len),
                slice_mut(args.outputs[0] as *mut T, p.out_len),
                self.init.map(|i| slice(args.inputs[i] as *const T, p.out_len)),
            )
        };
        p.check(self.check, idx)?;
        match (init, self.reduction) {
            (Some(init), _) => out.copy_from_slice(init),
            (None, Reduction::Max) => out.fill(T::LOWEST),
            (None, Reduction::Min) => out.fill(T::HIGHEST),
            (None, _) => out.fill(T::ZERO),
        }
        fn apply<T: Num>(out: &mut [T], src: &[T], f: impl Fn(T, T) -> T) {
            for (a, &b) in out.iter_mut().zip(src) {
                *a = f(*a, b);
            }
        }
        let mut guard = self.touched.as_ref().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(t) = guard.as_deref_mut() {
            t.fill(0);
        }
        p.visit(idx, |s, o, n| {
            let Some(o) = o else { return };
            let (dst, v) = (&mut out[o..o + n], &src[s..s + n]);
            match self.reduction {
                Reduction::Max => apply(dst, v, T::maximum),
                Reduction::Min => apply(dst, v, T::minimum),
                _ => apply(dst, v, T::add),
            }
            if let Some(t) = guard.as_deref_mut() {
                t[o..o + n].fill(1);
            }
        });
        if let Some(t) = guard.as_deref() {
            for (y, &w) in out.iter_mut().zip(t.iter()) {
                if w == 0 {
                    *y = T::ZERO;
                }
            }
        }
        Ok(())
    }
}

/// `ScatterReduceGrad(g, indices, data[, y[, initial]])`.
struct ScatterGradKernel<T, I> {
    plan: ScatterPlan,
    reduction: Reduction,
    /// Positions of g, indices, data, y, initial.
    pos: [usize; 5],
    with_initial: bool,
    check: bool,
    _t: Types<(T, I)>,
}

impl<T: Num, I: IndexElem> Kernel for ScatterGradKernel<T, I> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let p = &self.plan;
        let select = matches!(self.reduction, Reduction::Max | Reduction::Min);
        // SAFETY: the plan's lengths are the spec's element counts of the indices,
        // `g` and the data gradient (the output), and, for max and min, of the data
        // and `y`, which `args` holds; outputs overlap no input (`KernelArgs`).
        let (idx, g, data, y, gd) = unsafe {
            let (data, y) = if select {
                (
                    slice(args.inputs[self.pos[2]] as *const T, p.src_len),
                    slice(args.inputs[self.pos[3]] as *const T, p.out_len),
                )
            } else {
                (&[][..], &[][..])
            };
            (
                slice(args.inputs[self.pos[1]] as *const I, p.idx_len),
                slice(args.inputs[self.pos[0]] as *const T, p.out_len),
                data,
                y,
                slice_mut(args.outputs[0] as *mut T, p.src_len),
            )
        };
        p.check(self.check, idx)?;
        p.visit(idx, |s, o, n| {
            let dst = &mut gd[s..s + n];
            match o {
                None => dst.fill(T::ZERO),
                Some(o) if select => {
                    for (j, d) in dst.iter_mut().enumerate() {
                        *d = if data[s + j] == y[o + j] { g[o + j] } else { T::ZERO };
                    }
                }
                Some(o) => dst.copy_from_slice(&g[o..o + n]),
            }
        });
        if !self.with_initial {
            return Ok(());
        }
        // SAFETY: with initial values, output 1 is their gradient, of the output's
        // `out_len` elements, overlapping no input (`KernelArgs`).
        let gi = unsafe { slice_mut(args.outputs[1] as *mut T, p.out_len) };
        match self.reduction {
            Reduction::Sum => gi.copy_from_slice(g),
            Reduction::None => {
                gi.copy_from_slice(g);
                p.visit(idx, |_, o, n| {
                    if let Some(o) = o {
                        gi[o..o + n].fill(T::ZERO);
                    }
                });
            }
            Reduction::Max | Reduction::Min => {
                // SAFETY: for max and min with initial values, input 4 holds them
                // (`out_len` elements; `KernelArgs`).
                let init = unsafe { slice(args.inputs[self.pos[4]] as *const T, p.out_len) };
                for (((d, &gv), &yv), &iv) in gi.iter_mut().zip(g).zip(y).zip(init) {
                    *d = if yv == iv { gv } else { T::ZERO };
                }
            }
        }
        Ok(())
    }
}

fn reduction_of(spec: &KernelSpec<'_>) -> Result<Reduction, KernelError> {
    let r = if spec.is::<ir::ScatterReduceGrad>() {
        spec.typed::<ScatterReduceGradAttrs>()?.reduction
    } else {
        spec.typed::<ScatterReduceAttrs>()?.reduction
    };
    let r = r.as_str();
    Reduction::parse(r).ok_or_else(|| spec.error(format!("unknown reduction `{r}`")))
}

fn build_scatter(spec: &KernelSpec<'_>) -> BuildResult {
    // Scatter(t, indices, values): source input 2, initial values input 0.
    let is_scatter = spec.is::<ir::Scatter>();
    let (src, init) =
        if is_scatter { (spec.input(2)?, Some(spec.input(0)?)) } else { (spec.input(0)?, spec.opt_input(2)) };
    let idx = spec.input(1)?;
    let reduction = if is_scatter { Reduction::None } else { reduction_of(spec)? };
    let y = spec.output(0)?;
    let plan = ScatterPlan::new(spec, src.info, idx.info, y.shape())?;
    if let Some(i) = init {
        check_out(spec, 0, i.shape(), i.dtype())?;
    }
    check_out(spec, 0, y.shape(), src.dtype())?;
    let (pos, init, check, dt) = ([src.pos, idx.pos], init.map(|i| i.pos), spec.check_indices, src.dtype());
    let bad_idx = || spec.error(format!("indices must be integers, got {}", idx.dtype()));
    if reduction == Reduction::None {
        return with_bits!(dt, E => with_index!(idx.dtype(), I =>
            boxed(ScatterNoneKernel::<E, I> { plan, pos, init, check, _t: Types::default() }), _ => Err(bad_idx())));
    }
    if has_f16(spec) {
        return f16_adapter(spec, false, build_scatter);
    }
    let touched = if init.is_none() && matches!(reduction, Reduction::Max | Reduction::Min) {
        let v = popart_ir::size::try_zeroed_vec::<u8>(plan.out_len, "scatter mask")
            .map_err(|e| spec.error(e.to_string()))?;
        Some(Mutex::new(v))
    } else {
        None
    };
    with_num!(dt, T => with_index!(idx.dtype(), I =>
        boxed(ScatterReduceKernel::<T, I> { plan, pos, init, reduction, check, touched, _t: Types::default() }),
        _ => Err(bad_idx())), _ => Err(spec.unsupported_dtype(dt)))
}

fn build_scatter_grad(spec: &KernelSpec<'_>) -> BuildResult {
    // Output 0 has the scattered tensor's shape (attribute `shape`); the
    // tensor itself (input 2) is read by `max`/`min` only.
    let (g, idx, data) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    let reduction = reduction_of(spec)?;
    let with_initial = spec.typed::<ScatterReduceGradAttrs>()?.with_initial;
    let plan = ScatterPlan::new(spec, data.info, idx.info, g.shape())?;
    check_out(spec, 0, data.shape(), g.dtype())?;
    if with_initial {
        check_out(spec, 1, g.shape(), g.dtype())?;
    }
    let mut pos = [g.pos, idx.pos, g.pos, g.pos, g.pos];
    if matches!(reduction, Reduction::Max | Reduction::Min) {
        let fwd = spec.input(2)?;
        if fwd.info != data.info {
            return Err(spec.error(format!("the scattered tensor {} is not {}", fwd.info, data.info)));
        }
        pos[2] = fwd.pos;
        pos[3] = spec.input(3)?.pos;
        if with_initial {
            pos[4] = spec.input(4)?.pos;
        }
    }
    if has_f16(spec) {
        return f16_adapter(spec, false, build_scatter_grad);
    }
    let (check, dt) = (spec.check_indices, g.dtype());
    let bad_idx = || spec.error(format!("indices must be integers, got {}", idx.dtype()));
    with_num!(dt, T => with_index!(idx.dtype(), I =>
        boxed(ScatterGradKernel::<T, I> { plan, reduction, pos, with_initial, check, _t: Types::default() }),
        _ => Err(bad_idx())), _ => Err(spec.unsupported_dtype(dt)))
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] =
    &[(&ir::Scatter, build_scatter), (&ir::ScatterReduce, build_scatter), (&ir::ScatterReduceGrad, build_scatter_grad)];
