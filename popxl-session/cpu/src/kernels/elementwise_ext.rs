//! Elementwise kernels with parameters or many operands: `Clip` and `ClipGrad`,
//! `IncrementMod` (and in place), `Fmod`, `ScaledAdd` and the n-ary `Maximum` /
//! `Minimum`.

use popart_ir::ops::all as ir;
use popart_ir::ops::unary::{ClipAttrs, IncrementModAttrs};
use popart_ir::ops::var_update::ScaleAttrs;
use popart_ir::DataType;

use super::binary::{Binary, Map2, MapN, NAry};
use super::broadcast::Broadcast;
use super::dispatch::{bound_alias, with_float, with_num};
use super::elem::Num;
use super::float16::{f16_adapter, has_f16};
use super::par::{par_range, par_range_cost};
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{BuildResult, SpecExt, Types};
use super::unary::CopyKernel;
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::Clip, build_clip),
    (&ir::ClipGrad, build_clip_grad),
    (&ir::IncrementMod, build_increment_mod),
    (&ir::IncrementModInplace, build_increment_mod),
    (&ir::Fmod, build_fmod),
    (&ir::ScaledAdd, build_scaled_add),
    (&ir::Maximum, build_extremum::<MaxMap>),
    (&ir::Minimum, build_extremum::<MinMap>),
];

/// The remainder of a truncated division, with the sign of the dividend (C
/// `fmod`, Rust `%`); an integer zero divisor gives 0, so no kernel can panic.
pub(crate) trait Rem: Num {
    fn rem(self, o: Self) -> Self;
}

macro_rules! impl_rem {
    (int: $($t:ty),*) => {$(
        impl Rem for $t {
            #[inline(always)]
            fn rem(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_rem(o) } }
        }
    )*};
    (float: $($t:ty),*) => {$(
        impl Rem for $t {
            #[inline(always)]
            fn rem(self, o: Self) -> Self { self % o }
        }
    )*};
}
impl_rem!(int: i8, i16, i32, i64, u8, u16, u32, u64);
impl_rem!(float: f32, f64);

// ---------------------------------------------------------------------------
// One-input maps with two parameters (clip bounds, increment and modulus).

/// `y = F(x, p)` with parameters `p` fixed at build time.
trait MapP<T>: Send + Sync + 'static {
    const COST: usize = 1;
    fn f(x: T, p: [T; 2]) -> T;
}

struct ClipMap;
impl<T: Num> MapP<T> for ClipMap {
    /// NaN fails both comparisons and propagates.
    #[inline(always)]
    fn f(x: T, [lo, hi]: [T; 2]) -> T {
        if x < lo {
            lo
        } else if x > hi {
            hi
        } else {
            x
        }
    }
}

struct IncrementModMap;
impl<T: Rem> MapP<T> for IncrementModMap {
    const COST: usize = 8;
    #[inline(always)]
    fn f(x: T, [inc, m]: [T; 2]) -> T {
        x.add(inc).rem(m)
    }
}

/// `y[i] = F(x[i], p)` over `n` contiguous elements; in place (input 0 read through
/// output 0) when `in_place`.
struct UnaryP<T, F> {
    n: usize,
    p: [T; 2],
    in_place: bool,
    _t: Types<F>,
}

impl<T: Copy + Send + Sync + 'static, F: MapP<T>> Kernel for UnaryP<T, F> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let x = SendPtr(args.inputs[0] as *mut T);
        let y = SendPtr(args.outputs[0] as *mut T);
        let (p, in_place) = (self.p, self.in_place);
        par_range_cost(
            self.n,
            F::COST,
            #[inline(always)]
            move |r| {
                // SAFETY: both buffers hold `n` elements; in place, only the output
                // pointer is used; otherwise they do not overlap.
                unsafe {
                    let ys = slice_mut(y.get().add(r.start), r.len());
                    if in_place {
                        for v in ys.iter_mut() {
                            *v = F::f(*v, p);
                        }
                    } else {
                        for (o, &v) in ys.iter_mut().zip(slice(x.get().add(r.start), r.len())) {
                            *o = F::f(v, p);
                        }
                    }
                }
            },
        );
        Ok(())
    }
}

