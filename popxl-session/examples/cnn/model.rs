//! The LeNet-5-style network of the `cnn` example, built the PopXL way: each
//! layer is a `Module` traced once into a graph and called with
//! `call_with_info`; the backward pass calls each layer's `autodiff` graph in
//! reverse order; SGD with momentum through `scaled_add_` (v = m v + g, then
//! p -= lr v); everything `in_sequence`.

use std::collections::HashMap;

use ndarray::{ArrayD, IxDyn};
use popxl::ops::{self, CallSiteInfo};
use popxl::{transforms, HostArray, Ir, Module, Tensor};

use super::data::Rng;
use super::layers;

/// One layer of the network: its parameter shapes and how it computes.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// conv k x k with `pad` on each side, bias, relu, 2x2 max pool.
    ConvPool { cin: usize, cout: usize, k: usize, pad: usize },
    /// x @ W + b, then relu when `relu`.
    Linear { fin: usize, fout: usize, relu: bool },
}

/// The network (Caffe's LeNet): conv 5x5 (1->20) -> pool -> conv 5x5 (20->50)
/// -> pool -> linear 800->500 (relu) -> linear 500->10; relu after each conv.
pub const LENET: [Kind; 4] = [
    Kind::ConvPool { cin: 1, cout: 20, k: 5, pad: 0 },
    Kind::ConvPool { cin: 20, cout: 50, k: 5, pad: 0 },
    Kind::Linear { fin: 800, fout: 500, relu: true },
    Kind::Linear { fin: 500, fout: 10, relu: false },
];

impl Kind {
    /// (name suffix, shape, fan_in) of the weight and the bias.
    fn params(self) -> [(&'static str, Vec<usize>, usize); 2] {
        match self {
            Kind::ConvPool { cin, cout, k, .. } => {
                [("W", vec![cout, cin, k, k], cin * k * k), ("b", vec![cout], cin * k * k)]
            }
            Kind::Linear { fin, fout, .. } => [("W", vec![fin, fout], fin), ("b", vec![fout], fin)],
        }
    }
}

/// A layer as a PopXL module: weight and bias are graph inputs kept on the module.
pub struct Layer {
    kind: Kind,
    w: Option<Tensor>,
    b: Option<Tensor>,
}

impl Layer {
    fn new(kind: Kind) -> Self {
        Layer { kind, w: None, b: None }
    }

    fn inputs_dict<'a>(&'a self, w: &'a Tensor, b: &'a Tensor) -> [(&'a Tensor, &'a Tensor); 2] {
        [(self.w.as_ref().expect("built"), w), (self.b.as_ref().expect("built"), b)]
    }
}

impl Module for Layer {
    type Inputs = Tensor;
    type Outputs = Tensor;
    fn build(&mut self, x: Tensor) -> popxl::Result<Tensor> {
        let [(_, ws, _), (_, bs, _)] = self.kind.params();
        let w = popxl::graph_input(ws, popxl::float32, "W")?;
        let b = popxl::graph_input(bs.clone(), popxl::float32, "b")?;
        let y = match self.kind {
            Kind::ConvPool { cout, pad, .. } => {
                let z = layers::conv2d(&x, &w, pad)?;
                let z = ops::add(&z, &b.reshape(&[1, cout as i64, 1, 1])?)?;
                layers::max_pool2(&ops::relu(&z)?)?
            }
            Kind::Linear { relu, .. } => {
                let x = if x.rank() == 2 { x } else { x.reshape(&[x.shape()[0] as i64, -1])? };
                let z = ops::add(&x.matmul(&w)?, &b)?;
                if relu {
                    ops::relu(&z)?
                } else {
                    z
                }
            }
        };
        (self.w, self.b) = (Some(w), Some(b));
        Ok(y)
    }
}

/// Parameters (and momentum buffers) by variable name.
pub type Params = Vec<(String, HostArray)>;

/// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for every weight and bias, drawn in layer
/// order from the example's generator (`bench/torch_cnn.py` draws the same).
pub fn init_params(seed: u64) -> Params {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for (i, kind) in LENET.iter().enumerate() {
        for (suffix, shape, fan_in) in kind.params() {
            let bound = 1.0 / (fan_in as f64).sqrt();
            let n: usize = shape.iter().product();
            let v: Vec<f32> = (0..n).map(|_| ((2.0 * rng.uniform() - 1.0) * bound) as f32).collect();
            let a: HostArray = ArrayD::from_shape_vec(IxDyn(&shape), v).expect("shape").into();
            out.push((format!("l{i}.{suffix}"), a));
        }
    }
    out
}

/// The forward pass of every layer: graphs, call sites and activations.
struct Forward {
    layers: Vec<Layer>,
    graphs: Vec<popxl::Graph>,
    sites: Vec<CallSiteInfo>,
    inputs: Vec<Tensor>,
    output: Tensor,
}

fn forward(ir: &Ir, x: &Tensor, params: &[Tensor]) -> popxl::Result<Forward> {
    let mut f = Forward { layers: vec![], graphs: vec![], sites: vec![], inputs: vec![], output: x.clone() };
    for (i, &kind) in LENET.iter().enumerate() {
        let mut layer = Layer::new(kind);
        let input = f.output.clone();
        let graph = ir.create_graph(&mut layer, &input)?;
        let site = ops::call_with_info(&graph, &[&input], &layer.inputs_dict(&params[2 * i], &params[2 * i + 1]))?;
        f.output = site.parent_output(0)?;
        f.inputs.push(input);
        f.layers.push(layer);
        f.graphs.push(graph);
        f.sites.push(site);
    }
    Ok(f)
}

/// One training step in the current graph: forward, softmax + NLL, backward
/// layer by layer, momentum SGD on `params` with velocities `vel`. Returns the loss.
pub fn train_step(
    ir: &Ir,
    x: &Tensor,
    labels: &Tensor,
    params: &[Tensor],
    vel: &[Tensor],
    lr: f32,
    momentum: f32,
) -> popxl::Result<Tensor> {
    let f = forward(ir, x, params)?;
    let probs = ops::softmax(&f.output, -1)?;
    let (loss, mut grad) = ops::nll_loss_with_softmax_grad(&probs, labels)?;
    let no_infos = HashMap::new();
    for i in (0..LENET.len()).rev() {
        let layer = &f.layers[i];
        let mut required = vec![layer.w.clone().expect("built"), layer.b.clone().expect("built")];
        if i > 0 {
            required.insert(0, f.graphs[i].inputs()?[0].clone());
        }
        let bwd = transforms::autodiff(&f.graphs[i], None, Some(&required), &no_infos, false)?.grad_info;
        let acts = bwd.inputs_dict(&f.sites[i])?;
        let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
        let call = ops::call_with_info(&bwd.graph(), &[&grad], &acts)?;
        let grads = bwd.fwd_parent_ins_to_grad_parent_outs(&f.sites[i], &call)?;
        for j in [2 * i, 2 * i + 1] {
            // v = momentum v + g; p -= lr v
            ops::scaled_add_(&vel[j], &grads[&params[j]], momentum, 1.0f32)?;
            ops::scaled_add_(&params[j], &vel[j], 1.0f32, -lr)?;
        }
        if i > 0 {
            grad = grads[&f.inputs[i]].clone();
        }
    }
    Ok(loss)
}

/// The logits of the forward pass only (the test program).
pub fn logits(ir: &Ir, x: &Tensor, params: &[Tensor]) -> popxl::Result<Tensor> {
    Ok(forward(ir, x, params)?.output)
}
