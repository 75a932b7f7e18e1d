//! The PopXL user guide's MNIST application, built with `popxl`, differentiated
//! with `autodiff` and run with a `Session`. Shared by the `mnist` example and its
//! integration test.

use std::collections::HashMap;
use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ndarray::{ArrayD, IxDyn};
use popxl::ops::collectives::{self, AllGatherShape, CollectiveOp};
use popxl::{ops, transforms, DeviceToHostStream, HostArray, HostToDeviceStream, Ir, Module, Tensor};
use popxl_session::{Session, SessionOptions};

use super::data::{self, Rng, Split, PIXELS};
use super::train_state::{self, Checkpoint, Position};

/// Result type of the application.
pub type AppResult<T> = Result<T, Box<dyn Error>>;

/// Settings (defaults are the user guide's).
#[derive(Clone, Debug)]
pub struct Config {
    /// Directory with the four IDX files.
    pub data: PathBuf,
    /// Training batch size.
    pub batch: usize,
    /// Test batch size.
    pub test_batch: usize,
    /// SGD learning rate.
    pub lr: f32,
    /// Epochs.
    pub epochs: usize,
    /// Hidden width.
    pub hidden: usize,
    /// Batches per `Session::run`.
    pub host_transfers: usize,
    /// Seed of the weight initialisation and the shuffle.
    pub seed: u64,
    /// Stop after this many training batches (CI and tests).
    pub limit_batches: Option<usize>,
    /// Stop once this many steps are trained in all (those before a resume
    /// included); the schedule (epochs, order) is unchanged.
    pub steps: Option<usize>,
    /// Resume from the training state in this checkpoint (see `--resume`).
    pub resume: Option<PathBuf>,
    /// Device string.
    pub device: String,
    /// Show a progress bar (only drawn on a terminal).
    pub progress: bool,
    /// Print the IR text and the lowered training program to stderr.
    pub dump: bool,
    /// Time every kernel of the training program (see `TrainReport::kernel_profile`).
    pub profile: bool,
    /// Write the kernel timeline of the training runs after the first here
    /// (Chrome trace-event JSON, `Session::write_trace`).
    pub trace: Option<PathBuf>,
    /// Write the training program's memory plan here as an SVG plot
    /// (`Executable::memory_plot`; with the most loaded tile on `ipu_model`).
    pub memory_plot: Option<PathBuf>,
    /// Let the session apply its optimisation patterns (`SessionOptions::patterns`).
    pub patterns: bool,
    /// Data-parallel replicas (`replication_factor`): each takes `batch /
    /// replicas` samples of every batch; gradients are averaged across
    /// replicas (`replicated_all_reduce` mean) before the update.
    pub replicas: usize,
    /// With replicas: shard the weight matrices over the replicas (replicated
    /// tensor sharding, as PopXL's mnist_rts): each replica holds and updates
    /// one shard, gathers the full weight for the forward pass and gets its
    /// shard of the averaged gradient with `replicated_reduce_scatter`.
    pub rts: bool,
    /// A soak: keep only the last 100 losses and no per-run times (so that
    /// millions of steps hold the example's own memory flat), and measure the
    /// process's resident memory after the first epoch and at the end.
    pub soak: bool,
    /// The replicas span processes, reached through this transport: this
    /// process is its rank of its size and runs `replicas / size` of the
    /// replicas (`--mpi`: MPI's world; tests: threads).
    pub transport: Option<std::sync::Arc<dyn popxl_session::cpu::transport::Transport>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/mnist")),
            batch: 8,
            test_batch: 80,
            lr: 0.005,
            epochs: 1,
            hidden: 32,
            host_transfers: 1,
            seed: 0,
            limit_batches: None,
            steps: None,
            resume: None,
            device: "cpu".into(),
            progress: true,
            dump: false,
            profile: false,
            trace: None,
            memory_plot: None,
            patterns: true,
            replicas: 1,
            rts: false,
            soak: false,
            transport: None,
        }
    }
}

/// `gelu(x @ W + b)`; `W` and `b` are graph inputs kept on the module (PopXL's `Linear`).
pub struct Linear {
    out_features: usize,
    /// The weight graph input, set by `build`.
    pub w: Option<Tensor>,
    /// The bias graph input, set by `build`.
    pub b: Option<Tensor>,
}

