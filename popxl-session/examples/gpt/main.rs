//! `cargo run --release --example gpt -- [options]`: train a GPT-2-style
//! character-level language model on Tiny Shakespeare, report the validation
//! loss, and sample text from it.

#[path = "../mnist/data.rs"]
#[allow(dead_code)]
mod data;
pub mod decode;
pub mod model;
#[path = "../support/profile.rs"]
mod profile;
mod scan;
#[path = "../support/train_state.rs"]
#[allow(dead_code)]
mod train_state;

use std::collections::HashMap;
use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ndarray::{ArrayD, IxDyn};
use popxl::{ops, DeviceToHostStream, HostArray, HostToDeviceStream, Ir, Tensor};
use popxl_session::cpu::transport::Transport;
use popxl_session::Session;
use std::sync::Arc;

pub use data::Rng;
use model::Shape;
use train_state::Checkpoint;

type AppResult<T> = Result<T, Box<dyn Error>>;

const USAGE: &str = "\
Train a GPT-2-style character model on Tiny Shakespeare, then sample from it.

Options:
  --data FILE          text file (default data/tinyshakespeare/input.txt)
  --layers N           transformer blocks (default 4)
  --heads N            attention heads (default 4)
  --width N            model width (default 256)
  --seq N              context length (default 128)
  --batch N            sequences per step (default 16)
  --lr X               Adam learning rate (default 1e-3)
  --steps N            training steps in all, counting those before --resume (default 2000)
  --eval-every N       validation loss every N steps (default 500; 0: only at the end)
  --eval-batches N     validation batches per evaluation (default 8)
  --seed N             initialisation and batch seed (default 0)
  --sample N           characters to sample after training (default 400), one position per run
                       with the keys and values of the earlier ones cached on the device
  --sample-no-cache    sample with the full-context program instead (the whole window per character)
  --temperature X      sampling temperature (default 0.8)
  --save PATH          write the training state (.npz, .safetensors or a directory of .npy; an
                       existing checkpoint is replaced atomically): the weights (per-layer names,
                       also with --scan-layers), Adam's moments and step counters (*.adam_m,
                       *.adam_v, *.adam_t), the step and the batch generator (train.* counters)
  --resume PATH        continue the training saved by --save in PATH, bit for bit as if it had
                       not stopped, up to --steps (same --batch, model and optimizer options)
  --load PATH          start from saved weights (a fresh optimizer)
  --print-losses       print every step's loss (exactly: shortest round-trip form)
  --bench              print ms/step, tokens/s and model GFLOP/s, then run the PyTorch and JAX
                       baselines (torch_gpt.py, bench/torch_gpt_compile.py: torch.compile, jax_gpt.py) on the same
                       configuration and print the ratios;
                       then generation tokens/s at batch 1 (256 tokens, with and without the cache) next to
                       PyTorch eager with its KV cache (bench/torch_gpt_generate.py, the same weights)
  --bench-generation   only that generation line (with --steps 0: at the initial weights)
  --baselines DIR      where those scripts are (default ../shared/bench beside the project)
  --unfused-attention  write attention as PopXL programs do (head split and transposes, matmuls,
                       causal mask, softmax) instead of the one `Attention` op (same values)
  --scan-layers        build the blocks as one `repeat` over stacked weights, differentiated
                       through the loop (same losses; smaller program)
  --offload-optimizer  keep Adam's moments in remote buffers (streaming memory), loaded before and
                       stored after each parameter's update (same losses)
  --ipu-model-report   print the ipu_model estimate of the training step (Mk2 tile memory per
                       program point, code, and the estimated timeline), lowered for ipu_model
  --dump               print the lowered training program to stderr
  --memory-top N       tensors listed in the memory report (live at the planned peak; default 8)
  --replicas R         data-parallel replicas (replication_factor, default 1): each takes
                       batch / R sequences; gradients are averaged with replicated_all_reduce
  --mpi                split the replicas between the processes of an MPI launch (build with
                       --features mpi; `mpirun -n 2 target/release/examples/gpt --replicas 2
                       --mpi`): each process runs R / processes replicas; rank 0 prints and saves
  --profile            time every kernel and print the op types that take the most time per step, and
                       (with --bench) each matmul shape's time, GFLOP/s and share of the FMA peak
  --trace FILE         write the kernel timeline of the training steps after the first as Chrome
                       trace-event JSON (open in Perfetto or chrome://tracing)
  --memory-plot FILE   write the training step's memory plan as an SVG plot (bytes live per step;
                       with --ipu-model-report also the most loaded IPU tile per step)
  -h, --help           this text";

