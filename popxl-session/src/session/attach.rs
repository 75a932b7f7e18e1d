//! Attaching and detaching, session contexts (PopXL's `with session:`),
//! weight transfers and the data of variables and constants.

use std::borrow::Cow;

use popart_ir::{GraphId, HostTensor, TensorId, TensorKind};
use popxl::{HostArray, Tensor};

use super::{DeviceType, Result, Session, WeightSlot};
use crate::cpu::executor::EngineProgram;
use crate::SessionError;

impl Session {
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
        // The init program only writes constants (no kernels, no streams): it
        // cannot fail; if it did, the session stays detached.
        self.attached = self.executors.iter_mut().all(|e| {
            e.clear_memory();
            e.run(EngineProgram::Init).is_ok()
        });
        self.attached
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

    /// Open a session context without a guard (what [`Session::enter`] does), for
    /// bindings whose contexts are two calls, such as Python's `__enter__` /
    /// `__exit__`: attach and `weights_from_host` if detached. Pair every
    /// successful call with one [`Session::exit_context`].
    pub fn enter_context(&mut self) -> Result<()> {
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

    /// Close the innermost context opened by [`Session::enter_context`]: if it
    /// attached the session, `weights_to_host` (when `success` and the options ask
    /// for it) and detach. [`SessionError::NoOpenContext`] without an open context.
    pub fn exit_context(&mut self, success: bool) -> Result<()> {
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

    pub(super) fn require_attached(&self, function: &'static str) -> Result<()> {
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
        self.run_weight_program(EngineProgram::WeightsFromHost)?;
        self.counts.weights_from_host += 1;
        Ok(())
    }

    fn run_weight_program(&mut self, program: EngineProgram) -> Result<()> {
        self.run_weight_programs(program)
    }

    /// Copy every variable from the device to the host copies, which are then in sync.
    pub fn weights_to_host(&mut self) -> Result<()> {
        self.require_attached("weights_to_host")?;
        self.run_weight_program(EngineProgram::WeightsToHost)?;
        self.host_weights_in_sync = true;
        self.counts.weights_to_host += 1;
        Ok(())
    }

    // ----- tensor data -----

    /// The tensor of the main graph with this (full, scoped) name, as an unbound
    /// handle (see [`Session`]): how code on another thread than the one that
    /// built the IR names a variable or constant for [`Session::get_tensor_data`]
    /// or [`Session::write_variable_data`]. Variables, constants and streams keep
    /// their names; activations may have been removed by preparation.
    ///
    /// ```
    /// use popxl_session::{Session, SessionError};
    /// let ir = popxl::Ir::new();
    /// let w = ir.main_graph().with(|| popxl::variable(vec![1.0f32, 2.0], "w")).unwrap();
    /// ir.main_graph().with(|| popxl::ops::scaled_add_(&w, &w, 1.0, 1.0)).unwrap();
    /// let mut session = Session::new(ir, "cpu").unwrap();
    /// let handle = std::thread::spawn(move || {
    ///     let w = session.get_tensor("w").unwrap();
    ///     assert_eq!(session.get_tensor("v").unwrap_err(), SessionError::UnknownTensor { name: "v".into() });
    ///     session.scope(|s| s.run(&Default::default())).unwrap();
    ///     session.get_tensor_data(&w).unwrap()
    /// });
    /// assert_eq!(handle.join().unwrap(), popxl::HostArray::from(vec![2.0f32, 4.0]));
    /// ```
    pub fn get_tensor(&self, name: &str) -> Result<Tensor> {
        let main = self.prepared.main_graph();
        let t = main.tensor_by_name(name).map_err(|_| SessionError::UnknownTensor { name: name.to_string() })?;
        Tensor::unbound(&self.prepared, main.id(), t.id)
            .map_err(|e| SessionError::Internal { reason: format!("tensor `{name}` of the main graph: {e}") })
    }

    /// Resolve a handle to its graph and tensor ids and its tensor in the prepared
    /// IR; a handle of another IR is a [`SessionError::ForeignTensor`] error.
    fn resolve(&self, t: &Tensor) -> Result<(GraphId, TensorId, &popart_ir::Tensor)> {
        if t.ir_id() != self.ir_id {
            return Err(SessionError::ForeignTensor {
                name: t.id().to_string(),
                ir_id: t.ir_id(),
                session_ir_id: self.ir_id,
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
        let rf = self.comm.num_replicas();
        tensors
            .iter()
            .map(|t| {
                let (g, id, core) = self.resolve(t)?;
                let all_replicas;
                let data = match &core.kind {
                    TensorKind::Constant(d) => d,
                    _ => {
                        let v = self.variables.get(&(g, id)).ok_or_else(|| SessionError::Internal {
                            reason: format!("variable `{}` has no host copy", t.id()),
                        })?;
                        let all = v.settings.as_ref().is_some_and(|s| {
                            s.retrieval_mode == popart_ir::RetrievalMode::AllReplicas && s.grouping.num_groups() < rf
                        });
                        if all {
                            all_replicas = match super::replicated::all_replica_values(v, rf) {
                                Some(d) => d,
                                None => {
                                    let mut bytes = Vec::new();
                                    for r in 0..rf {
                                        bytes.extend_from_slice(&super::replicated::replica_bytes(v, r)?);
                                    }
                                    let info =
                                        v.settings.as_ref().map_or_else(|| core.info.clone(), |s| s.replica_info());
                                    let mut shape = vec![rf];
                                    shape.extend_from_slice(&info.shape);
                                    HostTensor { info: popart_ir::TensorInfo::new(info.dtype, shape), bytes }
                                }
                            };
                            &all_replicas
                        } else {
                            &v.data
                        }
                    }
                };
                // The host copy came from the device: check it (bool bytes 0 or 1).
                data.validate()
                    .map_err(|source| SessionError::InvalidHostData { tensor: t.id().to_string(), source })?;
                HostArray::from_host_tensor(data).map_err(|e| crate::host::cast_error(t.id(), e))
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
            let host_info = self.variables.get(&(g, id)).map(|v| v.data.info.clone());
            let info = host_info.as_ref().unwrap_or(&core.info);
            if let Some(s) = self.variables.get(&(g, id)).and_then(|v| v.settings.as_ref()) {
                if s.retrieval_mode == popart_ir::RetrievalMode::AllReplicas
                    && s.grouping.num_groups() < self.comm.num_replicas()
                {
                    return Err(SessionError::WriteAllReplicas { tensor: t.id().to_string() });
                }
            }
            let arr = if arr.dtype() != info.dtype && arr.shape().is_empty() && info.shape.is_empty() {
                Cow::Owned(arr.try_cast(info.dtype).map_err(|e| crate::host::cast_error(&core.name, e))?)
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
            let data = arr.try_to_host_tensor().map_err(|e| crate::host::cast_error(t.id(), e))?;
            data.validate().map_err(|source| SessionError::InvalidHostData { tensor: t.id().to_string(), source })?;
            if !self.variables.contains_key(&(g, id)) {
                return Err(SessionError::Internal { reason: format!("variable `{}` has no host copy", t.id()) });
            }
            writes.push(((g, id), data));
        }
        let mut device_writes = false;
        for (key, data) in writes {
            let Some(v) = self.variables.get_mut(&key) else { continue };
            v.data = data;
            if let Some(s) = v.settings.as_mut() {
                s.host = v.data.clone();
                v.replica_values.clear();
            }
            if self.attached && v.weight.is_some() {
                let first = self.comm.local_replicas().start;
                for (r, exec) in self.executors.iter_mut().enumerate() {
                    let bytes = super::replicated::replica_bytes(v, first + r)?;
                    let written = match v.weight {
                        Some(WeightSlot::Device(w)) => {
                            // The buffer was checked to lie within the arena at compile time.
                            exec.write_buffer(self.exe.buffer(self.exe.weights[w].buffer).offset, &bytes)
                        }
                        Some(WeightSlot::Remote(w)) => {
                            let slot = self.exe.remote_weights[w].slot;
                            exec.write_remote_entry(slot.buffer, slot.entry, &bytes)
                        }
                        None => Ok(()),
                    };
                    written.map_err(|e| SessionError::Device(e.into()))?;
                }
                device_writes = true;
            }
        }
        if device_writes {
            self.counts.weights_from_host += 1;
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
