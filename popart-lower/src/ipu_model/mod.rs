//! An IPU model: whether an [`Executable`] fits in an IPU's tile memory, and
//! where its time goes. A pure function of the executable and an
//! [`IpuModelConfig`] ([`estimate`]); the `ipu_model` device of `popxl-session`
//! refuses programs that do not fit and shows this report.
//!
//! - [`config`]: the figures (Mk2 GC200 by default) and their sources;
//! - `tiles`: the tile mapping (grains dealt round-robin over the compute tiles);
//! - `code`: the code-size estimate (per function, `main` and codelets);
//! - [`memory`]: live tensor and code bytes per program point, in total and on
//!   the most loaded tile, and the out-of-memory report;
//! - [`timeline`]: compute and exchange cycles per program step, with merged
//!   exchanges and IO-tile overlap (PopXL user guide §9.7.3).
//!
//! **Invariants.** The model reads the executable only; it never changes values
//! or the memory plan. Every live byte it counts is a buffer of the plan or a
//! block of the code estimate, live exactly where the plan's lifetimes and the
//! code-liveness analysis say; on a program point the most loaded tile's bytes
//! are at most the total. Byte sums are checked (an overflow is an error);
//! cycle counts saturate.
//!
//! ```
//! use popart_ir::{AttrValue, Attributes, DataType, Ir, StreamDirection, TensorInfo, TensorKind};
//! let mut ir = Ir::new();
//! let main = ir.main_graph_id();
//! let info = TensorInfo::new(DataType::Float32, [1024]);
//! ir.main_graph_mut().add_tensor("x", info.clone(), TensorKind::Stream(StreamDirection::HostToDevice)).unwrap();
//! ir.main_graph_mut().add_tensor("y", info, TensorKind::Stream(StreamDirection::DeviceToHost)).unwrap();
//! let load = ir.create_op(main, "HostLoad", Attributes::new().with("stream", AttrValue::Str("x".into())), &[], "load").unwrap();
//! let x = ir.main_graph().op(load).unwrap().output(0).unwrap();
//! let relu = ir.create_op(main, "Relu", Attributes::new(), &[(0, x)], "relu").unwrap();
//! let y = ir.main_graph().op(relu).unwrap().output(0).unwrap();
//! ir.create_op(main, "HostStore", Attributes::new().with("stream", AttrValue::Str("y".into())), &[(0, y)], "store").unwrap();
//! let exe = popart_lower::lower(&ir).unwrap();
//! let report = popart_lower::ipu_model::estimate(&exe, &Default::default()).unwrap();
//! assert!(report.memory.fits());
//! assert_eq!(report.memory.peak.tensor_bytes, 8192); // x and y, 4 KiB each
//! assert_eq!(report.timeline.totals.exchanges, 2); // the host load and the host store
//! println!("{report}");
//! ```

mod code;
pub mod config;
pub mod memory;
mod tiles;
pub mod timeline;

use std::fmt;

use popart_ir::{SizeError, TileSet};

pub use code::CodeBlock;
pub use config::IpuModelConfig;
pub use memory::{LiveCode, LiveTensor, MemoryModel, MemoryPoint, OutOfMemory};
pub use tiles::TileSpan;
pub use timeline::{StepKind, Timeline, TimelineRow, TimelineTotals};

use crate::executable::{Executable, Program};

/// Why a model could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IpuModelError {
    /// A figure of the config is unusable (zero tiles, a zero rate...).
    #[error("invalid ipu_model config: {0}")]
    InvalidConfig(String),
    /// Live bytes overflow a 64-bit count.
    #[error(transparent)]
    Size(#[from] SizeError),
    /// Buffers lie on more IPUs than the model handles ([`MAX_IPUS`]).
    #[error("the program uses IPU {ipu}; the ipu_model models at most {MAX_IPUS} IPUs per replica")]
    TooManyIpus {
        /// The largest IPU a buffer lies on.
        ipu: u32,
    },
}

/// The most IPUs per replica the model handles (more than any IPU system has;
/// the model keeps a counter per tile of every IPU).
pub const MAX_IPUS: u32 = 1024;

/// The model of one executable: memory and timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct IpuModelReport {
    /// The figures used.
    pub config: IpuModelConfig,
    /// Some program places transfers on IO tiles (then `config.io_tiles` tiles
    /// are reserved for IO).
    pub uses_io_tiles: bool,
    /// Where each buffer lies (by buffer id).
    pub spans: Vec<TileSpan>,
    /// Tile memory per program point.
    pub memory: MemoryModel,
    /// Cycles of one run.
    pub timeline: Timeline,
}

/// True when some program of `exe` runs a transfer on IO tiles.
fn uses_io_tiles(exe: &Executable) -> bool {
    let mut io = false;
    let mut note = |p: &Program| {
        io |= matches!(
            p,
            Program::HostToDevice { tiles: TileSet::Io, .. }
                | Program::DeviceToHost { tiles: TileSet::Io, .. }
                | Program::RemoteLoad { tiles: TileSet::Io, .. }
                | Program::RemoteStore { tiles: TileSet::Io, .. }
                | Program::CodeLoad { tiles: TileSet::Io, .. }
        )
    };
    exe.programs.main.visit(&mut note);
    exe.functions.iter().for_each(|f| f.body.visit(&mut note));
    io
}

