//! The [`Transport`] over MPI (the `mpi` feature): replicas in several
//! processes, on one host or many, started by `mpirun` as `poprun` starts
//! PopXL's. The bytes move through the MPI library (`rsmpi` over Open MPI or
//! any other implementation); this module only calls it.
//!
//! A program calls [`init`] once and keeps the returned [`Mpi`] alive while
//! it uses sessions (dropping it finalizes MPI); sessions whose IR spans
//! processes ([`popart_ir::Ir::instances`]) then use [`world`]'s transport.

use std::sync::Mutex;

use mpi::collective::{CommunicatorCollectives, Root};
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::Threading;

use crate::transport::{Transport, TransportError};

/// MPI, initialized: finalized when dropped.
pub struct Mpi {
    _universe: Universe,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mpi")
    }
}

/// Initialize MPI (with at least serialized threading: the transport
/// serializes its calls itself). Errors when MPI was already initialized or
/// the library offers only single-threaded use.
pub fn init() -> Result<Mpi, TransportError> {
    let (universe, provided) = mpi::initialize_with_threading(Threading::Serialized)
        .ok_or_else(|| TransportError("MPI is already initialized".into()))?;
    if provided < Threading::Serialized {
        return Err(TransportError(format!("the MPI library offers {provided:?} threading, not Serialized")));
    }
    Ok(Mpi { _universe: universe })
}

/// The transport between every process of `MPI_COMM_WORLD`, or `None` when
/// MPI is not initialized ([`init`]).
pub fn world() -> Option<MpiTransport> {
    if !mpi::environment::is_initialized() || mpi::environment::is_finalized() {
        return None;
    }
    let comm = SimpleCommunicator::world();
    let host = comm.split_shared(comm.rank());
    let host_size = usize::try_from(host.size()).unwrap_or(1).max(1);
    Some(MpiTransport {
        rank: usize::try_from(comm.rank()).unwrap_or(0),
        size: usize::try_from(comm.size()).unwrap_or(1).max(1),
        host_size,
        comm: Mutex::new(comm),
    })
}

/// A [`Transport`] over an MPI communicator.
pub struct MpiTransport {
    rank: usize,
    size: usize,
    host_size: usize,
    /// Every call holds the lock: MPI is used serialized.
    comm: Mutex<SimpleCommunicator>,
}

impl std::fmt::Debug for MpiTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiTransport").field("rank", &self.rank).field("size", &self.size).finish()
    }
}

// SAFETY: the communicator is a handle MPI lets any thread use when calls are
// serialized (`init` asks for `Threading::Serialized`), and every use goes
// through the mutex.
unsafe impl Send for MpiTransport {}
// SAFETY: as above.
unsafe impl Sync for MpiTransport {}

/// MPI counts are `i32`: larger messages are refused.
fn count(n: usize) -> Result<(), TransportError> {
    match i32::try_from(n) {
        Ok(_) => Ok(()),
        Err(_) => Err(TransportError(format!("a message of {n} bytes exceeds MPI's 2^31 - 1 element count"))),
    }
}

/// The pairwise rounds of `size` processes seen from `rank`: in round `s`,
/// send to `rank + s` and receive from `rank - s` (with `MPI_Sendrecv`: no
/// deadlock, nothing allocated).
fn rounds(rank: usize, size: usize) -> impl Iterator<Item = (usize, usize)> {
    (1..size).map(move |s| ((rank + s) % size, (rank + size - s) % size))
}

/// `send` to process `to` while receiving `recv` from process `from`.
fn sendrecv(comm: &SimpleCommunicator, send: &[u8], to: usize, recv: &mut [u8], from: usize) {
    mpi::point_to_point::send_receive_into(
        send,
        &comm.process_at_rank(to as i32),
        recv,
        &comm.process_at_rank(from as i32),
    );
}

impl MpiTransport {
    /// Processes of this communicator on this host.
    pub fn host_size(&self) -> usize {
        self.host_size
    }

