//! `cargo run --release --example cnn -- [options]`: train a LeNet-5-style
//! convolutional network on the bundled MNIST digits and test it.

#[path = "../mnist/data.rs"]
#[allow(dead_code)]
mod data;
mod layers;
mod model;
#[path = "../support/profile.rs"]
mod profile;
#[path = "../support/train_state.rs"]
#[allow(dead_code)]
mod train_state;

use std::collections::HashMap;
use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ndarray::{ArrayD, IxDyn};
use popxl::{ops, HostArray, Tensor};
use popxl_session::Session;

use data::{Rng, Split};
use train_state::{Checkpoint, Position};

type AppResult<T> = Result<T, Box<dyn Error>>;

const USAGE: &str = "\
Train and test a LeNet-5-style CNN on the bundled MNIST digits.

Options:
  --data DIR         directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (default data/mnist)
  --batch N          training batch size (default 64)
  --test-batch N     test batch size (default 500)
  --lr X             learning rate (default 0.02)
  --momentum X       SGD momentum (default 0.9)
  --epochs N         epochs (default 2)
  --seed N           initialisation and shuffle seed (default 0)
  --limit-batches N  train on at most N batches per epoch
  --steps N          stop once N steps are trained in all (counting those before --resume); the
                     schedule is that of the full run
  --save PATH        write the training state: the weights l<i>.W, l<i>.b, the momentum buffers
                     l<i>.W.v, l<i>.b.v, the step and the data order (train.* counters) to PATH
                     (.npz, .safetensors or a directory of .npy; replaced atomically)
  --resume PATH      continue the training saved by --save in PATH, bit for bit as if it had not
                     stopped (same --batch and --limit-batches; --epochs/--steps may grow)
  --print-losses     print every step's loss (exactly: shortest round-trip form)
  --device D         cpu | ipu_model | ipu_hw (default cpu)
  --bench            print step timings next to bench/torch_cnn.py (eager and torch.compile), run in the same run
  --profile          time every kernel and print the op types that take the most time per step
  --trace FILE       write the kernel timeline of the training steps after the first as Chrome
                     trace-event JSON (open in Perfetto or chrome://tracing)
  --memory-plot FILE write the training step's memory plan as an SVG plot (bytes live per step;
                     on --device ipu_model also the most loaded tile per step)
  -h, --help         this text";

struct Config {
    data: PathBuf,
    batch: usize,
    test_batch: usize,
    lr: f32,
    momentum: f32,
    epochs: usize,
    seed: u64,
    limit_batches: Option<usize>,
    steps: Option<usize>,
    save: Option<PathBuf>,
    resume: Option<PathBuf>,
    print_losses: bool,
    device: String,
    bench: bool,
    profile: bool,
    trace: Option<PathBuf>,
    memory_plot: Option<PathBuf>,
}

fn parse_args(args: Vec<String>) -> AppResult<Config> {
    let mut c = Config {
        data: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/mnist")),
        batch: 64,
        test_batch: 500,
        lr: 0.02,
        momentum: 0.9,
        epochs: 2,
        seed: 0,
        limit_batches: None,
        steps: None,
        save: None,
        resume: None,
        print_losses: false,
        device: "cpu".into(),
        bench: false,
        profile: false,
        trace: None,
        memory_plot: None,
    };
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--data" => c.data = PathBuf::from(value()?),
            "--batch" => c.batch = value()?.parse()?,
            "--test-batch" => c.test_batch = value()?.parse()?,
            "--lr" => c.lr = value()?.parse()?,
            "--momentum" => c.momentum = value()?.parse()?,
            "--epochs" => c.epochs = value()?.parse()?,
            "--seed" => c.seed = value()?.parse()?,
            "--limit-batches" => c.limit_batches = Some(value()?.parse()?),
            "--steps" => c.steps = Some(value()?.parse()?),
            "--save" => c.save = Some(PathBuf::from(value()?)),
            "--resume" => c.resume = Some(PathBuf::from(value()?)),
            "--print-losses" => c.print_losses = true,
            "--device" => c.device = value()?,
            "--bench" => c.bench = true,
            "--profile" => c.profile = true,
            "--trace" => c.trace = Some(PathBuf::from(value()?)),
            "--memory-plot" => c.memory_plot = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option `{other}`\n\n{USAGE}").into()),
        }
    }
    if c.batch == 0 || c.test_batch == 0 {
        return Err("--batch and --test-batch must be positive".into());
    }
    Ok(c)
}

