//! Host data: [`HostArray`], an `ndarray` array of any supported element type.

use half::f16;
use ndarray::{Array, ArrayD, Dimension, IxDyn};
use popart_ir::float8::{Float8_143, Float8_152};
use popart_ir::{DataType, HostTensor, SizeError, TensorInfo};

use crate::{PopXlError, Result};

/// Host data of any element type PopXL supports, as an `ndarray` array.
///
/// Used for the initial values of variables and constants and, by the session,
/// for stream inputs, outputs and tensor data. Every `ndarray` array (any
/// dimension) and every scalar of a supported type converts into it.
///
/// ```
/// use ndarray::array;
/// use popxl::{DataType, HostArray};
/// let a = HostArray::from(array![[1.0f32, 2.0], [3.0, 4.0]]);
/// assert_eq!(a.dtype(), DataType::Float32);
/// assert_eq!(a.shape(), &[2, 2]);
/// let t = a.to_host_tensor();
/// assert_eq!(HostArray::from_host_tensor(&t).unwrap(), a);
/// assert_eq!(HostArray::from(3i32).shape(), &[] as &[usize]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum HostArray {
    /// `bool` elements.
    Bool(ArrayD<bool>),
    /// `i8` elements.
    I8(ArrayD<i8>),
    /// `i16` elements.
    I16(ArrayD<i16>),
    /// `i32` elements.
    I32(ArrayD<i32>),
    /// `i64` elements.
    I64(ArrayD<i64>),
    /// `u8` elements.
    U8(ArrayD<u8>),
    /// `u16` elements.
    U16(ArrayD<u16>),
    /// `u32` elements.
    U32(ArrayD<u32>),
    /// `u64` elements.
    U64(ArrayD<u64>),
    /// `half::f16` elements.
    F16(ArrayD<f16>),
    /// `f32` elements.
    F32(ArrayD<f32>),
    /// `f64` elements.
    F64(ArrayD<f64>),
    /// `float8_143` codes.
    F8_143(ArrayD<Float8_143>),
    /// `float8_152` codes.
    F8_152(ArrayD<Float8_152>),
}

/// Applies `$body` to the array inside any variant, binding it to `$a`.
macro_rules! for_each_variant {
    ($self:expr, $a:ident => $body:expr) => {
        match $self {
            HostArray::Bool($a) => $body,
            HostArray::I8($a) => $body,
            HostArray::I16($a) => $body,
            HostArray::I32($a) => $body,
            HostArray::I64($a) => $body,
            HostArray::U8($a) => $body,
            HostArray::U16($a) => $body,
            HostArray::U32($a) => $body,
            HostArray::U64($a) => $body,
            HostArray::F16($a) => $body,
            HostArray::F32($a) => $body,
            HostArray::F64($a) => $body,
            HostArray::F8_143($a) => $body,
            HostArray::F8_152($a) => $body,
        }
    };
}

/// An element type that [`HostArray`] can hold (sealed: the twelve types of
/// [`DataType`]).
///
/// ```
/// use popxl::{DataType, HostElement};
/// assert_eq!(<f32 as HostElement>::DTYPE, DataType::Float32);
/// assert_eq!(<half::f16 as HostElement>::DTYPE, DataType::Float16);
/// ```
pub trait HostElement: sealed::Element {
    /// The matching IR data type.
    const DTYPE: DataType;
}

mod sealed {
    use super::*;

    /// Conversions between elements, arrays and little-endian bytes.
    pub trait Element: Copy + 'static {
        /// Wrap an array of this element type.
        fn wrap(a: ArrayD<Self>) -> HostArray;
        /// The array inside `h` if it holds this element type.
        fn unwrap_ref(h: &HostArray) -> Option<&ArrayD<Self>>;
        /// Append the little-endian bytes of `self`.
        fn push_le(self, out: &mut Vec<u8>);
        /// Write the little-endian bytes of `self` to `out`, exactly its size.
        fn write_le(self, out: &mut [u8]);
        /// [`Element::read_le`] of bytes of a validated host tensor (exactly
        /// the element's size; a bool's byte 0 or 1): any value for others.
        fn read_valid_le(b: &[u8]) -> Self;
        /// Read one element from exactly its size in little-endian bytes
        /// (`None` if `b` has another length).
        fn read_le(b: &[u8]) -> Option<Self>;
        /// The value, widened without loss.
        fn widen(self) -> Wide;
        /// `w` as this type, or `None` when it is not representable: out of
        /// range, NaN or infinite to an integer, finite to an infinite float.
        /// Fractional parts are truncated toward zero, as numpy's `astype`.
        fn narrow(w: Wide) -> Option<Self>;
        /// `w` as this type with Rust's `as` semantics (saturating, NaN to 0).
        fn lossy(w: Wide) -> Self;
    }
}
use sealed::Element;

