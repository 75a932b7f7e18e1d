//! Tensors: type information, kinds, host data and connectivity.

use std::fmt;

use crate::{DataType, OpId, TensorId};

/// Data type and shape of a tensor.
///
/// ```
/// use popart_ir::{DataType, TensorInfo};
/// let info = TensorInfo::new(DataType::Float32, [2, 3]);
/// assert_eq!(info.nelms(), 6);
/// assert_eq!(info.nbytes(), 24);
/// assert_eq!(info.to_string(), "float32[2,3]");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorInfo {
    /// Element type.
    pub dtype: DataType,
    /// Dimensions, outermost first. Empty for a scalar.
    pub shape: Vec<usize>,
}

impl TensorInfo {
    /// A new info from a data type and anything that converts into a shape.
    pub fn new(dtype: DataType, shape: impl Into<Vec<usize>>) -> Self {
        TensorInfo { dtype, shape: shape.into() }
    }

    /// Number of elements (1 for a scalar).
    ///
    /// Saturates at `usize::MAX` when the product overflows; every tensor of an
    /// [`Ir`](crate::Ir) has passed [`TensorInfo::checked_nbytes`], so for those
    /// this is exact. Use [`TensorInfo::checked_nelms`] on shapes from users.
    pub fn nelms(&self) -> usize {
        if self.shape.contains(&0) {
            return 0;
        }
        self.shape.iter().fold(1usize, |acc, &d| acc.saturating_mul(d))
    }

    /// Number of bytes of the whole tensor (saturating, as [`TensorInfo::nelms`]).
    pub fn nbytes(&self) -> usize {
        self.nelms().saturating_mul(self.dtype.size_bytes())
    }

    /// Number of elements, or `None` when the product overflows `usize`.
    pub fn checked_nelms(&self) -> Option<usize> {
        crate::size::checked_product(&self.shape)
    }

    /// Number of bytes, or `None` when it overflows or exceeds
    /// [`MAX_TENSOR_BYTES`](crate::size::MAX_TENSOR_BYTES).
    ///
    /// ```
    /// use popart_ir::{DataType, TensorInfo};
    /// assert_eq!(TensorInfo::new(DataType::Float32, [2, 3]).checked_nbytes(), Some(24));
    /// assert_eq!(TensorInfo::new(DataType::Float32, [1 << 40, 1 << 40]).checked_nbytes(), None);
    /// ```
    pub fn checked_nbytes(&self) -> Option<usize> {
        self.checked_nelms()?.checked_mul(self.dtype.size_bytes()).filter(|&b| b <= crate::size::MAX_TENSOR_BYTES)
    }

