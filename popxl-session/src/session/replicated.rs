//! Running the replicas of a session: the main program on every replica at
//! once, and weight programs replica by replica with each replica's share of
//! the host values.
//!
//! Replica 0 runs on the caller's thread and replicas 1.. on the session's
//! gang of persistent threads ([`crate::cpu::gang`]), each entered as its replica ([`crate::cpu::replicas::enter`]) so collective
//! kernels and random ops know it. Each replica's kernels get an equal share
//! of the worker team's threads (one each when there are at least as many
//! replicas as cores), so replicas do not oversubscribe the machine.

use popart_ir::HostTensor;

use super::{HostVariable, Result, Session, WeightSlot};
use crate::cpu::executor::{CpuExecutor, EngineProgram, ExecError};
use crate::cpu::gang::Gang;
use crate::cpu::kernel::KernelRunError;
use crate::cpu::replicas::{self, Comm};
use crate::cpu::team;
use crate::SessionError;

/// The executors of a replicated run, shared with the gang's members: member
/// `i` only touches executor `i` and result `i`.
struct Shared {
    executors: *mut CpuExecutor,
    results: *mut Result<(), ExecError>,
}

// SAFETY: each member dereferences only its own index of both arrays, which
// outlive the gang's `run` (the caller waits for every member).
unsafe impl Sync for Shared {}

impl Shared {
    /// Executor and result slot `r`.
    ///
    /// # Safety
    /// `r` is in range and no one else uses index `r` meanwhile.
    #[allow(clippy::mut_from_ref)]
    unsafe fn get(&self, r: usize) -> (&mut CpuExecutor, &mut Result<(), ExecError>) {
        // SAFETY: the caller's contract.
        unsafe { (&mut *self.executors.add(r), &mut *self.results.add(r)) }
    }
}

/// Run `program` on every executor at once, executor `i` as this process's
/// replica `i` (global index `first + i`) on member `i` of `gang`. Returns
/// the first failure that is not a replica abandoning a collective because
/// another failed. When the replicas span processes, every process then
/// learns whether every other succeeded ([`Comm::finish`]): a failure of
/// another process is [`ExecError::Processes`].
pub(super) fn run_all(
    executors: &mut [CpuExecutor],
    comm: &mut Comm,
    gang: Option<&mut Gang>,
    results: &mut Vec<Result<(), ExecError>>,
    program: EngineProgram,
) -> Result<(), ExecError> {
    let local = run_local(executors, comm, gang, results, program);
    let across = comm.finish(local.is_ok());
    match (local, across) {
        // This process's own failure first: the others report it by rank.
        (Err(e), _) if !aborted(&e) => Err(e),
        (_, Err(e)) => Err(ExecError::Processes(e)),
        (r, Ok(())) => r,
    }
}

/// A replica abandoning a collective because another failed.
fn aborted(e: &ExecError) -> bool {
    matches!(e, ExecError::Kernel { error: KernelRunError::ReplicaAborted, .. })
}

/// [`run_all`] within this process.
fn run_local(
    executors: &mut [CpuExecutor],
    comm: &mut Comm,
    gang: Option<&mut Gang>,
    results: &mut Vec<Result<(), ExecError>>,
    program: EngineProgram,
) -> Result<(), ExecError> {
    let n = executors.len();
    comm.reset();
    let first = comm.local_replicas().start;
    // Processes on this host share its cores, and so do this process's replicas.
    let host = comm.span().map_or(1, |s| s.transport.host_size().max(1));
    let threads = (team::num_threads() / (n * host)).max(1);
    let gang = match gang {
        Some(g) if n > 1 && g.len() == n => g,
        _ => {
            return match executors {
                [only] if comm.span().is_some() => {
                    let comm: &Comm = comm;
                    let ran = replicas::enter(first, comm, || team::with_max_threads(threads, || only.run(program)));
                    if ran.is_err() {
                        comm.abort();
                    }
                    ran
                }
                [only] => only.run(program),
                _ => Err(ExecError::UnboundStream { stream: u32::MAX }),
            }
        }
    };
    results.clear();
    results.resize_with(n, || Ok(()));
    let comm: &Comm = comm;
    let shared = Shared { executors: executors.as_mut_ptr(), results: results.as_mut_ptr() };
    gang.run(&|r: usize| {
        // SAFETY: `r < n` (one task per member) and only this task touches index `r`.
        let (e, out) = unsafe { shared.get(r) };
        *out = replicas::enter(first + r, comm, || team::with_max_threads(threads, || e.run(program)));
        if out.is_err() {
            comm.abort();
        }
    });
    let first_err = results.iter().position(|r| r.as_ref().is_err_and(|e| !aborted(e)));
    let first_err = first_err.or_else(|| results.iter().position(Result::is_err));
    match first_err {
        Some(i) => std::mem::replace(&mut results[i], Ok(())),
        None => Ok(()),
    }
}

