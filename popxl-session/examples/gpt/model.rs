//! The GPT of the `gpt` example, built the PopXL way: three graphs traced once
//! (`embed`, one transformer `Block`, `head`), the block graph called once per
//! layer with that layer's weights, each graph differentiated once with
//! `autodiff`, and Adam through `accumulate_moving_average(_square)_`,
//! `adam_updater` and `scaled_add_`. Model as `gpt_common.py`: pre-LayerNorm
//! GPT-2 blocks, learned positions, causal softmax attention, GELU (tanh),
//! LM head tied to the token embedding, mean cross-entropy.

use std::collections::HashMap;

use ndarray::{Array2, ArrayD, IxDyn};
use popxl::ops::{self, CallSiteInfo};
use popxl::{transforms, Graph, HostArray, Ir, Tensor};

/// Model and batch sizes.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Transformer blocks.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Model width (d_model).
    pub width: usize,
    /// Context length T.
    pub seq: usize,
    /// Sequences per batch.
    pub batch: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Attention as the one `Attention` op (`ops::attention`), else as the
    /// matmuls, mask and softmax a PopXL program writes (same values).
    pub fused_attention: bool,
}

/// The parameter names of one block, in `gpt_common.param_names` order.
pub const BLOCK_PARAMS: [&str; 12] =
    ["ln1_g", "ln1_b", "attn_w", "attn_b", "proj_w", "proj_b", "ln2_g", "ln2_b", "fc_w", "fc_b", "fc2_w", "fc2_b"];

/// Every parameter name (`gpt_common.param_names`).
pub fn param_names(layers: usize) -> Vec<String> {
    let mut names = vec!["wte".to_string(), "wpe".to_string()];
    for l in 0..layers {
        names.extend(BLOCK_PARAMS.iter().map(|p| format!("h{l}.{p}")));
    }
    names.extend(["lnf_g".to_string(), "lnf_b".to_string()]);
    names
}

pub fn param_shape(name: &str, s: &Shape) -> Vec<usize> {
    let d = s.width;
    match name.rsplit('.').next().unwrap_or(name) {
        "wte" => vec![s.vocab, d],
        "wpe" => vec![s.seq, d],
        "attn_w" => vec![d, 3 * d],
        "attn_b" => vec![3 * d],
        "proj_w" => vec![d, d],
        "fc_w" => vec![d, 4 * d],
        "fc_b" => vec![4 * d],
        "fc2_w" => vec![4 * d, d],
        _ => vec![d],
    }
}

/// Initial weights as `gpt_common.init_params` (same distributions; our own
/// generator): matrices ~ N(0, 0.02), the residual outputs (`proj_w`, `fc2_w`)
/// ~ N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm gains 1.
pub fn init_params(s: &Shape, seed: u64) -> Vec<(String, HostArray)> {
    let mut rng = super::Rng::new(seed);
    param_names(s.layers)
        .into_iter()
        .map(|n| {
            let shape = param_shape(&n, s);
            let len: usize = shape.iter().product();
            let v: Vec<f32> = if n.ends_with("_g") {
                vec![1.0; len]
            } else if n.ends_with("_b") {
                vec![0.0; len]
            } else {
                let std = if n.ends_with("proj_w") || n.ends_with("fc2_w") {
                    0.02 / ((2 * s.layers) as f64).sqrt()
                } else {
                    0.02
                };
                (0..len).map(|_| (rng.normal() * std) as f32).collect()
            };
            let a: HostArray = ArrayD::from_shape_vec(IxDyn(&shape), v).expect("shape").into();
            (n, a)
        })
        .collect()
}

/// `(x - mean) / sqrt(var + 1e-5) * g + b` over the last axis.
pub fn layer_norm(x: &Tensor, g: &Tensor, b: &Tensor) -> popxl::Result<Tensor> {
    // PopXL's layer_norm normalises [N, C] rows: fold the leading dims, as PopXL programs do.
    let d = *x.shape().last().unwrap_or(&1) as i64;
    let y = ops::layer_norm(&x.reshape(&[-1, d])?, g, b, 1e-5)?;
    let shape: Vec<i64> = x.shape().iter().map(|&v| v as i64).collect();
    y.reshape(&shape)
}