    /// [`TensorInfo::checked_nbytes`] as a typed error naming `what`.
    pub fn check_size(&self, what: &str) -> Result<usize, crate::SizeError> {
        self.checked_nbytes().ok_or_else(|| crate::SizeError::Overflow { what: format!("{what} {self}") })
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

impl fmt::Display for TensorInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Host-side tensor data: an info and its elements as little-endian bytes.
///
/// ```
/// use popart_ir::HostTensor;
/// let t = HostTensor::from_f32(&[2], &[1.0, 2.0]);
/// assert_eq!(t.to_f64_vec(), vec![1.0, 2.0]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Type and shape of the data.
    pub info: TensorInfo,
    /// `info.nbytes()` bytes, elements in row-major order, little endian.
    pub bytes: Vec<u8>,
}

/// Host data that does not match its info.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostDataError {
    /// The byte length is not `nelms x element size`.
    #[error("{info} data must be {expected} bytes, got {got}")]
    Length {
        /// The declared info.
        info: TensorInfo,
        /// Bytes the info needs.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// A bool element is neither 0 nor 1.
    #[error("bool element {index} is byte {byte}; bool data must be 0 or 1")]
    InvalidBool {
        /// Element index.
        index: usize,
        /// The offending byte.
        byte: u8,
    },
    /// The shape's byte size overflows.
    #[error(transparent)]
    Size(#[from] crate::SizeError),
    /// A host value the tensor's data type cannot represent (an integer out
    /// of range, a NaN or infinity for an integer type, a finite float that
    /// would become infinite).
    #[error("element {index} ({value}) cannot be represented as {dtype}")]
    Unrepresentable {
        /// Row-major index of the first offending element.
        index: usize,
        /// The element, printed.
        value: String,
        /// The tensor's data type.
        dtype: DataType,
    },
}

impl HostTensor {
    /// Wrap raw bytes, checking the length against the info and, for bool
    /// data, that every byte is 0 or 1.
    ///
    /// ```
    /// use popart_ir::{DataType, HostTensor, TensorInfo};
    /// let info = TensorInfo::new(DataType::Bool, [2]);
    /// assert!(HostTensor::from_bytes(info.clone(), vec![0, 1]).is_ok());
    /// assert!(HostTensor::from_bytes(info.clone(), vec![0, 2]).is_err());
    /// assert!(HostTensor::from_bytes(info, vec![0]).is_err());
    /// ```
    pub fn from_bytes(info: TensorInfo, bytes: Vec<u8>) -> Result<Self, HostDataError> {
        let t = HostTensor { info, bytes };
        t.validate()?;
        Ok(t)
    }

    /// Check the invariants [`HostTensor::from_bytes`] establishes (the fields
    /// are public, so data built by hand is checked again where it enters an IR
    /// or a session).
    pub fn validate(&self) -> Result<(), HostDataError> {
        let expected = self.info.check_size("host data")?;
        if self.bytes.len() != expected {
            return Err(HostDataError::Length { info: self.info.clone(), expected, got: self.bytes.len() });
        }
        if self.info.dtype == DataType::Bool {
            if let Some((index, &byte)) = self.bytes.iter().enumerate().find(|(_, &b)| b > 1) {
                return Err(HostDataError::InvalidBool { index, byte });
            }
        }
        Ok(())
    }

    /// All-zero data of the given info. Panics if the size overflows or the
    /// allocation fails; see [`HostTensor::try_zeros`].
    pub fn zeros(info: TensorInfo) -> Self {
        Self::try_zeros(info).unwrap_or_else(|e| panic!("HostTensor::zeros: {e}"))
    }

    /// All-zero data of the given info, or a typed error when the size
    /// overflows or the allocator refuses it.
    pub fn try_zeros(info: TensorInfo) -> Result<Self, crate::SizeError> {
        let n = info.check_size("host data")?;
        let bytes = crate::size::try_zeroed_bytes(n, &format!("host data {info}"))?;
        Ok(HostTensor { info, bytes })
    }

    /// float32 data of the given shape. Panics if `data.len()` does not match `shape`.
    pub fn from_f32(shape: &[usize], data: &[f32]) -> Self {
        let info = TensorInfo::new(DataType::Float32, shape);
        assert_eq!(info.nelms(), data.len(), "HostTensor::from_f32: data length does not match shape");
        HostTensor { info, bytes: bytemuck::cast_slice(data).to_vec() }
    }

    /// Build from f64 values, converting to `dtype` (rounding toward zero for integers).
    ///
    /// The number of values is not checked against `shape` here: a mismatch is
    /// reported by [`HostTensor::validate`], which runs wherever host data enters
    /// an IR (`IrError::HostData`) or a session.
    pub fn from_f64_values(dtype: DataType, shape: &[usize], values: &[f64]) -> Self {
        let info = TensorInfo::new(dtype, shape);
        let mut bytes = Vec::with_capacity(values.len().saturating_mul(dtype.size_bytes()));
        for &v in values {
            push_value(&mut bytes, dtype, v);
        }
        HostTensor { info, bytes }
    }

    /// Every element converted to f64 (bool as 0/1).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        let sz = self.info.dtype.size_bytes();
        self.bytes.chunks_exact(sz).take(self.info.nelms()).map(|b| read_value(b, self.info.dtype)).collect()
    }
}

fn push_value(out: &mut Vec<u8>, dtype: DataType, v: f64) {
    use DataType::*;
    match dtype {
        Bool => out.push((v != 0.0) as u8),
        Int8 => out.extend_from_slice(&(v as i8).to_le_bytes()),
        Int16 => out.extend_from_slice(&(v as i16).to_le_bytes()),
        Int32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        Int64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
        Uint8 => out.extend_from_slice(&(v as u8).to_le_bytes()),
        Uint16 => out.extend_from_slice(&(v as u16).to_le_bytes()),
        Uint32 => out.extend_from_slice(&(v as u32).to_le_bytes()),
        Uint64 => out.extend_from_slice(&(v as u64).to_le_bytes()),
        Float16 => out.extend_from_slice(&half::f16::from_f64(v).to_le_bytes()),
        Float32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        Float64 => out.extend_from_slice(&v.to_le_bytes()),
        Float8_143 | Float8_152 => out.push(match crate::float8::Float8Format::of(dtype) {
            Some(f) => f.encode(v, 0, true),
            None => crate::float8::NAN_CODE,
        }),
    }
}

fn read_value(b: &[u8], dtype: DataType) -> f64 {
    use DataType::*;
    match dtype {
        Bool => (le::<1>(b)[0] != 0) as u8 as f64,
        Int8 => i8::from_le_bytes(le(b)) as f64,
        Int16 => i16::from_le_bytes(le(b)) as f64,
        Int32 => i32::from_le_bytes(le(b)) as f64,
        Int64 => i64::from_le_bytes(le(b)) as f64,
        Uint8 => u8::from_le_bytes(le(b)) as f64,
        Uint16 => u16::from_le_bytes(le(b)) as f64,
        Uint32 => u32::from_le_bytes(le(b)) as f64,
        Uint64 => u64::from_le_bytes(le(b)) as f64,
        Float16 => half::f16::from_le_bytes(le(b)).to_f64(),
        Float32 => f32::from_le_bytes(le(b)) as f64,
        Float64 => f64::from_le_bytes(le(b)),
        Float8_143 | Float8_152 => match crate::float8::Float8Format::of(dtype) {
            Some(f) => f.decode_f64(le::<1>(b)[0]),
            None => f64::NAN,
        },
    }
}

/// The first `N` bytes of `b` as an array (zero-filled if `b` is shorter; callers
/// pass exactly one element's bytes).
pub(crate) fn le<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = b.len().min(N);
    a[..n].copy_from_slice(&b[..n]);
    a
}