impl Linear {
    /// A layer with `out_features` outputs.
    pub fn new(out_features: usize) -> Self {
        Linear { out_features, w: None, b: None }
    }

    fn inputs_dict<'a>(&'a self, w: &'a Tensor, b: &'a Tensor) -> [(&'a Tensor, &'a Tensor); 2] {
        [(self.w.as_ref().expect("built"), w), (self.b.as_ref().expect("built"), b)]
    }
}

impl Module for Linear {
    type Inputs = Tensor;
    type Outputs = Tensor;
    fn build(&mut self, x: Tensor) -> popxl::Result<Tensor> {
        let w = popxl::graph_input([x.shape()[x.rank() - 1], self.out_features], popxl::float32, "W")?;
        let b = popxl::graph_input([self.out_features], popxl::float32, "b")?;
        let y = ops::gelu(&ops::add(&x.matmul(&w)?, &b)?)?;
        (self.w, self.b) = (Some(w), Some(b));
        Ok(y)
    }
}

/// Trained or initial parameters, by variable name.
pub type Params = Vec<(String, HostArray)>;

/// Weights and biases ~ N(0, 0.02), as the guide.
pub fn init_params(hidden: usize, seed: u64) -> Params {
    let mut rng = Rng::new(seed);
    let mut normal = |shape: &[usize]| -> HostArray {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| (rng.normal() * 0.02) as f32).collect();
        ArrayD::from_shape_vec(IxDyn(shape), v).expect("shape").into()
    };
    vec![
        ("W0".into(), normal(&[PIXELS, hidden])),
        ("b0".into(), normal(&[hidden])),
        ("W1".into(), normal(&[hidden, 10])),
        ("b1".into(), normal(&[10])),
    ]
}

/// The training IR and the handles the loop needs.
pub struct TrainProgram {
    /// The IR.
    pub ir: Ir,
    /// Images in.
    pub images: HostToDeviceStream,
    /// Labels in.
    pub labels: HostToDeviceStream,
    /// Loss out.
    pub loss: DeviceToHostStream,
    /// The variables W0, b0, W1, b1 (with RTS the weights are the sharded
    /// variables: their host value is the full matrix).
    pub variables: Vec<Tensor>,
}

/// Build the training IR. One step: forward through two `Linear` graphs called
/// with `call_with_info`, softmax + `nll_loss_with_softmax_grad`, gradient graphs
/// from `autodiff` of each layer, SGD through `scaled_add_`; all `in_sequence`.
/// With `host_transfers > 1` the step is the body of a `repeat` (the parameters
/// are loop-carried and copied back into the variables afterwards), so one `run`
/// trains on `host_transfers` batches.
pub fn build_train(cfg: &Config, params: &Params) -> AppResult<TrainProgram> {
    if cfg.replicas == 0 || !cfg.batch.is_multiple_of(cfg.replicas) {
        return Err(format!("--batch ({}) must be a multiple of --replicas ({})", cfg.batch, cfg.replicas).into());
    }
    let ir = Ir::new();
    ir.set_num_host_transfers(cfg.host_transfers)?;
    ir.set_replication_factor(cfg.replicas)?;
    if let Some(t) = &cfg.transport {
        ir.set_instances(t.rank(), t.size())?;
    }
    let main = ir.main_graph();
    let _g = main.enter();
    let _s = popxl::in_sequence(true);

    let per_replica = cfg.batch / cfg.replicas;
    let images = popxl::h2d_stream([per_replica, 28, 28], popxl::float32, "images")?;
    let labels = popxl::h2d_stream([per_replica], popxl::int32, "labels")?;
    let loss = popxl::d2h_stream([], popxl::float32, "loss")?;
    let variables: Vec<Tensor> = params
        .iter()
        .map(|(name, data)| {
            if sharded(cfg, name) {
                let one = popxl::RetrievalMode::OnePerGroup;
                Ok(popxl::replica_sharded_variable(data.clone(), name, None, None, one)?.1)
            } else {
                popxl::variable(data.clone(), name)
            }
        })
        .collect::<popxl::Result<_>>()?;
    let streams = Streams { images: &images, labels: &labels, loss: &loss };
    if cfg.host_transfers == 1 {
        train_step(cfg, &ir, &streams, &variables)?;
    } else {
        let body = ir.create_graph(
            |w0: Tensor, b0: Tensor, w1: Tensor, b1: Tensor| -> popxl::Result<Vec<Tensor>> {
                let _s = popxl::in_sequence(true);
                let ps = [w0, b0, w1, b1];
                train_step(cfg, &ir, &streams, &ps)?;
                Ok(ps.to_vec())
            },
            (&variables[0], &variables[1], &variables[2], &variables[3]),
        )?;
        let refs: Vec<&Tensor> = variables.iter().collect();
        let trained = ops::repeat(&body, cfg.host_transfers, &refs, &[])?;
        for (v, t) in variables.iter().zip(&trained) {
            ops::copy_var_update_(v, t)?;
        }
    }
    Ok(TrainProgram { ir: ir.clone(), images, labels, loss, variables })
}

