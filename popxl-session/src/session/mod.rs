//! [`Session`]: PopXL's runtime session.
//!
//! - this file: the session, its options and device, construction and properties;
//! - [`attach`]: attaching, session contexts, weight transfers and tensor data;
//! - [`run`]: running the main program with stream data;
//! - [`kernel_library`]: the kernel library the executor is compiled with;
//! - [`ipu_report`]: the `ipu_model` device's memory check and report.

mod attach;
mod ipu_report;
mod kernel_library;
mod replicated;
mod run;
mod trace;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use popart_ir::{DataType, GraphId, HostTensor, StreamDirection, TensorId, TensorKind};
use popart_lower::{Executable, StreamId};
use popxl::{DeviceToHostStream, HostArray, HostToDeviceStream};

use crate::cpu::executor::{CpuExecutor, ExecCounters, KernelFactory};
use crate::cpu::transport::{self, Header, Span, Step};
use crate::SessionError;

pub use attach::SessionContext;
pub use run::{InputView, OutputView};

/// The largest replication factor a session runs (each replica is a thread
/// with its own device memory; the largest IPU-POD has 1,024 IPUs).
pub const MAX_REPLICAS: usize = 1024;

/// Result alias for sessions.
pub type Result<T, E = SessionError> = std::result::Result<T, E>;

/// Stream inputs of [`Session::run`]: one array per host-to-device stream.
pub type Inputs = HashMap<HostToDeviceStream, HostArray>;

/// Stream outputs of [`Session::run`]: one array per device-to-host stream.
pub type Outputs = HashMap<DeviceToHostStream, HostArray>;

/// The kind of device a session runs on.
///
/// ```
/// use popxl_session::DeviceType;
/// assert_eq!("ipu_model".parse::<DeviceType>().unwrap(), DeviceType::IpuModel);
/// assert!("gpu".parse::<DeviceType>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// The host CPU (replicas run concurrently on its cores).
    Cpu,
    /// The IPU model: executes like `cpu`, keeps subgraphs as functions, and
    /// refuses programs that do not fit in the modelled tile memory
    /// ([`SessionOptions::ipu_model`], [`Session::ipu_model_report`]).
    IpuModel,
    /// Real IPU hardware: compiles, but attaching fails (no hardware is available).
    IpuHw,
}

impl DeviceType {
    /// The device string (`cpu`, `ipu_model`, `ipu_hw`).
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::Cpu => "cpu",
            DeviceType::IpuModel => "ipu_model",
            DeviceType::IpuHw => "ipu_hw",
        }
    }
}

impl fmt::Display for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DeviceType {
    type Err = SessionError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(DeviceType::Cpu),
            "ipu_model" => Ok(DeviceType::IpuModel),
            "ipu_hw" => Ok(DeviceType::IpuHw),
            other => Err(SessionError::UnknownDevice(other.to_string())),
        }
    }
}

/// Number of ops in the main graph and the graphs it calls, directly or not
/// (PopXL removes isolated graphs before checking that an IR has ops).
fn reachable_ops(ir: &popart_ir::Ir) -> usize {
    let mut seen = HashSet::from([ir.main_graph_id()]);
    let mut stack = vec![ir.main_graph_id()];
    let mut n = 0;
    while let Some(g) = stack.pop() {
        let Ok(graph) = ir.graph(g) else { continue };
        n += graph.num_ops();
        stack.extend(graph.called_graphs().into_iter().filter(|c| seen.insert(*c)));
    }
    n
}

