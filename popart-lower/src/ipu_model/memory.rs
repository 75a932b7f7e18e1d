//! Tile memory per program point: live tensors (the memory plan's buffers and
//! their lifetimes) plus live code (the code-size estimate and code liveness),
//! in total and on the most loaded tile.
//!
//! Variables and constants are live at every step, activation buffers over
//! their live intervals (`Executable::lives`), function code over its
//! [`crate::CodeLiveness::live`] intervals when some `RemoteCodeLoad` loads it
//! (always otherwise), `main` and `codelets` always. Live bytes count buffers,
//! not the arena: the tile mapping gives each buffer its own tiles, whatever
//! arena offset the plan reuses. Remote buffers live in streaming memory and
//! take no tile memory.
//!
//! With several IPUs (ops placed with `ipu(n)`), each buffer and kernel's code
//! lies on its IPU's tiles ([`crate::Buffer::ipu`]): every point records the
//! most loaded tile over all IPUs, and [`MemoryModel::ipu_peaks`] the peak of
//! each IPU, so a program fits when every IPU's most loaded tile does.

use std::fmt;

use popart_ir::{SizeError, TensorInfo};

use super::code::CodeBlock;
use super::tiles::{TileCounter, TileSpan};
use crate::executable::{BufferId, BufferKind, Executable, FunctionId};

/// Live bytes at one program point (a timeline step where something starts or
/// ends being live; the values hold until the next point).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryPoint {
    /// Timeline step.
    pub step: u64,
    /// Live tensor bytes over all tiles.
    pub tensor_bytes: u64,
    /// Live code bytes over all tiles.
    pub code_bytes: u64,
    /// The IPU of the most loaded tile (0 with one IPU).
    pub ipu: u32,
    /// The most loaded tile (the first of equals), numbered within its IPU.
    pub max_tile: u32,
    /// Tensor and code bytes on that tile.
    pub max_tile_bytes: u64,
}

impl MemoryPoint {
    /// Tensor and code bytes (saturating).
    pub fn total_bytes(&self) -> u64 {
        self.tensor_bytes.saturating_add(self.code_bytes)
    }
}

/// A tensor buffer live at the peak.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveTensor {
    /// The buffer.
    pub buffer: BufferId,
    /// Its name (first member tensor, `graph/tensor`).
    pub name: String,
    /// Type and shape.
    pub info: TensorInfo,
    /// Variable, constant or activation.
    pub kind: BufferKind,
    /// Bytes over all tiles.
    pub bytes: u64,
    /// The IPU holding it.
    pub ipu: u32,
    /// Tiles it is spread over.
    pub tiles: u32,
    /// Its bytes on the peak tile.
    pub peak_tile_bytes: u64,
}

/// A block of code live at the peak.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveCode {
    /// `main`, `codelets` or the function's graph name.
    pub name: String,
    /// The function, for function code.
    pub function: Option<FunctionId>,
    /// Loaded by `RemoteCodeLoad` (else always live).
    pub loaded: bool,
    /// Bytes over all tiles.
    pub bytes: u64,
    /// Its bytes on the peak tile.
    pub peak_tile_bytes: u64,
}

/// Tile memory over the program ([`super::IpuModelReport::memory`]).
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryModel {
    /// Tiles holding tensors and code, per IPU.
    pub compute_tiles: u32,
    /// Memory of one tile.
    pub tile_memory_bytes: u64,
    /// Timeline steps of the main program.
    pub steps: u64,
    /// The peak of each IPU, by IPU (one entry per IPU of a replica, from 0 to
    /// the largest [`crate::Buffer::ipu`]): the first point where that IPU's
    /// most loaded tile holds most, with that IPU's own live tensor and code
    /// bytes. With one IPU, `[peak]`.
    pub ipu_peaks: Vec<MemoryPoint>,
    /// Every program point, in step order.
    pub points: Vec<MemoryPoint>,
    /// The point where the most loaded tile (of any IPU) holds the most (what
    /// decides whether the program fits); its byte counts are over every IPU.
    pub peak: MemoryPoint,
    /// The point with the most live bytes over all tiles.
    pub peak_total: MemoryPoint,
    /// Tensors live at [`MemoryModel::peak`], most bytes on the peak tile first.
    pub tensors_at_peak: Vec<LiveTensor>,
    /// Code live at [`MemoryModel::peak`], most bytes on the peak tile first.
    pub code_at_peak: Vec<LiveCode>,
    /// Every code block: functions in order, `main`, `codelets`.
    pub code_blocks: Vec<CodeBlock>,
}

