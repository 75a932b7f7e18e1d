//! Microseconds per call of `cpu` kernels, each built through `build_kernel`
//! exactly as a session builds it and run back to back on 64-byte aligned
//! buffers.
//!
//! ```text
//! cargo run --release -p popxl-cpu --example kernel_bench -- [--suite mnist|ops|gpt|decode] [--threads 1,2] [--only gelu] [--copies N] [--cold] [--numpy]
//! ```
//!
//! - `--suite mnist` (default): the kernels of one MNIST training step at the
//!   compute-bound settings (`--batch 128`, `--hidden 512`).
//! - `--suite ops`: one row per kernel family of the op catalogue at 1M
//!   elements (`--elements N`), with its bandwidth (GB/s of inputs read and
//!   outputs written). With `--numpy`, it then runs
//!   `bench/numpy_kernel_bench.py` (same labels, same sizes, numpy on one
//!   thread) in the same run and prints our time next to numpy's.
//! - `--suite gpt`: the kernels of one layer of the `gpt` example: the
//!   matmuls (forward and both gradients of the qkv, fc and fc2 projections),
//!   the attention, gelu, layer norm and the bias gradients (alone, and
//!   summed in the weight gradient's pass: `rhs bias grad`).
//! - `--suite decode`: the products of the `gpt` example's one-position
//!   decode program (`--sample`): one row times each weight, with the bias
//!   (and the residual), weights resident in the caches as in a loop over
//!   one layer (the example streams them from level 3).
//! - `--only TEXT` keeps the kernels whose label contains TEXT.
//! - `--copies N`: N sets of operands (weights included), each call taking
//!   the next: with more than the level-2 caches hold, a call reads its
//!   operands from level 3, as the decode program's products do.
//! - `--cold`: before each timed call, 64 MiB of another buffer is written
//!   (untimed), so the call finds its operands out of the caches, as a
//!   training step's kernels mostly do.
//!
//! Prints one JSON line per (threads, kernel) with the median of the calls.

use std::collections::HashMap;
use std::time::Instant;

use popart_ir::{AttrValue, DataType, TensorInfo};
use popxl_cpu::kernel::{KernelArgs, KernelSpec};
use popxl_cpu::kernels::build_kernel;
use popxl_cpu::team;

#[path = "../support/buffers.rs"]
mod buffers;
use buffers::{buffer, parse_list, Line};

mod case;
mod mnist;
// The `--suite ops` rows, one file per op family.
mod elementwise;
mod indexing;
mod reduce;
mod var_random;

use case::Case;

fn ops_cases(n: usize) -> Vec<Case> {
    let mut v = elementwise::cases(n);
    v.extend(reduce::cases(n));
    v.extend(indexing::cases(n));
    v.extend(var_random::cases(n));
    v
}

/// One measured row.
struct Row {
    us_median: f64,
    bytes: usize,
}

/// Bytes written between calls under `--cold` (twice a 32 MiB level 3).
const EVICT_BYTES: usize = 64 << 20;

/// One set of a case's buffers: its inputs and its outputs.
type Operands = (Vec<Vec<Line>>, Vec<Vec<Line>>);

