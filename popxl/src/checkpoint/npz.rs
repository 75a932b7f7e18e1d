//! numpy's `.npz` archives: a zip file with one `<name>.npy` member per array
//! (`numpy.savez` stores them, `numpy.savez_compressed` deflates them).
//!
//! Members are inflated into buffers that grow with the bytes actually
//! produced, never sized from the archive's declared sizes, and the total is
//! capped by [`Limits::max_bytes`].

use std::io::{Cursor, Read, Write};

use super::{check_name, npy, CheckpointError, Label, Limits};
use crate::HostArray;

/// The archive of `arrays`, uncompressed as `numpy.savez` writes it.
pub(super) fn encode(arrays: &[(String, HostArray)], what: &Label<'_>) -> Result<Vec<u8>, CheckpointError> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(arrays.iter().any(|(_, a)| a.nelms().saturating_mul(a.dtype().size_bytes()) >= u32::MAX as usize));
    for (name, array) in arrays {
        check_name(name, what)?;
        let member = what.member(name);
        let bytes = npy::encode(array, &member)?;
        zip.start_file(format!("{name}.npy"), options).map_err(|e| member.other(e.to_string()))?;
        zip.write_all(&bytes).map_err(|e| member.other(e.to_string()))?;
    }
    let out = zip.finish().map_err(|e| what.other(e.to_string()))?;
    Ok(out.into_inner())
}

/// Every array of the archive `bytes`, in archive order (duplicates are
/// refused by the caller).
pub(super) fn decode(
    bytes: &[u8],
    what: &Label<'_>,
    limits: &Limits,
) -> Result<Vec<(String, HostArray)>, CheckpointError> {
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| what.not_archive(e.to_string()))?;
    if zip.len() > limits.max_arrays {
        return Err(what.other(format!("{} members exceed the limit of {} arrays", zip.len(), limits.max_arrays)));
    }
    let mut arrays = Vec::new();
    let mut budget = limits.max_bytes;
    for index in 0..zip.len() {
        let mut file = zip.by_index(index).map_err(|e| what.not_archive(e.to_string()))?;
        let raw = file.name().map_err(|e| what.not_archive(e.to_string()))?.into_owned();
        let name = raw.strip_suffix(".npy").unwrap_or(&raw).to_string();
        check_name(&name, what)?;
        let member = what.member(&name);
        // Grow with what inflation yields; one byte past the budget proves it is exceeded.
        let mut buf = Vec::new();
        let cap = u64::try_from(budget).unwrap_or(u64::MAX).saturating_add(1);
        (&mut file).take(cap).read_to_end(&mut buf).map_err(|e| member.other(e.to_string()))?;
        if buf.len() > budget {
            return Err(member.too_large(limits.max_bytes));
        }
        budget -= buf.len();
        let array = npy::decode(&buf, &member)?;
        arrays.push((name, array));
    }
    Ok(arrays)
}
