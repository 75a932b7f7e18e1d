//! [`Session`]: PopXL's runtime session.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use popart_ir::{DataType, GraphId, HostTensor, StreamDirection, TensorId, TensorKind};
use popart_lower::{Executable, StreamId};
use popxl::{DeviceToHostStream, HostArray, HostToDeviceStream, Tensor};

use crate::cpu::executor::{CpuExecutor, EngineProgram, ExecCounters, KernelFactory};
use crate::cpu::kernel::{Kernel, KernelError, KernelSpec};
use crate::host::{assign_bytes, bytes_of, mut_ptr_of};
use crate::SessionError;

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
    /// The host CPU (no replication).
    Cpu,
    /// The IPU model: executes like `cpu` here.
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

/// The 32-bit type a 64-bit array is downcast to (PopXL's `downcast_inputs`).
fn downcast_target(dtype: DataType) -> Option<DataType> {
    match dtype {
        DataType::Int64 => Some(DataType::Int32),
        DataType::Uint64 => Some(DataType::Uint32),
        DataType::Float64 => Some(DataType::Float32),
        _ => None,
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

/// Options of a [`Session`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionOptions {
    /// Leaving a context that attached does `weights_to_host` first (default true).
    pub weights_to_host_on_exit: bool,
    /// `run` converts 64-bit float/int input arrays to the 32-bit type of their
    /// stream (PopXL's `downcast_inputs`, default true).
    pub downcast_inputs: bool,
    /// Apply the optimisation patterns of `popart_transforms::patterns` while
    /// preparing the IR (default true; the results are the same up to rounding).
    pub patterns: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions { weights_to_host_on_exit: true, downcast_inputs: true, patterns: true }
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

/// Host copy of a variable.
struct HostVariable {
    data: HostTensor,
    /// Index into `Executable::weights` (variables of unreachable graphs have none).
    weight: Option<usize>,
}

/// A runtime session: prepares, lowers and compiles an IR once, then attaches to
/// its device, moves weights and runs the main program (PopXL's `popxl.Session`).
///
/// The session freezes the IR it is given: the IR cannot change afterwards.
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
    ir: popxl::Ir,
    prepared: popart_ir::Ir,
    exe: Executable,
    executor: CpuExecutor,
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
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("ir", &self.ir.id())
            .field("device", &self.device)
            .field("attached", &self.attached)
            .field("executor", &self.executor)
            .finish()
    }
}