/// One element widened without loss: integers and bools exactly, floats as `f64`.
#[derive(Clone, Copy, Debug)]
#[doc(hidden)]
pub enum Wide {
    /// An integer (bools as 0 and 1).
    Int(i128),
    /// A floating point value.
    Float(f64),
}

impl Wide {
    fn to_f64(self) -> f64 {
        match self {
            // i128 to f64 rounds to nearest; every element type fits f64's range.
            Wide::Int(i) => i as f64,
            Wide::Float(f) => f,
        }
    }

    /// The integer `self` truncates to, if finite (saturating at the i128 range,
    /// which is outside every element type's).
    fn to_int(self) -> Option<i128> {
        match self {
            Wide::Int(i) => Some(i),
            Wide::Float(f) if f.is_finite() => Some(f.trunc() as i128),
            Wide::Float(_) => None,
        }
    }
}

impl std::fmt::Display for Wide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wide::Int(i) => write!(f, "{i}"),
            // `Debug` prints large and small floats in exponent form (`1e300`).
            Wide::Float(x) => write!(f, "{x:?}"),
        }
    }
}

macro_rules! int_element {
    ($t:ty) => {
        fn widen(self) -> Wide {
            Wide::Int(i128::from(self))
        }
        fn narrow(w: Wide) -> Option<Self> {
            w.to_int().and_then(|i| <$t>::try_from(i).ok())
        }
        fn lossy(w: Wide) -> Self {
            match w {
                Wide::Int(i) => <$t>::try_from(i).unwrap_or(if i < 0 { <$t>::MIN } else { <$t>::MAX }),
                Wide::Float(f) => f as $t,
            }
        }
    };
}

macro_rules! float_element {
    ($t:ty, $from_f64:expr, $to_f64:expr) => {
        fn widen(self) -> Wide {
            Wide::Float($to_f64(self))
        }
        fn narrow(w: Wide) -> Option<Self> {
            let x = w.to_f64();
            let y: $t = $from_f64(x);
            // Overflow to infinity is an error; NaN and infinities carry over.
            (!x.is_finite() || $to_f64(y).is_finite()).then_some(y)
        }
        fn lossy(w: Wide) -> Self {
            $from_f64(w.to_f64())
        }
    };
}

macro_rules! host_element {
    ($($t:ty => $variant:ident, $dtype:ident, $as_ref:ident, $kind:ident $(($($k:tt)*))?);* $(;)?) => {$(
        impl HostElement for $t {
            const DTYPE: DataType = DataType::$dtype;
        }

        impl Element for $t {
            fn wrap(a: ArrayD<Self>) -> HostArray {
                HostArray::$variant(a)
            }
            fn unwrap_ref(h: &HostArray) -> Option<&ArrayD<Self>> {
                match h {
                    HostArray::$variant(a) => Some(a),
                    _ => None,
                }
            }
            fn push_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn write_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn read_valid_le(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().unwrap_or_default())
            }
            fn read_le(b: &[u8]) -> Option<Self> {
                b.try_into().ok().map(<$t>::from_le_bytes)
            }
            $kind!($t $(, $($k)*)?);
        }

        impl<D: Dimension> From<Array<$t, D>> for HostArray {
            fn from(a: Array<$t, D>) -> Self {
                HostArray::$variant(a.into_dyn())
            }
        }

        impl From<$t> for HostArray {
            /// A 0-dimensional (scalar) array.
            fn from(v: $t) -> Self {
                HostArray::$variant(ArrayD::from_elem(IxDyn(&[]), v))
            }
        }

        impl From<Vec<$t>> for HostArray {
            /// A 1-dimensional array.
            fn from(v: Vec<$t>) -> Self {
                HostArray::$variant(ndarray::Array1::from_vec(v).into_dyn())
            }
        }

        impl From<&[$t]> for HostArray {
            /// A 1-dimensional array.
            fn from(v: &[$t]) -> Self {
                HostArray::from(v.to_vec())
            }
        }

        impl HostArray {
            #[doc = concat!("The `", stringify!($t), "` array, if this holds `", stringify!($t), "` elements.")]
            pub fn $as_ref(&self) -> Option<&ArrayD<$t>> {
                <$t as Element>::unwrap_ref(self)
            }
        }
    )*};
}

