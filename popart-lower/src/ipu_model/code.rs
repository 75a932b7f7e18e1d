//! The code-size estimate: bytes of code per function, per tile.
//!
//! Poplar compiles each program into control code (run by every tile),
//! compute sets of vertices (state and code on the tiles they run on) and
//! exchange code. The estimate, per program body (not following calls):
//!
//! - every program step (kernel, copy, transfer, call, repeat, if) adds
//!   [`IpuModelConfig::control_bytes_per_step`] on every compute tile;
//! - a kernel adds [`IpuModelConfig::vertex_bytes_per_tile`] on each tile of
//!   the buffer it writes (its largest output; an op with no output, its
//!   largest input): one tile slice per tile;
//! - a copy or an off-chip transfer adds
//!   [`IpuModelConfig::transfer_code_bytes_per_tile`] on each tile of the tile
//!   memory buffer it writes or reads;
//! - each vertex type (op type) adds its codelet once on every tile where one
//!   of its instances runs ([`IpuModelConfig::matmul_codelet_bytes`] for
//!   op types whose cost runs on the matrix engine, matmuls and convolutions
//!   ([`popart_ir::OpDef::cost`]), [`IpuModelConfig::codelet_bytes`] otherwise).
//!
//! Blocks: one per function (what a code load brings in and liveness frees),
//! `main` (the engine programs: main, init and the weight programs; always
//! live) and `codelets` (shared by every program, always live: Poplar does not
//! offload them).
//!
//! With several IPUs, a kernel's or copy's code lies on the tiles of the IPU of
//! the buffer it writes, and control code on every tile of every IPU (each
//! runs the program's control flow).

use std::collections::HashMap;

use popart_ir::{CostEngine, OpDefId, SizeError};

use super::tiles::{TileLoad, TileSpan};
use super::IpuModelConfig;
use crate::executable::{BufferId, Executable, FunctionId, KernelCall, Program};

/// The buffer a kernel writes (its largest output, else its largest input):
/// where it runs.
pub(crate) fn owner(k: &KernelCall) -> Option<BufferId> {
    let largest = |v: &[crate::Arg]| v.iter().max_by_key(|a| a.info.nbytes()).map(|a| a.buffer);
    largest(&k.outputs).or_else(|| largest(&k.inputs))
}

/// One block of code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeBlock {
    /// `main`, `codelets`, or the function's graph name.
    pub name: String,
    /// The function, for function code.
    pub function: Option<FunctionId>,
    /// Some `RemoteCodeLoad` loads it (it is live only where [`crate::CodeLiveness`] says).
    pub loaded: bool,
    /// Bytes over all tiles.
    pub bytes: u64,
    /// Bytes on its most loaded tile.
    pub max_tile_bytes: u64,
    pub(crate) load: TileLoad,
}

/// Builds the blocks.
struct Estimate<'a> {
    exe: &'a Executable,
    config: &'a IpuModelConfig,
    spans: &'a [TileSpan],
    n: u32,
    ipus: u32,
    /// Tiles running each vertex type (IPU after IPU), and whether it is an AMP type.
    codelets: HashMap<OpDefId, (Vec<bool>, bool)>,
}

