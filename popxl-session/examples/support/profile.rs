//! The `--profile` table of the examples: kernel time per step by op type.

use std::collections::HashMap;

use popxl_session::cpu::executor::KernelTime;

/// Prints the op types taking the most kernel time per step, over `steps` profiled steps.
pub fn print_profile(kernels: &[KernelTime], steps: usize) {
    let mut by_type: HashMap<&str, (f64, usize)> = HashMap::new();
    for k in kernels {
        let e = by_type.entry(k.op_type.as_str()).or_default();
        e.0 += k.total.as_secs_f64() * 1e3 / steps.max(1) as f64;
        e.1 += 1;
    }
    let total: f64 = by_type.values().map(|v| v.0).sum();
    let mut rows: Vec<_> = by_type.into_iter().collect();
    rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    println!("profile: {total:.2} ms of kernels per step");
    for (op, (ms, n)) in rows.iter().take(15) {
        println!("  {ms:8.3} ms {:5.1}%  {op:<28} ({n} kernels)", 100.0 * ms / total);
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