/// The processes `ir`'s replicas span and the transport to them, or `None`
/// for one process. Errors: no transport, or one that does not match the IR's
/// instances, or a replication factor they do not divide.
fn span_of(ir: &popxl::Ir, options: &SessionOptions) -> Result<Option<Span>> {
    let (inst, rf) = ir.with_ir(|core| (core.instances, core.replication_factor.max(1)));
    if inst.count <= 1 {
        return Ok(None);
    }
    let local = inst.replicas_per_instance(rf).ok_or_else(|| SessionError::Instances {
        reason: format!("{} processes (this one {}) cannot split replication_factor {rf}", inst.count, inst.index),
    })?;
    let transport = match &options.transport {
        Some(t) => t.clone(),
        None => world_transport().ok_or(SessionError::NoTransport { processes: inst.count })?,
    };
    if (transport.rank(), transport.size()) != (inst.index, inst.count) {
        return Err(SessionError::Instances {
            reason: format!(
                "the IR is process {} of {}, the transport rank {} of {}",
                inst.index,
                inst.count,
                transport.rank(),
                transport.size()
            ),
        });
    }
    Ok(Some(Span { transport, local }))
}

/// MPI's world, when built with the `mpi` feature and MPI is initialized.
#[cfg(feature = "mpi")]
fn world_transport() -> Option<std::sync::Arc<dyn transport::Transport>> {
    crate::cpu::mpi::world().map(|t| std::sync::Arc::new(t) as std::sync::Arc<dyn transport::Transport>)
}

/// No transport without the `mpi` feature.
#[cfg(not(feature = "mpi"))]
fn world_transport() -> Option<std::sync::Arc<dyn transport::Transport>> {
    None
}

/// A copy of host data, or [`SessionError::OutOfMemory`] naming `tensor`.
fn try_clone_host(data: &HostTensor, tensor: &str) -> Result<HostTensor> {
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(data.bytes.len()).map_err(|_| SessionError::OutOfMemory {
        requested: data.bytes.len(),
        what: format!("the host copy of variable `{tensor}`"),
    })?;
    bytes.extend_from_slice(&data.bytes);
    Ok(HostTensor { info: data.info.clone(), bytes })
}

/// Options of a [`Session`].
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Leaving a context that attached does `weights_to_host` first (default true).
    pub weights_to_host_on_exit: bool,
    /// `run` converts 64-bit float/int input arrays to the 32-bit type of their
    /// stream (PopXL's `downcast_inputs`, default true).
    pub downcast_inputs: bool,
    /// Apply the optimisation patterns of `popart_transforms::patterns` while
    /// preparing the IR (default true; the results are the same up to rounding).
    pub patterns: bool,
    /// The preparation pipeline to run instead of the default one
    /// (`Pipeline::default_for` the `patterns` option): how a user adds a pattern
    /// of their own (`Pipeline::default().with_pattern(p)`). Its passes and their
    /// times are logged with `tracing` at debug level.
    pub pipeline: Option<popart_transforms::Pipeline>,
    /// Check indices at run time (default false). Off, an out-of-range index has
    /// the op's defined result: a `Gather` row of zeros (its gradient drops it),
    /// a loss label treated like `ignore_index` (zero loss and gradient, not
    /// counted in the mean). On, it makes [`Session::run`] fail with
    /// [`SessionError::IndexOutOfRange`] naming the op, except for gathers built
    /// with `zero_OOR` (zeros are what they ask for; `RoiAlign`'s batch index is
    /// checked too). On, every run also copies the device state first (variables,
    /// remote buffers: see [`Session::run_with_outputs`]) and restores it when
    /// the run fails, so a failed run changes nothing.
    pub check_indices: bool,
    /// Reject in-place writes whose effect depends on the schedule (PopXL's
    /// in-place ambiguity check; default true): `Session::new` fails with
    /// `IrError::InplaceAmbiguity` naming the in-place op and the unordered op.
    pub check_inplace_ambiguity: bool,
    /// Inline subgraph calls into their callers before lowering (the
    /// `inline-calls` pass of `popart_transforms::inline`). A call lowered as a
    /// function copies its inputs in and its outputs out at every call site;
    /// inlined, the callee's ops read and write the caller's tensors and the
    /// memory plan reuses buffers across call sites (a model whose layer is one
    /// graph called per layer moves no activation). Calls that modify their
    /// inputs stay functions. `None` (the default) lets the device choose: `cpu`
    /// inlines, `ipu_model` keeps PopART's one function per subgraph (an IPU's
    /// code is shared by its call sites). Also applied to a custom `pipeline`
    /// that has no `inline-calls` pass (inserted before its final verification).
    pub inline_calls: Option<bool>,
    /// The IPU the `ipu_model` device models (default: Mk2 GC200,
    /// [`popart_lower::IpuModelConfig::mk2`]): `Session::new` on `ipu_model`
    /// fails with [`SessionError::TileMemoryExceeded`] when the program does not
    /// fit in its tile memory, and [`Session::ipu_model_report`] uses it.
    pub ipu_model: popart_lower::IpuModelConfig,
    /// How a session whose replicas span processes ([`popxl::Ir::set_instances`])
    /// reaches the others' replicas. `None` (the default): MPI's world
    /// (`cpu::mpi::world()`, with the `mpi` feature, after `cpu::mpi::init()`).
    /// [`crate::cpu::transport::ThreadTransport`] runs "processes" as threads of
    /// one process (tests). Unused by a session of one process.
    pub transport: Option<std::sync::Arc<dyn crate::cpu::transport::Transport>>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            weights_to_host_on_exit: true,
            downcast_inputs: true,
            patterns: true,
            pipeline: None,
            check_indices: false,
            check_inplace_ambiguity: true,
            inline_calls: None,
            ipu_model: popart_lower::IpuModelConfig::default(),
            transport: None,
        }
    }
}