fn run_case(c: &Case, threads: usize, calls: usize, cold: bool, copies: usize) -> Row {
    let spec = KernelSpec {
        def: popart_ir::lookup_op(c.op).unwrap_or_else(|e| panic!("{}: {e}", c.label)),
        attrs: &c.attrs,
        inputs: c.inputs.iter().enumerate().map(|(i, t)| (i as u32, t.clone())).collect(),
        outputs: c.outputs.iter().enumerate().map(|(i, t)| (i as u32, t.clone())).collect(),
        check_indices: false,
        weight_invariant: false,
    };
    let kernel = build_kernel(&spec).unwrap_or_else(|e| panic!("{}: {e}", c.label));
    let lines = |info: &TensorInfo| info.nbytes().div_ceil(64);
    // `copies` sets of operands, the calls going round them.
    let mut sets: Vec<Operands> = (0..copies.max(1))
        .map(|copy| {
            let ins = c
                .inputs
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let mut b = buffer(lines(t) * 16, i as u64 + 7 + 101 * copy as u64);
                    if let Some(data) = c.data.get(&i) {
                        bytemuck_copy(&mut b, data);
                    }
                    b
                })
                .collect();
            (ins, c.outputs.iter().map(|t| buffer(lines(t) * 16, 3)).collect())
        })
        .collect();
    let mut times: Vec<f64> = team::with_max_threads(threads, || {
        let ptrs: Vec<(Vec<*const u8>, Vec<*mut u8>)> = sets
            .iter_mut()
            .map(|(ins, outs)| {
                let mut in_ptrs: Vec<*const u8> = ins.iter().map(|b| b.as_ptr() as *const u8).collect();
                let out_ptrs: Vec<*mut u8> = outs.iter_mut().map(|b| b.as_mut_ptr() as *mut u8).collect();
                for &(i, o) in &c.aliases {
                    in_ptrs[i] = out_ptrs[o];
                }
                (in_ptrs, out_ptrs)
            })
            .collect();
        let run = |i: usize| {
            let (ins, outs) = &ptrs[i % ptrs.len()];
            let args = KernelArgs { inputs: ins, outputs: outs };
            // SAFETY: buffers match the spec's infos; only declared aliases overlap.
            unsafe { kernel.run(&args) }.expect("no run-time checks")
        };
        (0..ptrs.len()).for_each(run);
        let mut evict = if cold { vec![0u64; EVICT_BYTES / 8] } else { Vec::new() };
        (0..calls)
            .map(|i| {
                evict.iter_mut().for_each(|w| *w = w.wrapping_add(i as u64));
                std::hint::black_box(&mut evict);
                let t0 = Instant::now();
                run(i);
                t0.elapsed().as_secs_f64() * 1e6
            })
            .collect()
    });
    times.sort_by(f64::total_cmp);
    let bytes = c.inputs.iter().chain(&c.outputs).map(TensorInfo::nbytes).sum();
    Row { us_median: times[times.len() / 2], bytes }
}

/// Copy raw bytes into the start of a line buffer.
fn bytemuck_copy(dst: &mut [Line], data: &[u8]) {
    let n = data.len().min(dst.len() * 64);
    // SAFETY: `dst` holds `dst.len() * 64` bytes; `n` is at most that.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst.as_mut_ptr() as *mut u8, n) };
}

/// numpy's median microseconds per label, from `bench/numpy_kernel_bench.py`.
fn numpy_times(n: usize, only: &str) -> HashMap<String, f64> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/numpy_kernel_bench.py");
    let out = std::process::Command::new("python3")
        .args([script, "--elements", &n.to_string(), "--only", only])
        .env("OMP_NUM_THREADS", "1")
        .env("OPENBLAS_NUM_THREADS", "1")
        .output();
    let mut times = HashMap::new();
    match out {
        Ok(o) if o.status.success() => {
            for line in String::from_utf8_lossy(&o.stdout).lines() {
                if let Some((label, us)) = line.rsplit_once('\t') {
                    if let Ok(us) = us.trim().parse() {
                        times.insert(label.to_string(), us);
                    }
                }
            }
        }
        Ok(o) => eprintln!("numpy baseline failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => eprintln!("numpy baseline not run (python3: {e})"),
    }
    times
}

