//! Indexing kernels: `Subsample`, `Split`, the dynamic slices and updates,
//! `Onehot`, `GroupedGather` and `TiedGather`, and their gradients (the
//! scatters are in [`scatter`]). Index semantics are documented in
//! `popart_ir::ops::indexing`.
//!
//! Every plan (strides, runs, per-group sizes) is fixed at build time; the
//! kernels that only move elements are instantiated per element size.

use super::broadcast::{contiguous_strides, MAX_RANK};
use super::dispatch::{with_bits, with_index, with_num};
use super::elem::{IndexElem, Num};
use super::float16::{f16_adapter, has_f16};
use super::par::{par_copy, par_fill, PAR_MIN_ELEMS};
use super::ptr::{slice, slice_mut};
use super::shape::GatherDims;
use super::spec::{boxed, BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelRunError, KernelSpec};
use popart_ir::ops::all as ir;
use popart_ir::ops::indexing::{dynamic_slices, grouped_gather_shape, onehot_shape, split_sizes, subsample_shape};
use popart_ir::ops::indexing::{DynamicSliceAttrs, GroupedGatherAttrs, OnehotAttrs, SplitAttrs, SubsampleAttrs};
use popart_ir::ops::indexing_grad::{
    DynamicSliceGradAttrs, GroupedGatherGradAttrs, OnehotGradAttrs, SubsampleGradAttrs,
};
use popart_ir::ops::shape::GatherAttrs;
use popart_ir::DataType;

pub(super) mod scatter;

/// Check output `index` has the expected shape and dtype.
pub(super) fn check_out(
    spec: &KernelSpec<'_>,
    index: u32,
    shape: &[usize],
    dtype: DataType,
) -> Result<(), KernelError> {
    let y = spec.output(index)?;
    if y.shape() != shape || y.dtype() != dtype {
        return Err(spec.error(format!("output {index} {} should be {dtype}{shape:?}", y.info)));
    }
    Ok(())
}

/// A rank within the kernels' fixed-size index arrays.
fn check_rank(spec: &KernelSpec<'_>, rank: usize) -> Result<(), KernelError> {
    if rank > MAX_RANK {
        return Err(spec.error(format!("rank {rank} is above the supported {MAX_RANK}")));
    }
    Ok(())
}

// ----- Subsample -----

/// Rows of a strided view: the output's rows (all dims but the last) in
/// row-major order, each `len` elements read `step` apart in the source.
#[derive(Clone, Debug)]
struct StridedRows {
    outer: Vec<usize>,
    strides: Vec<usize>,
    len: usize,
    step: usize,
}

impl StridedRows {
    /// The rows of `out` (shape) read from a contiguous source of `src` shape
    /// with per-dim element strides multiplied by `strides`.
    fn new(out: &[usize], src: &[usize], strides: &[usize]) -> Self {
        let cs = contiguous_strides(src);
        let s: Vec<usize> = cs.iter().zip(strides).map(|(a, b)| a * b).collect();
        match out.len() {
            0 => StridedRows { outer: vec![], strides: vec![], len: 1, step: 1 },
            r => StridedRows {
                outer: out[..r - 1].to_vec(),
                strides: s[..r - 1].to_vec(),
                len: out[r - 1],
                step: s[r - 1],
            },
        }
    }

    /// Call `f(row, source offset)` for every row.
    #[inline]
    fn for_each(&self, mut f: impl FnMut(usize, usize)) {
        let n: usize = self.outer.iter().product();
        if n == 0 || self.len == 0 {
            return;
        }
        let mut idx = [0usize; MAX_RANK];
        let mut off = 0usize;
        for row in 0..n {
            f(row, off);
            let mut d = self.outer.len();
            while d > 0 {
                d -= 1;
                idx[d] += 1;
                off += self.strides[d];
                if idx[d] < self.outer[d] {
                    break;
                }
                off -= self.strides[d] * self.outer[d];
                idx[d] = 0;
            }
        }
    }
}

