//! Elementwise unary kernels (`Neg` ... `Gelu`) and their derivatives (the
//! gradient op of each, `ReluGrad`...), copies (`Identity`, `Detach`, `Reshape`, `Squeeze`,
//! `ReshapeGrad`) and `Cast` between every pair of dtypes; the maps with
//! parameters (`Clip`, `IncrementMod`) are in [`params`].
//!
//! Adding an elementwise unary op here is one line of `unary_ops!`: its scalar
//! function (and derivative, if it has a gradient) and its cost.

use half::f16;
use popart_ir::ops::all as ir;
use popart_ir::ops::grad::UnaryDerivative;
use popart_ir::DataType;

use super::binary::{Binary, Map2};
use super::dispatch::{bound_alias, with_any, with_float, with_num};
use super::elem::{Bool8, Float, Num};
use super::float16::{f16_adapter, has_f16};
use super::par::{par_map, par_range_cost, wide_simd, Simd};
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;

mod gelu;
pub(super) mod params;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};

/// A scalar function applied elementwise; implemented by zero-sized op types.
pub(crate) trait Map1<T>: Send + Sync + 'static {
    /// Cost per element relative to an add (decides when to use threads).
    const COST: usize = 1;
    fn f(x: T) -> T;
}

/// `y[i] = F(x[i])` over `n` contiguous elements.
pub(crate) struct Unary<T, F> {
    n: usize,
    /// The SIMD build of the loop ([`Simd::for_cost`]).
    simd: Simd,
    _t: Types<(T, F)>,
}

impl<T: Copy + Send + Sync + 'static, F: Map1<T>> Unary<T, F> {
    pub(crate) fn boxed(n: usize) -> Box<dyn Kernel> {
        Box::new(Unary::<T, F> { n, simd: Simd::for_cost(F::COST), _t: Types::default() })
    }
}

#[inline(always)]
fn map1_loop<T: Copy, F: Map1<T>>(xs: &[T], ys: &mut [T]) {
    for (o, &v) in ys.iter_mut().zip(xs) {
        *o = F::f(v);
    }
}

wide_simd!(fn map1<T: Copy, F: Map1<T>>(xs: &[T], ys: &mut [T]) => map1_loop);

impl<T: Copy + Send + Sync + 'static, F: Map1<T>> Kernel for Unary<T, F> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let x = SendPtr(args.inputs[0] as *mut T);
        let y = SendPtr(args.outputs[0] as *mut T);
        let simd = self.simd;
        par_range_cost(
            self.n,
            F::COST,
            #[inline(always)]
            move |r| {
                // SAFETY: the executor guarantees both buffers hold `n` elements and do not overlap.
                let (xs, ys) =
                    unsafe { (slice(x.get().add(r.start), r.len()), slice_mut(y.get().add(r.start), r.len())) };
                map1::<T, F>(simd, xs, ys);
            },
        );
        Ok(())
    }
}

