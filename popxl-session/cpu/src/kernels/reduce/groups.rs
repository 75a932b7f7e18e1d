//! Reductions over groups of elements: `ReduceMedian` and `ReduceMedianGrad`, the
//! `ReduceGrad` kernels of `prod l1 l2 logsum logsumexp sumsquare`, and `LambSquare`.
//!
//! A [`Groups`] plan, built once, lists the base offset of each output's group
//! (an odometer over the kept dims) and the offsets of the group's elements
//! relative to it, row-major over the reduced axes (a table only when they are
//! not contiguous): the median index of an element is its position in that order.

use std::sync::Mutex;

use popart_ir::DataType;

use super::{pairwise, Reduce, SumSquareR};
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelRunError, KernelSpec};
use crate::kernels::binary::{MapN, NAry};
use crate::kernels::broadcast::MAX_RANK;
use crate::kernels::dispatch::{with_float, with_num};
use crate::kernels::elem::{Float, Num};
use crate::kernels::float16::{f16_adapter, has_f16};
use crate::kernels::ptr::{slice, slice_mut};
use crate::kernels::spec::{boxed, norm_axes, BuildResult, SpecExt, Types};
use crate::kernels::KernelEntry;
use popart_ir::ops::all as ir;
use popart_ir::ops::grad::{ReduceGradAttrs, ReduceKind};
use popart_ir::ops::reduce::{ReduceAttrs, ReduceMedianGradAttrs};

/// Offsets of a strided index space, dims collapsed where contiguous (size-1
/// dims dropped), visited in row-major order.
#[derive(Clone, Debug)]
pub(crate) struct Strided {
    dims: Vec<usize>,
    strides: Vec<usize>,
    len: usize,
}

impl Strided {
    /// From `(dim, stride)` pairs, outermost first.
    pub(crate) fn new(pairs: impl IntoIterator<Item = (usize, usize)>) -> Strided {
        let (mut dims, mut strides): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
        let mut len = 1usize;
        for (d, s) in pairs {
            len = len.saturating_mul(d);
            if d == 1 {
                continue;
            }
            match (dims.last_mut(), strides.last_mut()) {
                (Some(ld), Some(ls)) if *ls == d * s => {
                    *ld *= d;
                    *ls = s;
                }
                _ => {
                    dims.push(d);
                    strides.push(s);
                }
            }
        }
        Strided { dims, strides, len }
    }

    /// Number of positions.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True when position `k` is at offset `k`.
    pub(crate) fn is_contiguous(&self) -> bool {
        self.dims.is_empty() || (self.dims.len() == 1 && self.strides[0] == 1)
    }

    /// Call `f(k, offset)` for every position `k` in order.
    #[inline]
    pub(crate) fn for_each(&self, mut f: impl FnMut(usize, usize)) {
        if self.len == 0 {
            return;
        }
        let r = self.dims.len();
        if r == 0 {
            f(0, 0);
            return;
        }
        let last = r - 1;
        let (n, s) = (self.dims[last], self.strides[last]);
        let mut idx = [0usize; MAX_RANK];
        let (mut base, mut k) = (0usize, 0usize);
        loop {
            for j in 0..n {
                f(k + j, base + j * s);
            }
            k += n;
            let mut d = last;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                idx[d] += 1;
                base += self.strides[d];
                if idx[d] < self.dims[d] {
                    break;
                }
                base -= self.dims[d] * self.strides[d];
                idx[d] = 0;
            }
        }
    }
}

/// The groups of a reduction of `shape` over `axes` (see the module doc).
pub(crate) struct Groups {
    /// Base offset of each output's group, in output order.
    kept: Strided,
    /// Offsets of a group's elements relative to its base; `None`: `0..count`.
    red: Option<Vec<usize>>,
    count: usize,
}

impl Groups {
    pub(crate) fn new(spec: &KernelSpec<'_>, shape: &[usize], axes: &[usize]) -> Result<Groups, KernelError> {
        let strides = crate::kernels::broadcast::contiguous_strides(shape);
        let pairs = |reduced: bool| {
            shape
                .iter()
                .zip(&strides)
                .enumerate()
                .filter(move |(d, _)| axes.contains(d) == reduced)
                .map(|(_, (&n, &s))| (n, s))
        };
        let (kept, red) = (Strided::new(pairs(false)), Strided::new(pairs(true)));
        if kept.dims.len() > MAX_RANK {
            return Err(spec.error(format!("shape {shape:?} has too many kept dims")));
        }
        let count = red.len();
        let red = if red.is_contiguous() {
            None
        } else {
            let mut offs = popart_ir::size::try_zeroed_vec::<usize>(count, "reduction offsets")
                .map_err(|e| spec.error(e.to_string()))?;
            red.for_each(|k, o| offs[k] = o);
            Some(offs)
        };
        Ok(Groups { kept, red, count })
    }