/// Model `exe` on the IPU `config` describes: tile mapping, code sizes, live
/// memory per program point and the timeline of one run. A program whose
/// buffers lie on several IPUs ([`crate::Buffer::ipu`]) is modelled on that
/// many IPUs of this kind, each with its own tiles
/// ([`MemoryModel::ipu_peaks`]).
pub fn estimate(exe: &Executable, config: &IpuModelConfig) -> Result<IpuModelReport, IpuModelError> {
    let io = uses_io_tiles(exe);
    config.validate_for(io).map_err(IpuModelError::InvalidConfig)?;
    let n = config.compute_tiles(io);
    // The IPUs of one replica that hold something.
    let max_ipu = exe.buffers.iter().map(|b| b.ipu).max().unwrap_or(0);
    if max_ipu >= MAX_IPUS {
        return Err(IpuModelError::TooManyIpus { ipu: max_ipu });
    }
    let ipus = max_ipu + 1;
    let spans = tiles::map_buffers(exe.buffers.iter().map(|b| (b.size as u64, b.ipu)), config.grain_bytes, n);
    let blocks = code::code_blocks(exe, config, &spans, n, ipus)?;
    let code_bytes: Vec<u64> = exe.functions.iter().map(|f| blocks.get(f.id.index()).map_or(0, |b| b.bytes)).collect();
    let memory = memory::memory_model(exe, &spans, blocks, (n, ipus), config.grain_bytes, config.tile_memory_bytes)?;
    let timeline = timeline::timeline(exe, config, &spans, &code_bytes, n);
    Ok(IpuModelReport { config: config.clone(), uses_io_tiles: io, spans, memory, timeline })
}

impl IpuModelReport {
    /// The memory summary: at most `max_points` program points (those where the
    /// most loaded tile changes most are kept when there are more), the peak and
    /// what is live there.
    pub fn memory_table(&self, max_points: usize) -> String {
        let (m, c) = (&self.memory, &self.config);
        let pct = |b: u64| 100.0 * b as f64 / m.tile_memory_bytes.max(1) as f64;
        let mut s = String::new();
        s += &format!(
            "ipu_model {}: {} tiles ({} for compute{}) x {} B, {} GHz\n",
            c.name,
            c.tiles,
            m.compute_tiles,
            if self.uses_io_tiles { ", the rest IO" } else { "" },
            c.tile_memory_bytes,
            c.clock_hz / 1e9
        );
        let p = m.peak;
        let multi = m.ipu_peaks.len() > 1;
        let tile = |q: &MemoryPoint| if multi { format!("{}:{}", q.ipu, q.max_tile) } else { q.max_tile.to_string() };
        s += &format!(
            "memory: {}: peak tile {} holds {} B of {} B ({:.1}%) at step {} of {}; live there {} B tensors + {} B code\n",
            if m.fits() { "fits" } else { "DOES NOT FIT" },
            tile(&p),
            p.max_tile_bytes,
            m.tile_memory_bytes,
            pct(p.max_tile_bytes),
            p.step,
            m.steps,
            p.tensor_bytes,
            p.code_bytes
        );
        if multi {
            for q in &m.ipu_peaks {
                s += &format!(
                    "  ipu {}: peak tile {} holds {} B ({:.1}%) at step {}; live there {} B tensors + {} B code\n",
                    q.ipu,
                    q.max_tile,
                    q.max_tile_bytes,
                    pct(q.max_tile_bytes),
                    q.step,
                    q.tensor_bytes,
                    q.code_bytes
                );
            }
        }
        s += &format!(
            "  most live bytes over all tiles: {} B at step {}\n",
            m.peak_total.total_bytes(),
            m.peak_total.step
        );
        s += &format!("  {:>8}  {:>14}  {:>12}  {:>14}  {:>6}\n", "step", "tensors B", "code B", "max tile B", "tile");
        let mut shown: Vec<&MemoryPoint> = m.points.iter().collect();
        if shown.len() > max_points {
            // Keep the largest points, in step order.
            shown.sort_by(|a, b| b.max_tile_bytes.cmp(&a.max_tile_bytes).then(a.step.cmp(&b.step)));
            shown.truncate(max_points);
            shown.sort_by_key(|p| p.step);
        }
        for q in &shown {
            let mark = if q.step == p.step { "  <- peak" } else { "" };
            s += &format!(
                "  {:>8}  {:>14}  {:>12}  {:>14}  {:>6}{mark}\n",
                q.step,
                q.tensor_bytes,
                q.code_bytes,
                q.max_tile_bytes,
                tile(q)
            );
        }
        if m.points.len() > shown.len() {
            s += &format!("  ({} of {} points shown: the largest)\n", shown.len(), m.points.len());
        }
        s += &format!("  code blocks: {:>12}  {:>10}  name\n", "bytes", "max tile");
        for b in &m.code_blocks {
            let how = if b.loaded { " (loaded)" } else { "" };
            s += &format!("               {:>12}  {:>10}  {}{how}\n", b.bytes, b.max_tile_bytes, b.name);
        }
        s
    }
}

impl fmt::Display for IpuModelReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.memory_table(12))?;
        writeln!(f, "timeline (one run, cycles at {} GHz):", self.config.clock_hz / 1e9)?;
        f.write_str(&self.timeline.table(40))
    }
}