/// `Subsample` (`grad == false`: gather the strided view) and `SubsampleGrad`
/// (scatter `g` into the strided view of zeros).
struct SubsampleKernel<E> {
    rows: StridedRows,
    src_len: usize,
    grad: bool,
    _t: Types<E>,
}

impl<E: Copy + Default + Send + Sync + 'static> Kernel for SubsampleKernel<E> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (x, y) = (args.inputs[0] as *const E, args.outputs[0] as *mut E);
        let (len, step) = (self.rows.len, self.rows.step);
        if self.grad {
            // SAFETY: the gradient's output has the forward input's `src_len`
            // elements and overlaps no input (the `KernelArgs` contract).
            unsafe { slice_mut(y, self.src_len) }.fill(E::default());
        }
        self.rows.for_each(|row, off| {
            // SAFETY: the plan addresses rows inside both tensors (built from their shapes).
            unsafe {
                if self.grad {
                    let g = slice(x.add(row * len), len);
                    for (j, &v) in g.iter().enumerate() {
                        *y.add(off + j * step) = v;
                    }
                } else {
                    let out = slice_mut(y.add(row * len), len);
                    if step == 1 {
                        out.copy_from_slice(slice(x.add(off), len));
                    } else {
                        for (j, o) in out.iter_mut().enumerate() {
                            *o = *x.add(off + j * step);
                        }
                    }
                }
            }
        });
        Ok(())
    }
}

fn build_subsample(spec: &KernelSpec<'_>) -> BuildResult {
    let grad = spec.is::<ir::SubsampleGrad>();
    // The gradient's output has the forward input's shape (attribute `shape`).
    let x = if grad { spec.output(0)? } else { spec.input(0)? };
    check_rank(spec, x.info.rank())?;
    let strides =
        if grad { spec.typed::<SubsampleGradAttrs>()?.strides } else { spec.typed::<SubsampleAttrs>()?.strides };
    let out = subsample_shape(x.shape(), &strides).map_err(|m| spec.error(m))?;
    let strides: Vec<usize> = strides.iter().map(|&s| s as usize).collect();
    let rows = StridedRows::new(&out, x.shape(), &strides);
    if grad {
        let g = spec.input(0)?;
        if g.shape() != out.as_slice() || g.dtype() != x.dtype() {
            return Err(spec.error(format!("gradient {} does not match the subsampled shape {out:?}", g.info)));
        }
        check_out(spec, 0, x.shape(), x.dtype())?;
    } else {
        check_out(spec, 0, &out, x.dtype())?;
    }
    let src_len = x.nelms();
    with_bits!(x.dtype(), E => boxed(SubsampleKernel::<E> { rows, src_len, grad, _t: Types::default() }))
}

// ----- Split -----

/// `Split`: copy each output's column block of every outer row.
struct SplitKernel<E> {
    outer: usize,
    row: usize,
    /// Per output: (position, offset in the row, length).
    parts: Vec<(usize, usize, usize)>,
    _t: Types<E>,
}

impl<E: Copy + Send + Sync + 'static> Kernel for SplitKernel<E> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let x = args.inputs[0] as *const E;
        for &(pos, off, len) in &self.parts {
            let y = args.outputs[pos] as *mut E;
            for o in 0..self.outer {
                // SAFETY: output `pos` holds `outer · len` elements and the input
                // `outer · row`, with `off + len <= row` (checked at build); outputs
                // overlap no input (the `KernelArgs` contract).
                unsafe { slice_mut(y.add(o * len), len).copy_from_slice(slice(x.add(o * self.row + off), len)) };
            }
        }
        Ok(())
    }
}

