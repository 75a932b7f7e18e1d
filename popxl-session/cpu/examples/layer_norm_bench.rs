//! Layer-norm throughput of the `cpu` device: the `GroupNorm` kernel with one
//! group (PopXL `layer_norm`) forward, and forward + `GroupNormGrad`, float32,
//! for `ROWSxCOLS` inputs (1M elements by default), next to PyTorch's
//! `layer_norm` from `bench/torch_layer_norm.py` run in the same run, its
//! measurements alternating with ours (the script runs as a server).
//!
//! Kernels are built through `build_kernel` as a session builds them and timed
//! with the worker team capped at `--threads` (median of `--reps`
//! measurements of at least `--min-time` seconds, each followed by one of
//! PyTorch's).
//!
//! ```text
//! cargo run --release --example layer_norm_bench -- --threads 2 --torch bench/torch_layer_norm.py
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
        (2usize, "1024x1024,4096x256".to_string(), None::<String>, 5usize, 0.2f64);
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
    println!("layer_norm float32, {threads} threads (torch: PyTorch's time over ours, above 1: faster)");
    println!("{:<12} {:>9} {:>12} {:>9} {:>12}", "shape", "fwd ms", "fwd+bwd ms", "torch/fwd", "torch/both");
    for s in shapes.split(',') {
        let (r, c) = s.split_once('x').map(|(r, c)| (r.parse().unwrap(), c.parse().unwrap())).expect("ROWSxCOLS");
        let f32s = |sh: &[usize]| TensorInfo::new(DataType::Float32, sh);
        let (x, w, st) = (f32s(&[r, c]), f32s(&[c]), f32s(&[r]));
        let attrs = Attributes::new().with("num_groups", AttrValue::Int(1)).with("epsilon", AttrValue::Float(1e-5));
        let fwd = kernel("GroupNorm", &attrs, &[x.clone(), w.clone(), w.clone()], &[x.clone(), st.clone(), st.clone()]);
        let bwd = kernel(
            "GroupNormGrad",
            &attrs,
            &[x.clone(), x.clone(), w.clone(), st.clone(), st.clone()],
            &[x.clone(), w.clone(), w.clone()],
        );
        let bufs: Vec<Vec<Line>> = [r * c, c, c, r * c].iter().enumerate().map(|(i, &n)| buffer(n, i as u64)).collect();
        let mut outs: Vec<Vec<Line>> = [r * c, r, r, r * c, c, c].iter().map(|&n| buffer(n, 9)).collect();
        let op: Vec<*mut u8> = outs.iter_mut().map(|b| b.as_mut_ptr() as *mut u8).collect();
        let ip = |i: usize| bufs[i].as_ptr() as *const u8;
        let f_in = [ip(0), ip(1), ip(2)];
        let f_out = [op[0], op[1], op[2]];
        let b_in = [ip(3), ip(0), ip(1), op[1] as *const u8, op[2] as *const u8];
        let b_out = [op[3], op[4], op[5]];
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
        println!("{s:<12} {tf:>9.3} {tb:>12.3} {:>9} {:>12}", ratio(pf, tf), ratio(pb, tb));
    }
}
