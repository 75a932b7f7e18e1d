//! The figures of the modelled IPU, in one place.

use popart_ir::DataType;

/// The figures of the modelled IPU: tiles, memory, clock, compute rates,
/// exchange and streaming bandwidths, and the rules of the code-size estimate.
///
/// [`IpuModelConfig::mk2`] (the default) is a Graphcore Mk2 GC200 IPU;
/// [`IpuModelConfig::bow`] is the Bow IPU (the same die, clocked higher).
///
/// # Sources
///
/// - Graphcore, *IPU-M2000 / GC200 product brief and datasheet* (Mk2): 1,472
///   tiles, 900 MB of In-Processor-Memory (624 KiB SRAM per tile), 6 hardware
///   threads per tile, 1.33 GHz, 62.5 TFLOPS FP32 and 250 TFLOPS FP16.16 (AMP)
///   peak, IPU-Exchange of 8 TB/s on chip; Bow IPU datasheet: 1.85 GHz,
///   350 TFLOPS FP16.
/// - Z. Jia, B. Tillman, M. Maggioni, D. P. Scarpazza, *Dissecting the Graphcore
///   IPU Architecture via Microbenchmarking* (Citadel, 2019), measured on the
///   Mk1 GC2: FP32 peak of 16 FLOP/cycle/tile and mixed precision 64
///   FLOP/cycle/tile (31.1 and 124.5 TFLOPS at 1,216 tiles and 1.6 GHz), six
///   cycles of memory latency hidden by six threads, 64-bit vector ALU paths,
///   and exchange and host-link measurements that make transfer time a fixed
///   latency plus bytes over bandwidth.
/// - Graphcore, *PopXL user guide*, §9.7 (code loading; the overlap rules of
///   §9.7.3) and the *Poplar and PopLibs user guide* (tile mapping, grain sizes,
///   vertices and codelets).
///
/// # Exact and approximate
///
/// Published and used as is: `tiles`, `tile_memory_bytes`, `threads_per_tile`,
/// `clock_hz`, the AMP rates (`matmul_flops_per_cycle_*`, which are peak rates
/// derived from the datasheet's TFLOPS: `62.5e12 / (1472 x 1.33e9) = 32`,
/// `250e12 / (1472 x 1.33e9) = 128`) and the default of 32 IO tiles (PopXL's
/// `io_tiles()` default). **Approximations** (order of magnitude, chosen to make
/// the model's ranking of programs useful, not its absolute times exact): the
/// 64-bit-per-cycle exchange per tile (the datasheet's 8 TB/s aggregate is
/// about half of 1,472 x 8 B x 1.33 GHz), the streaming-memory bandwidth (about
/// 20 GB/s per IPU-Link/DRAM path), the host link (PCIe Gen4 x16, 16 to 32
/// GB/s: 16 is taken), the sync and stream latencies, the elementwise and
/// load/store rates, the grain of the tile mapping, and every number of the
/// code-size estimate (Poplar's real code size depends on vertex types,
/// tensor layouts and exchange patterns that this model does not see).
#[derive(Clone, Debug, PartialEq)]
pub struct IpuModelConfig {
    /// A name for reports (`"Mk2 GC200"`).
    pub name: String,
    /// Tiles of the IPU (1,472 on Mk2 and Bow).
    pub tiles: u32,
    /// SRAM per tile in bytes (624 KiB = 638,976 B).
    pub tile_memory_bytes: u64,
    /// Hardware threads per tile (6; the model assumes they hide memory latency).
    pub threads_per_tile: u32,
    /// Clock in Hz (1.33 GHz; Bow 1.85 GHz).
    pub clock_hz: f64,
    /// Tiles reserved for IO when a program places ops on IO tiles (PopXL's
    /// default of 32); the tensors and compute then use the others.
    pub io_tiles: u32,
    /// On-chip exchange bytes per cycle per tile (64 bits; approximate).
    pub exchange_bytes_per_cycle: u64,
    /// Streaming memory (remote buffers, code buffers) bandwidth in bytes per
    /// second (about 20 GB/s; approximate).
    pub streaming_bytes_per_second: f64,
    /// Host link bandwidth in bytes per second (PCIe Gen4 x16, 16 GB/s taken;
    /// approximate).
    pub host_bytes_per_second: f64,
    /// Cycles of one internal (BSP) sync, paid by every compute step and
    /// on-chip copy (approximate).
    pub sync_cycles: u64,
    /// Fixed cycles of one off-chip exchange (host or streaming memory): sync
    /// with the gateway and set-up, paid once per merged exchange (approximate,
    /// about 1.5 us).
    pub stream_latency_cycles: u64,
    /// Matrix product (AMP) FLOP per cycle per tile for 32-bit floats (32).
    pub matmul_flops_per_cycle_fp32: u64,
    /// Matrix product (AMP) FLOP per cycle per tile for 16-bit floats (128).
    pub matmul_flops_per_cycle_fp16: u64,
    /// Vectorised elementwise FLOP per cycle per tile for 32-bit types (2:
    /// one 64-bit vector of two floats per cycle; approximate).
    pub vector_flops_per_cycle_fp32: u64,
    /// Vectorised elementwise FLOP per cycle per tile for 16-bit types (4; approximate).
    pub vector_flops_per_cycle_fp16: u64,
    /// Tile memory bytes loaded or stored per cycle per tile by vertices (16:
    /// 128-bit loads; approximate). Elementwise work is bounded by this too.
    pub load_store_bytes_per_cycle: u64,
    /// Grain of the tile mapping in bytes: tensors are cut into grains dealt
    /// round-robin over the compute tiles (64 B, 16 float32 elements; approximate).
    pub grain_bytes: u64,
    /// Code of one vertex type (codelet) on each tile that runs it (approximate).
    pub codelet_bytes: u64,
    /// Code of a matmul or convolution vertex type (AMP codelets are larger; approximate).
    pub matmul_codelet_bytes: u64,
    /// Code per kernel instance per tile it runs on: vertex state, its compute
    /// set's control code and the exchange code bringing its operands (approximate).
    pub vertex_bytes_per_tile: u64,
    /// Code per on-chip copy or off-chip transfer per tile it touches (exchange
    /// code; approximate).
    pub transfer_code_bytes_per_tile: u64,
    /// Control code per program step (call, repeat, if, sync) on every compute
    /// tile: every tile runs the whole control program (approximate).
    pub control_bytes_per_step: u64,
}