/// The elementwise unary op table. Each line:
/// `Op [cost]: num|float |x| forward, grad [cost] |g, X(x) or Y(y)| g times the derivative;`
/// - `Op` is the op type of `popart_ir::ops::unary`; `num` ops also run on integers;
/// - `[cost]` is the work per element relative to an add (threads start 16x earlier
///   for a cost of 16), default 1;
/// - `grad`: the kernel of the op's gradient op type (`ReluGrad` for `Relu`,
///   [`popart_ir::ops::grad::UnaryDerivative`]), absent for ops without one. The
///   forward value is bound with the pattern `X(x)` (forward input) or `Y(y)`
///   (forward output), checked against the IR's declaration by the compiler: a
///   derivative that reads the tensor the IR does not connect does not compile
///   (see [`popart_ir::ops::grad::fwd_value`]). Expanded, the `Relu` line's
///   derivative is the first function below; the second, reading `x` where the IR
///   declares `y`, is refused:
///
/// ```
/// use popart_ir::ops::{all::Relu, grad::{fwd_value, Y}};
/// fn relu_grad(g: f64, v: f64) -> f64 {
///     let Y(y) = fwd_value::<Relu, _>(v);
///     if y > 0.0 { g } else { 0.0 }
/// }
/// assert_eq!(relu_grad(3.0, 1.0), 3.0);
/// ```
///
/// ```compile_fail,E0308
/// use popart_ir::ops::{all::Relu, grad::{fwd_value, X}};
/// fn relu_grad(g: f64, v: f64) -> f64 {
///     let X(x) = fwd_value::<Relu, _>(v);
///     if x > 0.0 { g } else { 0.0 }
/// }
/// ```
///
/// It defines the scalar maps, [`TABLE`] (forward) and [`GRAD_KERNELS`] (the
/// kernels of the gradient op types, keyed by their definitions).
macro_rules! unary_ops {
    ($($op:ident $([$cost:expr])?: $kind:ident |$x:ident| $e:expr $(, grad $([$gcost:expr])? |$g:ident, $w:ident($v:ident)| $ge:expr)?;)*) => {
        /// Forward scalar maps, one per op type.
        mod fwd {
            use super::*;
            $(
                pub(crate) struct $op;
                unary_ops!(@impl $kind $op [$($cost)?] |$x| $e);
            )*
        }
        /// Derivative maps `(g, x or y) -> dx`, one per differentiable op type.
        mod derivative {
            use super::*;
            use popart_ir::ops::grad::{fwd_value, X, Y};
            $($(
                #[allow(unused_variables)]
                pub(crate) struct $op;
                impl<T: Float> Map2<T, T> for $op {
                    const COST: usize = { let _c = 1; $(let _c = $gcost;)? _c };
                    #[inline(always)]
                    fn f($g: T, v: T) -> T {
                        let $w($v) = fwd_value::<ir::$op, T>(v);
                        $ge
                    }
                }
            )?)*
        }
        /// Forward kernels of the elementwise unary ops.
        pub(crate) const TABLE: &[KernelEntry] = &[$((&ir::$op, unary_ops!(@build $kind $op)),)*];
        /// Kernels of the unary gradient op types (`ReluGrad`...), keyed by their definitions.
        pub(crate) const GRAD_KERNELS: &[KernelEntry] = &[$($(unary_ops!(@grad $op $ge),)?)*];
    };
    (@impl num $op:ident [$($cost:expr)?] |$x:ident| $e:expr) => {
        impl<T: Num> Map1<T> for $op {
            const COST: usize = { let _c = 1; $(let _c = $cost;)? _c };
            #[inline(always)]
            fn f($x: T) -> T { $e }
        }
    };
    (@impl float $op:ident [$($cost:expr)?] |$x:ident| $e:expr) => {
        impl<T: Float> Map1<T> for $op {
            const COST: usize = { let _c = 1; $(let _c = $cost;)? _c };
            #[inline(always)]
            fn f($x: T) -> T { $e }
        }
    };
    // Hand-written float32 AVX-512 kernels where the table's maps lose to them.
    (@grad Gelu $ge:expr) => {
        (<ir::Gelu as UnaryDerivative>::GRAD, gelu::build_grad_kernel)
    };
    (@grad $op:ident $ge:expr) => {
        (<ir::$op as UnaryDerivative>::GRAD, build_grad::<derivative::$op>)
    };
    (@build num $op:ident) => { build_num::<fwd::$op> };
    (@build float Gelu) => { gelu::build };
    (@build float $op:ident) => { build_float::<fwd::$op> };
}

/// `sqrt(2/pi)`, the GELU tanh-approximation constant.
pub(crate) const GELU_C: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of the GELU tanh approximation.
pub(crate) const GELU_A: f64 = 0.044_715;

