//! Named arrays in files: numpy's `.npz` and `.npy`, a directory of `.npy`
//! files, and `.safetensors`; written so that a crash never loses the
//! previous file, read so that a hostile file cannot make the reader allocate
//! more than it holds.
//!
//! ```
//! use popxl::checkpoint::{self, Format};
//! use popxl::HostArray;
//! let dir = std::env::temp_dir().join(format!("popxl-doc-{}", std::process::id()));
//! let path = dir.join("weights.npz");
//! let arrays = vec![("W0".to_string(), HostArray::from(vec![1.0f32, 2.0])), ("step".into(), HostArray::from(7i64))];
//! checkpoint::save(&path, &arrays).unwrap();
//! assert_eq!(Format::of(&path), Format::Npz);
//! let back = checkpoint::load(&path).unwrap();
//! assert_eq!(back, arrays);
//! let named = checkpoint::select(&path, back, &["step"]).unwrap();
//! assert_eq!(named[0].1, HostArray::from(7i64));
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```
//!
//! **Crash safety.** [`save`] writes a single-file format to a temporary file
//! in the same directory, flushes it to the disk, renames it over `path` (an
//! atomic replacement on POSIX file systems) and flushes the directory: at
//! every instant `path` holds either the previous file or the new one. A
//! directory of `.npy` files is written to a temporary directory, flushed,
//! and swapped in with two renames; a crash between them leaves the previous
//! directory beside `path` as `.<name>.old-<pid>-<n>`.
//!
//! **Hostile files.** Readers take the file's bytes (never more than
//! [`Limits::max_bytes`]); `.npy` element counts are computed with checked
//! arithmetic and compared with the bytes present before anything is
//! allocated; `.npz` members are inflated into buffers that grow with the
//! bytes actually produced, the total capped by [`Limits::max_bytes`];
//! array names that are empty or path-like (a `/`, `\`, NUL, `.` or `..`) are
//! refused, since a directory of `.npy` files turns names into file names.

mod npy;
mod npz;
mod safetensors;

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use popart_ir::DataType;

use crate::HostArray;

/// A file format for named arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// numpy's `.npz` archive (`numpy.load(path)["W0"]`; written uncompressed
    /// as `numpy.savez` does, read compressed or not).
    Npz,
    /// One `.npy` file holding one array (named by the file's stem).
    Npy,
    /// A directory of `<name>.npy` files.
    NpyDir,
    /// Hugging Face's `.safetensors`.
    Safetensors,
}

impl Format {
    /// The format `path`'s extension names (`.npz`, `.npy`, `.safetensors`,
    /// case-insensitive); anything else is a directory of `.npy` files.
    pub fn of(path: &Path) -> Format {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("npz") => Format::Npz,
            Some("npy") => Format::Npy,
            Some("safetensors") => Format::Safetensors,
            _ => Format::NpyDir,
        }
    }
}

/// Bounds on what a reader accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes a file may hold, and bytes its arrays may take once read
    /// (after inflation, for compressed `.npz` members). Default 4 GiB.
    pub max_bytes: usize,
    /// Arrays a file may hold. Default 1,000,000.
    pub max_arrays: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_bytes: 4 << 30, max_arrays: 1_000_000 }
    }
}

/// What went wrong reading or writing named arrays; `file` names the file
/// (and the member, inside an archive).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The file system refused.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// Not a `.npy` file: bad magic string, version or header.
    #[error("{file}: not a .npy file: {reason}")]
    NotNpy {
        /// The file (and member).
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// Not a readable zip archive or safetensors header.
    #[error("{file}: not a readable archive: {reason}")]
    NotArchive {
        /// The file.
        file: String,
        /// The archive reader's message.
        reason: String,
    },
    /// An element type this crate has no counterpart for.
    #[error("{file}: unsupported element type {dtype}")]
    UnsupportedType {
        /// The file (and member).
        file: String,
        /// The type as the file writes it.
        dtype: String,
    },
    /// An element type the format has no counterpart for (float8).
    #[error("{file}: {dtype:?} arrays cannot be stored in {format}")]
    Unrepresentable {
        /// The file (and member).
        file: String,
        /// The array's type.
        dtype: DataType,
        /// The format.
        format: &'static str,
    },
    /// The declared shape does not match the data present.
    #[error("{file}: shape {shape:?} needs {} bytes, the file holds {available}", needed.map_or("more than usize::MAX".to_string(), |n| n.to_string()))]
    DataSize {
        /// The file (and member).
        file: String,
        /// The declared shape.
        shape: Vec<usize>,
        /// Bytes the shape needs (`None`: the count overflows).
        needed: Option<usize>,
        /// Bytes present.
        available: usize,
    },
    /// More bytes or arrays than [`Limits`] allow.
    #[error("{file}: exceeds the limit of {limit} bytes (see checkpoint::Limits)")]
    TooLarge {
        /// The file (and member).
        file: String,
        /// The limit.
        limit: usize,
    },
    /// An empty or path-like array name.
    #[error("{file}: array name {name:?} is empty or path-like (it contains '/', '\\' or NUL, or is '.' or '..')")]
    BadName {
        /// The file.
        file: String,
        /// The name.
        name: String,
    },
    /// Two arrays of one name.
    #[error("{file}: two arrays are named {name:?}")]
    Duplicate {
        /// The file.
        file: String,
        /// The name.
        name: String,
    },
    /// An array asked for is not in the file.
    #[error("{file}: no array named {name:?}")]
    Missing {
        /// The file.
        file: String,
        /// The name.
        name: String,
    },
    /// A single `.npy` file holds exactly one array.
    #[error("{file}: a .npy file holds one array, not {count}")]
    NotOneArray {
        /// The file.
        file: String,
        /// Arrays given.
        count: usize,
    },
    /// Anything else malformed (Fortran order, invalid bool bytes, ...).
    #[error("{file}: {reason}")]
    Malformed {
        /// The file (and member).
        file: String,
        /// What is wrong.
        reason: String,
    },
}

/// Result of this module's functions.
pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;

/// Names a file (and member) in errors.
pub(crate) struct Label<'a> {
    file: &'a str,
    member: Option<&'a str>,
}

impl<'a> Label<'a> {
    fn member(&self, name: &'a str) -> Label<'a> {
        Label { file: self.file, member: Some(name) }
    }
    fn text(&self) -> String {
        match self.member {
            Some(m) => format!("{} (array {m:?})", self.file),
            None => self.file.to_string(),
        }
    }
    fn not_npy(&self, reason: &str) -> CheckpointError {
        CheckpointError::NotNpy { file: self.text(), reason: reason.to_string() }
    }
    fn not_archive(&self, reason: String) -> CheckpointError {
        CheckpointError::NotArchive { file: self.text(), reason }
    }
    fn unsupported(&self, dtype: &str) -> CheckpointError {
        CheckpointError::UnsupportedType { file: self.text(), dtype: dtype.to_string() }
    }
    fn unrepresentable(&self, dtype: DataType, format: &'static str) -> CheckpointError {
        CheckpointError::Unrepresentable { file: self.text(), dtype, format }
    }
    fn data_size(&self, shape: &[usize], needed: Option<usize>, available: usize) -> CheckpointError {
        CheckpointError::DataSize { file: self.text(), shape: shape.to_vec(), needed, available }
    }
    fn too_large(&self, limit: usize) -> CheckpointError {
        CheckpointError::TooLarge { file: self.text(), limit }
    }
    fn duplicate(&self, name: &str) -> CheckpointError {
        CheckpointError::Duplicate { file: self.text(), name: name.to_string() }
    }
    fn other(&self, reason: String) -> CheckpointError {
        CheckpointError::Malformed { file: self.text(), reason }
    }
}

/// Refuse empty and path-like names.
fn check_name(name: &str, what: &Label<'_>) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
        return Err(CheckpointError::BadName { file: what.text(), name: name.to_string() });
    }
    Ok(())
}

fn check_unique<'a>(names: impl IntoIterator<Item = &'a str>, what: &Label<'_>) -> Result<()> {
    let mut seen = HashSet::new();
    for name in names {
        if !seen.insert(name) {
            return Err(what.duplicate(name));
        }
    }
    Ok(())
}

/// The bytes of `arrays` in a single-file `format` (`Npy`: exactly one array,
/// its name unused). A directory of `.npy` files has no single byte form: use
/// [`save`].
pub fn encode(format: Format, arrays: &[(String, HostArray)]) -> Result<Vec<u8>> {
    let what = Label { file: "<memory>", member: None };
    check_unique(arrays.iter().map(|(n, _)| n.as_str()), &what)?;
    match format {
        Format::Npz => npz::encode(arrays, &what),
        Format::Safetensors => safetensors::encode(arrays, &what),
        Format::Npy => match arrays {
            [(_, a)] => npy::encode(a, &what),
            _ => Err(CheckpointError::NotOneArray { file: what.text(), count: arrays.len() }),
        },
        Format::NpyDir => Err(what.other("a directory of .npy files has no single byte form".into())),
    }
}

/// The arrays in `bytes` of a single-file `format`, in the file's order (an
/// `Npy` array is named `"array"`). `bytes` may come from anywhere: nothing is
/// allocated beyond what it holds and `limits` allow.
pub fn decode(format: Format, bytes: &[u8], limits: &Limits) -> Result<Vec<(String, HostArray)>> {
    decode_labelled(format, bytes, limits, &Label { file: "<memory>", member: None }, "array")
}

fn decode_labelled(
    format: Format,
    bytes: &[u8],
    limits: &Limits,
    what: &Label<'_>,
    npy_name: &str,
) -> Result<Vec<(String, HostArray)>> {
    if bytes.len() > limits.max_bytes {
        return Err(what.too_large(limits.max_bytes));
    }
    let arrays = match format {
        Format::Npz => npz::decode(bytes, what, limits)?,
        Format::Safetensors => safetensors::decode(bytes, what)?,
        Format::Npy => vec![(npy_name.to_string(), npy::decode(bytes, what)?)],
        Format::NpyDir => return Err(what.other("a directory of .npy files has no single byte form".into())),
    };
    if arrays.len() > limits.max_arrays {
        return Err(what.other(format!("{} arrays exceed the limit of {}", arrays.len(), limits.max_arrays)));
    }
    check_unique(arrays.iter().map(|(n, _)| n.as_str()), what)?;
    Ok(arrays)
}

/// Write `arrays` to `path` in the format its extension names
/// ([`Format::of`]), replacing any previous file atomically (see the module
/// documentation). Names must be unique, non-empty and not path-like.
pub fn save(path: &Path, arrays: &[(String, HostArray)]) -> Result<()> {
    let shown = path.display().to_string();
    let what = Label { file: &shown, member: None };
    check_unique(arrays.iter().map(|(n, _)| n.as_str()), &what)?;
    for (name, _) in arrays {
        check_name(name, &what)?;
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir).map_err(io_error(&dir))?;
    let stem = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(temp_name(&stem, "tmp"));
    let bytes = match Format::of(path) {
        Format::NpyDir => return save_dir(path, &dir, &tmp, &stem, arrays, &what),
        Format::Npz => npz::encode(arrays, &what)?,
        Format::Safetensors => safetensors::encode(arrays, &what)?,
        Format::Npy => match arrays {
            [(_, a)] => npy::encode(a, &what)?,
            _ => return Err(CheckpointError::NotOneArray { file: shown.clone(), count: arrays.len() }),
        },
    };
    let replaced = write_synced(&tmp, &bytes).and_then(|()| fs::rename(&tmp, path).map_err(io_error(path)));
    if replaced.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    replaced?;
    sync_dir(&dir)
}

/// [`save`] of a directory of `.npy` files: written into `tmp`, flushed, then
/// swapped with the previous directory.
fn save_dir(
    path: &Path,
    dir: &Path,
    tmp: &Path,
    stem: &str,
    arrays: &[(String, HostArray)],
    what: &Label<'_>,
) -> Result<()> {
    let written = (|| {
        fs::create_dir(tmp).map_err(io_error(tmp))?;
        for (name, array) in arrays {
            let bytes = npy::encode(array, &what.member(name))?;
            write_synced(&tmp.join(format!("{name}.npy")), &bytes)?;
        }
        sync_dir(tmp)
    })();
    if written.is_err() {
        let _ = fs::remove_dir_all(tmp);
    }
    written?;
    let old = dir.join(temp_name(stem, "old"));
    let had_old = path.exists();
    if had_old {
        fs::rename(path, &old).map_err(io_error(path))?;
    }
    fs::rename(tmp, path).map_err(io_error(path))?;
    sync_dir(dir)?;
    if had_old {
        fs::remove_dir_all(&old).map_err(io_error(&old))?;
    }
    Ok(())
}

/// Wraps an `io::Error` about `path`.
fn io_error(path: &Path) -> impl FnOnce(io::Error) -> CheckpointError {
    let path = path.to_path_buf();
    move |source| CheckpointError::Io { path, source }
}

/// `.<stem>.<kind>-<pid>-<n>`: unique per process and call.
fn temp_name(stem: &str, kind: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    format!(".{stem}.{kind}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let write = || {
        let mut file = fs::File::create(path)?;
        file.write_all(bytes)?;
        file.sync_all()
    };
    write().map_err(io_error(path))
}

/// Flush a directory's entries (a rename is durable once its directory is).
fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io_error(dir))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Every array in `path` ([`Format::of`] its extension), in the file's order,
/// with the default [`Limits`].
pub fn load(path: &Path) -> Result<Vec<(String, HostArray)>> {
    load_with(path, &Limits::default())
}

/// [`load`] with explicit [`Limits`].
pub fn load_with(path: &Path, limits: &Limits) -> Result<Vec<(String, HostArray)>> {
    let shown = path.display().to_string();
    let what = Label { file: &shown, member: None };
    let read = |p: &Path| -> Result<Vec<u8>> {
        let io_err = |source| CheckpointError::Io { path: p.to_path_buf(), source };
        let len = fs::metadata(p).map_err(io_err)?.len();
        if usize::try_from(len).map_or(true, |l| l > limits.max_bytes) {
            return Err(CheckpointError::TooLarge { file: p.display().to_string(), limit: limits.max_bytes });
        }
        fs::read(p).map_err(io_err)
    };
    match Format::of(path) {
        Format::NpyDir => {
            let entries = fs::read_dir(path).map_err(|source| CheckpointError::Io { path: path.into(), source })?;
            let mut files = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|source| CheckpointError::Io { path: path.into(), source })?;
                let p = entry.path();
                if Format::of(&p) == Format::Npy && !entry.file_name().to_string_lossy().starts_with('.') {
                    files.push(p);
                }
            }
            files.sort();
            if files.len() > limits.max_arrays {
                return Err(what.other(format!("{} arrays exceed the limit of {}", files.len(), limits.max_arrays)));
            }
            let mut total = 0usize;
            let mut arrays = Vec::with_capacity(files.len());
            for p in files {
                let name = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                let bytes = read(&p)?;
                total = total.saturating_add(bytes.len());
                if total > limits.max_bytes {
                    return Err(what.too_large(limits.max_bytes));
                }
                let shown = p.display().to_string();
                arrays.push((name, npy::decode(&bytes, &Label { file: &shown, member: None })?));
            }
            Ok(arrays)
        }
        format => {
            let bytes = read(path)?;
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            decode_labelled(format, &bytes, limits, &what, &stem)
        }
    }
}

/// The arrays `names` of `arrays` (as [`load`] returned them from `path`), in
/// the order of `names`; [`CheckpointError::Missing`] names the first absent.
pub fn select(path: &Path, mut arrays: Vec<(String, HostArray)>, names: &[&str]) -> Result<Vec<(String, HostArray)>> {
    let mut out = Vec::with_capacity(names.len());
    for &name in names {
        let index = arrays
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| CheckpointError::Missing { file: path.display().to_string(), name: name.to_string() })?;
        out.push(arrays.swap_remove(index));
    }
    Ok(out)
}
