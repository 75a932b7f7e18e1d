//! numpy's `.npy` format (versions 1.0, 2.0 and 3.0): a magic string, a
//! header that is a Python dict literal (`descr`, `fortran_order`, `shape`),
//! then the elements.
//!
//! The reader trusts nothing in the header: the element count is computed with
//! checked arithmetic and compared with the bytes that are actually there
//! before anything is allocated.

use popart_ir::{DataType, HostTensor, TensorInfo};

use super::{CheckpointError, Label};
use crate::HostArray;

const MAGIC: &[u8] = b"\x93NUMPY";

/// numpy's type string of `dtype` (little endian), or `None` for the float8
/// formats, which numpy has no type for.
fn descr(dtype: DataType) -> Option<&'static str> {
    Some(match dtype {
        DataType::Bool => "|b1",
        DataType::Int8 => "|i1",
        DataType::Int16 => "<i2",
        DataType::Int32 => "<i4",
        DataType::Int64 => "<i8",
        DataType::Uint8 => "|u1",
        DataType::Uint16 => "<u2",
        DataType::Uint32 => "<u4",
        DataType::Uint64 => "<u8",
        DataType::Float16 => "<f2",
        DataType::Float32 => "<f4",
        DataType::Float64 => "<f8",
        DataType::Float8_143 | DataType::Float8_152 => return None,
    })
}

/// The data type and byte order (`true`: big endian) of a numpy type string.
fn parse_descr(s: &str) -> Option<(DataType, bool)> {
    let (order, code) = s.split_at_checked(1)?;
    let big = match order {
        "<" | "|" | "=" => false,
        ">" => true,
        _ => return None,
    };
    let dtype = match code {
        "b1" => DataType::Bool,
        "i1" => DataType::Int8,
        "i2" => DataType::Int16,
        "i4" => DataType::Int32,
        "i8" => DataType::Int64,
        "u1" => DataType::Uint8,
        "u2" => DataType::Uint16,
        "u4" => DataType::Uint32,
        "u8" => DataType::Uint64,
        "f2" => DataType::Float16,
        "f4" => DataType::Float32,
        "f8" => DataType::Float64,
        _ => return None,
    };
    Some((dtype, big))
}

/// The `.npy` bytes of `array` (C order, little endian; version 1.0 unless the
/// header needs more than 64 KiB).
pub(super) fn encode(array: &HostArray, what: &Label<'_>) -> Result<Vec<u8>, CheckpointError> {
    let dtype = array.dtype();
    let descr = descr(dtype).ok_or_else(|| what.unrepresentable(dtype, "npy"))?;
    let shape: Vec<String> = array.shape().iter().map(|d| d.to_string()).collect();
    let shape = match shape.len() {
        1 => format!("{},", shape[0]),
        _ => shape.join(", "),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({shape}), }}");
    let tensor = array.try_to_host_tensor().map_err(|e| what.other(e.to_string()))?;
    // Magic (6) + version (2) + header length (2 or 4) + header, padded with
    // spaces to a multiple of 64 bytes and ended by a newline.
    let (version, len_bytes) = if header.len() + 11 <= usize::from(u16::MAX) { (1u8, 2) } else { (2u8, 4) };
    let prefix = MAGIC.len() + 2 + len_bytes;
    while !(prefix + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut out = Vec::new();
    out.try_reserve_exact(prefix + header.len() + tensor.bytes.len()).map_err(|_| what.too_large(usize::MAX))?;
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&u16::try_from(header.len()).unwrap_or(u16::MAX).to_le_bytes());
    } else {
        let len = u32::try_from(header.len()).map_err(|_| what.other("the header exceeds 4 GiB".into()))?;
        out.extend_from_slice(&len.to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&tensor.bytes);
    Ok(out)
}

