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
    let mut opts = Options::from_args("1024x1024,4096x256");
    let threads = opts.threads;
    println!("layer_norm float32, {threads} threads (torch: PyTorch's time over ours, above 1: faster)");
    println!("{:<12} {:>9} {:>12} {:>9} {:>12}", "shape", "fwd ms", "fwd+bwd ms", "torch/fwd", "torch/both");
    for s in opts.shapes.clone().split(',') {
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
        let ((tf, pf), (tb, pb)) = opts.fwd_and_both(s, run_f, run_b);
        println!("{s:<12} {tf:>9.3} {tb:>12.3} {:>9} {:>12}", ratio(pf, tf), ratio(pb, tb));
    }
}
