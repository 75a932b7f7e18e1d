//! The estimated timeline: cycles per program step of one run of the main
//! program, with calls expanded in place.
//!
//! **Costs.**
//! - A kernel runs on the tiles of the buffer it writes (see
//!   [`super::tiles`]), `t` tiles: `sync_cycles` + on-chip exchange of its input
//!   bytes at `exchange_bytes_per_cycle` per tile over `t` tiles + its vertex
//!   cycles. FLOP, bytes and engine are the op's [`popart_ir::OpDef::cost`]:
//!   matrix-engine FLOP (matmuls and convolutions: `2 x MACs`, MACs output
//!   elements x the contracted size, gradients the forward product's) run at
//!   `matmul_flops_per_cycle_*` per tile; vector FLOP (by default one per
//!   element of the largest argument) at `vector_flops_per_cycle_*`, and at
//!   least the argument bytes at `load_store_bytes_per_cycle` per tile.
//! - An on-chip copy: `sync_cycles` + bytes at `exchange_bytes_per_cycle` over
//!   the destination's tiles.
//! - An off-chip transfer (remote load/store: streaming memory bandwidth; host
//!   load/store: host link bandwidth; code load: the function's code bytes from
//!   streaming memory): bytes over bandwidth, plus `stream_latency_cycles` once
//!   per *exchange*: adjacent transfers of one sequence on the same tile set are
//!   merged into one exchange paying one latency (seed §9.7.3).
//!
//! **Overlap** (seed §9.7.3). An exchange on IO tiles runs while the compute
//! steps that follow it proceed, as long as they have no data dependency on it:
//! a step that reads or writes a buffer a pending load writes, writes a buffer a
//! pending store reads, or calls a function whose code a pending code load brings
//! in, waits for the exchange to finish; so does any exchange on compute tiles.
//! Cycles of a compute step hide as many pending exchange cycles, oldest first
//! ([`TimelineRow::hidden_cycles`]). Loop and branch boundaries end the overlap.
//!
//! A `Repeat` body's rows are walked once and counted `count` times
//! ([`TimelineRow::repeats`]); an `If` counts its costlier branch.

use std::collections::HashSet;
use std::fmt;

use popart_ir::TileSet;

use super::code::owner;
use super::tiles::TileSpan;
use super::IpuModelConfig;
use crate::executable::{BufferId, Executable, FunctionId, KernelCall, Program};
use popart_ir::{CostEngine, OpCost};

/// What a timeline step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// A kernel on compute tiles.
    Compute,
    /// An on-chip copy.
    Copy,
    /// Host to device.
    HostLoad,
    /// Device to host.
    HostStore,
    /// Streaming memory to tile memory.
    RemoteLoad,
    /// Tile memory to streaming memory.
    RemoteStore,
    /// A function's code from streaming memory.
    CodeLoad,
}

impl StepKind {
    /// True for off-chip transfers.
    pub fn is_exchange(self) -> bool {
        !matches!(self, StepKind::Compute | StepKind::Copy)
    }

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            StepKind::Compute => "compute",
            StepKind::Copy => "copy",
            StepKind::HostLoad => "host_load",
            StepKind::HostStore => "host_store",
            StepKind::RemoteLoad => "remote_load",
            StepKind::RemoteStore => "remote_store",
            StepKind::CodeLoad => "code_load",
        }
    }
}