struct Streams<'a> {
    images: &'a HostToDeviceStream,
    labels: &'a HostToDeviceStream,
    loss: &'a DeviceToHostStream,
}

/// True when parameter `name` is sharded over the replicas (RTS: the weight matrices).
fn sharded(cfg: &Config, name: &str) -> bool {
    cfg.rts && cfg.replicas > 1 && name.starts_with('W')
}

/// The SGD update of parameter `p` (the device variable: a shard with RTS) with
/// the gradient `g` of its full value: averaged over the replicas first.
fn sgd_update(cfg: &Config, p: &Tensor, full: &Tensor, g: &Tensor) -> popxl::Result<()> {
    if cfg.replicas == 1 {
        return ops::scaled_add_(p, g, 1.0f32, -cfg.lr).map(|_| ());
    }
    let g = if p.shape() != full.shape() {
        collectives::replicated_reduce_scatter(g, CollectiveOp::Mean, None, true)?
    } else {
        // In place: the gradient is a fresh activation nobody else reads.
        collectives::replicated_all_reduce_(g, CollectiveOp::Mean, None)?
    };
    ops::scaled_add_(p, &g, 1.0f32, -cfg.lr).map(|_| ())
}

/// The full value of parameter `p`: gathered from the replicas' shards with RTS.
fn full_value(cfg: &Config, p: &Tensor, shape: &[usize]) -> popxl::Result<Tensor> {
    if !(cfg.rts && cfg.replicas > 1) || p.shape() == shape {
        return Ok(p.clone());
    }
    let flat = collectives::replicated_all_gather(p, 0, None, AllGatherShape::Concat)?;
    let n: usize = shape.iter().product();
    let flat = if flat.shape()[0] == n { flat } else { ops::slice(&flat, &[0], &[n as i64], &[1], &[0])? };
    let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    flat.reshape(&shape)
}