host_element! {
    i8 => I8, Int8, as_i8, int_element;
    i16 => I16, Int16, as_i16, int_element;
    i32 => I32, Int32, as_i32, int_element;
    i64 => I64, Int64, as_i64, int_element;
    u8 => U8, Uint8, as_u8, int_element;
    u16 => U16, Uint16, as_u16, int_element;
    u32 => U32, Uint32, as_u32, int_element;
    u64 => U64, Uint64, as_u64, int_element;
    f16 => F16, Float16, as_f16, float_element(f16::from_f64, f16::to_f64);
    f32 => F32, Float32, as_f32, float_element(|x: f64| x as f32, f64::from);
    f64 => F64, Float64, as_f64, float_element(|x: f64| x, |x: f64| x);
}

macro_rules! float8_element {
    ($($t:ident => $variant:ident, $dtype:ident, $as_ref:ident;)*) => {$(
        impl HostElement for $t {
            const DTYPE: DataType = DataType::$dtype;
        }

        impl Element for $t {
            fn wrap(a: ArrayD<Self>) -> HostArray {
                HostArray::$variant(a)
            }
            fn unwrap_ref(h: &HostArray) -> Option<&ArrayD<Self>> {
                match h {
                    HostArray::$variant(a) => Some(a),
                    _ => None,
                }
            }
            fn push_le(self, out: &mut Vec<u8>) {
                out.push(self.0);
            }
            fn write_le(self, out: &mut [u8]) {
                out.fill(self.0);
            }
            fn read_valid_le(b: &[u8]) -> Self {
                $t(b.first().copied().unwrap_or_default())
            }
            fn read_le(b: &[u8]) -> Option<Self> {
                match b {
                    [c] => Some($t(*c)),
                    _ => None,
                }
            }
            fn widen(self) -> Wide {
                Wide::Float(self.to_f64())
            }
            /// Rounded to nearest even; out of range is NaN (PopXL's default
            /// `nan_on_overflow`), which the format represents.
            fn narrow(w: Wide) -> Option<Self> {
                Some($t::from_f64(w.to_f64(), true))
            }
            /// Rounded to nearest even; out of range saturates.
            fn lossy(w: Wide) -> Self {
                $t::from_f64(w.to_f64(), false)
            }
        }

        impl<D: Dimension> From<Array<$t, D>> for HostArray {
            fn from(a: Array<$t, D>) -> Self {
                HostArray::$variant(a.into_dyn())
            }
        }

        impl From<Vec<$t>> for HostArray {
            /// A 1-dimensional array.
            fn from(v: Vec<$t>) -> Self {
                HostArray::$variant(ndarray::Array1::from_vec(v).into_dyn())
            }
        }

        impl HostArray {
            #[doc = concat!("The `", stringify!($t), "` codes, if this holds `", stringify!($dtype), "` elements.")]
            pub fn $as_ref(&self) -> Option<&ArrayD<$t>> {
                <$t as Element>::unwrap_ref(self)
            }
        }
    )*};
}

float8_element! {
    Float8_143 => F8_143, Float8_143, as_float8_143;
    Float8_152 => F8_152, Float8_152, as_float8_152;
}

impl HostElement for bool {
    const DTYPE: DataType = DataType::Bool;
}