/// One step of the estimated timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimelineRow {
    /// What it does.
    pub kind: StepKind,
    /// Op type and name, or the transfer.
    pub name: String,
    /// Tiles it runs on.
    pub tiles: TileSet,
    /// Executions per run (product of the enclosing repeat counts).
    pub repeats: u64,
    /// FLOP of one execution (kernels).
    pub flops: u64,
    /// The engine doing a kernel's arithmetic ([`popart_ir::OpCost::engine`];
    /// `None` for copies and transfers).
    pub engine: Option<CostEngine>,
    /// Bytes read and written (kernels), copied or transferred.
    pub bytes: u64,
    /// Cycles on compute tiles (vertices, on-chip exchange, sync).
    pub compute_cycles: u64,
    /// Cycles of off-chip exchange (bandwidth, plus the latency for the first
    /// transfer of an exchange).
    pub exchange_cycles: u64,
    /// Exchange cycles hidden behind later compute (IO tiles only).
    pub hidden_cycles: u64,
    /// The merged exchange it belongs to (numbered from 0 in program order).
    pub exchange: Option<u64>,
}

impl TimelineRow {
    /// Cycles this step adds to one execution: compute + exchange - hidden.
    pub fn cycles(&self) -> u64 {
        self.compute_cycles.saturating_add(self.exchange_cycles).saturating_sub(self.hidden_cycles)
    }
}

/// Totals of one run (every row times its repeats).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TimelineTotals {
    /// Compute cycles.
    pub compute_cycles: u64,
    /// Off-chip exchange cycles.
    pub exchange_cycles: u64,
    /// Exchange cycles hidden behind compute.
    pub hidden_cycles: u64,
    /// compute + exchange - hidden.
    pub total_cycles: u64,
    /// Merged exchanges (each paying one latency).
    pub exchanges: u64,
    /// Off-chip bytes moved.
    pub exchange_bytes: u64,
    /// FLOP.
    pub flops: u64,
    /// FLOP on the matrix engine (matmuls and convolutions): a model FLOP count.
    pub matrix_flops: u64,
    /// `total_cycles` at the clock, in seconds.
    pub seconds: f64,
}

/// The estimated timeline of one run ([`super::IpuModelReport::timeline`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Every step, in program order.
    pub rows: Vec<TimelineRow>,
    /// Totals.
    pub totals: TimelineTotals,
}

/// Exchanges in flight on IO tiles and what they block.
#[derive(Default)]
struct Pending {
    /// (row, cycles not yet hidden).
    rows: Vec<(usize, u64)>,
    loads: HashSet<BufferId>,
    stores: HashSet<BufferId>,
    functions: HashSet<FunctionId>,
}

struct Walker<'a> {
    exe: &'a Executable,
    config: &'a IpuModelConfig,
    spans: &'a [TileSpan],
    /// Code bytes of each function.
    code_bytes: &'a [u64],
    n: u32,
    rows: Vec<TimelineRow>,
    pending: Pending,
    exchanges: u64,
}

fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b.max(1))
}

