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
    /// The most loaded tile (the first of equals).
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
    /// Tiles holding tensors and code.
    pub compute_tiles: u32,
    /// Memory of one tile.
    pub tile_memory_bytes: u64,
    /// Timeline steps of the main program.
    pub steps: u64,
    /// Every program point, in step order.
    pub points: Vec<MemoryPoint>,
    /// The point where the most loaded tile holds the most (what decides whether
    /// the program fits).
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
    /// True when no tile ever holds more than its memory.
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
        Some(OutOfMemory {
            device: device.to_string(),
            step: p.step,
            steps: self.steps,
            tile: p.max_tile,
            tile_bytes: p.max_tile_bytes,
            tile_memory_bytes: self.tile_memory_bytes,
            excess_bytes: p.max_tile_bytes.saturating_sub(self.tile_memory_bytes),
            compute_tiles: self.compute_tiles,
            tensor_bytes: p.tensor_bytes,
            code_bytes: p.code_bytes,
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
    /// The most loaded tile.
    pub tile: u32,
    /// Its bytes.
    pub tile_bytes: u64,
    /// Memory of one tile.
    pub tile_memory_bytes: u64,
    /// `tile_bytes - tile_memory_bytes`.
    pub excess_bytes: u64,
    /// Tiles holding tensors and code.
    pub compute_tiles: u32,
    /// Live tensor bytes over all tiles at the peak.
    pub tensor_bytes: u64,
    /// Live code bytes over all tiles at the peak.
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
        writeln!(
            f,
            "out of memory on {}: tile {} needs {} B of {} B (exceeds by {} B) at timeline step {} of {}",
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

/// The memory model of `exe` with the given spans and code blocks.
pub(crate) fn memory_model(
    exe: &Executable,
    spans: &[TileSpan],
    blocks: Vec<CodeBlock>,
    n: u32,
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
    let mut counter = TileCounter::new(n, grain);
    let (mut tensor_bytes, mut code_bytes) = (0u64, 0u64);
    let mut points: Vec<MemoryPoint> = Vec::new();
    let mut k = 0;
    while k < events.len() {
        let step = events[k].0;
        while k < events.len() && events[k].0 == step {
            let (_, sign, item) = events[k];
            match item {
                Item::Buffer(i) => {
                    let span = spans.get(i).copied().unwrap_or_default();
                    counter.span(span, i128::from(sign));
                    tensor_bytes = apply(tensor_bytes, size(i), sign)?;
                }
                Item::Code(i) => {
                    if let Some(block) = blocks.get(i) {
                        counter.load(&block.load, i128::from(sign));
                        code_bytes = apply(code_bytes, block.bytes, sign)?;
                    }
                }
            }
            k += 1;
        }
        if step < steps.max(1) {
            let (max_tile, max_tile_bytes) = counter.max();
            points.push(MemoryPoint { step, tensor_bytes, code_bytes, max_tile, max_tile_bytes });
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

    let mut tensors_at_peak: Vec<LiveTensor> = Vec::new();
    for (i, b) in exe.buffers.iter().enumerate() {
        let live = match b.kind {
            BufferKind::Activation => {
                exe.lives.get(i).is_some_and(|l| l.iter().any(|&(s, e)| s <= peak.step && peak.step <= e))
            }
            _ => true,
        };
        if live {
            let span = spans.get(i).copied().unwrap_or_default();
            tensors_at_peak.push(LiveTensor {
                buffer: b.id,
                name: b.name(),
                info: b.info.clone(),
                kind: b.kind,
                bytes: b.size as u64,
                tiles: span.tiles(n),
                peak_tile_bytes: span.grains_on(peak.max_tile, n).saturating_mul(grain),
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
                peak_tile_bytes: block.load.on(peak.max_tile, n),
            });
        }
    }
    code_at_peak.sort_by_key(|c| std::cmp::Reverse((c.peak_tile_bytes, c.bytes)));
    Ok(MemoryModel {
        compute_tiles: n,
        tile_memory_bytes,
        steps,
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