/// One input, an output of the same info: (elements, dtype).
fn same_info(spec: &KernelSpec<'_>) -> Result<(usize, DataType), KernelError> {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    if x.info != y.info {
        return Err(spec.error(format!("output {} differs from input {}", y.info, x.info)));
    }
    Ok((x.nelms(), x.dtype()))
}

fn build_clip(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_clip);
    }
    let (n, dt) = same_info(spec)?;
    let (lo, hi) = spec.typed::<ClipAttrs>()?.bounds();
    // `from_f64` saturates for integers: infinite bounds become the type's limits.
    with_num!(dt, T => Ok(Box::new(UnaryP::<T, ClipMap> {
        n, p: [T::from_f64(lo), T::from_f64(hi)], in_place: false, _t: Types::default()
    })), _ => Err(spec.unsupported_dtype(dt)))
}

fn build_increment_mod(spec: &KernelSpec<'_>) -> BuildResult {
    let in_place = spec.is::<ir::IncrementModInplace>();
    if has_f16(spec) {
        return f16_adapter(spec, in_place, build_increment_mod);
    }
    let (n, dt) = same_info(spec)?;
    let IncrementModAttrs { increment: inc, modulus: m } = spec.typed()?;
    with_num!(dt, T => Ok(Box::new(UnaryP::<T, IncrementModMap> {
        n, p: [T::from_f64(inc), T::from_f64(m)], in_place, _t: Types::default()
    })), _ => Err(spec.unsupported_dtype(dt)))
}

/// `ClipGrad(g, y)`: `g` where `y` is neither bound.
struct ClipGradKernel<T> {
    n: usize,
    lo: T,
    hi: T,
}

impl<T: Num> Kernel for ClipGradKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let g = SendPtr(args.inputs[0] as *mut T);
        let y = SendPtr(args.inputs[1] as *mut T);
        let out = SendPtr(args.outputs[0] as *mut T);
        let (lo, hi) = (self.lo, self.hi);
        par_range(
            self.n,
            #[inline(always)]
            move |r| {
                // SAFETY: three buffers of `n` elements; the output overlaps no input.
                unsafe {
                    let os = slice_mut(out.get().add(r.start), r.len());
                    let (gs, ys) = (slice(g.get().add(r.start), r.len()), slice(y.get().add(r.start), r.len()));
                    for ((o, &gv), &yv) in os.iter_mut().zip(gs).zip(ys) {
                        *o = if yv != lo && yv != hi { gv } else { T::ZERO };
                    }
                }
            },
        );
        Ok(())
    }
}

fn build_clip_grad(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_clip_grad);
    }
    let (g, y, out) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    if g.info != y.info || out.info != g.info {
        return Err(spec.error(format!("gradient {}, output {} and result {} must match", g.info, y.info, out.info)));
    }
    if g.pos != 0 {
        return Err(spec.error("the gradient must be input 0"));
    }
    let (lo, hi) = spec.typed::<ClipAttrs>()?.bounds();
    let (n, dt) = (g.nelms(), g.dtype());
    with_float!(dt, T => Ok(Box::new(ClipGradKernel::<T> { n, lo: T::from_f64(lo), hi: T::from_f64(hi) })),
        _ => Err(spec.unsupported_dtype(dt)))
}

// ---------------------------------------------------------------------------
// Fmod

struct FmodMap;
impl<T: Rem> Map2<T, T> for FmodMap {
    const COST: usize = 8;
    #[inline(always)]
    fn f(a: T, b: T) -> T {
        a.rem(b)
    }
}

bound_alias!(
    /// A two-operand map for every numeric type (see `with_num!`).
    NumMap2: Map2<i8, i8> + Map2<i16, i16> + Map2<i32, i32> + Map2<i64, i64> + Map2<u8, u8> + Map2<u16, u16>
        + Map2<u32, u32> + Map2<u64, u64> + Map2<f32, f32> + Map2<f64, f64>
);

