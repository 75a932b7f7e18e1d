//! Shared machinery of the kernel library: element traits, spec helpers, the
//! broadcast plan, the parallel range splitter and the float16 adapter.

use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Mutex;

use half::f16;
use popart_ir::{DataType, TensorInfo};

use crate::cpu::kernel::{Kernel, KernelArgs, KernelError, KernelSpec};
use crate::cpu::team;

/// Elements below which a kernel never splits work over threads.
pub(crate) const PAR_MIN_ELEMS: usize = 1 << 18;
/// Smallest piece of work handed to one parallel task.
const PAR_CHUNK: usize = 1 << 14;
/// Largest rank a kernel plan supports after collapsing contiguous dims.
pub(crate) const MAX_RANK: usize = 16;

/// `Result` of a kernel factory.
pub(crate) type BuildResult = Result<Box<dyn Kernel>, KernelError>;

/// Box a kernel as a factory result.
pub(crate) fn boxed(kernel: impl Kernel + 'static) -> BuildResult {
    Ok(Box::new(kernel))
}

/// A raw pointer that may be moved into parallel tasks. The kernels guarantee
/// that tasks touch disjoint parts of output buffers.
#[derive(Debug)]
pub(crate) struct SendPtr<T>(pub *mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: only used for buffers the executor hands to a kernel run, which outlive
// the run; concurrent tasks write disjoint ranges.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the whole `SendPtr`).
    #[inline(always)]
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

/// A read-only slice from a raw pointer; empty slices do not touch the pointer.
///
/// # Safety
/// `p` must be valid for `n` reads of `T` for the chosen lifetime.
#[inline(always)]
pub(crate) unsafe fn slice<'a, T>(p: *const T, n: usize) -> &'a [T] {
    if n == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(p, n)
    }
}

/// A mutable slice from a raw pointer; empty slices do not touch the pointer.
///
/// # Safety
/// `p` must be valid for `n` writes of `T` and not aliased for the chosen lifetime.
#[inline(always)]
pub(crate) unsafe fn slice_mut<'a, T>(p: *mut T, n: usize) -> &'a mut [T] {
    if n == 0 {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(p, n)
    }
}

/// Run `f` over `0..n`, split into contiguous pieces over the worker team ([`team`])
/// when `n` is at least [`PAR_MIN_ELEMS`] and more than one thread is available.
#[inline]
pub(crate) fn par_range(n: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    par_split(n, PAR_MIN_ELEMS, PAR_CHUNK, f);
}