fn main() {
    let (mut threads, mut batch, mut hidden, mut elements) = (vec![1, 2], 128, 512, 1 << 20);
    let (mut only, mut suite, mut numpy, mut cold) = (String::new(), "mnist".to_string(), false, false);
    let mut copies = 1;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--numpy" || flag == "--cold" {
            numpy |= flag == "--numpy";
            cold |= flag == "--cold";
            continue;
        }
        let value = args.next().unwrap_or_default();
        match flag.as_str() {
            "--threads" => threads = parse_list(&value),
            "--batch" => batch = value.parse().expect("--batch takes an integer"),
            "--hidden" => hidden = value.parse().expect("--hidden takes an integer"),
            "--elements" => elements = value.parse().expect("--elements takes an integer"),
            "--only" => only = value,
            "--copies" => copies = value.parse().expect("--copies takes an integer"),
            "--suite" => suite = value,
            other => panic!("unknown option {other}; see the example's doc comment"),
        }
    }
    let (cases, calls) = match suite.as_str() {
        "mnist" => (mnist::cases(batch, hidden), 200),
        "ops" => (ops_cases(elements), 50),
        "gpt" => (gpt_cases(), 20),
        "decode" => (decode_cases(), 400),
        other => panic!("unknown suite {other}: mnist, ops, gpt or decode"),
    };
    let cases: Vec<Case> = cases.into_iter().filter(|c| c.label.contains(only.as_str())).collect();
    let mut ours: HashMap<(usize, String), Row> = HashMap::new();
    for &t in &threads {
        for c in &cases {
            let row = run_case(c, t, calls, cold, copies);
            println!(
                "{{\"bench\": \"popxl_cpu_kernel\", \"threads\": {t}, \"kernel\": \"{}\", \"op\": \"{}\", \"us_median\": {:.1}, \"gb_per_s\": {:.2}}}",
                c.label,
                c.op,
                row.us_median,
                row.bytes as f64 / row.us_median / 1e3
            );
            ours.insert((t, c.label.clone()), row);
        }
    }
    if numpy {
        let np = numpy_times(elements, &only);
        println!("\n{:<34} {:>11} {:>11} {:>13}", "kernel (1 thread)", "ours us", "numpy us", "numpy/ours");
        for c in &cases {
            let Some(row) = ours.get(&(1, c.label.clone())) else { continue };
            match np.get(&c.label) {
                Some(&n) => {
                    println!("{:<34} {:>11.1} {:>11.1} {:>12.2}x", c.label, row.us_median, n, n / row.us_median)
                }
                None => println!("{:<34} {:>11.1} {:>11} {:>13}", c.label, row.us_median, "-", "-"),
            }
        }
    }
}