impl Walker<'_> {
    fn tiles_of(&self, b: BufferId) -> u64 {
        u64::from(self.spans.get(b.index()).map_or(1, |s| s.tiles(self.n)).max(1))
    }

    fn push(&mut self, row: TimelineRow) -> usize {
        self.rows.push(row);
        self.rows.len() - 1
    }

    /// Pending exchanges become visible: nothing more hides them.
    fn flush(&mut self) {
        self.pending = Pending::default();
    }

    /// A compute step reading `reads` and writing `writes` with `cycles`: wait for
    /// the pending exchanges it depends on, or hide pending cycles behind it.
    fn overlap(&mut self, reads: &[BufferId], writes: &[BufferId], cycles: u64) {
        let p = &self.pending;
        let depends =
            reads.iter().chain(writes).any(|b| p.loads.contains(b)) || writes.iter().any(|b| p.stores.contains(b));
        if depends {
            self.flush();
            return;
        }
        let mut budget = cycles;
        for (row, left) in self.pending.rows.iter_mut() {
            let hide = budget.min(*left);
            if hide == 0 {
                continue;
            }
            *left -= hide;
            budget -= hide;
            if let Some(r) = self.rows.get_mut(*row) {
                r.hidden_cycles = r.hidden_cycles.saturating_add(hide);
            }
        }
        self.pending.rows.retain(|&(_, left)| left > 0);
    }

    fn kernel(&mut self, k: &KernelCall, repeats: u64) {
        let c = self.config;
        let tiles = owner(k).map_or(1, |b| self.tiles_of(b));
        let dtype = k.inputs.first().or(k.outputs.first()).map(|a| a.info.dtype);
        let in_bytes = k.inputs.iter().fold(0u64, |acc, a| acc.saturating_add(a.info.nbytes() as u64));
        let OpCost { flops, bytes, engine } = k.cost();
        let vertex = if engine == CostEngine::Matrix {
            let rate = dtype.map_or(c.matmul_flops_per_cycle_fp32, |d| c.matmul_rate(d));
            ceil_div(flops, rate.saturating_mul(tiles))
        } else {
            let rate = dtype.map_or(c.vector_flops_per_cycle_fp32, |d| c.vector_rate(d));
            let alu = ceil_div(flops, rate.saturating_mul(tiles));
            alu.max(ceil_div(bytes, c.load_store_bytes_per_cycle.saturating_mul(tiles)))
        };
        let exchange = ceil_div(in_bytes, c.exchange_bytes_per_cycle.saturating_mul(tiles));
        let compute_cycles = c.sync_cycles.saturating_add(exchange).saturating_add(vertex);
        let reads: Vec<BufferId> = k.inputs.iter().map(|a| a.buffer).collect();
        let writes: Vec<BufferId> = k.outputs.iter().map(|a| a.buffer).collect();
        self.overlap(&reads, &writes, compute_cycles);
        let name = format!("{} {}", k.def.op_type(), k.name);
        self.push(TimelineRow {
            kind: StepKind::Compute,
            name,
            tiles: TileSet::Compute,
            repeats,
            flops,
            engine: Some(engine),
            bytes,
            compute_cycles,
            exchange_cycles: 0,
            hidden_cycles: 0,
            exchange: None,
        });
    }

    fn copy(&mut self, src: BufferId, dst: BufferId, bytes: u64, repeats: u64) {
        let c = self.config;
        let cycles = c
            .sync_cycles
            .saturating_add(ceil_div(bytes, c.exchange_bytes_per_cycle.saturating_mul(self.tiles_of(dst))));
        self.overlap(&[src], &[dst], cycles);
        self.push(TimelineRow {
            kind: StepKind::Copy,
            name: format!("copy b{} -> b{}", src.0, dst.0),
            tiles: TileSet::Compute,
            repeats,
            flops: 0,
            engine: None,
            bytes,
            compute_cycles: cycles,
            exchange_cycles: 0,
            hidden_cycles: 0,
            exchange: None,
        });
    }

    /// An off-chip transfer; `merged` when it continues the previous sibling's exchange.
    fn transfer(&mut self, p: &Program, repeats: u64, merged: bool) -> Option<TileSet> {
        let (c, exe) = (self.config, self.exe);
        let size = |b: &BufferId| exe.buffers.get(b.index()).map_or(0, |b| b.info.nbytes() as u64);
        let (kind, name, bytes, tiles, host) = match p {
            Program::HostToDevice { stream, dst, tiles } => {
                let s = exe.streams.get(stream.index()).map_or("?", |s| s.name.as_str());
                (StepKind::HostLoad, format!("host_load {s} -> b{}", dst.0), size(dst), *tiles, true)
            }
            Program::DeviceToHost { src, stream, tiles } => {
                let s = exe.streams.get(stream.index()).map_or("?", |s| s.name.as_str());
                (StepKind::HostStore, format!("host_store b{} -> {s}", src.0), size(src), *tiles, true)
            }
            Program::RemoteLoad { buffer, offset, dst, tiles } => (
                StepKind::RemoteLoad,
                format!("remote_load r{buffer}[{offset}] -> b{}", dst.0),
                size(dst),
                *tiles,
                false,
            ),
            Program::RemoteStore { src, buffer, offset, tiles } => (
                StepKind::RemoteStore,
                format!("remote_store b{} -> r{buffer}[{offset}]", src.0),
                size(src),
                *tiles,
                false,
            ),
            Program::CodeLoad { function, tiles } => {
                let name = exe.functions.get(function.index()).map_or("?", |f| f.name.as_str());
                let bytes = self.code_bytes.get(function.index()).copied().unwrap_or(0);
                (StepKind::CodeLoad, format!("code_load {name}"), bytes, *tiles, false)
            }
            _ => return None,
        };
        if tiles == TileSet::Compute {
            self.flush();
        }
        if !merged {
            self.exchanges = self.exchanges.saturating_add(repeats);
        }
        let bandwidth = if host { c.host_bytes_per_second } else { c.streaming_bytes_per_second };
        let latency = if merged { 0 } else { c.stream_latency_cycles };
        let exchange_cycles = latency.saturating_add(c.transfer_cycles(bytes, bandwidth));
        let group = self.exchanges.saturating_sub(1);
        let row = self.push(TimelineRow {
            kind,
            name,
            tiles,
            repeats,
            flops: 0,
            engine: None,
            bytes,
            compute_cycles: 0,
            exchange_cycles,
            hidden_cycles: 0,
            exchange: Some(group),
        });
        if tiles == TileSet::Io {
            self.pending.rows.push((row, exchange_cycles));
            match p {
                Program::HostToDevice { dst, .. } | Program::RemoteLoad { dst, .. } => {
                    self.pending.loads.insert(*dst);
                }
                Program::DeviceToHost { src, .. } | Program::RemoteStore { src, .. } => {
                    self.pending.stores.insert(*src);
                }
                Program::CodeLoad { function, .. } => {
                    self.pending.functions.insert(*function);
                }
                _ => {}
            }
        }
        Some(tiles)
    }

    fn program(&mut self, p: &Program, repeats: u64, depth: usize) {
        match p {
            Program::Sequence(v) => {
                // The tile set of the previous sibling when it was a transfer.
                let mut previous: Option<TileSet> = None;
                for q in v {
                    let tiles = transfer_tiles(q);
                    let merged = tiles.is_some() && tiles == previous;
                    previous = if tiles.is_some() { self.transfer(q, repeats, merged) } else { None };
                    if tiles.is_none() {
                        self.program(q, repeats, depth);
                    }
                }
            }
            Program::Execute(k) => self.kernel(k, repeats),
            Program::Copy { src, dst, bytes } => self.copy(*src, *dst, *bytes as u64, repeats),
            Program::Call(f) => {
                if self.pending.functions.contains(f) {
                    self.flush();
                }
                // Functions do not recurse (the IR refuses it); the depth bound
                // only guards against a malformed executable.
                if let Some(func) = self.exe.functions.get(f.index()).filter(|_| depth < 1024) {
                    self.program(&func.body, repeats, depth + 1);
                }
            }
            Program::Repeat { count, body } => {
                self.flush();
                self.program(body, repeats.saturating_mul(*count), depth);
                self.flush();
            }
            Program::If { then_branch, else_branch, .. } => {
                self.flush();
                let start = self.rows.len();
                let exchanges = self.exchanges;
                self.program(then_branch, repeats, depth);
                self.flush();
                let then_rows = self.rows.split_off(start);
                let then_exchanges = std::mem::replace(&mut self.exchanges, exchanges);
                self.program(else_branch, repeats, depth);
                self.flush();
                let cost = |rows: &[TimelineRow]| rows.iter().fold(0u64, |a, r| a.saturating_add(r.cycles()));
                if cost(&then_rows) > cost(&self.rows[start..]) {
                    self.rows.truncate(start);
                    self.rows.extend(then_rows);
                    self.exchanges = then_exchanges;
                }
            }
            other => {
                self.transfer(other, repeats, false);
            }
        }
    }
}

