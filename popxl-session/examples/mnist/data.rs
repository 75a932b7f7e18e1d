//! MNIST IDX files (gzip or plain), normalisation and shuffled batching.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Images normalised like torchvision's `ToTensor` + `Normalize((0.1307,), (0.3081,))`,
/// row-major `[n, 28, 28]`, and labels as i32.
pub struct Split {
    /// `n * 784` normalised pixels.
    pub images: Vec<f32>,
    /// `n` labels in 0..10.
    pub labels: Vec<i32>,
}

impl Split {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }
}

/// Pixels per image.
pub const PIXELS: usize = 28 * 28;
const MEAN: f32 = 0.1307;
const STD: f32 = 0.3081;

fn read_maybe_gz(dir: &Path, stem: &str) -> io::Result<Vec<u8>> {
    let gz = dir.join(format!("{stem}.gz"));
    let plain = dir.join(stem);
    let mut raw = Vec::new();
    if gz.exists() {
        flate2::read::GzDecoder::new(File::open(&gz)?).read_to_end(&mut raw)?;
    } else {
        File::open(&plain)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e} (nor {})", plain.display(), gz.display())))?
            .read_to_end(&mut raw)?;
    }
    Ok(raw)
}

/// Parse an IDX file: returns its dims and the payload bytes (ubyte data only).
fn parse_idx<'a>(raw: &'a [u8], what: &str) -> io::Result<(Vec<usize>, &'a [u8])> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {m}"));
    if raw.len() < 4 || raw[0] != 0 || raw[1] != 0 || raw[2] != 0x08 {
        return Err(bad("not an unsigned-byte IDX file".into()));
    }
    let ndim = raw[3] as usize;
    let header = 4 + 4 * ndim;
    if raw.len() < header {
        return Err(bad("truncated header".into()));
    }
    let dims: Vec<usize> =
        (0..ndim).map(|i| u32::from_be_bytes(raw[4 + 4 * i..8 + 4 * i].try_into().unwrap()) as usize).collect();
    let n: usize = dims.iter().product();
    if raw.len() != header + n {
        return Err(bad(format!("expected {} payload bytes for dims {dims:?}, found {}", n, raw.len() - header)));
    }
    Ok((dims, &raw[header..]))
}

/// Load `{prefix}-images-idx3-ubyte[.gz]` and `{prefix}-labels-idx1-ubyte[.gz]` from `dir`.
pub fn load_split(dir: &Path, prefix: &str) -> io::Result<Split> {
    let img_raw = read_maybe_gz(dir, &format!("{prefix}-images-idx3-ubyte"))?;
    let lbl_raw = read_maybe_gz(dir, &format!("{prefix}-labels-idx1-ubyte"))?;
    let (idims, pix) = parse_idx(&img_raw, "images")?;
    let (ldims, lbl) = parse_idx(&lbl_raw, "labels")?;
    if idims.len() != 3 || idims[1] * idims[2] != PIXELS || ldims.len() != 1 || ldims[0] != idims[0] {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected MNIST dims: images {idims:?}, labels {ldims:?}"),
        ));
    }
    let images = pix.iter().map(|&p| (p as f32 / 255.0 - MEAN) / STD).collect();
    let labels = lbl.iter().map(|&l| l as i32).collect();
    Ok(Split { images, labels })
}

/// A small deterministic generator (SplitMix64) for shuffling and initialisation.
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// The generator's whole state (what a checkpoint saves to resume the data order).
    pub fn state(&self) -> u64 {
        self.0
    }

    /// The generator in `state` (from [`Rng::state`]).
    pub fn from_state(state: u64) -> Self {
        Rng(state)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(f64::MIN_POSITIVE);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// A uniformly random permutation of 0..n (Fisher-Yates).
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
        v
    }
}

/// Copy the samples `idx` into contiguous image and label buffers.
pub fn gather(split: &Split, idx: &[usize], images: &mut Vec<f32>, labels: &mut Vec<i32>) {
    images.clear();
    labels.clear();
    for &i in idx {
        images.extend_from_slice(&split.images[i * PIXELS..(i + 1) * PIXELS]);
        labels.push(split.labels[i]);
    }
}