// Derivatives read the forward input X(x) or output Y(y), as the IR's unary table
// declares (whichever gives the cheaper formula: relu' = (y > 0), tanh' = 1 - y², sigmoid' = y(1 - y), ...
unary_ops! {
    Neg: num |x| x.neg();
    Abs: num |x| x.abs(), grad |g, X(x)| g * x.signum();
    Relu: num |x| if x > T::ZERO { x } else { T::ZERO }, grad |g, Y(y)| if y > T::ZERO { g } else { T::ZERO };
    Sign: num |x| x.signum();
    Floor: num |x| x.floor();
    Ceil: num |x| x.ceil();
    Exp[16]: float |x| x.fast_exp(), grad |g, Y(y)| g * y;
    Log[16]: float |x| x.ln(), grad [4] |g, X(x)| g / x;
    Log1p[16]: float |x| x.std(f32::ln_1p, f64::ln_1p), grad [4] |g, X(x)| g / (T::ONE + x);
    Sqrt[4]: float |x| x.sqrt(), grad [4] |g, Y(y)| g / (T::from_f64(2.0) * y);
    Tanh[16]: float |x| x.tanh(), grad |g, Y(y)| g * (T::ONE - y * y);
    Sin[16]: float |x| x.sin(), grad [16] |g, X(x)| g * x.cos();
    Cos[16]: float |x| x.cos(), grad [16] |g, X(x)| -(g * x.sin());
    Sigmoid[8]: float |x| T::ONE / (T::ONE + (-x).fast_exp()), grad |g, Y(y)| g * y * (T::ONE - y);
    // 0.5 x (1 + tanh(u)) = x · sigmoid(2u): no cancellation, and a vectorisable exp.
    // gelu' = s + 2 x s (1 - s) u' with s = sigmoid(2u), u = c (x + a x³).
    // The exp saturates harmlessly: past its normal range x / (1 + e) is 0 or x.
    Gelu[16]: float |x| {
        let u = T::from_f64(GELU_C) * (x + T::from_f64(GELU_A) * x * x * x);
        x / (T::ONE + (T::from_f64(-2.0) * u).fast_exp_normal())
    }, grad [16] |g, X(x)| {
        // Past ±40 gelu' is 1 or 0 (to f64 precision): clamping keeps `x · u'`
        // finite for huge x, where `0 · inf` would make NaN (NaN stays NaN).
        let x = x.maximum(T::from_f64(-40.0)).minimum(T::from_f64(40.0));
        let (c, a) = (T::from_f64(GELU_C), T::from_f64(GELU_A));
        let u = c * (x + a * x * x * x);
        let s = T::ONE / (T::ONE + (T::from_f64(-2.0) * u).fast_exp_normal());
        let du = c * (T::ONE + T::from_f64(3.0) * a * x * x);
        g * (s + T::from_f64(2.0) * x * s * (T::ONE - s) * du)
    };
    Log2[16]: float |x| x.std(f32::log2, f64::log2), grad [4] |g, X(x)| g / (x * T::from_f64(std::f64::consts::LN_2));
    // x Φ(x) = x erfc(-x/√2) / 2: one libm call, accurate in both tails.
    // geluerf' = Φ(x) + x φ(x), φ(x) = exp(-x²/2) / √(2π).
    GeluErf[32]: float |x| {
        T::from_f64(0.5) * x * (x * T::from_f64(-std::f64::consts::FRAC_1_SQRT_2)).std(libm::erfcf, libm::erfc)
    }, grad [48] |g, X(x)| {
        let cdf = T::from_f64(0.5) * (x * T::from_f64(-std::f64::consts::FRAC_1_SQRT_2)).std(libm::erfcf, libm::erfc);
        let pdf = T::from_f64(INV_SQRT_2PI) * (T::from_f64(-0.5) * x * x).exp();
        g * (cdf + x * pdf)
    };
    // x sigmoid(x); swish' = s + x s (1 - s), s = sigmoid(x).
    Swish[8]: float |x| x / (T::ONE + (-x).fast_exp()), grad [8] |g, X(x)| {
        let s = T::ONE / (T::ONE + (-x).fast_exp());
        g * (s + x * s * (T::ONE - s))
    };
}

/// `1 / √(2π)`, the normal density at 0.
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// `y[i] = F(y[i])` in place over `n` elements: the in-place variants (`ExpInplace`
/// ...) read their input through output pointer 0, as the aliasing contract requires.
pub(crate) struct UnaryInplace<T, F> {
    n: usize,
    simd: Simd,
    _t: Types<(T, F)>,
}

#[inline(always)]
fn map1_inplace_loop<T: Copy, F: Map1<T>>(ys: &mut [T]) {
    for v in ys.iter_mut() {
        *v = F::f(*v);
    }
}

wide_simd!(fn map1_inplace<T: Copy, F: Map1<T>>(ys: &mut [T]) => map1_inplace_loop);

impl<T: Copy + Send + Sync + 'static, F: Map1<T>> Kernel for UnaryInplace<T, F> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let y = SendPtr(args.outputs[0] as *mut T);
        let simd = self.simd;
        par_range_cost(
            self.n,
            F::COST,
            #[inline(always)]
            move |r| {
                // SAFETY: the output holds `n` elements (input 0 is the same buffer, never
                // read through its own pointer); tasks get disjoint ranges.
                let ys = unsafe { slice_mut(y.get().add(r.start), r.len()) };
                map1_inplace::<T, F>(simd, ys);
            },
        );
        Ok(())
    }
}

