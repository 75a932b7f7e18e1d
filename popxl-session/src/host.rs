//! Raw byte access to [`HostArray`] data for host transfers.

use ndarray::{ArrayD, IxDyn};
use popart_ir::size::try_zeroed_vec;
use popart_ir::{DataType, HostDataError, HostTensor, SizeError, TensorInfo};
use popxl::HostArray;

// The device and the host share byte order: arrays are moved as raw bytes.
const _: () = assert!(cfg!(target_endian = "little"), "popxl-session assumes a little-endian host");

macro_rules! each {
    ($a:expr, $x:ident => $body:expr) => {
        match $a {
            HostArray::Bool($x) => $body,
            HostArray::I8($x) => $body,
            HostArray::I16($x) => $body,
            HostArray::I32($x) => $body,
            HostArray::I64($x) => $body,
            HostArray::U8($x) => $body,
            HostArray::U16($x) => $body,
            HostArray::U32($x) => $body,
            HostArray::U64($x) => $body,
            HostArray::F16($x) => $body,
            HostArray::F32($x) => $body,
            HostArray::F64($x) => $body,
            HostArray::F8_143($x) => $body,
            HostArray::F8_152($x) => $body,
        }
    };
}

/// The array's elements as little-endian bytes in row-major order, borrowed when
/// the array is in standard layout, else copied.
pub(crate) fn bytes_of(a: &HostArray) -> std::borrow::Cow<'_, [u8]> {
    fn view<T>(s: &[T]) -> &[u8] {
        // SAFETY: every element type of HostArray is plain data (bool is one byte
        // holding 0 or 1, f16 is a transparent u16, the float8 codes transparent u8s) and the host is little endian.
        unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
    }
    let borrowed: Option<&[u8]> = each!(a, x => x.as_slice().map(view));
    match borrowed {
        Some(b) => std::borrow::Cow::Borrowed(b),
        None => std::borrow::Cow::Owned(a.to_host_tensor().bytes),
    }
}

/// A pointer to the array's elements when it is in standard layout.
pub(crate) fn mut_ptr_of(a: &mut HostArray) -> Option<(*mut u8, usize)> {
    fn raw<T>(s: &mut [T]) -> (*mut u8, usize) {
        (s.as_mut_ptr() as *mut u8, std::mem::size_of_val(s))
    }
    each!(a, x => x.as_slice_mut().map(raw))
}

/// Overwrite every element of `a` (any layout) from row-major little-endian
/// bytes, which are validated first (length, bool bytes 0 or 1): on error `a`
/// is unchanged.
pub(crate) fn assign_bytes(a: &mut HostArray, bytes: &[u8]) -> Result<(), HostDataError> {
    let t = HostTensor::from_bytes(a.info(), bytes.to_vec())?;
    let src = HostArray::from_host_tensor(&t).map_err(|_| HostDataError::Length {
        info: t.info.clone(),
        expected: t.info.nbytes(),
        got: t.bytes.len(),
    })?;
    macro_rules! assign {
        ($($v:ident),*) => {
            match (a, src) {
                $((HostArray::$v(dst), HostArray::$v(s)) => dst.assign(&s),)*
                // `src` was made from `a`'s own info: same variant.
                _ => {}
            }
        };
    }
    assign!(Bool, I8, I16, I32, I64, U8, U16, U32, U64, F16, F32, F64, F8_143, F8_152);
    Ok(())
}

/// A zero-filled array of `info`, allocated fallibly: a size overflow or a
/// refused allocation is an error naming `what`, never an abort.
pub(crate) fn try_zeros(info: &TensorInfo, what: &str) -> Result<HostArray, SizeError> {
    let overflow = || SizeError::Overflow { what: format!("{what} ({info})") };
    let n = info.checked_nbytes().ok_or_else(overflow)? / info.dtype.size_bytes().max(1);
    let shape = IxDyn(&info.shape);
    macro_rules! zeros {
        ($($dt:ident => $v:ident: $t:ty),*) => {
            match info.dtype {
                $(DataType::$dt => HostArray::$v(
                    ArrayD::from_shape_vec(shape, try_zeroed_vec::<$t>(n, what)?).map_err(|_| overflow())?,
                ),)*
            }
        };
    }
    Ok(zeros!(Bool => Bool: bool, Int8 => I8: i8, Int16 => I16: i16, Int32 => I32: i32, Int64 => I64: i64,
        Uint8 => U8: u8, Uint16 => U16: u16, Uint32 => U32: u32, Uint64 => U64: u64,
        Float16 => F16: half::f16, Float32 => F32: f32, Float64 => F64: f64,
        Float8_143 => F8_143: popart_ir::float8::Float8_143, Float8_152 => F8_152: popart_ir::float8::Float8_152))
}