    /// Offset of element `k` of a group relative to its base.
    #[inline(always)]
    fn offset(&self, k: usize) -> usize {
        match &self.red {
            Some(offs) => offs[k],
            None => k,
        }
    }
}

/// Axes of a reduction spec on input `x`.
fn axes_of(spec: &KernelSpec<'_>, rank: usize) -> Result<Vec<usize>, KernelError> {
    let axes = if spec.is::<ir::ReduceMedianGrad>() {
        spec.typed::<ReduceMedianGradAttrs>()?.axes
    } else if spec.is::<ir::ReduceGrad>() {
        spec.typed::<ReduceGradAttrs>()?.axes
    } else {
        spec.typed::<ReduceAttrs>()?.axes
    };
    norm_axes(spec, &axes, rank)
}

/// `ReduceMedian`: each group is copied to a scratch buffer and the lower median
/// (rank `(n - 1) / 2`) selected; its index is the first element equal to it. A
/// group holding NaN has median NaN at its first NaN.
struct Median<T> {
    groups: Groups,
    src: usize,
    scratch: Mutex<Vec<T>>,
}

impl<T: Num> Kernel for Median<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let x = args.inputs[self.src] as *const T;
        let (y, ind) = (args.outputs[0] as *mut T, args.outputs[1] as *mut i32);
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let buf = guard.as_mut_slice();
        let n = self.groups.count;
        let m = n.saturating_sub(1) / 2;
        self.groups.kept.for_each(|o, base| {
            // SAFETY: the plan was built from the input's shape, so `base + offset(k)`
            // for `k < n` lies inside the input (`base + k` for a contiguous group);
            // the reads of `xb` below rely on this too.
            let xb = unsafe { x.add(base) };
            match &self.groups.red {
                // SAFETY: as above, a contiguous group of `n` elements.
                None => buf.copy_from_slice(unsafe { slice(xb, n) }),
                Some(offs) => {
                    for (b, &off) in buf.iter_mut().zip(offs) {
                        // SAFETY: `off` is one of the plan's offsets, as above.
                        *b = unsafe { *xb.add(off) };
                    }
                }
            }
            #[allow(clippy::eq_op)]
            let (v, at) = match buf.iter().position(|v| v != v) {
                Some(p) => (buf[p], p),
                None => {
                    let (_, v, _) =
                        buf.select_nth_unstable_by(m, |a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
                    let v = *v;
                    // SAFETY: `k < n`: a plan offset inside the input, as above.
                    let at = (0..n).find(|&k| unsafe { *xb.add(self.groups.offset(k)) } == v).unwrap_or(0);
                    (v, at)
                }
            };
            // SAFETY: `o` counts the kept positions, `kept.len()` = the element count of
            // both outputs (checked at build), which overlap no input nor each other.
            unsafe {
                *y.add(o) = v;
                *ind.add(o) = at as i32;
            }
        });
        Ok(())
    }
}

fn build_median(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_median);
    }
    let (x, y, ind) = (spec.input(0)?, spec.output(0)?, spec.output(1)?);
    let axes = axes_of(spec, x.info.rank())?;
    let groups = Groups::new(spec, x.shape(), &axes)?;
    if y.dtype() != x.dtype()
        || ind.dtype() != DataType::Int32
        || groups.kept.len() != y.nelms()
        || ind.nelms() != y.nelms()
    {
        return Err(spec.error(format!("outputs {} and {} do not fit the median of {}", y.info, ind.info, x.info)));
    }
    if groups.count == 0 && y.nelms() > 0 {
        return Err(spec.error("cannot take the median of an empty group"));
    }
    let dt = x.dtype();
    with_num!(dt, T => {
        let scratch = popart_ir::size::try_zeroed_vec::<T>(groups.count, "median scratch")
            .map_err(|e| spec.error(e.to_string()))?;
        boxed(Median::<T> { groups, src: x.pos, scratch: Mutex::new(scratch) })
    }, _ => Err(spec.unsupported_dtype(dt)))
}

/// `ReduceMedianGrad(g, indices, x)`: zeros, then `g` at each group's median element.
struct MedianGrad<T> {
    groups: Groups,
    pos: [usize; 2],
    len: usize,
    check: bool,
    _t: Types<T>,
}