impl Estimate<'_> {
    fn span_of(&self, b: BufferId) -> TileSpan {
        self.spans.get(b.index()).copied().unwrap_or_default()
    }

    fn on_buffer(&self, load: &mut TileLoad, b: BufferId, bytes: u64) {
        let span = self.span_of(b);
        load.add_range(span.ipu, span.start, span.tiles(self.n), bytes, self.n);
    }

    fn program(&mut self, p: &Program, load: &mut TileLoad) {
        let (n, c) = (self.n, self.config);
        if !matches!(p, Program::Sequence(_)) {
            load.uniform = load.uniform.saturating_add(c.control_bytes_per_step);
        }
        match p {
            Program::Sequence(v) => v.iter().for_each(|q| self.program(q, load)),
            Program::Execute(k) => {
                let Some(b) = owner(k) else { return };
                self.on_buffer(load, b, c.vertex_bytes_per_tile);
                let span = self.span_of(b);
                let amp = k.cost().engine == CostEngine::Matrix;
                let all = n as usize * self.ipus as usize;
                let (tiles, _) = self.codelets.entry(k.def.id()).or_insert_with(|| (vec![false; all], amp));
                let (start, count) = (span.start as usize, span.tiles(n) as usize);
                let first = span.ipu as usize * n as usize;
                for i in 0..count {
                    if let Some(t) = tiles.get_mut(first + (start + i) % (n as usize).max(1)) {
                        *t = true;
                    }
                }
            }
            Program::Copy { dst: b, .. }
            | Program::HostToDevice { dst: b, .. }
            | Program::RemoteLoad { dst: b, .. }
            | Program::DeviceToHost { src: b, .. }
            | Program::RemoteStore { src: b, .. } => self.on_buffer(load, *b, c.transfer_code_bytes_per_tile),
            Program::Repeat { body, .. } => self.program(body, load),
            Program::If { then_branch, else_branch, .. } => {
                self.program(then_branch, load);
                self.program(else_branch, load);
            }
            _ => {}
        }
    }

    fn block(
        &self,
        name: String,
        function: Option<FunctionId>,
        loaded: bool,
        load: TileLoad,
    ) -> Result<CodeBlock, SizeError> {
        let bytes = load.total(self.n, self.ipus)?;
        let max_tile_bytes = load.max_tile(self.n, self.ipus);
        Ok(CodeBlock { name, function, loaded, bytes, max_tile_bytes, load })
    }
}

/// The code blocks of `exe` over `ipus` IPUs of `n` tiles: every function in
/// order, then `main`, then `codelets`.
pub(crate) fn code_blocks(
    exe: &Executable,
    config: &IpuModelConfig,
    spans: &[TileSpan],
    n: u32,
    ipus: u32,
) -> Result<Vec<CodeBlock>, SizeError> {
    let mut e = Estimate { exe, config, spans, n, ipus, codelets: HashMap::new() };
    let mut blocks = Vec::new();
    for f in &e.exe.functions {
        let mut load = TileLoad::default();
        e.program(&f.body, &mut load);
        let loaded = e.exe.code.iter().any(|c| c.function == f.id && c.loaded);
        blocks.push(e.block(f.name.clone(), Some(f.id), loaded, load)?);
    }
    let mut load = TileLoad::default();
    let p = &e.exe.programs;
    for prog in [&p.main, &p.init, &p.weights_from_host, &p.weights_to_host] {
        e.program(prog, &mut load);
    }
    blocks.push(e.block("main".to_string(), None, false, load)?);
    // Codelets: per tile, the sum over the vertex types running there.
    let mut per_tile = vec![0u64; n as usize * ipus as usize];
    for (tiles, amp) in e.codelets.values() {
        let bytes = if *amp { config.matmul_codelet_bytes } else { config.codelet_bytes };
        for (acc, _) in per_tile.iter_mut().zip(tiles).filter(|(_, &on)| on) {
            *acc = acc.saturating_add(bytes);
        }
    }
    // Runs of equal bytes on one IPU become one range each.
    let mut load = TileLoad::default();
    for (ipu, tiles) in per_tile.chunks(n.max(1) as usize).enumerate() {
        let ipu = u32::try_from(ipu).unwrap_or(u32::MAX);
        let mut start = 0usize;
        for run in tiles.chunk_by(|a, b| a == b) {
            let (first, count) = (u32::try_from(start).unwrap_or(0), u32::try_from(run.len()).unwrap_or(0));
            load.add_range(ipu, first, count, run[0], n);
            start += run.len();
        }
    }
    blocks.push(e.block("codelets".to_string(), None, false, load)?);
    Ok(blocks)
}
