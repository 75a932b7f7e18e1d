//! `--sample`'s generation with a KV cache: a decode program that computes
//! `chunk` positions per run (one when generating) from the keys and values of
//! the earlier positions, kept on the device in one variable per layer and kind
//! (`h<l>.k_cache`, `[1, H, dh, T]`: transposed, as attention reads them;
//! `h<l>.v_cache`, `[1, H, T, dh]`).
//!
//! One run embeds the tokens at positions `pos..pos + chunk` (an input), runs
//! each block of [`model`] with its attention split out: the q/k/v projection
//! of the new positions ([`model::qkv_heads`]), their keys and values written
//! into the cache at `pos` in place (`dynamic_update_`), softmax attention over
//! the whole cache with the causal mask's rows `pos..pos + chunk` (later
//! positions masked, [`model::attend`]), then [`model::block_out`]; and
//! streams out the logits of the last position ([`model::lm_head`]). Same
//! weights and the same ops as the training program's forward; the weights
//! are constants here (the program never changes them), so reading the
//! caches back after a prefill transfers the caches alone.
//!
//! Generation ([`generate`]) keeps a window of at most `T` tokens: when the
//! context outgrows it, the window restarts at the last `T / 2` tokens (at
//! positions `0..T / 2`), which a prefill program (`chunk = T / 2`) computes in
//! one run; its cache is then copied to the one-position program. The
//! full-context path ([`NextLogits`] of the logits-only program) uses the same
//! windows, so both sample the same text.

use std::collections::HashMap;

use ndarray::{ArrayD, IxDyn};
use popxl::{ops, DeviceToHostStream, HostArray, HostToDeviceStream, Ir, Tensor};
use popxl_session::{Inputs, Outputs, Session};

use super::model::{self, Shape, BLOCK_PARAMS};
use super::{AppResult, Rng};

/// The decode program of one chunk length, its session attached.
pub struct Decoder {
    session: Session,
    tokens: HostToDeviceStream,
    pos: HostToDeviceStream,
    out: DeviceToHostStream,
    caches: Vec<Tensor>,
    chunk: usize,
    seq: usize,
    inputs: Inputs,
    outputs: Outputs,
}