/// One transformer block on `x` [B, T, d] with its 12 parameters.
pub fn block(s: &Shape, x: &Tensor, p: &[Tensor]) -> popxl::Result<Tensor> {
    let (b, t, d) = (s.batch as i64, s.seq as i64, s.width as i64);
    if s.fused_attention {
        let n1 = layer_norm(x, &p[0], &p[1])?;
        let qkv = ops::add(&n1.matmul(&p[2])?, &p[3])?;
        return block_out(x, &ops::attention(&qkv, s.heads, true)?, p);
    }
    let causal = causal_mask(s)?;
    let [q, k, v] = qkv_heads(s, x, p, t)?;
    let y = attend(s, &q, &ops::transpose(&k, &[0, 1, 3, 2])?, &v, &causal)?;
    let y = ops::transpose(&y, &[0, 2, 1, 3])?.reshape(&[b, t, d])?;
    block_out(x, &y, p)
}

/// The causal mask of the whole context: `mask[i][j]` is `j <= i` (`[T, T]`).
pub fn causal_mask(s: &Shape) -> popxl::Result<Tensor> {
    popxl::constant(Array2::from_shape_fn((s.seq, s.seq), |(i, j)| j <= i), "causal")
}

/// The first part of a block on `x` [B, t, d]: `ln1`, the q/k/v projection and
/// the heads split off, each `[B, H, t, dh]`.
pub fn qkv_heads(s: &Shape, x: &Tensor, p: &[Tensor], t: i64) -> popxl::Result<[Tensor; 3]> {
    let (b, h) = (s.batch as i64, s.heads as i64);
    let dh = (s.width / s.heads) as i64;
    let heads = |u: &Tensor| ops::transpose(&u.reshape(&[b, t, h, dh])?, &[0, 2, 1, 3]);
    let n1 = layer_norm(x, &p[0], &p[1])?;
    let qkv = ops::add(&n1.matmul(&p[2])?, &p[3])?;
    let parts = ops::split(&qkv, vec![s.width; 3], -1)?;
    Ok([heads(&parts[0])?, heads(&parts[1])?, heads(&parts[2])?])
}

/// Softmax attention of `q` [B, H, tq, dh] over the keys `kt` (transposed:
/// [B, H, dh, tk]) and values `v` [B, H, tk, dh], the scores where `mask`
/// [tq, tk] is false set to -1e9: `[B, H, tq, dh]`.
pub fn attend(s: &Shape, q: &Tensor, kt: &Tensor, v: &Tensor, mask: &Tensor) -> popxl::Result<Tensor> {
    let masked = popxl::constant(-1e9f32, "masked")?;
    let scale = popxl::constant(1.0 / ((s.width / s.heads) as f32).sqrt(), "scale")?;
    let att = ops::mul(&q.matmul(kt)?, &scale)?;
    let att = ops::softmax(&ops::select(mask, &att, &masked)?, -1)?;
    att.matmul(v)
}

/// The rest of a block after attention: `y` [B, t, d] (heads merged) through
/// the projection onto the residual `x`, then `ln2` and the MLP.
pub fn block_out(x: &Tensor, y: &Tensor, p: &[Tensor]) -> popxl::Result<Tensor> {
    let x = ops::add(x, &ops::add(&y.matmul(&p[4])?, &p[5])?)?;
    let n2 = layer_norm(&x, &p[6], &p[7])?;
    let f = ops::gelu(&ops::add(&n2.matmul(&p[8])?, &p[9])?)?;
    ops::add(&x, &ops::add(&f.matmul(&p[10])?, &p[11])?)
}

/// Embedding of `tokens` [B, t] at the positions of `wpe` [t, d]: `[B, t, d]`.
pub fn embed(tokens: &Tensor, wte: &Tensor, wpe: &Tensor) -> popxl::Result<Tensor> {
    ops::add(&ops::gather(wte, tokens, 0)?, wpe)
}

/// The LM head on `x` [.., d] (`rows` positions in all): the final LayerNorm,
/// then the tied token embedding: logits `[rows, V]`.
pub fn lm_head(x: &Tensor, g: &Tensor, b: &Tensor, wte: &Tensor, rows: usize) -> popxl::Result<Tensor> {
    lm_head_transposed(x, g, b, &ops::transpose(wte, &[1, 0])?, rows)
}

/// [`lm_head`] with the embedding already transposed, `wte_t` [d, V] (the
/// decode program keeps a transposed copy instead of transposing per token).
pub fn lm_head_transposed(x: &Tensor, g: &Tensor, b: &Tensor, wte_t: &Tensor, rows: usize) -> popxl::Result<Tensor> {
    let d = wte_t.shape()[0] as i64;
    let x = layer_norm(x, g, b)?.reshape(&[rows as i64, d])?;
    x.matmul(wte_t)
}

/// The traced graphs of one model shape.
pub struct Graphs {
    /// `(tokens, wte, wpe) -> x`.
    pub embed: Graph,
    /// `(x, 12 block parameters) -> x`.
    pub block: Graph,
    /// `(x, lnf_g, lnf_b, wte) -> logits [B*T, V]`.
    pub head: Graph,
}