/// Host <-> device transfer counts of a session (to observe the host-cache rules).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferCounts {
    /// `weights_from_host` transfers (including the partial ones of `write_variable_data`).
    pub weights_from_host: u64,
    /// `weights_to_host` transfers.
    pub weights_to_host: u64,
    /// Completed `run`s.
    pub runs: u64,
}

struct DataStream {
    id: StreamId,
    name: String,
    tensor: TensorId,
    shape: Vec<usize>,
    dtype: DataType,
}

/// Where the device copy of a variable lives.
#[derive(Clone, Copy, Debug)]
enum WeightSlot {
    /// Index into `Executable::weights` (tile memory).
    Device(usize),
    /// Index into `Executable::remote_weights` (streaming memory).
    Remote(usize),
}

/// Host copy of a variable.
struct HostVariable {
    /// The host value (`shape_on_host`: with a group dim for grouped variables,
    /// the full value for sharded ones).
    data: HostTensor,
    /// Its device copy (variables of unreachable graphs have none).
    weight: Option<WeightSlot>,
    /// How replicas hold it (`None`: the same value on every replica).
    settings: Option<popart_ir::VariableSettings>,
    /// Every replica's value (`retrieval_mode` all_replicas), as of the last
    /// `weights_to_host`; empty until then.
    replica_values: Vec<u8>,
}

