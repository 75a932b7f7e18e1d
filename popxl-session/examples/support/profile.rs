//! The `--profile` table of the examples: kernel time per step by op type, and
//! the arithmetic rate each op type reaches, from the ops' own cost hook
//! (`OpDef::cost`, as the `ipu_model` timeline counts it).

use std::collections::HashMap;

use popart_lower::ipu_model::Timeline;
use popxl_session::cpu::executor::KernelTime;

/// Prints the op types taking the most kernel time per step, over `steps`
/// profiled steps, with their GFLOP/s when `timeline` (the lowered program's
/// estimated timeline, whose rows carry each kernel's FLOP) is given.
pub fn print_profile(kernels: &[KernelTime], steps: usize, timeline: Option<&Timeline>) {
    // FLOP of one execution of each kernel, by the timeline's "<type> <name>".
    let flops: HashMap<&str, u64> =
        timeline.map(|t| t.rows.iter().map(|r| (r.name.as_str(), r.flops)).collect()).unwrap_or_default();
    let mut by_type: HashMap<&str, (f64, usize, f64)> = HashMap::new();
    for k in kernels {
        let e = by_type.entry(k.op_type.as_str()).or_default();
        e.0 += k.total.as_secs_f64() * 1e3 / steps.max(1) as f64;
        e.1 += 1;
        let per_call = flops.get(format!("{} {}", k.op_type, k.name).as_str()).copied().unwrap_or(0);
        e.2 += per_call as f64 * k.calls as f64 / steps.max(1) as f64;
    }
    let total: f64 = by_type.values().map(|v| v.0).sum();
    let mut rows: Vec<_> = by_type.into_iter().collect();
    rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    println!("profile: {total:.2} ms of kernels per step");
    for (op, (ms, n, flop)) in rows.iter().take(15) {
        let rate = if *flop > 0.0 { format!("{:7.1} GFLOP/s", flop / (ms * 1e-3) / 1e9) } else { String::new() };
        println!("  {ms:8.3} ms {:5.1}%  {op:<28} ({n} kernels) {rate}", 100.0 * ms / total);
    }
}

/// Prints the `n` kernels (op instances) taking the most time per step.
#[allow(dead_code)] // used by some of the examples sharing this file
pub fn print_top_kernels(kernels: &[KernelTime], steps: usize, n: usize) {
    let mut rows: Vec<&KernelTime> = kernels.iter().collect();
    rows.sort_by_key(|k| std::cmp::Reverse(k.total));
    println!("profile: the {n} slowest kernels");
    for k in rows.iter().take(n) {
        let ms = k.total.as_secs_f64() * 1e3 / steps.max(1) as f64;
        println!("  {ms:8.3} ms  {:<24} {}", k.op_type, k.name);
    }
}
