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

#[path = "support/buffers.rs"]
#[allow(dead_code)]
mod buffers;
#[path = "support/kernel_timing.rs"]
mod kernel_timing;
#[path = "support/torch_server.rs"]
mod torch_server;
use buffers::{buffer, Line};
use kernel_timing::{kernel, ratio, Options};

fn main() {
    let mut opts = Options::from_args("32x64x32x32,8x256x16x16,256x1024");
    let threads = opts.threads;
    println!("batch_norm (training) float32, {threads} threads (torch: PyTorch's time over ours, above 1: faster)");
    println!("{:<16} {:>9} {:>12} {:>9} {:>12}", "shape", "fwd ms", "fwd+bwd ms", "torch/fwd", "torch/both");
    for s in opts.shapes.clone().split(',') {
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
        let ((tf, pf), (tb, pb)) = opts.fwd_and_both(s, run_f, run_b);
        println!("{s:<16} {tf:>9.3} {tb:>12.3} {:>9} {:>12}", ratio(pf, tf), ratio(pb, tb));
    }
}