fn batch_array(shape: &[usize], data: Vec<f32>) -> AppResult<HostArray> {
    Ok(ArrayD::from_shape_vec(IxDyn(shape), data)?.into())
}

struct Trained {
    params: model::Params,
    /// The momentum buffers (every variable but the weights), by name.
    state: model::Params,
    /// Where training stopped (see `train_state::Position`), as checkpoint counters.
    counters: Vec<(&'static str, u64)>,
    /// Steps trained before `losses[0]` (0 unless resumed).
    start_step: u64,
    losses: Vec<f32>,
    step_times: Vec<Duration>,
    first_step: Duration,
    wall: Duration,
}

fn train(cfg: &Config, train_set: &Split) -> AppResult<Trained> {
    let init = model::init_params(cfg.seed);
    let start = Instant::now();
    let ir = popxl::Ir::new();
    let (images, labels, loss_out, params) = {
        let _g = ir.main_graph().enter();
        let _s = popxl::in_sequence(true);
        let images = popxl::h2d_stream([cfg.batch, 1, 28, 28], popxl::float32, "images")?;
        let labels = popxl::h2d_stream([cfg.batch], popxl::int32, "labels")?;
        let loss_out = popxl::d2h_stream([], popxl::float32, "loss")?;
        let params: Vec<Tensor> =
            init.iter().map(|(n, a)| popxl::variable(a.clone(), n)).collect::<popxl::Result<_>>()?;
        let vel: Vec<Tensor> = init
            .iter()
            .map(|(n, a)| popxl::variable(HostArray::full(&a.info(), 0.0), &format!("{n}.v")))
            .collect::<popxl::Result<_>>()?;
        let x = ops::host_load(&images, "x")?;
        let y = ops::host_load(&labels, "y")?;
        let loss = model::train_step(&ir, &x, &y, &params, &vel, cfg.lr, cfg.momentum)?;
        ops::host_store(&loss_out, &loss)?;
        (images, labels, loss_out, params)
    };
    let mut session = Session::new(ir.clone(), &cfg.device)?;
    if let Some(path) = &cfg.memory_plot {
        let tiles = if cfg.device == "ipu_model" { Some(session.ipu_model_report()?.memory) } else { None };
        std::fs::write(path, session.executable().memory_plot(tiles.as_ref()))
            .map_err(|e| format!("--memory-plot {}: {e}", path.display()))?;
        eprintln!("wrote the memory plot to {}", path.display());
    }
    let mut batches = train_set.len() / cfg.batch;
    if let Some(l) = cfg.limit_batches {
        batches = batches.min(l);
    }
    let max_steps = cfg.steps.map_or(u64::MAX, |s| s as u64);
    let state_vars = train_state::state_variables(&ir, &params)?;
    let mut pos = Position { epoch_rng: Rng::new(cfg.seed.wrapping_add(1)).state(), ..Position::default() };
    if let Some(path) = &cfg.resume {
        let ck = Checkpoint::load(path)?;
        ck.expect_setting("batch", cfg.batch as u64)?;
        ck.expect_setting("batches_per_epoch", batches as u64)?;
        ck.restore(&mut session, &params)?;
        ck.restore(&mut session, &state_vars)?;
        pos = Position::load(&ck)?;
    }
    let start_step = pos.step;
    let bar = indicatif::ProgressBar::new(((batches * cfg.epochs) as u64).saturating_sub(start_step));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} batches [{elapsed_precise}] {msg}")
            .expect("valid template"),
    );
    let mut rng = Rng::from_state(pos.epoch_rng);
    let (mut img, mut lbl) = (Vec::new(), Vec::new());
    let mut out = Trained {
        params: vec![],
        state: vec![],
        counters: vec![],
        start_step,
        losses: vec![],
        step_times: vec![],
        first_step: Duration::ZERO,
        wall: Duration::ZERO,
    };
    let t_train = Instant::now();
    session.scope(|s| -> AppResult<()> {
        let mut inputs = HashMap::new();
        for epoch in pos.epoch as usize..cfg.epochs {
            let epoch_rng = rng.state();
            let order = rng.permutation(train_set.len());
            let first = if epoch as u64 == pos.epoch { pos.batch as usize } else { 0 };
            for b in first..batches {
                let step = start_step + out.losses.len() as u64;
                if step >= max_steps {
                    pos = Position { step, epoch: epoch as u64, batch: b as u64, epoch_rng };
                    return Ok(());
                }
                data::gather(train_set, &order[b * cfg.batch..(b + 1) * cfg.batch], &mut img, &mut lbl);
                inputs.insert(images.clone(), batch_array(&[cfg.batch, 1, 28, 28], img.clone())?);
                inputs.insert(labels.clone(), ArrayD::from_shape_vec(IxDyn(&[cfg.batch]), lbl.clone())?.into());
                let t = Instant::now();
                let r = s.run(&inputs)?;
                if out.losses.is_empty() {
                    out.first_step = start.elapsed();
                    // Profile the steady state, not the first run.
                    s.set_profiling(cfg.profile);
                    s.set_tracing(cfg.trace.is_some());
                } else {
                    out.step_times.push(t.elapsed());
                }
                let l = r[&loss_out].as_f32().ok_or("loss is not float32")?;
                out.losses.extend(l.iter().copied());
                bar.inc(1);
                let n = out.losses.len();
                let recent = &out.losses[n.saturating_sub(50)..];
                bar.set_message(format!("loss {:.4}", recent.iter().sum::<f32>() / recent.len() as f32));
            }
            let step = start_step + out.losses.len() as u64;
            pos = Position { step, epoch: epoch as u64 + 1, batch: 0, epoch_rng: rng.state() };
        }
        Ok(())
    })?;
    out.wall = t_train.elapsed();
    out.counters = pos.counters(cfg.batch, batches);
    if cfg.profile {
        let timeline = session.ipu_model_report().ok().map(|r| r.timeline);
        profile::print_profile(&session.kernel_profile(), out.step_times.len(), timeline.as_ref());
    }
    if let Some(path) = &cfg.trace {
        session.write_trace(path)?;
        eprintln!("wrote the kernel timeline to {}", path.display());
    }
    bar.finish_and_clear();
    let data = session.get_tensors_data(params.iter())?;
    out.params = params.iter().map(|v| v.name().to_string()).zip(data).collect();
    out.state = train_state::read(&mut session, &state_vars)?;
    Ok(out)
}

