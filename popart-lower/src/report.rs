//! The memory report of an executable: where the planned activation memory
//! peaks and which tensors are live there (what PopVision's liveness view shows).

use std::fmt;

use popart_ir::TensorInfo;

use crate::executable::{BufferId, BufferKind, Executable};

/// One activation buffer live at the peak.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveBuffer {
    /// The buffer.
    pub buffer: BufferId,
    /// Its name (first member tensor, `graph/tensor`).
    pub name: String,
    /// Type and shape.
    pub info: TensorInfo,
    /// Reserved bytes.
    pub bytes: usize,
    /// First and last timeline step of the live interval containing the peak.
    pub live: (u64, u64),
}

/// Live memory at the peak of an executable's plan ([`Executable::memory_report`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// Arena bytes: the planned peak, including fragmentation.
    pub arena_bytes: usize,
    /// Variables and constants (always live).
    pub permanent_bytes: usize,
    /// Timeline step at which the live activation bytes peak (the first such step).
    pub peak_step: u64,
    /// Activation bytes live at that step (at most `arena_bytes - permanent_bytes`).
    pub peak_live_bytes: usize,
    /// Steps of the timeline (ops and copies of every program and call instance).
    pub steps: u64,
    /// Every activation buffer live at the peak, largest first.
    pub live_at_peak: Vec<LiveBuffer>,
}

impl Executable {
    /// Where the activation memory peaks and what is live there.
    pub fn memory_report(&self) -> MemoryReport {
        // Sweep the intervals: +size at the start, -size after the end.
        let mut events: Vec<(u64, i64)> = Vec::new();
        for (b, lives) in self.buffers.iter().zip(&self.lives) {
            if b.kind != BufferKind::Activation {
                continue;
            }
            let size = i64::try_from(b.size).unwrap_or(i64::MAX);
            for &(s, e) in lives {
                events.push((s, size));
                events.push((e.saturating_add(1), -size));
            }
        }
        events.sort_unstable();
        let (mut live, mut peak, mut peak_step) = (0i64, 0i64, 0u64);
        let mut i = 0;
        while i < events.len() {
            let step = events[i].0;
            while i < events.len() && events[i].0 == step {
                live += events[i].1;
                i += 1;
            }
            if live > peak {
                (peak, peak_step) = (live, step);
            }
        }
        let steps = self.lives.iter().flatten().map(|&(_, e)| e + 1).max().unwrap_or(0);
        let mut live_at_peak: Vec<LiveBuffer> = self
            .buffers
            .iter()
            .zip(&self.lives)
            .filter(|(b, _)| b.kind == BufferKind::Activation && peak > 0)
            .filter_map(|(b, lives)| {
                let &(s, e) = lives.iter().find(|&&(s, e)| s <= peak_step && peak_step <= e)?;
                Some(LiveBuffer { buffer: b.id, name: b.name(), info: b.info.clone(), bytes: b.size, live: (s, e) })
            })
            .collect();
        live_at_peak.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.buffer.0.cmp(&b.buffer.0)));
        MemoryReport {
            arena_bytes: self.memory.arena_bytes,
            permanent_bytes: self.memory.permanent_bytes,
            peak_step,
            peak_live_bytes: usize::try_from(peak).unwrap_or(0),
            steps,
            live_at_peak,
        }
    }
}

impl MemoryReport {
    /// The report as a table of the `top` largest tensors live at the peak.
    pub fn table(&self, top: usize) -> String {
        let mut s = String::new();
        let mb = |b: usize| b as f64 / (1 << 20) as f64;
        s += &format!(
            "memory: planned peak {} B ({:.1} MiB) = {} B variables and constants + {} B activations and \
             fragmentation\n",
            self.arena_bytes,
            mb(self.arena_bytes),
            self.permanent_bytes,
            self.arena_bytes.saturating_sub(self.permanent_bytes)
        );
        s += &format!(
            "peak of live activations: {} B ({:.1} MiB) at step {} of {}, {} tensors live\n",
            self.peak_live_bytes,
            mb(self.peak_live_bytes),
            self.peak_step,
            self.steps,
            self.live_at_peak.len()
        );
        s += &format!("  {:>12}  {:>6}  {:>13}  {:<24} tensor\n", "bytes", "share", "live steps", "type");
        for b in self.live_at_peak.iter().take(top) {
            let share = 100.0 * b.bytes as f64 / self.peak_live_bytes.max(1) as f64;
            let shape = b.info.to_string();
            s += &format!(
                "  {:>12}  {share:5.1}%  {:>13}  {shape:<24} {}\n",
                b.bytes,
                format!("{}-{}", b.live.0, b.live.1),
                b.name
            );
        }
        let rest = self.live_at_peak.len().saturating_sub(top);
        if rest > 0 {
            let bytes: usize = self.live_at_peak.iter().skip(top).map(|b| b.bytes).sum();
            s += &format!(
                "  {bytes:>12}  {:5.1}%  {rest} more tensors\n",
                100.0 * bytes as f64 / self.peak_live_bytes.max(1) as f64
            );
        }
        s
    }
}

impl fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table(10))
    }
}
