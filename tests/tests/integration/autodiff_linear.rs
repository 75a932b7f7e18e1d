//! PopXL's Listing 10.1 (autodiff.py): the Linear module, `call_with_info`,
//! `transforms::autodiff`, and the gradient graph called with a seed of ones and
//! `inputs_dict`, run on the `cpu` device and checked against gradients computed
//! here by hand; plus a snapshot of the IR text.

use std::collections::HashMap;

use ndarray::{array, Array1, Array2};
use popxl::transforms::{self, ExpectedConnectionType};
use popxl::{ops, HostArray, Ir, Tensor};
use popxl_session::{Inputs, Session};
use tests::Linear;

fn w_data() -> Array2<f32> {
    array![[0.05f32, -0.12], [0.17, 0.09]]
}

fn b_data() -> Array1<f32> {
    array![0.3f32, -0.25]
}

fn x_data() -> Array2<f32> {
    array![[1.5f32, -2.0], [0.25, 4.0]]
}

struct Model {
    ir: Ir,
    input: popxl::HostToDeviceStream,
    streams: [popxl::DeviceToHostStream; 4],
}

/// Listing 10.1, storing y and every gradient.
fn build() -> Model {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let input = popxl::h2d_stream([2, 2], popxl::float32, "input_stream").unwrap();
    let x = ops::host_load(&input, "x").unwrap();
    let w = popxl::variable(w_data(), "W").unwrap();
    let b = popxl::variable(b_data(), "b").unwrap();

    let mut linear = Linear::new(2).with_inputs_first();
    let linear_graph = ir.create_graph(&mut linear, &x).unwrap();
    let fwd_call_info = ops::call_with_info(&linear_graph, &[&x], &[(linear.w(), &w), (linear.b(), &b)]).unwrap();
    let y = fwd_call_info.parent_output(0).unwrap();

    let bwd_graph_info = transforms::autodiff(&linear_graph, None, None, &HashMap::new(), false).unwrap().grad_info;
    let grad_seed = popxl::constant(Array2::<f32>::ones((2, 2)), "grad_seed").unwrap();
    let activations = bwd_graph_info.inputs_dict(&fwd_call_info).unwrap();
    let activations: Vec<(&Tensor, &Tensor)> = activations.iter().map(|(k, v)| (k, v)).collect();
    let grad_call_info = ops::call_with_info(&bwd_graph_info.graph(), &[&grad_seed], &activations).unwrap();
    let grads = grad_call_info.outputs().unwrap();
    let (grads_x, grads_w, grads_b) = (&grads[0], &grads[1], &grads[2]);

    // The info's mappings agree with the outputs' order.
    let by_fwd_input = bwd_graph_info.fwd_graph_ins_to_grad_parent_outs(&grad_call_info).unwrap();
    assert_eq!(&by_fwd_input[linear.w()], grads_w);
    let by_parent = bwd_graph_info.fwd_parent_ins_to_grad_parent_outs(&fwd_call_info, &grad_call_info).unwrap();
    assert_eq!((&by_parent[&x], &by_parent[&w], &by_parent[&b]), (grads_x, grads_w, grads_b));
    let outs = bwd_graph_info.expected_outputs().unwrap();
    assert!(outs.iter().all(|e| e.connection_type() == ExpectedConnectionType::FwdGrad));
    assert_eq!(outs[1].fwd_tensor(), linear.w());

    let store = |t: &Tensor, name: &str| {
        let s = popxl::d2h_stream(t.shape(), t.dtype(), name).unwrap();
        ops::host_store(&s, t).unwrap();
        s
    };
    let streams =
        [store(&y, "output_stream"), store(grads_x, "grad_x"), store(grads_w, "grad_stream"), store(grads_b, "grad_b")];
    drop(_g);
    Model { ir, input, streams }
}

/// `a @ b` by the definition.
fn matmul(a: &Array2<f64>, b: &Array2<f64>) -> Array2<f64> {
    let mut c = Array2::zeros((a.nrows(), b.ncols()));
    for i in 0..a.nrows() {
        for j in 0..b.ncols() {
            c[[i, j]] = (0..a.ncols()).map(|k| a[[i, k]] * b[[k, j]]).sum();
        }
    }
    c
}