/// True when the CPU runs AVX-512 (F, VL, DQ, BW): expensive elementwise maps
/// are then also compiled for it and picked at run time (1.5-2x on gelu, exp).
pub(crate) fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Defines `$name(wide, args..)`: runs the `#[inline(always)]` function `$body`
/// compiled for AVX-512 when `wide` (see [`has_avx512`]), as built otherwise.
macro_rules! wide_simd {
    ($(#[$m:meta])* $vis:vis fn $name:ident<$($g:ident: $b:path),*>($($a:ident: $t:ty),*) => $body:ident) => {
        $(#[$m])*
        #[inline]
        $vis fn $name<$($g: $b),*>(wide: bool, $($a: $t),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw")]
                unsafe fn wide_body<$($g: $b),*>($($a: $t),*) {
                    $body::<$($g),*>($($a),*)
                }
                if wide {
                    // SAFETY: `wide` is only true when the CPU has these features.
                    return unsafe { wide_body::<$($g),*>($($a),*) };
                }
            }
            let _ = wide;
            $body::<$($g),*>($($a),*)
        }
    };
}
pub(crate) use wide_simd;

/// [`par_range`] for work costing about `cost` simple elementwise operations per
/// item (transcendental maps): splits `cost` times earlier, in pieces `cost` times smaller.
#[inline]
pub(crate) fn par_range_cost(n: usize, cost: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    let cost = cost.max(1);
    par_split(n, PAR_MIN_ELEMS / cost, PAR_CHUNK / cost, f);
}

/// Run `f` over `0..n` in pieces of at least `min_chunk` items on the worker team
/// when `n >= min_total` (sequentially otherwise or with one thread).
pub(crate) fn par_split(n: usize, min_total: usize, min_chunk: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    let min_chunk = min_chunk.max(1);
    if n < min_total || n < 2 * min_chunk {
        f(0..n);
        return;
    }
    let threads = team::num_threads();
    if threads <= 1 {
        f(0..n);
        return;
    }
    let chunk = n.div_ceil(threads * 4).max(min_chunk);
    let pieces = n.div_ceil(chunk);
    team::run(pieces, &|p| f(p * chunk..((p + 1) * chunk).min(n)));
}

// ---------------------------------------------------------------------------
// Element types

/// A bool element (one byte, 0 or 1).
#[repr(transparent)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Bool8(pub u8);

/// Numeric element types with the arithmetic the kernels need. Integer ops wrap
/// on overflow and integer division by zero yields 0, so no kernel can panic.
pub(crate) trait Num: Copy + Send + Sync + PartialOrd + PartialEq + Default + std::fmt::Debug + 'static {
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// Smallest value (`-inf` for floats): identity of `max`.
    const LOWEST: Self;
    /// Largest value (`+inf` for floats): identity of `min`.
    const HIGHEST: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    fn signum(self) -> Self;
    fn pow(self, o: Self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    /// Maximum, propagating NaN.
    fn maximum(self, o: Self) -> Self;
    /// Minimum, propagating NaN.
    fn minimum(self, o: Self) -> Self;
    /// Conversion from f64 (truncating, saturating for integers).
    fn from_f64(v: f64) -> Self;
}

/// Floating point element types (f32, f64).
pub(crate) trait Float:
    Num
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    fn exp(self) -> Self;
    /// `exp` written branch-free so loops over it vectorise (f32: within ~2 ulp of
    /// libm for results above 1e-38; f64: libm). Used inside composite functions
    /// (gelu, sigmoid) where it dominates the cost.
    fn fast_exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    /// Apply the standard library's function for this type (`x.std(f32::ln_1p,
    /// f64::ln_1p)`): lets a kernel table use any `std` float function.
    fn std(self, f32: fn(f32) -> f32, f64: fn(f64) -> f64) -> Self;
}

/// Picks the `f32` or `f64` function of a pair by the element type.
trait StdFn<T> {
    fn pick(f32: fn(f32) -> f32, f64: fn(f64) -> f64) -> fn(T) -> T;
}

impl StdFn<f32> for f32 {
    #[inline(always)]
    fn pick(f32: fn(f32) -> f32, _: fn(f64) -> f64) -> fn(f32) -> f32 {
        f32
    }
}

impl StdFn<f64> for f64 {
    #[inline(always)]
    fn pick(_: fn(f32) -> f32, f64: fn(f64) -> f64) -> fn(f64) -> f64 {
        f64
    }
}

/// Taylor coefficients of `tanh(x) / x` in powers of `x²` (enough for f64 below |x| = 0.25).
const TANH_SERIES: [f64; 10] = [
    1.0,
    -1.0 / 3.0,
    2.0 / 15.0,
    -17.0 / 315.0,
    62.0 / 2835.0,
    -1382.0 / 155_925.0,
    21844.0 / 6_081_075.0,
    -929_569.0 / 638_512_875.0,
    6_404_582.0 / 10_854_718_875.0,
    -443_861_162.0 / 1_856_156_927_625.0,
];

/// Branch-free exponential (see [`Float::fast_exp`]).
trait FastExp {
    fn fast_exp(self) -> Self;
}

impl FastExp for f32 {
    /// `exp(x) = 2^k · exp(r)`, `k = round(x / ln 2)`, `|r| <= ln(2) / 2`, with `exp(r)`
    /// from its degree-7 Taylor polynomial (truncation error below 6e-9 relative).
    /// Inputs are clamped to [-87.3, 88.7], so results stay normal and finite.
    #[inline(always)]
    fn fast_exp(self) -> f32 {
        const LOG2E: f32 = std::f32::consts::LOG2_E;
        const LN2_HI: f32 = 0.693_145_75;
        const LN2_LO: f32 = 1.428_606_8e-6;
        // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without SSE4.1.
        const ROUND: f32 = 12_582_912.0;
        let x = self.clamp(-87.3, 88.7);
        let kr = x * LOG2E + ROUND;
        let k = kr - ROUND;
        // k as an integer, read from the mantissa (an `as i32` cast would not vectorise).
        let ki = kr.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
        let r = (x - k * LN2_HI) - k * LN2_LO;
        let mut p: f32 = 1.0 / 5040.0;
        p = p.mul_add(r, 1.0 / 720.0);
        p = p.mul_add(r, 1.0 / 120.0);
        p = p.mul_add(r, 1.0 / 24.0);
        p = p.mul_add(r, 1.0 / 6.0);
        p = p.mul_add(r, 0.5);
        p = p.mul_add(r, 1.0);
        p = p.mul_add(r, 1.0);
        let scale = f32::from_bits(((ki + 127) as u32) << 23);
        let y = p * scale;
        if self.is_nan() {
            self
        } else {
            y
        }
    }
}