impl Element for bool {
    fn wrap(a: ArrayD<Self>) -> HostArray {
        HostArray::Bool(a)
    }
    fn unwrap_ref(h: &HostArray) -> Option<&ArrayD<Self>> {
        match h {
            HostArray::Bool(a) => Some(a),
            _ => None,
        }
    }
    fn push_le(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
    fn write_le(self, out: &mut [u8]) {
        out.fill(u8::from(self));
    }
    fn read_valid_le(b: &[u8]) -> Self {
        b.first().is_some_and(|&c| c != 0)
    }
    fn read_le(b: &[u8]) -> Option<Self> {
        // Bytes other than 0 and 1 are rejected by `HostTensor::validate` first.
        match b {
            [0] => Some(false),
            [1] => Some(true),
            _ => None,
        }
    }
    fn widen(self) -> Wide {
        Wide::Int(i128::from(self))
    }
    fn narrow(w: Wide) -> Option<Self> {
        // numpy: anything non-zero (NaN included) is `true`.
        Some(Self::lossy(w))
    }
    fn lossy(w: Wide) -> Self {
        match w {
            Wide::Int(i) => i != 0,
            Wide::Float(f) => f != 0.0,
        }
    }
}

impl<D: Dimension> From<Array<bool, D>> for HostArray {
    fn from(a: Array<bool, D>) -> Self {
        HostArray::Bool(a.into_dyn())
    }
}

impl From<bool> for HostArray {
    /// A 0-dimensional (scalar) array.
    fn from(v: bool) -> Self {
        HostArray::Bool(ArrayD::from_elem(IxDyn(&[]), v))
    }
}

impl From<Vec<bool>> for HostArray {
    /// A 1-dimensional array.
    fn from(v: Vec<bool>) -> Self {
        HostArray::Bool(ndarray::Array1::from_vec(v).into_dyn())
    }
}

impl From<&HostArray> for HostArray {
    fn from(a: &HostArray) -> Self {
        a.clone()
    }
}

/// Runs `$body` with `$T` bound to the element type of `$dtype`.
macro_rules! with_element_type {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            DataType::Bool => {
                type $T = bool;
                $body
            }
            DataType::Int8 => {
                type $T = i8;
                $body
            }
            DataType::Int16 => {
                type $T = i16;
                $body
            }
            DataType::Int32 => {
                type $T = i32;
                $body
            }
            DataType::Int64 => {
                type $T = i64;
                $body
            }
            DataType::Uint8 => {
                type $T = u8;
                $body
            }
            DataType::Uint16 => {
                type $T = u16;
                $body
            }
            DataType::Uint32 => {
                type $T = u32;
                $body
            }
            DataType::Uint64 => {
                type $T = u64;
                $body
            }
            DataType::Float16 => {
                type $T = f16;
                $body
            }
            DataType::Float32 => {
                type $T = f32;
                $body
            }
            DataType::Float64 => {
                type $T = f64;
                $body
            }
            DataType::Float8_143 => {
                type $T = Float8_143;
                $body
            }
            DataType::Float8_152 => {
                type $T = Float8_152;
                $body
            }
        }
    };
}

/// An empty vector with room for `n` elements, or [`SizeError::OutOfMemory`]
/// (never an abort) when the allocator refuses.
fn try_vec<T>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| SizeError::OutOfMemory {
        requested: n.saturating_mul(std::mem::size_of::<T>()),
        what: what.to_string(),
    })?;
    Ok(v)
}

/// An array of `shape` from row-major `v` (`v.len()` is the shape's size by construction).
fn shaped<T>(shape: &[usize], v: Vec<T>, what: &str) -> Result<ArrayD<T>> {
    ArrayD::from_shape_vec(IxDyn(shape), v)
        .map_err(|e| PopXlError::Size(SizeError::Overflow { what: format!("{what} of shape {shape:?} ({e})") }))
}

/// Convert every element of `a` to `T`, checked (see [`Element::narrow`]) or lossy.
fn convert<S: Element, T: Element + HostElement>(a: &ArrayD<S>, what: &str, checked: bool) -> Result<ArrayD<T>> {
    let mut v = try_vec::<T>(a.len(), what)?;
    // `iter` walks in logical row-major order whatever the memory layout.
    for (index, &x) in a.iter().enumerate() {
        let w = x.widen();
        let y = if checked {
            T::narrow(w).ok_or_else(|| PopXlError::HostCast {
                what: what.to_string(),
                index,
                value: w.to_string(),
                dtype: T::DTYPE,
            })?
        } else {
            T::lossy(w)
        };
        v.push(y);
    }
    shaped(a.shape(), v, what)
}

impl HostArray {
    /// The `bool` array, if this holds `bool` elements.
    ///
    /// ```
    /// let a = popxl::HostArray::from(vec![true, false]);
    /// assert_eq!(a.as_bool().unwrap()[[1]], false);
    /// ```
    pub fn as_bool(&self) -> Option<&ArrayD<bool>> {
        bool::unwrap_ref(self)
    }

    /// The element data type.
    ///
    /// ```
    /// assert_eq!(popxl::HostArray::from(1u8).dtype(), popxl::DataType::Uint8);
    /// ```
    pub fn dtype(&self) -> DataType {
        match self {
            HostArray::Bool(_) => DataType::Bool,
            HostArray::I8(_) => DataType::Int8,
            HostArray::I16(_) => DataType::Int16,
            HostArray::I32(_) => DataType::Int32,
            HostArray::I64(_) => DataType::Int64,
            HostArray::U8(_) => DataType::Uint8,
            HostArray::U16(_) => DataType::Uint16,
            HostArray::U32(_) => DataType::Uint32,
            HostArray::U64(_) => DataType::Uint64,
            HostArray::F16(_) => DataType::Float16,
            HostArray::F32(_) => DataType::Float32,
            HostArray::F64(_) => DataType::Float64,
            HostArray::F8_143(_) => DataType::Float8_143,
            HostArray::F8_152(_) => DataType::Float8_152,
        }
    }