/// The tile set of an off-chip transfer program, `None` for anything else.
fn transfer_tiles(p: &Program) -> Option<TileSet> {
    match p {
        Program::HostToDevice { tiles, .. }
        | Program::DeviceToHost { tiles, .. }
        | Program::RemoteLoad { tiles, .. }
        | Program::RemoteStore { tiles, .. }
        | Program::CodeLoad { tiles, .. } => Some(*tiles),
        _ => None,
    }
}

/// The timeline of one run of `exe`'s main program.
pub(crate) fn timeline(
    exe: &Executable,
    config: &IpuModelConfig,
    spans: &[TileSpan],
    code_bytes: &[u64],
    n: u32,
) -> Timeline {
    let mut w =
        Walker { exe, config, spans, code_bytes, n, rows: Vec::new(), pending: Pending::default(), exchanges: 0 };
    w.program(&exe.programs.main, 1, 0);
    let mut t = TimelineTotals { exchanges: w.exchanges, ..TimelineTotals::default() };
    for r in &w.rows {
        let times = |v: u64| v.saturating_mul(r.repeats);
        t.compute_cycles = t.compute_cycles.saturating_add(times(r.compute_cycles));
        t.exchange_cycles = t.exchange_cycles.saturating_add(times(r.exchange_cycles));
        t.hidden_cycles = t.hidden_cycles.saturating_add(times(r.hidden_cycles));
        t.flops = t.flops.saturating_add(times(r.flops));
        if r.engine == Some(CostEngine::Matrix) {
            t.matrix_flops = t.matrix_flops.saturating_add(times(r.flops));
        }
        if r.kind.is_exchange() {
            t.exchange_bytes = t.exchange_bytes.saturating_add(times(r.bytes));
        }
    }
    t.total_cycles = t.compute_cycles.saturating_add(t.exchange_cycles).saturating_sub(t.hidden_cycles);
    t.seconds = t.total_cycles as f64 / config.clock_hz;
    Timeline { rows: w.rows, totals: t }
}

