//! Data-movement kernels: `Transpose`, `Slice`, `Concat`, `Gather` and the
//! gradients `SliceGrad` (scatter into zeros) and `GatherGrad` (scatter-add).
//!
//! Transpose and slice are one strided-copy plan (signed strides and a base
//! offset, dims collapsed where the source stays contiguous), fixed at build
//! time. Element movement is dtype-agnostic (one kernel per element size);
//! only `GatherGrad` does arithmetic.

use super::broadcast::{contiguous_strides, MAX_RANK};
use super::dispatch::{with_bits, with_index, with_num};
use super::elem::{IndexElem, Num};
use super::float16::{f16_adapter, has_f16};
use super::par::par_range;
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{boxed, norm_axis, BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelRunError, KernelSpec};
use popart_ir::ops::all as ir;
use popart_ir::ops::grad::{ConcatGradAttrs, GatherGradAttrs, SliceGradAttrs};
use popart_ir::ops::shape::{resolve_slices, transpose_perm, SliceDim};
use popart_ir::ops::shape::{ConcatAttrs, GatherAttrs, SliceAttrs, TransposeAttrs};

/// A strided view of a source tensor, enumerated in row-major order of `dims`.
#[derive(Clone, Debug)]
pub(crate) struct Strided {
    dims: Vec<usize>,
    strides: Vec<isize>,
    base: isize,
    len: usize,
}

impl Strided {
    /// A view of `dims` with element `strides` starting at `base`; collapses dims.
    pub(crate) fn new(dims: &[usize], strides: &[isize], base: isize) -> Option<Self> {
        let len = dims.iter().product();
        let mut d: Vec<usize> = Vec::new();
        let mut s: Vec<isize> = Vec::new();
        for (&n, &st) in dims.iter().zip(strides) {
            if n == 1 {
                continue;
            }
            match (d.last_mut(), s.last_mut()) {
                (Some(ld), Some(ls)) if *ls == st * n as isize => {
                    *ld *= n;
                    *ls = st;
                }
                _ => {
                    d.push(n);
                    s.push(st);
                }
            }
        }
        if d.is_empty() {
            d.push(1);
            s.push(1);
        }
        (d.len() <= MAX_RANK).then_some(Strided { dims: d, strides: s, base, len })
    }

    /// Call `f(flat_offset, source_offset, len, source_stride)` for the runs covering `range`.
    #[inline]
    fn for_segments(&self, range: std::ops::Range<usize>, mut f: impl FnMut(usize, isize, usize, isize)) {
        if range.is_empty() {
            return;
        }
        let r = self.dims.len();
        let last = r - 1;
        let mut idx = [0usize; MAX_RANK];
        let mut rem = range.start;
        let mut off = self.base;
        for d in (0..r).rev() {
            idx[d] = rem % self.dims[d];
            rem /= self.dims[d];
            off += idx[d] as isize * self.strides[d];
        }
        let mut pos = range.start;
        while pos < range.end {
            let seg = (self.dims[last] - idx[last]).min(range.end - pos);
            f(pos, off, seg, self.strides[last]);
            pos += seg;
            if pos >= range.end {
                break;
            }
            idx[last] += seg;
            off += seg as isize * self.strides[last];
            let mut d = last;
            while idx[d] == self.dims[d] && d > 0 {
                off -= self.dims[d] as isize * self.strides[d];
                off += self.strides[d - 1];
                idx[d] = 0;
                idx[d - 1] += 1;
                d -= 1;
            }
        }
    }
}

/// Gather a strided view into a contiguous output (`Transpose`, `Slice`).
struct StridedCopy<E> {
    view: Strided,
    src: usize,
    _t: Types<E>,
}

impl<E: Copy + Send + Sync + 'static> Kernel for StridedCopy<E> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let x = SendPtr(args.inputs[self.src] as *mut E);
        let y = SendPtr(args.outputs[0] as *mut E);
        par_range(
            self.view.len,
            #[inline(always)]
            move |r| {
                self.view.for_segments(r, |o, s, len, st| {
                    // SAFETY: the view addresses only source elements; output runs are in range.
                    unsafe {
                        let ys = slice_mut(y.get().add(o), len);
                        let xs = x.get().offset(s);
                        if st == 1 {
                            ys.copy_from_slice(slice(xs, len));
                        } else {
                            for (i, v) in ys.iter_mut().enumerate() {
                                *v = *xs.offset(i as isize * st);
                            }
                        }
                    }
                });
            },
        );
        Ok(())
    }
}