    /// The shape, outermost dimension first (empty for a scalar).
    ///
    /// ```
    /// assert_eq!(popxl::HostArray::from(vec![1.0f32, 2.0]).shape(), &[2]);
    /// ```
    pub fn shape(&self) -> &[usize] {
        for_each_variant!(self, a => a.shape())
    }

    /// Number of elements.
    ///
    /// ```
    /// assert_eq!(popxl::HostArray::from(ndarray::Array2::<f32>::zeros((2, 3))).nelms(), 6);
    /// ```
    pub fn nelms(&self) -> usize {
        for_each_variant!(self, a => a.len())
    }

    /// Type and shape as an IR [`TensorInfo`].
    ///
    /// ```
    /// let info = popxl::HostArray::from(vec![1i32, 2]).info();
    /// assert_eq!(info.to_string(), "int32[2]");
    /// ```
    pub fn info(&self) -> TensorInfo {
        TensorInfo::new(self.dtype(), self.shape())
    }

    /// The data as an IR [`HostTensor`] (row-major, little-endian bytes).
    ///
    /// # Panics
    ///
    /// If the byte buffer cannot be allocated; [`HostArray::try_to_host_tensor`]
    /// returns that as an error.
    ///
    /// ```
    /// let t = popxl::HostArray::from(vec![1.0f32, 2.0]).to_host_tensor();
    /// assert_eq!(t.to_f64_vec(), vec![1.0, 2.0]);
    /// ```
    pub fn to_host_tensor(&self) -> HostTensor {
        self.try_to_host_tensor().unwrap_or_else(|e| panic!("HostArray::to_host_tensor: {e}"))
    }

    /// The data as an IR [`HostTensor`], or [`PopXlError::Size`] when the
    /// buffer cannot be allocated (never an abort).
    ///
    /// ```
    /// let t = popxl::HostArray::from(vec![true, false]).try_to_host_tensor().unwrap();
    /// assert_eq!(t.bytes, vec![1, 0]);
    /// ```
    pub fn try_to_host_tensor(&self) -> Result<HostTensor> {
        self.host_tensor_for("host data")
    }

    /// [`HostArray::try_to_host_tensor`], naming `what` in errors.
    pub(crate) fn host_tensor_for(&self, what: &str) -> Result<HostTensor> {
        let info = self.info();
        let n = info.check_size(what)?;
        let mut out = try_vec::<u8>(n, what)?;
        // A standard layout as one slice: ndarray's iterator over dynamic
        // dimensions costs several times the copy per element.
        for_each_variant!(self, a => match a.as_slice() {
            Some(s) => extend_le(s, &mut out),
            None => a.iter().for_each(|&v| v.push_le(&mut out)),
        });
        HostTensor::from_bytes(info, out).map_err(|source| PopXlError::HostData { what: what.to_string(), source })
    }

    /// Convert IR host data back into an array of the matching element type.
    /// The data is validated first ([`HostTensor::validate`]: byte length, bool
    /// bytes 0 or 1); the array is allocated fallibly.
    ///
    /// ```
    /// use popart_ir::{DataType, HostDataError, HostTensor, SizeError, TensorInfo};
    /// let a = popxl::HostArray::from_host_tensor(&HostTensor::from_f32(&[2], &[1.0, 2.0])).unwrap();
    /// assert_eq!(a.as_f32().unwrap().as_slice().unwrap(), &[1.0, 2.0]);
    /// let bad = HostTensor { info: TensorInfo::new(DataType::Bool, [1]), bytes: vec![2] };
    /// assert!(matches!(popxl::HostArray::from_host_tensor(&bad), Err(popxl::PopXlError::HostData { .. })));
    /// ```
    pub fn from_host_tensor(t: &HostTensor) -> Result<HostArray> {
        const WHAT: &str = "host tensor";
        fn read<T: HostElement>(t: &HostTensor) -> Result<HostArray> {
            // Validated first: the length is whole elements, bools are 0 or 1.
            let size = std::mem::size_of::<T>();
            let mut v = try_vec::<T>(t.bytes.len() / size, WHAT)?;
            v.extend(t.bytes.chunks_exact(size).map(T::read_valid_le));
            Ok(T::wrap(shaped(&t.info.shape, v, WHAT)?))
        }
        t.validate().map_err(|source| PopXlError::HostData { what: WHAT.to_string(), source })?;
        with_element_type!(t.info.dtype, T => read::<T>(t))
    }