struct Config {
    data: PathBuf,
    shape: Shape,
    replicas: usize,
    lr: f32,
    steps: usize,
    eval_every: usize,
    eval_batches: usize,
    seed: u64,
    sample: usize,
    sample_no_cache: bool,
    temperature: f64,
    save: Option<PathBuf>,
    load: Option<PathBuf>,
    resume: Option<PathBuf>,
    print_losses: bool,
    bench: bool,
    bench_generation: bool,
    profile: bool,
    trace: Option<PathBuf>,
    memory_plot: Option<PathBuf>,
    dump: bool,
    scan_layers: bool,
    offload_optimizer: bool,
    ipu_model_report: bool,
    memory_top: usize,
    baselines: PathBuf,
    mpi: bool,
}

fn parse_args(args: Vec<String>) -> AppResult<Config> {
    let mut c = Config {
        data: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/tinyshakespeare/input.txt")),
        shape: Shape { layers: 4, heads: 4, width: 256, seq: 128, batch: 16, vocab: 0, fused_attention: true },
        replicas: 1,
        lr: 1e-3,
        steps: 2000,
        eval_every: 500,
        eval_batches: 8,
        seed: 0,
        sample: 400,
        sample_no_cache: false,
        temperature: 0.8,
        save: None,
        load: None,
        resume: None,
        print_losses: false,
        bench: false,
        bench_generation: false,
        profile: false,
        trace: None,
        memory_plot: None,
        dump: false,
        scan_layers: false,
        offload_optimizer: false,
        ipu_model_report: false,
        memory_top: 8,
        baselines: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/bench")),
        mpi: false,
    };
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--data" => c.data = PathBuf::from(value()?),
            "--layers" => c.shape.layers = value()?.parse()?,
            "--heads" => c.shape.heads = value()?.parse()?,
            "--width" => c.shape.width = value()?.parse()?,
            "--seq" => c.shape.seq = value()?.parse()?,
            "--batch" => c.shape.batch = value()?.parse()?,
            "--replicas" => c.replicas = value()?.parse()?,
            "--lr" => c.lr = value()?.parse()?,
            "--steps" => c.steps = value()?.parse()?,
            "--eval-every" => c.eval_every = value()?.parse()?,
            "--eval-batches" => c.eval_batches = value()?.parse()?,
            "--seed" => c.seed = value()?.parse()?,
            "--sample" => c.sample = value()?.parse()?,
            "--sample-no-cache" => c.sample_no_cache = true,
            "--temperature" => c.temperature = value()?.parse()?,
            "--save" => c.save = Some(PathBuf::from(value()?)),
            "--load" => c.load = Some(PathBuf::from(value()?)),
            "--resume" => c.resume = Some(PathBuf::from(value()?)),
            "--print-losses" => c.print_losses = true,
            "--bench" => c.bench = true,
            "--bench-generation" => c.bench_generation = true,
            "--profile" => c.profile = true,
            "--trace" => c.trace = Some(PathBuf::from(value()?)),
            "--memory-plot" => c.memory_plot = Some(PathBuf::from(value()?)),
            "--dump" => c.dump = true,
            "--scan-layers" => c.scan_layers = true,
            "--unfused-attention" => c.shape.fused_attention = false,
            "--offload-optimizer" => c.offload_optimizer = true,
            "--ipu-model-report" => c.ipu_model_report = true,
            "--memory-top" => c.memory_top = value()?.parse()?,
            "--baselines" => c.baselines = PathBuf::from(value()?),
            "--mpi" => c.mpi = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option `{other}`\n\n{USAGE}").into()),
        }
    }
    let s = &c.shape;
    if s.layers == 0 || s.heads == 0 || s.width == 0 || s.seq == 0 || s.batch == 0 || !s.width.is_multiple_of(s.heads) {
        return Err(
            "--layers, --heads, --width, --seq and --batch must be positive, the width a multiple of the heads".into(),
        );
    }
    if c.load.is_some() && c.resume.is_some() {
        return Err(
            "--load starts from saved weights with a fresh optimizer, --resume continues training: give one".into()
        );
    }
    if c.temperature.is_nan() || c.temperature <= 0.0 {
        return Err("--temperature must be positive".into());
    }
    Ok(c)
}

/// The text as token ids, its vocabulary, and the 90% / 10% split point.
pub struct Corpus {
    /// The characters, sorted: token `i` is `vocab[i]`.
    pub vocab: Vec<char>,
    ids: Vec<i32>,
    split: usize,
}

/// Read the text at `path` as a [`Corpus`].
pub fn load_corpus(path: &std::path::Path) -> AppResult<Corpus> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut vocab: Vec<char> = text.chars().collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    vocab.sort_unstable();
    let lut: HashMap<char, i32> = vocab.iter().enumerate().map(|(i, &c)| (c, i as i32)).collect();
    let ids: Vec<i32> = text.chars().map(|c| lut[&c]).collect();
    let split = ids.len() * 9 / 10;
    Ok(Corpus { vocab, ids, split })
}