fn build_split(spec: &KernelSpec<'_>) -> BuildResult {
    let x = spec.input(0)?;
    let SplitAttrs { axis, split } = spec.typed()?;
    let axis = super::spec::norm_axis(spec, axis, x.info.rank())?;
    let sizes = split_sizes(x.shape()[axis], &split).map_err(|m| spec.error(m))?;
    if sizes.len() != spec.outputs.len() {
        return Err(spec.error(format!("{} split sizes for {} outputs", sizes.len(), spec.outputs.len())));
    }
    let inner: usize = x.shape()[axis + 1..].iter().product();
    let mut parts = Vec::with_capacity(sizes.len());
    let mut off = 0;
    for (k, &s) in sizes.iter().enumerate() {
        let mut shape = x.shape().to_vec();
        shape[axis] = s;
        check_out(spec, k as u32, &shape, x.dtype())?;
        parts.push((spec.output(k as u32)?.pos, off, s * inner));
        off += s * inner;
    }
    let outer = x.shape()[..axis].iter().product();
    with_bits!(x.dtype(), E => boxed(SplitKernel::<E> { outer, row: off, parts, _t: Types::default() }))
}

// ----- Dynamic slices and updates -----

/// The runs of a dynamic slice of a tensor `dims`: the sliced axes, in the
/// index tensor's order, and the layout of the slice.
#[derive(Clone, Debug)]
struct DynPlan {
    dims: Vec<usize>,
    strides: Vec<usize>,
    /// Per axis: its entry in the index tensor if sliced.
    entry: Vec<Option<usize>>,
    /// Slice sizes per index entry.
    sizes: Vec<usize>,
    /// Slice shape.
    slice_dims: Vec<usize>,
    /// The last sliced axis (0 when none: the whole tensor is one run).
    last: usize,
    /// Elements after the last sliced axis.
    inner: usize,
}

impl DynPlan {
    fn new(spec: &KernelSpec<'_>, dims: &[usize]) -> Result<Self, KernelError> {
        check_rank(spec, dims.len())?;
        let (axes, sizes) = if spec.is::<ir::DynamicSliceGrad>() {
            let a: DynamicSliceGradAttrs = spec.typed()?;
            (a.axes, a.sizes)
        } else {
            let a: DynamicSliceAttrs = spec.typed()?;
            (a.axes, a.sizes)
        };
        let slices = dynamic_slices(dims, &axes, &sizes).map_err(|m| spec.error(m))?;
        let mut entry = vec![None; dims.len()];
        let mut slice_dims = dims.to_vec();
        for (k, &(a, s)) in slices.iter().enumerate() {
            entry[a] = Some(k);
            slice_dims[a] = s;
        }
        let last = slices.iter().map(|&(a, _)| a).max().unwrap_or(0);
        let inner = if slices.is_empty() { 1 } else { dims[last + 1..].iter().product() };
        Ok(DynPlan {
            dims: dims.to_vec(),
            strides: contiguous_strides(dims),
            entry,
            sizes: slices.iter().map(|&(_, s)| s).collect(),
            slice_dims,
            last,
            inner,
        })
    }

    /// The start of each sliced axis from the offsets in `index` (popops: an offset
    /// outside `[0, dim)` starts at 0); with `check`, an offset whose slice does not
    /// fit `[0, dim)` is an error.
    fn starts<I: IndexElem>(&self, index: &[I], check: bool) -> Result<[usize; MAX_RANK], KernelRunError> {
        let mut starts = [0usize; MAX_RANK];
        for (a, e) in self.entry.iter().enumerate() {
            let Some(k) = *e else { continue };
            let (dim, size) = (self.dims[a] as i64, self.sizes[k] as i64);
            let v = index[k].to_i64();
            if check && (v < 0 || v > dim - size) {
                let index = if (0..dim).contains(&v) { v + size - 1 } else { v };
                return Err(KernelRunError::IndexOutOfRange { index, bound: self.dims[a] });
            }
            starts[a] = if (0..dim).contains(&v) { v as usize } else { 0 };
        }
        Ok(starts)
    }

