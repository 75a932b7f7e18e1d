//! Square float32 matmul throughput of the `cpu` device's `MatMul` kernel.
//!
//! For each size n and thread count, builds the kernel through
//! `build_kernel` exactly as a session does, runs it with the worker team capped at
//! that many threads and reports GFLOP/s = 2 n³ / t (median of `--reps` measurements,
//! each repeating the matmul for at least `--min-time` seconds). With
//! `--numpy <numpy_peak.py>` it then runs numpy's sgemm benchmark in the same
//! session and prints the ratio per point. It also reports microseconds per call
//! of the MNIST-sized `[8, 784] @ [784, 32]` matmul and its two gradients.
//!
//! ```text
//! cargo run --release -p popxl-cpu --example matmul_bench -- \
//!     --sizes 256,512,1024,2048 --threads 1,2 --reps 3 --numpy /work/shared/bench/numpy_peak.py
//! ```

use std::time::Instant;

use popart_ir::{Attributes, DataType, TensorInfo};
use popxl_cpu::kernel::{KernelArgs, KernelSpec};
use popxl_cpu::kernels::build_kernel;
use popxl_cpu::team;

#[path = "support/buffers.rs"]
mod buffers;
use buffers::{buffer, parse_list, Line};

struct Options {
    sizes: Vec<usize>,
    threads: Vec<usize>,
    reps: usize,
    min_time: f64,
    numpy: Option<String>,
}

fn options() -> Options {
    let mut o = Options { sizes: vec![256, 512, 1024, 2048], threads: vec![1, 2], reps: 3, min_time: 0.5, numpy: None };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--sizes" => o.sizes = parse_list(&value),
            "--threads" => o.threads = parse_list(&value),
            "--reps" => o.reps = value.parse().expect("--reps takes an integer"),
            "--min-time" => o.min_time = value.parse().expect("--min-time takes seconds"),
            "--numpy" => o.numpy = Some(value),
            other => panic!("unknown option {other}; see the example's doc comment"),
        }
        i += 2;
    }
    o
}

/// Median GFLOP/s of `reps` measurements of an n×n×n matmul.
fn measure(n: usize, reps: usize, min_time: f64) -> (f64, f64, f64) {
    let info = TensorInfo::new(DataType::Float32, [n, n]);
    let attrs = Attributes::new();
    let spec = KernelSpec {
        def: &popart_ir::ops::all::MatMul,
        attrs: &attrs,
        inputs: vec![(0, info.clone()), (1, info.clone())],
        outputs: vec![(0, info)],
        check_indices: false,
        weight_invariant: false,
    };
    let kernel = build_kernel(&spec).expect("MatMul kernel");
    let (a, b) = (buffer(n * n, 1), buffer(n * n, 2));
    let mut c = buffer(n * n, 3);
    let inputs = [a.as_ptr() as *const u8, b.as_ptr() as *const u8];
    let outputs = [c.as_mut_ptr() as *mut u8];
    let args = KernelArgs { inputs: &inputs, outputs: &outputs };
    // SAFETY: the buffers hold n*n f32 each, are 64-byte aligned and do not overlap.
    let run = || unsafe { kernel.run(&args) }.expect("no run-time checks");
    run(); // warm-up: thread pool, page faults, packing buffers
    let mut gflops: Vec<f64> = (0..reps)
        .map(|_| {
            let (mut iters, t0) = (0u64, Instant::now());
            loop {
                run();
                iters += 1;
                let el = t0.elapsed().as_secs_f64();
                if el >= min_time {
                    break 2.0 * (n as f64).powi(3) * iters as f64 / el / 1e9;
                }
            }
        })
        .collect();
    gflops.sort_by(f64::total_cmp);
    (gflops[gflops.len() / 2], gflops[0], gflops[gflops.len() - 1])
}