/// One SGD step in the current graph, updating `params` (W0, b0, W1, b1) in place.
fn train_step(cfg: &Config, ir: &Ir, streams: &Streams<'_>, params: &[Tensor]) -> popxl::Result<()> {
    let x = ops::host_load(streams.images, "x")?.reshape(&[-1, PIXELS as i64])?;
    let labels = ops::host_load(streams.labels, "label")?;
    let w0 = &full_value(cfg, &params[0], &[PIXELS, cfg.hidden])?;
    let w1 = &full_value(cfg, &params[2], &[cfg.hidden, 10])?;
    let (b0, b1) = (&params[1], &params[3]);

    let mut layer0 = Linear::new(cfg.hidden);
    let graph0 = ir.create_graph(&mut layer0, &x)?;
    let fwd0 = ops::call_with_info(&graph0, &[&x], &layer0.inputs_dict(w0, b0))?;
    let x1 = fwd0.parent_output(0)?;

    let mut layer1 = Linear::new(10);
    let graph1 = ir.create_graph(&mut layer1, &x1)?;
    let fwd1 = ops::call_with_info(&graph1, &[&x1], &layer1.inputs_dict(w1, b1))?;
    let y = fwd1.parent_output(0)?;

    let probs = ops::softmax(&y, -1)?;
    let (loss, dy) = ops::nll_loss_with_softmax_grad(&probs, &labels)?;
    // Stream the loss out as soon as it exists and update each layer right after its
    // gradient graph ran: the same arithmetic as updating at the end, but every
    // gradient dies early, which lowers the planned peak memory.
    ops::host_store(streams.loss, &loss)?;

    let no_infos = HashMap::new();
    let bwd1 = transforms::autodiff(&graph1, None, None, &no_infos, false)?.grad_info;
    let acts1 = bwd1.inputs_dict(&fwd1)?;
    let acts1: Vec<(&Tensor, &Tensor)> = acts1.iter().map(|(k, v)| (k, v)).collect();
    let bwd1_call = ops::call_with_info(&bwd1.graph(), &[&dy], &acts1)?;
    let grads1 = bwd1.fwd_parent_ins_to_grad_parent_outs(&fwd1, &bwd1_call)?;
    for (p, full) in [(&params[2], w1), (&params[3], b1)] {
        sgd_update(cfg, p, full, &grads1[full])?;
    }

    let required = [layer0.w.clone().expect("built"), layer0.b.clone().expect("built")];
    let bwd0 = transforms::autodiff(&graph0, None, Some(&required), &no_infos, false)?.grad_info;
    let acts0 = bwd0.inputs_dict(&fwd0)?;
    let acts0: Vec<(&Tensor, &Tensor)> = acts0.iter().map(|(k, v)| (k, v)).collect();
    let bwd0_call = ops::call_with_info(&bwd0.graph(), &[&grads1[&x1]], &acts0)?;
    let grads0 = bwd0.fwd_parent_ins_to_grad_parent_outs(&fwd0, &bwd0_call)?;

    for (p, full) in [(&params[0], w0), (&params[1], b0)] {
        sgd_update(cfg, p, full, &grads0[full])?;
    }
    Ok(())
}

/// The forward-only test IR with variables of the same names.
pub struct TestProgram {
    /// The IR.
    pub ir: Ir,
    /// Images in.
    pub images: HostToDeviceStream,
    /// Logits out.
    pub logits: DeviceToHostStream,
    /// The variables W0, b0, W1, b1.
    pub variables: Vec<Tensor>,
}

/// Build the test IR: the same two layers, no gradients, logits streamed out.
pub fn build_test(cfg: &Config, params: &Params) -> AppResult<TestProgram> {
    let ir = Ir::new();
    let main = ir.main_graph();
    let _g = main.enter();
    let _s = popxl::in_sequence(true);
    let images = popxl::h2d_stream([cfg.test_batch, 28, 28], popxl::float32, "images")?;
    let x = ops::host_load(&images, "x")?.reshape(&[-1, PIXELS as i64])?;
    let variables: Vec<Tensor> =
        params.iter().map(|(name, data)| popxl::variable(data.clone(), name)).collect::<popxl::Result<_>>()?;
    let mut layer0 = Linear::new(cfg.hidden);
    let graph0 = ir.create_graph(&mut layer0, &x)?;
    let h = ops::call(&graph0, &[&x], &layer0.inputs_dict(&variables[0], &variables[1]))?.remove(0);
    let mut layer1 = Linear::new(10);
    let graph1 = ir.create_graph(&mut layer1, &h)?;
    let y = ops::call(&graph1, &[&h], &layer1.inputs_dict(&variables[2], &variables[3]))?.remove(0);
    let logits = popxl::d2h_stream(y.shape(), y.dtype(), "logits")?;
    ops::host_store(&logits, &y)?;
    Ok(TestProgram { ir: ir.clone(), images, logits, variables })
}