    /// Call `f(tensor offset, slice offset, len)` for the contiguous runs of the
    /// slice at `starts` (a slice running past the end of an axis wraps around).
    #[inline]
    fn for_runs(&self, starts: &[usize; MAX_RANK], mut f: impl FnMut(usize, usize, usize)) {
        if self.sizes.is_empty() {
            let n = self.dims.iter().product();
            if n > 0 {
                f(0, 0, n);
            }
            return;
        }
        let l = self.last;
        let (sz, dim) = (self.slice_dims[l], self.dims[l]);
        let n_outer: usize = self.slice_dims[..l].iter().product();
        if n_outer == 0 || sz == 0 || self.inner == 0 {
            return;
        }
        let st = starts[l];
        let seg = sz.min(dim - st);
        let mut j = [0usize; MAX_RANK];
        for r in 0..n_outer {
            let mut t_off = 0;
            for d in 0..l {
                let c = if self.entry[d].is_some() { (starts[d] + j[d]) % self.dims[d] } else { j[d] };
                t_off += c * self.strides[d];
            }
            let s_off = r * sz * self.inner;
            f(t_off + st * self.strides[l], s_off, seg * self.inner);
            if seg < sz {
                f(t_off, s_off + seg * self.inner, (sz - seg) * self.inner);
            }
            let mut d = l;
            while d > 0 {
                d -= 1;
                j[d] += 1;
                if j[d] < self.slice_dims[d] {
                    break;
                }
                j[d] = 0;
            }
        }
    }
}

/// What a dynamic kernel does with the runs of its slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DynMode {
    /// `DynamicSlice(t, index)`: copy the slice out.
    Slice,
    /// `DynamicUpdate(t, index, u)`: copy `t`, write `u` into the slice.
    Update,
    /// `DynamicUpdateInplace(t, index, u)`: write `u` into the slice of `t` in place.
    UpdateInplace,
    /// `DynamicSliceGrad(g, index)`: zeros, `g` written into the slice.
    SliceGrad,
    /// `DynamicUpdateGrad(g, index)`: `g` with the slice zeroed.
    UpdateGrad,
}

struct DynKernel<E, I> {
    plan: DynPlan,
    mode: DynMode,
    /// Positions of the big tensor (or gradient) input, the index and the slice input.
    pos: [usize; 3],
    nelms: usize,
    check: bool,
    _t: Types<(E, I)>,
}

impl<E: Copy + Default + Send + Sync + 'static, I: IndexElem> Kernel for DynKernel<E, I> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the index input holds one offset per sliced axis (checked at build).
        let index = unsafe { slice(args.inputs[self.pos[1]] as *const I, self.plan.sizes.len()) };
        let starts = self.plan.starts(index, self.check)?;
        let y = args.outputs[0] as *mut E;
        let big = args.inputs[self.pos[0]] as *const E;
        let small = args.inputs[self.pos[2]] as *const E;
        // Copy `n` elements from `src + s` to `y + t` (the slice is the source,
        // `up`) or from `src + t` to `y + s` (`!up`). A run too short to split
        // over threads is copied directly, without `par_copy`'s dispatch (a
        // decode step's key, one element per run, writes 256 runs).
        let copy = |src: *const E, up: bool| {
            move |t: usize, s: usize, n: usize| {
                let (from, to) = if up { (s, t) } else { (t, s) };
                // SAFETY: the plan's runs lie inside the tensor and its slice, both
                // sized by the spec; in place, `t` is only accessed through `y`.
                unsafe {
                    if n >= PAR_MIN_ELEMS {
                        par_copy(src.add(from), y.add(to), n)
                    } else if n == 1 {
                        *y.add(to) = *src.add(from)
                    } else {
                        std::ptr::copy_nonoverlapping(src.add(from), y.add(to), n)
                    }
                }
            }
        };
        match self.mode {
            DynMode::Slice => self.plan.for_runs(&starts, copy(big, false)),
            DynMode::Update | DynMode::UpdateInplace => {
                if self.mode == DynMode::Update {
                    // SAFETY: out of place, the output and the tensor input both hold
                    // `nelms` elements and do not overlap (the `KernelArgs` contract).
                    unsafe { par_copy(big, y, self.nelms) };
                }
                self.plan.for_runs(&starts, copy(small, true));
            }
            DynMode::SliceGrad => {
                // SAFETY: the output has the forward tensor's `nelms` elements and
                // overlaps no input.
                unsafe { par_fill(y, self.nelms, E::default()) };
                self.plan.for_runs(&starts, copy(small, true));
            }
            DynMode::UpdateGrad => {
                // SAFETY: the gradient input and the output both hold `nelms` elements
                // and do not overlap (the `KernelArgs` contract).
                unsafe { par_copy(big, y, self.nelms) };
                self.plan.for_runs(&starts, |t, _, n| {
                    // SAFETY: as above.
                    unsafe { par_fill(y.add(t), n, E::default()) }
                });
            }
        }
        Ok(())
    }
}

