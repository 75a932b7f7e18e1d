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

/// What a matmul-family kernel computes: forward, data gradient or weight gradient.
fn matmul_role(op_type: &str) -> Option<&'static str> {
    match op_type {
        "MatMul" | "MatMulAdd" => Some("forward"),
        "MatMulLhsGrad" => Some("data grad"),
        "MatMulRhsGrad"
        | "MatMulRhsBiasGrad"
        | "ScaledAddMatMulRhsGradInplace"
        | "ReplicatedScaledAddMatMulRhsGradInplace" => Some("weight grad"),
        _ => None,
    }
}

/// The GEMM of a matmul-family call as (batch, m, k, n) and its FLOP: `m x n`
/// the last two dims of its result (the updated weight for the in-place weight
/// update), `batch` the product of the result's leading dims, `k` the
/// contracted size (the op's multiply-adds over `batch * m * n`).
fn gemm_dims(call: &popart_lower::KernelCall) -> Option<([usize; 4], u64)> {
    let out = &call.outputs.first()?.info.shape;
    let (m, n) = match out.len() {
        0 => (1, 1),
        1 => (1, out[0]),
        r => (out[r - 2], out[r - 1]),
    };
    let batch = out.iter().rev().skip(2).product::<usize>().max(1);
    let flops = call.cost().flops;
    let mn = (batch * m * n).max(1) as u64;
    let k = (flops / 2 / mn) as usize;
    Some(([batch, m, k, n], flops))
}

/// Prints, per matmul shape of the step (role, op type and GEMM dims), its
/// time per step, its GFLOP/s and its share of `peak` (GFLOP/s; no share when
/// `None`), then the time of every other kernel: where the step's time goes
/// against the machine's limit. `calls` are the lowered program's kernel calls
/// (FLOP and shapes by kernel name).
#[allow(dead_code)] // used by some of the examples sharing this file
pub fn print_matmul_profile(
    kernels: &[KernelTime],
    steps: usize,
    calls: &[&popart_lower::KernelCall],
    peak: Option<f64>,
) {
    let by_name: HashMap<&str, &popart_lower::KernelCall> = calls.iter().map(|c| (c.name.as_str(), *c)).collect();
    let per_step = |x: f64| x / steps.max(1) as f64;
    // (role, op type, dims) -> (ms, calls, FLOP), per step
    type Shape<'a> = (&'a str, &'a str, [usize; 4]);
    let mut shapes: HashMap<Shape, (f64, f64, f64)> = HashMap::new();
    let (mut other_ms, mut other_kernels) = (0.0, 0usize);
    for k in kernels {
        let ms = per_step(k.total.as_secs_f64() * 1e3);
        let gemm = matmul_role(&k.op_type).and_then(|role| Some((role, gemm_dims(by_name.get(k.name.as_str())?)?)));
        match gemm {
            Some((role, (dims, flops))) => {
                let e = shapes.entry((role, k.op_type.as_str(), dims)).or_default();
                e.0 += ms;
                e.1 += per_step(k.calls as f64);
                e.2 += per_step(flops as f64 * k.calls as f64);
            }
            None => {
                other_ms += ms;
                other_kernels += 1;
            }
        }
    }
    let mut rows: Vec<_> = shapes.into_iter().collect();
    rows.sort_by(|a, b| a.0 .0.cmp(b.0 .0).then(b.1 .0.total_cmp(&a.1 .0)));
    let mm_ms: f64 = rows.iter().map(|r| r.1 .0).sum();
    let mm_flop: f64 = rows.iter().map(|r| r.1 .2).sum();
    let total = mm_ms + other_ms;
    let share = |gflops: f64| peak.map_or_else(|| "     -".to_string(), |p| format!("{:5.1}%", 100.0 * gflops / p));
    println!(
        "profile: matmuls by shape, per step (GEMM batch x m x k x n; share of the fp32 FMA peak{})",
        peak.map_or_else(|| ": not measured or disturbed".to_string(), |p| format!(" {p:.0} GFLOP/s"))
    );
    println!(
        "  {:<11} {:<30} {:>20} {:>6} {:>9} {:>6} {:>9} {:>6}",
        "role", "op type", "batch x m x k x n", "calls", "ms", "time", "GFLOP/s", "peak"
    );
    for ((role, op, [b, m, k, n]), (ms, calls, flop)) in &rows {
        let gflops = flop / (ms * 1e-3).max(1e-12) / 1e9;
        println!(
            "  {role:<11} {op:<30} {:>20} {calls:>6.0} {ms:>9.3} {:>5.1}% {gflops:>9.1} {}",
            format!("{b} x {m} x {k} x {n}"),
            100.0 * ms / total.max(1e-12),
            share(gflops)
        );
    }
    let mm_rate = mm_flop / (mm_ms * 1e-3).max(1e-12) / 1e9;
    println!(
        "  all matmuls: {mm_ms:.3} ms ({:.1}% of kernel time), {mm_rate:.1} GFLOP/s, {} of peak",
        100.0 * mm_ms / total.max(1e-12),
        share(mm_rate).trim()
    );
    println!(
        "  everything else: {other_ms:.3} ms per step ({:.1}% of kernel time, {other_kernels} kernels)",
        100.0 * other_ms / total.max(1e-12)
    );
}