impl<T: Num> Kernel for MedianGrad<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (g, ind) = (args.inputs[self.pos[0]] as *const T, args.inputs[self.pos[1]] as *const i32);
        let out = args.outputs[0] as *mut T;
        let n = self.groups.count;
        if self.check {
            // SAFETY: the indices input has `kept.len()` elements (checked at build).
            let ind = unsafe { slice(ind, self.groups.kept.len()) };
            if let Some(&bad) = ind.iter().find(|&&i| i < 0 || i as usize >= n) {
                return Err(KernelRunError::IndexOutOfRange { index: bad.into(), bound: n });
            }
        }
        // SAFETY: the output holds the forward input's `len` elements and overlaps no
        // input (the `KernelArgs` contract).
        unsafe { slice_mut(out, self.len) }.fill(T::ZERO);
        self.groups.kept.for_each(|o, base| {
            // SAFETY: `o < kept.len()`, the element count of `g` and the indices.
            let k = unsafe { *ind.add(o) };
            if k >= 0 && (k as usize) < n {
                // SAFETY: `k < n` (just checked): `base + offset(k)` is a plan offset,
                // inside the output, which has the shape the plan was built from.
                unsafe { *out.add(base + self.groups.offset(k as usize)) = *g.add(o) };
            }
        });
        Ok(())
    }
}

fn build_median_grad(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_median_grad);
    }
    // The output has the forward input's shape (attribute `shape`).
    let (g, ind, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    let x = y;
    let axes = axes_of(spec, x.info.rank())?;
    let groups = Groups::new(spec, x.shape(), &axes)?;
    let fits = y.info == x.info && g.dtype() == x.dtype() && g.nelms() == groups.kept.len() && ind.nelms() == g.nelms();
    if !fits || ind.dtype() != DataType::Int32 {
        return Err(
            spec.error(format!("gradient {} and indices {} do not fit the median of {}", g.info, ind.info, x.info))
        );
    }
    let dt = x.dtype();
    let (pos, len, check) = ([g.pos, ind.pos], x.nelms(), spec.check_indices);
    with_num!(dt, T => boxed(MedianGrad::<T> { groups, pos, len, check, _t: Types::default() }),
        _ => Err(spec.unsupported_dtype(dt)))
}

/// `ReduceGrad{prod}(g, x)`: `g` times the product of the group's other elements,
/// as prefix times suffix products (exact with zeros in the group).
struct ProdGrad<T> {
    groups: Groups,
    pos: [usize; 2],
    _t: Types<T>,
}

impl<T: Num> Kernel for ProdGrad<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (g, x) = (args.inputs[self.pos[0]] as *const T, args.inputs[self.pos[1]] as *const T);
        let out = args.outputs[0] as *mut T;
        let n = self.groups.count;
        self.groups.kept.for_each(|o, base| {
            // SAFETY: `x` and the output both have the shape the plan was built from,
            // so `base + offset(k)`, `k < n`, lies in both; `o < kept.len()`, the
            // element count of `g`; the output overlaps no input and each group's
            // elements belong to it alone (the accesses below rely on this too).
            let (xb, ob, go) = unsafe { (x.add(base), out.add(base), *g.add(o)) };
            match &self.groups.red {
                None => {
                    // SAFETY: as above, a contiguous group of `n` elements.
                    let (xs, os) = unsafe { (slice(xb, n), slice_mut(ob, n)) };
                    let mut p = go;
                    for (y, &v) in os.iter_mut().zip(xs) {
                        *y = p;
                        p = p.mul(v);
                    }
                    let mut q = T::ONE;
                    for (y, &v) in os.iter_mut().zip(xs).rev() {
                        *y = y.mul(q);
                        q = q.mul(v);
                    }
                }
                Some(offs) => {
                    let mut p = go;
                    for &off in offs {
                        // SAFETY: `off` is one of the plan's offsets, as above.
                        unsafe {
                            *ob.add(off) = p;
                            p = p.mul(*xb.add(off));
                        }
                    }
                    let mut q = T::ONE;
                    for &off in offs.iter().rev() {
                        // SAFETY: `off` is one of the plan's offsets, as above.
                        unsafe {
                            *ob.add(off) = (*ob.add(off)).mul(q);
                            q = q.mul(*xb.add(off));
                        }
                    }
                }
            }
        });
        Ok(())
    }
}

/// Gradient formulas of `ReduceGrad`, from `(g, x)`, `(g, y)` or `(g, x, y)` (g and y broadcast).
struct L1G;
impl<T: Num> MapN<T, 2> for L1G {
    #[inline(always)]
    fn f([g, x]: [T; 2]) -> T {
        g.mul(x.signum())
    }
}
struct SumSquareG;
impl<T: Num> MapN<T, 2> for SumSquareG {
    #[inline(always)]
    fn f([g, x]: [T; 2]) -> T {
        g.mul(x.add(x))
    }
}
/// `g·x/y`, 0 where the norm `y` is 0.
struct L2G;
impl<T: Float> MapN<T, 3> for L2G {
    #[inline(always)]
    fn f([g, x, y]: [T; 3]) -> T {
        if y == T::ZERO {
            T::ZERO
        } else {
            g * x / y
        }
    }
}
struct LogSumG;
impl<T: Float> MapN<T, 2> for LogSumG {
    #[inline(always)]
    fn f([g, y]: [T; 2]) -> T {
        g / y.exp()
    }
}
struct LogSumExpG;
impl<T: Float> MapN<T, 3> for LogSumExpG {
    #[inline(always)]
    fn f([g, x, y]: [T; 3]) -> T {
        g * (x - y).exp()
    }
}