/// Scatter a contiguous input into a strided view of a zeroed output (`SliceGrad`).
/// Without `zero_fill`, the other output elements keep their values
/// (`SliceUpdateInplace`, whose output 0 is its input 0).
struct StridedScatter<E> {
    view: Strided,
    out_len: usize,
    src: usize,
    zero_fill: bool,
    _t: Types<E>,
}

impl<E: Copy + Default + Send + Sync + 'static> Kernel for StridedScatter<E> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let g = args.inputs[self.src] as *const E;
        let y = args.outputs[0] as *mut E;
        if self.zero_fill {
            // SAFETY: the output holds the spec's `out_len` elements (`KernelArgs`).
            unsafe { slice_mut(y, self.out_len) }.fill(E::default());
        }
        self.view.for_segments(0..self.view.len, |o, s, len, st| {
            // SAFETY: the view addresses only output elements; input runs are in range.
            unsafe {
                let gs = slice(g.add(o), len);
                for (i, &v) in gs.iter().enumerate() {
                    *y.offset(s + i as isize * st) = v;
                }
            }
        });
        Ok(())
    }
}

/// The strided view of `x` that a slice spec selects, and its shape.
fn slice_view(spec: &KernelSpec<'_>, x_shape: &[usize]) -> Result<(Strided, Vec<usize>), KernelError> {
    let xs = contiguous_strides(x_shape);
    let mut dims = x_shape.to_vec();
    let mut strides: Vec<isize> = xs.iter().map(|&s| s as isize).collect();
    let mut base = 0isize;
    let SliceAttrs { starts, ends, steps, axes } = if spec.is::<ir::SliceGrad>() {
        let SliceGradAttrs { starts, ends, steps, axes, .. } = spec.typed()?;
        SliceAttrs { starts, ends, steps, axes }
    } else {
        spec.typed()?
    };
    let slices = resolve_slices(x_shape, &starts, &ends, steps.as_deref(), axes.as_deref())
        .map_err(|e| spec.error(e.to_string()))?;
    for SliceDim { axis, start, step, len } in slices {
        dims[axis] = len;
        if len > 0 {
            base += start as isize * xs[axis] as isize;
        }
        strides[axis] = step as isize * xs[axis] as isize;
    }
    let base = if dims.contains(&0) { 0 } else { base };
    let view = Strided::new(&dims, &strides, base).ok_or_else(|| spec.error("rank too large"))?;
    Ok((view, dims))
}

/// Copy each input into its column block of the output (`Concat`).
struct ConcatKernel<E> {
    outer: usize,
    /// Output row length (concatenated axis times inner).
    row: usize,
    /// Per input: (position, offset in the output row, row length).
    parts: Vec<(usize, usize, usize)>,
    _t: Types<E>,
}

impl<E: Copy + Send + Sync + 'static> Kernel for ConcatKernel<E> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let y = args.outputs[0] as *mut E;
        for &(pos, off, len) in &self.parts {
            let x = args.inputs[pos] as *const E;
            for o in 0..self.outer {
                // SAFETY: the output is `[outer, row]` and input `pos` `[outer, len]` with
                // `off + len <= row` (from the spec's shapes at build); they do not
                // overlap (`KernelArgs`).
                unsafe { slice_mut(y.add(o * self.row + off), len).copy_from_slice(slice(x.add(o * len), len)) };
            }
        }
        Ok(())
    }
}

/// `ConcatGrad`: copy the column block of `g` that came from one concat input.
struct ConcatGradKernel<E> {
    outer: usize,
    /// Row length of `g`, offset and length of the block in it.
    g_row: usize,
    off: usize,
    len: usize,
    src: usize,
    _t: Types<E>,
}

impl<E: Copy + Send + Sync + 'static> Kernel for ConcatGradKernel<E> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let g = args.inputs[self.src] as *const E;
        let y = args.outputs[0] as *mut E;
        for o in 0..self.outer {
            // SAFETY: `g` is `[outer, g_row]` with `off + len <= g_row` and the output
            // `[outer, len]` (from the spec's shapes at build); they do not overlap.
            unsafe {
                slice_mut(y.add(o * self.len), self.len)
                    .copy_from_slice(slice(g.add(o * self.g_row + self.off), self.len))
            };
        }
        Ok(())
    }
}

/// `[outer, A, inner]` data indexed along A by `I` indices: the geometry of
/// `Gather` and its gradient, and of each group of `GroupedGather` (`indexing`).
#[derive(Clone, Copy, Debug)]
pub(super) struct GatherDims {
    pub(super) outer: usize,
    pub(super) axis_len: usize,
    pub(super) inner: usize,
    pub(super) nidx: usize,
}

