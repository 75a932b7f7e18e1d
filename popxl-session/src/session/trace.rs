//! The kernel timeline of a session's runs in the Chrome trace-event format
//! (`{"traceEvents": [...]}`; opens in Perfetto and `chrome://tracing`).
//!
//! Track 0 is the thread running the programs (replica 0's executor): one
//! complete event (`"ph": "X"`) per kernel execution, named by its op, its
//! category the op type. Tracks 1.. are the worker team's threads: one
//! complete event per job a worker took part in, named by the kernel it ran
//! inside (a worker span outside every kernel of this session, from another
//! session, is left out). Times are microseconds from the first recorded span.

use serde_json::{json, Value};

use crate::cpu::executor::KernelSpan;
use crate::cpu::team;
use crate::{Session, SessionError};

/// Room reserved per worker for job spans while tracing (16 B each; later jobs are not recorded).
const WORKER_SPANS: usize = 1 << 18;

impl Session {
    /// Turn the kernel timeline on (clearing an earlier one) or off: while on,
    /// every kernel execution of replica 0 and every job of the worker team's
    /// threads is recorded (into buffers reserved outside the steps), for
    /// [`Session::trace_json`] and [`Session::write_trace`]. The worker team
    /// is shared by every session of the process: its spans are filtered to
    /// this session's kernels.
    pub fn set_tracing(&mut self, on: bool) {
        self.executors.iter_mut().for_each(|e| e.set_tracing(false));
        if let Some(e) = self.executors.first_mut() {
            e.set_tracing(on);
        }
        team::set_tracing(on.then_some(WORKER_SPANS));
    }

    /// The timeline recorded since [`Session::set_tracing`]`(true)` as Chrome
    /// trace-event JSON (an empty event list when nothing was recorded).
    ///
    /// ```
    /// use popxl::ops;
    /// use popxl_session::Session;
    /// let ir = popxl::Ir::new();
    /// {
    ///     let _g = ir.main_graph().enter();
    ///     let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    ///     ops::scaled_add_(&x, &x, 1.0, 2.0).unwrap();
    /// }
    /// let mut session = Session::new(ir, "cpu").unwrap();
    /// session.set_tracing(true);
    /// session.scope(|s| s.run(&Default::default())).unwrap();
    /// let json = session.trace_json();
    /// assert!(json.starts_with("{\"traceEvents\":[") && json.contains("\"cat\":\"ScaledAddInplace\""));
    /// ```
    pub fn trace_json(&self) -> String {
        let Some(exe) = self.executors.first() else {
            return json!({ "traceEvents": [] }).to_string();
        };
        let kernels = exe.trace();
        let mut workers = team::worker_spans();
        workers.retain(|w| containing(kernels, w.start_ns, w.end_ns).is_some());
        let origin = kernels.iter().map(|k| k.start_ns).chain(workers.iter().map(|w| w.start_ns)).min().unwrap_or(0);
        let us = |ns: u64| ns.saturating_sub(origin) as f64 / 1e3;
        // A complete event of kernel `k` on track `tid`.
        let span = |tid: usize, k: u32, start: u64, end: u64| {
            json!({
                "name": exe.kernel_name(k).unwrap_or("?"),
                "cat": exe.kernel_type(k).unwrap_or("?"),
                "ph": "X",
                "ts": us(start),
                "dur": end.saturating_sub(start) as f64 / 1e3,
                "pid": 1,
                "tid": tid,
                "args": { "kernel": k },
            })
        };
        // Track names first.
        let mut tids: Vec<usize> = workers.iter().map(|w| w.worker).collect();
        tids.dedup();
        let mut events = vec![thread_name(0, "executor (replica 0)")];
        events.extend(tids.iter().map(|&t| thread_name(t, &format!("popxl-cpu-{t}"))));
        events.extend(kernels.iter().map(|k| span(0, k.kernel, k.start_ns, k.end_ns)));
        events.extend(workers.iter().map(|w| {
            let k = containing(kernels, w.start_ns, w.end_ns).map_or(0, |k| k.kernel);
            span(w.worker, k, w.start_ns, w.end_ns)
        }));
        let trace = json!({
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": { "dropped_kernel_spans": exe.trace_dropped() },
        });
        trace.to_string()
    }

    /// Write [`Session::trace_json`] to `path` ([`SessionError::WriteFile`] when it cannot be written).
    pub fn write_trace(&self, path: impl AsRef<std::path::Path>) -> Result<(), SessionError> {
        let path = path.as_ref();
        std::fs::write(path, self.trace_json()).map_err(|e| SessionError::WriteFile {
            what: "the trace",
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }
}

/// The kernel span (spans in time order, disjoint) containing `start..=end`.
fn containing(kernels: &[KernelSpan], start: u64, end: u64) -> Option<&KernelSpan> {
    let i = kernels.partition_point(|k| k.start_ns <= start);
    let k = kernels.get(i.checked_sub(1)?)?;
    (end <= k.end_ns).then_some(k)
}

/// A metadata event naming track `tid`.
fn thread_name(tid: usize, name: &str) -> Value {
    json!({ "name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": { "name": name } })
}