impl FastExp for f64 {
    #[inline(always)]
    fn fast_exp(self) -> f64 {
        self.exp()
    }
}

macro_rules! impl_float {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            #[inline(always)] fn add(self, o: Self) -> Self { self + o }
            #[inline(always)] fn sub(self, o: Self) -> Self { self - o }
            #[inline(always)] fn mul(self, o: Self) -> Self { self * o }
            #[inline(always)] fn div(self, o: Self) -> Self { self / o }
            #[inline(always)] fn neg(self) -> Self { -self }
            #[inline(always)] fn abs(self) -> Self { <$t>::abs(self) }
            #[inline(always)] fn signum(self) -> Self {
                if self > 0.0 { 1.0 } else if self < 0.0 { -1.0 } else { self }
            }
            #[inline(always)] fn pow(self, o: Self) -> Self { self.powf(o) }
            #[inline(always)] fn floor(self) -> Self { <$t>::floor(self) }
            #[inline(always)] fn ceil(self) -> Self { <$t>::ceil(self) }
            #[inline(always)] fn maximum(self, o: Self) -> Self {
                if self > o || self.is_nan() { self } else if o.is_nan() { o } else { o }
            }
            #[inline(always)] fn minimum(self, o: Self) -> Self {
                if self < o || self.is_nan() { self } else { o }
            }
            #[inline(always)] fn from_f64(v: f64) -> Self { v as $t }
        }
        impl Float for $t {
            #[inline(always)] fn exp(self) -> Self { <$t>::exp(self) }
            #[inline(always)] fn fast_exp(self) -> Self { FastExp::fast_exp(self) }
            #[inline(always)] fn std(self, f32: fn(f32) -> f32, f64: fn(f64) -> f64) -> Self {
                <$t as StdFn<$t>>::pick(f32, f64)(self)
            }
            #[inline(always)] fn ln(self) -> Self { <$t>::ln(self) }
            #[inline(always)] fn sqrt(self) -> Self { <$t>::sqrt(self) }
            /// `(e - 1) / (e + 1)` with `e = exp(2|x|)` (libm's `exp` is several times
            /// faster than its `tanh`), and the Taylor series below |x| = 0.25 where that
            /// formula would cancel; a few ulp from libm, saturating to ±1 and keeping NaN.
            #[inline(always)] fn tanh(self) -> Self {
                let t = self.abs();
                if t < 0.25 {
                    let x2 = self * self;
                    let mut p = TANH_SERIES[TANH_SERIES.len() - 1] as $t;
                    for &c in TANH_SERIES[..TANH_SERIES.len() - 1].iter().rev() {
                        p = p * x2 + c as $t;
                    }
                    return self * p;
                }
                if t.is_nan() {
                    return self;
                }
                if t >= 20.0 {
                    return (1.0 as $t).copysign(self);
                }
                let e = (2.0 * t).exp();
                ((e - 1.0) / (e + 1.0)).copysign(self)
            }
            #[inline(always)] fn sin(self) -> Self { <$t>::sin(self) }
            #[inline(always)] fn cos(self) -> Self { <$t>::cos(self) }
        }
    )*};
}
impl_float!(f32, f64);

