//! The exact GPT trajectory (issue 16): a 2-layer, 2-head, width-64 GPT-2-style
//! model from the initial weights JAX exported, trained for six steps on JAX's
//! six token batches with Adam; every loss must match JAX's within 1e-4
//! relative (fixture and its README in `tests/fixtures/gpt-reference`).
//!
//! The model is written with popxl primitives (layer norm from reductions,
//! attention from batched matmuls, a causal `where` and softmax), traced into
//! one graph, differentiated with `autodiff`, and updated with PopXL's Adam:
//! `accumulate_moving_average(_square)_`, `adam_updater` and `scaled_add_`.

use std::collections::HashMap;
use std::fs::File;

use ndarray::{Array2, ArrayD};
use ndarray_npy::NpzReader;
use popxl::{ops, transforms, HostArray, Ir, Tensor};
use popxl_session::{Inputs, Session};

const LAYERS: usize = 2;
const HEADS: usize = 2;
const WIDTH: usize = 64;
const SEQ: usize = 32;
const BATCH: usize = 4;
const VOCAB: usize = 65;
const LR: f32 = 1e-3;

/// `gpt_common.param_names`.
fn param_names() -> Vec<String> {
    let mut names = vec!["wte".to_string(), "wpe".to_string()];
    for l in 0..LAYERS {
        for p in [
            "ln1_g", "ln1_b", "attn_w", "attn_b", "proj_w", "proj_b", "ln2_g", "ln2_b", "fc_w", "fc_b", "fc2_w",
            "fc2_b",
        ] {
            names.push(format!("h{l}.{p}"));
        }
    }
    names.extend(["lnf_g".to_string(), "lnf_b".to_string()]);
    names
}

fn scalar(v: f32, name: &str) -> popxl::Result<Tensor> {
    popxl::constant(v, name)
}

/// `(x - mean) / sqrt(var + 1e-5) * g + b` over the last axis: PopXL's
/// `layer_norm` (one fused op, `GroupNorm`) on the rows of `[B·T, D]`.
fn layer_norm(x: &Tensor, g: &Tensor, b: &Tensor) -> popxl::Result<Tensor> {
    let d = *x.shape().last().unwrap_or(&1) as i64;
    let y = ops::layer_norm(&x.reshape(&[-1, d])?, g, b, 1e-5)?;
    let shape: Vec<i64> = x.shape().iter().map(|&v| v as i64).collect();
    y.reshape(&shape)
}

/// [B, T, d] -> [B, H, T, dh]
fn heads(t: &Tensor) -> popxl::Result<Tensor> {
    let dh = (WIDTH / HEADS) as i64;
    ops::transpose(&t.reshape(&[BATCH as i64, SEQ as i64, HEADS as i64, dh])?, &[0, 2, 1, 3])
}

/// The mean cross-entropy of the model at `tokens` against `targets`.
fn loss(tokens: &Tensor, targets: &Tensor, p: &HashMap<String, Tensor>) -> popxl::Result<Tensor> {
    let d = WIDTH as i64;
    let causal = popxl::constant(Array2::from_shape_fn((SEQ, SEQ), |(i, j)| j <= i), "causal")?;
    let neg = scalar(-1e9, "masked")?;
    let scale = scalar(1.0 / ((WIDTH / HEADS) as f32).sqrt(), "scale")?;
    let mut x = ops::add(&ops::gather(&p["wte"], tokens, 0)?, &p["wpe"])?;
    for l in 0..LAYERS {
        let q_ = |n: &str| &p[&format!("h{l}.{n}")];
        let h = layer_norm(&x, q_("ln1_g"), q_("ln1_b"))?;
        let qkv = ops::add(&h.matmul(q_("attn_w"))?, q_("attn_b"))?;
        let parts = ops::split(&qkv, vec![WIDTH, WIDTH, WIDTH], -1)?;
        let (q, k, v) = (heads(&parts[0])?, heads(&parts[1])?, heads(&parts[2])?);
        let att = ops::mul(&q.matmul(&ops::transpose(&k, &[0, 1, 3, 2])?)?, &scale)?;
        let att = ops::softmax(&ops::select(&causal, &att, &neg)?, -1)?;
        let y = ops::transpose(&att.matmul(&v)?, &[0, 2, 1, 3])?.reshape(&[BATCH as i64, SEQ as i64, d])?;
        x = ops::add(&x, &ops::add(&y.matmul(q_("proj_w"))?, q_("proj_b"))?)?;
        let h = layer_norm(&x, q_("ln2_g"), q_("ln2_b"))?;
        let f = ops::gelu(&ops::add(&h.matmul(q_("fc_w"))?, q_("fc_b"))?)?;
        x = ops::add(&x, &ops::add(&f.matmul(q_("fc2_w"))?, q_("fc2_b"))?)?;
    }
    let x = layer_norm(&x, &p["lnf_g"], &p["lnf_b"])?;
    let logits = x.reshape(&[(BATCH * SEQ) as i64, d])?.matmul(&ops::transpose(&p["wte"], &[1, 0])?)?;
    let probs = ops::softmax(&logits, -1)?;
    ops::nll_loss(&probs, &targets.reshape(&[(BATCH * SEQ) as i64])?)
}