/// A broadcasting binary map on equal numeric dtypes (`Fmod`, two-input extrema).
fn build_num_binary<F: NumMap2>(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_num_binary::<F>);
    }
    let (a, b, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    let dt = a.dtype();
    if b.dtype() != dt || y.dtype() != dt {
        return Err(spec.error(format!("dtypes differ: {}, {} -> {}", dt, b.dtype(), y.dtype())));
    }
    let (out, shapes, pos) = (y.shape(), [a.shape(), b.shape()], [a.pos, b.pos]);
    with_num!(dt, T => Binary::<T, T, F>::boxed(spec, out, shapes, pos), _ => Err(spec.unsupported_dtype(dt)))
}

fn build_fmod(spec: &KernelSpec<'_>) -> BuildResult {
    build_num_binary::<FmodMap>(spec)
}

// ---------------------------------------------------------------------------
// ScaledAdd

/// Where a coefficient comes from.
#[derive(Clone, Copy)]
enum Coef<T> {
    Const(T),
    /// A one-element input at this position, read at run time.
    Input(usize),
}

impl<T: Copy> Coef<T> {
    /// # Safety
    /// An `Input` position must hold one valid element.
    #[inline(always)]
    unsafe fn get(self, args: &KernelArgs<'_>) -> T {
        match self {
            Coef::Const(v) => v,
            Coef::Input(p) => *(args.inputs[p] as *const T),
        }
    }
}

/// `out = a x + b y`, `y` broadcast to `x`'s shape.
struct ScaledAddKernel<T> {
    plan: Broadcast<2>,
    pos: [usize; 2],
    coefs: [Coef<T>; 2],
}

impl<T: Num> Kernel for ScaledAddKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (a, b) = (self.coefs[0].get(args), self.coefs[1].get(args));
        let x = SendPtr(args.inputs[self.pos[0]] as *mut T);
        let y = SendPtr(args.inputs[self.pos[1]] as *mut T);
        let out = SendPtr(args.outputs[0] as *mut T);
        let [_, sy] = self.plan.inner_strides();
        par_range(
            self.plan.len(),
            #[inline(always)]
            move |r| {
                self.plan.for_segments(r, |o, [ix, iy], len| {
                    // SAFETY: offsets come from the plan; the output overlaps no input.
                    unsafe {
                        let os = slice_mut(out.get().add(o), len);
                        let xs = slice(x.get().add(ix), len);
                        if sy == 1 {
                            for ((v, &p), &q) in os.iter_mut().zip(xs).zip(slice(y.get().add(iy), len)) {
                                *v = a.mul(p).add(b.mul(q));
                            }
                        } else {
                            let bq = b.mul(*y.get().add(iy));
                            for (v, &p) in os.iter_mut().zip(xs) {
                                *v = a.mul(p).add(bq);
                            }
                        }
                    }
                });
            },
        );
        Ok(())
    }
}

fn coef<T: Num>(spec: &KernelSpec<'_>, value: Option<f64>, input: u32, dt: DataType) -> Result<Coef<T>, KernelError> {
    match spec.opt_input(input) {
        Some(s) if s.nelms() == 1 && s.dtype() == dt => Ok(Coef::Input(s.pos)),
        Some(s) => Err(spec.error(format!("input {input} must be a one-element {dt} tensor, got {}", s.info))),
        None => Ok(Coef::Const(T::from_f64(value.unwrap_or(1.0)))),
    }
}

fn build_scaled_add(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_scaled_add);
    }
    let (x, y, out) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    let dt = x.dtype();
    if out.info != x.info || y.dtype() != dt {
        return Err(spec.error(format!("x {}, y {} and output {} do not fit", x.info, y.info, out.info)));
    }
    let plan = Broadcast::new(x.shape(), [x.shape(), y.shape()])
        .ok_or_else(|| spec.error(format!("y {} does not broadcast to x {}", y.info, x.info)))?;
    let pos = [x.pos, y.pos];
    let ScaleAttrs { a, b } = spec.typed()?;
    with_num!(dt, T => Ok(Box::new(ScaledAddKernel::<T> {
        plan, pos, coefs: [coef(spec, a, 2, dt)?, coef(spec, b, 3, dt)?]
    })), _ => Err(spec.unsupported_dtype(dt)))
}