/// A batch of `batch` windows of `seq + 1` tokens from `ids[lo..hi]`: inputs and next-token targets.
fn batch(rng: &mut Rng, ids: &[i32], lo: usize, hi: usize, s: &Shape) -> (HostArray, HostArray) {
    let (mut x, mut y) = (Vec::with_capacity(s.batch * s.seq), Vec::with_capacity(s.batch * s.seq));
    let span = hi - lo - s.seq - 1;
    for _ in 0..s.batch {
        let i = lo + (rng.next_u64() % span as u64) as usize;
        x.extend_from_slice(&ids[i..i + s.seq]);
        y.extend_from_slice(&ids[i + 1..i + s.seq + 1]);
    }
    let arr = |v: Vec<i32>| -> HostArray { ArrayD::from_shape_vec(IxDyn(&[s.batch, s.seq]), v).expect("shape").into() };
    (arr(x), arr(y))
}

/// An IR with the parameters as variables and token/target streams in.
struct Program {
    ir: Ir,
    tokens: HostToDeviceStream,
    targets: HostToDeviceStream,
    out: DeviceToHostStream,
    params: Vec<Tensor>,
    /// Data-parallel replicas.
    replicas: usize,
}

/// `train`: one Adam step, streaming the loss out. Otherwise forward only,
/// streaming the loss (`targets` used) or, with `logits_only`, the logits.
/// With `scan`, `init` holds the stacked weights of [`scan`] and the blocks run as one loop.
fn build(
    s: &Shape,
    init: &[(String, HostArray)],
    train: Option<model::Adam>,
    logits_only: bool,
    scan: bool,
) -> AppResult<Program> {
    build_replicated(s, init, train, logits_only, scan, 1, None)
}

/// [`build`] for `replicas` data-parallel replicas: each runs the model on
/// `s.batch / replicas` sequences (the host arrays gain a replica dim). With
/// `transport`, the replicas are split between its processes.
fn build_replicated(
    s: &Shape,
    init: &[(String, HostArray)],
    train: Option<model::Adam>,
    logits_only: bool,
    scan: bool,
    replicas: usize,
    transport: Option<&Arc<dyn Transport>>,
) -> AppResult<Program> {
    if replicas == 0 || !s.batch.is_multiple_of(replicas) {
        return Err(format!("--batch ({}) must be a multiple of --replicas ({replicas})", s.batch).into());
    }
    let s = &Shape { batch: s.batch / replicas, ..*s };
    let ir = Ir::new();
    ir.set_replication_factor(replicas)?;
    if let Some(t) = transport {
        ir.set_instances(t.rank(), t.size())?;
    }
    let main = ir.main_graph();
    let _g = main.enter();
    let _sq = popxl::in_sequence(true);
    let tokens = popxl::h2d_stream([s.batch, s.seq], popxl::int32, "tokens")?;
    let targets = popxl::h2d_stream([s.batch, s.seq], popxl::int32, "targets")?;
    let params: Vec<Tensor> = init.iter().map(|(n, a)| popxl::variable(a.clone(), n)).collect::<popxl::Result<_>>()?;
    let p: HashMap<String, Tensor> = init.iter().map(|(n, _)| n.clone()).zip(params.iter().cloned()).collect();
    let graphs = model::trace(&ir, s)?;
    let tok = ops::host_load(&tokens, "x")?;
    let tgt = ops::host_load(&targets, "y")?;
    let result = match train {
        Some(opt) if scan => {
            let layers = scan::trace_layers(&ir, s)?;
            scan::train_step(&graphs, &layers, &tok, &tgt, &p, opt)?
        }
        Some(opt) => model::train_step(&graphs, s, &tok, &tgt, &p, opt)?,
        None => {
            let f = model::forward(&graphs, s, &tok, &p)?;
            if logits_only {
                f.logits
            } else {
                model::loss_and_grad(&f.logits, &tgt)?.0
            }
        }
    };
    let out = popxl::d2h_stream(result.shape(), result.dtype(), "out")?;
    ops::host_store(&out, &result)?;
    Ok(Program { ir: ir.clone(), tokens, targets, out, params, replicas })
}

/// The stream inputs of one step: the global batch `[batch, seq]` split over
/// the replicas (`[replicas, batch / replicas, seq]`, the same data).
fn inputs(p: &Program, x: HostArray, y: HostArray) -> popxl_session::Inputs {
    let split = |a: HostArray| -> HostArray {
        match a {
            HostArray::I32(a) if p.replicas > 1 => {
                let (b, t) = (a.shape()[0], a.shape()[1]);
                a.into_shape_with_order(IxDyn(&[p.replicas, b / p.replicas, t])).expect("divisible batch").into()
            }
            other => other,
        }
    };
    let mut i = popxl_session::Inputs::new();
    i.insert(p.tokens.clone(), split(x));
    i.insert(p.targets.clone(), split(y));
    i
}