    /// `MPI_Barrier` of every process.
    pub fn barrier(&self) {
        self.with_comm(|comm| comm.barrier());
    }

    /// Run `f` with the communicator (serialized).
    pub fn with_comm<R>(&self, f: impl FnOnce(&SimpleCommunicator) -> R) -> R {
        let comm = self.comm.lock().unwrap_or_else(|e| e.into_inner());
        f(&comm)
    }
}

impl Transport for MpiTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn host_size(&self) -> usize {
        self.host_size
    }

    fn exchange(&self, send: &[u8], recv: &mut [u8]) -> Result<(), TransportError> {
        let n = send.len();
        if recv.len() != n * self.size {
            return Err(TransportError(format!("receive buffer of {} bytes for {} x {n}", recv.len(), self.size)));
        }
        count(n)?;
        if n == 0 {
            return Ok(());
        }
        self.with_comm(|comm| {
            for (to, from) in rounds(self.rank, self.size) {
                sendrecv(comm, send, to, &mut recv[from * n..(from + 1) * n], from);
            }
        });
        Ok(())
    }

    fn exchange_parts(&self, send: &[u8], recv: &mut [u8]) -> Result<(), TransportError> {
        let (rank, size) = (self.rank, self.size);
        let part = crate::transport::parts(send.len(), recv.len(), size)?;
        count(part)?;
        if part == 0 {
            return Ok(());
        }
        self.with_comm(|comm| {
            for (to, from) in rounds(rank, size) {
                sendrecv(comm, &send[to * part..(to + 1) * part], to, &mut recv[from * part..(from + 1) * part], from);
            }
        });
        Ok(())
    }

    fn gather_in_place(&self, buf: &mut [u8]) -> Result<(), TransportError> {
        let (rank, size) = (self.rank, self.size);
        let part = crate::transport::parts(buf.len(), buf.len(), size)?;
        count(part)?;
        if part == 0 {
            return Ok(());
        }
        self.with_comm(|comm| {
            for (to, from) in rounds(rank, size) {
                // This process's part and process `from`'s, disjoint (`from != rank`).
                let (own, theirs) = if rank < from {
                    let (lo, hi) = buf.split_at_mut(from * part);
                    (&lo[rank * part..(rank + 1) * part], &mut hi[..part])
                } else {
                    let (lo, hi) = buf.split_at_mut(rank * part);
                    (&hi[..part], &mut lo[from * part..(from + 1) * part])
                };
                sendrecv(comm, own, to, theirs, from);
            }
        });
        Ok(())
    }

    fn broadcast(&self, root: usize, buf: &mut [u8]) -> Result<(), TransportError> {
        count(buf.len())?;
        if root >= self.size {
            return Err(TransportError(format!("broadcast root {root} of {} processes", self.size)));
        }
        self.with_comm(|comm| comm.process_at_rank(root as i32).broadcast_into(buf));
        Ok(())
    }
}

/// `MPI_Allreduce` (sum) of `f32`s: the MPI library's own collective, for
/// the collective benchmark's baseline.
pub fn all_reduce_sum_f32(t: &MpiTransport, send: &[f32], recv: &mut [f32]) {
    t.with_comm(|comm| comm.all_reduce_into(send, recv, mpi::collective::SystemOperation::sum()));
}

/// `MPI_Allgather` of bytes: the MPI library's own collective, for the
/// collective benchmark's baseline.
pub fn all_gather_bytes(t: &MpiTransport, send: &[u8], recv: &mut [u8]) {
    t.with_comm(|comm| comm.all_gather_into(send, recv));
}

/// `MPI_Reduce_scatter_block` (sum) of `f32`s: the MPI library's own
/// collective, for the collective benchmark's baseline.
pub fn reduce_scatter_sum_f32(t: &MpiTransport, send: &[f32], recv: &mut [f32]) {
    t.with_comm(|comm| comm.reduce_scatter_block_into(send, recv, mpi::collective::SystemOperation::sum()));
}