impl Timeline {
    /// The timeline as a table of at most `max_rows` rows (the rest summed in
    /// one line), then the totals.
    pub fn table(&self, max_rows: usize) -> String {
        let mut s = String::new();
        s += &format!(
            "  {:>4}  {:<12} {:<7} {:>5} {:>12} {:>10} {:>9} {:>9} {:>8} {:>4}  name\n",
            "#", "kind", "tiles", "x", "flop", "bytes", "compute", "exchange", "hidden", "exch"
        );
        for (i, r) in self.rows.iter().enumerate().take(max_rows) {
            let exchange = r.exchange.map_or_else(|| "-".to_string(), |e| e.to_string());
            s += &format!(
                "  {i:>4}  {:<12} {:<7} {:>5} {:>12} {:>10} {:>9} {:>9} {:>8} {exchange:>4}  {}\n",
                r.kind.name(),
                r.tiles.name(),
                r.repeats,
                r.flops,
                r.bytes,
                r.compute_cycles,
                r.exchange_cycles,
                r.hidden_cycles,
                r.name
            );
        }
        let rest = self.rows.len().saturating_sub(max_rows);
        if rest > 0 {
            let cycles = self
                .rows
                .iter()
                .skip(max_rows)
                .fold(0u64, |a, r| a.saturating_add(r.cycles().saturating_mul(r.repeats)));
            s += &format!("  ... {rest} more rows: {cycles} cycles\n");
        }
        let t = &self.totals;
        s += &format!(
            "  total: {} cycles ({:.3} us) = {} compute + {} exchange - {} hidden by overlap; {} exchanges moving {} B; {} FLOP\n",
            t.total_cycles,
            t.seconds * 1e6,
            t.compute_cycles,
            t.exchange_cycles,
            t.hidden_cycles,
            t.exchanges,
            t.exchange_bytes,
            t.flops
        );
        s
    }
}

impl fmt::Display for Timeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table(40))
    }
}