/// An in-place unary map over numeric types (`ReluInplace`).
fn build_inplace_num<F: NumMap>(spec: &KernelSpec<'_>) -> BuildResult {
    let (n, dt) = same_info(spec)?;
    if dt == DataType::Float16 {
        return f16_adapter(spec, true, build_inplace_num::<F>);
    }
    let simd = Simd::for_cost(<F as Map1<f32>>::COST);
    with_num!(dt, T => Ok(Box::new(UnaryInplace::<T, F> { n, simd, _t: Types::default() })),
        _ => Err(spec.unsupported_dtype(dt)))
}

/// An in-place unary map over float types (`ExpInplace`, `GeluInplace`...).
fn build_inplace_float<F: Map1<f32> + Map1<f64>>(spec: &KernelSpec<'_>) -> BuildResult {
    let (n, dt) = same_info(spec)?;
    if dt == DataType::Float16 {
        return f16_adapter(spec, true, build_inplace_float::<F>);
    }
    let simd = Simd::for_cost(<F as Map1<f32>>::COST);
    with_float!(dt, T => Ok(Box::new(UnaryInplace::<T, F> { n, simd, _t: Types::default() })),
        _ => Err(spec.unsupported_dtype(dt)))
}

/// Every kernel of this file: copies, casts and the in-place variants of the
/// table's maps (the table itself is [`TABLE`]).
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::Identity, build_copy),
    (&ir::IoTileCopy, build_copy),
    // A copy between IPUs is a copy between buffers on the host.
    (&ir::IpuCopy, build_copy),
    (&ir::ReshapeInplace, build_copy),
    (&ir::Detach, build_copy),
    (&ir::Reshape, build_copy),
    (&ir::Squeeze, build_copy),
    (&ir::ReshapeGrad, build_copy),
    (&ir::Cast, build_cast),
    (&ir::ExpInplace, build_inplace_float::<fwd::Exp>),
    (&ir::ReluInplace, build_inplace_num::<fwd::Relu>),
    (&ir::GeluInplace, build_inplace_float::<fwd::Gelu>),
    (&ir::GeluErfInplace, build_inplace_float::<fwd::GeluErf>),
    (&ir::SwishInplace, build_inplace_float::<fwd::Swish>),
    // Aliases its input and writes nothing: the copy is skipped (same pointer).
    (&ir::DetachInplace, build_copy),
];

/// Byte copy of a whole buffer (`Identity`, `Detach`, `Reshape`, `Squeeze`,
/// `ReshapeGrad`, `CopyVarUpdate`, `IoTileCopy`, `IpuCopy`).
pub(crate) struct CopyKernel {
    /// Bytes copied.
    pub nbytes: usize,
    /// Input position copied from.
    pub src: usize,
}

impl Kernel for CopyKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (src, dst) = (args.inputs[self.src], args.outputs[0]);
        if self.nbytes > 0 && !std::ptr::eq(src, dst) {
            // SAFETY: both buffers hold the spec's `nbytes` (`KernelArgs`); an output
            // overlaps an input only as the same pointer, excluded here.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, self.nbytes) };
        }
        Ok(())
    }
}

/// A view op run as a copy (when lowering could not share the buffer).
fn build_copy(spec: &KernelSpec<'_>) -> BuildResult {
    let x = spec.input(0)?;
    let y = spec.output(0)?;
    if y.info.nbytes() != x.info.nbytes() {
        return Err(spec.error(format!("output {} does not hold the input {}", y.info, x.info)));
    }
    Ok(Box::new(CopyKernel { nbytes: x.info.nbytes(), src: x.pos }))
}

/// Checks shared by the same-type unary builders: one input, output of the same info.
fn same_info(spec: &KernelSpec<'_>) -> Result<(usize, DataType), crate::kernel::KernelError> {
    let x = spec.input(0)?;
    if spec.output(0)?.info != x.info {
        return Err(spec.error(format!("output {} differs from input {}", spec.output(0)?.info, x.info)));
    }
    Ok((x.nelms(), x.dtype()))
}

bound_alias!(
    /// A map defined for every numeric type (`num` lines of the table; see `with_num!`).
    NumMap: Map1<i8> + Map1<i16> + Map1<i32> + Map1<i64> + Map1<u8> + Map1<u16> + Map1<u32> + Map1<u64>
        + Map1<f32> + Map1<f64>
);