/// Build the decode program of `chunk` positions per run for the model `s`
/// (its batch ignored: one sequence) with `weights` (by name, as
/// [`model::param_names`]), and attach its session.
pub fn build(s: &Shape, weights: &[(String, HostArray)], chunk: usize) -> AppResult<Decoder> {
    if chunk == 0 || chunk > s.seq {
        return Err(format!("a decode chunk of {chunk} positions: it must be in 1..={}", s.seq).into());
    }
    let s1 = Shape { batch: 1, ..*s };
    let (d, h) = (s.width, s.heads);
    let ir = Ir::new();
    let main = ir.main_graph();
    let _g = main.enter();
    let _sq = popxl::in_sequence(true);
    let tokens = popxl::h2d_stream([1, chunk], popxl::int32, "tokens")?;
    let pos = popxl::h2d_stream([1], popxl::uint32, "pos")?;
    let by_name: HashMap<&str, &HostArray> = weights.iter().map(|(n, a)| (n.as_str(), a)).collect();
    let mut p: HashMap<String, Tensor> = HashMap::new();
    for name in model::param_names(s.layers) {
        let a = by_name.get(name.as_str()).ok_or_else(|| format!("no weight `{name}`"))?;
        p.insert(name.clone(), popxl::constant((*a).clone(), &name)?);
    }
    let tok = ops::host_load(&tokens, "tok")?;
    let at = ops::host_load(&pos, "pos")?;
    let wpe = ops::dynamic_slice(&p["wpe"], &at, &[0], &[chunk as i64], true)?;
    let mut x = model::embed(&tok, &p["wte"], &wpe)?;
    // Rows pos..pos + chunk of the causal mask: [chunk, T].
    let mask = ops::dynamic_slice(&model::causal_mask(s)?, &at, &[0], &[chunk as i64], true)?;
    let zeros = |shape: &[usize]| -> HostArray { ArrayD::<f32>::zeros(IxDyn(shape)).into() };
    let mut caches = Vec::with_capacity(2 * s.layers);
    for l in 0..s.layers {
        let w: Vec<Tensor> = BLOCK_PARAMS.iter().map(|n| p[&format!("h{l}.{n}")].clone()).collect();
        let [q, k, v] = model::qkv_heads(&s1, &x, &w, chunk as i64)?;
        // The keys transposed ([1, H, dh, T]), as attention reads them.
        let kc = popxl::variable(zeros(&[1, h, d / h, s.seq]), &format!("h{l}.k_cache"))?;
        let vc = popxl::variable(zeros(&[1, h, s.seq, d / h]), &format!("h{l}.v_cache"))?;
        let kt = ops::transpose(&k, &[0, 1, 3, 2])?;
        let keys = ops::dynamic_update_(&kc, &at, &kt, &[3], &[chunk as i64], true)?;
        let values = ops::dynamic_update_(&vc, &at, &v, &[2], &[chunk as i64], true)?;
        let y = model::attend(&s1, &q, &keys, &values, &mask)?;
        let y = ops::transpose(&y, &[0, 2, 1, 3])?.reshape(&[1, chunk as i64, d as i64])?;
        x = model::block_out(&x, &y, &w)?;
        caches.extend([kc, vc]);
    }
    let last = ops::slice(&x, &[chunk as i64 - 1], &[chunk as i64], &[1], &[1])?;
    // The tied embedding transposed once, here, for the head's product.
    let wte_t = match by_name.get("wte") {
        Some(HostArray::F32(a)) => popxl::constant(HostArray::from(a.t().as_standard_layout().into_owned()), "wte_t")?,
        _ => return Err("the weight `wte` must be float32".into()),
    };
    let logits = model::lm_head_transposed(&last, &p["lnf_g"], &p["lnf_b"], &wte_t, 1)?;
    let out = popxl::d2h_stream(logits.shape(), logits.dtype(), "logits")?;
    ops::host_store(&out, &logits)?;
    let mut session = Session::new(ir.clone(), "cpu")?;
    session.enter_context()?;
    let outputs = session.create_host_outputs()?;
    let mut inputs = Inputs::new();
    inputs.insert(tokens.clone(), ArrayD::<i32>::zeros(IxDyn(&[1, chunk])).into());
    inputs.insert(pos.clone(), ArrayD::<u32>::zeros(IxDyn(&[1])).into());
    Ok(Decoder { session, tokens, pos, out, caches, chunk, seq: s.seq, inputs, outputs })
}

impl Decoder {
    /// Run `tokens` (`chunk` of them) at positions `pos..pos + chunk`: their keys
    /// and values enter the cache, and the logits after the last are returned.
    /// The cache must hold the positions before `pos`.
    pub fn run(&mut self, tokens: &[i32], pos: usize) -> AppResult<Vec<f64>> {
        if tokens.len() != self.chunk || pos + self.chunk > self.seq {
            return Err(format!(
                "{} tokens at position {pos}: this decode program runs {} positions within a context of {}",
                tokens.len(),
                self.chunk,
                self.seq
            )
            .into());
        }
        if let Some(HostArray::I32(a)) = self.inputs.get_mut(&self.tokens) {
            a.iter_mut().zip(tokens).for_each(|(x, &t)| *x = t);
        }
        if let Some(HostArray::U32(a)) = self.inputs.get_mut(&self.pos) {
            a.fill(pos as u32);
        }
        self.session.run_with_outputs(&self.inputs, &mut self.outputs)?;
        Ok(self.outputs[&self.out].to_f64_vec())
    }

    /// Time every kernel of the following runs (`--profile`).
    pub fn set_profiling(&mut self, on: bool) {
        self.session.set_profiling(on);
    }

    /// The kernel times of the runs since profiling was turned on.
    pub fn kernel_profile(&self) -> Vec<popxl_session::cpu::executor::KernelTime> {
        self.session.kernel_profile()
    }