fn default_kernels(spec: &KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError> {
    crate::cpu::kernels::build_kernel(spec)
}

impl Session {
    /// Prepare, lower and compile `ir` for `device` (`"cpu"`, `"ipu_model"` or
    /// `"ipu_hw"`); the IR is frozen. The session starts detached.
    ///
    /// Errors: an unknown device, replication on `cpu`/`ipu_model`, an invalid
    /// IR (e.g. a topological-constraint cycle), an IR with no ops after pruning,
    /// and ops the device cannot execute.
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
        Self::with_kernels(ir, device, options, &default_kernels)
    }

    /// [`Session::with_options`] with another kernel library (for devices under
    /// test or custom kernels). `kernels` is called once per kernel execution of
    /// the lowered programs.
    pub fn with_kernels(
        ir: popxl::Ir,
        device: &str,
        options: SessionOptions,
        kernels: KernelFactory<'_>,
    ) -> Result<Session> {
        let device: DeviceType = device.parse()?;
        ir.freeze();
        let mut prepared = ir.with_ir(|core| core.clone());
        let rf = prepared.replication_factor.max(1);
        let num_ipus = rf.next_power_of_two();
        match device {
            DeviceType::Cpu if num_ipus > 1 => {
                return Err(SessionError::CpuMultipleDevices { num_ipus, replication_factor: rf })
            }
            DeviceType::IpuModel if rf > 1 => {
                return Err(SessionError::ReplicationUnsupported { device: device.name(), replication_factor: rf })
            }
            _ => {}
        }
        let prepare_options = popart_transforms::prepare::PrepareOptions { patterns: options.patterns };
        popart_transforms::prepare::prepare_with(&mut prepared, prepare_options)?;
        if reachable_ops(&prepared) == 0 {
            return Err(SessionError::NoOps { ir_id: ir.id() });
        }
        let exe = popart_lower::lower(&prepared)?;
        let executor = CpuExecutor::new(&exe, kernels)?;

        let mut variables = HashMap::new();
        for g in prepared.graphs() {
            for t in g.variables() {
                if let TensorKind::Variable(data) = &t.kind {
                    variables.insert((g.id(), t.id), HostVariable { data: data.clone(), weight: None });
                }
            }
        }
        for (i, w) in exe.weights.iter().enumerate() {
            if let Some(v) = variables.get_mut(&(w.tensor.graph, w.tensor.tensor)) {
                v.weight = Some(i);
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
            ir,
            prepared,
            exe,
            executor,
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
        })
    }

    // ----- properties -----

    /// The IR (frozen).
    pub fn ir(&self) -> &popxl::Ir {
        &self.ir
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

    /// Executor work counters since creation (kernels, copies, stream transfers).
    pub fn exec_counters(&self) -> ExecCounters {
        self.executor.counters()
    }

    /// Turn per-kernel timing of the compiled programs on (clearing earlier
    /// timings) or off; see [`Session::kernel_profile`].
    pub fn set_profiling(&mut self, on: bool) {
        self.executor.set_profiling(on);
    }

    /// Wall-clock time per kernel since [`Session::set_profiling`]`(true)`,
    /// slowest first (empty when profiling is off).
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
        self.executor.kernel_profile()
    }

    /// True when the host copies of the variables are known to match the device.
    pub fn host_weights_in_sync(&self) -> bool {
        self.host_weights_in_sync
    }

    // ----- attach / detach -----

    /// Try to attach: true on success. `cpu` and `ipu_model` always attach;
    /// `ipu_hw` never does (no IPU hardware is available). Attaching loads the
    /// executable: device memory is cleared and constants are written; variables
    /// are not transferred (see [`Session::weights_from_host`]).
    pub fn attach(&mut self) -> bool {
        if self.attached {
            return true;
        }
        if self.device == DeviceType::IpuHw {
            return false;
        }
        self.attached = true;
        self.executor.clear_memory();
        self.executor.run(EngineProgram::Init);
        true
    }

    /// Attach, or fail with [`SessionError::AttachFailed`]. With no IPU hardware
    /// there is nothing to wait for, so `ipu_hw` fails at once.
    pub fn try_attach_until_timeout(&mut self) -> Result<()> {
        if self.attach() {
            Ok(())
        } else {
            Err(SessionError::AttachFailed {
                device: self.device.name(),
                reason: "no IPU hardware is available".into(),
            })
        }
    }

    /// Detach (device memory is lost). Nothing happens if already detached.
    pub fn detach(&mut self) {
        self.attached = false;
    }

    /// Enter a session context (PopXL's `with session:`): attach and run
    /// `weights_from_host` if detached. The returned guard dereferences to the
    /// session; dropping it (or [`SessionContext::exit`]) leaves the context.
    ///
    /// ```
    /// # use popxl::{ops, Ir};
    /// # let ir = Ir::new();
    /// # { let _g = ir.main_graph().enter();
    /// #   let w = popxl::variable(1i32, "w").unwrap();
    /// #   let out = popxl::d2h_stream([], popxl::int32, "o").unwrap();
    /// #   ops::host_store(&out, &w).unwrap(); }
    /// let mut session = popxl_session::Session::new(ir, "ipu_model").unwrap();
    /// {
    ///     let mut outer = session.enter().unwrap(); // attach + weights_from_host
    ///     assert!(outer.is_attached());
    ///     {
    ///         let inner = outer.enter().unwrap(); // already attached: nothing happens
    ///         assert!(inner.is_attached());
    ///     } // attached on enter: no weights_to_host, no detach
    ///     assert!(outer.is_attached());
    /// } // weights_to_host + detach
    /// assert!(!session.is_attached());
    /// assert_eq!(session.transfer_counts().weights_from_host, 1);
    /// assert_eq!(session.transfer_counts().weights_to_host, 1);
    /// ```
    pub fn enter(&mut self) -> Result<SessionContext<'_>> {
        self.enter_context()?;
        Ok(SessionContext { session: self, open: true })
    }

    /// Run `f` inside a session context (see [`Session::enter`]). When `f`
    /// returns an error, leaving the context skips `weights_to_host` (but still
    /// detaches if the context attached).
    pub fn scope<T, E: From<SessionError>>(&mut self, f: impl FnOnce(&mut Session) -> Result<T, E>) -> Result<T, E> {
        self.enter_context()?;
        let r = f(self);
        let exit = self.exit_context(r.is_ok());
        let v = r?;
        exit?;
        Ok(v)
    }

    fn enter_context(&mut self) -> Result<()> {
        let should_setup = !self.attached;
        self.was_attached.push(self.attached);
        if !self.attached {
            if let Err(e) = self.try_attach_until_timeout() {
                self.was_attached.pop();
                return Err(e);
            }
        }
        if should_setup {
            if let Err(e) = self.weights_from_host() {
                let _ = self.exit_context(false);
                return Err(e);
            }
        }
        Ok(())
    }

    fn exit_context(&mut self, success: bool) -> Result<()> {
        let was_attached = self.was_attached.pop().ok_or(SessionError::NoOpenContext)?;
        let mut r = Ok(());
        if !was_attached {
            if success && self.options.weights_to_host_on_exit {
                r = self.weights_to_host();
            }
            self.detach();
        }
        r
    }

    fn require_attached(&self, function: &'static str) -> Result<()> {
        if self.attached {
            Ok(())
        } else {
            Err(SessionError::NotAttached { function })
        }
    }

    // ----- weights -----

    /// Copy every variable from the host copies to the device.
    pub fn weights_from_host(&mut self) -> Result<()> {
        self.require_attached("weights_from_host")?;
        for (k, v) in self.variables.iter_mut() {
            let Some(w) = v.weight else { continue };
            let stream = self.exe.weights[w].from_host;
            let bytes = v.data.bytes.len();
            // SAFETY: the host copy outlives this call and is not touched while
            // the program runs; the stream is unbound right after.
            unsafe { self.executor.bind_stream(stream, v.data.bytes.as_mut_ptr(), bytes, 1) }
                .unwrap_or_else(|e| unreachable!("weight stream of {k:?} sized from its variable: {e}"));
        }
        self.executor.run(EngineProgram::WeightsFromHost);
        self.executor.unbind_streams();
        self.counts.weights_from_host += 1;
        Ok(())
    }

    /// Copy every variable from the device to the host copies, which are then in sync.
    pub fn weights_to_host(&mut self) -> Result<()> {
        self.require_attached("weights_to_host")?;
        for (k, v) in self.variables.iter_mut() {
            let Some(w) = v.weight else { continue };
            let stream = self.exe.weights[w].to_host;
            let bytes = v.data.bytes.len();
            // SAFETY: as in weights_from_host, for writes.
            unsafe { self.executor.bind_stream(stream, v.data.bytes.as_mut_ptr(), bytes, 1) }
                .unwrap_or_else(|e| unreachable!("weight stream of {k:?} sized from its variable: {e}"));
        }
        self.executor.run(EngineProgram::WeightsToHost);
        self.executor.unbind_streams();
        self.host_weights_in_sync = true;
        self.counts.weights_to_host += 1;
        Ok(())
    }

    fn resolve(&self, t: &Tensor) -> Result<(GraphId, TensorId, &popart_ir::Tensor)> {
        if t.ir_id() != self.ir.id() {
            return Err(SessionError::ForeignTensor {
                name: t.id().to_string(),
                ir_id: t.ir_id(),
                session_ir_id: self.ir.id(),
            });
        }
        let core = self
            .prepared
            .graph(t.graph_id())
            .and_then(|g| g.tensor(t.tensor_id()))
            .map_err(|_| SessionError::NotVariableOrConstant { tensor: t.id().to_string() })?;
        Ok((t.graph_id(), t.tensor_id(), core))
    }

    /// The data of a variable or constant (see [`Session::get_tensors_data`]).
    pub fn get_tensor_data(&mut self, tensor: &Tensor) -> Result<HostArray> {
        Ok(self.get_tensors_data([tensor])?.remove(0))
    }

    /// The data of variables and constants, in the order given.
    ///
    /// The host copies of the variables are a cache of the device: when attached
    /// and a runtime function may have changed the device variables since the
    /// last `weights_to_host`, one `weights_to_host` runs first. Detached, the
    /// host copies are returned as they are. Constants never need a transfer.
    pub fn get_tensors_data<'t>(&mut self, tensors: impl IntoIterator<Item = &'t Tensor>) -> Result<Vec<HostArray>> {
        let tensors: Vec<&Tensor> = tensors.into_iter().collect();
        let mut any_variable = false;
        for t in &tensors {
            let (_, _, core) = self.resolve(t)?;
            match core.kind {
                TensorKind::Variable(_) => any_variable = true,
                TensorKind::Constant(_) => {}
                _ => return Err(SessionError::NotVariableOrConstant { tensor: t.id().to_string() }),
            }
        }
        if any_variable && self.attached && !self.host_weights_in_sync {
            self.weights_to_host()?;
        }
        tensors
            .iter()
            .map(|t| {
                let (g, id, core) = self.resolve(t)?;
                let data = match &core.kind {
                    TensorKind::Constant(d) => d,
                    _ => &self.variables[&(g, id)].data,
                };
                Ok(HostArray::from_host_tensor(data).expect("host data matches its info"))
            })
            .collect()
    }

    /// Write one variable (see [`Session::write_variables_data`]).
    pub fn write_variable_data(&mut self, tensor: &Tensor, data: &HostArray) -> Result<()> {
        self.write_variables_data([(tensor, data)])
    }

    /// Write variables from host arrays of their exact dtype and shape (a 0-d
    /// array is cast to the dtype of a scalar variable). The host copies are
    /// updated; when attached, the written variables are also transferred to the
    /// device (only those: other variables changed on the device are kept). Host
    /// weights are not invalidated. Nothing is written if any pair is invalid.
    pub fn write_variables_data<'t>(
        &mut self,
        data: impl IntoIterator<Item = (&'t Tensor, &'t HostArray)>,
    ) -> Result<()> {
        let mut writes: Vec<((GraphId, TensorId), HostTensor)> = Vec::new();
        for (t, arr) in data {
            let (g, id, core) = self.resolve(t)?;
            if !core.is_variable() {
                return Err(SessionError::NotAVariable { tensor: t.id().to_string() });
            }
            let info = &core.info;
            let arr = if arr.dtype() != info.dtype && arr.shape().is_empty() && info.shape.is_empty() {
                Cow::Owned(arr.cast(info.dtype))
            } else {
                Cow::Borrowed(arr)
            };
            if arr.dtype() != info.dtype {
                return Err(SessionError::WriteDTypeMismatch {
                    tensor: t.id().to_string(),
                    expected: info.dtype,
                    got: arr.dtype(),
                });
            }
            if arr.shape() != info.shape.as_slice() {
                return Err(SessionError::WriteShapeMismatch {
                    tensor: t.id().to_string(),
                    expected: info.shape.clone(),
                    got: arr.shape().to_vec(),
                });
            }
            writes.push(((g, id), arr.to_host_tensor()));
        }
        let mut device_writes = false;
        for (key, data) in writes {
            let v = self.variables.get_mut(&key).expect("resolved variables have host copies");
            v.data = data;
            if self.attached {
                if let Some(w) = v.weight {
                    let buffer = self.exe.weights[w].buffer;
                    self.executor.write_buffer(self.exe.buffer(buffer).offset, &v.data.bytes);
                    device_writes = true;
                }
            }
        }
        if device_writes {
            self.counts.weights_from_host += 1;
        }
        Ok(())
    }

    // ----- running -----

    /// The host-to-device streams `run` expects data for, in creation order.
    pub fn expected_inputs(&self) -> Vec<HostToDeviceStream> {
        self.ir.h2d_streams()
    }

    /// Shape of the host array of a stream of shape `shape`:
    /// `[num_host_transfers, replication_factor, *shape]` without the size-1 leading dims.
    pub fn host_shape(&self, shape: &[usize]) -> Vec<usize> {
        let mut v = Vec::with_capacity(shape.len() + 2);
        if self.exe.num_host_transfers > 1 {
            v.push(self.exe.num_host_transfers);
        }
        if self.exe.replication_factor > 1 {
            v.push(self.exe.replication_factor);
        }
        v.extend_from_slice(shape);
        v
    }

    /// A zero-filled output array for every device-to-host stream, shaped as
    /// [`Session::host_shape`].
    pub fn create_host_outputs(&self) -> Outputs {
        self.ir
            .d2h_streams()
            .into_iter()
            .map(|s| {
                let info = popart_ir::TensorInfo::new(s.dtype(), self.host_shape(s.shape()));
                (s, HostArray::full(&info, 0.0))
            })
            .collect()
    }

    /// Run the main program once with `inputs`, returning a new array for every
    /// device-to-host stream ([`Session::create_host_outputs`] +
    /// [`Session::run_with_outputs`]).
    pub fn run(&mut self, inputs: &Inputs) -> Result<Outputs> {
        self.require_attached("run")?;
        let mut outputs = self.create_host_outputs();
        self.run_with_outputs(inputs, &mut outputs)?;
        Ok(outputs)
    }

    /// Run the main program once, reading `inputs` and writing into `outputs`.
    ///
    /// Every host-to-device stream needs an array and every device-to-host
    /// stream an output array, shaped `[num_host_transfers, replication_factor,
    /// *stream shape]` without the size-1 leading dims, of the stream's dtype
    /// (64-bit inputs are downcast when [`SessionOptions::downcast_inputs`]).
    /// Each execution of a host load takes the next of the `num_host_transfers`
    /// elements of its stream, wrapping around when a stream is used more often;
    /// host stores likewise. The host copies of the variables become stale.
    pub fn run_with_outputs(&mut self, inputs: &Inputs, outputs: &mut Outputs) -> Result<()> {
        self.require_attached("run_with_outputs")?;
        let nht = self.exe.num_host_transfers.max(1);
        // Inputs: validate (downcasting 64-bit arrays if allowed) and borrow their bytes.
        self.check_stream_set("input", inputs.keys().map(|s| s.tensor()), &self.h2d)?;
        let mut arrays: Vec<(usize, Cow<'_, HostArray>)> = Vec::with_capacity(inputs.len());
        for (s, arr) in inputs {
            let pos = self.stream_position[&s.tensor().tensor_id()];
            let ds = &self.h2d[pos];
            let arr = if self.options.downcast_inputs && downcast_target(arr.dtype()) == Some(ds.dtype) {
                Cow::Owned(arr.clone().downcast_64bit())
            } else {
                Cow::Borrowed(arr)
            };
            self.check_array("input", ds, &arr)?;
            arrays.push((pos, arr));
        }
        let in_data: Vec<(usize, Cow<'_, [u8]>)> = arrays.iter().map(|(pos, a)| (*pos, bytes_of(a))).collect();
        // Outputs: validate, find pointers (or scratch for non-standard layouts).
        self.check_stream_set("output", outputs.keys().map(|s| s.tensor()), &self.d2h)?;
        for (s, arr) in outputs.iter() {
            let ds = &self.d2h[self.stream_position[&s.tensor().tensor_id()]];
            self.check_array("output", ds, arr)?;
        }
        let mut scratch: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut out_ptrs: Vec<(StreamId, *mut u8, usize)> = Vec::with_capacity(outputs.len());
        for (s, arr) in outputs.iter_mut() {
            let pos = self.stream_position[&s.tensor().tensor_id()];
            let id = self.d2h[pos].id;
            match mut_ptr_of(arr) {
                Some((p, n)) => out_ptrs.push((id, p, n)),
                None => scratch.push((pos, arr.to_host_tensor().bytes)),
            }
        }
        for (pos, buf) in scratch.iter_mut() {
            out_ptrs.push((self.d2h[*pos].id, buf.as_mut_ptr(), buf.len()));
        }
        // Bind, run, unbind.
        for (pos, data) in &in_data {
            let pos = *pos;
            // SAFETY: the input bytes outlive the run and are only read
            // (host-to-device transfers never write host memory).
            unsafe { self.executor.bind_stream(self.h2d[pos].id, data.as_ptr() as *mut u8, data.len(), nht) }
                .expect("sizes validated");
        }
        for &(id, p, n) in &out_ptrs {
            // SAFETY: the output arrays (or scratch buffers) are exclusively borrowed
            // for the whole run.
            unsafe { self.executor.bind_stream(id, p, n, nht) }.expect("sizes validated");
        }
        self.executor.run(EngineProgram::Main);
        self.executor.unbind_streams();
        drop(in_data);
        drop(arrays);
        if !scratch.is_empty() {
            for (s, arr) in outputs.iter_mut() {
                let pos = self.stream_position[&s.tensor().tensor_id()];
                if let Some((_, buf)) = scratch.iter().find(|(p, _)| *p == pos) {
                    assign_bytes(arr, buf);
                }
            }
        }
        self.host_weights_in_sync = false;
        self.counts.runs += 1;
        Ok(())
    }

    fn check_stream_set<'a>(
        &self,
        role: &'static str,
        given: impl Iterator<Item = &'a Tensor>,
        expected: &[DataStream],
    ) -> Result<()> {
        let mut seen: HashSet<TensorId> = HashSet::new();
        let mut unexpected = Vec::new();
        for t in given {
            let ok = t.ir_id() == self.ir.id()
                && self.stream_position.get(&t.tensor_id()).is_some_and(|&p| {
                    expected.get(p).is_some_and(|d| d.tensor == t.tensor_id())
                        && t.graph_id() == self.prepared.main_graph_id()
                });
            if ok {
                seen.insert(t.tensor_id());
            } else {
                unexpected.push(t.id().to_string());
            }
        }
        let missing: Vec<String> =
            expected.iter().filter(|d| !seen.contains(&d.tensor)).map(|d| d.name.clone()).collect();
        if unexpected.is_empty() && missing.is_empty() {
            return Ok(());
        }
        unexpected.sort();
        Err(SessionError::UnexpectedOrMissingStreams { role, unexpected, missing })
    }

    /// PopXL's shape rules for a stream array, plus an element-count check.
    fn check_array(&self, role: &'static str, s: &DataStream, arr: &HostArray) -> Result<()> {
        if arr.dtype() != s.dtype {
            return Err(SessionError::StreamDTypeMismatch {
                role,
                stream: s.name.clone(),
                expected: s.dtype,
                got: arr.dtype(),
            });
        }
        let nht = self.exe.num_host_transfers;
        let rf = self.exe.replication_factor;
        let shape = arr.shape();
        let (mut repl_index, mut data_index) = (0, 0);
        if nht > 1 {
            repl_index += 1;
            data_index += 1;
            let got = shape.first().copied().unwrap_or(1);
            if got < nht {
                return Err(SessionError::TooFewHostTransfers {
                    role,
                    stream: s.name.clone(),
                    got,
                    num_host_transfers: nht,
                });
            }
        }
        if rf > 1 {
            data_index += 1;
            let got = shape.get(repl_index).copied().unwrap_or(1);
            if got != rf {
                return Err(SessionError::WrongReplicaDim {
                    role,
                    stream: s.name.clone(),
                    dim: repl_index,
                    got,
                    replication_factor: rf,
                });
            }
        }
        let mismatch = || SessionError::StreamShapeMismatch {
            role,
            stream: s.name.clone(),
            stream_shape: s.shape.clone(),
            expected: self.host_shape(&s.shape),
            got: shape.to_vec(),
        };
        let squeezed_rank = shape.iter().filter(|&&d| d != 1).count();
        // PopXL accepts any array whose non-unit dims end before the data dims
        // (scalar-like streams); otherwise the data dims must be the stream shape.
        if squeezed_rank > data_index && shape.get(data_index..) != Some(s.shape.as_slice()) {
            return Err(mismatch());
        }
        let element: usize = s.shape.iter().product();
        if arr.nelms() < nht.max(1) * rf.max(1) * element {
            return Err(mismatch());
        }
        Ok(())
    }
}

/// A session context (PopXL's `with session:` block): see [`Session::enter`].
/// Dereferences to the [`Session`].
pub struct SessionContext<'s> {
    session: &'s mut Session,
    open: bool,
}

impl SessionContext<'_> {
    /// Leave the context now, returning the error of the exit's `weights_to_host`
    /// (dropping the guard ignores it).
    pub fn exit(mut self) -> Result<()> {
        self.open = false;
        self.session.exit_context(true)
    }
}

impl std::ops::Deref for SessionContext<'_> {
    type Target = Session;
    fn deref(&self) -> &Session {
        self.session
    }
}

impl std::ops::DerefMut for SessionContext<'_> {
    fn deref_mut(&mut self) -> &mut Session {
        self.session
    }
}

impl Drop for SessionContext<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.session.exit_context(!std::thread::panicking());
        }
    }
}
