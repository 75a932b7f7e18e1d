//! Runs a function of host inputs on the `cpu` device, the PopXL way (a
//! subgraph called from the main graph), and optionally its gradients from
//! `autodiff` for a given output gradient: shared by the op tests that compare
//! both passes with reference values.

#![allow(dead_code)]

use std::collections::HashMap;

use ndarray::ArrayD;
use ndarray_npy::NpzReader;
use popxl::{ops, transforms, DataType, HostArray, Ir, Tensor};
use popxl_session::{Inputs, Session};

/// Array `key` of an `.npz` fixture, read as float32 or float64.
pub fn read_npz<R: std::io::Read + std::io::Seek>(npz: &mut NpzReader<R>, key: &str, dtype: DataType) -> HostArray {
    if dtype == DataType::Float32 {
        let a: ArrayD<f32> = npz.by_name(key).expect(key);
        HostArray::from(a)
    } else {
        let a: ArrayD<f64> = npz.by_name(key).expect(key);
        HostArray::from(a)
    }
}

/// Runs `f(inputs)` and, when `gy` is given, the gradients of `sum(f(inputs) · gy)`
/// w.r.t. every input. Returns `[y, d_input_0, d_input_1, ..]` as f64.
pub fn run_with_grads(
    f: &dyn Fn(&[Tensor]) -> popxl::Result<Tensor>,
    inputs: Vec<HostArray>,
    gy: Option<HostArray>,
) -> Vec<Vec<f64>> {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let mut feeds: Inputs = Inputs::new();
    let mut ts = Vec::new();
    for (i, a) in inputs.into_iter().enumerate() {
        let s = popxl::h2d_stream(a.shape(), a.dtype(), &format!("in{i}")).unwrap();
        ts.push(ops::host_load(&s, &format!("x{i}")).unwrap());
        feeds.insert(s, a);
    }
    let graph = ir.create_graph(|t: Vec<Tensor>| f(&t), ts.clone()).unwrap();
    let refs: Vec<&Tensor> = ts.iter().collect();
    let fwd = ops::call_with_info(&graph, &refs, &[]).unwrap();
    let y = fwd.parent_output(0).unwrap();
    let mut outs = vec![popxl::d2h_stream(y.shape(), y.dtype(), "y").unwrap()];
    ops::host_store(&outs[0], &y).unwrap();
    if let Some(gy) = gy {
        let provided = [graph.outputs().unwrap()[0].clone()];
        let info = transforms::autodiff(&graph, Some(&provided), None, &HashMap::new(), false).unwrap().grad_info;
        let gs = popxl::h2d_stream(y.shape(), y.dtype(), "gy").unwrap();
        let gt = ops::host_load(&gs, "gy").unwrap();
        let acts = info.inputs_dict(&fwd).unwrap();
        let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
        let grads = ops::call(&info.graph(), &[&gt], &acts).unwrap();
        let expected = info.expected_outputs().unwrap();
        for want in &graph.inputs().unwrap() {
            let k = expected.iter().position(|e| e.fwd_tensor() == want).expect("a gradient per input");
            let s = popxl::d2h_stream(grads[k].shape(), grads[k].dtype(), "grad").unwrap();
            ops::host_store(&s, &grads[k]).unwrap();
            outs.push(s);
        }
        feeds.insert(gs, gy);
    }
    drop(g);
    let mut session = Session::new(ir, "cpu").unwrap();
    let result = session.scope(|s| s.run(&feeds)).unwrap();
    outs.iter().map(|s| result[s].to_f64_vec()).collect()
}
