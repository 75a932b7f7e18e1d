//! `--scan-layers`: the same GPT with its blocks as one `repeat` over stacked
//! weights, differentiated through the loop (beyond PopXL, whose autodiff stops
//! at `repeat`).
//!
//! Each block parameter `p` of shape `S` becomes one variable `h.p` of shape
//! `[L, ..S]`. The loop body takes `(x, layer, 12 stacked weights)`, slices its
//! layer's weights with `dynamic_slice` at the loop-carried `layer` counter, runs
//! the block and returns `(x', layer + 1)`. The `layers` graph holds the `repeat`;
//! `autodiff` of it stashes each iteration's carried input, runs the body's
//! gradient in reverse iteration order and accumulates the stacked weights'
//! gradients. Adam is elementwise, so updating the stacked weights is the same
//! arithmetic as updating each layer's.

use std::collections::HashMap;

use ndarray::{Array1, ArrayD, Axis};
use popxl::ops;
use popxl::{Graph, HostArray, Ir, Tensor};

use super::model::{self, Graphs, Shape, BLOCK_PARAMS};

/// Every parameter name of the scanned model: `wte`, `wpe`, the stacked `h.<p>`, `lnf_g`, `lnf_b`.
pub fn stacked_names() -> Vec<String> {
    let mut names = vec!["wte".to_string(), "wpe".to_string()];
    names.extend(BLOCK_PARAMS.iter().map(|p| format!("h.{p}")));
    names.extend(["lnf_g".to_string(), "lnf_b".to_string()]);
    names
}

fn f32_array(a: &HostArray) -> Result<ArrayD<f32>, String> {
    match a {
        HostArray::F32(v) => Ok(v.clone()),
        other => Err(format!("expected float32 weights, got {:?}", other.dtype())),
    }
}

/// Per-layer weights (`h<l>.<p>`) to stacked ones (`h.<p>`, layer-major).
pub fn stack(s: &Shape, weights: &[(String, HostArray)]) -> Result<Vec<(String, HostArray)>, String> {
    let by_name: HashMap<&str, &HostArray> = weights.iter().map(|(n, a)| (n.as_str(), a)).collect();
    let get = |n: &str| by_name.get(n).copied().ok_or_else(|| format!("no weight `{n}`"));
    stacked_names()
        .into_iter()
        .map(|n| {
            let a = match n.strip_prefix("h.") {
                Some(p) => {
                    let layers: Vec<ArrayD<f32>> =
                        (0..s.layers).map(|l| f32_array(get(&format!("h{l}.{p}"))?)).collect::<Result<_, _>>()?;
                    let views: Vec<_> = layers.iter().map(|a| a.view()).collect();
                    HostArray::from(ndarray::stack(Axis(0), &views).map_err(|e| e.to_string())?)
                }
                None => get(&n)?.clone(),
            };
            Ok((n, a))
        })
        .collect()
}

/// Stacked weights back to per-layer ones, in `model::param_names` order.
pub fn unstack(s: &Shape, weights: &[(String, HostArray)]) -> Result<Vec<(String, HostArray)>, String> {
    let by_name: HashMap<&str, &HostArray> = weights.iter().map(|(n, a)| (n.as_str(), a)).collect();
    model::param_names(s.layers)
        .into_iter()
        .map(|n| {
            let a = match n.split_once('.') {
                Some((h, p)) if h.starts_with('h') => {
                    let l: usize = h[1..].parse().map_err(|_| format!("bad name `{n}`"))?;
                    let stacked = f32_array(by_name.get(format!("h.{p}").as_str()).ok_or(format!("no `h.{p}`"))?)?;
                    HostArray::from(stacked.index_axis(Axis(0), l).to_owned())
                }
                _ => by_name.get(n.as_str()).copied().ok_or_else(|| format!("no weight `{n}`"))?.clone(),
            };
            Ok((n, a))
        })
        .collect()
}