#[test]
fn six_adam_steps_match_the_jax_losses() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/gpt-reference/gpt_l2_h2_w64_t32_b4.npz");
    let mut npz = NpzReader::new(File::open(path).expect("fixture")).expect("npz");
    let names = param_names();
    let init: Vec<ArrayD<f32>> = names.iter().map(|n| npz.by_name(&format!("p.{n}")).expect(n)).collect();
    let batches: Vec<(Array2<i32>, Array2<i32>)> = (0..6)
        .map(|s| (npz.by_name(&format!("x{s}")).expect("x"), npz.by_name(&format!("y{s}")).expect("y")))
        .collect();
    let want: ndarray::Array1<f32> = npz.by_name("losses").expect("losses");
    assert_eq!(init[0].shape(), &[VOCAB, WIDTH]);

    let ir = Ir::new();
    let (x_in, y_in, loss_out) = {
        let _g = ir.main_graph().enter();
        let _s = popxl::in_sequence(true);
        let x_in = popxl::h2d_stream([BATCH, SEQ], popxl::int32, "tokens").unwrap();
        let y_in = popxl::h2d_stream([BATCH, SEQ], popxl::int32, "targets").unwrap();
        let loss_out = popxl::d2h_stream([], popxl::float32, "loss").unwrap();
        let params: Vec<Tensor> =
            names.iter().zip(&init).map(|(n, a)| popxl::variable(a.clone(), n).unwrap()).collect();
        let tokens = ops::host_load(&x_in, "x").unwrap();
        let targets = ops::host_load(&y_in, "y").unwrap();

        // The whole model as one graph: inputs tokens, targets, then the parameters.
        let mut args = vec![tokens.clone(), targets.clone()];
        args.extend(params.iter().cloned());
        let graph = ir
            .create_graph(
                |ts: Vec<Tensor>| -> popxl::Result<Tensor> {
                    let p: HashMap<String, Tensor> = names.iter().cloned().zip(ts[2..].iter().cloned()).collect();
                    loss(&ts[0], &ts[1], &p)
                },
                args.clone(),
            )
            .unwrap();
        let refs: Vec<&Tensor> = args.iter().collect();
        let fwd = ops::call_with_info(&graph, &refs, &[]).unwrap();
        let l = fwd.parent_output(0).unwrap();
        ops::host_store(&loss_out, &l).unwrap();

        let inputs = graph.inputs().unwrap();
        let required: Vec<Tensor> = inputs[2..].to_vec();
        let info = transforms::autodiff(&graph, None, Some(&required), &HashMap::new(), false).unwrap().grad_info;
        let acts = info.inputs_dict(&fwd).unwrap();
        let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
        let one = popxl::constant(1.0f32, "dloss").unwrap();
        let bwd = ops::call_with_info(&info.graph(), &[&one], &acts).unwrap();
        let grads = info.fwd_parent_ins_to_grad_parent_outs(&fwd, &bwd).unwrap();

        for (n, p) in names.iter().zip(&params) {
            let g = &grads[p];
            let zeros = HostArray::full(p.info(), 0.0);
            let m = popxl::variable(zeros.clone(), &format!("{n}.m")).unwrap();
            let v = popxl::variable(zeros, &format!("{n}.v")).unwrap();
            let t = popxl::variable(0.0f32, &format!("{n}.t")).unwrap();
            ops::accumulate_moving_average_(&m, g, 0.9f32).unwrap();
            ops::accumulate_moving_average_square_(&v, g, 0.999f32).unwrap();
            let opts = ops::AdamUpdaterOptions {
                time_step: Some(&t),
                beta1: Some(0.9.into()),
                beta2: Some(0.999.into()),
                epsilon: 1e-8.into(),
                ..Default::default()
            };
            let upd = ops::adam_updater(&m, &v, opts).unwrap();
            ops::scaled_add_(p, &upd, 1.0f32, -LR).unwrap();
        }
        (x_in, y_in, loss_out)
    };

    let mut session = Session::new(ir, "cpu").unwrap();
    let mut got = Vec::new();
    session
        .scope(|s| -> Result<(), popxl_session::SessionError> {
            for (x, y) in &batches {
                let mut inputs = Inputs::new();
                inputs.insert(x_in.clone(), HostArray::from(x.clone()));
                inputs.insert(y_in.clone(), HostArray::from(y.clone()));
                let out = s.run(&inputs)?;
                got.push(out[&loss_out].to_f64_vec()[0]);
            }
            Ok(())
        })
        .unwrap();
    eprintln!("losses: ours {got:?}, JAX {want}");
    assert_eq!(got.len(), want.len());
    for (s, (&g, &w)) in got.iter().zip(want.iter()).enumerate() {
        let rel = (g - f64::from(w)).abs() / f64::from(w).abs();
        assert!(rel <= 1e-4, "step {s}: loss {g}, JAX {w} (relative error {rel:.2e}); all: {got:?}");
    }
}
