//! Running the main program: stream inputs and outputs, and their checks.

use std::borrow::Cow;
use std::collections::HashSet;

use popart_ir::{DataType, HostDataError, TensorId, TensorInfo};
use popart_lower::StreamId;
use popxl::{DeviceToHostStream, HostArray, HostToDeviceStream, Tensor};

use super::{DataStream, Inputs, Outputs, Result, Session};
use crate::cpu::executor::{EngineProgram, ExecError};
use crate::cpu::kernel::KernelRunError;
use crate::host::{assign_bytes, bytes_of, mut_ptr_of, try_zeros};
use crate::SessionError;

/// The 32-bit type a 64-bit array is downcast to (PopXL's `downcast_inputs`).
fn downcast_target(dtype: DataType) -> Option<DataType> {
    match dtype {
        DataType::Int64 => Some(DataType::Int32),
        DataType::Uint64 => Some(DataType::Uint32),
        DataType::Float64 => Some(DataType::Float32),
        _ => None,
    }
}

/// A stream input borrowed from memory the caller owns (a numpy array, a
/// memory-mapped file): its dtype, shape and row-major little-endian bytes,
/// which [`Session::run_views`] reads in place. Any alignment will do (the
/// transfers copy bytes).
#[derive(Clone, Copy, Debug)]
pub struct InputView<'a> {
    dtype: DataType,
    shape: &'a [usize],
    bytes: &'a [u8],
}

impl<'a> InputView<'a> {
    /// A view of `bytes` as an array of `dtype` and `shape`.
    ///
    /// Errors: [`HostDataError::Length`] when `bytes` is not exactly the
    /// shape's size, [`HostDataError::Size`] when that size overflows, and
    /// [`HostDataError::InvalidBool`] for a bool byte other than 0 or 1.
    ///
    /// ```
    /// use popxl_session::InputView;
    /// let data = [1.0f32, 2.0].map(f32::to_le_bytes).concat();
    /// assert!(InputView::new(popxl::float32, &[2], &data).is_ok());
    /// assert!(InputView::new(popxl::float32, &[3], &data).is_err());
    /// ```
    pub fn new(dtype: DataType, shape: &'a [usize], bytes: &'a [u8]) -> std::result::Result<Self, HostDataError> {
        let info = TensorInfo::new(dtype, shape);
        let expected = info.check_size("host data")?;
        if bytes.len() != expected {
            return Err(HostDataError::Length { info, expected, got: bytes.len() });
        }
        if dtype == DataType::Bool {
            if let Some((index, &byte)) = bytes.iter().enumerate().find(|(_, &b)| b > 1) {
                return Err(HostDataError::InvalidBool { index, byte });
            }
        }
        Ok(InputView { dtype, shape, bytes })
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.shape
    }

    /// The bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    fn nelms(&self) -> usize {
        self.bytes.len() / self.dtype.size_bytes().max(1)
    }
}

/// A device-to-host stream's output buffer borrowed from memory the caller
/// owns: its dtype, shape and row-major little-endian bytes, which
/// [`Session::run_views_into`] writes in place.
#[derive(Debug)]
pub struct OutputView<'a> {
    dtype: DataType,
    shape: &'a [usize],
    bytes: &'a mut [u8],
}

impl<'a> OutputView<'a> {
    /// A view of `bytes` as an array of `dtype` and `shape`.
    ///
    /// Errors: [`HostDataError::Length`] when `bytes` is not exactly the
    /// shape's size, [`HostDataError::Size`] when that size overflows.
    pub fn new(dtype: DataType, shape: &'a [usize], bytes: &'a mut [u8]) -> std::result::Result<Self, HostDataError> {
        let info = TensorInfo::new(dtype, shape);
        let expected = info.check_size("host data")?;
        if bytes.len() != expected {
            return Err(HostDataError::Length { info, expected, got: bytes.len() });
        }
        Ok(OutputView { dtype, shape, bytes })
    }

    fn nelms(&self) -> usize {
        self.bytes.len() / self.dtype.size_bytes().max(1)
    }
}