impl GatherDims {
    /// The row picked by index value `v` (negative counts from the end), if in range.
    #[inline(always)]
    fn row(&self, v: i64) -> Option<usize> {
        let a = self.axis_len as i64;
        let v = if v < 0 { v + a } else { v };
        (0..a).contains(&v).then_some(v as usize)
    }

    /// With `check`, the first index out of range as an error (before anything
    /// is written); without, nothing (out-of-range rows have a defined result).
    #[inline]
    pub(super) fn check<I: IndexElem>(&self, check: bool, idx: &[I]) -> KernelResult {
        if check {
            if let Some(&v) = idx.iter().find(|&&v| self.row(v.to_i64()).is_none()) {
                return Err(KernelRunError::IndexOutOfRange { index: v.to_i64(), bound: self.axis_len });
            }
        }
        Ok(())
    }

    /// Elements of the indexed data: `outer * axis_len * inner`.
    pub(super) fn data_len(&self) -> usize {
        self.outer * self.axis_len * self.inner
    }

    /// Elements of the gathered output: `outer * nidx * inner`.
    pub(super) fn out_len(&self) -> usize {
        self.outer * self.nidx * self.inner
    }

    /// `y[o, i, :] = x[o, idx[i], :]`, a zero row where the index is out of range.
    ///
    /// # Safety
    /// `x` holds [`data_len`](Self::data_len) elements and `y`
    /// [`out_len`](Self::out_len), not overlapping `x`; `idx` holds `nidx`.
    #[inline]
    pub(super) unsafe fn gather_rows<E: Copy + Default, I: IndexElem>(&self, x: *const E, idx: &[I], y: *mut E) {
        for o in 0..self.outer {
            for (i, &v) in idx.iter().enumerate() {
                // SAFETY: row `(o, i)` of the `[outer, nidx, inner]` output, within its
                // `out_len` elements (this method's contract).
                let out = unsafe { slice_mut(y.add((o * self.nidx + i) * self.inner), self.inner) };
                match self.row(v.to_i64()) {
                    Some(r) => {
                        // SAFETY: `r < axis_len`: row `(o, r)` of the `[outer, axis_len,
                        // inner]` data, which does not overlap `y` (this method's contract).
                        let src = unsafe { slice(x.add((o * self.axis_len + r) * self.inner), self.inner) };
                        out.copy_from_slice(src)
                    }
                    None => out.fill(E::default()),
                }
            }
        }
    }

    /// `y[o, idx[i], :] += g[o, i, :]`, nothing where the index is out of range
    /// (the gradient of [`gather_rows`](Self::gather_rows)).
    ///
    /// # Safety
    /// `g` holds [`out_len`](Self::out_len) elements, not overlapping `y`; `y`
    /// holds [`data_len`](Self::data_len) and `idx` `nidx`.
    #[inline]
    pub(super) unsafe fn add_rows<T: Num, I: IndexElem>(&self, g: *const T, idx: &[I], y: &mut [T]) {
        for o in 0..self.outer {
            for (i, &v) in idx.iter().enumerate() {
                if let Some(r) = self.row(v.to_i64()) {
                    // SAFETY: row `(o, i)` of the `[outer, nidx, inner]` `g`, not
                    // overlapping `y` (this method's contract).
                    let src = unsafe { slice(g.add((o * self.nidx + i) * self.inner), self.inner) };
                    let dst = &mut y[(o * self.axis_len + r) * self.inner..][..self.inner];
                    for (a, &b) in dst.iter_mut().zip(src) {
                        *a = a.add(b);
                    }
                }
            }
        }
    }
}

/// `Gather`: out-of-range indices produce zero rows (or, with `check`, an error).
struct GatherKernel<E, I> {
    d: GatherDims,
    pos: [usize; 2],
    check: bool,
    _t: Types<(E, I)>,
}

impl<E: Copy + Default + Send + Sync + 'static, I: IndexElem> Kernel for GatherKernel<E, I> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let d = self.d;
        let x = args.inputs[self.pos[0]] as *const E;
        // SAFETY: the indices hold `nidx` elements (`KernelArgs`).
        let idx = unsafe { slice(args.inputs[self.pos[1]] as *const I, d.nidx) };
        d.check(self.check, idx)?;
        // SAFETY: the data and the output hold the `data_len` and `out_len` elements
        // of `d` (built from their shapes) and do not overlap (`KernelArgs`).
        unsafe { d.gather_rows(x, idx, args.outputs[0] as *mut E) };
        Ok(())
    }
}