/// Copy `weights` (by name) into the variables of `session`'s program.
fn write_weights(session: &mut Session, p: &Program, weights: &[(String, HostArray)]) -> AppResult<()> {
    let by_name: HashMap<&str, &HostArray> = weights.iter().map(|(n, a)| (n.as_str(), a)).collect();
    let writes: Vec<(&Tensor, &HostArray)> = p
        .params
        .iter()
        .map(|v| by_name.get(v.name()).map(|a| (v, *a)).ok_or_else(|| format!("no value for `{}`", v.name())))
        .collect::<Result<_, _>>()?;
    session.write_variables_data(writes)?;
    Ok(())
}

fn read_weights(session: &mut Session, p: &Program, names: &[String]) -> AppResult<Vec<(String, HostArray)>> {
    let wanted: Vec<&Tensor> = p.params.iter().filter(|t| names.iter().any(|n| n == t.name())).collect();
    let data = session.get_tensors_data(wanted.iter().copied())?;
    Ok(wanted.iter().map(|t| t.name().to_string()).zip(data).collect())
}

/// Mean loss over `batches` validation batches.
fn validate(session: &mut Session, p: &Program, corpus: &Corpus, s: &Shape, batches: usize) -> AppResult<f64> {
    let mut rng = Rng::new(12345);
    let mut total = 0.0;
    session.scope(|sess| -> AppResult<()> {
        for _ in 0..batches {
            let (x, y) = batch(&mut rng, &corpus.ids, corpus.split, corpus.ids.len(), s);
            total += sess.run(&inputs(p, x, y))?[&p.out].to_f64_vec()[0];
        }
        Ok(())
    })?;
    Ok(total / batches.max(1) as f64)
}

/// `--sample-no-cache`: the logits-only program (batch 1) on the whole window
/// for each token.
struct FullContext {
    session: Session,
    prog: Program,
    seq: usize,
    vocab: usize,
}

impl FullContext {
    fn new(s: &Shape, weights: &[(String, HostArray)]) -> AppResult<FullContext> {
        let one = Shape { batch: 1, ..*s };
        let prog = build(&one, weights, None, true, false)?;
        let mut session = Session::new(prog.ir.clone(), "cpu")?;
        session.enter_context()?;
        Ok(FullContext { session, prog, seq: s.seq, vocab: s.vocab })
    }
}

impl decode::NextLogits for FullContext {
    fn next_logits(&mut self, window: &[i32], _fresh: bool) -> AppResult<Vec<f64>> {
        let n = window.len();
        if n == 0 || n > self.seq {
            return Err(format!("a window of {n} tokens in a context of {}", self.seq).into());
        }
        let mut x = window.to_vec();
        x.resize(self.seq, 0);
        let xa: HostArray = ArrayD::from_shape_vec(IxDyn(&[1, self.seq]), x.clone())?.into();
        let ya: HostArray = ArrayD::from_shape_vec(IxDyn(&[1, self.seq]), x)?.into();
        let logits = self.session.run(&inputs(&self.prog, xa, ya))?[&self.prog.out].to_f64_vec();
        Ok(logits[(n - 1) * self.vocab..n * self.vocab].to_vec())
    }
}

/// Sample `n` characters after a newline prompt (batch 1) from the model `s`
/// with `weights`: with the KV cache ([`decode`]), or with `no_cache` by the
/// full-context program. Returns the text and what [`decode::generate`] gave.
pub fn sample(
    corpus: &Corpus,
    s: &Shape,
    weights: &[(String, HostArray)],
    n: usize,
    temp: f64,
    seed: u64,
    no_cache: bool,
) -> AppResult<(String, decode::Generated)> {
    let mut src: Box<dyn decode::NextLogits> =
        if no_cache { Box::new(FullContext::new(s, weights)?) } else { Box::new(decode::Cached::new(s, weights)?) };
    let prompt = [newline(corpus)];
    let g = decode::generate(src.as_mut(), &prompt, s.seq, n, temp, seed)?;
    Ok((g.ids.iter().map(|&i| corpus.vocab[i]).collect(), g))
}

/// The newline's token (the prompt of the samples).
fn newline(corpus: &Corpus) -> i32 {
    corpus.vocab.iter().position(|&c| c == '\n').unwrap_or(0) as i32
}