fn build_dynamic(spec: &KernelSpec<'_>) -> BuildResult {
    let (mode, big, small) = match () {
        _ if spec.is::<ir::DynamicSlice>() => (DynMode::Slice, spec.input(0)?, None),
        _ if spec.is::<ir::DynamicUpdate>() => (DynMode::Update, spec.input(0)?, Some(spec.input(2)?)),
        _ if spec.is::<ir::DynamicUpdateInplace>() => (DynMode::UpdateInplace, spec.input(0)?, Some(spec.input(2)?)),
        // The output has the forward input's shape (attribute `shape`).
        _ if spec.is::<ir::DynamicSliceGrad>() => (DynMode::SliceGrad, spec.output(0)?, Some(spec.input(0)?)),
        _ => (DynMode::UpdateGrad, spec.input(0)?, None),
    };
    let index = spec.input(1)?;
    let plan = DynPlan::new(spec, big.shape())?;
    if index.nelms() != plan.sizes.len() {
        return Err(spec.error(format!("index {} must hold one offset per sliced axis", index.info)));
    }
    let dtype = big.dtype();
    if let Some(s) = small {
        if s.shape() != plan.slice_dims.as_slice() || s.dtype() != dtype {
            return Err(spec.error(format!("{} does not fit the slice {:?}", s.info, plan.slice_dims)));
        }
    }
    let out = if mode == DynMode::Slice { plan.slice_dims.clone() } else { big.shape().to_vec() };
    check_out(spec, 0, &out, dtype)?;
    // The tensor read in place is read through the output.
    let small_pos = small.map_or(big.pos, |s| s.pos);
    let big_pos = if mode == DynMode::SliceGrad { small_pos } else { big.pos };
    let pos = [big_pos, index.pos, small_pos];
    let (nelms, check) = (big.nelms(), spec.check_indices);
    let bad_idx = || spec.error(format!("index must be an integer tensor, got {}", index.dtype()));
    with_bits!(dtype, E => with_index!(index.dtype(), I =>
        boxed(DynKernel::<E, I> { plan, mode, pos, nelms, check, _t: Types::default() }), _ => Err(bad_idx())))
}

// ----- Onehot -----

/// `[outer, C, inner]` output of a one-hot encoding of `[outer, inner]` indices.
#[derive(Clone, Copy, Debug)]
struct OnehotDims {
    outer: usize,
    classes: usize,
    inner: usize,
}

impl OnehotDims {
    /// The hot class of index `v` (negative counts from the end), if any.
    #[inline(always)]
    fn class(&self, v: i64) -> Option<usize> {
        let c = self.classes as i64;
        let v = if v < 0 { v + c } else { v };
        (0..c).contains(&v).then_some(v as usize)
    }

    fn check<I: IndexElem>(&self, check: bool, idx: &[I]) -> KernelResult {
        if check {
            if let Some(&v) = idx.iter().find(|&&v| self.class(v.to_i64()).is_none()) {
                return Err(KernelRunError::IndexOutOfRange { index: v.to_i64(), bound: self.classes });
            }
        }
        Ok(())
    }