macro_rules! impl_int {
    (signed: $($t:ty),*) => {$(
        impl_int!(@common $t);
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            impl_int!(@arith $t);
            #[inline(always)] fn neg(self) -> Self { self.wrapping_neg() }
            #[inline(always)] fn abs(self) -> Self { self.wrapping_abs() }
            #[inline(always)] fn signum(self) -> Self { <$t>::signum(self) }
            #[inline(always)] fn pow(self, o: Self) -> Self {
                if o >= 0 {
                    self.wrapping_pow(u32::try_from(o).unwrap_or(u32::MAX))
                } else {
                    // Integer reciprocal powers truncate: only |base| == 1 survives.
                    match self { 1 => 1, -1 => if o % 2 == 0 { 1 } else { -1 }, _ => 0 }
                }
            }
        }
    )*};
    (unsigned: $($t:ty),*) => {$(
        impl_int!(@common $t);
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            impl_int!(@arith $t);
            #[inline(always)] fn neg(self) -> Self { self.wrapping_neg() }
            #[inline(always)] fn abs(self) -> Self { self }
            #[inline(always)] fn signum(self) -> Self { (self > 0) as $t }
            #[inline(always)] fn pow(self, o: Self) -> Self {
                self.wrapping_pow(u32::try_from(o).unwrap_or(u32::MAX))
            }
        }
    )*};
    (@common $t:ty) => {};
    (@arith $t:ty) => {
        #[inline(always)] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
        #[inline(always)] fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
        #[inline(always)] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
        #[inline(always)] fn div(self, o: Self) -> Self {
            if o == 0 { 0 } else { self.wrapping_div(o) }
        }
        #[inline(always)] fn floor(self) -> Self { self }
        #[inline(always)] fn ceil(self) -> Self { self }
        #[inline(always)] fn maximum(self, o: Self) -> Self { if self > o { self } else { o } }
        #[inline(always)] fn minimum(self, o: Self) -> Self { if self < o { self } else { o } }
        #[inline(always)] fn from_f64(v: f64) -> Self { v as $t }
    };
}
impl_int!(signed: i8, i16, i32, i64);
impl_int!(unsigned: u8, u16, u32, u64);

/// Integer element types that can be read as an index.
pub(crate) trait IndexElem: Copy + Send + Sync + 'static {
    fn to_i64(self) -> i64;
}
macro_rules! impl_index {
    ($($t:ty),*) => {$(
        impl IndexElem for $t {
            #[inline(always)]
            fn to_i64(self) -> i64 { self as i64 }
        }
    )*};
}
impl_index!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Match a dtype against `Variant: type` arms, binding `$T` to the arm's type for
/// `$body`; every other dtype evaluates `$other`. The `with_*` macros below are
/// the type tables the kernels use.
macro_rules! dispatch_dtype {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr; $($variant:ident: $ty:ty),+ $(,)?) => {{
        #[allow(unreachable_patterns)]
        match $dt {
            $(popart_ir::DataType::$variant => {
                type $T = $ty;
                $body
            })+
            _ => $other,
        }
    }};
}
pub(crate) use dispatch_dtype;

/// Dispatch on a numeric dtype (integers, f32, f64); `$other` for bool and float16.
macro_rules! with_num {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::cpu::kernels::common::dispatch_dtype!($dt, $T => $body, _ => $other;
            Int8: i8, Int16: i16, Int32: i32, Int64: i64,
            Uint8: u8, Uint16: u16, Uint32: u32, Uint64: u64,
            Float32: f32, Float64: f64)
    };
}
pub(crate) use with_num;

/// Dispatch on a float dtype (f32, f64); `$other` for the rest.
macro_rules! with_float {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::cpu::kernels::common::dispatch_dtype!($dt, $T => $body, _ => $other; Float32: f32, Float64: f64)
    };
}
pub(crate) use with_float;

/// Dispatch on an integer dtype usable as an index.
macro_rules! with_index {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::cpu::kernels::common::dispatch_dtype!($dt, $T => $body, _ => $other;
            Int8: i8, Int16: i16, Int32: i32, Int64: i64,
            Uint8: u8, Uint16: u16, Uint32: u32, Uint64: u64)
    };
}
pub(crate) use with_index;

/// Dispatch on any dtype, binding `$T` to its element type.
macro_rules! with_any {
    ($dt:expr, $T:ident => $body:expr) => {
        $crate::cpu::kernels::common::dispatch_dtype!($dt, $T => $body, _ => unreachable!("every dtype is listed");
            Bool: $crate::cpu::kernels::common::Bool8,
            Int8: i8, Int16: i16, Int32: i32, Int64: i64,
            Uint8: u8, Uint16: u16, Uint32: u32, Uint64: u64,
            Float16: half::f16, Float32: f32, Float64: f64)
    };
}
pub(crate) use with_any;

