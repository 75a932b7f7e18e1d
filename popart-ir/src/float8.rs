//! Graphcore's 8-bit float formats, `float8_143` and `float8_152`: decoding,
//! rounding and the power-of-two scale the pow2-scaled ops apply.
//!
//! A code is `s eeee mmm` (143) or `s eeeee mm` (152). With exponent bias `B`
//! (8 and 16), a non-zero exponent field `e` is the normal value
//! `(-1)^s · (1 + m / 2^M) · 2^(e − B)`, an exponent field of 0 the subnormal
//! `(-1)^s · m / 2^M · 2^(1 − B)`. Every exponent field is a finite value (no
//! infinities); the code that would be −0, `0x80`, is the one NaN. So `float8_143`
//! spans `2^-10 ..= 240` and `float8_152` `2^-17 ..= 57344`, as PopXL's user guide
//! lists them.
//!
//! Rounding ([`Float8Format::encode`]): the value is multiplied by `2^log2_scale`
//! (exactly, in f64), then rounded to the nearest code, ties to the even
//! mantissa, as IEEE formats round. A value whose rounding exceeds the largest
//! magnitude (it is at least half a unit in the last place above it) overflows:
//! NaN with `nan_on_overflow`, else the largest magnitude of its sign.
//! Infinities and NaN become NaN either way, and a negative value that rounds to
//! zero becomes `+0` (`-0` is NaN's code).

use crate::DataType;

/// The code of NaN in both formats (the bit pattern of −0).
pub const NAN_CODE: u8 = 0x80;

/// The scales PopXL accepts: `log2_scale` in `[-32, 32)`.
pub const LOG2_SCALE_RANGE: std::ops::Range<i32> = -32..32;

/// One of the two 8-bit float formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Float8Format {
    /// 1 sign, 4 exponent, 3 mantissa bits; bias 8.
    F143,
    /// 1 sign, 5 exponent, 2 mantissa bits; bias 16.
    F152,
}

impl Float8Format {
    /// The format of a float8 data type (`None` for every other type).
    pub fn of(dtype: DataType) -> Option<Self> {
        match dtype {
            DataType::Float8_143 => Some(Float8Format::F143),
            DataType::Float8_152 => Some(Float8Format::F152),
            _ => None,
        }
    }

    /// The data type of this format.
    pub fn dtype(self) -> DataType {
        match self {
            Float8Format::F143 => DataType::Float8_143,
            Float8Format::F152 => DataType::Float8_152,
        }
    }

    /// Mantissa bits.
    pub fn mantissa_bits(self) -> u32 {
        match self {
            Float8Format::F143 => 3,
            Float8Format::F152 => 2,
        }
    }

    /// Exponent bias.
    pub fn bias(self) -> i32 {
        match self {
            Float8Format::F143 => 8,
            Float8Format::F152 => 16,
        }
    }

    /// The largest finite value (240 and 57344).
    pub fn max_value(self) -> f64 {
        self.decode_f64(0x7f)
    }

    /// The value of a code, unscaled (NaN for [`NAN_CODE`]).
    pub fn decode_f64(self, code: u8) -> f64 {
        if code == NAN_CODE {
            return f64::NAN;
        }
        let m_bits = self.mantissa_bits();
        let mag = code & 0x7f;
        let e = i32::from(mag >> m_bits);
        let m = f64::from(mag & ((1 << m_bits) - 1));
        let frac = m / f64::from(1u32 << m_bits);
        let v = if e == 0 { frac * pow2(1 - self.bias()) } else { (1.0 + frac) * pow2(e - self.bias()) };
        if code & 0x80 != 0 {
            -v
        } else {
            v
        }
    }

    /// The 256 unscaled values, as f32 (exact: every code is an f32).
    pub fn decode_table(self) -> &'static [f32; 256] {
        static T143: std::sync::OnceLock<[f32; 256]> = std::sync::OnceLock::new();
        static T152: std::sync::OnceLock<[f32; 256]> = std::sync::OnceLock::new();
        let cell = match self {
            Float8Format::F143 => &T143,
            Float8Format::F152 => &T152,
        };
        cell.get_or_init(|| std::array::from_fn(|c| self.decode_f64(c as u8) as f32))
    }

    /// `code · 2^log2_scale` (PopXL's `pow2scale_cast_from_fp8`), exact in f64.
    pub fn decode_scaled(self, code: u8, log2_scale: i32) -> f64 {
        self.decode_f64(code) * pow2(log2_scale)
    }

    /// The code of `x · 2^log2_scale`, rounded as the module describes
    /// (PopXL's `pow2scale_cast_to_fp8`). `log2_scale` is any i32; the ops
    /// check it against [`LOG2_SCALE_RANGE`].
    #[inline]
    pub fn encode(self, x: f64, log2_scale: i32, nan_on_overflow: bool) -> u8 {
        encode_scaled(self, x, pow2(log2_scale), nan_on_overflow)
    }
}

