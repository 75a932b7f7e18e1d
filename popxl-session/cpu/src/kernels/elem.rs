//! Element types of the kernels: [`Num`], [`Float`] (with the branch-free
//! `fast_exp` and `tanh`), [`IndexElem`] and the one-byte bool [`Bool8`].

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
    /// libm for normal results, the full range including overflow to +inf and
    /// subnormal results; f64: libm). The `Exp` op and composite functions
    /// (gelu, sigmoid, swish, logsumexp) use it.
    fn fast_exp(self) -> Self;
    /// `exp` for callers that saturate where the result leaves the normal range
    /// (`x / (1 + exp(-2u))` in gelu): the input clamped to `[-87, 88]`, where
    /// the result is [`Float::fast_exp`]'s bit for bit (f32; f64: libm), scaled
    /// by `2^k` in one step instead of two (about a fifth fewer operations).
    fn fast_exp_normal(self) -> Self;
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
    fn fast_exp_normal(self) -> Self;
}

/// `exp(x) = 2^k · exp(r)`, `k = round(x / ln 2)`, `|r| <= ln(2) / 2`: returns
/// `(exp(r), k)`, `exp(r)` from its degree-7 Taylor polynomial (truncation error
/// below 6e-9 relative), for `x` already clamped to where `k` fits the callers.
#[inline(always)]
fn exp_parts(x: f32) -> (f32, i32) {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without SSE4.1.
    const ROUND: f32 = 12_582_912.0;
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
    (p, ki)
}

impl FastExp for f32 {
    /// [`exp_parts`] over the full range: inputs are clamped to [-104, 89], past
    /// which the result is 0 or +inf anyway, and `2^k` is applied as two normal
    /// powers of two, so results overflow to +inf and underflow through the
    /// subnormals to 0 as libm's do.
    #[inline(always)]
    fn fast_exp(self) -> f32 {
        let (p, ki) = exp_parts(self.clamp(-104.0, 89.0));
        // k in [-150, 129]: 2^k = 2^(k/2) · 2^(k - k/2), both factors normal.
        let k1 = ki >> 1;
        let s1 = f32::from_bits(((k1 + 127) as u32) << 23);
        let s2 = f32::from_bits(((ki - k1 + 127) as u32) << 23);
        let y = p * s1 * s2;
        if self.is_nan() {
            self
        } else {
            y
        }
    }

    /// As [`Self::fast_exp`] on `[-87, 88]` (`k` in `[-126, 127]`, so `2^k` is
    /// one normal power of two and `p · 2^k` rounds once, as `p · 2^k1 · 2^k2`
    /// does); outside, the value at the nearer end.
    #[inline(always)]
    fn fast_exp_normal(self) -> f32 {
        let (p, ki) = exp_parts(self.clamp(-87.0, 88.0));
        let y = p * f32::from_bits(((ki + 127) as u32) << 23);
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
    #[inline(always)]
    fn fast_exp_normal(self) -> f64 {
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
            #[inline(always)] fn fast_exp_normal(self) -> Self { FastExp::fast_exp_normal(self) }
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
impl_index!(i8, i16, i32, i64, u8, u16, u32);
impl IndexElem for u64 {
    /// Saturating: a value above `i64::MAX` stays out of range for every
    /// dimension (a wrapping cast would read it as a negative index).
    #[inline(always)]
    fn to_i64(self) -> i64 {
        i64::try_from(self).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_normal_is_fast_exp_where_the_result_is_normal() {
        let mut x = -87.0f32;
        while x <= 88.0 {
            assert_eq!(Float::fast_exp_normal(x).to_bits(), Float::fast_exp(x).to_bits(), "exp({x})");
            x += 0.00731;
        }
        for x in [-87.0f32, -86.99, 0.0, 1.0, 87.99, 88.0] {
            assert_eq!(Float::fast_exp_normal(x).to_bits(), Float::fast_exp(x).to_bits(), "exp({x})");
        }
        // Outside, the ends of the range; NaN stays NaN.
        assert_eq!(Float::fast_exp_normal(-1e4f32), Float::fast_exp(-87.0f32));
        assert_eq!(Float::fast_exp_normal(f32::INFINITY), Float::fast_exp(88.0f32));
        assert!(Float::fast_exp_normal(f32::NAN).is_nan());
        assert_eq!(Float::fast_exp_normal(2.5f64), 2.5f64.exp());
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
        // The ends of the range: overflow, subnormals, underflow to zero.
        assert_eq!(Float::fast_exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(Float::fast_exp(88.8f32), f32::INFINITY);
        assert_eq!(Float::fast_exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(Float::fast_exp(-104.0f32), 0.0);
        let mut x = -103.5f32;
        while x < -87.0 {
            // Subnormal results: within one subnormal step (2^-149) plus 3 ulp of the exact value.
            let (got, want) = (Float::fast_exp(x) as f64, (x as f64).exp());
            let tol = 1.5 * 2f64.powi(-149) + 3.0 * f32::EPSILON as f64 * want;
            assert!((got - want).abs() <= tol, "exp({x}) = {got}, want {want}");
            x += 0.0371;
        }
        let max = Float::fast_exp(88.72f32) as f64;
        assert!((max - f64::from(88.72f32).exp()).abs() <= 3.0 * f32::EPSILON as f64 * max, "exp(88.72) = {max}");
    }

    #[test]
    // Miri perturbs libm results on purpose: the ulp bound does not hold there.
    #[cfg_attr(miri, ignore)]
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
}

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