/// Where [`Session::run_views_with_outputs`] writes an output array: in place,
/// or through a scratch buffer copied back (arrays not in standard layout).
enum Dest<'a> {
    Direct(&'a mut [u8]),
    Scratch(&'a mut HostArray, Vec<u8>),
}

impl Session {
    /// The host-to-device streams `run` expects data for, in creation order
    /// (unbound handles, equal to those of the IR: see [`Session`]).
    // The streams were collected from the prepared IR's main graph when the
    // session was created, and that IR is frozen: the handles always exist.
    #[allow(clippy::expect_used)]
    pub fn expected_inputs(&self) -> Vec<HostToDeviceStream> {
        self.h2d
            .iter()
            .map(|d| HostToDeviceStream::unbound(&self.prepared, d.tensor).expect("a data stream of the main graph"))
            .collect()
    }

    /// The device-to-host streams `run` writes, in creation order (unbound
    /// handles, as [`Session::expected_inputs`]).
    // As `expected_inputs`: the handles always exist.
    #[allow(clippy::expect_used)]
    pub fn expected_outputs(&self) -> Vec<DeviceToHostStream> {
        self.d2h
            .iter()
            .map(|d| DeviceToHostStream::unbound(&self.prepared, d.tensor).expect("a data stream of the main graph"))
            .collect()
    }

    /// Shape of the host array of a stream of shape `shape`:
    /// `[num_host_transfers, replication_factor, *shape]` without the size-1
    /// leading dims. When the replicas span processes, the replica dim is this
    /// process's replicas ([`Session::instance_replication_factor`]).
    pub fn host_shape(&self, shape: &[usize]) -> Vec<usize> {
        self.host_shape_for(shape, self.executors.len())
    }

    /// [`Session::host_shape`] with `rf` replicas.
    fn host_shape_for(&self, shape: &[usize], rf: usize) -> Vec<usize> {
        let mut v = Vec::with_capacity(shape.len() + 2);
        if self.exe.num_host_transfers > 1 {
            v.push(self.exe.num_host_transfers);
        }
        if rf > 1 {
            v.push(rf);
        }
        v.extend_from_slice(shape);
        v
    }

    /// A zero-filled output array for every device-to-host stream, shaped as
    /// [`Session::host_shape`] (keyed by unbound handles: see [`Session`]).
    ///
    /// Errors: [`SessionError::SizeOverflow`] when `num_host_transfers x
    /// replication_factor x` a stream's elements overflows, and
    /// [`SessionError::OutOfMemory`] when the allocator refuses an array.
    pub fn create_host_outputs(&self) -> Result<Outputs> {
        let mut outputs = Outputs::with_capacity(self.d2h.len());
        for d in &self.d2h {
            let s = DeviceToHostStream::unbound(&self.prepared, d.tensor)
                .map_err(|e| SessionError::Internal { reason: format!("device-to-host stream `{}`: {e}", d.name) })?;
            let info = popart_ir::TensorInfo::new(d.dtype, self.host_shape(&d.shape));
            let array = try_zeros(&info, &format!("the output array of stream `{}`", d.name))?;
            outputs.insert(s, array);
        }
        Ok(outputs)
    }

    /// Run the main program once with `inputs`, returning a new array for every
    /// device-to-host stream ([`Session::create_host_outputs`] +
    /// [`Session::run_with_outputs`]).
    pub fn run(&mut self, inputs: &Inputs) -> Result<Outputs> {
        self.step(|this| {
            this.require_attached("run")?;
            let mut outputs = this.create_host_outputs()?;
            this.run_with_outputs(inputs, &mut outputs)?;
            Ok(outputs)
        })
    }

    /// Run the main program once, reading `inputs` and writing into `outputs`.
    ///
    /// Every host-to-device stream needs an array and every device-to-host
    /// stream an output array, shaped `[num_host_transfers, replication_factor,
    /// *stream shape]` without the size-1 leading dims, of the stream's dtype
    /// (64-bit inputs are downcast when [`crate::SessionOptions::downcast_inputs`]).
    /// Each execution of a host load takes the next of the `num_host_transfers`
    /// elements of its stream, wrapping around when a stream is used more often;
    /// host stores likewise. The host copies of the variables become stale.
    ///
    /// Every input and output is checked before anything runs, so a wrong
    /// stream set, shape or dtype changes nothing. A run that fails while
    /// running ([`SessionError::IndexOutOfRange`] with
    /// [`crate::SessionOptions::check_indices`],
    /// [`SessionError::RemoteOffsetOutOfRange`],
    /// [`SessionError::Log2ScaleOutOfRange`], a custom kernel's error) leaves
    /// the device as it was before the run: every variable (random seeds held
    /// in variables included), remote buffer and remote variable, on every
    /// replica; the output arrays then hold unspecified values and the run is
    /// not counted. Either way the session stays usable. Programs that cannot
    /// fail pay nothing for this: only a program with a kernel that may fail or
    /// a remote transfer at a run-time offset copies that state before each run.
    pub fn run_with_outputs(&mut self, inputs: &Inputs, outputs: &mut Outputs) -> Result<()> {
        self.step(|this| {
            this.require_attached("run_with_outputs")?;
            // Downcast 64-bit arrays if allowed (a copy); borrow the others' bytes.
            let mut arrays: Vec<(&HostToDeviceStream, Cow<'_, HostArray>)> = Vec::with_capacity(inputs.len());
            for (s, arr) in inputs {
                let target = this.stream_position.get(&s.tensor().tensor_id()).map(|&pos| &this.h2d[pos]);
                let arr = match target {
                    Some(ds) if this.options.downcast_inputs && downcast_target(arr.dtype()) == Some(ds.dtype) => {
                        Cow::Owned(arr.clone().try_downcast_64bit().map_err(|e| crate::host::cast_error(&ds.name, e))?)
                    }
                    _ => Cow::Borrowed(arr),
                };
                arrays.push((s, arr));
            }
            let bytes: Vec<Cow<'_, [u8]>> = arrays.iter().map(|(_, a)| bytes_of(a)).collect();
            let views: Vec<(&HostToDeviceStream, InputView<'_>)> = arrays
                .iter()
                .zip(&bytes)
                .map(|((s, a), b)| (*s, InputView { dtype: a.dtype(), shape: a.shape(), bytes: b }))
                .collect();
            this.run_views_with_outputs(&views, outputs)
        })
    }

    /// [`Session::run`] with borrowed inputs ([`InputView`]: bytes the caller
    /// owns, read in place without a copy).
    pub fn run_views(&mut self, inputs: &[(&HostToDeviceStream, InputView<'_>)]) -> Result<Outputs> {
        self.step(|this| {
            this.require_attached("run")?;
            let mut outputs = this.create_host_outputs()?;
            this.run_views_with_outputs(inputs, &mut outputs)?;
            Ok(outputs)
        })
    }

    /// [`Session::run_with_outputs`] with borrowed inputs: each [`InputView`]'s
    /// bytes are bound to its stream and read in place (no copy, no downcast:
    /// the dtype must be the stream's). The same checks and errors, plus
    /// [`SessionError::UnexpectedOrMissingStreams`] for a stream given twice.
    pub fn run_views_with_outputs(
        &mut self,
        inputs: &[(&HostToDeviceStream, InputView<'_>)],
        outputs: &mut Outputs,
    ) -> Result<()> {
        self.step(|this| {
            this.require_attached("run_with_outputs")?;
            let mut dests: Vec<(&DeviceToHostStream, DataType, Vec<usize>, Dest<'_>)> = outputs
                .iter_mut()
                .map(|(s, arr)| {
                    let (dtype, shape) = (arr.dtype(), arr.shape().to_vec());
                    let dest = match mut_ptr_of(arr) {
                        // SAFETY: the pointer and length are those of `arr`'s elements, which
                        // this map entry borrows exclusively for as long as `dests` lives.
                        Some((p, n)) => Dest::Direct(unsafe { std::slice::from_raw_parts_mut(p, n) }),
                        None => {
                            let bytes = arr.to_host_tensor().bytes;
                            Dest::Scratch(arr, bytes)
                        }
                    };
                    (s, dtype, shape, dest)
                })
                .collect();
            let mut views: Vec<(&DeviceToHostStream, OutputView<'_>)> = dests
                .iter_mut()
                .map(|(s, dtype, shape, dest)| {
                    let bytes: &mut [u8] = match dest {
                        Dest::Direct(b) => b,
                        Dest::Scratch(_, v) => v.as_mut_slice(),
                    };
                    (*s, OutputView { dtype: *dtype, shape, bytes })
                })
                .collect();
            this.run_views_into(inputs, &mut views)?;
            drop(views);
            for (s, _, _, dest) in dests {
                if let Dest::Scratch(arr, buf) = dest {
                    assign_bytes(arr, &buf)
                        .map_err(|e| SessionError::InvalidHostData { tensor: s.name().to_string(), source: e })?;
                }
            }
            Ok(())
        })
    }

    /// Run the main program once, reading each [`InputView`] and writing each
    /// [`OutputView`] in place: no copies on the host side. The checks and
    /// errors of [`Session::run_views_with_outputs`]; every device-to-host
    /// stream needs a view.
    pub fn run_views_into(
        &mut self,
        inputs: &[(&HostToDeviceStream, InputView<'_>)],
        outputs: &mut [(&DeviceToHostStream, OutputView<'_>)],
    ) -> Result<()> {
        self.step(|this| {
            this.require_attached("run_with_outputs")?;
            let nht = this.exe.num_host_transfers.max(1);
            this.check_stream_set("input", inputs.iter().map(|(s, _)| s.tensor()), &this.h2d)?;
            // Each array holds this process's replicas or, when the replicas
            // span processes, possibly every replica (`layout` replicas).
            let mut in_data: Vec<(usize, &[u8], usize)> = Vec::with_capacity(inputs.len());
            for (s, view) in inputs {
                let pos = this.stream_position[&s.tensor().tensor_id()];
                let ds = &this.h2d[pos];
                let layout = this.check_layout("input", ds, view.dtype, view.shape, view.nelms())?;
                in_data.push((pos, view.bytes, layout));
            }
            this.check_stream_set("output", outputs.iter().map(|(s, _)| s.tensor()), &this.d2h)?;
            let mut out_ptrs: Vec<(StreamId, *mut u8, usize, usize)> = Vec::with_capacity(outputs.len());
            for (s, view) in outputs.iter_mut() {
                let ds = &this.d2h[this.stream_position[&s.tensor().tensor_id()]];
                let layout = this.check_layout("output", ds, view.dtype, view.shape, view.nelms())?;
                out_ptrs.push((ds.id, view.bytes.as_mut_ptr(), view.bytes.len(), layout));
            }
            // Bind, run, unbind. `bind_stream_strided` checks each buffer holds
            // element `(nht - 1) * rf + r` of every replica `r` (validated above, so
            // an error here is a bug). Replica `r` reads and writes elements
            // `k * rf + r` only, so replicas never touch the same bytes.
            let (local, first) = (this.executors.len(), this.comm.local_replicas().start);
            // Replica `r` of this process is element `r` of an array of its
            // replicas, `first + r` of one of every replica.
            let index = move |layout: usize, r: usize| if layout == local { r } else { first + r };
            let bind_error = |e: crate::cpu::executor::BindError| SessionError::Device(e.into());
            let mut bound: Result<()> = Ok(());
            for (r, exec) in this.executors.iter_mut().enumerate() {
                for &(pos, data, layout) in &in_data {
                    bound = bound.and_then(|_| {
                        let (ptr, len) = (data.as_ptr() as *mut u8, data.len());
                        // SAFETY: the input bytes are borrowed for the whole call, so they
                        // outlive the run (unbound below), and are only read
                        // (host-to-device transfers never write host memory).
                        unsafe { exec.bind_stream_strided(this.h2d[pos].id, ptr, len, nht, layout, index(layout, r)) }
                            .map_err(bind_error)
                    });
                }
                for &(id, p, n, layout) in &out_ptrs {
                    // SAFETY: the output views are exclusively borrowed for the whole call
                    // and outlive the run; replicas write disjoint elements.
                    bound = bound.and_then(|_| {
                        // SAFETY: as above.
                        unsafe { exec.bind_stream_strided(id, p, n, nht, layout, index(layout, r)) }.map_err(bind_error)
                    });
                }
            }
            let unbind = |s: &mut Session| s.executors.iter_mut().for_each(|e| e.unbind_streams());
            if let Err(e) = bound {
                unbind(this);
                return Err(e);
            }
            // Spanning processes, every process's inputs are checked and bound
            // before any runs: a mistake on one stops all, with nothing changed.
            this.step_told = true;
            if let Err(e) = this.comm.start(true) {
                unbind(this);
                return Err(e.into());
            }
            // A program that may fail (see `CpuExecutor::may_fail`) saves the state
            // a failure restores; the others do nothing here.
            this.executors.iter_mut().for_each(|e| e.save_state());
            let ran = super::replicated::run_all(
                &mut this.executors,
                &mut this.comm,
                this.gang.as_mut(),
                &mut this.replica_results,
                EngineProgram::Main,
            );
            unbind(this);
            if let Err(e) = ran {
                // Restore the variables, seeds, constants and remote buffers as they
                // were before the run. Only a program that may fail stops here, and
                // such a program saved them.
                for exec in &mut this.executors {
                    // An unbound stream is found before the program starts.
                    // A transport failure can stop a program that cannot fail.
                    let expected = matches!(e, ExecError::UnboundStream { .. } | ExecError::Processes(_));
                    if !exec.restore_state() && !expected {
                        return Err(SessionError::Internal {
                            reason: format!("a program compiled as one that cannot fail stopped: {e}"),
                        });
                    }
                }
                return Err(exec_error(e));
            }
            this.host_weights_in_sync = false;
            this.counts.runs += 1;
            Ok(())
        })
    }

    /// Run `f` as one run of the processes: when the replicas span processes
    /// and `f` fails before the run's start agreement (a bad input, a
    /// detached session), tell the others at theirs, so they stop too instead
    /// of waiting for this process.
    fn step<T>(&mut self, f: impl FnOnce(&mut Session) -> Result<T>) -> Result<T> {
        self.step_told = false;
        let r = f(self);
        if r.is_err() && !self.step_told && self.comm.span().is_some() {
            self.step_told = true;
            // This process's own error is what it reports.
            let _ = self.comm.start(false);
        }
        r
    }

    /// [`Session::check_array`] for an array of this process's replicas or,
    /// when the replicas span processes, of every replica: the number of
    /// replicas the array holds.
    fn check_layout(
        &self,
        role: &'static str,
        s: &DataStream,
        dtype: DataType,
        shape: &[usize],
        nelms: usize,
    ) -> Result<usize> {
        let (local, all) = (self.executors.len(), self.comm.num_replicas());
        match self.check_array(role, s, dtype, shape, nelms, local) {
            Err(_) if all != local && self.check_array(role, s, dtype, shape, nelms, all).is_ok() => Ok(all),
            r => r.map(|_| local),
        }
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
            let ok = !seen.contains(&t.tensor_id())
                && t.ir_id() == self.ir_id
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
    fn check_array(
        &self,
        role: &'static str,
        s: &DataStream,
        dtype: DataType,
        shape: &[usize],
        nelms: usize,
        rf: usize,
    ) -> Result<()> {
        if dtype != s.dtype {
            return Err(SessionError::StreamDTypeMismatch {
                role,
                stream: s.name.clone(),
                expected: s.dtype,
                got: dtype,
            });
        }
        let nht = self.exe.num_host_transfers;
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
            expected: self.host_shape_for(&s.shape, rf),
            got: shape.to_vec(),
        };
        let squeezed_rank = shape.iter().filter(|&&d| d != 1).count();
        // PopXL accepts any array whose non-unit dims end before the data dims
        // (scalar-like streams); otherwise the data dims must be the stream shape.
        if squeezed_rank > data_index && shape.get(data_index..) != Some(s.shape.as_slice()) {
            return Err(mismatch());
        }
        let mut dims = vec![nht.max(1), rf.max(1)];
        dims.extend_from_slice(&s.shape);
        let needed = popart_ir::size::checked_product(&dims).ok_or_else(|| SessionError::SizeOverflow {
            what: format!("the host array of {role} stream `{}` ({dims:?} elements)", s.name),
        })?;
        if nelms < needed {
            return Err(mismatch());
        }
        Ok(())
    }
}

/// The session error of a failed execution.
fn exec_error(e: ExecError) -> SessionError {
    match e {
        ExecError::Kernel { op, op_type, error: KernelRunError::IndexOutOfRange { index, bound } } => {
            SessionError::IndexOutOfRange { op, op_type, index, bound }
        }
        ExecError::Kernel { op, op_type, error: KernelRunError::Log2ScaleOutOfRange { value } } => {
            SessionError::Log2ScaleOutOfRange { op, op_type, value }
        }
        ExecError::RemoteOffset { buffer, offset, entries } => {
            SessionError::RemoteOffsetOutOfRange { buffer, offset, entries }
        }
        ExecError::Processes(e) => SessionError::Processes(e),
        e @ (ExecError::UnboundStream { .. } | ExecError::Kernel { error: KernelRunError::ReplicaAborted, .. }) => {
            SessionError::Device(e.into())
        }
    }
}