/// The `layers` graph: `(x, 12 stacked weights) -> x` as one `repeat` of the block body.
pub fn trace_layers(ir: &Ir, s: &Shape) -> popxl::Result<Graph> {
    let f32_ = popxl::float32;
    let spec = |shape: Vec<usize>| popxl::TensorSpec::new(shape, f32_);
    let stacked = |p: &str| {
        let mut shape = vec![s.layers];
        shape.extend(model::param_shape(p, s));
        spec(shape)
    };
    let x_spec = spec(vec![s.batch, s.seq, s.width]);
    let mut body_args = vec![x_spec.clone(), popxl::TensorSpec::new([1], popxl::uint32)];
    body_args.extend(BLOCK_PARAMS.iter().map(|p| stacked(p)));
    let shape = *s;
    let body = ir.create_graph(
        move |ts: Vec<Tensor>| -> popxl::Result<Vec<Tensor>> {
            let (x, layer) = (&ts[0], &ts[1]);
            let p: Vec<Tensor> = ts[2..]
                .iter()
                .zip(BLOCK_PARAMS)
                .map(|(w, name)| {
                    let slice = ops::dynamic_slice(w, layer, &[0], &[1], false)?;
                    let dims: Vec<i64> = model::param_shape(name, &shape).iter().map(|&d| d as i64).collect();
                    slice.reshape(&dims)
                })
                .collect::<popxl::Result<_>>()?;
            let y = model::block(&shape, x, &p)?;
            let next = ops::add(layer, &popxl::constant(Array1::from(vec![1u32]), "one")?)?;
            Ok(vec![y, next])
        },
        body_args,
    )?;
    let mut args = vec![x_spec];
    args.extend(BLOCK_PARAMS.iter().map(|p| stacked(p)));
    let layers = s.layers;
    ir.create_graph(
        move |ts: Vec<Tensor>| -> popxl::Result<Tensor> {
            let first = popxl::constant(Array1::from(vec![0u32]), "first_layer")?;
            let mut ins: Vec<&Tensor> = vec![&ts[0], &first];
            ins.extend(ts[1..].iter());
            Ok(ops::repeat(&body, layers, &ins, &[])?.remove(0))
        },
        args,
    )
}

/// Forward and backward of the scanned model and Adam on every parameter.
pub fn train_step(
    g: &Graphs,
    layers: &Graph,
    tokens: &Tensor,
    targets: &Tensor,
    p: &HashMap<String, Tensor>,
    opt: impl Into<model::Adam>,
) -> popxl::Result<Tensor> {
    let embed = ops::call_with_info(&g.embed, &[tokens, &p["wte"], &p["wpe"]], &[])?;
    let x0 = embed.parent_output(0)?;
    let stacked: Vec<String> = BLOCK_PARAMS.iter().map(|n| format!("h.{n}")).collect();
    let mut ins = vec![&x0];
    ins.extend(stacked.iter().map(|n| &p[n]));
    let body = ops::call_with_info(layers, &ins, &[])?;
    let x = body.parent_output(0)?;
    let head = ops::call_with_info(&g.head, &[&x, &p["lnf_g"], &p["lnf_b"], &p["wte"]], &[])?;
    let (loss, dlogits) = model::loss_and_grad(&head.parent_output(0)?, targets)?;

    let gh = model::backward(&model::grad_graph(&g.head, false)?, &head, &dlogits)?;
    let gl = model::backward(&model::grad_graph(layers, false)?, &body, &gh[&x])?;
    let ge = model::backward(&model::grad_graph(&g.embed, true)?, &embed, &gl[&x0])?;
    let mut grads: HashMap<String, Tensor> = HashMap::new();
    grads.insert("wte".into(), ops::add(&gh[&p["wte"]], &ge[&p["wte"]])?);
    grads.insert("wpe".into(), ge[&p["wpe"]].clone());
    for name in ["lnf_g", "lnf_b"] {
        grads.insert(name.into(), gh[&p[name]].clone());
    }
    for name in &stacked {
        grads.insert(name.clone(), gl[&p[name]].clone());
    }
    model::adam_all(p, &grads, opt.into())?;
    Ok(loss)
}