impl Default for IpuModelConfig {
    fn default() -> Self {
        IpuModelConfig::mk2()
    }
}

impl IpuModelConfig {
    /// A Graphcore Mk2 GC200 IPU (see the type's docs for the sources).
    ///
    /// ```
    /// let c = popart_lower::IpuModelConfig::mk2();
    /// assert_eq!((c.tiles, c.tile_memory_bytes), (1472, 624 * 1024));
    /// assert_eq!(c.total_memory_bytes(), 940_572_672); // 897 MiB: the "900 MB" of the datasheet
    /// ```
    pub fn mk2() -> Self {
        IpuModelConfig {
            name: "Mk2 GC200".to_string(),
            tiles: 1472,
            tile_memory_bytes: 624 * 1024,
            threads_per_tile: 6,
            clock_hz: 1.33e9,
            io_tiles: 32,
            exchange_bytes_per_cycle: 8,
            streaming_bytes_per_second: 20e9,
            host_bytes_per_second: 16e9,
            sync_cycles: 150,
            stream_latency_cycles: 2000,
            matmul_flops_per_cycle_fp32: 32,
            matmul_flops_per_cycle_fp16: 128,
            vector_flops_per_cycle_fp32: 2,
            vector_flops_per_cycle_fp16: 4,
            load_store_bytes_per_cycle: 16,
            grain_bytes: 64,
            codelet_bytes: 512,
            matmul_codelet_bytes: 4096,
            vertex_bytes_per_tile: 96,
            transfer_code_bytes_per_tile: 32,
            control_bytes_per_step: 16,
        }
    }