/// A runtime session: prepares, lowers and compiles an IR once, then attaches to
/// its device, moves weights and runs the main program (PopXL's `popxl.Session`).
///
/// The session freezes the IR it is given: the IR cannot change afterwards
/// (building on it through any remaining `popxl` handle is a
/// [`popxl::PopXlError::IrFrozen`] error). The session keeps its own copy of the
/// IR core, not the [`popxl::Ir`] handle, so it is `Send`: build the IR and
/// create the session on one thread, then move the session to another thread
/// and attach and run it there. Methods that take `popxl` handles accept those
/// of the session's IR (compared by IR id, graph id and tensor id; handles of
/// another IR are a [`SessionError::ForeignTensor`] error); the stream handles a
/// session returns ([`Session::expected_inputs`], the keys of [`Outputs`]) are
/// unbound ([`popxl::Tensor::unbound`]): they compare equal to the IR's own
/// handles and know their name, shape and type. [`Session::get_tensor`] finds a
/// variable or constant by name. Sessions on several threads run concurrently;
/// they share the `cpu` device's worker team ([`crate::cpu::team`]).
///
/// Once the caller drops its last [`popxl::Ir`] handle, the `popxl` IR is gone
/// (its handles then report [`popxl::PopXlError::IrDropped`] for what needs the
/// IR), but the session and every handle of the IR keep working together.
///
/// Attachment follows PopXL's context manager: [`Session::enter`] returns a guard
/// (the `with session:` block). Entering attaches and runs `weights_from_host`
/// only if the session was detached; dropping the guard runs `weights_to_host`
/// (when [`SessionOptions::weights_to_host_on_exit`], and not while panicking)
/// and detaches only if that enter attached. Contexts nest.
/// [`Session::scope`] is the closure form (an `Err` skips `weights_to_host`, as an
/// exception does in PopXL).
///
/// Device memory does not survive a detach: after each attach, constants are
/// rewritten and variables hold zeros until the next `weights_from_host`.
///
/// ```
/// use popxl::{ops, Ir};
/// use popxl_session::Session;
/// let ir = Ir::new();
/// let (x, out) = {
///     let _g = ir.main_graph().enter();
///     let input = popxl::h2d_stream([2], popxl::float32, "x").unwrap();
///     let w = popxl::variable(vec![1.0f32, 2.0], "w").unwrap();
///     let y = &ops::host_load(&input, "x").unwrap() + &w;
///     let out = popxl::d2h_stream([2], popxl::float32, "y").unwrap();
///     ops::host_store(&out, &y).unwrap();
///     (input, out)
/// };
/// let mut session = Session::new(ir, "cpu").unwrap();
/// let outputs = session
///     .scope(|s| s.run(&[(x, popxl::HostArray::from(vec![10.0f32, 20.0]))].into()))
///     .unwrap();
/// assert_eq!(outputs[&out], popxl::HostArray::from(vec![11.0f32, 22.0]));
/// assert!(!session.is_attached());
/// ```
pub struct Session {
    /// Id of the `popxl` IR the session was made from (that of its handles).
    ir_id: u64,
    /// The frozen IR core after preparation: what the executable was lowered from.
    prepared: popart_ir::Ir,
    exe: Executable,
    /// One executor per replica of this process (its first replica first).
    executors: Vec<CpuExecutor>,
    /// The replicas' communicator (collectives).
    comm: crate::cpu::replicas::Comm,
    /// The threads replicas 1.. run on (`None` without replication).
    gang: Option<crate::cpu::gang::Gang>,
    /// Each replica's result of the last run (reused).
    replica_results: Vec<std::result::Result<(), crate::cpu::executor::ExecError>>,
    device: DeviceType,
    options: SessionOptions,
    attached: bool,
    was_attached: Vec<bool>,
    host_weights_in_sync: bool,
    variables: HashMap<(GraphId, TensorId), HostVariable>,
    h2d: Vec<DataStream>,
    d2h: Vec<DataStream>,
    stream_position: HashMap<TensorId, usize>,
    counts: TransferCounts,
    /// The current step already ended on every process (a run spanning
    /// processes told the others its outcome).
    step_told: bool,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("ir", &self.ir_id)
            .field("device", &self.device)
            .field("attached", &self.attached)
            .field("executors", &self.executors)
            .finish()
    }
}

// Sessions move between threads: keep `Session` `Send`.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Session>();
};