/// `--bench`'s generation line: tokens/s of a 256-token generation at batch 1
/// with the KV cache (best of 3) and with the full-context program, and of
/// `bench/torch_gpt_generate.py` (PyTorch eager with its KV cache) on the same
/// weights, written to a temporary `.npz`.
fn bench_generation(
    corpus: &Corpus,
    s: &Shape,
    weights: &[(String, HostArray)],
    temp: f64,
    profiled: bool,
) -> AppResult<()> {
    const TOKENS: usize = 256;
    let prompt = [newline(corpus)];
    let timed = |src: &mut dyn decode::NextLogits, reps: usize| -> AppResult<f64> {
        decode::generate(src, &prompt, s.seq, 4, temp, 1)?;
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            let t = Instant::now();
            decode::generate(src, &prompt, s.seq, TOKENS, temp, 1)?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok(TOKENS as f64 / best)
    };
    let mut cache = decode::Cached::new(s, weights)?;
    let cached = timed(&mut cache, 3)?;
    if profiled {
        // The one-position program's kernels over one more generation.
        cache.step().set_profiling(true);
        decode::generate(&mut cache, &prompt, s.seq, TOKENS, temp, 1)?;
        println!("profile: the one-position decode program, per token ({TOKENS} tokens)");
        profile::print_profile(&cache.step().kernel_profile(), TOKENS, None);
        profile::print_top_kernels(&cache.step().kernel_profile(), TOKENS, 20);
        cache.step().set_profiling(false);
    }
    // What PyTorch checks its logits against: our tokens and logits of a 256-token generation.
    let check = decode::generate(&mut cache, &prompt, s.seq, TOKENS, temp, 1)?;
    let full = timed(&mut FullContext::new(s, weights)?, 1)?;
    println!(
        "bench: generation at batch 1, {TOKENS} tokens (context {}): {cached:.0} tokens/s with the KV cache \
         ({:.3} ms/token), {full:.0} tokens/s with the full-context program",
        s.seq,
        1e3 / cached
    );
    let script = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/torch_gpt_generate.py"));
    let file = std::env::temp_dir().join(format!("popxl-gpt-generate-{}.npz", std::process::id()));
    let mut arrays = weights.to_vec();
    let ids: Vec<i32> = check.ids.iter().map(|&i| i as i32).collect();
    let logits: Vec<f32> = check.logits.iter().flatten().map(|&l| l as f32).collect();
    arrays.push(("check.ids".into(), ArrayD::from_shape_vec(IxDyn(&[TOKENS]), ids)?.into()));
    arrays.push(("check.logits".into(), ArrayD::from_shape_vec(IxDyn(&[TOKENS, s.vocab]), logits)?.into()));
    popxl::checkpoint::save(&file, &arrays)?;
    // A number of the script's JSON line.
    let field = |text: &str, key: &str| -> Option<f64> {
        let at = text.rfind(&format!("\"{key}\": "))? + key.len() + 4;
        let num: String =
            text[at..].chars().take_while(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | '-' | '+')).collect();
        num.parse().ok()
    };
    // PyTorch on as many threads as ours, and on one (faster for these small ops on a busy machine).
    let threads = popxl_session::cpu::team::num_threads();
    let mut best: Option<f64> = None;
    for t in if threads > 1 { vec![threads, 1] } else { vec![1] } {
        let out = std::process::Command::new("python3")
            .arg(&script)
            .args(["--weights".as_ref(), file.as_os_str()])
            .args(["--heads", &s.heads.to_string(), "--tokens", &TOKENS.to_string(), "--reps", "3"])
            .args(["--temperature", &temp.to_string(), "--prompt", &prompt[0].to_string()])
            .args(["--threads", &t.to_string()])
            .output();
        let theirs = match out {
            Ok(o) if o.status.success() => {
                let text = String::from_utf8_lossy(&o.stdout).into_owned();
                match (field(&text, "tokens_per_s"), field(&text, "max_abs_logit_diff")) {
                    (Some(t), Some(diff)) => Ok((t, diff)),
                    _ => Err(format!("no tokens_per_s / max_abs_logit_diff in `{}`", text.trim())),
                }
            }
            Ok(o) => Err(String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("failed").to_string()),
            Err(e) => Err(format!("python3: {e}")),
        };
        match theirs {
            Ok((tps, diff)) => {
                println!(
                    "bench: torch_gpt_generate.py on {t} thread(s) (eager, its own KV cache, same weights; logits \
                     within {diff:.1e} of ours over our {TOKENS} tokens): {tps:.0} tokens/s; ours with the cache is \
                     {:.2}x its tokens/s",
                    cached / tps
                );
                best = Some(best.map_or(tps, |b: f64| b.max(tps)));
            }
            Err(why) => println!("bench: torch_gpt_generate.py: not run ({why})"),
        }
    }
    std::fs::remove_file(&file).ok();
    if let Some(b) = best {
        println!("bench: generation with the KV cache: ours is {:.2}x PyTorch eager's best tokens/s", cached / b);
    }
    Ok(())
}