/// A unary map defined for every numeric type.
fn build_num<F: NumMap>(spec: &KernelSpec<'_>) -> BuildResult {
    let (n, dt) = same_info(spec)?;
    if dt == DataType::Float16 || has_f16(spec) {
        return f16_adapter(spec, false, build_num::<F>);
    }
    with_num!(dt, T => Ok(Unary::<T, F>::boxed(n)), _ => Err(spec.unsupported_dtype(dt)))
}

/// A unary map defined for floating point types.
fn build_float<F: Map1<f32> + Map1<f64>>(spec: &KernelSpec<'_>) -> BuildResult {
    let (n, dt) = same_info(spec)?;
    if dt == DataType::Float16 || has_f16(spec) {
        return f16_adapter(spec, false, build_float::<F>);
    }
    with_float!(dt, T => Ok(Unary::<T, F>::boxed(n)), _ => Err(spec.unsupported_dtype(dt)))
}

/// A unary gradient op `(g, x | y)`: `D(g, v)` elementwise, `v` the forward
/// tensor at input 1.
fn build_grad<D: Map2<f32, f32> + Map2<f64, f64>>(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_grad::<D>);
    }
    let (g, v) = (spec.input(0)?, spec.input(1)?);
    let y = spec.output(0)?;
    let dt = g.dtype();
    if v.info != g.info || y.info != g.info {
        return Err(
            spec.error(format!("gradient {}, forward tensor {} and output {} must match", g.info, v.info, y.info))
        );
    }
    let (out, shapes, pos) = (y.shape(), [g.shape(), v.shape()], [g.pos, v.pos]);
    with_float!(dt, T => Binary::<T, T, D>::boxed(spec, out, shapes, pos), _ => Err(spec.unsupported_dtype(dt)))
}

// ---------------------------------------------------------------------------
// Cast

/// How a source value is read when casting.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum CastKind {
    Bool,
    Signed,
    Unsigned,
    Float,
}

/// Every element type, with lossless-as-possible conversions for `Cast`.
pub(crate) trait CastElem: Copy + Send + Sync + 'static {
    const KIND: CastKind;
    fn to_i64(self) -> i64;
    fn to_u64(self) -> u64;
    fn to_f64(self) -> f64;
    fn to_bool(self) -> bool;
    fn from_i64(v: i64) -> Self;
    fn from_u64(v: u64) -> Self;
    fn from_f64(v: f64) -> Self;
    fn from_bool(v: bool) -> Self;
}

macro_rules! cast_prim {
    ($kind:ident: $($t:ty),*) => {$(
        impl CastElem for $t {
            const KIND: CastKind = CastKind::$kind;
            #[inline(always)] fn to_i64(self) -> i64 { self as i64 }
            #[inline(always)] fn to_u64(self) -> u64 { self as u64 }
            #[inline(always)] fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)] fn to_bool(self) -> bool { self != (0 as $t) }
            #[inline(always)] fn from_i64(v: i64) -> Self { v as $t }
            #[inline(always)] fn from_u64(v: u64) -> Self { v as $t }
            #[inline(always)] fn from_f64(v: f64) -> Self { v as $t }
            #[inline(always)] fn from_bool(v: bool) -> Self { (v as u8) as $t }
        }
    )*};
}
cast_prim!(Signed: i8, i16, i32, i64);
cast_prim!(Unsigned: u8, u16, u32, u64);
cast_prim!(Float: f32, f64);