impl Session {
    /// Prepare, lower and compile `ir` for `device` (`"cpu"`, `"ipu_model"` or
    /// `"ipu_hw"`); the IR is frozen. The session starts detached.
    ///
    /// With `replication_factor` r > 1 the session compiles the program once
    /// per replica: each replica has its own device memory (variables, remote
    /// buffers) and runs on its own thread; see [`Session::run_with_outputs`]
    /// for the host arrays and `popxl::ops::collectives` for how replicas meet.
    ///
    /// Errors: an unknown device, an invalid
    /// IR (e.g. a topological-constraint cycle), an IR with no ops after pruning,
    /// ops the device cannot execute, and on `ipu_model` a program that does not
    /// fit in the modelled tile memory ([`SessionError::TileMemoryExceeded`]; see
    /// [`Session::ipu_model_report`]).
    ///
    /// ```
    /// use popxl_session::{Session, SessionError};
    /// let err = Session::new(popxl::Ir::new(), "tpu").unwrap_err();
    /// assert_eq!(err, SessionError::UnknownDevice("tpu".into()));
    /// ```
    pub fn new(ir: popxl::Ir, device: &str) -> Result<Session> {
        Self::with_options(ir, device, SessionOptions::default())
    }

    /// [`Session::new`] with options.
    pub fn with_options(ir: popxl::Ir, device: &str, options: SessionOptions) -> Result<Session> {
        Self::build(ir, device, options, &kernel_library::default_kernels, &kernel_library::default_may_fail)
    }

    /// [`Session::with_options`] with another kernel library (for devices under
    /// test or custom kernels). `kernels` is called once per kernel execution of
    /// the lowered programs. Any of its kernels may fail, as far as the session
    /// knows: every run saves the state a failed run restores.
    pub fn with_kernels(
        ir: popxl::Ir,
        device: &str,
        options: SessionOptions,
        kernels: KernelFactory<'_>,
    ) -> Result<Session> {
        Self::build(ir, device, options, kernels, &|_| true)
    }