/// Run a baseline script (`torch_gpt.py` / `jax_gpt.py`) on the same
/// configuration (10 timed steps) and read `step_median_ms` from its JSON line.
fn baseline_ms(
    script: &std::path::Path,
    extra: &[std::ffi::OsString],
    data: &std::path::Path,
    s: &Shape,
) -> Result<f64, String> {
    if !script.exists() {
        return Err(format!("{} not found; --baselines DIR", script.display()));
    }
    let args: Vec<String> = [
        ("--layers", s.layers),
        ("--heads", s.heads),
        ("--width", s.width),
        ("--seq", s.seq),
        ("--batch", s.batch),
        ("--steps", 10),
    ]
    .iter()
    .flat_map(|(k, v)| [k.to_string(), v.to_string()])
    .collect();
    let out = std::process::Command::new("python3")
        .arg(script)
        .args(extra)
        .args(&args)
        .arg("--data")
        .arg(data)
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().last().unwrap_or("failed").to_string());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let key = "\"step_median_ms\": ";
    let at = text.rfind(key).ok_or("no step_median_ms in its output")? + key.len();
    let num: String = text[at..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    num.parse().map_err(|e| format!("step_median_ms `{num}`: {e}"))
}

/// Matmul FLOPs of one training step (the baselines' `gpt_common.model_flops_per_step`):
/// the matrix-engine FLOP of one run of the lowered training program, each
/// kernel's [`popart_ir::OpDef::cost`] summed by the IPU model's timeline
/// (repeats counted), times the replicas (each runs `batch / replicas`).
fn flops_per_step(session: &Session, replicas: usize) -> AppResult<f64> {
    let per_replica = session.ipu_model_report()?.timeline.totals.matrix_flops;
    Ok(per_replica as f64 * replicas as f64)
}

fn main() -> AppResult<()> {
    run(std::env::args().skip(1).collect())
}

/// The example with command-line arguments `args` (without the program name).
pub fn run(args: Vec<String>) -> AppResult<()> {
    let cfg = parse_args(args)?;
    if !cfg.mpi {
        return run_with(cfg, None);
    }
    #[cfg(feature = "mpi")]
    {
        let _mpi = popxl_session::cpu::mpi::init()?;
        let world = popxl_session::cpu::mpi::world().ok_or("MPI is not initialized")?;
        run_with(cfg, Some(Arc::new(world)))
    }
    #[cfg(not(feature = "mpi"))]
    Err("--mpi needs the example built with the mpi feature: cargo build --release --features mpi --example gpt".into())
}

/// [`run`] with `--args` parsed, the replicas split between the processes of
/// `transport` when given (tests pass threads; `--mpi` MPI's world).
pub fn run_with_transport(args: Vec<String>, transport: Option<Arc<dyn Transport>>) -> AppResult<()> {
    run_with(parse_args(args)?, transport)
}