/// What one replica's weight stream of a variable is bound to.
enum Binding {
    /// The host value itself (a variable every replica holds whole).
    Host,
    /// A per-replica buffer: the replica's value, or where it is read back to.
    Scratch(Vec<u8>),
    /// A buffer whose contents are dropped (replicas whose value is not read back).
    Sink,
}

impl Session {
    /// Run a weight program on every replica, with every variable's weight
    /// stream of that direction bound to that replica's value: the host value
    /// itself for plain variables (read back from replica 0 only), its group's
    /// value or shard for grouped and sharded ones ([`popart_ir::VariableSettings`]).
    /// Weight programs run no kernel, so they cannot fail once bound.
    pub(super) fn run_weight_programs(&mut self, program: EngineProgram) -> Result<()> {
        let to_host = matches!(program, EngineProgram::WeightsToHost);
        let (first, all) = (self.comm.local_replicas().start, self.comm.num_replicas());
        let spanning = self.comm.span().is_some();
        // Variables in a fixed order (the same in every process).
        let mut keys: Vec<(popart_ir::GraphId, popart_ir::TensorId)> = self.variables.keys().copied().collect();
        keys.sort_unstable();
        // Spanning processes, each replicated variable's values of this
        // process's replicas, in replica order, for the other processes.
        let mut gathered: Vec<Vec<u8>> = vec![Vec::new(); keys.len()];
        let mut sink: Vec<u8> = Vec::new();
        for (r, exec) in self.executors.iter_mut().enumerate() {
            let replica = first + r;
            let mut bindings: Vec<(usize, &mut HostVariable, popart_lower::StreamId, Binding)> = Vec::new();
            let mut vars: Vec<(usize, &mut HostVariable)> =
                self.variables.iter_mut().filter_map(|(k, v)| keys.binary_search(k).ok().map(|i| (i, v))).collect();
            vars.sort_unstable_by_key(|(i, _)| *i);
            for (i, v) in vars {
                let (from_host, to_host_stream) = match v.weight {
                    None => continue,
                    Some(WeightSlot::Device(w)) => (self.exe.weights[w].from_host, self.exe.weights[w].to_host),
                    Some(WeightSlot::Remote(w)) => {
                        (self.exe.remote_weights[w].from_host, self.exe.remote_weights[w].to_host)
                    }
                };
                let stream = if to_host { to_host_stream } else { from_host };
                let binding = match &v.settings {
                    None if !to_host || replica == 0 => Binding::Host,
                    None => Binding::Sink,
                    Some(s) => {
                        let all_mode = s.retrieval_mode == popart_ir::RetrievalMode::AllReplicas;
                        let n = s.replica_info().nbytes();
                        if to_host && !s.is_source(replica) && !all_mode && !spanning {
                            Binding::Sink
                        } else {
                            let mut buf = popart_ir::size::try_zeroed_bytes(n, "a replica's variable value")?;
                            if !to_host {
                                s.replica_value(replica, &mut buf);
                            }
                            Binding::Scratch(buf)
                        }
                    }
                };
                if matches!(binding, Binding::Sink) {
                    let n = self.exe.streams.get(stream.index()).map_or(0, |s| s.info.nbytes());
                    if sink.len() < n {
                        sink = popart_ir::size::try_zeroed_bytes(n, "a weight stream sink")?;
                    }
                }
                bindings.push((i, v, stream, binding));
            }
            let mut bound = Ok(());
            for (_, v, stream, binding) in bindings.iter_mut() {
                let (ptr, len) = match binding {
                    Binding::Host => (v.data.bytes.as_mut_ptr(), v.data.bytes.len()),
                    Binding::Scratch(b) => (b.as_mut_ptr(), b.len()),
                    Binding::Sink => (sink.as_mut_ptr(), sink.len()),
                };
                // SAFETY: the host value, scratch and sink buffers outlive this
                // call and nothing else touches them while the program runs; the
                // streams are unbound right after.
                if let Err(e) = unsafe { exec.bind_stream(*stream, ptr, len, 1) } {
                    bound = Err(device(e));
                    break;
                }
            }
            let ran = bound.and_then(|_| exec.run(program).map_err(device));
            exec.unbind_streams();
            ran?;
            if to_host {
                for (i, v, _, binding) in bindings {
                    let Binding::Scratch(buf) = binding else { continue };
                    store_replica_value(v, replica, all, &buf)?;
                    if spanning {
                        gathered[i].extend_from_slice(&buf);
                    }
                }
            }
        }
        if to_host && spanning {
            self.share_weights(&keys, &gathered)?;
        }
        Ok(())
    }