/// Trace the three graphs for `s` (in the current graph's IR).
pub fn trace(ir: &Ir, s: &Shape) -> popxl::Result<Graphs> {
    let f32_ = popxl::float32;
    let d = s.width;
    let spec = |shape: Vec<usize>| popxl::TensorSpec::new(shape, f32_);
    let embed = ir.create_graph(
        |tok: Tensor, wte: Tensor, wpe: Tensor| embed(&tok, &wte, &wpe),
        (popxl::TensorSpec::new([s.batch, s.seq], popxl::int32), spec(vec![s.vocab, d]), spec(vec![s.seq, d])),
    )?;
    let mut args = vec![spec(vec![s.batch, s.seq, d])];
    args.extend(BLOCK_PARAMS.iter().map(|n| spec(param_shape(n, s))));
    let block = ir.create_graph(|ts: Vec<Tensor>| block(s, &ts[0], &ts[1..]), args)?;
    let head = ir.create_graph(
        |x: Tensor, g: Tensor, b: Tensor, wte: Tensor| lm_head(&x, &g, &b, &wte, s.batch * s.seq),
        (spec(vec![s.batch, s.seq, d]), spec(vec![d]), spec(vec![d]), spec(vec![s.vocab, d])),
    )?;
    Ok(Graphs { embed, block, head })
}

/// Forward through every graph: call sites (embed, blocks..., head) and logits.
pub struct Forward {
    /// Call sites in order: embed, each block, head.
    pub sites: Vec<CallSiteInfo>,
    /// The block inputs, per layer, and the head input last.
    pub xs: Vec<Tensor>,
    /// `[B*T, V]` logits.
    pub logits: Tensor,
}

/// The forward pass in the current graph, from `tokens` and the parameter variables.
pub fn forward(g: &Graphs, s: &Shape, tokens: &Tensor, p: &HashMap<String, Tensor>) -> popxl::Result<Forward> {
    let embed = ops::call_with_info(&g.embed, &[tokens, &p["wte"], &p["wpe"]], &[])?;
    let mut x = embed.parent_output(0)?;
    let mut sites = vec![embed];
    let mut xs = vec![];
    for l in 0..s.layers {
        let mut ins = vec![&x];
        let names: Vec<String> = BLOCK_PARAMS.iter().map(|n| format!("h{l}.{n}")).collect();
        ins.extend(names.iter().map(|n| &p[n]));
        let site = ops::call_with_info(&g.block, &ins, &[])?;
        xs.push(x.clone());
        x = site.parent_output(0)?;
        sites.push(site);
    }
    let head = ops::call_with_info(&g.head, &[&x, &p["lnf_g"], &p["lnf_b"], &p["wte"]], &[])?;
    xs.push(x);
    let logits = head.parent_output(0)?;
    sites.push(head);
    Ok(Forward { sites, xs, logits })
}

/// Mean cross-entropy of `logits` against `targets` [B, T], and d(loss)/d(logits).
pub fn loss_and_grad(logits: &Tensor, targets: &Tensor) -> popxl::Result<(Tensor, Tensor)> {
    let probs = ops::softmax(logits, -1)?;
    let labels = targets.reshape(&[-1])?;
    ops::nll_loss_with_softmax_grad(&probs, &labels)
}

/// The gradient graph of `graph` for every input (but the first, an integer
/// token input, with `skip_first`).
pub fn grad_graph(graph: &Graph, skip_first: bool) -> popxl::Result<transforms::GradGraphInfo> {
    let ins = graph.inputs()?;
    let required: Vec<Tensor> = if skip_first { ins[1..].to_vec() } else { ins };
    Ok(transforms::autodiff(graph, None, Some(&required), &HashMap::new(), false)?.grad_info)
}

/// Call the gradient graph `info` for the forward call `site` with the gradient
/// `seed` of its output; returns each forward parent input's gradient.
pub fn backward(
    info: &transforms::GradGraphInfo,
    site: &CallSiteInfo,
    seed: &Tensor,
) -> popxl::Result<HashMap<Tensor, Tensor>> {
    let acts = info.inputs_dict(site)?;
    let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
    let call = ops::call_with_info(&info.graph(), &[seed], &acts)?;
    info.fwd_parent_ins_to_grad_parent_outs(site, &call)
}

