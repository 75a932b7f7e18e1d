//! Training-mode batch-norm throughput of the `cpu` device: the `BatchNorm`
//! kernel forward, and forward + `BatchNormGrad`, float32, for `NxC[xHxW..]`
//! inputs, next to PyTorch's `batch_norm(training=True)` from
//! `bench/torch_batch_norm.py` run in the same run, its measurements
//! alternating with ours (the script runs as a server).
//!
//! Kernels are built through `build_kernel` as a session builds them and timed
//! with the worker team capped at `--threads` (median of `--reps`
//! measurements of at least `--min-time` seconds, each followed by one of
//! PyTorch's).
//!
//! ```text
//! cargo run --release --example batch_norm_bench -- --threads 2 --torch bench/torch_batch_norm.py
//! ```

use popart_ir::{AttrValue, Attributes, DataType, TensorInfo};
use popxl_cpu::kernel::KernelArgs;
use popxl_cpu::team;

#[path = "support/buffers.rs"]
#[allow(dead_code)]
mod buffers;
#[path = "support/kernel_timing.rs"]
mod kernel_timing;
#[path = "support/torch_server.rs"]
mod torch_server;
use buffers::{buffer, Line};
use kernel_timing::{kernel, timed};
use torch_server::TorchServer;

fn main() {
    let (mut threads, mut shapes, mut torch, mut reps, mut min_time) =
        (2usize, "32x64x32x32,8x256x16x16,256x1024".to_string(), None::<String>, 5usize, 0.2f64);
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let v = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--threads" => threads = v.parse().expect("--threads takes an integer"),
            "--shapes" => shapes = v,
            "--torch" => torch = Some(v),
            "--reps" => reps = v.parse().expect("--reps takes an integer"),
            "--min-time" => min_time = v.parse().expect("--min-time takes seconds"),
            other => panic!("unknown option {other}; see the example's doc comment"),
        }
    }
    let args = ["--threads".to_string(), threads.to_string(), "--min-time".to_string(), min_time.to_string()];
    let mut torch = torch.and_then(|script| TorchServer::start(&script, &args));
    println!("batch_norm (training) float32, {threads} threads (torch: PyTorch's time over ours, above 1: faster)");
    println!("{:<16} {:>9} {:>12} {:>9} {:>12}", "shape", "fwd ms", "fwd+bwd ms", "torch/fwd", "torch/both");
    for s in shapes.split(',') {
        let shape: Vec<usize> = s.split('x').map(|v| v.parse().expect("NxC[xHxW..]")).collect();
        assert!(shape.len() >= 2, "NxC[xHxW..]");
        let (n, c) = (shape.iter().product::<usize>(), shape[1]);
        let f32s = |sh: &[usize]| TensorInfo::new(DataType::Float32, sh);
        let (x, p) = (f32s(&shape), f32s(&[c]));
        let attrs = Attributes::new()
            .with("epsilon", AttrValue::Float(1e-5))
            .with("momentum", AttrValue::Float(0.9))
            .with("unbiased_variance", AttrValue::Bool(true));
        let fwd = kernel(
            "BatchNorm",
            &attrs,
            &[x.clone(), p.clone(), p.clone(), p.clone(), p.clone()],
            &[x.clone(), p.clone(), p.clone(), p.clone(), p.clone()],
        );
        let bwd = kernel(
            "BatchNormGrad",
            &Attributes::new(),
            &[x.clone(), x.clone(), p.clone(), p.clone(), p.clone()],
            &[x.clone(), p.clone(), p.clone()],
        );
        // Inputs x, scale, bias, mean, var, gy; outputs y, 4 statistics, dx, dscale, dbias.
        let bufs: Vec<Vec<Line>> = [n, c, c, c, c, n].iter().enumerate().map(|(i, &k)| buffer(k, i as u64)).collect();
        let mut outs: Vec<Vec<Line>> = [n, c, c, c, c, n, c, c].iter().map(|&k| buffer(k, 9)).collect();
        let op: Vec<*mut u8> = outs.iter_mut().map(|b| b.as_mut_ptr() as *mut u8).collect();
        let ip = |i: usize| bufs[i].as_ptr() as *const u8;
        let f_in = [ip(0), ip(1), ip(2), ip(3), ip(4)];
        let f_out = [op[0], op[1], op[2], op[3], op[4]];
        let b_in = [ip(5), ip(0), ip(1), op[3] as *const u8, op[4] as *const u8];
        let b_out = [op[5], op[6], op[7]];
        let (fa, ba) = (KernelArgs { inputs: &f_in, outputs: &f_out }, KernelArgs { inputs: &b_in, outputs: &b_out });
        // SAFETY: buffers match the specs' infos and outputs do not overlap inputs.
        let run_f = || unsafe { fwd.run(&fa) }.expect("run");
        let run_b = || unsafe { bwd.run(&ba) }.expect("run");
        let ((tf, pf), (tb, pb)) = team::with_max_threads(threads, || {
            (
                timed(reps, min_time, run_f, &mut torch, s, "fwd"),
                timed(
                    reps,
                    min_time,
                    || {
                        run_f();
                        run_b();
                    },
                    &mut torch,
                    s,
                    "both",
                ),
            )
        });
        let ratio = |t: Option<f64>, ours: f64| t.map_or("-".into(), |t| format!("{:.2}", t / ours));
        println!("{s:<16} {tf:>9.3} {tb:>12.3} {:>9} {:>12}", ratio(pf, tf), ratio(pb, tb));
    }
}