// ---------------------------------------------------------------------------
// n-ary Maximum / Minimum

struct MaxMap;
impl<T: Num> Map2<T, T> for MaxMap {
    #[inline(always)]
    fn f(a: T, b: T) -> T {
        a.maximum(b)
    }
}
impl<T: Num> MapN<T, 3> for MaxMap {
    #[inline(always)]
    fn f([a, b, c]: [T; 3]) -> T {
        a.maximum(b).maximum(c)
    }
}

struct MinMap;
impl<T: Num> Map2<T, T> for MinMap {
    #[inline(always)]
    fn f(a: T, b: T) -> T {
        a.minimum(b)
    }
}
impl<T: Num> MapN<T, 3> for MinMap {
    #[inline(always)]
    fn f([a, b, c]: [T; 3]) -> T {
        a.minimum(b).minimum(c)
    }
}

/// A three-operand map for every numeric type (`bound_alias!` takes type
/// arguments only, not the const `3`).
trait NumMap3:
    MapN<i8, 3>
    + MapN<i16, 3>
    + MapN<i32, 3>
    + MapN<i64, 3>
    + MapN<u8, 3>
    + MapN<u16, 3>
    + MapN<u32, 3>
    + MapN<u64, 3>
    + MapN<f32, 3>
    + MapN<f64, 3>
{
}
impl<F> NumMap3 for F where
    F: MapN<i8, 3>
        + MapN<i16, 3>
        + MapN<i32, 3>
        + MapN<i64, 3>
        + MapN<u8, 3>
        + MapN<u16, 3>
        + MapN<u32, 3>
        + MapN<u64, 3>
        + MapN<f32, 3>
        + MapN<f64, 3>
{
}

/// `y = F(y, x)` in place for each further input `x` (broadcast to `y`), after
/// `first` has combined the first three inputs.
struct FoldKernel<T, F> {
    first: Box<dyn Kernel>,
    rest: Vec<(Broadcast<1>, usize)>,
    _t: Types<(T, F)>,
}

impl<T: Copy + Send + Sync + 'static, F: Map2<T, T>> Kernel for FoldKernel<T, F> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        self.first.run(args)?;
        let y = SendPtr(args.outputs[0] as *mut T);
        for (plan, pos) in &self.rest {
            let x = SendPtr(args.inputs[*pos] as *mut T);
            let [sx] = plan.inner_strides();
            par_range(
                plan.len(),
                #[inline(always)]
                move |r| {
                    plan.for_segments(r, |o, [ix], len| {
                        // SAFETY: the plan's offsets lie inside `x` and the output, which
                        // overlap no input.
                        unsafe {
                            let ys = slice_mut(y.get().add(o), len);
                            if sx == 1 {
                                for (v, &q) in ys.iter_mut().zip(slice(x.get().add(ix), len)) {
                                    *v = F::f(*v, q);
                                }
                            } else {
                                let q = *x.get().add(ix);
                                for v in ys.iter_mut() {
                                    *v = F::f(*v, q);
                                }
                            }
                        }
                    });
                },
            );
        }
        Ok(())
    }
}