/// Microseconds per call of a small MNIST-sized matmul and its gradients
/// (`[8, 784] @ [784, 32]`): these must not pay for threading.
fn small_matmuls(threads: usize) {
    let (x, w, y) = ([8usize, 784], [784usize, 32], [8usize, 32]);
    let f32s = |s: &[usize]| TensorInfo::new(DataType::Float32, s);
    type Case = (&'static str, Vec<(u32, TensorInfo)>, TensorInfo);
    let cases: [Case; 3] = [
        ("MatMul", vec![(0, f32s(&x)), (1, f32s(&w))], f32s(&y)),
        ("MatMulLhsGrad", vec![(0, f32s(&y)), (1, f32s(&x)), (2, f32s(&w))], f32s(&x)),
        ("MatMulRhsGrad", vec![(0, f32s(&y)), (1, f32s(&x)), (2, f32s(&w))], f32s(&w)),
    ];
    let attrs = Attributes::new();
    for (op, inputs, out) in cases {
        let bufs: Vec<Vec<Line>> = inputs.iter().map(|(i, t)| buffer(t.nelms(), *i as u64 + 7)).collect();
        let mut y = buffer(out.nelms(), 3);
        let spec = KernelSpec {
            def: popart_ir::lookup_op(op).expect("builtin op"),
            attrs: &attrs,
            inputs,
            outputs: vec![(0, out)],
            check_indices: false,
            weight_invariant: false,
        };
        let kernel = build_kernel(&spec).expect("kernel");
        let us = team::with_max_threads(threads, || {
            let in_ptrs: Vec<*const u8> = bufs.iter().map(|b| b.as_ptr() as *const u8).collect();
            let out_ptrs = [y.as_mut_ptr() as *mut u8];
            let args = KernelArgs { inputs: &in_ptrs, outputs: &out_ptrs };
            // SAFETY: buffers match the spec's infos and do not overlap.
            let run = || unsafe { kernel.run(&args) }.expect("no run-time checks");
            run();
            let (iters, t0) = (20_000u32, Instant::now());
            for _ in 0..iters {
                run();
            }
            t0.elapsed().as_secs_f64() * 1e6 / iters as f64
        });
        println!("{{\"bench\": \"popxl_cpu_small_matmul\", \"op\": \"{op}\", \"shape\": \"8x784x32\", \"threads\": {threads}, \"us_per_call\": {us:.2}}}");
    }
}

/// A number field of a flat JSON line (numpy_peak.py's output).
fn field(line: &str, key: &str) -> Option<f64> {
    let rest = &line[line.find(&format!("\"{key}\":"))? + key.len() + 3..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

fn main() {
    let o = options();
    let mut ours = Vec::new();
    for &threads in &o.threads {
        for &n in &o.sizes {
            let (med, min, max) = team::with_max_threads(threads, || measure(n, o.reps, o.min_time));
            println!(
                "{{\"bench\": \"popxl_cpu_sgemm\", \"threads\": {threads}, \"n\": {n}, \"gflops_median\": {med:.1}, \"gflops_min\": {min:.1}, \"gflops_max\": {max:.1}, \"reps\": {}}}",
                o.reps
            );
            ours.push((threads, n, med));
        }
    }
    for &threads in &o.threads {
        small_matmuls(threads);
    }
    let Some(script) = o.numpy else { return };
    let out = std::process::Command::new("python3")
        .arg(&script)
        .args(["--sizes", &o.sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",")])
        .args(["--threads", &o.threads.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",")])
        .args(["--reps", &o.reps.to_string(), "--min-time", &o.min_time.to_string()])
        .output()
        .expect("running numpy_peak.py with python3");
    let text = String::from_utf8_lossy(&out.stdout);
    print!("{text}");
    if !out.status.success() {
        eprintln!("numpy_peak.py failed: {}", String::from_utf8_lossy(&out.stderr));
        return;
    }
    println!("threads      n   popxl GFLOP/s   numpy GFLOP/s   ratio");
    for (threads, n, med) in ours {
        let np = text
            .lines()
            .filter(|l| l.contains("numpy_sgemm"))
            .find(|l| field(l, "threads") == Some(threads as f64) && field(l, "n") == Some(n as f64));
        if let Some(np) = np.and_then(|l| field(l, "gflops_median")) {
            println!("{threads:>7} {n:>6} {med:>15.1} {np:>15.1} {:>7.2}", med / np);
        }
    }
}