impl MemoryModel {
    /// True when no tile of any IPU ever holds more than its memory.
    pub fn fits(&self) -> bool {
        self.peak.max_tile_bytes <= self.tile_memory_bytes
    }

    /// The out-of-memory report when the program does not fit (`device` names
    /// the modelled IPU).
    pub fn out_of_memory(&self, device: &str) -> Option<OutOfMemory> {
        if self.fits() {
            return None;
        }
        let p = self.peak;
        let on_ipu = self.ipu_peaks.get(p.ipu as usize).filter(|q| q.step == p.step).copied().unwrap_or(p);
        Some(OutOfMemory {
            device: device.to_string(),
            step: p.step,
            steps: self.steps,
            ipus: u32::try_from(self.ipu_peaks.len()).unwrap_or(u32::MAX).max(1),
            ipu: p.ipu,
            tile: p.max_tile,
            tile_bytes: p.max_tile_bytes,
            tile_memory_bytes: self.tile_memory_bytes,
            excess_bytes: p.max_tile_bytes.saturating_sub(self.tile_memory_bytes),
            compute_tiles: self.compute_tiles,
            tensor_bytes: on_ipu.tensor_bytes,
            code_bytes: on_ipu.code_bytes,
            tensors: self.tensors_at_peak.iter().take(OutOfMemory::LISTED).cloned().collect(),
            more_tensors: self.tensors_at_peak.len().saturating_sub(OutOfMemory::LISTED),
            code: self.code_at_peak.iter().take(OutOfMemory::LISTED).cloned().collect(),
        })
    }
}

/// A program that does not fit in tile memory: where it peaks, by how much,
/// and what is live there (as Poplar's out-of-memory report).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The modelled IPU.
    pub device: String,
    /// Timeline step of the peak.
    pub step: u64,
    /// Timeline steps of the program.
    pub steps: u64,
    /// IPUs of one replica (1 without `ipu(n)` placements).
    pub ipus: u32,
    /// The IPU of the most loaded tile.
    pub ipu: u32,
    /// The most loaded tile (of that IPU).
    pub tile: u32,
    /// Its bytes.
    pub tile_bytes: u64,
    /// Memory of one tile.
    pub tile_memory_bytes: u64,
    /// `tile_bytes - tile_memory_bytes`.
    pub excess_bytes: u64,
    /// Tiles holding tensors and code, per IPU.
    pub compute_tiles: u32,
    /// Live tensor bytes over all tiles of that IPU at the peak.
    pub tensor_bytes: u64,
    /// Live code bytes over all tiles of that IPU at the peak.
    pub code_bytes: u64,
    /// The largest tensors live there (most bytes on the tile first).
    pub tensors: Vec<LiveTensor>,
    /// Live tensors not listed.
    pub more_tensors: usize,
    /// The largest code blocks live there.
    pub code: Vec<LiveCode>,
}

impl OutOfMemory {
    /// Tensors and code blocks the report lists.
    pub const LISTED: usize = 8;
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ipu = if self.ipus > 1 { format!("IPU {} ", self.ipu) } else { String::new() };
        writeln!(
            f,
            "out of memory on {}: {ipu}tile {} needs {} B of {} B (exceeds by {} B) at timeline step {} of {}",
            self.device, self.tile, self.tile_bytes, self.tile_memory_bytes, self.excess_bytes, self.step, self.steps
        )?;
        writeln!(
            f,
            "  live there over {} tiles: {} B of tensors, {} B of code",
            self.compute_tiles, self.tensor_bytes, self.code_bytes
        )?;
        writeln!(f, "  largest tensors (bytes on tile {}, total bytes, tiles):", self.tile)?;
        for t in &self.tensors {
            let kind = t.kind.short_name();
            writeln!(
                f,
                "    {:>10} {:>14} {:>6}  {kind:<5} {} {}",
                t.peak_tile_bytes, t.bytes, t.tiles, t.info, t.name
            )?;
        }
        if self.more_tensors > 0 {
            writeln!(f, "    ... and {} more tensors", self.more_tensors)?;
        }
        writeln!(f, "  code (bytes on tile {}, total bytes):", self.tile)?;
        for c in &self.code {
            let how = if c.loaded { " (loaded)" } else { "" };
            writeln!(f, "    {:>10} {:>14}  {}{how}", c.peak_tile_bytes, c.bytes, c.name)?;
        }
        write!(
            f,
            "  reduce live memory at that step: offload tensors to remote buffers, load code with remote_code_load"
        )
    }
}