    fn of(spec: &KernelSpec<'_>, idx: &[usize]) -> Result<(Self, Vec<usize>), KernelError> {
        let (axis, c) = if spec.is::<ir::OnehotGrad>() {
            let a: OnehotGradAttrs = spec.typed()?;
            (a.axis, a.num_classes)
        } else {
            let a: OnehotAttrs = spec.typed()?;
            (a.axis, a.num_classes)
        };
        let c = c.unwrap_or(-1);
        let classes = usize::try_from(c).map_err(|_| spec.error(format!("num_classes {c} is negative")))?;
        let (axis, shape) = onehot_shape(idx, classes, axis).map_err(|m| spec.error(m))?;
        let d = OnehotDims { outer: idx[..axis].iter().product(), classes, inner: idx[axis..].iter().product() };
        Ok((d, shape))
    }
}

/// `Onehot(indices, values)`: `values[0]` everywhere, `values[1]` at the hot positions.
struct OnehotKernel<E, I> {
    d: OnehotDims,
    pos: [usize; 2],
    check: bool,
    _t: Types<(E, I)>,
}

impl<E: Copy + Send + Sync + 'static, I: IndexElem> Kernel for OnehotKernel<E, I> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let d = self.d;
        // SAFETY: the indices hold `outer · inner` elements, the values 2 and the
        // output `outer · classes · inner` (checked at build); the output overlaps
        // no input (the `KernelArgs` contract).
        let (idx, v, y) = unsafe {
            (
                slice(args.inputs[self.pos[0]] as *const I, d.outer * d.inner),
                slice(args.inputs[self.pos[1]] as *const E, 2),
                slice_mut(args.outputs[0] as *mut E, d.outer * d.classes * d.inner),
            )
        };
        d.check(self.check, idx)?;
        y.fill(v[0]);
        for o in 0..d.outer {
            for (i, &k) in idx[o * d.inner..][..d.inner].iter().enumerate() {
                if let Some(c) = d.class(k.to_i64()) {
                    y[(o * d.classes + c) * d.inner + i] = v[1];
                }
            }
        }
        Ok(())
    }
}

/// `OnehotGrad(g, indices)`: `[sum of g off the hot positions, sum on them]`.
struct OnehotGradKernel<T, I> {
    d: OnehotDims,
    pos: [usize; 2],
    _t: Types<(T, I)>,
}

impl<T: Num, I: IndexElem> Kernel for OnehotGradKernel<T, I> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let d = self.d;
        // SAFETY: `g` has the one-hot shape, `outer · classes · inner` elements, and
        // the indices `outer · inner` (checked at build).
        let (g, idx) = unsafe {
            (
                slice(args.inputs[self.pos[0]] as *const T, d.outer * d.classes * d.inner),
                slice(args.inputs[self.pos[1]] as *const I, d.outer * d.inner),
            )
        };
        let (mut off, mut on) = (T::ZERO, T::ZERO);
        for o in 0..d.outer {
            let ids = &idx[o * d.inner..][..d.inner];
            for c in 0..d.classes {
                let row = &g[(o * d.classes + c) * d.inner..][..d.inner];
                for (&v, &k) in row.iter().zip(ids) {
                    if d.class(k.to_i64()) == Some(c) {
                        on = on.add(v);
                    } else {
                        off = off.add(v);
                    }
                }
            }
        }
        // SAFETY: the output is the `[2]` values' gradient and overlaps no input.
        let y = unsafe { slice_mut(args.outputs[0] as *mut T, 2) };
        y[0] = off;
        y[1] = on;
        Ok(())
    }
}