    fn build(
        ir: popxl::Ir,
        device: &str,
        options: SessionOptions,
        kernels: KernelFactory<'_>,
        may_fail: crate::cpu::executor::MayFail<'_>,
    ) -> Result<Session> {
        let span = span_of(&ir, &options)?;
        let Some(span) = span else { return Self::build_local(ir, device, options, kernels, may_fail, None) };
        // Every process builds, then all learn whether every one succeeded and
        // agree on whether their programs may fail while running (then every
        // collective and the end of every run is agreed on too).
        let mut built = Self::build_local(ir, device, options, kernels, may_fail, Some(span.clone()));
        let checked = built.as_ref().is_ok_and(|s| s.executors.iter().any(CpuExecutor::may_fail));
        let told = transport::agree(&*span.transport, Header { step: Step::Ready(checked), failed: built.is_err() });
        if let Ok(s) = &mut built {
            s.comm.set_checked(checked);
        }
        match (built, told) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(e.into()),
            (Ok(s), Ok(())) => Ok(s),
        }
    }

    fn build_local(
        ir: popxl::Ir,
        device: &str,
        options: SessionOptions,
        kernels: KernelFactory<'_>,
        may_fail: crate::cpu::executor::MayFail<'_>,
        span: Option<Span>,
    ) -> Result<Session> {
        let device: DeviceType = device.parse()?;
        ir.freeze();
        let mut prepared = ir.with_ir(|core| core.clone());
        let rf = prepared.replication_factor.max(1);
        // This process's replicas.
        let local = span.as_ref().map_or(rf, |s| s.local);
        // The device size PopXL would ask for: (max IPU + 1) x replicas,
        // rounded up to a power of two; every device runs any number of IPUs.
        prepared.num_ipus().map_err(|e| SessionError::SizeOverflow { what: format!("the number of IPUs: {e}") })?;
        if rf > MAX_REPLICAS {
            return Err(SessionError::TooManyReplicas { replication_factor: rf, max: MAX_REPLICAS });
        }
        let pipeline = popart_transforms::prepare::PrepareOptions {
            patterns: options.patterns,
            check_inplace_ambiguity: options.check_inplace_ambiguity,
            inline_calls: options.inline_calls.unwrap_or(device == DeviceType::Cpu),
        }
        .pipeline(options.pipeline.as_ref());
        let ir_id = ir.id();
        // An IR built without ops is a mistake; one whose ops were all pruned
        // is a valid (if idle) program, as in PopXL: running it does nothing.
        if reachable_ops(&prepared) == 0 {
            return Err(SessionError::NoOps { ir_id });
        }
        pipeline.run(&mut prepared)?;
        // Only the frozen flag of the `popxl` IR outlives this call (in the handles
        // the caller keeps); the session works on its own copy of the core.
        drop(ir);
        let exe = popart_lower::lower(&prepared).map_err(|e| match e {
            popart_lower::LowerError::Size(e) => SessionError::from(e),
            e => SessionError::Lower(e),
        })?;
        if device == DeviceType::IpuModel {
            ipu_report::check_fits(&exe, &options.ipu_model)?;
        }
        let mut executors = Vec::with_capacity(local);
        for _ in 0..local {
            executors.push(kernel_library::compile(&exe, kernels, may_fail, options.check_indices)?);
        }

        let mut variables = HashMap::new();
        for g in prepared.graphs() {
            for t in g.variables() {
                if let TensorKind::Variable(data) = &t.kind {
                    let settings = if g.id() == prepared.main_graph_id() {
                        prepared.variable_settings(t.id).cloned()
                    } else {
                        None
                    };
                    let host = settings.as_ref().map_or(data, |s| &s.host);
                    let data = try_clone_host(host, &t.name)?;
                    let v = HostVariable { data, weight: None, settings, replica_values: Vec::new() };
                    variables.insert((g.id(), t.id), v);
                }
            }
        }
        for (i, w) in exe.weights.iter().enumerate() {
            if let Some(v) = variables.get_mut(&(w.tensor.graph, w.tensor.tensor)) {
                v.weight = Some(WeightSlot::Device(i));
            }
        }
        for (i, w) in exe.remote_weights.iter().enumerate() {
            if let Some(v) = variables.get_mut(&(w.tensor.graph, w.tensor.tensor)) {
                v.weight = Some(WeightSlot::Remote(i));
            }
        }
        let mut h2d = Vec::new();
        let mut d2h = Vec::new();
        let mut stream_position = HashMap::new();
        for dir in [StreamDirection::HostToDevice, StreamDirection::DeviceToHost] {
            for s in exe.data_streams(dir) {
                let list = if dir == StreamDirection::HostToDevice { &mut h2d } else { &mut d2h };
                stream_position.insert(s.tensor, list.len());
                list.push(DataStream {
                    id: s.id,
                    name: s.name.clone(),
                    tensor: s.tensor,
                    shape: s.info.shape.clone(),
                    dtype: s.info.dtype,
                });
            }
        }
        Ok(Session {
            ir_id,
            prepared,
            exe,
            executors,
            comm: match span {
                Some(span) => crate::cpu::replicas::Comm::spanning(span),
                None => crate::cpu::replicas::Comm::new(rf),
            },
            gang: if local > 1 {
                Some(crate::cpu::gang::Gang::new(local).map_err(|e| {
                    SessionError::Device(crate::cpu::CpuError::Threads { replicas: local, reason: e.to_string() })
                })?)
            } else {
                None
            },
            replica_results: Vec::with_capacity(local),
            device,
            options,
            attached: false,
            was_attached: Vec::new(),
            host_weights_in_sync: true,
            variables,
            h2d,
            d2h,
            stream_position,
            counts: TransferCounts::default(),
            step_told: false,
        })
    }

    // ----- properties -----

    /// Id of the IR the session was made from ([`popxl::Ir::id`]; its handles
    /// report it as [`popxl::Tensor::ir_id`]).
    ///
    /// ```
    /// let ir = popxl::Ir::new();
    /// ir.main_graph()
    ///     .with(|| {
    ///         let w = popxl::variable(1.0f32, "w")?;
    ///         popxl::ops::scaled_add_(&w, &w, 1.0, 1.0)
    ///     })
    ///     .unwrap();
    /// let id = ir.id();
    /// let session = popxl_session::Session::new(ir, "cpu").unwrap();
    /// assert_eq!(session.ir_id(), id);
    /// ```
    pub fn ir_id(&self) -> u64 {
        self.ir_id
    }

    /// The frozen IR core after preparation (patterns, pruning): what
    /// [`Session::executable`] was lowered from. Tensor and graph ids are those
    /// of the session's IR.
    pub fn prepared_ir(&self) -> &popart_ir::Ir {
        &self.prepared
    }

    /// The lowered executable (programs, functions, memory plan).
    pub fn executable(&self) -> &Executable {
        &self.exe
    }

    /// The device type.
    pub fn device(&self) -> DeviceType {
        self.device
    }

    /// True while attached to the device.
    pub fn is_attached(&self) -> bool {
        self.attached
    }

    /// Host <-> device transfer counts since creation.
    pub fn transfer_counts(&self) -> TransferCounts {
        self.counts
    }

    /// Executor work counters since creation (kernels, copies, stream
    /// transfers), summed over the replicas.
    pub fn exec_counters(&self) -> ExecCounters {
        self.executors.iter().map(CpuExecutor::counters).fold(ExecCounters::default(), |a, c| ExecCounters {
            kernels: a.kernels + c.kernels,
            copies: a.copies + c.copies,
            host_to_device: a.host_to_device + c.host_to_device,
            device_to_host: a.device_to_host + c.device_to_host,
            remote_transfers: a.remote_transfers + c.remote_transfers,
            code_loads: a.code_loads + c.code_loads,
        })
    }

    /// Number of replicas the session's program has (the IR's
    /// `replication_factor`), of every process.
    pub fn replication_factor(&self) -> usize {
        self.comm.num_replicas()
    }

    /// Number of replicas this process runs (the IR's
    /// `instance_replication_factor`; the replication factor in a session of
    /// one process).
    pub fn instance_replication_factor(&self) -> usize {
        self.executors.len()
    }

    /// The global indices of this process's replicas.
    pub fn local_replicas(&self) -> std::ops::Range<usize> {
        self.comm.local_replicas()
    }

    /// Turn per-kernel timing of the compiled programs on (clearing earlier
    /// timings) or off; see [`Session::kernel_profile`].
    pub fn set_profiling(&mut self, on: bool) {
        self.executors.iter_mut().for_each(|e| e.set_profiling(on));
    }

    /// Wall-clock time per kernel since [`Session::set_profiling`]`(true)`,
    /// slowest first (empty when profiling is off); replica 0's when replicated.
    ///
    /// ```
    /// use popxl::ops;
    /// use popxl_session::Session;
    /// let ir = popxl::Ir::new();
    /// let x = {
    ///     let _g = ir.main_graph().enter();
    ///     let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    ///     ops::scaled_add_(&x, &x, 1.0, 2.0).unwrap();
    ///     x
    /// };
    /// let mut session = Session::new(ir, "cpu").unwrap();
    /// session.set_profiling(true);
    /// session.scope(|s| s.run(&Default::default())).unwrap();
    /// let profile = session.kernel_profile();
    /// assert_eq!(profile.len(), 1);
    /// assert_eq!((profile[0].op_type.as_str(), profile[0].calls), ("ScaledAddInplace", 1));
    /// # let _ = x;
    /// ```
    pub fn kernel_profile(&self) -> Vec<crate::cpu::executor::KernelTime> {
        self.executors[0].kernel_profile()
    }

    /// [`Session::kernel_profile`] of replica `replica` (empty when out of range).
    pub fn replica_kernel_profile(&self, replica: usize) -> Vec<crate::cpu::executor::KernelTime> {
        self.executors.get(replica).map(CpuExecutor::kernel_profile).unwrap_or_default()
    }

    /// True when the host copies of the variables are known to match the device.
    pub fn host_weights_in_sync(&self) -> bool {
        self.host_weights_in_sync
    }
}