fn test(cfg: &Config, params: &model::Params, test_set: &Split) -> AppResult<f64> {
    let ir = popxl::Ir::new();
    let (images, logits_out) = {
        let _g = ir.main_graph().enter();
        let _s = popxl::in_sequence(true);
        let images = popxl::h2d_stream([cfg.test_batch, 1, 28, 28], popxl::float32, "images")?;
        let vars: Vec<Tensor> =
            params.iter().map(|(n, a)| popxl::variable(a.clone(), n)).collect::<popxl::Result<_>>()?;
        let x = ops::host_load(&images, "x")?;
        let y = model::logits(&ir, &x, &vars)?;
        let logits_out = popxl::d2h_stream(y.shape(), y.dtype(), "logits")?;
        ops::host_store(&logits_out, &y)?;
        (images, logits_out)
    };
    let mut session = Session::new(ir, &cfg.device)?;
    let batches = test_set.len() / cfg.test_batch;
    let (mut img, mut lbl) = (Vec::new(), Vec::new());
    let mut correct = 0usize;
    session.scope(|s| -> AppResult<()> {
        let mut inputs = HashMap::new();
        for i in 0..batches {
            let idx: Vec<usize> = (i * cfg.test_batch..(i + 1) * cfg.test_batch).collect();
            data::gather(test_set, &idx, &mut img, &mut lbl);
            inputs.insert(images.clone(), batch_array(&[cfg.test_batch, 1, 28, 28], img.clone())?);
            let r = s.run(&inputs)?;
            let logits = r[&logits_out].as_f32().ok_or("logits are not float32")?;
            for (row, &label) in logits.outer_iter().zip(&lbl) {
                let best =
                    row.iter().enumerate().fold((0, f32::NEG_INFINITY), |m, (j, &v)| if v > m.1 { (j, v) } else { m });
                correct += usize::from(best.0 as i32 == label);
            }
        }
        Ok(())
    })?;
    Ok(100.0 * correct as f64 / (batches * cfg.test_batch).max(1) as f64)
}

