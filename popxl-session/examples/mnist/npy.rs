//! Trained weights in numpy's formats: one `.npz` archive (`numpy.load("w.npz")["W0"]`)
//! or a directory of `.npy` files (`numpy.load("W0.npy")`).

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

use ndarray::{ArrayD, IxDyn};
use popxl::HostArray;

fn invalid(path: &Path, what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{}: {what}", path.display()))
}

/// The `.npy` bytes of a float32 array (format version 1.0, little endian, C order).
pub fn to_npy(array: &HostArray) -> io::Result<Vec<u8>> {
    let a =
        array.as_f32().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "only float32 arrays are saved"))?;
    let shape: Vec<String> = a.shape().iter().map(|d| d.to_string()).collect();
    let shape = if shape.len() == 1 { format!("{},", shape[0]) } else { shape.join(", ") };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({shape}), }}");
    // Magic (6) + version (2) + header length (2) + header, padded with spaces to a
    // multiple of 64 bytes and ended by a newline.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = Vec::with_capacity(10 + header.len() + 4 * a.len());
    bytes.extend_from_slice(b"\x93NUMPY\x01\x00");
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for v in a.iter() {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    Ok(bytes)
}

/// Parse `.npy` bytes written by [`to_npy`] or numpy (`<f4`, C order); `path` names
/// the source in errors.
pub fn from_npy(bytes: &[u8], path: &Path) -> io::Result<HostArray> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" || bytes[6] != 1 {
        return Err(invalid(path, "not a version 1 .npy file"));
    }
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(bytes.get(10..10 + header_len).ok_or_else(|| invalid(path, "truncated"))?)
        .map_err(|_| invalid(path, "header is not text"))?;
    if !header.contains("'descr': '<f4'") || !header.contains("'fortran_order': False") {
        return Err(invalid(path, "expected little-endian float32 in C order"));
    }
    let shape_text = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| invalid(path, "no shape in header"))?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| invalid(path, "bad shape")))
        .collect::<io::Result<_>>()?;
    let data = &bytes[10 + header_len..];
    let n: usize = shape.iter().product();
    if data.len() != 4 * n {
        return Err(invalid(path, &format!("{} data bytes for shape {shape:?}", data.len())));
    }
    let values = data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok(ArrayD::from_shape_vec(IxDyn(&shape), values).map_err(|_| invalid(path, "bad shape"))?.into())
}

fn is_npz(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("npz"))
}

/// Save named float32 arrays: to `path` as a `.npz` archive (`numpy.load(path)["W0"]`)
/// when it ends in `.npz`, else as `path/<name>.npy` files (`numpy.load("W0.npy")`).
pub fn save(path: &Path, arrays: &[(String, HostArray)]) -> io::Result<()> {
    if !is_npz(path) {
        fs::create_dir_all(path)?;
        for (name, array) in arrays {
            fs::write(path.join(format!("{name}.npy")), to_npy(array)?)?;
        }
        return Ok(());
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    // numpy.savez's layout: one stored (uncompressed) `<name>.npy` member per array.
    let mut zip = zip::ZipWriter::new(fs::File::create(path)?);
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, array) in arrays {
        zip.start_file(format!("{name}.npy"), options).map_err(io::Error::other)?;
        zip.write_all(&to_npy(array)?)?;
    }
    zip.finish().map_err(io::Error::other)?;
    Ok(())
}

/// Load the arrays `names` saved by [`save`] (or numpy) from a `.npz` file or a
/// directory of `.npy` files.
pub fn load(path: &Path, names: &[&str]) -> io::Result<Vec<(String, HostArray)>> {
    if !is_npz(path) {
        return names
            .iter()
            .map(|name| {
                let file = path.join(format!("{name}.npy"));
                Ok((name.to_string(), from_npy(&fs::read(&file)?, &file)?))
            })
            .collect();
    }
    let mut zip = zip::ZipArchive::new(fs::File::open(path)?).map_err(|e| invalid(path, &e.to_string()))?;
    names
        .iter()
        .map(|name| {
            let member = format!("{name}.npy");
            let mut file = zip.by_name(&member).map_err(|e| invalid(path, &format!("{member}: {e}")))?;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            Ok((name.to_string(), from_npy(&bytes, &path.join(&member))?))
        })
        .collect()
}
