//! Trained weights as `.npy` files (numpy's own format: `numpy.load("W0.npy")`).

use std::fs;
use std::io;
use std::path::Path;

use ndarray::{ArrayD, IxDyn};
use popxl::HostArray;

fn invalid(path: &Path, what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{}: {what}", path.display()))
}

/// Write a float32 array as `<dir>/<name>.npy` (format version 1.0, little endian, C order).
pub fn save(dir: &Path, name: &str, array: &HostArray) -> io::Result<()> {
    let path = dir.join(format!("{name}.npy"));
    let a = array.as_f32().ok_or_else(|| invalid(&path, "only float32 arrays are saved"))?;
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
    fs::create_dir_all(dir)?;
    fs::write(path, bytes)
}

/// Read `<dir>/<name>.npy` written by [`save`] or numpy (`<f4`, C order).
pub fn load(dir: &Path, name: &str) -> io::Result<HostArray> {
    let path = dir.join(format!("{name}.npy"));
    let bytes = fs::read(&path)?;
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" || bytes[6] != 1 {
        return Err(invalid(&path, "not a version 1 .npy file"));
    }
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(bytes.get(10..10 + header_len).ok_or_else(|| invalid(&path, "truncated"))?)
        .map_err(|_| invalid(&path, "header is not text"))?;
    if !header.contains("'descr': '<f4'") || !header.contains("'fortran_order': False") {
        return Err(invalid(&path, "expected little-endian float32 in C order"));
    }
    let shape_text = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| invalid(&path, "no shape in header"))?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| invalid(&path, "bad shape")))
        .collect::<io::Result<_>>()?;
    let data = &bytes[10 + header_len..];
    let n: usize = shape.iter().product();
    if data.len() != 4 * n {
        return Err(invalid(&path, &format!("{} data bytes for shape {shape:?}", data.len())));
    }
    let values = data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok(ArrayD::from_shape_vec(IxDyn(&shape), values).map_err(|_| invalid(&path, "bad shape"))?.into())
}