    /// Every element converted to `f64` (bools as 0 and 1), in row-major order.
    ///
    /// ```
    /// assert_eq!(popxl::HostArray::from(vec![true, false]).to_f64_vec(), vec![1.0, 0.0]);
    /// ```
    pub fn to_f64_vec(&self) -> Vec<f64> {
        for_each_variant!(self, a => a.iter().map(|&x| x.widen().to_f64()).collect())
    }

    /// The data converted to `dtype` with Rust's `as` semantics: integers
    /// saturate, floats to integers truncate toward zero (NaN becomes 0), bools
    /// become 0/1 and anything non-zero becomes `true`. Lossy by design; see
    /// [`HostArray::try_cast`] for the checked conversion.
    ///
    /// # Panics
    ///
    /// If the new array cannot be allocated.
    ///
    /// ```
    /// use popxl::{DataType, HostArray};
    /// let a = HostArray::from(vec![1.5f64, -2.5]).cast(DataType::Int32);
    /// assert_eq!(a, HostArray::from(vec![1i32, -2]));
    /// assert_eq!(HostArray::from(vec![300i32]).cast(DataType::Uint8), HostArray::from(vec![255u8]));
    /// ```
    pub fn cast(&self, dtype: DataType) -> HostArray {
        self.cast_as(dtype, "host data", false).unwrap_or_else(|e| panic!("HostArray::cast: {e}"))
    }

    /// The data converted to `dtype`, or [`PopXlError::HostCast`] naming the
    /// first element that `dtype` cannot represent: an integer out of range, a
    /// NaN or infinity to an integer type, a finite float that would become
    /// infinite. Fractional parts are truncated toward zero (numpy's `astype`);
    /// integers convert exactly (not through `f64`).
    ///
    /// ```
    /// use popxl::{DataType, HostArray, PopXlError};
    /// assert_eq!(HostArray::from(vec![1.5f64]).try_cast(DataType::Int32).unwrap(), HostArray::from(vec![1i32]));
    /// let err = HostArray::from(vec![1i64, 1 << 40]).try_cast(DataType::Int32).unwrap_err();
    /// assert!(matches!(err, PopXlError::HostCast { index: 1, .. }));
    /// assert!(HostArray::from(vec![1e300f64]).try_cast(DataType::Float32).is_err());
    /// ```
    pub fn try_cast(&self, dtype: DataType) -> Result<HostArray> {
        self.cast_as(dtype, "host data", true)
    }