impl CastElem for f16 {
    const KIND: CastKind = CastKind::Float;
    fn to_i64(self) -> i64 {
        f16::to_f64(self) as i64
    }
    fn to_u64(self) -> u64 {
        f16::to_f64(self) as u64
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn to_bool(self) -> bool {
        f16::to_f64(self) != 0.0
    }
    fn from_i64(v: i64) -> Self {
        f16::from_f64(v as f64)
    }
    fn from_u64(v: u64) -> Self {
        f16::from_f64(v as f64)
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn from_bool(v: bool) -> Self {
        if v {
            f16::ONE
        } else {
            f16::ZERO
        }
    }
}

impl CastElem for Bool8 {
    const KIND: CastKind = CastKind::Bool;
    fn to_i64(self) -> i64 {
        (self.0 != 0) as i64
    }
    fn to_u64(self) -> u64 {
        (self.0 != 0) as u64
    }
    fn to_f64(self) -> f64 {
        (self.0 != 0) as u8 as f64
    }
    fn to_bool(self) -> bool {
        self.0 != 0
    }
    fn from_i64(v: i64) -> Self {
        Bool8((v != 0) as u8)
    }
    fn from_u64(v: u64) -> Self {
        Bool8((v != 0) as u8)
    }
    fn from_f64(v: f64) -> Self {
        Bool8((v != 0.0) as u8)
    }
    fn from_bool(v: bool) -> Self {
        Bool8(v as u8)
    }
}

/// Convert one value (numpy `astype` semantics for in-range values; float to
/// integer saturates and maps NaN to 0).
#[inline(always)]
pub(crate) fn cast<S: CastElem, D: CastElem>(s: S) -> D {
    match S::KIND {
        CastKind::Bool => D::from_bool(s.to_bool()),
        CastKind::Signed => D::from_i64(s.to_i64()),
        CastKind::Unsigned => D::from_u64(s.to_u64()),
        CastKind::Float => D::from_f64(s.to_f64()),
    }
}

struct CastKernel<S, D> {
    n: usize,
    _t: Types<(S, D)>,
}

impl<S: CastElem, D: CastElem> Kernel for CastKernel<S, D> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (x, y) = (args.inputs[0] as *const S, args.outputs[0] as *mut D);
        // SAFETY: the buffers hold `n` elements and do not overlap.
        unsafe {
            par_map(self.n, x, y, |_, xs, ys| {
                for (o, &v) in ys.iter_mut().zip(xs) {
                    *o = cast::<S, D>(v);
                }
            })
        };
        Ok(())
    }
}