/// A failed checked host conversion (`try_cast`, `try_downcast_64bit`,
/// `from_host_tensor`) as a session error naming `tensor`: an unrepresentable
/// value or invalid bytes are [`crate::SessionError::InvalidHostData`], sizes
/// [`crate::SessionError::SizeOverflow`] or [`crate::SessionError::OutOfMemory`];
/// these conversions fail in no other way ([`crate::SessionError::Internal`]
/// otherwise).
pub(crate) fn cast_error(tensor: &str, e: popxl::PopXlError) -> crate::SessionError {
    use crate::SessionError;
    match e {
        popxl::PopXlError::HostCast { index, value, dtype, .. } => SessionError::InvalidHostData {
            tensor: tensor.to_string(),
            source: HostDataError::Unrepresentable { index, value, dtype },
        },
        popxl::PopXlError::Size(e) => e.into(),
        popxl::PopXlError::HostData { source, .. } => {
            SessionError::InvalidHostData { tensor: tensor.to_string(), source }
        }
        other => SessionError::Internal { reason: format!("converting data for `{tensor}`: unexpected {other}") },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{array, ArrayD};

    #[test]
    fn standard_layout_is_borrowed_and_transposed_is_copied_in_logical_order() {
        let a = HostArray::from(array![[1.0f32, 2.0], [3.0, 4.0]]);
        assert!(matches!(bytes_of(&a), std::borrow::Cow::Borrowed(_)));
        let t = HostArray::F32(array![[1.0f32, 2.0], [3.0, 4.0]].reversed_axes().into_dyn());
        let b = bytes_of(&t);
        let v: Vec<f32> = b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(v, vec![1.0, 3.0, 2.0, 4.0]);
    }

    #[test]
    fn assign_into_a_non_standard_layout() {
        let mut t = HostArray::I32(ArrayD::from_elem(vec![2, 2], 0i32).reversed_axes());
        assert!(mut_ptr_of(&mut t).is_none());
        let bytes: Vec<u8> = [1i32, 2, 3, 4].iter().flat_map(|x| x.to_le_bytes()).collect();
        assign_bytes(&mut t, &bytes).unwrap();
        assert_eq!(t.to_f64_vec(), vec![1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn assigning_invalid_bool_bytes_is_an_error_and_changes_nothing() {
        let mut t = HostArray::Bool(ArrayD::from_elem(vec![2, 2], false).reversed_axes());
        let err = assign_bytes(&mut t, &[1, 0, 2, 1]).unwrap_err();
        assert_eq!(err, HostDataError::InvalidBool { index: 2, byte: 2 });
        assert_eq!(t.to_f64_vec(), vec![0.0; 4]);
        assert!(assign_bytes(&mut t, &[1, 0]).is_err(), "short data");
    }

    #[test]
    // Miri does not model a refused allocation: it would try to allocate 4 TiB.
    #[cfg_attr(miri, ignore)]
    fn fallible_zeros_of_every_dtype_and_huge_sizes_are_errors() {
        for dt in [DataType::Bool, DataType::Int8, DataType::Uint64, DataType::Float16, DataType::Float64] {
            let a = try_zeros(&TensorInfo::new(dt, [2, 3]), "test").unwrap();
            assert_eq!((a.dtype(), a.shape().to_vec()), (dt, vec![2, 3]));
            assert_eq!(a.to_f64_vec(), vec![0.0; 6]);
        }
        let huge = TensorInfo::new(DataType::Float32, [1 << 40]);
        assert!(matches!(try_zeros(&huge, "huge"), Err(SizeError::OutOfMemory { .. })));
        let overflow = TensorInfo::new(DataType::Float32, [1 << 40, 1 << 40]);
        assert!(matches!(try_zeros(&overflow, "overflow"), Err(SizeError::Overflow { .. })));
    }
}