    /// [`HostArray::try_cast`] (checked) or [`HostArray::cast`], naming `what` in errors.
    pub(crate) fn cast_as(&self, dtype: DataType, what: &str, checked: bool) -> Result<HostArray> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        for_each_variant!(self, a => with_element_type!(dtype, T => Ok(T::wrap(convert::<_, T>(a, what, checked)?))))
    }

    /// PopXL's default `downcast`: 64-bit types become their 32-bit counterparts
    /// (`i64` to `i32`, `u64` to `u32`, `f64` to `f32`); others are unchanged.
    /// Lossy like numpy's `astype` (integers wrap, large floats become
    /// infinite); see [`HostArray::try_downcast_64bit`].
    ///
    /// ```
    /// use popxl::{DataType, HostArray};
    /// assert_eq!(HostArray::from(vec![1.0f64]).downcast_64bit().dtype(), DataType::Float32);
    /// assert_eq!(HostArray::from(vec![1u8]).downcast_64bit().dtype(), DataType::Uint8);
    /// ```
    pub fn downcast_64bit(self) -> HostArray {
        match self {
            // Wrapping, as numpy's `astype` (PopXL's downcast) does.
            HostArray::I64(a) => HostArray::I32(a.mapv(|v| v as i32)),
            HostArray::U64(a) => HostArray::U32(a.mapv(|v| v as u32)),
            HostArray::F64(a) => HostArray::F32(a.mapv(|v| v as f32)),
            other => other,
        }
    }

    /// [`HostArray::downcast_64bit`], checked: a value the 32-bit type cannot
    /// represent is a [`PopXlError::HostCast`] naming it (never a silently
    /// wrapped integer or an infinity from a finite value).
    ///
    /// ```
    /// use popxl::{DataType, HostArray};
    /// assert_eq!(HostArray::from(vec![7i64]).try_downcast_64bit().unwrap(), HostArray::from(vec![7i32]));
    /// assert!(HostArray::from(vec![u64::MAX]).try_downcast_64bit().is_err());
    /// ```
    pub fn try_downcast_64bit(self) -> Result<HostArray> {
        self.downcast_for("host data")
    }

    /// [`HostArray::try_downcast_64bit`], naming `what` in errors.
    pub(crate) fn downcast_for(self, what: &str) -> Result<HostArray> {
        let to = match self.dtype() {
            DataType::Int64 => DataType::Int32,
            DataType::Uint64 => DataType::Uint32,
            DataType::Float64 => DataType::Float32,
            _ => return Ok(self),
        };
        self.cast_as(to, what, true)
    }

    /// An array of `info`'s type and shape filled with `value` (converted as by [`HostArray::cast`]).
    ///
    /// # Panics
    ///
    /// If `info`'s size overflows or the array cannot be allocated;
    /// [`HostArray::try_full`] returns those as errors.
    ///
    /// ```
    /// use popxl::{DataType, HostArray};
    /// use popart_ir::TensorInfo;
    /// let a = HostArray::full(&TensorInfo::new(DataType::Int32, [2]), 7.0);
    /// assert_eq!(a, HostArray::from(vec![7i32, 7]));
    /// ```
    pub fn full(info: &TensorInfo, value: f64) -> HostArray {
        Self::fill(info, Wide::Float(value), false).unwrap_or_else(|e| panic!("HostArray::full: {e}"))
    }

    /// An array of `info`'s type and shape filled with `value`, or a typed error:
    /// [`PopXlError::Size`] when the size overflows or the allocation fails,
    /// [`PopXlError::HostCast`] when `value` does not fit the type.
    ///
    /// ```
    /// use popxl::{DataType, HostArray, PopXlError};
    /// use popart_ir::TensorInfo;
    /// let a = HostArray::try_full(&TensorInfo::new(DataType::Int32, [2]), 7.0).unwrap();
    /// assert_eq!(a, HostArray::from(vec![7i32, 7]));
    /// let huge = TensorInfo::new(DataType::Float32, [1 << 40, 1 << 40]);
    /// assert!(matches!(HostArray::try_full(&huge, 0.0), Err(PopXlError::Size(_))));
    /// assert!(matches!(HostArray::try_full(&TensorInfo::new(DataType::Uint8, [1]), -1.0), Err(PopXlError::HostCast { .. })));
    /// ```
    pub fn try_full(info: &TensorInfo, value: f64) -> Result<HostArray> {
        Self::fill(info, Wide::Float(value), true)
    }

    fn fill(info: &TensorInfo, value: Wide, checked: bool) -> Result<HostArray> {
        fn fill_as<T: HostElement>(info: &TensorInfo, value: Wide, checked: bool) -> Result<HostArray> {
            let what = format!("host array {info}");
            info.check_size(&what)?;
            let x = if checked {
                T::narrow(value).ok_or_else(|| PopXlError::HostCast {
                    what: format!("fill value for {info}"),
                    index: 0,
                    value: value.to_string(),
                    dtype: T::DTYPE,
                })?
            } else {
                T::lossy(value)
            };
            let n = info.nelms();
            let mut v = try_vec::<T>(n, &what)?;
            v.resize(n, x);
            Ok(T::wrap(shaped(&info.shape, v, &what)?))
        }
        with_element_type!(info.dtype, T => fill_as::<T>(info, value, checked))
    }

    /// A scalar of `dtype` holding `value` exactly converted (checked as
    /// [`HostArray::try_cast`]); `what` names the value in errors.
    pub(crate) fn scalar_of(dtype: DataType, value: Wide, what: &str) -> Result<HostArray> {
        Self::fill(&TensorInfo::new(dtype, Vec::<usize>::new()), value, true).map_err(|e| match e {
            PopXlError::HostCast { index, value, dtype, .. } => {
                PopXlError::HostCast { what: what.to_string(), index, value, dtype }
            }
            e => e,
        })
    }
}

impl From<HostArray> for HostTensor {
    fn from(a: HostArray) -> Self {
        a.to_host_tensor()
    }
}

impl TryFrom<&HostTensor> for HostArray {
    type Error = PopXlError;
    fn try_from(t: &HostTensor) -> Result<Self> {
        HostArray::from_host_tensor(t)
    }
}