/// What an event adds or removes.
#[derive(Clone, Copy)]
enum Item {
    Buffer(usize),
    Code(usize),
}

fn overflow() -> SizeError {
    SizeError::Overflow { what: "the live bytes of the ipu_model memory model".to_string() }
}

/// The memory model of `exe` with the given spans and code blocks, over
/// `ipus` IPUs of `n` tiles.
pub(crate) fn memory_model(
    exe: &Executable,
    spans: &[TileSpan],
    blocks: Vec<CodeBlock>,
    (n, ipus): (u32, u32),
    grain: u64,
    tile_memory_bytes: u64,
) -> Result<MemoryModel, SizeError> {
    let steps = exe.timeline_steps;
    let mut events: Vec<(u64, i8, Item)> = Vec::new();
    for (i, b) in exe.buffers.iter().enumerate() {
        match b.kind {
            BufferKind::Variable | BufferKind::Constant => events.push((0, 1, Item::Buffer(i))),
            BufferKind::Activation => {
                for &(s, e) in exe.lives.get(i).map(Vec::as_slice).unwrap_or(&[]) {
                    events.push((s, 1, Item::Buffer(i)));
                    events.push((e.saturating_add(1), -1, Item::Buffer(i)));
                }
            }
        }
    }
    for (i, block) in blocks.iter().enumerate() {
        let live = block.function.and_then(|f| exe.code.iter().find(|c| c.function == f && c.loaded));
        match live {
            Some(c) => {
                for &(s, e) in &c.live {
                    events.push((s, 1, Item::Code(i)));
                    events.push((e.saturating_add(1), -1, Item::Code(i)));
                }
            }
            None => events.push((0, 1, Item::Code(i))),
        }
    }
    // Removals first at a step, so a point never counts a buffer twice.
    events.sort_by_key(|&(step, sign, _)| (step, sign));

    let size = |i: usize| exe.buffers.get(i).map_or(0, |b| b.size as u64);
    let span_of = |i: usize| spans.get(i).copied().unwrap_or_default();
    let k = ipus.max(1) as usize;
    // Code bytes of each block on each IPU.
    let block_ipu_bytes: Vec<Vec<u64>> = blocks
        .iter()
        .map(|b| (0..ipus.max(1)).map(|i| b.load.total_on(i, n)).collect::<Result<_, _>>())
        .collect::<Result<_, _>>()?;
    let mut counter = TileCounter::new(n, ipus, grain);
    let (mut tensor_bytes, mut code_bytes) = (0u64, 0u64);
    // Per IPU: live tensor and code bytes, and the peak so far.
    let (mut ipu_tensor, mut ipu_code) = (vec![0u64; k], vec![0u64; k]);
    let mut ipu_peaks: Vec<Option<MemoryPoint>> = vec![None; k];
    let mut points: Vec<MemoryPoint> = Vec::new();
    let mut e = 0;
    while e < events.len() {
        let step = events[e].0;
        while e < events.len() && events[e].0 == step {
            let (_, sign, item) = events[e];
            match item {
                Item::Buffer(i) => {
                    let span = span_of(i);
                    counter.span(span, i128::from(sign));
                    tensor_bytes = apply(tensor_bytes, size(i), sign)?;
                    if let Some(t) = ipu_tensor.get_mut(span.ipu as usize) {
                        *t = apply(*t, size(i), sign)?;
                    }
                }
                Item::Code(i) => {
                    if let Some(block) = blocks.get(i) {
                        counter.load(&block.load, i128::from(sign));
                        code_bytes = apply(code_bytes, block.bytes, sign)?;
                        for (c, &bytes) in ipu_code.iter_mut().zip(&block_ipu_bytes[i]) {
                            *c = apply(*c, bytes, sign)?;
                        }
                    }
                }
            }
            e += 1;
        }
        if step < steps.max(1) {
            let (ipu, max_tile, max_tile_bytes) = counter.max();
            points.push(MemoryPoint { step, tensor_bytes, code_bytes, ipu, max_tile, max_tile_bytes });
            for (i, best) in ipu_peaks.iter_mut().enumerate() {
                let ipu = u32::try_from(i).unwrap_or(u32::MAX);
                let (max_tile, max_tile_bytes) = counter.max_on(ipu);
                if !matches!(best, Some(b) if b.max_tile_bytes >= max_tile_bytes) {
                    let (tensor_bytes, code_bytes) = (ipu_tensor[i], ipu_code[i]);
                    *best = Some(MemoryPoint { step, tensor_bytes, code_bytes, ipu, max_tile, max_tile_bytes });
                }
            }
        }
    }
    let first_max = |key: fn(&MemoryPoint) -> u64| {
        points.iter().fold(None::<MemoryPoint>, |best, p| match best {
            Some(b) if key(&b) >= key(p) => Some(b),
            _ => Some(*p),
        })
    };
    let peak = first_max(|p| p.max_tile_bytes).unwrap_or_default();
    let peak_total = first_max(MemoryPoint::total_bytes).unwrap_or_default();
    let ipu_peaks: Vec<MemoryPoint> = if k == 1 { vec![peak] } else { ipu_peaks.into_iter().flatten().collect() };

    let mut tensors_at_peak: Vec<LiveTensor> = Vec::new();
    for (i, b) in exe.buffers.iter().enumerate() {
        let live = match b.kind {
            BufferKind::Activation => {
                exe.lives.get(i).is_some_and(|l| l.iter().any(|&(s, e)| s <= peak.step && peak.step <= e))
            }
            _ => true,
        };
        if live {
            let span = span_of(i);
            let on_peak_tile = if span.ipu == peak.ipu { span.grains_on(peak.max_tile, n) } else { 0 };
            tensors_at_peak.push(LiveTensor {
                buffer: b.id,
                name: b.name(),
                info: b.info.clone(),
                kind: b.kind,
                bytes: b.size as u64,
                ipu: span.ipu,
                tiles: span.tiles(n),
                peak_tile_bytes: on_peak_tile.saturating_mul(grain),
            });
        }
    }
    tensors_at_peak
        .sort_by(|a, b| (b.peak_tile_bytes, b.bytes).cmp(&(a.peak_tile_bytes, a.bytes)).then(a.buffer.cmp(&b.buffer)));
    let mut code_at_peak: Vec<LiveCode> = Vec::new();
    for block in &blocks {
        let live = match block.function.and_then(|f| exe.code.iter().find(|c| c.function == f && c.loaded)) {
            Some(c) => c.live.iter().any(|&(s, e)| s <= peak.step && peak.step <= e),
            None => true,
        };
        if live && block.bytes > 0 {
            code_at_peak.push(LiveCode {
                name: block.name.clone(),
                function: block.function,
                loaded: block.loaded,
                bytes: block.bytes,
                peak_tile_bytes: block.load.on(peak.ipu, peak.max_tile, n),
            });
        }
    }
    code_at_peak.sort_by_key(|c| std::cmp::Reverse((c.peak_tile_bytes, c.bytes)));
    Ok(MemoryModel {
        compute_tiles: n,
        tile_memory_bytes,
        steps,
        ipu_peaks,
        points,
        peak,
        peak_total,
        tensors_at_peak,
        code_at_peak,
        code_blocks: blocks,
    })
}

/// `total + bytes` or `total - bytes` (checked; removals never go below zero).
fn apply(total: u64, bytes: u64, sign: i8) -> Result<u64, SizeError> {
    if sign > 0 {
        total.checked_add(bytes).ok_or_else(overflow)
    } else {
        Ok(total.saturating_sub(bytes))
    }
}