/// Dispatch on an element size in bytes: binds `$T` to an unsigned integer of that
/// size, for kernels that only move elements.
macro_rules! with_bits {
    ($dt:expr, $T:ident => $body:expr) => {{
        match $dt.size_bytes() {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            _ => {
                type $T = u64;
                $body
            }
        }
    }};
}
pub(crate) use with_bits;

// ---------------------------------------------------------------------------
// Spec helpers

/// A connected tensor of a spec: its position in [`KernelArgs`] and its info.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot<'s> {
    /// Position in `KernelArgs::inputs` / `outputs`.
    pub pos: usize,
    /// Type and shape.
    pub info: &'s TensorInfo,
}

impl Slot<'_> {
    pub(crate) fn dtype(&self) -> DataType {
        self.info.dtype
    }
    pub(crate) fn shape(&self) -> &[usize] {
        &self.info.shape
    }
    pub(crate) fn nelms(&self) -> usize {
        self.info.nelms()
    }
}

/// Convenience accessors on a [`KernelSpec`] returning typed build errors.
pub(crate) trait SpecExt {
    fn error(&self, reason: impl Into<String>) -> KernelError;
    fn input(&self, index: u32) -> Result<Slot<'_>, KernelError>;
    fn opt_input(&self, index: u32) -> Option<Slot<'_>>;
    fn output(&self, index: u32) -> Result<Slot<'_>, KernelError>;
    fn attr_ints(&self, key: &str) -> Result<&[i64], KernelError>;
    fn attr_str_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str;
    fn attr_int_or(&self, key: &str, default: i64) -> i64;
    fn attr_float_or(&self, key: &str, default: f64) -> f64;
    fn unsupported_dtype(&self, dtype: DataType) -> KernelError;
}

impl SpecExt for KernelSpec<'_> {
    fn error(&self, reason: impl Into<String>) -> KernelError {
        KernelError { op_type: self.op_type().to_string(), reason: reason.into() }
    }
    fn input(&self, index: u32) -> Result<Slot<'_>, KernelError> {
        self.opt_input(index).ok_or_else(|| self.error(format!("input {index} is not connected")))
    }
    fn opt_input(&self, index: u32) -> Option<Slot<'_>> {
        self.inputs.iter().position(|(i, _)| *i == index).map(|pos| Slot { pos, info: &self.inputs[pos].1 })
    }
    fn output(&self, index: u32) -> Result<Slot<'_>, KernelError> {
        self.outputs
            .iter()
            .position(|(i, _)| *i == index)
            .map(|pos| Slot { pos, info: &self.outputs[pos].1 })
            .ok_or_else(|| self.error(format!("output {index} is not connected")))
    }
    fn attr_ints(&self, key: &str) -> Result<&[i64], KernelError> {
        self.attrs.ints(key).ok_or_else(|| self.error(format!("missing integer-list attribute `{key}`")))
    }
    fn attr_str_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.attrs.str(key).unwrap_or(default)
    }
    fn attr_int_or(&self, key: &str, default: i64) -> i64 {
        self.attrs.int(key).unwrap_or(default)
    }
    fn attr_float_or(&self, key: &str, default: f64) -> f64 {
        self.attrs.float(key).unwrap_or(default)
    }
    fn unsupported_dtype(&self, dtype: DataType) -> KernelError {
        self.error(format!("dtype {dtype} is not supported"))
    }
}

/// Normalise a possibly negative axis against `rank`.
pub(crate) fn norm_axis(spec: &KernelSpec<'_>, axis: i64, rank: usize) -> Result<usize, KernelError> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(spec.error(format!("axis {axis} is out of range for rank {rank}")));
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}