/// `Maximum`/`Minimum` of n inputs: a copy (n = 1), the binary kernel (n = 2), a
/// fused three-operand pass (n = 3), then one in-place pass per further input.
fn build_extremum<F: NumMap2 + NumMap3>(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_extremum::<F>);
    }
    let y = spec.output(0)?;
    let n = spec.inputs.len();
    let ins: Vec<_> = (0..n as u32).map(|i| spec.input(i)).collect::<Result<_, _>>()?;
    let dt = y.dtype();
    if let Some(x) = ins.iter().find(|x| x.dtype() != dt) {
        return Err(spec.error(format!("input {} does not have the output's dtype {dt}", x.info)));
    }
    match n {
        0 => Err(spec.error("needs at least one input")),
        1 if ins[0].info == y.info => Ok(Box::new(CopyKernel { nbytes: y.info.nbytes(), src: ins[0].pos })),
        1 => Err(spec.error(format!("output {} differs from the input {}", y.info, ins[0].info))),
        2 => build_num_binary::<F>(spec),
        _ => {
            let shapes = [ins[0].shape(), ins[1].shape(), ins[2].shape()];
            let pos = [ins[0].pos, ins[1].pos, ins[2].pos];
            with_num!(dt, T => {
                let first = NAry::<T, F, 3>::boxed(spec, y.shape(), shapes, pos)?;
                if n == 3 {
                    return Ok(first);
                }
                let rest = ins[3..]
                    .iter()
                    .map(|x| {
                        Broadcast::new(y.shape(), [x.shape()])
                            .map(|p| (p, x.pos))
                            .ok_or_else(|| spec.error(format!("{} does not broadcast to {}", x.info, y.info)))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Box::new(FoldKernel::<T, F> { first, rest, _t: Types::default() }))
            }, _ => Err(spec.unsupported_dtype(dt)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, run_op, t};
    use popart_ir::ops::unary::ClipAttrs;
    use popart_ir::{Attributes, DataType, OpAttrs};

    #[test]
    fn clip_clamps_and_keeps_nan() {
        let x = t(DataType::Float32, &[5], &[-3.0, -1.0, 0.5, 2.0, f64::NAN]);
        let a = ClipAttrs { min: Some(-1.0), max: Some(1.0) }.to_attrs();
        let got = run_op("Clip", a, &[(0, x.clone())])[0].to_f64_vec();
        assert_eq!(&got[..4], &[-1.0, -1.0, 0.5, 1.0]);
        assert!(got[4].is_nan());
        let only_min = ClipAttrs { min: Some(0.0), max: None }.to_attrs();
        let got = run_op("Clip", only_min, &[(0, x)])[0].to_f64_vec();
        assert_eq!(&got[..4], &[0.0, 0.0, 0.5, 2.0]);
        let i = t(DataType::Int8, &[3], &[-128.0, 5.0, 127.0]);
        let only_max = ClipAttrs { min: None, max: Some(3.5) }.to_attrs();
        assert_eq!(run_op("Clip", only_max, &[(0, i)])[0].to_f64_vec(), vec![-128.0, 3.0, 3.0]);
    }

    #[test]
    fn clip_grad_is_zero_on_the_bounds() {
        let g = t(DataType::Float64, &[4], &[1.0, 2.0, 3.0, 4.0]);
        let y = t(DataType::Float64, &[4], &[-1.0, 0.0, 1.0, 0.999]);
        let a = ClipAttrs { min: Some(-1.0), max: Some(1.0) }.to_attrs();
        assert_eq!(run_op("ClipGrad", a, &[(0, g), (1, y)])[0].to_f64_vec(), vec![0.0, 2.0, 0.0, 4.0]);
    }

    #[test]
    fn fold_of_five_inputs_broadcasts() {
        let xs = [
            t(DataType::Float32, &[2, 3], &[1.0, 9.0, 3.0, 4.0, 5.0, 6.0]),
            t(DataType::Float32, &[3], &[2.0, 2.0, 2.0]),
            t(DataType::Float32, &[2, 1], &[0.0, 7.0]),
            t(DataType::Float32, &[], &[3.5]),
            t(DataType::Float32, &[1, 3], &[-1.0, 10.0, 0.0]),
        ];
        let ins: Vec<_> = xs.iter().cloned().enumerate().map(|(i, x)| (i as u32, x)).collect();
        let got = run_op("Maximum", Attributes::new(), &ins)[0].to_f64_vec();
        assert_close(&got, &[3.5, 10.0, 3.5, 7.0, 10.0, 7.0], 0.0);
        let got = run_op("Minimum", Attributes::new(), &ins)[0].to_f64_vec();
        assert_close(&got, &[-1.0, 0.0, 0.0, -1.0, 2.0, 0.0], 0.0);
        let one = run_op("Maximum", Attributes::new(), &ins[..1])[0].to_f64_vec();
        assert_close(&one, &[1.0, 9.0, 3.0, 4.0, 5.0, 6.0], 0.0);
    }
}