    /// The caches (keys and values of each layer, in order).
    pub fn caches(&mut self) -> AppResult<Vec<HostArray>> {
        Ok(self.session.get_tensors_data(self.caches.iter())?)
    }

    /// Replace the caches with `data` (as [`Decoder::caches`] returns them).
    pub fn set_caches(&mut self, data: &[HostArray]) -> AppResult<()> {
        self.session.write_variables_data(self.caches.iter().zip(data))?;
        Ok(())
    }
}

/// Where [`generate`] gets the logits of the next token from.
pub trait NextLogits {
    /// The logits after `window` (the context's last tokens, at positions
    /// `0..window.len()`); `fresh` when the window starts at another token than
    /// at the previous call (or on the first call).
    fn next_logits(&mut self, window: &[i32], fresh: bool) -> AppResult<Vec<f64>>;
}

/// The KV-cache path: the one-position program, and the prefill program of the
/// last window length that needed one.
pub struct Cached {
    shape: Shape,
    weights: Vec<(String, HostArray)>,
    step: Decoder,
    prefill: Option<Decoder>,
}

impl Cached {
    /// The decode program of `s` with `weights`.
    pub fn new(s: &Shape, weights: &[(String, HostArray)]) -> AppResult<Cached> {
        Ok(Cached { shape: *s, weights: weights.to_vec(), step: build(s, weights, 1)?, prefill: None })
    }

    /// The one-position program.
    pub fn step(&mut self) -> &mut Decoder {
        &mut self.step
    }
}

impl NextLogits for Cached {
    fn next_logits(&mut self, window: &[i32], fresh: bool) -> AppResult<Vec<f64>> {
        let n = window.len();
        if n == 0 {
            return Err("generation needs at least one token of context".into());
        }
        if !fresh {
            return self.step.run(&window[n - 1..], n - 1);
        }
        if n == 1 {
            return self.step.run(window, 0);
        }
        if self.prefill.as_ref().is_none_or(|p| p.chunk != n) {
            self.prefill = Some(build(&self.shape, &self.weights, n)?);
        }
        let prefill = self.prefill.as_mut().ok_or("no prefill program")?;
        let logits = prefill.run(window, 0)?;
        let caches = prefill.caches()?;
        self.step.set_caches(&caches)?;
        Ok(logits)
    }
}

/// What [`generate`] sampled: the token ids and the logits each came from.
pub struct Generated {
    /// The sampled tokens (the prompt not included).
    pub ids: Vec<usize>,
    /// The logits of each step.
    pub logits: Vec<Vec<f64>>,
}

/// Sample `n` tokens after `prompt` from `src`'s logits at temperature `temp`
/// (the generator seeded by `seed`), windows of at most `seq` tokens: when the
/// context outgrows one, the next starts at its last `seq / 2` tokens.
pub fn generate(
    src: &mut dyn NextLogits,
    prompt: &[i32],
    seq: usize,
    n: usize,
    temp: f64,
    seed: u64,
) -> AppResult<Generated> {
    let mut rng = Rng::new(seed ^ 0x5A5A);
    let keep = (seq / 2).max(1);
    let mut ctx = prompt.to_vec();
    let (mut start, mut fresh) = (ctx.len().saturating_sub(seq), true);
    let mut out = Generated { ids: Vec::with_capacity(n), logits: Vec::with_capacity(n) };
    for _ in 0..n {
        if ctx.len() - start > seq {
            start = ctx.len() - keep;
            fresh = true;
        }
        let row = src.next_logits(&ctx[start..], fresh)?;
        fresh = false;
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = row.iter().map(|&l| ((l - m) / temp).exp()).collect();
        let mut u = rng.uniform() * w.iter().sum::<f64>();
        let mut pick = w.len() - 1;
        for (i, &wi) in w.iter().enumerate() {
            if u < wi {
                pick = i;
                break;
            }
            u -= wi;
        }
        ctx.push(pick as i32);
        out.ids.push(pick);
        out.logits.push(row);
    }
    Ok(out)
}
