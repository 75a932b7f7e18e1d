use std::time::Instant;
use popart_ir::{Attributes, DataType, TensorInfo};
use popxl_session::cpu::kernel::{KernelArgs, KernelSpec};
use popxl_session::cpu::kernels::build_kernel;
fn main() {
    for (op, sa, sb) in [("Add", vec![4usize], vec![4usize]), ("Add", vec![1<<20], vec![1<<20]), ("Add", vec![1024, 1024], vec![1024]), ("Mul", vec![1<<20], vec![]), ("Gelu", vec![1<<20], vec![]), ("Tanh", vec![1<<20], vec![]), ("Exp", vec![1<<20], vec![]), ("Sigmoid", vec![1<<20], vec![])] {
        let attrs = Attributes::new();
        let n: usize = sa.iter().product();
        let a = vec![1.5f32; n]; let b = vec![2.0f32; sb.iter().product()]; let mut y = vec![0f32; n];
        let mut inputs = vec![(0, TensorInfo::new(DataType::Float32, sa.clone()))];
        let unary = matches!(op, "Gelu" | "Tanh" | "Exp" | "Sigmoid");
        if !unary { inputs.push((1, TensorInfo::new(DataType::Float32, sb.clone()))); }
        let spec = KernelSpec { op_type: op, attrs: &attrs, inputs, outputs: vec![(0, TensorInfo::new(DataType::Float32, sa.clone()))] };
        let k = build_kernel(&spec).unwrap();
        let ip = [a.as_ptr() as *const u8, b.as_ptr() as *const u8];
        let op_ = [y.as_mut_ptr() as *mut u8];
        let args = KernelArgs { inputs: if unary { &ip[..1] } else { &ip }, outputs: &op_ };
        let iters = if n < 100 { 10_000_000 } else { 300 };
        unsafe { k.run(&args) };
        let t0 = Instant::now();
        for _ in 0..iters { unsafe { k.run(&args) }; }
        let ns = t0.elapsed().as_secs_f64() * 1e9 / iters as f64;
        println!("{op} {sa:?} {sb:?}: {ns:.1} ns/run, {:.2} GB/s", (3 * n * 4) as f64 / ns);
    }
}