fn build_onehot(spec: &KernelSpec<'_>) -> BuildResult {
    let grad = spec.is::<ir::OnehotGrad>();
    // The gradient's output is the gradient of the `[2]` values.
    let (idx, values) = if grad { (spec.input(1)?, spec.output(0)?) } else { (spec.input(0)?, spec.input(2)?) };
    if values.shape() != [2] {
        return Err(spec.error(format!("values {} must have shape [2]", values.info)));
    }
    let (d, shape) = OnehotDims::of(spec, idx.shape())?;
    let bad_idx = || spec.error(format!("indices must be integers, got {}", idx.dtype()));
    let dt = values.dtype();
    if !grad {
        check_out(spec, 0, &shape, dt)?;
        let (pos, check) = ([idx.pos, values.pos], spec.check_indices);
        return with_bits!(dt, E => with_index!(idx.dtype(), I =>
            boxed(OnehotKernel::<E, I> { d, pos, check, _t: Types::default() }), _ => Err(bad_idx())));
    }
    let g = spec.input(0)?;
    if g.shape() != shape.as_slice() || g.dtype() != dt {
        return Err(spec.error(format!("gradient {} does not match the one-hot shape {shape:?}", g.info)));
    }
    check_out(spec, 0, &[2], dt)?;
    if has_f16(spec) {
        return f16_adapter(spec, false, build_onehot);
    }
    let pos = [g.pos, idx.pos];
    with_num!(dt, T => with_index!(idx.dtype(), I =>
        boxed(OnehotGradKernel::<T, I> { d, pos, _t: Types::default() }), _ => Err(bad_idx())),
        _ => Err(spec.unsupported_dtype(dt)))
}

// ----- Grouped and tied gathers -----

/// Per group: `[outer, A, inner]` data indexed along A by `nidx` indices.
#[derive(Clone, Copy, Debug)]
struct GroupDims {
    groups: usize,
    /// The geometry of one group.
    g: GatherDims,
}

/// `GroupedGather`, `TiedGather`: out-of-range indices give zero rows.
struct GroupedGatherKernel<E, I> {
    d: GroupDims,
    pos: [usize; 2],
    check: bool,
    _t: Types<(E, I)>,
}

impl<E: Copy + Default + Send + Sync + 'static, I: IndexElem> Kernel for GroupedGatherKernel<E, I> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let GroupDims { groups, g: d } = self.d;
        // SAFETY: the indices hold `groups · nidx` elements (checked at build).
        let idx_all = unsafe { slice(args.inputs[self.pos[1]] as *const I, groups * d.nidx) };
        d.check(self.check, idx_all)?;
        for g in 0..groups {
            // SAFETY: the data holds `groups · data_len` elements and the output
            // `groups · out_len` (checked at build), so group `g < groups` of each is
            // in bounds, as `gather_rows` requires; the output overlaps no input.
            unsafe {
                let x = (args.inputs[self.pos[0]] as *const E).add(g * d.data_len());
                let y = (args.outputs[0] as *mut E).add(g * d.out_len());
                d.gather_rows(x, &idx_all[g * d.nidx..][..d.nidx], y);
            }
        }
        Ok(())
    }
}

/// `GroupedGatherGrad(g, indices)`: per group, `g` rows added into zeros.
struct GroupedGatherGradKernel<T, I> {
    d: GroupDims,
    pos: [usize; 2],
    check: bool,
    _t: Types<(T, I)>,
}

impl<T: Num, I: IndexElem> Kernel for GroupedGatherGradKernel<T, I> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let GroupDims { groups, g: d } = self.d;
        // SAFETY: the indices hold `groups · nidx` elements (checked at build).
        let idx_all = unsafe { slice(args.inputs[self.pos[1]] as *const I, groups * d.nidx) };
        d.check(self.check, idx_all)?;
        // SAFETY: the output has the forward data's `groups · data_len` elements and
        // overlaps no input (the `KernelArgs` contract).
        let y_all = unsafe { slice_mut(args.outputs[0] as *mut T, groups * d.data_len()) };
        y_all.fill(T::ZERO);
        for g in 0..groups {
            let y = &mut y_all[g * d.data_len()..][..d.data_len()];
            // SAFETY: `g` holds `groups · out_len` elements (checked at build), so
            // group `g < groups` is in bounds, as `add_rows` requires; it overlaps
            // no output.
            unsafe {
                let gr = (args.inputs[self.pos[0]] as *const T).add(g * d.out_len());
                d.add_rows(gr, &idx_all[g * d.nidx..][..d.nidx], y);
            }
        }
        Ok(())
    }
}

