//! Autodiff of `repeat` against the unrolled model: the same residual stack of
//! `L` layers `x -> x + gelu(x @ W_l + b_l)`, built (a) unrolled, one `call` of a
//! layer graph per layer with per-layer weights, and (b) as one `repeat` of a
//! layer body over stacked weights `W [L, D, D]`, `b [L, D]`, each iteration
//! taking its layer with `dynamic_slice` at a carried counter. Both are
//! differentiated with `autodiff` and trained with plain SGD on the `cpu` device:
//! the losses of every step and the final weights must agree.

use std::collections::HashMap;

use ndarray::{Array2, Array3, ArrayD, Axis, IxDyn};
use popxl::{ops, transforms, HostArray, Ir, Tensor};
use popxl_session::{Inputs, Session};

const L: usize = 3;
const B: usize = 4;
const D: usize = 5;
const LR: f32 = 0.1;
const STEPS: usize = 4;

/// SplitMix64 values in [-1, 1).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

struct Init {
    w: Array3<f32>,
    b: Array2<f32>,
    /// One input batch per step.
    xs: Vec<Array2<f32>>,
}

fn init() -> Init {
    let scale = 1.0 / (D as f32).sqrt();
    let w = Array3::from_shape_vec((L, D, D), values(1, L * D * D)).unwrap().mapv(|v| v * scale);
    let b = Array2::from_shape_vec((L, D), values(2, L * D)).unwrap().mapv(|v| v * 0.1);
    let xs = (0..STEPS).map(|s| Array2::from_shape_vec((B, D), values(10 + s as u64, B * D)).unwrap()).collect();
    Init { w, b, xs }
}

/// `mean((x)^2)`: the loss of the stack's output.
fn loss_of(h: &Tensor) -> popxl::Result<Tensor> {
    ops::mean(&(h * h), &[], false)
}

/// The forward graph's call, its gradient graph called with a seed of 1, and an SGD
/// step `p -= LR * dp` for every parameter.
fn train_step(graph: &popxl::Graph, args: &[Tensor], params: &[Tensor]) -> popxl::Result<Tensor> {
    let refs: Vec<&Tensor> = args.iter().collect();
    let fwd = ops::call_with_info(graph, &refs, &[])?;
    let loss = fwd.parent_output(0)?;
    let inputs = graph.inputs()?;
    let required: Vec<Tensor> = inputs[1..].to_vec();
    let info = transforms::autodiff(graph, None, Some(&required), &HashMap::new(), false)?.grad_info;
    let acts = info.inputs_dict(&fwd)?;
    let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
    let one = popxl::constant(1.0f32, "dloss")?;
    let bwd = ops::call_with_info(&info.graph(), &[&one], &acts)?;
    let grads = info.fwd_parent_ins_to_grad_parent_outs(&fwd, &bwd)?;
    for p in params {
        ops::scaled_add_(p, &grads[p], 1.0f32, -LR)?;
    }
    Ok(loss)
}

struct Model {
    ir: Ir,
    x_in: popxl::HostToDeviceStream,
    loss_out: popxl::DeviceToHostStream,
    params: Vec<Tensor>,
}

/// (a): one `call` of a layer graph per layer, weights `W_l [D, D]`, `b_l [D]`.
fn unrolled(init: &Init) -> Model {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let x_in = popxl::h2d_stream([B, D], popxl::float32, "x").unwrap();
    let loss_out = popxl::d2h_stream([], popxl::float32, "loss").unwrap();
    let x = ops::host_load(&x_in, "x").unwrap();
    let mut params = Vec::new();
    for l in 0..L {
        params.push(popxl::variable(init.w.index_axis(Axis(0), l).to_owned(), &format!("W{l}")).unwrap());
        params.push(popxl::variable(init.b.index_axis(Axis(0), l).to_owned(), &format!("b{l}")).unwrap());
    }
    let layer = ir
        .create_graph(
            |x: Tensor, w: Tensor, b: Tensor| -> popxl::Result<Tensor> { Ok(&x + &ops::gelu(&(&x.matmul(&w)? + &b))?) },
            (&x, &params[0], &params[1]),
        )
        .unwrap();
    let mut args = vec![x];
    args.extend(params.iter().cloned());
    let model = ir
        .create_graph(
            |ts: Vec<Tensor>| -> popxl::Result<Tensor> {
                let mut h = ts[0].clone();
                for l in 0..L {
                    h = ops::call(&layer, &[&h, &ts[1 + 2 * l], &ts[2 + 2 * l]], &[])?[0].clone();
                }
                loss_of(&h)
            },
            args.clone(),
        )
        .unwrap();
    let loss = train_step(&model, &args, &params).unwrap();
    ops::host_store(&loss_out, &loss).unwrap();
    drop(g);
    Model { ir, x_in, loss_out, params }
}