fn assert_close(got: &HostArray, want: &[f64]) {
    tests::assert_close(&got.to_f64_vec(), want, 1e-5, "output");
}

#[test]
fn listing_10_1_gradients_on_cpu() {
    let Model { ir, input, streams } = build();
    let mut session = Session::new(ir, "cpu").unwrap();
    let inputs: Inputs = [(input, HostArray::from(x_data()))].into_iter().collect();
    let outputs = session.scope(|s| s.run(&inputs)).unwrap();

    let x = x_data().mapv(f64::from);
    let w = w_data().mapv(f64::from);
    let b = b_data().mapv(f64::from);
    let seed = Array2::<f64>::ones((2, 2));
    // y = x W + b; dL/dx = seed Wᵀ; dL/dW = xᵀ seed; dL/db = column sums of seed.
    let y = matmul(&x, &w) + &b;
    let dx = matmul(&seed, &w.t().to_owned());
    let dw = matmul(&x.t().to_owned(), &seed);
    let db = seed.sum_axis(ndarray::Axis(0));
    let [sy, sx, sw, sb] = &streams;
    assert_close(&outputs[sy], y.as_slice().unwrap());
    assert_close(&outputs[sx], dx.as_slice().unwrap());
    assert_close(&outputs[sw], dw.as_slice().unwrap());
    assert_close(&outputs[sb], db.as_slice().unwrap());
    // With these numbers: dW = [[1.75, 1.75], [2.0, 2.0]], db = [2, 2].
    assert_close(&outputs[sw], &[1.75, 1.75, 2.0, 2.0]);
}

#[test]
fn listing_10_1_ir_text() {
    let Model { ir, .. } = build();
    let text = ir.with_ir(popart_ir::text::to_text);
    insta::assert_snapshot!(text);
}

#[test]
fn popxl_autodiff_errors_are_typed() {
    use popxl::transforms::AutodiffError;
    use popxl::PopXlError;
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(x_data(), "x").unwrap();
    let mut linear = Linear::new(2).with_inputs_first();
    let g = ir.create_graph(&mut linear, &x).unwrap();
    let w = linear.w().clone();
    // A forward input is not an output, and a main-graph tensor is not part of the graph.
    let err = transforms::autodiff(&g, Some(std::slice::from_ref(&w)), None, &HashMap::new(), false).unwrap_err();
    assert_eq!(
        err,
        PopXlError::Autodiff(AutodiffError::ProvidedNotOutput { graph: "Linear".into(), tensor: "W".into() })
    );
    let err = transforms::autodiff(&g, None, Some(std::slice::from_ref(&x)), &HashMap::new(), false).unwrap_err();
    assert!(matches!(err, PopXlError::Autodiff(AutodiffError::RequiredNotInput { .. })), "{err}");
    // grads_required subset: only W's gradient.
    let info =
        transforms::autodiff(&g, None, Some(std::slice::from_ref(&w)), &HashMap::new(), false).unwrap().grad_info;
    let outs = info.expected_outputs().unwrap();
    assert_eq!(outs.len(), 1);
    assert_eq!(outs[0].fwd_tensor(), &w);
    assert_eq!(info.forward_graph(), g);
    // inputs_dict takes a call of the forward graph; a call of another graph is rejected.
    let wv = popxl::variable(w_data(), "Wv").unwrap();
    let bv = popxl::variable(b_data(), "bv").unwrap();
    let fwd = ops::call_with_info(&g, &[&x], &[(&w, &wv), (linear.b(), &bv)]).unwrap();
    let dict = info.inputs_dict(&fwd).unwrap();
    // MatMulRhsGrad reads x, and W for its shape; not b.
    let parents: Vec<&Tensor> = dict.iter().map(|(_, p)| p).collect();
    assert_eq!(parents, [&x, &wv]);
    let other = ir.create_graph(|t: Tensor| -t, &x).unwrap();
    let other_call = ops::call_with_info(&other, &[&x], &[]).unwrap();
    assert!(matches!(info.inputs_dict(&other_call), Err(PopXlError::WrongCalledGraph { .. })));
    ir.freeze();
    let err = transforms::autodiff(&g, None, None, &HashMap::new(), false).unwrap_err();
    assert!(matches!(err, PopXlError::IrFrozen { .. }), "{err}");
}