/// Runs `bench/torch_cnn.py` (the PyTorch mirror: same network, init, batch
/// order and optimiser) on this configuration and reads its `step_median_us`.
fn torch_step_us(script: &std::path::Path, cfg: &Config, threads: usize, compile: bool) -> Result<f64, String> {
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(script).args(["--threads", &threads.to_string(), "--epochs", &cfg.epochs.to_string()]);
    cmd.args(["--batch", &cfg.batch.to_string(), "--seed", &cfg.seed.to_string(), "--lr", &cfg.lr.to_string()]);
    cmd.args(["--momentum", &cfg.momentum.to_string()]).arg("--data").arg(&cfg.data);
    if compile {
        cmd.arg("--compile");
    }
    let out = cmd.output().map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().last().unwrap_or("failed").to_string());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let key = "\"step_median_us\": ";
    let at = text.rfind(key).ok_or("no step_median_us in its output")? + key.len();
    let num: String = text[at..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    num.parse().map_err(|e| format!("step_median_us `{num}`: {e}"))
}

fn main() -> AppResult<()> {
    run(std::env::args().skip(1).collect())
}

/// The example with command-line arguments `args` (without the program name).
pub fn run(args: Vec<String>) -> AppResult<()> {
    let cfg = parse_args(args)?;
    let train_set = data::load_split(&cfg.data, "train")?;
    let test_set = data::load_split(&cfg.data, "t10k")?;
    eprintln!(
        "CNN on MNIST: {} train / {} test samples; batch {}, lr {}, momentum {}, {} epoch(s)",
        train_set.len(),
        test_set.len(),
        cfg.batch,
        cfg.lr,
        cfg.momentum,
        cfg.epochs
    );
    let t = train(&cfg, &train_set)?;
    let n = t.losses.len();
    let tail = &t.losses[n.saturating_sub(50)..];
    println!(
        "Trained {n} steps in {:.2} s; first losses {:?}; mean loss of the last {}: {:.4}",
        t.wall.as_secs_f64(),
        &t.losses[..n.min(5)],
        tail.len(),
        tail.iter().sum::<f32>() / tail.len().max(1) as f32
    );
    if cfg.print_losses {
        for (i, loss) in t.losses.iter().enumerate() {
            println!("step {}: loss {loss:?}", t.start_step + i as u64 + 1);
        }
    }
    if let Some(path) = &cfg.save {
        train_state::save(path, &t.params, &t.state, &t.counters)?;
        eprintln!("saved the training state to {}", path.display());
    }
    let accuracy = test(&cfg, &t.params, &test_set)?;
    println!("Accuracy on test set: {accuracy:.2}%");
    if cfg.bench {
        let mut us: Vec<f64> = t.step_times.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        us.sort_by(f64::total_cmp);
        let pct = |p: f64| us.get(((us.len() as f64 - 1.0) * p) as usize).copied().unwrap_or(f64::NAN);
        let threads = popxl_session::cpu::team::num_threads();
        let ours = pct(0.5);
        println!(
            "bench: ours: step median {ours:.1} us (p10 {:.1}, p90 {:.1}) over {} steps, {threads} threads; \
             time to first step {:.1} ms",
            pct(0.1),
            pct(0.9),
            us.len(),
            t.first_step.as_secs_f64() * 1e3,
        );
        let script = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/torch_cnn.py"));
        for compile in [false, true] {
            let name = if compile { "torch.compile" } else { "torch eager" };
            match torch_step_us(&script, &cfg, threads, compile) {
                Ok(theirs) => {
                    println!("bench: {name}: step median {theirs:.1} us; ours is {:.2}x faster", theirs / ours)
                }
                Err(why) => println!("bench: {name}: not run ({why})"),
            }
        }
    }
    Ok(())
}