/// Parse `.npy` bytes written by [`encode`] or by numpy.
pub(super) fn decode(bytes: &[u8], what: &Label<'_>) -> Result<HostArray, CheckpointError> {
    let bad = |reason: &str| what.not_npy(reason);
    if bytes.len() < MAGIC.len() + 2 || !bytes.starts_with(MAGIC) {
        return Err(bad("no .npy magic string"));
    }
    let version = bytes[MAGIC.len()];
    let (len, start): (usize, usize) = match version {
        1 => {
            let b = bytes.get(8..10).ok_or_else(|| bad("truncated header length"))?;
            (usize::from(u16::from_le_bytes([b[0], b[1]])), 10)
        }
        2 | 3 => {
            let b = bytes.get(8..12).ok_or_else(|| bad("truncated header length"))?;
            let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            (usize::try_from(len).map_err(|_| bad("header length does not fit memory"))?, 12)
        }
        v => return Err(bad(&format!("format version {v} is not 1, 2 or 3"))),
    };
    let end = start.checked_add(len).ok_or_else(|| bad("header length overflows"))?;
    let header = bytes.get(start..end).ok_or_else(|| bad("header is truncated"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad("header is not UTF-8 text"))?;
    let header =
        Header::parse(header).ok_or_else(|| bad("header is not a {'descr', 'fortran_order', 'shape'} dict"))?;
    let (dtype, big_endian) = parse_descr(header.descr).ok_or_else(|| what.unsupported(header.descr))?;
    if header.fortran_order {
        return Err(what.other("Fortran-order arrays are not read (save with numpy's default C order)".into()));
    }
    let data = &bytes[end..];
    let elements = header.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    let needed = elements.and_then(|n| n.checked_mul(dtype.size_bytes()));
    match needed {
        Some(n) if n == data.len() => {}
        _ => return Err(what.data_size(&header.shape, needed, data.len())),
    }
    let mut buf = Vec::new();
    buf.try_reserve_exact(data.len()).map_err(|_| what.too_large(data.len()))?;
    buf.extend_from_slice(data);
    if big_endian {
        for element in buf.chunks_exact_mut(dtype.size_bytes().max(1)) {
            element.reverse();
        }
    }
    let tensor =
        HostTensor::from_bytes(TensorInfo::new(dtype, header.shape), buf).map_err(|e| what.other(e.to_string()))?;
    HostArray::from_host_tensor(&tensor).map_err(|e| what.other(e.to_string()))
}

/// The three keys of a `.npy` header.
struct Header<'a> {
    descr: &'a str,
    fortran_order: bool,
    shape: Vec<usize>,
}

impl<'a> Header<'a> {
    /// Parse `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`
    /// (keys in any order, whitespace anywhere, a trailing comma allowed).
    fn parse(text: &'a str) -> Option<Self> {
        let mut p = Parser { s: text.trim_end_matches(['\n', ' ', '\0']) };
        let (mut descr, mut fortran, mut shape) = (None, None, None);
        p.eat('{')?;
        loop {
            if p.eat('}').is_some() {
                break;
            }
            let key = p.string()?;
            p.eat(':')?;
            match key {
                "descr" if descr.is_none() => descr = Some(p.string()?),
                "fortran_order" if fortran.is_none() => fortran = Some(p.boolean()?),
                "shape" if shape.is_none() => shape = Some(p.tuple()?),
                _ => return None,
            }
            if p.eat(',').is_none() {
                p.eat('}')?;
                break;
            }
        }
        p.s.trim().is_empty().then_some(())?;
        Some(Header { descr: descr?, fortran_order: fortran?, shape: shape? })
    }
}

/// A cursor over a header's text.
struct Parser<'a> {
    s: &'a str,
}

impl<'a> Parser<'a> {
    fn eat(&mut self, c: char) -> Option<()> {
        self.s = self.s.trim_start().strip_prefix(c)?;
        Some(())
    }

    fn string(&mut self) -> Option<&'a str> {
        let s = self.s.trim_start();
        let quote = s.chars().next().filter(|&q| q == '\'' || q == '"')?;
        let rest = &s[1..];
        let end = rest.find(quote)?;
        self.s = &rest[end + 1..];
        Some(&rest[..end])
    }

    fn boolean(&mut self) -> Option<bool> {
        let s = self.s.trim_start();
        let (value, rest) =
            if let Some(r) = s.strip_prefix("True") { (true, r) } else { (false, s.strip_prefix("False")?) };
        self.s = rest;
        Some(value)
    }

    fn tuple(&mut self) -> Option<Vec<usize>> {
        self.eat('(')?;
        let mut dims = Vec::new();
        loop {
            if self.eat(')').is_some() {
                return Some(dims);
            }
            let s = self.s.trim_start();
            let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            // Dimensions are bounded by the data checked later; 32 dimensions
            // is numpy's own limit (64 since numpy 2).
            if digits == 0 || dims.len() >= 64 {
                return None;
            }
            dims.push(s[..digits].parse().ok()?);
            self.s = &s[digits..];
            if self.eat(',').is_none() {
                self.eat(')')?;
                return Some(dims);
            }
        }
    }
}
