//! Element data types.

use std::fmt;
use std::str::FromStr;

/// The element type of a tensor.
///
/// ```
/// use popart_ir::DataType;
/// assert_eq!(DataType::Float32.size_bytes(), 4);
/// assert_eq!("float16".parse::<DataType>().unwrap(), DataType::Float16);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    /// Boolean, one byte per element.
    Bool,
    /// Signed 8-bit integer.
    Int8,
    /// Signed 16-bit integer.
    Int16,
    /// Signed 32-bit integer.
    Int32,
    /// Signed 64-bit integer.
    Int64,
    /// Unsigned 8-bit integer.
    Uint8,
    /// Unsigned 16-bit integer.
    Uint16,
    /// Unsigned 32-bit integer.
    Uint32,
    /// Unsigned 64-bit integer.
    Uint64,
    /// IEEE half precision.
    Float16,
    /// IEEE single precision.
    Float32,
    /// Graphcore's 8-bit float with 1 sign, 4 exponent and 3 mantissa bits
    /// (bias 8, subnormals, no infinities, NaN is the code `0x80`): a storage
    /// format read and written by the pow2-scaled ops (see [`crate::float8`]).
    Float8_143,
    /// Graphcore's 8-bit float with 1 sign, 5 exponent and 2 mantissa bits
    /// (bias 16, subnormals, no infinities, NaN is the code `0x80`).
    Float8_152,
    /// IEEE double precision.
    Float64,
}

impl DataType {
    /// Every data type, in declaration order.
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Float8_143,
        DataType::Float8_152,
    ];

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        use DataType::*;
        match self {
            Bool | Int8 | Uint8 | Float8_143 | Float8_152 => 1,
            Int16 | Uint16 | Float16 => 2,
            Int32 | Uint32 | Float32 => 4,
            Int64 | Uint64 | Float64 => 8,
        }
    }

    /// True for the floating point types ops compute in (float16, float32,
    /// float64); the float8 types are storage formats ([`DataType::is_float8`]).
    pub fn is_floating_point(self) -> bool {
        matches!(self, DataType::Float16 | DataType::Float32 | DataType::Float64)
    }

    /// True for the 8-bit float formats `float8_143` and `float8_152`.
    pub fn is_float8(self) -> bool {
        matches!(self, DataType::Float8_143 | DataType::Float8_152)
    }

    /// True for the signed and unsigned integer types (not bool, not float8).
    pub fn is_int(self) -> bool {
        !self.is_floating_point() && !self.is_float8() && self != DataType::Bool
    }

    /// True for types that can represent negative values.
    pub fn is_signed(self) -> bool {
        use DataType::*;
        matches!(self, Int8 | Int16 | Int32 | Int64 | Float16 | Float32 | Float64 | Float8_143 | Float8_152)
    }

    /// The lower-case name used by the text form and by PopXL (`float32`, `int8`...).
    pub fn name(self) -> &'static str {
        use DataType::*;
        match self {
            Bool => "bool",
            Int8 => "int8",
            Int16 => "int16",
            Int32 => "int32",
            Int64 => "int64",
            Uint8 => "uint8",
            Uint16 => "uint16",
            Uint32 => "uint32",
            Uint64 => "uint64",
            Float16 => "float16",
            Float32 => "float32",
            Float64 => "float64",
            Float8_143 => "float8_143",
            Float8_152 => "float8_152",
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error returned when a string names no data type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown data type `{0}`")]
pub struct UnknownDataType(pub String);

impl FromStr for DataType {
    type Err = UnknownDataType;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let alias = match s {
            "half" => "float16",
            "float" => "float32",
            "double" => "float64",
            other => other,
        };
        DataType::ALL.iter().copied().find(|d| d.name() == alias).ok_or_else(|| UnknownDataType(s.to_string()))
    }
}