/// `GatherGrad(g, indices, x)`: zeros of `x`'s shape with `g` rows added at the
/// indices; out-of-range indices add nothing (or, with `check`, are an error).
struct GatherGradKernel<T, I> {
    d: GatherDims,
    pos: [usize; 2],
    check: bool,
    _t: Types<(T, I)>,
}

impl<T: Num, I: IndexElem> Kernel for GatherGradKernel<T, I> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let d = self.d;
        let g = args.inputs[self.pos[0]] as *const T;
        // SAFETY: the indices hold `nidx` elements (`KernelArgs`).
        let idx = unsafe { slice(args.inputs[self.pos[1]] as *const I, d.nidx) };
        d.check(self.check, idx)?;
        // SAFETY: the output has the data's `data_len` elements (`KernelArgs`).
        let y = unsafe { slice_mut(args.outputs[0] as *mut T, d.data_len()) };
        y.fill(T::ZERO);
        // SAFETY: `g` holds the gathered `out_len` elements, not overlapping `y`.
        unsafe { d.add_rows(g, idx, y) };
        Ok(())
    }
}

/// Build the kernels of this family.
pub(crate) fn build(spec: &KernelSpec<'_>) -> BuildResult {
    spec.output(0)?;
    match () {
        _ if spec.is::<ir::Transpose>() => {
            let x = spec.input(0)?;
            let perm = transpose_perm(&spec.typed::<TransposeAttrs>()?.perm, x.info.rank())
                .map_err(|e| spec.error(e.to_string()))?;
            let xs = contiguous_strides(x.shape());
            let dims: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
            let strides: Vec<isize> = perm.iter().map(|&p| xs[p] as isize).collect();
            check_out(spec, &dims, x.dtype())?;
            let view = Strided::new(&dims, &strides, 0).ok_or_else(|| spec.error("rank too large"))?;
            with_bits!(x.dtype(), E => boxed(StridedCopy::<E> { view, src: x.pos, _t: Types::default() }))
        }
        _ if spec.is::<ir::Slice>() => {
            let x = spec.input(0)?;
            let (view, dims) = slice_view(spec, x.shape())?;
            check_out(spec, &dims, x.dtype())?;
            with_bits!(x.dtype(), E => boxed(StridedCopy::<E> { view, src: x.pos, _t: Types::default() }))
        }
        _ if spec.is::<ir::SliceGrad>() => {
            // The output has the forward input's shape (attribute `shape`).
            let (g, x) = (spec.input(0)?, spec.output(0)?);
            let (view, dims) = slice_view(spec, x.shape())?;
            if g.shape() != dims.as_slice() || g.dtype() != x.dtype() {
                return Err(spec.error(format!("gradient {} does not match the slice {dims:?}", g.info)));
            }
            let out_len = x.nelms();
            with_bits!(x.dtype(), E => boxed(StridedScatter::<E> { view, out_len, src: g.pos, zero_fill: true, _t: Types::default() }))
        }
        _ if spec.is::<ir::SliceUpdateInplace>() => {
            let (x, u) = (spec.input(0)?, spec.input(1)?);
            let (view, dims) = slice_view(spec, x.shape())?;
            if u.shape() != dims.as_slice() || u.dtype() != x.dtype() {
                return Err(spec.error(format!("update {} does not match the slice {dims:?}", u.info)));
            }
            check_out(spec, x.shape(), x.dtype())?;
            let out_len = x.nelms();
            with_bits!(x.dtype(), E => boxed(StridedScatter::<E> { view, out_len, src: u.pos, zero_fill: false, _t: Types::default() }))
        }
        _ if popart_ir::ops::view::is_strided_view(spec.def) => {
            Err(spec.error("a strided in-place view runs as copies made by the `materialize-views` pass; prepare the IR with the default pipeline"))
        }
        _ if spec.is::<ir::Concat>() => {
            let first = spec.input(0)?;
            let rank = first.info.rank();
            let axis = norm_axis(spec, spec.typed::<ConcatAttrs>()?.axis, rank)?;
            let outer: usize = first.shape()[..axis].iter().product();
            let inner: usize = first.shape()[axis + 1..].iter().product();
            let mut parts = Vec::new();
            let mut off = 0;
            let mut shape = first.shape().to_vec();
            shape[axis] = 0;
            for (p, (_, t)) in spec.inputs.iter().enumerate() {
                let same = t.rank() == rank
                    && t.dtype == first.dtype()
                    && (0..rank).all(|d| d == axis || t.shape[d] == first.shape()[d]);
                if !same {
                    return Err(spec.error(format!("input {t} does not match {} off axis {axis}", first.info)));
                }
                let len = t.shape[axis] * inner;
                parts.push((p, off, len));
                off += len;
                shape[axis] += t.shape[axis];
            }
            check_out(spec, &shape, first.dtype())?;
            let row = off;
            with_bits!(first.dtype(), E => boxed(ConcatKernel::<E> { outer, row, parts, _t: Types::default() }))
        }
        _ if spec.is::<ir::ConcatGrad>() => {
            let g = spec.input(0)?;
            let (axis, start, end) = spec.typed::<ConcatGradAttrs>()?.range(g.shape()).map_err(|m| spec.error(m))?;
            let mut shape = g.shape().to_vec();
            shape[axis] = end - start;
            check_out(spec, &shape, g.dtype())?;
            let inner: usize = g.shape()[axis + 1..].iter().product();
            let outer: usize = g.shape()[..axis].iter().product();
            let (g_row, off, len, src) = (g.shape()[axis] * inner, start * inner, (end - start) * inner, g.pos);
            with_bits!(g.dtype(), E =>
                boxed(ConcatGradKernel::<E> { outer, g_row, off, len, src, _t: Types::default() }))
        }
        _ if spec.is::<ir::Gather>() || spec.is::<ir::GatherGrad>() => {
            let grad = spec.is::<ir::GatherGrad>();
            // The gradient's output has the forward data's shape (attribute `shape`).
            let (data, idx) = if grad { (spec.output(0)?, spec.input(1)?) } else { (spec.input(0)?, spec.input(1)?) };
            let rank = data.info.rank();
            if rank == 0 {
                return Err(spec.error("gather from a scalar"));
            }
            let GatherAttrs { axis, zero_oor } = if grad {
                let GatherGradAttrs { axis, zero_oor, .. } = spec.typed()?;
                GatherAttrs { axis, zero_oor }
            } else {
                spec.typed()?
            };
            let axis = norm_axis(spec, axis, rank)?;
            let d = GatherDims {
                outer: data.shape()[..axis].iter().product(),
                axis_len: data.shape()[axis],
                inner: data.shape()[axis + 1..].iter().product(),
                nidx: idx.nelms(),
            };
            let mut gathered = data.shape()[..axis].to_vec();
            gathered.extend_from_slice(idx.shape());
            gathered.extend_from_slice(&data.shape()[axis + 1..]);
            let bad_idx = || spec.error(format!("indices must be integers, got {}", idx.dtype()));
            // `zero_OOR` asks for zeros at out-of-range indices: never an error.
            let check = spec.check_indices && !zero_oor;
            if !grad {
                check_out(spec, &gathered, data.dtype())?;
                let pos = [data.pos, idx.pos];
                return with_bits!(data.dtype(), E => with_index!(idx.dtype(), I =>
                    boxed(GatherKernel::<E, I> { d, pos, check, _t: Types::default() }), _ => Err(bad_idx())));
            }
            let g = spec.input(0)?;
            if g.shape() != gathered.as_slice() || g.dtype() != data.dtype() {
                return Err(spec.error(format!("gradient {} does not match the gathered shape {gathered:?}", g.info)));
            }
            check_out(spec, data.shape(), data.dtype())?;
            if has_f16(spec) {
                return f16_adapter(spec, false, build);
            }
            let pos = [g.pos, idx.pos];
            let dt = data.dtype();
            with_num!(dt, T => with_index!(idx.dtype(), I =>
                boxed(GatherGradKernel::<T, I> { d, pos, check, _t: Types::default() }), _ => Err(bad_idx())),
                _ => Err(spec.unsupported_dtype(dt)))
        }
        _ => Err(spec.error(format!("`{}` is not a shape op", spec.op_type()))),
    }
}