/// The `ReduceGrad` kernels of `prod l1 l2 logsum logsumexp sumsquare` (called by
/// `grad::build_reduce_grad` once it has checked the shapes; no float16 here).
pub(crate) fn build_reduce_grad(spec: &KernelSpec<'_>, reduction: ReduceKind) -> BuildResult {
    // The output has the forward input's shape; `logsum` reads no forward input.
    let (g, o) = (spec.input(0)?, spec.output(0)?);
    let axes = axes_of(spec, o.info.rank())?;
    let kept: Vec<usize> = o.shape().iter().enumerate().map(|(d, &n)| if axes.contains(&d) { 1 } else { n }).collect();
    let dt = o.dtype();
    if g.dtype() != dt {
        return Err(spec.error(format!("gradient {} and output {} differ in dtype", g.info, o.info)));
    }
    let out = o.shape();
    if reduction == ReduceKind::LogSum {
        let y = spec.input(2)?;
        if y.dtype() != dt || y.nelms() != g.nelms() {
            return Err(spec.error(format!("forward output {} does not fit gradient {}", y.info, g.info)));
        }
        return with_float!(dt, T => NAry::<T, LogSumG, 2>::boxed(spec, out, [&kept, &kept], [g.pos, y.pos]),
            _ => Err(spec.unsupported_dtype(dt)));
    }
    let x = spec.input(1)?;
    if x.info != o.info {
        return Err(spec.error(format!("forward input {} does not match output {}", x.info, o.info)));
    }
    macro_rules! two {
        ($f:ty) => {
            with_num!(dt, T => NAry::<T, $f, 2>::boxed(spec, out, [&kept, out], [g.pos, x.pos]),
                _ => Err(spec.unsupported_dtype(dt)))
        };
    }
    macro_rules! three {
        ($f:ty) => {{
            let y = spec.input(2)?;
            if y.dtype() != dt || y.nelms() != g.nelms() {
                return Err(spec.error(format!("forward output {} does not fit gradient {}", y.info, g.info)));
            }
            with_float!(dt, T => NAry::<T, $f, 3>::boxed(spec, out, [&kept, out, &kept], [g.pos, x.pos, y.pos]),
                _ => Err(spec.unsupported_dtype(dt)))
        }};
    }
    match reduction {
        ReduceKind::Prod => {
            let groups = Groups::new(spec, out, &axes)?;
            let pos = [g.pos, x.pos];
            with_num!(dt, T => boxed(ProdGrad::<T> { groups, pos, _t: Types::default() }),
                _ => Err(spec.unsupported_dtype(dt)))
        }
        ReduceKind::L1 => two!(L1G),
        ReduceKind::SumSquare => two!(SumSquareG),
        ReduceKind::L2 => three!(L2G),
        ReduceKind::LogSumExp => three!(LogSumExpG),
        other => Err(spec.error(format!("`{}` is not a reduction of this builder", other.name()))),
    }
}

/// `LambSquare(x)` of a float64 input of `n` elements: the sum of squares in f64, stored as f32.
struct LambSquareF64 {
    n: usize,
    src: usize,
}

impl Kernel for LambSquareF64 {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the input holds `n` float64 and the output one float32 (checked at
        // build), which overlaps no input (the `KernelArgs` contract).
        unsafe {
            let xs = slice(args.inputs[self.src] as *const f64, self.n);
            *(args.outputs[0] as *mut f32) = pairwise(xs, |v| v * v, 0.0, |a, b| a + b) as f32;
        }
        Ok(())
    }
}

fn build_lamb_square(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    if y.dtype() != DataType::Float32 || y.nelms() != 1 {
        return Err(spec.error(format!("output {} must be a float32 scalar", y.info)));
    }
    match x.dtype() {
        DataType::Float16 => f16_adapter(spec, false, build_lamb_square),
        DataType::Float32 => Reduce::<f32, SumSquareR>::boxed(spec, &[x.nelms()], &[1], x.pos),
        DataType::Float64 => boxed(LambSquareF64 { n: x.nelms(), src: x.pos }),
        dt => Err(spec.unsupported_dtype(dt)),
    }
}

/// Every kernel of this file (`ReduceGrad` is `grad`'s, which calls [`build_reduce_grad`]).
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::ReduceMedian, build_median),
    (&ir::ReduceMedianGrad, build_median_grad),
    (&ir::LambSquare, build_lamb_square),
];