/// What a training run measured.
#[derive(Clone, Debug, Default)]
pub struct TrainReport {
    /// Loss of every step, in order (with `Config::soak`, of the last 100).
    pub losses: Vec<f32>,
    /// Training steps run.
    pub steps: usize,
    /// With `Config::soak`: resident memory (bytes) after the first epoch and at the end.
    pub resident: Option<(u64, u64)>,
    /// Wall time of each `run` after the first (one per `host_transfers` steps).
    pub run_times: Vec<Duration>,
    /// From initialised parameters to the end of the first step: build, autodiff,
    /// session creation (prepare, lowering, kernel compilation) and the first run.
    pub time_to_first_step: Duration,
    /// Wall time of the whole training loop.
    pub train_wall: Duration,
    /// Planned peak of intermediate (non-variable) buffers of the training program.
    pub intermediate_peak_bytes: usize,
    /// Bytes of the buffers host loads land in (the analogue of XLA's argument buffers).
    pub host_load_bytes: usize,
    /// The same without buffer reuse.
    pub intermediate_no_reuse_bytes: usize,
    /// Trained parameters by name.
    pub params: Params,
    /// The training program's other variables by name (none with SGD; any
    /// random seed or optimizer state a variant adds), for `--save`.
    pub state: Params,
    /// Where the training stopped in its schedule, with the settings a
    /// resume must share, as checkpoint counters (see `train_state::Position`).
    pub counters: Vec<(&'static str, u64)>,
    /// Per-kernel time of the training runs after the first (when `Config::profile`).
    pub kernel_profile: Vec<popxl_session::cpu::executor::KernelTime>,
}

/// The process's resident memory (`VmRSS` of `/proc/self/status`), where Linux provides it.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn host_batch(shape: Vec<usize>, data: Vec<f32>) -> HostArray {
    ArrayD::from_shape_vec(IxDyn(&shape), data).expect("batch shape").into()
}

/// Stream array shape: `[host_transfers, replicas, *shape]`, the leading dims
/// dropped when 1 (as PopXL). A global batch split over the replicas is the
/// same data: replica `r` takes samples `r * b / R .. (r + 1) * b / R`.
fn host_shape(n: usize, replicas: usize, shape: &[usize]) -> Vec<usize> {
    let mut s = if n > 1 { vec![n] } else { vec![] };
    if replicas > 1 {
        s.push(replicas);
    }
    s.extend_from_slice(shape);
    s
}