/// The kernels of one layer of the `gpt` example's default model ([2048, 256] tokens,
/// 4 heads), forward and both gradients.
fn gpt_cases() -> Vec<Case> {
    let mut v = Vec::new();
    // The forward product `y = x @ w` and both gradients.
    let mut passes = |name: &str, x: TensorInfo, w: TensorInfo, y: TensorInfo| {
        v.push(Case::new(format!("{name} fwd"), "MatMul", vec![x.clone(), w.clone()], y.clone()));
        let lhs = vec![y.clone(), x.clone(), w.clone()];
        v.push(Case::new(format!("{name} lhs grad"), "MatMulLhsGrad", lhs, x.clone()));
        v.push(Case::new(
            format!("{name} rhs grad"),
            "MatMulRhsGrad",
            vec![y.clone(), x.clone(), w.clone()],
            w.clone(),
        ));
        // With the bias gradient summed in the same pass (`fuse-bias-grad`), where the layer has a bias.
        if let (2, Some(&n)) = (w.rank(), y.shape.last()) {
            let both = Case::new(format!("{name} rhs bias grad"), "MatMulRhsBiasGrad", vec![y, x, w.clone()], w);
            v.push(both.output(f32s(&[n])));
        }
    };
    for (name, k, n) in [("qkv", 256, 768), ("fc", 256, 1024), ("fc2", 1024, 256)] {
        passes(name, f32s(&[16, 128, k]), f32s(&[k, n]), f32s(&[16, 128, n]));
    }
    // Attention, per (sequence, head): scores q @ kᵀ and the weighted values p @ v.
    for (name, k, n) in [("qk", 64, 128), ("pv", 128, 64)] {
        passes(name, f32s(&[16, 4, 128, k]), f32s(&[16, 4, k, n]), f32s(&[16, 4, 128, n]));
    }
    // The forward products as the example runs them: `MatMulAdd` with the bias
    // (fc) and the bias and residual (fc2).
    let fused = |name: &str, k: usize, n: usize, residual: bool| {
        let (x, w, y) = (f32s(&[16, 128, k]), f32s(&[k, n]), f32s(&[16, 128, n]));
        let mut inputs = vec![x, w, f32s(&[n])];
        if residual {
            inputs.push(y.clone());
        }
        Case::new(name, "MatMulAdd", inputs, y)
    };
    v.push(fused("fc fwd bias", 256, 1024, false));
    v.push(fused("fc2 fwd bias residual", 1024, 256, true));
    // Attention as one op (causal, 4 heads of 64), forward and gradient.
    let (qkv, y, lse) = (f32s(&[16, 128, 768]), f32s(&[16, 128, 256]), f32s(&[16, 4, 128]));
    let attention = |c: Case| {
        c.attr("heads", AttrValue::Int(4)).attr("scale", AttrValue::Float(0.125)).attr("causal", AttrValue::Bool(true))
    };
    v.push(attention(Case::new("attention fwd", "Attention", vec![qkv.clone()], y.clone()).output(lse.clone())));
    let grad = Case::new("attention grad", "AttentionGrad", vec![y.clone(), qkv.clone(), y, lse], qkv);
    v.push(attention(grad));
    // The elementwise passes and bias gradients around the fc matmuls.
    let (hid, res) = (f32s(&[16, 128, 1024]), f32s(&[16, 128, 256]));
    v.push(Case::new("fc gelu", "Gelu", vec![hid.clone()], hid.clone()));
    v.push(Case::new("fc gelu grad", "GeluGrad", vec![hid.clone(), hid.clone()], hid.clone()));
    // Layer norm (`GroupNorm` of one group) over the [2048, 256] rows, forward and gradient.
    let (rows, w, st) = (f32s(&[2048, 256]), f32s(&[256]), f32s(&[2048]));
    let ln = |c: Case| c.attr("num_groups", AttrValue::Int(1)).attr("epsilon", AttrValue::Float(1e-5));
    let fwd = Case::new("ln fwd", "GroupNorm", vec![rows.clone(), w.clone(), w.clone()], rows.clone());
    v.push(ln(fwd.output(st.clone()).output(st.clone())));
    let inputs = vec![rows.clone(), rows.clone(), w.clone(), st.clone(), st];
    v.push(ln(Case::new("ln grad", "GroupNormGrad", inputs, rows).output(w.clone()).output(w)));
    let qkv_grad = f32s(&[16, 128, 768]);
    for (name, x, n) in [("qkv bias grad", qkv_grad, 768), ("fc bias grad", hid, 1024), ("fc2 bias grad", res, 256)] {
        let bias = Case::new(name, "ReduceToShape", vec![x], f32s(&[n]));
        v.push(bias.attr("shape", AttrValue::Ints(vec![n as i64])));
    }
    v
}

/// The one-position products of the `gpt` example's decode program: one row
/// times the qkv, projection, fc and fc2 weights, with the bias and (after
/// the projections back to the width) the residual.
fn decode_cases() -> Vec<Case> {
    [("qkv", 256, 768, false), ("proj", 256, 256, true), ("fc", 256, 1024, false), ("fc2", 1024, 256, true)]
        .into_iter()
        .map(|(name, k, n, residual)| {
            let (x, w, y) = (f32s(&[1, 1, k]), f32s(&[k, n]), f32s(&[1, 1, n]));
            let mut inputs = vec![x, w, f32s(&[n])];
            if residual {
                inputs.push(y.clone());
            }
            Case::new(format!("decode {name}"), "MatMulAdd", inputs, y)
        })
        .collect()
}

/// A float32 info.
pub fn f32s(shape: &[usize]) -> TensorInfo {
    TensorInfo::new(DataType::Float32, shape)
}