/// (b): one `repeat` of a layer body over stacked weights, sliced at a carried counter.
fn repeated(init: &Init) -> Model {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let x_in = popxl::h2d_stream([B, D], popxl::float32, "x").unwrap();
    let loss_out = popxl::d2h_stream([], popxl::float32, "loss").unwrap();
    let x = ops::host_load(&x_in, "x").unwrap();
    let params = vec![popxl::variable(init.w.clone(), "W").unwrap(), popxl::variable(init.b.clone(), "b").unwrap()];
    let mut args = vec![x];
    args.extend(params.iter().cloned());
    let model = ir
        .create_graph(
            |x: Tensor, w: Tensor, b: Tensor| -> popxl::Result<Tensor> {
                let ir = x.graph().ir()?;
                let counter = popxl::constant(0i32, "layer")?;
                let body = ir.create_graph(
                    |x: Tensor, i: Tensor, w: Tensor, b: Tensor| -> popxl::Result<Vec<Tensor>> {
                        let wl = ops::squeeze(&ops::dynamic_slice(&w, &i, &[0], &[1], true)?, &[0])?;
                        let bl = ops::squeeze(&ops::dynamic_slice(&b, &i, &[0], &[1], true)?, &[0])?;
                        let h = &x + &ops::gelu(&(&x.matmul(&wl)? + &bl))?;
                        Ok(vec![h, &i + 1i64])
                    },
                    (&x, &counter, &w, &b),
                )?;
                let out = ops::repeat(&body, L, &[&x, &counter, &w, &b], &[])?;
                loss_of(&out[0])
            },
            (&args[0], &args[1], &args[2]),
        )
        .unwrap();
    let loss = train_step(&model, &args, &params).unwrap();
    ops::host_store(&loss_out, &loss).unwrap();
    drop(g);
    Model { ir, x_in, loss_out, params }
}

/// Train for `STEPS` steps: the loss of every step and the final parameters.
fn train(model: Model, init: &Init) -> (Vec<f64>, Vec<ArrayD<f64>>) {
    let Model { ir, x_in, loss_out, params } = model;
    let mut session = Session::new(ir, "cpu").unwrap();
    let mut losses = Vec::new();
    session
        .scope(|s| -> Result<(), popxl_session::SessionError> {
            for x in &init.xs {
                let inputs: Inputs = [(x_in.clone(), HostArray::from(x.clone()))].into_iter().collect();
                losses.push(s.run(&inputs)?[&loss_out].to_f64_vec()[0]);
            }
            Ok(())
        })
        .unwrap();
    let weights = params
        .iter()
        .map(|p| {
            let v = session.get_tensor_data(p).unwrap().to_f64_vec();
            ArrayD::from_shape_vec(IxDyn(p.shape()), v).unwrap()
        })
        .collect();
    (losses, weights)
}

fn assert_rel(got: f64, want: f64, what: &str) {
    let rel = (got - want).abs() / want.abs().max(1e-3);
    assert!(rel <= 1e-5, "{what}: repeat {got}, unrolled {want} (relative error {rel:.2e})");
}

#[test]
fn repeat_over_stacked_weights_trains_like_the_unrolled_stack() {
    let init = init();
    let (loss_a, weights_a) = train(unrolled(&init), &init);
    let (loss_b, weights_b) = train(repeated(&init), &init);
    eprintln!("losses: unrolled {loss_a:?}, repeat {loss_b:?}");
    // Training does something: the loss falls and every parameter moves.
    assert!(loss_a[STEPS - 1] < loss_a[0], "SGD lowers the loss: {loss_a:?}");
    for (s, (&b, &a)) in loss_b.iter().zip(&loss_a).enumerate() {
        assert_rel(b, a, &format!("loss of step {s}"));
    }
    let (w, b) = (&weights_b[0], &weights_b[1]);
    for l in 0..L {
        let (wa, ba) = (&weights_a[2 * l], &weights_a[2 * l + 1]);
        let (w0, b0) = (init.w.index_axis(Axis(0), l), init.b.index_axis(Axis(0), l));
        assert!(wa.iter().zip(w0.iter()).any(|(a, &z)| (a - f64::from(z)).abs() > 1e-4), "W{l} moved");
        assert!(ba.iter().zip(b0.iter()).any(|(a, &z)| (a - f64::from(z)).abs() > 1e-4), "b{l} moved");
        for (got, want) in w.index_axis(Axis(0), l).iter().zip(wa.iter()) {
            assert_rel(*got, *want, &format!("W[{l}]"));
        }
        for (got, want) in b.index_axis(Axis(0), l).iter().zip(ba.iter()) {
            assert_rel(*got, *want, &format!("b[{l}]"));
        }
    }
}
