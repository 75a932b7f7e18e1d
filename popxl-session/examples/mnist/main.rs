//! `cargo run --release --example mnist -- [options]`: train the PopXL user guide's
//! MNIST classifier (784 -> hidden -> 10, gelu, softmax + NLL, SGD) and test it.

pub(crate) mod app;
pub(crate) mod data;
#[path = "../support/train_state.rs"]
#[allow(dead_code)]
mod train_state;

use std::path::PathBuf;
use std::time::Duration;

use app::{AppResult, Config};

const USAGE: &str = "\
Train and test the PopXL MNIST example.

Options:
  --data DIR            directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
                        (default: the bundled 10,000-digit subset in data/mnist)
  --batch N             training batch size (default 8)
  --test-batch N        test batch size (default 80)
  --lr X                SGD learning rate (default 0.005)
  --epochs N            epochs (default 1)
  --hidden N            hidden width (default 32)
  --host-transfers N    batches per Session::run (num_host_transfers, default 1)
  --replicas R          data-parallel replicas (replication_factor, default 1): each takes
                        batch / R samples; gradients are averaged with replicated_all_reduce
  --rts                 with --replicas: shard the weight matrices over the replicas
                        (replicated tensor sharding, as PopXL's mnist_rts)
  --seed N              initialisation and shuffle seed (default 0)
  --limit-batches N     train on at most N batches per epoch
  --steps N             stop once N steps are trained in all (counting those before --resume;
                        a multiple of --host-transfers); the schedule is that of the full run
  --device D            cpu | ipu_model | ipu_hw (default cpu)
  --save PATH           write the training state: the weights W0, b0, W1, b1, any other variable,
                        the step and the data order (train.* counters); one archive when PATH
                        ends in .npz (numpy.load(PATH)[\"W0\"]) or .safetensors, else files
                        PATH/W0.npy ... (replacing any previous checkpoint atomically)
  --resume PATH         continue the training saved by --save in PATH, bit for bit as if it had
                        not stopped (same --batch, --limit-batches; --epochs/--steps may grow)
  --load PATH           test the weights saved in PATH (.npz, .safetensors or directory) instead
                        of training
  --print-losses        print every step's loss (exactly: shortest round-trip form)
  --bench               print timing and memory numbers as well
  --soak                for runs of millions of steps (e.g. --epochs 800): keep no per-step
                        records and print the resident memory after the first epoch and at the end
  --mpi                 split the replicas between the processes of an MPI launch (build with
                        --features mpi; `mpirun -n 2 target/release/examples/mnist --replicas 2
                        --mpi`): each process runs R / processes replicas on its slice of every
                        batch; rank 0 prints and saves
  --profile             time every kernel and print the slowest (per step)
  --trace FILE          write the kernel timeline of the training runs after the first as Chrome
                        trace-event JSON (open in Perfetto or chrome://tracing)
  --memory-plot FILE    write the training program's memory plan as an SVG plot (bytes live per
                        step; on --device ipu_model also the most loaded tile per step)
  --no-patterns         prepare the training IR without optimisation patterns
  --dump                print the IR and the lowered training program to stderr
  -h, --help            this text";

/// Options of `main` beyond the training configuration.
#[derive(Default)]
struct Extra {
    bench: bool,
    print_losses: bool,
    save: Option<PathBuf>,
    load: Option<PathBuf>,
    mpi: bool,
}

fn parse_args(args: Vec<String>) -> AppResult<(Config, Extra)> {
    let mut cfg = Config::default();
    let mut extra = Extra::default();
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--data" => cfg.data = PathBuf::from(value()?),
            "--batch" => cfg.batch = value()?.parse()?,
            "--test-batch" => cfg.test_batch = value()?.parse()?,
            "--lr" => cfg.lr = value()?.parse()?,
            "--epochs" => cfg.epochs = value()?.parse()?,
            "--hidden" => cfg.hidden = value()?.parse()?,
            "--host-transfers" => cfg.host_transfers = value()?.parse()?,
            "--seed" => cfg.seed = value()?.parse()?,
            "--replicas" => cfg.replicas = value()?.parse()?,
            "--mpi" => extra.mpi = true,
            "--rts" => cfg.rts = true,
            "--soak" => cfg.soak = true,
            "--limit-batches" => cfg.limit_batches = Some(value()?.parse()?),
            "--steps" => cfg.steps = Some(value()?.parse()?),
            "--resume" => cfg.resume = Some(PathBuf::from(value()?)),
            "--print-losses" => extra.print_losses = true,
            "--device" => cfg.device = value()?,
            "--bench" => extra.bench = true,
            "--save" => extra.save = Some(PathBuf::from(value()?)),
            "--load" => extra.load = Some(PathBuf::from(value()?)),
            "--dump" => cfg.dump = true,
            "--profile" => cfg.profile = true,
            "--trace" => cfg.trace = Some(PathBuf::from(value()?)),
            "--memory-plot" => cfg.memory_plot = Some(PathBuf::from(value()?)),
            "--no-patterns" => cfg.patterns = false,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option `{other}`\n\n{USAGE}").into()),
        }
    }
    if cfg.batch == 0 || cfg.test_batch == 0 || cfg.host_transfers == 0 || cfg.replicas == 0 {
        return Err("--batch, --test-batch, --host-transfers and --replicas must be positive".into());
    }
    if cfg.steps.is_some_and(|s| !s.is_multiple_of(cfg.host_transfers)) {
        return Err("--steps must be a multiple of --host-transfers".into());
    }
    if extra.load.is_some() && cfg.resume.is_some() {
        return Err("--load tests saved weights, --resume continues training: give one".into());
    }
    if !cfg.batch.is_multiple_of(cfg.replicas) {
        return Err(format!("--batch ({}) must be a multiple of --replicas ({})", cfg.batch, cfg.replicas).into());
    }
    Ok((cfg, extra))
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() -> AppResult<()> {
    // `RUST_LOG=debug` shows the preparation pipeline's passes and their times.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    run(std::env::args().skip(1).collect())
}

/// The example with command-line arguments `args` (without the program name).
pub fn run(args: Vec<String>) -> AppResult<()> {
    let (cfg, extra) = parse_args(args)?;
    if !extra.mpi {
        return run_with(cfg, extra);
    }
    #[cfg(feature = "mpi")]
    {
        let _mpi = popxl_session::cpu::mpi::init()?;
        let world = popxl_session::cpu::mpi::world().ok_or("MPI is not initialized")?;
        let cfg = Config { transport: Some(std::sync::Arc::new(world)), ..cfg };
        run_with(cfg, extra)
    }
    #[cfg(not(feature = "mpi"))]
    Err("--mpi needs the example built with the mpi feature: cargo build --release --features mpi --example mnist"
        .into())
}

fn run_with(cfg: Config, extra: Extra) -> AppResult<()> {
    // Rank 0 prints and saves; every rank trains.
    let leader = cfg.transport.as_ref().is_none_or(|t| t.rank() == 0);
    let train_set = data::load_split(&cfg.data, "train")?;
    let test_set = data::load_split(&cfg.data, "t10k")?;
    eprintln!(
        "MNIST: {} train / {} test samples from {}; batch {}, lr {}, {} epoch(s), hidden {}, {} replica(s){}",
        train_set.len(),
        test_set.len(),
        cfg.data.display(),
        cfg.batch,
        cfg.lr,
        cfg.epochs,
        cfg.hidden,
        cfg.replicas,
        if cfg.rts && cfg.replicas > 1 { " with RTS" } else { "" }
    );
    if let Some(dir) = &extra.load {
        let params: app::Params =
            popxl::checkpoint::select(dir, popxl::checkpoint::load(dir)?, &["W0", "b0", "W1", "b1"])?;
        let accuracy = app::test(&cfg, &params, &test_set)?;
        println!("Accuracy on test set: {accuracy:.2}% (weights from {})", dir.display());
        return Ok(());
    }
    let report = app::train(&cfg, &train_set)?;
    if !leader {
        return Ok(());
    }
    let steps = report.steps;
    let tail = &report.losses[report.losses.len().saturating_sub(100)..];
    println!(
        "Trained {steps} steps in {:.2} s ({:.0} samples/s); mean loss of the last {} steps: {:.4}",
        report.train_wall.as_secs_f64(),
        (steps * cfg.batch) as f64 / report.train_wall.as_secs_f64(),
        tail.len(),
        tail.iter().sum::<f32>() / tail.len().max(1) as f32
    );
    if extra.print_losses {
        // The last `losses.len()` steps of the schedule (all of this run's unless --soak).
        let end = report.counters.iter().find(|c| c.0 == "step").map_or(0, |c| c.1);
        let first = end.saturating_sub(report.losses.len() as u64);
        for (i, loss) in report.losses.iter().enumerate() {
            println!("step {}: loss {loss:?}", first + i as u64 + 1);
        }
    }
    if let Some(dir) = &extra.save {
        train_state::save(dir, &report.params, &report.state, &report.counters)?;
        eprintln!("saved the training state to {}", dir.display());
    }
    let accuracy = app::test(&cfg, &report.params, &test_set)?;
    println!("Accuracy on test set: {accuracy:.2}%");
    if extra.bench {
        let mut per_step: Vec<f64> = report.run_times.iter().map(|d| micros(*d) / cfg.host_transfers as f64).collect();
        per_step.sort_by(f64::total_cmp);
        let pct = |p: f64| per_step.get(((per_step.len() as f64 - 1.0) * p) as usize).copied().unwrap_or(f64::NAN);
        println!(
            "bench: step median {:.1} us (p10 {:.1}, p90 {:.1}) over {} runs; time to first step {:.2} ms; \
             intermediate buffers: planned peak {} bytes (of which host-load landing {}), no-reuse total {} bytes",
            pct(0.5),
            pct(0.1),
            pct(0.9),
            per_step.len(),
            micros(report.time_to_first_step) / 1000.0,
            report.intermediate_peak_bytes,
            report.host_load_bytes,
            report.intermediate_no_reuse_bytes
        );
    }
    if let Some((warm, end)) = report.resident {
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        println!(
            "soak: {steps} steps in {:.1} s; resident memory {:.2} MiB after the first epoch, {:.2} MiB at the end ({:+} bytes)",
            report.train_wall.as_secs_f64(),
            mib(warm),
            mib(end),
            end as i64 - warm as i64
        );
    }
    if cfg.profile {
        print_profile(&report);
    }
    Ok(())
}

/// The kernels of the training program, slowest first, in microseconds per step.
fn print_profile(report: &app::TrainReport) {
    let steps = report.run_times.len().max(1) as f64;
    let total: f64 = report.kernel_profile.iter().map(|k| micros(k.total)).sum::<f64>() / steps;
    let wall: f64 = report.run_times.iter().map(|d| micros(*d)).sum::<f64>() / steps;
    println!("profile: {total:.1} us of kernels per run ({wall:.1} us wall per run)");
    for k in report.kernel_profile.iter().take(16) {
        let per = micros(k.total) / steps;
        println!("  {per:9.1} us {:5.1}%  {:<28} {}", 100.0 * per / total, k.op_type, k.name);
    }
}