    /// After `weights_to_host` on replicas spanning processes, give every
    /// process every variable's host value: a plain variable's from the
    /// process of replica 0, a replicated one's from each replica's values
    /// (`gathered[i]`, this process's replicas' values of variable `keys[i]`).
    fn share_weights(
        &mut self,
        keys: &[(popart_ir::GraphId, popart_ir::TensorId)],
        gathered: &[Vec<u8>],
    ) -> Result<()> {
        let Some(span) = self.comm.span().cloned() else { return Ok(()) };
        let (t, all, first) = (&*span.transport, span.global(), span.first());
        let local = first..first + span.local;
        for (key, mine) in keys.iter().zip(gathered) {
            let Some(v) = self.variables.get_mut(key) else { continue };
            if v.weight.is_none() {
                continue;
            }
            if v.settings.is_none() {
                t.broadcast(0, &mut v.data.bytes).map_err(processes)?;
                continue;
            }
            let n = mine.len() / span.local;
            let mut every = popart_ir::size::try_zeroed_bytes(n * all, "every replica's variable value")?;
            every[first * n..(first + span.local) * n].copy_from_slice(mine);
            t.exchange(mine, &mut every).map_err(processes)?;
            for r in (0..all).filter(|r| !local.contains(r)) {
                store_replica_value(v, r, all, &every[r * n..(r + 1) * n])?;
            }
        }
        Ok(())
    }
}

/// A transport failure, as a session error.
fn processes(e: crate::cpu::transport::TransportError) -> SessionError {
    SessionError::Processes(e.into())
}

/// Put replica `r`'s device value `value` of a replicated variable into its
/// host value (when the replica is a source of it) and its per-replica values.
fn store_replica_value(v: &mut HostVariable, r: usize, rf: usize, value: &[u8]) -> Result<()> {
    let Some(s) = &v.settings else { return Ok(()) };
    if s.is_source(r) {
        let (start, len) = s.replica_range(r);
        v.data.bytes[start..start + len].copy_from_slice(&value[..len]);
    }
    if s.retrieval_mode == popart_ir::RetrievalMode::AllReplicas {
        let n = value.len();
        if v.replica_values.len() != n * rf {
            v.replica_values = popart_ir::size::try_zeroed_bytes(n * rf, "the per-replica values of a variable")?;
        }
        v.replica_values[r * n..(r + 1) * n].copy_from_slice(value);
    }
    Ok(())
}

/// Replica `r`'s device value of a variable whose host value is `data`.
pub(super) fn replica_bytes<'a>(v: &'a HostVariable, r: usize) -> Result<std::borrow::Cow<'a, [u8]>> {
    match &v.settings {
        None => Ok(std::borrow::Cow::Borrowed(&v.data.bytes)),
        Some(s) => {
            let mut buf = popart_ir::size::try_zeroed_bytes(s.replica_info().nbytes(), "a replica's variable value")?;
            s.replica_value(r, &mut buf);
            Ok(std::borrow::Cow::Owned(buf))
        }
    }
}

/// The per-replica values of an all_replicas variable as a host tensor
/// `[replication_factor, *replica shape]`, or `None` when they were never read back.
pub(super) fn all_replica_values(v: &HostVariable, rf: usize) -> Option<HostTensor> {
    let s = v.settings.as_ref()?;
    if s.retrieval_mode != popart_ir::RetrievalMode::AllReplicas || v.replica_values.is_empty() {
        return None;
    }
    let info = s.replica_info();
    let mut shape = vec![rf];
    shape.extend_from_slice(&info.shape);
    Some(HostTensor { info: popart_ir::TensorInfo::new(info.dtype, shape), bytes: v.replica_values.clone() })
}

/// A failure of the device, as a session error.
fn device(e: impl Into<crate::cpu::CpuError>) -> SessionError {
    SessionError::from(e.into())
}