/// `2^e` for any i32 `e` (0 or infinity beyond f64's range).
pub fn pow2(e: i32) -> f64 {
    // 2^e is exact in f64 for e in [-1074, 1023]; clamp keeps the bit tricks in range.
    if e > 1023 {
        f64::INFINITY
    } else if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else if e >= -1074 {
        f64::from_bits(1u64 << (e + 1074))
    } else {
        0.0
    }
}

/// [`Float8Format::encode`] with the scale given as the factor `2^log2_scale`
/// (a power of two, so that `x · scale` is exact), for loops that compute it once.
#[inline]
pub fn encode_scaled(fmt: Float8Format, x: f64, scale: f64, nan_on_overflow: bool) -> u8 {
    let m_bits = fmt.mantissa_bits();
    let bias = fmt.bias();
    let y = x * scale;
    let a = y.abs();
    let sign = if y.is_sign_negative() { 0x80u8 } else { 0 };
    // Below the smallest normal 2^(1-B): a multiple of the subnormal step
    // 2^(1-B-M), rounded half to even (the scaling by a power of two is exact).
    let code = if a < pow2(1 - bias) {
        // `v + 2^52 - 2^52` rounds `0 <= v < 2^52` to an integer, ties to even,
        // in the default rounding mode (no libm call).
        const MAGIC: f64 = 4503599627370496.0;
        ((a * pow2(bias - 1 + m_bits as i32) + MAGIC) - MAGIC) as u64
    } else {
        // Round f64's 52 mantissa bits to M, ties to even, by an integer add whose
        // carry moves into the exponent; then rebias the exponent from 1023 to B.
        let bits = a.to_bits();
        let shift = 52 - m_bits;
        let rounded = bits + ((bits >> shift) & 1) + ((1u64 << (shift - 1)) - 1);
        (rounded >> shift).saturating_sub(((1023 - bias) as u64) << m_bits)
    };
    if !x.is_finite() {
        NAN_CODE
    } else if code > 0x7f {
        if nan_on_overflow {
            NAN_CODE
        } else {
            sign | 0x7f
        }
    } else if code == 0 {
        0
    } else {
        sign | code as u8
    }
}

macro_rules! code_type {
    ($(#[$doc:meta])* $name:ident, $fmt:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(pub u8);

        impl $name {
            /// The format of this code type.
            pub const FORMAT: Float8Format = Float8Format::$fmt;

            /// The unscaled value (NaN for [`NAN_CODE`]).
            pub fn to_f64(self) -> f64 {
                Self::FORMAT.decode_f64(self.0)
            }

            /// The nearest code to `x` (unscaled; NaN on overflow or with `nan_on_overflow`
            /// false, the largest magnitude).
            pub fn from_f64(x: f64, nan_on_overflow: bool) -> Self {
                $name(Self::FORMAT.encode(x, 0, nan_on_overflow))
            }
        }
    };
}

code_type!(
    /// One `float8_143` code, as host arrays hold it.
    ///
    /// ```
    /// use popart_ir::float8::Float8_143;
    /// assert_eq!(Float8_143(0b0011_1100).to_f64(), 0.75);
    /// assert_eq!(Float8_143::from_f64(0.75, true), Float8_143(0b0011_1100));
    /// assert_eq!(Float8_143::from_f64(1e6, false).to_f64(), 240.0);
    /// assert!(Float8_143::from_f64(1e6, true).to_f64().is_nan());
    /// ```
    Float8_143,
    F143
);
code_type!(
    /// One `float8_152` code, as host arrays hold it.
    ///
    /// ```
    /// use popart_ir::float8::Float8_152;
    /// assert_eq!(Float8_152(0b0011_1000).to_f64(), 0.25);
    /// assert_eq!(Float8_152::from_f64(57344.0, true).0, 0x7f);
    /// ```
    Float8_152,
    F152
);