fn run_with(mut cfg: Config, transport: Option<Arc<dyn Transport>>) -> AppResult<()> {
    // Rank 0 prints and saves; every rank trains.
    let leader = transport.as_ref().is_none_or(|t| t.rank() == 0);
    let corpus = load_corpus(&cfg.data)?;
    cfg.shape.vocab = corpus.vocab.len();
    let s = cfg.shape;
    if corpus.split <= s.seq + 1 || corpus.ids.len() - corpus.split <= s.seq + 1 {
        return Err("the text is too short for this context length".into());
    }
    let processes = transport.as_ref().map_or(1, |t| t.size());
    eprintln!(
        "GPT: {} layers, {} heads, width {}, context {}, batch {}, vocab {}, {} replica(s) in {processes} process(es); \
         {} train / {} validation characters",
        s.layers,
        s.heads,
        s.width,
        s.seq,
        s.batch,
        s.vocab,
        cfg.replicas,
        corpus.split,
        corpus.ids.len() - corpus.split
    );
    let names = model::param_names(s.layers);
    let init = match &cfg.load {
        Some(path) => {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            popxl::checkpoint::select(path, popxl::checkpoint::load(path)?, &refs)?
        }
        None => model::init_params(&s, cfg.seed),
    };
    let adam = model::Adam { lr: cfg.lr, offload: cfg.offload_optimizer };
    let start = Instant::now();
    let (train, train_names) = if cfg.scan_layers {
        let stacked = scan::stack(&s, &init)?;
        let t = transport.as_ref();
        (build_replicated(&s, &stacked, Some(adam), false, true, cfg.replicas, t)?, scan::stacked_names())
    } else {
        (build_replicated(&s, &init, Some(adam), false, false, cfg.replicas, transport.as_ref())?, names.clone())
    };
    // The ipu_model's tile memory per step, for --memory-plot.
    let mut tile_memory = None;
    if cfg.ipu_model_report {
        // The same step lowered for ipu_model (one function per graph): what an
        // IPU would hold and how long the step would take there.
        let again = if cfg.scan_layers {
            build(&s, &scan::stack(&s, &init)?, Some(adam), false, true)?
        } else {
            build(&s, &init, Some(adam), false, false)?
        };
        match Session::new(again.ir, "ipu_model") {
            Ok(ipu) => {
                let report = ipu.ipu_model_report()?;
                eprint!("{}", report.memory_table(8));
                eprintln!("timeline of one step (cycles at {} GHz):", report.config.clock_hz / 1e9);
                eprint!("{}", report.timeline.table(0));
                tile_memory = Some(report.memory);
            }
            Err(e) => eprintln!("ipu_model: {e}"),
        }
    }
    let options = popxl_session::SessionOptions { transport: transport.clone(), ..Default::default() };
    let mut session = Session::with_options(train.ir.clone(), "cpu", options)?;
    // Adam's moments and step counters: every variable but the weights.
    let state_vars = train_state::state_variables(&train.ir, &train.params)?;
    let mut rng = Rng::new(cfg.seed.wrapping_add(1));
    let mut start_step = 0;
    if let Some(path) = &cfg.resume {
        let ck = Checkpoint::load(path)?;
        ck.expect_setting("batch", s.batch as u64)?;
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let weights = ck.arrays(&refs)?;
        let weights = if cfg.scan_layers { scan::stack(&s, &weights)? } else { weights };
        write_weights(&mut session, &train, &weights)?;
        ck.restore(&mut session, &state_vars)?;
        start_step = ck.counter("step")? as usize;
        rng = Rng::from_state(ck.counter("batch_rng")?);
    }
    eprintln!(
        "training program{}: {} kernel calls, {} ops after preparation, built and lowered in {:.3} s",
        if cfg.scan_layers { " (layers as one repeat)" } else { "" },
        session.executable().kernel_calls().len(),
        session.prepared_ir().graphs().map(|g| g.num_ops()).sum::<usize>(),
        start.elapsed().as_secs_f64()
    );
    // Per-layer weights of the training program (unstacked when the layers are a loop).
    let layer_weights = |w: Vec<(String, HostArray)>| -> AppResult<Vec<(String, HostArray)>> {
        if cfg.scan_layers {
            Ok(scan::unstack(&s, &w)?)
        } else {
            Ok(w)
        }
    };
    if cfg.dump {
        eprintln!("{}", session.executable().dump());
    }
    // The training step's memory plan: planned peak and the tensors live there.
    eprint!("{}", session.executable().memory_report().table(cfg.memory_top));
    if let (Some(path), true) = (&cfg.memory_plot, leader) {
        std::fs::write(path, session.executable().memory_plot(tile_memory.as_ref()))
            .map_err(|e| format!("--memory-plot {}: {e}", path.display()))?;
        eprintln!("wrote the memory plot to {}", path.display());
    }
    let eval_prog = build(&s, &init, None, false, false)?;
    let mut eval = Session::new(eval_prog.ir.clone(), "cpu")?;
    eprintln!("built and prepared the training and evaluation programs in {:.2} s", start.elapsed().as_secs_f64());

    let bar = indicatif::ProgressBar::new(cfg.steps.saturating_sub(start_step) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} steps [{elapsed_precise}] {msg}")
            .expect("valid template"),
    );
    let mut losses = Vec::with_capacity(cfg.steps);
    let mut step_times: Vec<Duration> = Vec::with_capacity(cfg.steps);
    let tokens_per_step = (s.batch * s.seq) as f64;
    let mut evals = Vec::new();
    // `with session:` around the whole loop, as PopXL programs train: the
    // weights stay on the device between steps.
    let mut ctx = session.enter()?;
    // The FMA peak on the team's threads just before and just after the timed steps.
    let threads = popxl_session::cpu::team::num_threads();
    let probe = (cfg.bench && leader).then(|| popxl_session::cpu::peak::PeakProbe::before(threads));
    for step in start_step..cfg.steps {
        let (x, y) = batch(&mut rng, &corpus.ids, 0, corpus.split, &s);
        let t = Instant::now();
        let out = ctx.run(&inputs(&train, x, y))?;
        step_times.push(t.elapsed());
        if step == start_step {
            // Profile the steady state, not the first run.
            ctx.set_profiling(cfg.profile);
            ctx.set_tracing(cfg.trace.is_some());
        }
        // One loss per replica: the step's loss (of the global batch) is their
        // mean (of this process's share of it when the replicas span processes).
        let per_replica = out[&train.out].to_f64_vec();
        losses.push(per_replica.iter().sum::<f64>() / per_replica.len() as f64);
        bar.inc(1);
        let recent = &losses[losses.len().saturating_sub(50)..];
        let secs: f64 = step_times[step_times.len().saturating_sub(50)..].iter().map(Duration::as_secs_f64).sum();
        bar.set_message(format!(
            "loss {:.4}, {:.0} tokens/s",
            recent.iter().sum::<f64>() / recent.len() as f64,
            tokens_per_step * recent.len() as f64 / secs
        ));
        if cfg.eval_every > 0 && (step + 1) % cfg.eval_every == 0 && step + 1 < cfg.steps {
            let w = layer_weights(read_weights(&mut ctx, &train, &train_names)?)?;
            write_weights(&mut eval, &eval_prog, &w)?;
            let v = validate(&mut eval, &eval_prog, &corpus, &s, cfg.eval_batches)?;
            let line = format!("step {}: validation loss {v:.4}", step + 1);
            // A hidden bar (stderr not a terminal) drops `println`.
            if bar.is_hidden() {
                eprintln!("{line}");
            } else {
                bar.println(line);
            }
            evals.push((step + 1, v));
        }
    }
    bar.finish_and_clear();
    let peak = probe.map(|p| p.after());
    ctx.exit()?;
    let weights = layer_weights(read_weights(&mut session, &train, &train_names)?)?;
    let end_step = cfg.steps.max(start_step);
    write_weights(&mut eval, &eval_prog, &weights)?;
    let val = validate(&mut eval, &eval_prog, &corpus, &s, cfg.eval_batches)?;
    let n = losses.len();
    let tail = &losses[n.saturating_sub(50)..];
    if leader {
        println!(
            "Trained {n} steps; mean training loss of the last {}: {:.4}; validation loss {val:.4} nats/char",
            tail.len(),
            tail.iter().sum::<f64>() / tail.len().max(1) as f64
        );
    }
    if cfg.print_losses && leader {
        for (i, loss) in losses.iter().enumerate() {
            println!("step {}: loss {loss:?}", start_step + i + 1);
        }
    }
    if let Some(path) = cfg.save.as_ref() {
        // Every process reads (a collective); rank 0 writes.
        let state = train_state::read(&mut session, &state_vars)?;
        let counters = [("step", end_step as u64), ("batch_rng", rng.state()), ("batch", s.batch as u64)];
        if leader {
            train_state::save(path, &weights, &state, &counters)?;
            eprintln!("saved the training state to {}", path.display());
        }
    }
    if cfg.bench && step_times.len() > 1 && leader {
        let mut ms: Vec<f64> = step_times[1..].iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let med = ms[ms.len() / 2];
        let flops = flops_per_step(&session, cfg.replicas)?;
        let gflops = flops / (med / 1e3) / 1e9;
        println!(
            "bench: step median {med:.2} ms (p10 {:.2}, p90 {:.2}), {:.0} tokens/s, {gflops:.1} model GFLOP/s{}",
            ms[ms.len() / 10],
            ms[ms.len() * 9 / 10],
            tokens_per_step / (med / 1e3),
            match peak.and_then(|v| v.peak()) {
                Some(p) => format!(" = {:.0}% of this machine's fp32 FMA peak", 100.0 * gflops / p),
                None => String::new(),
            }
        );
        if let Some(v) = &peak {
            println!("bench: {}", v.describe());
        }
        // PyTorch eager, PyTorch with `torch.compile` (this project's wrapper of
        // torch_gpt.py), JAX.
        let compiled = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/torch_gpt_compile.py"));
        let with_baselines = ["--baselines".into(), cfg.baselines.clone().into_os_string()];
        let runs: [(&str, PathBuf, &[std::ffi::OsString]); 3] = [
            ("torch_gpt.py", cfg.baselines.join("torch_gpt.py"), &[]),
            ("torch_gpt_compile.py (torch.compile)", compiled, &with_baselines),
            ("jax_gpt.py", cfg.baselines.join("jax_gpt.py"), &[]),
        ];
        for (name, script, extra) in runs {
            match baseline_ms(&script, extra, &cfg.data, &s) {
                Ok(theirs) => println!(
                    "bench: {name}: step median {theirs:.2} ms; ours is {:.2}x its steps per second",
                    theirs / med
                ),
                Err(why) => println!("bench: {name}: not run ({why})"),
            }
        }
    }
    if cfg.profile && step_times.len() > 1 {
        let timeline = session.ipu_model_report().ok().map(|r| r.timeline);
        profile::print_profile(&session.kernel_profile(), step_times.len() - 1, timeline.as_ref());
        profile::print_top_kernels(&session.kernel_profile(), step_times.len() - 1, 30);
        let calls = session.executable().kernel_calls();
        let limit = peak.and_then(|v| v.peak());
        profile::print_matmul_profile(&session.kernel_profile(), step_times.len() - 1, &calls, limit);
    }
    if let (Some(path), true) = (&cfg.trace, leader) {
        session.write_trace(path)?;
        eprintln!("wrote the kernel timeline of {} steps to {}", step_times.len().saturating_sub(1), path.display());
    }
    if (cfg.bench || cfg.bench_generation) && leader {
        bench_generation(&corpus, &s, &weights, cfg.temperature, cfg.profile)?;
    }
    if cfg.sample > 0 && leader {
        let no_cache = cfg.sample_no_cache;
        let (text, _) = sample(&corpus, &s, &weights, cfg.sample, cfg.temperature, cfg.seed, no_cache)?;
        println!("--- sample (temperature {}) ---\n{text}\n---", cfg.temperature);
    }
    let _ = evals;
    Ok(())
}