/// Appends the little-endian bytes of `s`'s elements to `out`: one resize, then
/// fixed-size writes (on a little-endian host, a copy).
fn extend_le<T: Element>(s: &[T], out: &mut Vec<u8>) {
    let size = std::mem::size_of::<T>();
    let start = out.len();
    out.resize(start + std::mem::size_of_val(s), 0);
    for (bytes, &v) in out[start..].chunks_exact_mut(size).zip(s) {
        v.write_le(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;
    use popart_ir::HostDataError;

    #[test]
    fn round_trip_every_dtype() {
        let arrays = vec![
            HostArray::from(array![true, false, true]),
            HostArray::from(array![-1i8, 2, -3]),
            HostArray::from(array![-300i16, 2, 3]),
            HostArray::from(array![-70000i32, 2, 3]),
            HostArray::from(array![-(1i64 << 40), 2, 3]),
            HostArray::from(array![255u8, 2, 3]),
            HostArray::from(array![65535u16, 2, 3]),
            HostArray::from(array![u32::MAX, 2, 3]),
            HostArray::from(array![u64::MAX, 2, 3]),
            HostArray::from(array![f16::from_f32(0.5), f16::from_f32(-2.0), f16::from_f32(3.25)]),
            HostArray::from(array![0.5f32, -2.0, 3.25]),
            HostArray::from(array![0.1f64, -2.0, 1e300]),
            HostArray::F8_143(array![Float8_143(1), Float8_143(200), Float8_143(0)].into_dyn()),
            HostArray::F8_152(array![Float8_152(7), Float8_152(128), Float8_152(255)].into_dyn()),
        ];
        for a in arrays {
            let t = a.to_host_tensor();
            assert_eq!(t.info.shape, vec![3]);
            assert_eq!(t.bytes.len(), 3 * a.dtype().size_bytes());
            assert_eq!(HostArray::from_host_tensor(&t).unwrap(), a);
        }
    }

    #[test]
    fn bytes_are_little_endian_row_major_even_for_transposed_views() {
        let a = array![[1i32, 2], [3, 4]];
        let t = HostArray::from(a.t().to_owned()).to_host_tensor();
        let expected: Vec<u8> = [1i32, 3, 2, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(t.bytes, expected);
    }

    #[test]
    fn wrong_byte_count_is_an_error() {
        let t = HostTensor { info: TensorInfo::new(DataType::Float32, [2]), bytes: vec![0; 3] };
        assert!(matches!(HostArray::from_host_tensor(&t), Err(PopXlError::HostData { .. })));
    }

    #[test]
    fn downcast_keeps_values() {
        let a = HostArray::from(array![1i64, -5]).downcast_64bit();
        assert_eq!(a, HostArray::from(array![1i32, -5]));
    }

    #[test]
    fn checked_cast_is_exact_for_integers_and_names_the_first_bad_element() {
        let big = (1i64 << 60) + 1;
        assert_eq!(HostArray::from(vec![big]).try_cast(DataType::Uint64).unwrap(), HostArray::from(vec![big as u64]));
        let err = HostArray::from(vec![0i64, -1]).try_cast(DataType::Uint64).unwrap_err();
        assert!(matches!(&err, PopXlError::HostCast { index: 1, dtype: DataType::Uint64, .. }), "{err}");
        assert!(err.to_string().contains("(-1)"), "{err}");
        assert!(HostArray::from(vec![f64::NAN]).try_cast(DataType::Int32).is_err());
        assert!(HostArray::from(vec![f64::NAN]).try_cast(DataType::Float32).is_ok());
        assert!(HostArray::from(vec![70000.0f32]).try_cast(DataType::Float16).is_err());
        assert_eq!(HostArray::from(vec![2.0f32]).try_cast(DataType::Bool).unwrap(), HostArray::from(vec![true]));
    }

    #[test]
    fn invalid_bool_bytes_are_rejected() {
        let t = HostTensor { info: TensorInfo::new(DataType::Bool, [2]), bytes: vec![1, 7] };
        let err = HostArray::from_host_tensor(&t).unwrap_err();
        assert!(matches!(err, PopXlError::HostData { source: HostDataError::InvalidBool { index: 1, byte: 7 }, .. }));
    }

    #[test]
    fn full_of_an_overflowing_shape_is_a_size_error() {
        let info = TensorInfo::new(DataType::Float32, [usize::MAX, 2]);
        assert!(matches!(HostArray::try_full(&info, 0.0), Err(PopXlError::Size(_))));
        let empty = TensorInfo::new(DataType::Float32, [0, usize::MAX]);
        assert!(HostArray::try_full(&empty, 0.0).is_err());
    }
}