fn build_grouped_gather(spec: &KernelSpec<'_>) -> BuildResult {
    let grad = spec.is::<ir::GroupedGatherGrad>();
    // The gradient's output has the forward data's shape (attribute `shape`).
    let (data, idx) = if grad { (spec.output(0)?, spec.input(1)?) } else { (spec.input(0)?, spec.input(1)?) };
    let (axis, groups, zero_oor) = if spec.is::<ir::TiedGather>() {
        let a: GatherAttrs = spec.typed()?;
        (a.axis, 1, a.zero_oor)
    } else if grad {
        let a: GroupedGatherGradAttrs = spec.typed()?;
        (a.axis, a.group_size, a.zero_oor)
    } else {
        let a: GroupedGatherAttrs = spec.typed()?;
        (a.axis, a.group_size, a.zero_oor)
    };
    let (axis, gathered) = grouped_gather_shape(data.shape(), idx.shape(), axis, groups).map_err(|m| spec.error(m))?;
    let groups = groups as usize;
    let first = usize::from(groups > 1);
    let d = GroupDims {
        groups,
        g: GatherDims {
            outer: data.shape()[first..axis].iter().product(),
            axis_len: data.shape()[axis],
            inner: data.shape()[axis + 1..].iter().product(),
            nidx: idx.shape()[first.min(idx.info.rank())..].iter().product(),
        },
    };
    // `zero_OOR` asks for zeros at out-of-range indices: never an error.
    let check = spec.check_indices && !zero_oor;
    let bad_idx = || spec.error(format!("indices must be integers, got {}", idx.dtype()));
    if !grad {
        check_out(spec, 0, &gathered, data.dtype())?;
        let pos = [data.pos, idx.pos];
        return with_bits!(data.dtype(), E => with_index!(idx.dtype(), I =>
            boxed(GroupedGatherKernel::<E, I> { d, pos, check, _t: Types::default() }), _ => Err(bad_idx())));
    }
    let g = spec.input(0)?;
    if g.shape() != gathered.as_slice() || g.dtype() != data.dtype() {
        return Err(spec.error(format!("gradient {} does not match the gathered shape {gathered:?}", g.info)));
    }
    check_out(spec, 0, data.shape(), data.dtype())?;
    if has_f16(spec) {
        return f16_adapter(spec, false, build_grouped_gather);
    }
    let (pos, dt) = ([g.pos, idx.pos], data.dtype());
    with_num!(dt, T => with_index!(idx.dtype(), I =>
        boxed(GroupedGatherGradKernel::<T, I> { d, pos, check, _t: Types::default() }), _ => Err(bad_idx())),
        _ => Err(spec.unsupported_dtype(dt)))
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::Subsample, build_subsample),
    (&ir::SubsampleGrad, build_subsample),
    (&ir::Split, build_split),
    (&ir::DynamicSlice, build_dynamic),
    (&ir::DynamicUpdate, build_dynamic),
    (&ir::DynamicUpdateInplace, build_dynamic),
    (&ir::DynamicSliceGrad, build_dynamic),
    (&ir::DynamicUpdateGrad, build_dynamic),
    (&ir::Onehot, build_onehot),
    (&ir::OnehotGrad, build_onehot),
    (&ir::GroupedGather, build_grouped_gather),
    (&ir::TiedGather, build_grouped_gather),
    (&ir::GroupedGatherGrad, build_grouped_gather),
];