fn build_cast(spec: &KernelSpec<'_>) -> BuildResult {
    let x = spec.input(0)?;
    let y = spec.output(0)?;
    if x.shape() != y.shape() {
        return Err(spec.error(format!("cast changes the shape: {} -> {}", x.info, y.info)));
    }
    if x.dtype() == y.dtype() {
        return Ok(Box::new(CopyKernel { nbytes: x.info.nbytes(), src: x.pos }));
    }
    if let Some(d) = [x.dtype(), y.dtype()].into_iter().find(|d| d.is_float8()) {
        // Float8 converts with the pow2-scaled casts (`with_any!` lists the computing types only).
        return Err(spec.unsupported_dtype(d));
    }
    let n = x.nelms();
    Ok(with_any!(x.dtype(), S => with_any!(y.dtype(), Dst => {
        Box::new(CastKernel::<S, Dst> { n, _t: Types::default() }) as Box<dyn Kernel>
    })))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{run_op, t, ti};
    use super::GELU_A;
    use popart_ir::ops::grad::ShapeAttrs;
    use popart_ir::ops::shape::ReshapeAttrs;
    use popart_ir::ops::unary::CastAttrs;
    use popart_ir::{Attributes, DataType, HostTensor, OpAttrs};

    fn unary(op: &str, dtype: DataType, xs: &[f64]) -> Vec<f64> {
        run_op(op, Attributes::new(), &[(0, t(dtype, &[xs.len()], xs))])[0].to_f64_vec()
    }

    fn assert_close(got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol * (1.0 + w.abs()), "element {i}: got {g}, want {w}");
        }
    }

    #[test]
    fn float_ops_match_std_math() {
        let xs = [-2.5, -1.0, -0.25, 0.0, 0.3, 1.0, 3.7];
        let pos = [0.1, 0.5, 1.0, 2.0, 10.0];
        type Case<'a> = (&'a str, &'a [f64], fn(f64) -> f64);
        let cases: &[Case<'_>] = &[
            ("Neg", &xs, |x| -x),
            ("Abs", &xs, f64::abs),
            ("Exp", &xs, f64::exp),
            ("Log", &pos, f64::ln),
            ("Log1p", &pos, f64::ln_1p),
            ("Sqrt", &pos, f64::sqrt),
            ("Relu", &xs, |x| x.max(0.0)),
            ("Tanh", &xs, f64::tanh),
            ("Sigmoid", &xs, |x| 1.0 / (1.0 + (-x).exp())),
            ("Sin", &xs, f64::sin),
            ("Cos", &xs, f64::cos),
            ("Sign", &xs, |x| {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    0.0
                }
            }),
            ("Floor", &xs, f64::floor),
            ("Ceil", &xs, f64::ceil),
            ("Identity", &xs, |x| x),
            ("Detach", &xs, |x| x),
        ];
        for &(op, inputs, f) in cases {
            let want: Vec<f64> = inputs.iter().map(|&x| f(x)).collect();
            assert_close(&unary(op, DataType::Float64, inputs), &want, 1e-15);
            assert_close(&unary(op, DataType::Float32, inputs), &want, 1e-6);
            assert_close(&unary(op, DataType::Float16, inputs), &want, 2e-3);
        }
    }

    #[test]
    fn reshape_squeeze_and_reshape_grad_copy_elements_in_order() {
        let x = t(DataType::Int16, &[2, 1, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let shape = ReshapeAttrs { shape: vec![3, -1] }.to_attrs();
        let r = &run_op("Reshape", shape, &[(0, x.clone())])[0];
        assert_eq!(r.info, ti(DataType::Int16, &[3, 2]));
        assert_eq!(r.bytes, x.bytes);
        let sq = &run_op("Squeeze", Attributes::new(), &[(0, x.clone())])[0];
        assert_eq!(sq.info, ti(DataType::Int16, &[2, 3]));
        assert_eq!(sq.bytes, x.bytes);
        let g = t(DataType::Int16, &[6], &[6.0, 5.0, 4.0, 3.0, 2.0, 1.0]);
        let back = &run_op("ReshapeGrad", ShapeAttrs { shape: vec![2, 1, 3] }.to_attrs(), &[(0, g.clone())])[0];
        assert_eq!(back.info, ti(DataType::Int16, &[2, 1, 3]));
        assert_eq!(back.bytes, g.bytes);
    }

    #[test]
    fn gelu_is_the_tanh_approximation() {
        // Hand-derived: gelu(1) = 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.8411919906082768.
        let got = unary("Gelu", DataType::Float64, &[1.0, -1.0, 0.0]);
        assert_close(&got, &[0.841_191_990_608_276_8, -0.158_808_009_391_723_2, 0.0], 1e-14);
        let x: f64 = 2.3;
        let want = 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + GELU_A * x.powi(3))).tanh());
        assert_close(&unary("Gelu", DataType::Float32, &[x]), &[want], 1e-6);
    }

    #[test]
    fn gelu_and_its_gradient_match_the_f64_definition_over_the_float32_range() {
        // Every SIMD path (the AVX-512 kernel on CPUs with it): a sweep of
        // -60..60 (odd length: a masked tail; several pieces over the team),
        // the far tails and the special values.
        let mut xs: Vec<f64> = (0..240_007).map(|i| i as f64 * 5e-4 - 60.0).collect();
        xs.extend([1e30, -1e30, 3e4, -3e4, 1e-30, -1e-30, 0.0]);
        let u = |x: f64| (2.0 / std::f64::consts::PI).sqrt() * (x + GELU_A * x * x * x);
        let gelu = |x: f64| 0.5 * x * (1.0 + u(x).tanh());
        let dgelu = |x: f64| {
            let t = u(x).tanh();
            let du = (2.0 / std::f64::consts::PI).sqrt() * (1.0 + 3.0 * GELU_A * x * x);
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
        };
        // The inputs as float32 values, so both sides see the same x.
        let xs: Vec<f64> = xs.iter().map(|&x| x as f32 as f64).collect();
        let want: Vec<f64> = xs.iter().map(|&x| gelu(x)).collect();
        assert_close(&unary("Gelu", DataType::Float32, &xs), &want, 2e-6);
        let gs: Vec<f64> = (0..xs.len()).map(|i| 1.0 + (i % 7) as f64 * 0.25).collect();
        let grad = |dt| {
            let inputs = [(0, t(dt, &[xs.len()], &gs)), (1, t(dt, &[xs.len()], &xs))];
            run_op("GeluGrad", Attributes::new(), &inputs)[0].to_f64_vec()
        };
        let want: Vec<f64> = xs.iter().zip(&gs).map(|(&x, &g)| g * dgelu(x)).collect();
        assert_close(&grad(DataType::Float32), &want, 4e-6);
        // Float64 (the table's maps on every CPU), to its own precision.
        let want_y: Vec<f64> = xs.iter().map(|&x| gelu(x)).collect();
        assert_close(&unary("Gelu", DataType::Float64, &xs), &want_y, 1e-12);
        assert_close(&grad(DataType::Float64), &want, 1e-12);
        // +inf passes through, NaN propagates (through the gradient too).
        let special = unary("Gelu", DataType::Float32, &[f64::INFINITY, f64::NAN]);
        assert_eq!(special[0], f64::INFINITY);
        assert!(special[1].is_nan());
        let nan = [(0, t(DataType::Float32, &[1], &[1.0])), (1, t(DataType::Float32, &[1], &[f64::NAN]))];
        assert!(run_op("GeluGrad", Attributes::new(), &nan)[0].to_f64_vec()[0].is_nan());
    }

    #[test]
    fn log1p_is_accurate_for_tiny_inputs() {
        // ln(1 + x) = x - x²/2 + ... ; forming 1 + x first would lose every digit of x = 1e-12.
        let got = unary("Log1p", DataType::Float64, &[1e-12, -1e-12]);
        assert_close(&got, &[1e-12 - 0.5e-24, -1e-12 - 0.5e-24], 1e-15);
        let got32 = unary("Log1p", DataType::Float32, &[1e-7]);
        assert!((got32[0] - 1e-7).abs() < 1e-13, "{got32:?}");
    }

    #[test]
    fn integer_unary_ops_wrap_and_never_panic() {
        assert_eq!(unary("Neg", DataType::Int8, &[-128.0, 5.0]), vec![-128.0, -5.0]);
        assert_eq!(unary("Abs", DataType::Int32, &[-7.0, 3.0]), vec![7.0, 3.0]);
        assert_eq!(unary("Relu", DataType::Int64, &[-7.0, 3.0]), vec![0.0, 3.0]);
        assert_eq!(unary("Sign", DataType::Int16, &[-7.0, 0.0, 3.0]), vec![-1.0, 0.0, 1.0]);
        assert_eq!(unary("Neg", DataType::Uint8, &[1.0]), vec![255.0]);
    }

    #[test]
    fn large_inputs_run_in_parallel_pieces_correctly() {
        let n = 200_003;
        let xs: Vec<f64> = (0..n).map(|i| (i as f64) * 1e-3 - 50.0).collect();
        let got = unary("Relu", DataType::Float32, &xs);
        let want: Vec<f64> = xs.iter().map(|&x| (x as f32 as f64).max(0.0)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn cast_between_every_pair_of_dtypes() {
        let vals = [0.0, 1.0, 2.0, 100.0];
        for &from in &DataType::ALL {
            for &to in &DataType::ALL {
                if from.is_float8() || to.is_float8() {
                    // Refused: float8 converts with the pow2-scaled casts (tests/tests/ops_float8.rs).
                    continue;
                }
                let src: Vec<f64> = if from == DataType::Bool { vec![0.0, 1.0, 1.0, 0.0] } else { vals.to_vec() };
                let attrs = CastAttrs { to }.to_attrs();
                let out = &run_op("Cast", attrs, &[(0, t(from, &[4], &src))])[0];
                assert_eq!(out.info, ti(to, &[4]));
                let want: Vec<f64> =
                    src.iter().map(|&v| if to == DataType::Bool { (v != 0.0) as u8 as f64 } else { v }).collect();
                assert_eq!(out.to_f64_vec(), want, "{from} -> {to}");
            }
        }
    }

    #[test]
    fn cast_truncates_floats_and_wraps_integers_like_numpy() {
        let attrs = |to| CastAttrs { to }.to_attrs();
        let x = t(DataType::Float32, &[4], &[-1.75, 2.9, 0.4, -0.0]);
        assert_eq!(
            run_op("Cast", attrs(DataType::Int32), &[(0, x.clone())])[0].to_f64_vec(),
            vec![-1.0, 2.0, 0.0, 0.0]
        );
        assert_eq!(run_op("Cast", attrs(DataType::Bool), &[(0, x)])[0].to_f64_vec(), vec![1.0, 1.0, 1.0, 0.0]);
        let big = HostTensor::from_f64_values(DataType::Int32, &[2], &[300.0, -1.0]);
        assert_eq!(run_op("Cast", attrs(DataType::Uint8), &[(0, big)])[0].to_f64_vec(), vec![44.0, 255.0]);
        let i64s =
            HostTensor::from_bytes(ti(DataType::Int64, &[1]), ((1i64 << 60) + 1).to_le_bytes().to_vec()).unwrap();
        let back = run_op("Cast", attrs(DataType::Uint64), &[(0, i64s)]);
        assert_eq!(back[0].bytes, ((1u64 << 60) + 1).to_le_bytes().to_vec());
    }
}
