//! The `.safetensors` format (Hugging Face's `safetensors` crate): a JSON
//! header of names, types, shapes and byte ranges, then the data. The crate
//! checks that every range matches its shape and type before anything is
//! read from it.

use popart_ir::{DataType, HostTensor, TensorInfo};
use safetensors::tensor::{Dtype, TensorView};

use super::{check_name, CheckpointError, Label};
use crate::HostArray;

/// The safetensors type of `dtype`. The IPU's float8 formats have another
/// exponent bias than the OCP formats safetensors names, so they have none.
fn to_dtype(dtype: DataType) -> Option<Dtype> {
    Some(match dtype {
        DataType::Bool => Dtype::BOOL,
        DataType::Int8 => Dtype::I8,
        DataType::Int16 => Dtype::I16,
        DataType::Int32 => Dtype::I32,
        DataType::Int64 => Dtype::I64,
        DataType::Uint8 => Dtype::U8,
        DataType::Uint16 => Dtype::U16,
        DataType::Uint32 => Dtype::U32,
        DataType::Uint64 => Dtype::U64,
        DataType::Float16 => Dtype::F16,
        DataType::Float32 => Dtype::F32,
        DataType::Float64 => Dtype::F64,
        DataType::Float8_143 | DataType::Float8_152 => return None,
    })
}

fn from_dtype(dtype: Dtype) -> Option<DataType> {
    Some(match dtype {
        Dtype::BOOL => DataType::Bool,
        Dtype::I8 => DataType::Int8,
        Dtype::I16 => DataType::Int16,
        Dtype::I32 => DataType::Int32,
        Dtype::I64 => DataType::Int64,
        Dtype::U8 => DataType::Uint8,
        Dtype::U16 => DataType::Uint16,
        Dtype::U32 => DataType::Uint32,
        Dtype::U64 => DataType::Uint64,
        Dtype::F16 => DataType::Float16,
        Dtype::F32 => DataType::Float32,
        Dtype::F64 => DataType::Float64,
        _ => return None,
    })
}

/// The `.safetensors` bytes of `arrays` (the format orders them by type and name).
pub(super) fn encode(arrays: &[(String, HostArray)], what: &Label<'_>) -> Result<Vec<u8>, CheckpointError> {
    let mut tensors = Vec::with_capacity(arrays.len());
    for (name, array) in arrays {
        check_name(name, what)?;
        let member = what.member(name);
        let dtype = to_dtype(array.dtype()).ok_or_else(|| member.unrepresentable(array.dtype(), "safetensors"))?;
        let t = array.try_to_host_tensor().map_err(|e| member.other(e.to_string()))?;
        tensors.push((name.as_str(), dtype, t));
    }
    let views = tensors
        .iter()
        .map(|(name, dtype, t)| {
            TensorView::new(*dtype, t.info.shape.clone(), &t.bytes)
                .map(|v| (*name, v))
                .map_err(|e| what.member(name).other(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::serialize(views, None).map_err(|e| what.other(e.to_string()))
}

/// Every tensor of the `.safetensors` bytes, in the file's order.
pub(super) fn decode(bytes: &[u8], what: &Label<'_>) -> Result<Vec<(String, HostArray)>, CheckpointError> {
    let file = safetensors::SafeTensors::deserialize(bytes).map_err(|e| what.not_archive(e.to_string()))?;
    let mut views: Vec<(String, TensorView<'_>)> = file.tensors();
    // The file's order: by offset of each tensor's data.
    views.sort_by_key(|(_, v)| v.data().as_ptr() as usize);
    let mut arrays = Vec::with_capacity(views.len());
    for (name, view) in views {
        check_name(&name, what)?;
        let member = what.member(&name);
        let dtype = from_dtype(view.dtype()).ok_or_else(|| member.unsupported(&format!("{:?}", view.dtype())))?;
        let mut buf = Vec::new();
        buf.try_reserve_exact(view.data().len()).map_err(|_| member.too_large(view.data().len()))?;
        buf.extend_from_slice(view.data());
        let tensor = HostTensor::from_bytes(TensorInfo::new(dtype, view.shape().to_vec()), buf)
            .map_err(|e| member.other(e.to_string()))?;
        let array = HostArray::from_host_tensor(&tensor).map_err(|e| member.other(e.to_string()))?;
        arrays.push((name, array));
    }
    Ok(arrays)
}