    /// A Bow IPU: the Mk2 die (same tiles and memory) at 1.85 GHz.
    ///
    /// ```
    /// assert_eq!(popart_lower::IpuModelConfig::bow().clock_hz, 1.85e9);
    /// ```
    pub fn bow() -> Self {
        IpuModelConfig { name: "Bow".to_string(), clock_hz: 1.85e9, ..IpuModelConfig::mk2() }
    }

    /// Tile memory of the whole IPU in bytes (saturating).
    pub fn total_memory_bytes(&self) -> u64 {
        u64::from(self.tiles).saturating_mul(self.tile_memory_bytes)
    }

    /// Tiles that hold tensors and run compute: all of them, or all but the IO
    /// tiles when the program uses IO tiles.
    pub fn compute_tiles(&self, uses_io_tiles: bool) -> u32 {
        if uses_io_tiles {
            self.tiles.saturating_sub(self.io_tiles)
        } else {
            self.tiles
        }
    }

    /// Matrix product FLOP per cycle per tile for `dtype`.
    pub fn matmul_rate(&self, dtype: DataType) -> u64 {
        if dtype.size_bytes() <= 2 {
            self.matmul_flops_per_cycle_fp16
        } else {
            self.matmul_flops_per_cycle_fp32
        }
    }

    /// Elementwise FLOP per cycle per tile for `dtype`.
    pub fn vector_rate(&self, dtype: DataType) -> u64 {
        if dtype.size_bytes() <= 2 {
            self.vector_flops_per_cycle_fp16
        } else {
            self.vector_flops_per_cycle_fp32
        }
    }

    /// Cycles to move `bytes` at `bytes_per_second` (rounded up; saturating).
    pub fn transfer_cycles(&self, bytes: u64, bytes_per_second: f64) -> u64 {
        let c = (bytes as f64 / bytes_per_second * self.clock_hz).ceil();
        if c.is_finite() && c >= 0.0 {
            c.min(u64::MAX as f64) as u64
        } else {
            u64::MAX
        }
    }

    /// Check the figures a model divides by or counts with: at least one tile,
    /// non-zero rates, grain and memory, and positive clock and bandwidths.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("clock_hz", self.clock_hz),
            ("streaming_bytes_per_second", self.streaming_bytes_per_second),
            ("host_bytes_per_second", self.host_bytes_per_second),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("`{name}` must be a positive number, not {v}"));
            }
        }
        let nonzero = [
            ("tiles", u64::from(self.tiles)),
            ("tile_memory_bytes", self.tile_memory_bytes),
            ("exchange_bytes_per_cycle", self.exchange_bytes_per_cycle),
            ("matmul_flops_per_cycle_fp32", self.matmul_flops_per_cycle_fp32),
            ("matmul_flops_per_cycle_fp16", self.matmul_flops_per_cycle_fp16),
            ("vector_flops_per_cycle_fp32", self.vector_flops_per_cycle_fp32),
            ("vector_flops_per_cycle_fp16", self.vector_flops_per_cycle_fp16),
            ("load_store_bytes_per_cycle", self.load_store_bytes_per_cycle),
            ("grain_bytes", self.grain_bytes),
        ];
        for (name, v) in nonzero {
            if v == 0 {
                return Err(format!("`{name}` must not be 0"));
            }
        }
        Ok(())
    }

    /// [`IpuModelConfig::validate`], and when the program uses IO tiles, that
    /// they leave at least one compute tile.
    pub fn validate_for(&self, uses_io_tiles: bool) -> Result<(), String> {
        self.validate()?;
        if uses_io_tiles && self.io_tiles >= self.tiles {
            return Err(format!("`io_tiles` ({}) leaves no compute tile of {}", self.io_tiles, self.tiles));
        }
        Ok(())
    }
}
