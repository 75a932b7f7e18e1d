//! Host data: [`HostArray`], an `ndarray` array of any supported element type.

use half::f16;
use ndarray::{Array, ArrayD, Dimension, IxDyn};
use popart_ir::{DataType, HostTensor, TensorInfo};

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
        /// Read one element from exactly its size in little-endian bytes.
        fn read_le(b: &[u8]) -> Self;
    }
}
use sealed::Element;

macro_rules! host_element {
    ($($t:ty => $variant:ident, $dtype:ident, $as_ref:ident);* $(;)?) => {$(
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
            fn read_le(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().expect("element byte width"))
            }
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
                HostArray::$variant(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v).expect("1-D shape"))
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
    i8 => I8, Int8, as_i8;
    i16 => I16, Int16, as_i16;
    i32 => I32, Int32, as_i32;
    i64 => I64, Int64, as_i64;
    u8 => U8, Uint8, as_u8;
    u16 => U16, Uint16, as_u16;
    u32 => U32, Uint32, as_u32;
    u64 => U64, Uint64, as_u64;
    f16 => F16, Float16, as_f16;
    f32 => F32, Float32, as_f32;
    f64 => F64, Float64, as_f64;
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
        out.push(self as u8);
    }
    fn read_le(b: &[u8]) -> Self {
        b[0] != 0
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
        HostArray::Bool(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v).expect("1-D shape"))
    }
}

impl From<&HostArray> for HostArray {
    fn from(a: &HostArray) -> Self {
        a.clone()
    }
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
    /// ```
    /// let t = popxl::HostArray::from(vec![1.0f32, 2.0]).to_host_tensor();
    /// assert_eq!(t.to_f64_vec(), vec![1.0, 2.0]);
    /// ```
    pub fn to_host_tensor(&self) -> HostTensor {
        fn bytes<T: HostElement>(a: &ArrayD<T>) -> Vec<u8> {
            let mut out = Vec::with_capacity(a.len() * T::DTYPE.size_bytes());
            // `iter` walks in logical row-major order whatever the memory layout.
            for &v in a.iter() {
                v.push_le(&mut out);
            }
            out
        }
        let bytes = for_each_variant!(self, a => bytes(a));
        HostTensor::from_bytes(self.info(), bytes).expect("byte length matches the info and bools are 0 or 1")
    }

    /// Convert IR host data back into an array of the matching element type.
    ///
    /// ```
    /// use popart_ir::HostTensor;
    /// let a = popxl::HostArray::from_host_tensor(&HostTensor::from_f32(&[2], &[1.0, 2.0])).unwrap();
    /// assert_eq!(a.as_f32().unwrap().as_slice().unwrap(), &[1.0, 2.0]);
    /// ```
    pub fn from_host_tensor(t: &HostTensor) -> Result<HostArray> {
        fn read<T: HostElement>(t: &HostTensor) -> Result<HostArray> {
            let sz = T::DTYPE.size_bytes();
            if t.bytes.len() != t.info.nbytes() {
                return Err(PopXlError::InvalidArgument(format!(
                    "host tensor data has {} bytes but {} needs {}",
                    t.bytes.len(),
                    t.info,
                    t.info.nbytes()
                )));
            }
            let v: Vec<T> = t.bytes.chunks_exact(sz).map(T::read_le).collect();
            let a = ArrayD::from_shape_vec(IxDyn(&t.info.shape), v).expect("element count matches the shape");
            Ok(T::wrap(a))
        }
        match t.info.dtype {
            DataType::Bool => read::<bool>(t),
            DataType::Int8 => read::<i8>(t),
            DataType::Int16 => read::<i16>(t),
            DataType::Int32 => read::<i32>(t),
            DataType::Int64 => read::<i64>(t),
            DataType::Uint8 => read::<u8>(t),
            DataType::Uint16 => read::<u16>(t),
            DataType::Uint32 => read::<u32>(t),
            DataType::Uint64 => read::<u64>(t),
            DataType::Float16 => read::<f16>(t),
            DataType::Float32 => read::<f32>(t),
            DataType::Float64 => read::<f64>(t),
        }
    }

    /// Every element converted to `f64` (bools as 0 and 1), in row-major order.
    ///
    /// ```
    /// assert_eq!(popxl::HostArray::from(vec![true, false]).to_f64_vec(), vec![1.0, 0.0]);
    /// ```
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.to_host_tensor().to_f64_vec()
    }

    /// The data converted to `dtype` (through `f64`: integers are truncated toward
    /// zero, bools become 0/1 and anything non-zero becomes `true`).
    ///
    /// ```
    /// use popxl::{DataType, HostArray};
    /// let a = HostArray::from(vec![1.5f64, -2.5]).cast(DataType::Int32);
    /// assert_eq!(a, HostArray::from(vec![1i32, -2]));
    /// ```
    pub fn cast(&self, dtype: DataType) -> HostArray {
        if dtype == self.dtype() {
            return self.clone();
        }
        let t = HostTensor::from_f64_values(dtype, self.shape(), &self.to_f64_vec());
        HostArray::from_host_tensor(&t).expect("well-formed host tensor")
    }

    /// PopXL's default `downcast`: 64-bit types become their 32-bit counterparts
    /// (`i64` to `i32`, `u64` to `u32`, `f64` to `f32`); others are unchanged.
    ///
    /// ```
    /// use popxl::{DataType, HostArray};
    /// assert_eq!(HostArray::from(vec![1.0f64]).downcast_64bit().dtype(), DataType::Float32);
    /// assert_eq!(HostArray::from(vec![1u8]).downcast_64bit().dtype(), DataType::Uint8);
    /// ```
    pub fn downcast_64bit(self) -> HostArray {
        match self {
            HostArray::I64(a) => HostArray::I32(a.mapv(|v| v as i32)),
            HostArray::U64(a) => HostArray::U32(a.mapv(|v| v as u32)),
            HostArray::F64(a) => HostArray::F32(a.mapv(|v| v as f32)),
            other => other,
        }
    }

    /// An array of `info`'s type and shape filled with `value` (converted as by [`HostArray::cast`]).
    ///
    /// ```
    /// use popxl::{DataType, HostArray};
    /// use popart_ir::TensorInfo;
    /// let a = HostArray::full(&TensorInfo::new(DataType::Int32, [2]), 7.0);
    /// assert_eq!(a, HostArray::from(vec![7i32, 7]));
    /// ```
    pub fn full(info: &TensorInfo, value: f64) -> HostArray {
        let t = HostTensor::from_f64_values(info.dtype, &info.shape, &vec![value; info.nelms()]);
        HostArray::from_host_tensor(&t).expect("well-formed host tensor")
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

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

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
        assert!(matches!(HostArray::from_host_tensor(&t), Err(PopXlError::InvalidArgument(_))));
    }

    #[test]
    fn downcast_keeps_values() {
        let a = HostArray::from(array![1i64, -5]).downcast_64bit();
        assert_eq!(a, HostArray::from(array![1i32, -5]));
    }
}