/// Build one training step in the current graph: forward, backward through the
/// three gradient graphs (the block's in reverse layer order), Adam on every
/// parameter. Returns the loss.
pub fn train_step(
    g: &Graphs,
    s: &Shape,
    tokens: &Tensor,
    targets: &Tensor,
    p: &HashMap<String, Tensor>,
    opt: impl Into<Adam>,
) -> popxl::Result<Tensor> {
    let f = forward(g, s, tokens, p)?;
    let (loss, dlogits) = loss_and_grad(&f.logits, targets)?;
    let (dhead, dblock, dembed) =
        (grad_graph(&g.head, false)?, grad_graph(&g.block, false)?, grad_graph(&g.embed, true)?);
    let mut grads: HashMap<String, Tensor> = HashMap::new();
    let n = f.sites.len();
    let gh = backward(&dhead, &f.sites[n - 1], &dlogits)?;
    let mut dx = gh[&f.xs[s.layers]].clone();
    for name in ["lnf_g", "lnf_b", "wte"] {
        grads.insert(name.to_string(), gh[&p[name]].clone());
    }
    for l in (0..s.layers).rev() {
        let gb = backward(&dblock, &f.sites[l + 1], &dx)?;
        for n in BLOCK_PARAMS {
            let name = format!("h{l}.{n}");
            grads.insert(name.clone(), gb[&p[&name]].clone());
        }
        dx = gb[&f.xs[l]].clone();
    }
    let ge = backward(&dembed, &f.sites[0], &dx)?;
    let dwte = ops::add(&grads["wte"], &ge[&p["wte"]])?;
    grads.insert("wte".into(), dwte);
    grads.insert("wpe".into(), ge[&p["wpe"]].clone());

    adam_all(p, &grads, opt.into())?;
    Ok(loss)
}

/// The optimizer: Adam with learning rate `lr`; with `offload`, its state
/// (the moments of each parameter) lives in streaming memory (a remote buffer
/// of two entries per parameter, as remote variables), loaded before and
/// stored after the parameter's update.
#[derive(Clone, Copy, Debug)]
pub struct Adam {
    /// Learning rate.
    pub lr: f32,
    /// Keep the moments in remote buffers.
    pub offload: bool,
}

impl From<f32> for Adam {
    fn from(lr: f32) -> Adam {
        Adam { lr, offload: false }
    }
}

/// [`adam`] on every parameter of `p` with its gradient in `grads`, in name order.
pub fn adam_all(p: &HashMap<String, Tensor>, grads: &HashMap<String, Tensor>, opt: Adam) -> popxl::Result<()> {
    let mut names: Vec<&String> = p.keys().collect();
    names.sort();
    for name in names {
        adam(&p[name], &grads[name], name, opt)?;
    }
    Ok(())
}

/// Adam (betas 0.9/0.999, eps 1e-8, bias-corrected, no weight decay) on `w`.
/// In a replicated IR the gradient is first averaged over the replicas
/// (data parallelism: each replica saw its own share of the batch).
fn adam(w: &Tensor, g: &Tensor, name: &str, opt: Adam) -> popxl::Result<()> {
    let averaged;
    let g = if w.graph().ir()?.replication_factor() > 1 {
        use popxl::ops::collectives::{replicated_all_reduce, CollectiveOp};
        averaged = replicated_all_reduce(g, CollectiveOp::Mean, None)?;
        &averaged
    } else {
        g
    };
    let zeros = HostArray::full(w.info(), 0.0);
    let (m_name, v_name) = (format!("{name}.adam_m"), format!("{name}.adam_v"));
    let (m, v, remote) = if opt.offload {
        let buf = popxl::remote_buffer(w.shape(), w.dtype(), 2)?;
        popxl::remote_variable(zeros.clone(), &buf, 0, &m_name)?;
        popxl::remote_variable(zeros, &buf, 1, &v_name)?;
        (ops::remote_load(&buf, 0, &m_name)?, ops::remote_load(&buf, 1, &v_name)?, Some(buf))
    } else {
        (popxl::variable(zeros.clone(), &m_name)?, popxl::variable(zeros, &v_name)?, None)
    };
    let t = popxl::variable(0.0f32, &format!("{name}.adam_t"))?;
    let m = ops::accumulate_moving_average_(&m, g, 0.9f32)?;
    let v = ops::accumulate_moving_average_square_(&v, g, 0.999f32)?;
    let opts = ops::AdamUpdaterOptions {
        time_step: Some(&t),
        beta1: Some(0.9.into()),
        beta2: Some(0.999.into()),
        epsilon: 1e-8.into(),
        ..Default::default()
    };
    let upd = ops::adam_updater(&m, &v, opts)?;
    ops::scaled_add_(w, &upd, 1.0f32, -opt.lr)?;
    if let Some(buf) = remote {
        ops::remote_store(&buf, 0, &m)?;
        ops::remote_store(&buf, 1, &v)?;
    }
    Ok(())
}
