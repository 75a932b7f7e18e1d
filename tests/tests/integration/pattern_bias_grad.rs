//! The `fuse_bias_grad` pattern on a PopXL gradient graph: a Linear layer's
//! gradients from `autodiff`, called with a provided output gradient, `dW` and
//! `db` streamed to the host. With patterns on, the weight and bias gradients
//! are one `MatMulRhsBiasGrad` kernel; its values are checked against the
//! gradients computed here in f64 and against a session with patterns off.
//! The sizes put the product on the packed GEMM where the CPU has it (at least
//! 128 rows and columns, several depth blocks).

use std::collections::HashMap;

use ndarray::{Array2, ArrayD, IxDyn};
use popxl::{ops, transforms, HostArray, Ir};
use popxl_session::{Session, SessionOptions};
use tests::Linear;

const M: usize = 700;
const K: usize = 130;
const N: usize = 131;

struct Step {
    ir: Ir,
    x: popxl::HostToDeviceStream,
    dy: popxl::HostToDeviceStream,
    dw: popxl::DeviceToHostStream,
    db: popxl::DeviceToHostStream,
}

/// y = x @ W + b; (dW, db) from the gradient graph given dy, streamed out.
fn build() -> Step {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x_s = popxl::h2d_stream([M, K], popxl::float32, "x").unwrap();
    let dy_s = popxl::h2d_stream([M, N], popxl::float32, "dy").unwrap();
    let dw_s = popxl::d2h_stream([K, N], popxl::float32, "dw").unwrap();
    let db_s = popxl::d2h_stream([N], popxl::float32, "db").unwrap();
    let x = ops::host_load(&x_s, "x").unwrap();
    let dy = ops::host_load(&dy_s, "dy").unwrap();
    let w = popxl::variable(Array2::<f32>::zeros((K, N)), "W").unwrap();
    let b = popxl::variable(vec![0f32; N], "b").unwrap();
    let mut linear = Linear::new(N).with_inputs_first();
    let graph = ir.create_graph(&mut linear, &x).unwrap();
    let fwd = ops::call_with_info(&graph, &[&x], &[(linear.w(), &w), (linear.b(), &b)]).unwrap();
    let bwd = transforms::autodiff(&graph, None, None, &HashMap::new(), false).unwrap().grad_info;
    let acts = bwd.inputs_dict(&fwd).unwrap();
    let acts: Vec<(&popxl::Tensor, &popxl::Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
    let call = ops::call_with_info(&bwd.graph(), &[&dy], &acts).unwrap();
    let grads = bwd.fwd_parent_ins_to_grad_parent_outs(&fwd, &call).unwrap();
    ops::host_store(&dw_s, &grads[&w]).unwrap();
    ops::host_store(&db_s, &grads[&b]).unwrap();
    Step { ir: ir.clone(), x: x_s, dy: dy_s, dw: dw_s, db: db_s }
}

fn values(rows: usize, cols: usize, seed: usize) -> Vec<f32> {
    (0..rows * cols).map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 - 1001.0) / 1001.0).collect()
}

fn host(rows: usize, cols: usize, v: &[f32]) -> HostArray {
    ArrayD::from_shape_vec(IxDyn(&[rows, cols]), v.to_vec()).unwrap().into()
}

fn f64s(a: &HostArray) -> Vec<f64> {
    a.as_f32().expect("float32").iter().map(|&v| v as f64).collect()
}

/// (dW, db, fused) from one run of the step.
fn run(step: &Step, patterns: bool, x: &[f32], dy: &[f32]) -> (Vec<f64>, Vec<f64>, bool) {
    let options = SessionOptions { patterns, ..SessionOptions::default() };
    let mut session = Session::with_options(step.ir.clone(), "cpu", options).unwrap();
    let fused = session.executable().dump().contains("MatMulRhsBiasGrad");
    let inputs = [(step.x.clone(), host(M, K, x)), (step.dy.clone(), host(M, N, dy))];
    let out = session.scope(|s| s.run(&inputs.into_iter().collect())).unwrap();
    (f64s(&out[&step.dw]), f64s(&out[&step.db]), fused)
}

#[test]
fn weight_and_bias_gradients_are_one_kernel_with_the_same_values() {
    let step = build();
    let (x, dy) = (values(M, K, 1), values(M, N, 2));
    let dw_want: Vec<f64> =
        (0..K * N).map(|e| (0..M).map(|r| x[r * K + e / N] as f64 * dy[r * N + e % N] as f64).sum()).collect();
    let db_want: Vec<f64> = (0..N).map(|j| (0..M).map(|r| dy[r * N + j] as f64).sum()).collect();
    for patterns in [true, false] {
        let (dw, db, fused) = run(&step, patterns, &x, &dy);
        assert_eq!(fused, patterns, "fused with patterns = {patterns}");
        tests::assert_close(&dw, &dw_want, 1e-4, "dW");
        tests::assert_close(&db, &db_want, 1e-4, "db");
    }
}