/// Check output 0 has the expected shape and dtype.
fn check_out(spec: &KernelSpec<'_>, shape: &[usize], dtype: popart_ir::DataType) -> Result<(), KernelError> {
    let y = spec.output(0)?;
    if y.shape() != shape || y.dtype() != dtype {
        return Err(spec.error(format!("output {} should be {dtype}{shape:?}", y.info)));
    }
    Ok(())
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::Transpose, build),
    (&ir::Slice, build),
    (&ir::Concat, build),
    (&ir::Gather, build),
    (&ir::SliceGrad, build),
    (&ir::SliceUpdateInplace, build),
    (&ir::TransposeInplace, build),
    (&ir::SliceInplace, build),
    (&ir::ConcatInplace, build),
    (&ir::GatherGrad, build),
    (&ir::ConcatGrad, build),
];

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, numeric_grad, run_op, t, try_run_op_checked, Rng};
    use crate::kernel::KernelRunError;
    use popart_ir::ops::grad::{ConcatGradAttrs, GatherGradAttrs, SliceGradAttrs};
    use popart_ir::ops::shape::{ConcatAttrs, GatherAttrs, SliceAttrs, TransposeAttrs};
    use popart_ir::{Attributes, DataType, HostTensor, OpAttrs};

    fn iota(dtype: DataType, shape: &[usize]) -> HostTensor {
        let n: usize = shape.iter().product();
        t(dtype, shape, &(0..n).map(|i| i as f64).collect::<Vec<_>>())
    }

    fn transpose(perm: &[i64]) -> Attributes {
        TransposeAttrs { perm: perm.to_vec() }.to_attrs()
    }

    fn slice(starts: &[i64], ends: &[i64], steps: Option<&[i64]>, axes: Option<&[i64]>) -> SliceAttrs {
        let (starts, ends) = (starts.to_vec(), ends.to_vec());
        SliceAttrs { starts, ends, steps: steps.map(<[i64]>::to_vec), axes: axes.map(<[i64]>::to_vec) }
    }

    fn axis(axis: i64) -> Attributes {
        ConcatAttrs { axis }.to_attrs()
    }

    fn gather(axis: i64, zero_oor: bool) -> Attributes {
        GatherAttrs { axis, zero_oor }.to_attrs()
    }

    /// `GatherGrad` of a gather along `axis` from data of shape `shape`.
    fn gather_grad(axis: i64, zero_oor: bool, shape: &[usize]) -> Attributes {
        GatherGradAttrs { axis, zero_oor, shape: shape.iter().map(|&d| d as i64).collect() }.to_attrs()
    }

    #[test]
    fn transpose_matches_index_arithmetic() {
        let shape = [2usize, 3, 4];
        for perm in [[0i64, 2, 1], [2, 1, 0], [1, 0, 2], [1, 2, 0]] {
            for dt in [DataType::Float32, DataType::Int64, DataType::Int8, DataType::Float16] {
                let out = &run_op("Transpose", transpose(&perm), &[(0, iota(dt, &shape))])[0];
                let p: Vec<usize> = perm.iter().map(|&v| v as usize).collect();
                let os: Vec<usize> = p.iter().map(|&d| shape[d]).collect();
                assert_eq!(out.info.shape, os);
                let mut want = Vec::new();
                for i in 0..os[0] {
                    for j in 0..os[1] {
                        for k in 0..os[2] {
                            let mut src = [0; 3];
                            src[p[0]] = i;
                            src[p[1]] = j;
                            src[p[2]] = k;
                            want.push((src[0] * 12 + src[1] * 4 + src[2]) as f64);
                        }
                    }
                }
                assert_eq!(out.to_f64_vec(), want, "perm {perm:?} {dt}");
            }
        }
        // Default perm reverses; a large transpose runs in parallel pieces.
        let out = &run_op("Transpose", Attributes::new(), &[(0, iota(DataType::Float32, &[300, 400]))])[0];
        let v = out.to_f64_vec();
        assert_eq!(out.info.shape, vec![400, 300]);
        assert!((0..400).all(|j| (0..300).all(|i| v[j * 300 + i] == (i * 400 + j) as f64)));
    }

    #[test]
    fn bad_axis_attributes_are_build_errors_with_the_ir_messages() {
        use crate::kernel::KernelSpec;
        let f = |s: &[usize]| popart_ir::TensorInfo::new(DataType::Float32, s);
        let cases = [
            ("Slice", slice(&[0], &[1], Some(&[0]), None).to_attrs(), "slice step cannot be 0"),
            ("Slice", slice(&[0], &[1, 2], None, None).to_attrs(), "must have the same length"),
            ("Slice", slice(&[0], &[1], None, Some(&[2])).to_attrs(), "axis 2 is out of range"),
            ("Transpose", transpose(&[0, 0]), "[0, 0] is not a permutation of 2 axes"),
            ("Concat", axis(-3), "axis -3 is out of range for rank 2"),
        ];
        for (op, a, want) in cases {
            let def = popart_ir::lookup_op(op).unwrap();
            let spec = KernelSpec::new(def, &a, vec![(0, f(&[2, 3]))], vec![(0, f(&[2, 3]))]);
            let err = super::super::build_kernel(&spec).err().unwrap_or_else(|| panic!("{op} must fail"));
            assert_eq!(err.op_type, op);
            assert!(err.reason.contains(want), "{op}: {err}");
        }
    }

    /// Python-style reference for one sliced axis.
    fn py_slice(dim: i64, start: i64, end: i64, step: i64) -> Vec<i64> {
        let norm = |v: i64, lo: i64, hi: i64| (if v < 0 { v + dim } else { v }).clamp(lo, hi);
        let mut v = Vec::new();
        if step > 0 {
            let (mut i, e) = (norm(start, 0, dim), norm(end, 0, dim));
            while i < e {
                v.push(i);
                i += step;
            }
        } else {
            let (mut i, e) = (norm(start, -1, dim - 1), norm(end, -1, dim - 1));
            while i > e {
                v.push(i);
                i += step;
            }
        }
        v
    }

    #[test]
    fn slice_with_negative_steps_and_clamping() {
        let shape = [5usize, 6];
        let cases: &[([i64; 2], [i64; 2], [i64; 2])] = &[
            ([1, 0], [4, 6], [1, 2]),
            ([-1, 5], [-6, -100], [-1, -2]),
            ([100, 2], [-100, 3], [-2, 1]),
            ([0, 0], [100, 6], [3, -1]),
            ([3, 0], [1, 6], [1, 1]),
        ];
        for &(starts, ends, steps) in cases {
            let a = slice(&starts, &ends, Some(&steps), Some(&[0, 1])).to_attrs();
            let out = &run_op("Slice", a, &[(0, iota(DataType::Float64, &shape))])[0];
            let r0 = py_slice(5, starts[0], ends[0], steps[0]);
            let r1 = py_slice(6, starts[1], ends[1], steps[1]);
            assert_eq!(out.info.shape, vec![r0.len(), r1.len()]);
            let want: Vec<f64> = r0.iter().flat_map(|&i| r1.iter().map(move |&j| (i * 6 + j) as f64)).collect();
            assert_eq!(out.to_f64_vec(), want, "{starts:?} {ends:?} {steps:?}");
        }
    }

    #[test]
    fn slice_grad_scatters_into_zeros() {
        let SliceAttrs { starts, ends, steps, axes } = slice(&[3], &[0], Some(&[-2]), Some(&[1]));
        let g = t(DataType::Float32, &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let a = SliceGradAttrs { starts, ends, steps, axes, shape: vec![2, 4] }.to_attrs();
        let out = &run_op("SliceGrad", a, &[(0, g)])[0];
        assert_eq!(out.to_f64_vec(), vec![0.0, 2.0, 0.0, 1.0, 0.0, 4.0, 0.0, 3.0]);
    }

    #[test]
    fn concat_along_each_axis() {
        let a = iota(DataType::Int32, &[2, 2]);
        let b = t(DataType::Int32, &[2, 1], &[10.0, 11.0]);
        let out = &run_op("Concat", axis(1), &[(0, a.clone()), (1, b)])[0];
        assert_eq!(out.to_f64_vec(), vec![0.0, 1.0, 10.0, 2.0, 3.0, 11.0]);
        let c = t(DataType::Int32, &[1, 2], &[7.0, 8.0]);
        let out = &run_op("Concat", axis(-2), &[(0, a.clone()), (1, c), (2, a)])[0];
        assert_eq!(out.info.shape, vec![5, 2]);
        assert_eq!(out.to_f64_vec(), vec![0.0, 1.0, 2.0, 3.0, 7.0, 8.0, 0.0, 1.0, 2.0, 3.0]);
    }

    #[test]
    fn gather_picks_rows_with_negative_indices() {
        let data = iota(DataType::Float32, &[3, 4]);
        let idx = t(DataType::Int32, &[2, 2], &[2.0, 0.0, -1.0, 1.0]);
        let ax = |a| gather(a, false);
        let out = &run_op("Gather", ax(0), &[(0, data.clone()), (1, idx.clone())])[0];
        assert_eq!(out.info.shape, vec![2, 2, 4]);
        let want: Vec<f64> = [2, 0, 2, 1].iter().flat_map(|&r| (0..4).map(move |c| (r * 4 + c) as f64)).collect();
        assert_eq!(out.to_f64_vec(), want);
        let out = &run_op("Gather", ax(1), &[(0, data), (1, idx)])[0];
        assert_eq!(out.info.shape, vec![3, 2, 2]);
        let want: Vec<f64> = (0..3).flat_map(|r| [2, 0, 3, 1].map(|c| (r * 4 + c) as f64)).collect();
        assert_eq!(out.to_f64_vec(), want);
    }

    #[test]
    fn out_of_range_gather_indices_give_zero_rows_and_no_gradient() {
        let data = iota(DataType::Float32, &[3, 2]);
        // 3 and -4 are just outside [-3, 3); 2^64 - 1 must not wrap to -1.
        let cases = [
            (DataType::Int32, vec![1.0, 3.0, -4.0, -1.0]),
            (DataType::Int64, vec![1.0, 1e18, -1e18, 2.0]),
            (DataType::Uint64, vec![1.0, 1.9e19, 3.0, 2.0]),
        ];
        for (dt, v) in cases {
            let idx = t(dt, &[4], &v);
            let out = &run_op("Gather", Attributes::new(), &[(0, data.clone()), (1, idx.clone())])[0];
            assert_eq!(out.to_f64_vec(), vec![2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 4.0, 5.0], "{dt}");
            let g = t(DataType::Float32, &[4, 2], &[1.0; 8]);
            let dx = &run_op("GatherGrad", gather_grad(0, false, &data.info.shape), &[(0, g), (1, idx)])[0];
            assert_eq!(dx.to_f64_vec(), vec![0.0, 0.0, 1.0, 1.0, 1.0, 1.0], "{dt}");
        }
    }

    #[test]
    fn checked_gather_reports_the_first_out_of_range_index_unless_zero_oor() {
        let data = iota(DataType::Float32, &[3, 2]);
        let idx = t(DataType::Int32, &[3], &[-3.0, 7.0, -9.0]);
        let err = try_run_op_checked("Gather", Attributes::new(), &[(0, data.clone()), (1, idx.clone())]).unwrap_err();
        assert_eq!(err, KernelRunError::IndexOutOfRange { index: 7, bound: 3 });
        let g = t(DataType::Float32, &[3, 2], &[1.0; 6]);
        let grad_ins = [(0, g), (1, idx.clone())];
        let err = try_run_op_checked("GatherGrad", gather_grad(0, false, &data.info.shape), &grad_ins).unwrap_err();
        assert_eq!(err, KernelRunError::IndexOutOfRange { index: 7, bound: 3 });
        // zero_OOR asks for the zeros: no error, same result as unchecked.
        let out = try_run_op_checked("Gather", gather(0, true), &[(0, data.clone()), (1, idx)]).unwrap();
        assert_eq!(out[0].to_f64_vec(), vec![0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        assert!(try_run_op_checked("GatherGrad", gather_grad(0, true, &[3, 2]), &grad_ins).is_ok());
        // In range: checked and unchecked agree.
        let ok = t(DataType::Int32, &[2], &[-1.0, 0.0]);
        let out = try_run_op_checked("Gather", Attributes::new(), &[(0, data), (1, ok)]).unwrap();
        assert_eq!(out[0].to_f64_vec(), vec![4.0, 5.0, 0.0, 1.0]);
    }

    #[test]
    fn concat_grad_splits_the_gradient() {
        let g = iota(DataType::Float32, &[2, 5]);
        let parts =
            [iota(DataType::Float32, &[2, 2]), iota(DataType::Float32, &[2, 1]), iota(DataType::Float32, &[2, 2])];
        let want: [&[f64]; 3] = [&[0.0, 1.0, 5.0, 6.0], &[2.0, 7.0], &[3.0, 4.0, 8.0, 9.0]];
        for (index, want) in want.iter().enumerate() {
            let shapes = parts.iter().map(|p| p.info.shape.iter().map(|&d| d as i64).collect()).collect();
            let a = ConcatGradAttrs { axis: 1, index: index as i64, shapes }.to_attrs();
            let out = &run_op("ConcatGrad", a, &[(0, g.clone())])[0];
            assert_eq!(out.info, parts[index].info);
            assert_eq!(out.to_f64_vec(), want.to_vec());
        }
    }

    /// GatherGrad against finite differences of sum(w ⊙ gather(x)), repeated indices included.
    #[test]
    fn gather_grad_matches_finite_differences() {
        let mut rng = Rng::new(8);
        let x = rng.vec(12, -1.0, 1.0);
        let idx = t(DataType::Int64, &[3], &[1.0, 3.0, 1.0]);
        let a = gather(1, false);
        let w = rng.vec(9, -1.0, 1.0);
        let want = numeric_grad(&x, 1e-6, |x| {
            let out = &run_op("Gather", a.clone(), &[(0, t(DataType::Float64, &[3, 4], x)), (1, idx.clone())])[0];
            out.to_f64_vec().iter().zip(&w).map(|(p, q)| p * q).sum()
        });
        let ins = [(0, t(DataType::Float64, &[3, 3], &w)), (1, idx.clone())];
        let got = &run_op("GatherGrad", gather_grad(1, false, &[3, 4]), &ins)[0];
        assert_close(&got.to_f64_vec(), &want, 1e-8);
    }
}