/// Direction of a host stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamDirection {
    /// Host to device (`h2d_stream`, read by `HostLoad`).
    HostToDevice,
    /// Device to host (`d2h_stream`, written by `HostStore`).
    DeviceToHost,
}

/// What a tensor is, in PopART's terms.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorKind {
    /// An activation or gradient: an op output or a graph input (PopART's `ActGrad`).
    ActGrad,
    /// A variable with its initial host data; lives for the whole program.
    Variable(HostTensor),
    /// A constant with its data.
    Constant(HostTensor),
    /// A host stream endpoint (main graph only). Never consumed directly by ops:
    /// `HostLoad`/`HostStore` name it in their `stream` attribute.
    Stream(StreamDirection),
}

impl TensorKind {
    /// Short name used in the text form: `act`, `var`, `const`, `h2d`, `d2h`.
    pub fn short_name(&self) -> &'static str {
        match self {
            TensorKind::ActGrad => "act",
            TensorKind::Variable(_) => "var",
            TensorKind::Constant(_) => "const",
            TensorKind::Stream(StreamDirection::HostToDevice) => "h2d",
            TensorKind::Stream(StreamDirection::DeviceToHost) => "d2h",
        }
    }

    /// The host data of a variable or constant.
    pub fn data(&self) -> Option<&HostTensor> {
        match self {
            TensorKind::Variable(d) | TensorKind::Constant(d) => Some(d),
            _ => None,
        }
    }
}

/// An op input or output slot: (op, index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Port {
    /// The op.
    pub op: OpId,
    /// The input or output index on that op.
    pub index: u32,
}

/// A tensor of a graph.
#[derive(Clone, Debug)]
pub struct Tensor {
    /// Id within its graph.
    pub id: TensorId,
    /// Name, unique within the graph (includes the name scope, `scope/name`).
    pub name: String,
    /// Data type and shape.
    pub info: TensorInfo,
    /// Kind and, for variables and constants, data.
    pub kind: TensorKind,
    pub(crate) producer: Option<Port>,
    pub(crate) consumers: Vec<Port>,
    /// Creation sequence number within the graph (the text form lists tensors in this order).
    pub(crate) seq: u64,
}

impl Tensor {
    /// The op output that produces this tensor, if any (at most one).
    pub fn producer(&self) -> Option<Port> {
        self.producer
    }

    /// Every (op, input index) consuming this tensor: a multiset, one op may appear at several indices.
    pub fn consumers(&self) -> &[Port] {
        &self.consumers
    }

    /// Creation sequence number within the graph.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// True for variables.
    pub fn is_variable(&self) -> bool {
        matches!(self.kind, TensorKind::Variable(_))
    }

    /// True for constants.
    pub fn is_constant(&self) -> bool {
        matches!(self.kind, TensorKind::Constant(_))
    }
}
