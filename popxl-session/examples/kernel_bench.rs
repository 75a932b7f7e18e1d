//! Microseconds per call of the `cpu` kernels of one MNIST training step at the
//! compute-bound settings (batch 128, hidden 512), each built through
//! `build_kernel` exactly as a session builds it and run back to back.
//!
//! ```text
//! cargo run --release -p popxl-session --example kernel_bench -- [--threads 1,2] [--batch 128] [--hidden 512] [--only gelu]
//! ```
//!
//! `--only TEXT` keeps the kernels whose label contains TEXT.
//!
//! Prints one JSON line per (threads, kernel) with the median of 200 calls.

use std::time::Instant;

use popart_ir::{AttrValue, Attributes, DataType, TensorInfo};
use popxl_session::cpu::kernel::{KernelArgs, KernelSpec};
use popxl_session::cpu::kernels::build_kernel;
use popxl_session::cpu::team;

#[path = "support/buffers.rs"]
mod buffers;
use buffers::{buffer, parse_list, Line};

fn f32s(shape: &[usize]) -> TensorInfo {
    TensorInfo::new(DataType::Float32, shape)
}

struct Case {
    label: &'static str,
    op: &'static str,
    attrs: Attributes,
    inputs: Vec<TensorInfo>,
    output: TensorInfo,
    /// Output aliases input 0 (in-place update).
    in_place: bool,
}

fn case(label: &'static str, op: &'static str, inputs: Vec<TensorInfo>, output: TensorInfo) -> Case {
    Case { label, op, attrs: Attributes::new(), inputs, output, in_place: false }
}

fn cases(b: usize, h: usize) -> Vec<Case> {
    let (x, w0, hid, bias) = (f32s(&[b, 784]), f32s(&[784, h]), f32s(&[b, h]), f32s(&[h]));
    let (w1, out) = (f32s(&[h, 10]), f32s(&[b, 10]));
    let mut gelu_grad = case("gelu grad", "UnaryGrad", vec![hid.clone(), hid.clone()], hid.clone());
    gelu_grad.attrs.set("func", AttrValue::Str("gelu".into()));
    let mut sgd = case("sgd update W0", "ScaledAddInplace", vec![w0.clone(), w0.clone()], w0.clone());
    sgd.attrs.set("a", AttrValue::Float(1.0));
    sgd.attrs.set("b", AttrValue::Float(-0.01));
    sgd.in_place = true;
    let mut reduce = case("bias grad", "ReduceToShape", vec![hid.clone()], bias.clone());
    reduce.attrs.set("shape", AttrValue::Ints(vec![h as i64]));
    vec![
        case("x @ W0", "MatMul", vec![x.clone(), w0.clone()], hid.clone()),
        case("x^T @ dh", "MatMulRhsGrad", vec![hid.clone(), x.clone(), w0.clone()], w0.clone()),
        case("h @ W1", "MatMul", vec![hid.clone(), w1.clone()], out.clone()),
        case("h^T @ dy", "MatMulRhsGrad", vec![out.clone(), hid.clone(), w1.clone()], w1.clone()),
        case("dy @ W1^T", "MatMulLhsGrad", vec![out.clone(), hid.clone(), w1.clone()], hid.clone()),
        case("add bias", "Add", vec![hid.clone(), bias], hid.clone()),
        case("gelu", "Gelu", vec![hid.clone()], hid.clone()),
        gelu_grad,
        reduce,
        sgd,
    ]
}

fn main() {
    let (mut threads, mut batch, mut hidden) = (vec![1, 2], 128, 512);
    let mut only = String::new();
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).map(String::as_str).unwrap_or("");
        match pair[0].as_str() {
            "--threads" => threads = parse_list(value),
            "--batch" => batch = value.parse().expect("--batch takes an integer"),
            "--hidden" => hidden = value.parse().expect("--hidden takes an integer"),
            "--only" => only = value.to_string(),
            other => panic!("unknown option {other}; see the example's doc comment"),
        }
    }
    for &t in &threads {
        for c in cases(batch, hidden).into_iter().filter(|c| c.label.contains(only.as_str())) {
            let spec = KernelSpec {
                def: popart_ir::lookup_op(c.op).expect("builtin op"),
                attrs: &c.attrs,
                inputs: c.inputs.iter().enumerate().map(|(i, t)| (i as u32, t.clone())).collect(),
                outputs: vec![(0, c.output.clone())],
                check_indices: false,
            };
            let kernel = build_kernel(&spec).expect("kernel");
            let bufs: Vec<Vec<Line>> =
                c.inputs.iter().enumerate().map(|(i, t)| buffer(t.nelms(), i as u64 + 7)).collect();
            let mut y = buffer(c.output.nelms(), 3);
            let mut times: Vec<f64> = team::with_max_threads(t, || {
                let mut in_ptrs: Vec<*const u8> = bufs.iter().map(|b| b.as_ptr() as *const u8).collect();
                let out_ptrs = [y.as_mut_ptr() as *mut u8];
                if c.in_place {
                    in_ptrs[0] = out_ptrs[0];
                }
                let args = KernelArgs { inputs: &in_ptrs, outputs: &out_ptrs };
                // SAFETY: buffers match the spec's infos; only declared aliases overlap.
                let run = || unsafe { kernel.run(&args) }.expect("no run-time checks");
                run();
                (0..200)
                    .map(|_| {
                        let t0 = Instant::now();
                        run();
                        t0.elapsed().as_secs_f64() * 1e6
                    })
                    .collect()
            });
            times.sort_by(f64::total_cmp);
            println!(
                "{{\"bench\": \"popxl_cpu_kernel\", \"threads\": {t}, \"kernel\": \"{}\", \"op\": \"{}\", \"us_median\": {:.1}, \"us_p10\": {:.1}}}",
                c.label,
                c.op,
                times[times.len() / 2],
                times[times.len() / 10]
            );
        }
    }
}