/// Train with the guide's loop: shuffle each epoch, drop the last partial batch.
/// With `Config::resume`, start from a checkpoint's variables and position.
pub fn train(cfg: &Config, train_set: &Split) -> AppResult<TrainReport> {
    let params = init_params(cfg.hidden, cfg.seed);
    // As jax_mnist.py's first_step_s: from the initialised parameters to the end
    // of the first step (build + autodiff + prepare + lower + compile + first run).
    let start = Instant::now();
    let program = build_train(cfg, &params)?;
    let options =
        SessionOptions { patterns: cfg.patterns, transport: cfg.transport.clone(), ..SessionOptions::default() };
    let mut session = Session::with_options(program.ir.clone(), &cfg.device, options)?;
    // Replicas of this process (of every process, each taking its own slice
    // of the batch arrays, which hold every replica's samples).
    let local = session.instance_replication_factor();
    if cfg.dump {
        eprintln!("{}\n{}", program.ir.to_text(), session.executable().dump());
    }
    let memory = session.executable().memory;
    let leader = cfg.transport.as_ref().is_none_or(|t| t.rank() == 0);
    if let (Some(path), true) = (&cfg.memory_plot, leader) {
        let tiles = if cfg.device == "ipu_model" { Some(session.ipu_model_report()?.memory) } else { None };
        std::fs::write(path, session.executable().memory_plot(tiles.as_ref()))
            .map_err(|e| format!("--memory-plot {}: {e}", path.display()))?;
        eprintln!("wrote the memory plot to {}", path.display());
    }
    let intermediate_peak_bytes = memory.arena_bytes - memory.permanent_bytes;
    let intermediate_no_reuse_bytes = memory.no_reuse_bytes - memory.permanent_bytes;

    let per_run = cfg.batch * cfg.host_transfers;
    let mut batches_per_epoch = train_set.len() / cfg.batch;
    if let Some(limit) = cfg.limit_batches {
        batches_per_epoch = batches_per_epoch.min(limit);
    }
    let runs_per_epoch = batches_per_epoch / cfg.host_transfers;
    let total_steps = (runs_per_epoch * cfg.host_transfers * cfg.epochs) as u64;
    let max_steps = cfg.steps.map_or(u64::MAX, |s| s as u64);
    let state_vars = train_state::state_variables(&program.ir, &program.variables)?;
    let mut pos = Position { epoch_rng: Rng::new(cfg.seed.wrapping_add(1)).state(), ..Position::default() };
    if let Some(path) = &cfg.resume {
        let ck = Checkpoint::load(path)?;
        ck.expect_setting("batch", cfg.batch as u64)?;
        ck.expect_setting("batches_per_epoch", batches_per_epoch as u64)?;
        ck.restore(&mut session, &program.variables)?;
        ck.restore(&mut session, &state_vars)?;
        pos = Position::load(&ck)?;
        if !pos.batch.is_multiple_of(cfg.host_transfers as u64) {
            return Err(format!(
                "--resume {}: the checkpoint stopped at batch {} of its epoch, not a multiple of --host-transfers {}",
                path.display(),
                pos.batch,
                cfg.host_transfers
            )
            .into());
        }
    }
    let start_step = pos.step;
    let bar = progress_bar(cfg.progress, total_steps.saturating_sub(start_step));
    let mut rng = Rng::from_state(pos.epoch_rng);
    let (mut img, mut lbl) = (Vec::with_capacity(per_run * PIXELS), Vec::with_capacity(per_run));
    let mut report = TrainReport {
        intermediate_peak_bytes,
        intermediate_no_reuse_bytes,
        host_load_bytes: memory.host_load_bytes,
        ..Default::default()
    };
    let mut inputs = HashMap::new();
    let train_start = Instant::now();
    session.scope(|session| -> AppResult<()> {
        for epoch in pos.epoch as usize..cfg.epochs {
            if epoch == 1 && cfg.soak {
                report.resident = resident_bytes().map(|r| (r, r));
            }
            let epoch_rng = rng.state();
            let order = rng.permutation(train_set.len());
            let first_run = if epoch as u64 == pos.epoch { pos.batch as usize / cfg.host_transfers } else { 0 };
            for r in first_run..runs_per_epoch {
                let step = start_step + report.steps as u64;
                if step >= max_steps {
                    pos = Position { step, epoch: epoch as u64, batch: (r * cfg.host_transfers) as u64, epoch_rng };
                    return Ok(());
                }
                data::gather(train_set, &order[r * per_run..(r + 1) * per_run], &mut img, &mut lbl);
                let pb = cfg.batch / cfg.replicas;
                let ishape = host_shape(cfg.host_transfers, cfg.replicas, &[pb, 28, 28]);
                let lshape = host_shape(cfg.host_transfers, cfg.replicas, &[pb]);
                inputs.insert(program.images.clone(), host_batch(ishape, std::mem::take(&mut img)));
                let labels: HostArray = ArrayD::from_shape_vec(IxDyn(&lshape), std::mem::take(&mut lbl))?.into();
                inputs.insert(program.labels.clone(), labels);
                let first = report.steps == 0;
                let t = Instant::now();
                let out = session.run(&inputs)?;
                if !first && !cfg.soak {
                    report.run_times.push(t.elapsed());
                } else {
                    report.time_to_first_step = start.elapsed();
                    session.set_profiling(cfg.profile);
                    session.set_tracing(cfg.trace.is_some());
                }
                // One loss per step and replica: the step's loss is their mean
                // (the loss of the global batch; of this process's share of it
                // when the replicas span processes).
                let losses = out[&program.loss].as_f32().ok_or("loss is not float32")?;
                let losses: Vec<f32> = losses.iter().copied().collect();
                for step in losses.chunks(local) {
                    if cfg.soak && report.losses.len() == 100 {
                        report.losses.remove(0);
                    }
                    report.losses.push(step.iter().sum::<f32>() / local as f32);
                    report.steps += 1;
                }
                bar.inc(cfg.host_transfers as u64);
                let n = report.losses.len();
                let recent = &report.losses[n.saturating_sub(100)..];
                // A formatted message per step would allocate: refresh it every 100 steps.
                if report.steps % 100 < cfg.host_transfers {
                    bar.set_message(format!("loss {:.4}", recent.iter().sum::<f32>() / recent.len() as f32));
                }
                // Reuse the input buffers next step.
                if let (Some(HostArray::F32(a)), Some(HostArray::I32(b))) =
                    (inputs.remove(&program.images), inputs.remove(&program.labels))
                {
                    img = a.into_raw_vec_and_offset().0;
                    lbl = b.into_raw_vec_and_offset().0;
                }
            }
            pos = Position {
                step: start_step + report.steps as u64,
                epoch: epoch as u64 + 1,
                batch: 0,
                epoch_rng: rng.state(),
            };
        }
        Ok(())
    })?;
    report.train_wall = train_start.elapsed();
    report.counters = pos.counters(cfg.batch, batches_per_epoch);
    if let (Some((_, end)), Some(now)) = (report.resident.as_mut(), resident_bytes()) {
        *end = now;
    }
    report.kernel_profile = session.kernel_profile();
    if let (Some(path), true) = (&cfg.trace, leader) {
        session.write_trace(path)?;
        eprintln!("wrote the kernel timeline to {}", path.display());
    }
    if cfg.profile && local > 1 {
        let last = session.replica_kernel_profile(local - 1);
        let total: f64 = last.iter().map(|k| k.total.as_secs_f64()).sum();
        eprintln!(
            "replica {} kernels: {:.1} us per run",
            local - 1,
            total * 1e6 / report.run_times.len().max(1) as f64
        );
        for k in last.iter().take(6) {
            eprintln!("  {:>8.1} us  {}", k.total.as_secs_f64() * 1e6 / report.run_times.len().max(1) as f64, k.name);
        }
    }
    bar.finish_and_clear();
    let data = session.get_tensors_data(program.variables.iter())?;
    report.params = program.variables.iter().map(|v| v.name().to_string()).zip(data).collect();
    report.state = train_state::read(&mut session, &state_vars)?;
    Ok(report)
}