/// Normalise a list of axes (sorted, deduplicated); empty means all.
pub(crate) fn norm_axes(spec: &KernelSpec<'_>, axes: &[i64], rank: usize) -> Result<Vec<usize>, KernelError> {
    if axes.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut v = axes.iter().map(|&a| norm_axis(spec, a, rank)).collect::<Result<Vec<_>, _>>()?;
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// Row-major strides (in elements) of `shape`.
pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

// ---------------------------------------------------------------------------
// Broadcasting

/// Iteration plan of an elementwise op whose `N` operands broadcast to a
/// contiguous output: dims are collapsed wherever every operand stays contiguous,
/// so same-shape and scalar-broadcast cases become a single flat loop.
#[derive(Clone, Debug)]
pub(crate) struct Broadcast<const N: usize> {
    dims: Vec<usize>,
    strides: [Vec<usize>; N],
    len: usize,
}

impl<const N: usize> Broadcast<N> {
    /// Plan for operands of shapes `ins` broadcast to `out`; `None` if an operand
    /// does not broadcast to `out` or the collapsed rank exceeds [`MAX_RANK`].
    pub(crate) fn new(out: &[usize], ins: [&[usize]; N]) -> Option<Self> {
        let rank = out.len();
        let mut dims: Vec<usize> = Vec::with_capacity(rank);
        let mut strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::with_capacity(rank));
        let mut in_strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::new());
        for (k, s) in ins.iter().enumerate() {
            if s.len() > rank {
                return None;
            }
            in_strides[k] = contiguous_strides(s);
        }
        for (d, &od) in out.iter().enumerate() {
            if od == 1 {
                continue;
            }
            let mut st = [0usize; N];
            for k in 0..N {
                let s = ins[k];
                let off = rank - s.len();
                if d >= off {
                    let id = s[d - off];
                    if id == od {
                        st[k] = in_strides[k][d - off];
                    } else if id != 1 {
                        return None;
                    }
                }
            }
            // Merge with the previous dim when every operand stays contiguous.
            if let Some(&last) = dims.last() {
                if (0..N).all(|k| *strides[k].last().unwrap() == st[k] * od) {
                    *dims.last_mut().unwrap() = last * od;
                    for k in 0..N {
                        *strides[k].last_mut().unwrap() = st[k];
                    }
                    continue;
                }
            }
            dims.push(od);
            for k in 0..N {
                strides[k].push(st[k]);
            }
        }
        // Input dims that are not 1 where out is 1 would be invalid.
        for s in ins {
            let off = rank - s.len();
            if s.iter().enumerate().any(|(i, &id)| id != 1 && id != out[i + off]) {
                return None;
            }
        }
        if dims.is_empty() {
            dims.push(1);
            for st in strides.iter_mut() {
                st.push(0);
            }
        }
        if dims.len() > MAX_RANK {
            return None;
        }
        let len = out.iter().product();
        Some(Broadcast { dims, strides, len })
    }

    /// Number of output elements.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The collapsed output dims (at least one).
    pub(crate) fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Element strides of operand `k` per collapsed dim (0 where it broadcasts).
    pub(crate) fn strides(&self, k: usize) -> &[usize] {
        &self.strides[k]
    }

    /// Stride of the innermost collapsed dim per operand: 0 (broadcast) or 1.
    pub(crate) fn inner_strides(&self) -> [usize; N] {
        std::array::from_fn(|k| *self.strides[k].last().unwrap())
    }

    /// Call `f(out_offset, operand_offsets, len)` for the contiguous output
    /// segments covering `range` (flat output indices), in order.
    #[inline]
    pub(crate) fn for_segments(&self, range: Range<usize>, mut f: impl FnMut(usize, [usize; N], usize)) {
        if range.is_empty() {
            return;
        }
        let r = self.dims.len();
        let last = r - 1;
        let inner = self.dims[last];
        if r == 1 {
            let offs = std::array::from_fn(|k| range.start * self.strides[k][0]);
            f(range.start, offs, range.len());
            return;
        }
        let mut idx = [0usize; MAX_RANK];
        let mut rem = range.start;
        let mut offs = [0usize; N];
        for d in (0..r).rev() {
            idx[d] = rem % self.dims[d];
            rem /= self.dims[d];
            for (o, st) in offs.iter_mut().zip(&self.strides) {
                *o += idx[d] * st[d];
            }
        }
        let mut pos = range.start;
        while pos < range.end {
            let seg = (inner - idx[last]).min(range.end - pos);
            f(pos, offs, seg);
            pos += seg;
            if pos >= range.end {
                break;
            }
            // Advance the odometer by `seg` (which finishes the current row).
            idx[last] += seg;
            for (o, st) in offs.iter_mut().zip(&self.strides) {
                *o += seg * st[last];
            }
            let mut d = last;
            while idx[d] == self.dims[d] && d > 0 {
                for (o, st) in offs.iter_mut().zip(&self.strides) {
                    *o = *o + st[d - 1] - self.dims[d] * st[d];
                }
                idx[d] = 0;
                idx[d - 1] += 1;
                d -= 1;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Typed kernel scaffolding

/// Marker holding the type parameters of a kernel without owning values
/// (keeps kernels `Send + Sync` whatever the parameters).
pub(crate) type Types<T> = PhantomData<fn() -> T>;

// ---------------------------------------------------------------------------
// float16 adapter

/// Runs an f32 kernel for an op whose float16 tensors are converted to and from
/// f32 scratch buffers sized at build time.
pub(crate) struct F16Adapter {
    inner: Box<dyn Kernel>,
    /// Per input position: scratch index when float16.
    ins: Vec<Option<usize>>,
    /// Per output position: scratch index when float16.
    outs: Vec<Option<usize>>,
    /// Input 0 is updated in place through output 0.
    in_place: bool,
    state: Mutex<F16State>,
}

struct F16State {
    scratch: Vec<Vec<f32>>,
    in_ptrs: Vec<*const u8>,
    out_ptrs: Vec<*mut u8>,
}
// SAFETY: the pointer vectors are only scratch storage, written and read while the
// mutex is held during one run.
unsafe impl Send for F16State {}

/// True when any tensor of the spec is float16.
pub(crate) fn has_f16(spec: &KernelSpec<'_>) -> bool {
    spec.inputs.iter().chain(&spec.outputs).any(|(_, t)| t.dtype == DataType::Float16)
}

/// Build `build` on a copy of `spec` with float16 replaced by float32 and wrap
/// it in an [`F16Adapter`]. `in_place`: input 0 aliases output 0.
pub(crate) fn f16_adapter(
    spec: &KernelSpec<'_>,
    in_place: bool,
    build: impl FnOnce(&KernelSpec<'_>) -> BuildResult,
) -> BuildResult {
    let promote = |t: &TensorInfo| {
        if t.dtype == DataType::Float16 {
            TensorInfo::new(DataType::Float32, t.shape.clone())
        } else {
            t.clone()
        }
    };
    let f32_spec = KernelSpec {
        def: spec.def,
        attrs: spec.attrs,
        inputs: spec.inputs.iter().map(|(i, t)| (*i, promote(t))).collect(),
        outputs: spec.outputs.iter().map(|(i, t)| (*i, promote(t))).collect(),
    };
    let inner = build(&f32_spec)?;
    let mut scratch = Vec::new();
    let mut slot = |t: &TensorInfo| {
        (t.dtype == DataType::Float16).then(|| {
            scratch.push(vec![0f32; t.nelms()]);
            scratch.len() - 1
        })
    };
    let outs: Vec<Option<usize>> = spec.outputs.iter().map(|(_, t)| slot(t)).collect();
    let ins: Vec<Option<usize>> =
        spec.inputs.iter().enumerate().map(|(p, (_, t))| if in_place && p == 0 { outs[0] } else { slot(t) }).collect();
    let state = F16State {
        scratch,
        in_ptrs: vec![std::ptr::null(); spec.inputs.len()],
        out_ptrs: vec![std::ptr::null_mut(); spec.outputs.len()],
    };
    Ok(Box::new(F16Adapter { inner, ins, outs, in_place, state: Mutex::new(state) }))
}

impl Kernel for F16Adapter {
    unsafe fn run(&self, args: &KernelArgs<'_>) {
        use half::slice::HalfFloatSliceExt;
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *guard;
        for (p, s) in self.ins.iter().enumerate() {
            match *s {
                Some(s) => {
                    let buf = &mut st.scratch[s];
                    let src = if self.in_place && p == 0 { args.outputs[0] as *const u8 } else { args.inputs[p] };
                    slice(src as *const f16, buf.len()).convert_to_f32_slice(buf);
                    st.in_ptrs[p] = buf.as_ptr() as *const u8;
                }
                None => st.in_ptrs[p] = args.inputs[p],
            }
        }
        for (p, s) in self.outs.iter().enumerate() {
            st.out_ptrs[p] = match *s {
                Some(s) => st.scratch[s].as_mut_ptr() as *mut u8,
                None => args.outputs[p],
            };
        }
        self.inner.run(&KernelArgs { inputs: &st.in_ptrs, outputs: &st.out_ptrs });
        for (p, s) in self.outs.iter().enumerate() {
            if let Some(s) = *s {
                let buf = &st.scratch[s];
                slice_mut(args.outputs[p] as *mut f16, buf.len()).convert_from_f32_slice(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments<const N: usize>(p: &Broadcast<N>, r: Range<usize>) -> Vec<(usize, [usize; N], usize)> {
        let mut v = Vec::new();
        p.for_segments(r, |o, offs, l| v.push((o, offs, l)));
        v
    }

    #[test]
    fn same_shape_collapses_to_one_segment() {
        let p = Broadcast::<2>::new(&[2, 3, 4], [&[2, 3, 4], &[2, 3, 4]]).unwrap();
        assert_eq!(segments(&p, 0..24), vec![(0, [0, 0], 24)]);
        assert_eq!(p.inner_strides(), [1, 1]);
    }

    #[test]
    fn scalar_broadcast_is_flat() {
        let p = Broadcast::<2>::new(&[5, 6], [&[5, 6], &[]]).unwrap();
        assert_eq!(segments(&p, 3..30), vec![(3, [3, 0], 27)]);
        assert_eq!(p.inner_strides(), [1, 0]);
    }

    #[test]
    fn row_and_column_broadcast_offsets_match_naive_indexing() {
        let out = [3usize, 4, 5];
        let shapes: [&[usize]; 3] = [&[3, 1, 5], &[4, 1], &[1, 4, 5]];
        let p = Broadcast::<3>::new(&out, shapes).unwrap();
        for (start, end) in [(0, 60), (7, 53), (19, 20)] {
            let mut covered = start;
            p.for_segments(start..end, |o, offs, len| {
                assert_eq!(o, covered);
                covered += len;
                for i in 0..len {
                    let flat = o + i;
                    let (a, b, c) = (flat / 20, (flat / 5) % 4, flat % 5);
                    let inner = p.inner_strides();
                    assert_eq!(offs[0] + i * inner[0], a * 5 + c);
                    assert_eq!(offs[1] + i * inner[1], b);
                    assert_eq!(offs[2] + i * inner[2], b * 5 + c);
                }
            });
            assert_eq!(covered, end);
        }
    }

    #[test]
    fn incompatible_shapes_are_rejected() {
        assert!(Broadcast::<2>::new(&[2, 3], [&[2, 3], &[2]]).is_none());
        assert!(Broadcast::<1>::new(&[3], [&[2, 3]]).is_none());
    }

    #[test]
    fn fast_exp_is_within_a_few_ulp_of_libm() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (Float::fast_exp(x) as f64, (x as f64).exp());
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(worst < 3.0 * f32::EPSILON as f64, "worst relative error {worst}");
        assert!(Float::fast_exp(f32::NAN).is_nan());
        assert_eq!(Float::fast_exp(0.0f32), 1.0);
    }

    #[test]
    fn fast_tanh_is_within_a_few_ulp_of_libm() {
        for i in -40_000..=40_000 {
            let x = i as f64 * 5e-4; // [-20, 20], dense around the 0.25 switch
            let want = x.tanh();
            let got64 = <f64 as Float>::tanh(x);
            assert!((got64 - want).abs() <= 4.0 * f64::EPSILON * want.abs().max(1e-300), "f64 {x}: {got64} vs {want}");
            let xf = x as f32;
            let want32 = (xf as f64).tanh();
            let got32 = <f32 as Float>::tanh(xf) as f64;
            assert!(
                (got32 - want32).abs() <= 4.0 * f32::EPSILON as f64 * want32.abs(),
                "f32 {xf}: {got32} vs {want32}"
            );
        }
        assert_eq!(<f32 as Float>::tanh(100.0), 1.0);
        assert_eq!(<f64 as Float>::tanh(-1e308), -1.0);
        assert!(<f32 as Float>::tanh(f32::NAN).is_nan());
        assert_eq!(<f64 as Float>::tanh(0.0), 0.0);
    }

    #[test]
    fn par_range_covers_everything_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let n = 300_001;
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        par_range(n, |r| {
            for i in r {
                hits[i].fetch_add(1, Ordering::Relaxed);
            }
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }
}
