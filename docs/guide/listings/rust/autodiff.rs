// Autodiff of one graph: the gradient graph is called with the output's gradient and the
// activations `inputs_dict` names; the gradients are checked against the formulas
// dx = dy W^T, dW = x^T dy, db = sum over rows of dy.
use std::collections::HashMap;

use ndarray::{array, Array2, Axis};
use popxl::transforms::autodiff;
use popxl::{ops, HostArray, Ir, Module, Tensor};
use popxl_session::{Inputs, Session};

/// `x @ W + b`, with `W` and `b` as graph inputs the caller connects.
#[derive(Default)]
struct Linear {
    w: Option<Tensor>,
    b: Option<Tensor>,
}

impl Module for Linear {
    type Inputs = Tensor;
    type Outputs = Tensor;
    fn build(&mut self, x: Tensor) -> popxl::Result<Tensor> {
        let w = popxl::graph_input([x.shape()[1], 2], popxl::float32, "W")?;
        let b = popxl::graph_input([2], popxl::float32, "b")?;
        let y = &x.matmul(&w)? + &b;
        (self.w, self.b) = (Some(w), Some(b));
        Ok(y)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let x_data: Array2<f32> = array![[1.5, -2.0, 0.5], [0.25, 4.0, -1.0]];
    let w_data: Array2<f32> = array![[0.05, -0.12], [0.17, 0.09], [0.3, 0.0]];
    let dy_data: Array2<f32> = array![[1.0, 0.5], [-2.0, 1.0]];

    let ir = Ir::new();
    let _main = ir.main_graph().enter();
    let x = popxl::constant(x_data.clone(), "x")?;
    let w = popxl::variable(w_data.clone(), "W")?;
    let b = popxl::variable(array![0.3f32, -0.25], "b")?;
    let mut linear = Linear::default();
    let graph = ir.create_graph(&mut linear, &x)?;
    let (w_in, b_in) = (linear.w.clone().ok_or("built")?, linear.b.clone().ok_or("built")?);
    let fwd = ops::call_with_info(&graph, &[&x], &[(&w_in, &w), (&b_in, &b)])?;

    // The gradient graph of every input of `graph`, given the gradient of its output.
    let grad_info = autodiff(&graph, None, None, &HashMap::new(), false)?.grad_info;
    let activations = grad_info.inputs_dict(&fwd)?; // forward tensors the gradient graph reads
    let activations: Vec<(&Tensor, &Tensor)> = activations.iter().map(|(k, v)| (k, v)).collect();
    let dy = popxl::constant(dy_data.clone(), "dy")?;
    let bwd = ops::call_with_info(&grad_info.graph(), &[&dy], &activations)?;
    let grads = grad_info.fwd_parent_ins_to_grad_parent_outs(&fwd, &bwd)?; // parent input -> gradient

    let mut streams = Vec::new();
    for (t, name) in [(&x, "dx"), (&w, "dW"), (&b, "db")] {
        let s = popxl::d2h_stream(grads[t].shape(), grads[t].dtype(), name)?;
        ops::host_store(&s, &grads[t])?;
        streams.push(s);
    }
    drop(_main);

    let mut session = Session::new(ir, "cpu")?;
    let out = session.enter()?.run(&Inputs::new())?;
    let close = |got: &HostArray, want: Array2<f32>| {
        let got = got.to_f64_vec();
        got.len() == want.len() && got.iter().zip(want.iter()).all(|(g, w)| (g - f64::from(*w)).abs() < 1e-5)
    };
    assert!(close(&out[&streams[0]], dy_data.dot(&w_data.t())), "dx");
    assert!(close(&out[&streams[1]], x_data.t().dot(&dy_data)), "dW");
    assert!(close(&out[&streams[2]], dy_data.sum_axis(Axis(0)).insert_axis(Axis(0))), "db");
    Ok(())
}