fn progress_bar(enabled: bool, len: u64) -> indicatif::ProgressBar {
    if !enabled {
        return indicatif::ProgressBar::hidden();
    }
    // Drawn to stderr, and only when stderr is a terminal.
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} batches [{elapsed_precise}] {msg}")
            .expect("valid template"),
    );
    bar
}

/// Accuracy (percent) of `params` on `test_set` with the forward-only test IR,
/// weights copied in by name with `write_variables_data` while detached.
pub fn test(cfg: &Config, params: &Params, test_set: &Split) -> AppResult<f64> {
    let init = init_params(cfg.hidden, cfg.seed);
    let program = build_test(cfg, &init)?;
    let mut session = Session::new(program.ir.clone(), &cfg.device)?;
    let by_name: HashMap<&str, &HostArray> = params.iter().map(|(n, a)| (n.as_str(), a)).collect();
    let writes: Vec<(&Tensor, &HostArray)> = program
        .variables
        .iter()
        .map(|v| by_name.get(v.name()).map(|a| (v, *a)).ok_or_else(|| format!("no trained value for `{}`", v.name())))
        .collect::<Result<_, _>>()?;
    session.write_variables_data(writes)?;
    let batches = test_set.len() / cfg.test_batch;
    let (mut img, mut lbl) = (Vec::new(), Vec::new());
    let mut correct = 0usize;
    session.scope(|session| -> AppResult<()> {
        let mut inputs = HashMap::new();
        for i in 0..batches {
            let idx: Vec<usize> = (i * cfg.test_batch..(i + 1) * cfg.test_batch).collect();
            data::gather(test_set, &idx, &mut img, &mut lbl);
            inputs.insert(program.images.clone(), host_batch(vec![cfg.test_batch, 28, 28], img.clone()));
            let out = session.run(&inputs)?;
            let logits = out[&program.logits].as_f32().ok_or("logits are not float32")?;
            for (row, &label) in logits.outer_iter().zip(&lbl) {
                let argmax = row
                    .iter()
                    .enumerate()
                    .fold((0, f32::NEG_INFINITY), |m, (j, &v)| if v > m.1 { (j, v) } else { m })
                    .0;
                correct += (argmax as i32 == label) as usize;
            }
        }
        Ok(())
    })?;
    Ok(100.0 * correct as f64 / (batches * cfg.test_batch) as f64)
}
