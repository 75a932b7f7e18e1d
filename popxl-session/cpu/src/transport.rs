//! Replicas in other processes: the [`Transport`] collectives reach them
//! through, and the agreement every process reaches at the end of a step.
//!
//! A session whose replicas span several processes (PopXL's `popdist`: one
//! process per host or per group of replicas, `replication_factor = processes
//! x instance_replication_factor`) runs its own replicas as before and meets
//! the others' at collectives. The device never moves bytes between processes
//! itself: a [`Transport`] does, an existing engine (MPI, behind the `mpi`
//! feature: [`crate::mpi`]) or, for tests and for simulating processes in one,
//! [`ThreadTransport`].
//!
//! ## Faults
//!
//! The processes agree ([`agree`]: an exchange of [`Header`]s saying what
//! each is doing and whether it failed) when a session is built, at the start
//! of every run (after each has checked and bound its inputs) and, for
//! programs that may fail while running (checked indices, remote offsets,
//! custom kernels), before every collective and at the end of every run. A
//! process that fails (a bad input, a `Session::new` error, a run error)
//! sends a failed header at its next agreement, which is the one every other
//! process is waiting in: all of them return [`SpanError::RankFailed`] naming
//! it, instead of waiting forever, and restore their state as a failed run
//! does. Processes that disagree on what they are doing (different programs
//! or options) get [`SpanError::Desync`]. A program that cannot fail while
//! running meets the others only at its start agreement and its collectives'
//! data: it pays for no other agreement.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex};

/// A transport failed (the engine reported an error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("transport error: {0}")]
pub struct TransportError(pub String);

/// Moves bytes between the processes of a replicated session. Every process
/// calls the same methods in the same order (the collectives of one program,
/// run by every process).
pub trait Transport: Send + Sync + fmt::Debug {
    /// This process's rank, `0..size`.
    fn rank(&self) -> usize;
    /// Number of processes.
    fn size(&self) -> usize;
    /// Processes on this host (sharing its cores), at least 1.
    fn host_size(&self) -> usize {
        1
    }
    /// Every process contributes `send` (the same length on every process);
    /// on return, `recv` (`size x send.len()` bytes) holds process `p`'s bytes
    /// at `p x send.len()`, except this process's own slot, which is left as
    /// it was (the caller has its own bytes already).
    fn exchange(&self, send: &[u8], recv: &mut [u8]) -> Result<(), TransportError>;
    /// Process `root`'s `buf` into every process's `buf` (the same length everywhere).
    fn broadcast(&self, root: usize, buf: &mut [u8]) -> Result<(), TransportError>;

    /// All-to-all: `send` holds `size` equal parts, part `p` for process
    /// `p`; on return, part `p` of `recv` (as long as `send`) holds process
    /// `p`'s part for this process, except this process's own part, which is
    /// left as it was. The provided method goes through [`Transport::exchange`]
    /// (every process receives every part); an engine moves only the parts.
    fn exchange_parts(&self, send: &[u8], recv: &mut [u8]) -> Result<(), TransportError> {
        let (rank, size, n) = (self.rank(), self.size(), send.len());
        let part = parts(n, recv.len(), size)?;
        let mut all = vec![0u8; n * size];
        self.exchange(send, &mut all)?;
        for p in (0..size).filter(|&p| p != rank) {
            recv[p * part..(p + 1) * part].copy_from_slice(&all[p * n + rank * part..][..part]);
        }
        Ok(())
    }

    /// All-gather in place: `buf` holds `size` equal parts, this process's
    /// own at its rank; on return part `p` holds process `p`'s. The provided
    /// method goes through [`Transport::exchange`].
    fn gather_in_place(&self, buf: &mut [u8]) -> Result<(), TransportError> {
        let part = parts(buf.len(), buf.len(), self.size())?;
        let own = buf[self.rank() * part..][..part].to_vec();
        self.exchange(&own, buf)
    }
}

/// The length of each of `size` equal parts of `n` bytes, checking that a
/// receive buffer of `recv` bytes matches.
pub(crate) fn parts(n: usize, recv: usize, size: usize) -> Result<usize, TransportError> {
    if size == 0 || !n.is_multiple_of(size) || recv != n {
        return Err(TransportError(format!("{n} bytes (receiving {recv}) do not split into {size} equal parts")));
    }
    Ok(n / size)
}

/// Why a step that spans processes failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpanError {
    /// Another process failed; its own error is reported by that process.
    #[error("process rank {rank} of {size} failed (its own error is reported there)")]
    RankFailed {
        /// The lowest failing rank.
        rank: usize,
        /// Number of processes.
        size: usize,
    },
    /// The processes are not running the same program: at one exchange they
    /// were doing different things.
    #[error("the processes diverged: rank {rank} was {theirs} while this process was {ours}")]
    Desync {
        /// The first rank that disagrees.
        rank: usize,
        /// What it was doing.
        theirs: String,
        /// What this process was doing.
        ours: String,
    },
    /// The transport failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// What a process is doing at an exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A session was built; its programs check their collectives (`true`:
    /// they may fail on one process, so every collective and the end of every
    /// run is agreed on) or not. Every process must build the same.
    Ready(bool),
    /// The start of a run: this process's inputs are bound (or not: failed).
    Start,
    /// A collective publishing inputs of these byte counts.
    Collective([u64; 2]),
    /// The end of a run: the process has no more collectives in it.
    End,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Ready(checked) => write!(f, "ready (collectives checked: {checked})"),
            Step::Start => f.write_str("at the start of a run"),
            Step::Collective([a, b]) => write!(f, "in a collective of {a} + {b} input bytes"),
            Step::End => f.write_str("at the end of a run"),
        }
    }
}

/// The header of an exchange between processes: the step and whether the
/// process failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the process is doing.
    pub step: Step,
    /// The process failed (its step is then [`Step::End`]).
    pub failed: bool,
}

const HEADER_BYTES: usize = 32;

impl Header {
    fn encode(self) -> [u8; HEADER_BYTES] {
        let (kind, a, b) = match self.step {
            Step::Collective([a, b]) => (1u64, a, b),
            Step::End => (2, 0, 0),
            Step::Start => (3, 0, 0),
            Step::Ready(checked) => (4, u64::from(checked), 0),
        };
        let words = [kind, u64::from(self.failed), a, b];
        let mut out = [0u8; HEADER_BYTES];
        for (chunk, w) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Option<Header> {
        let word = |i: usize| bytes.get(8 * i..8 * i + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
        let step = match word(0)? {
            1 => Step::Collective([word(2)?, word(3)?]),
            2 => Step::End,
            3 => Step::Start,
            4 => Step::Ready(word(2)? != 0),
            _ => return None,
        };
        Some(Header { step, failed: word(1)? != 0 })
    }
}

/// Exchange headers with every process: `Ok` when every process is at
/// `ours` and none failed; otherwise the lowest failing rank (or the first
/// disagreeing one). `ours.failed` makes every process, this one included,
/// return [`SpanError::RankFailed`].
pub fn agree(transport: &dyn Transport, ours: Header) -> Result<(), SpanError> {
    let size = transport.size();
    let rank = transport.rank();
    // On the stack up to 64 processes: an agreement starts every run.
    let mut stack = [0u8; 64 * HEADER_BYTES];
    let mut heap = Vec::new();
    let all: &mut [u8] = if size <= 64 {
        &mut stack[..size * HEADER_BYTES]
    } else {
        heap.resize(size * HEADER_BYTES, 0);
        &mut heap
    };
    let mine = ours.encode();
    all[rank * HEADER_BYTES..(rank + 1) * HEADER_BYTES].copy_from_slice(&mine);
    transport.exchange(&mine, all)?;
    let header = |p: usize| Header::decode(&all[p * HEADER_BYTES..(p + 1) * HEADER_BYTES]);
    if let Some(rank) = (0..size).find(|&p| !matches!(header(p), Some(h) if !h.failed)) {
        return Err(SpanError::RankFailed { rank, size });
    }
    if let Some((rank, h)) = (0..size).map(|p| (p, header(p))).find(|(_, h)| h.is_some_and(|h| h.step != ours.step)) {
        let theirs = h.map_or_else(String::new, |h| h.step.to_string());
        return Err(SpanError::Desync { rank, theirs, ours: ours.step.to_string() });
    }
    Ok(())
}

/// A [`Transport`] between threads of one process: `ThreadTransport::group(n)`
/// gives the `n` ends, one per simulated process (each used by one thread at
/// a time). Tests use it to run a session per "process" without MPI; its
/// exchanges copy through a shared buffer.
#[derive(Clone)]
pub struct ThreadTransport {
    rank: usize,
    shared: Arc<Rendezvous>,
}

impl fmt::Debug for ThreadTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadTransport").field("rank", &self.rank).field("size", &self.shared.size).finish()
    }
}

struct Rendezvous {
    size: usize,
    state: Mutex<RendezvousState>,
    wake: Condvar,
}

struct RendezvousState {
    /// Each rank's contribution to the current exchange.
    slots: Vec<Option<Vec<u8>>>,
    /// Ranks that have read the current exchange.
    read: usize,
    /// Exchanges completed (all ranks read).
    generation: u64,
}

impl ThreadTransport {
    /// The `n` ends of a transport between `n` threads (`n >= 1`).
    pub fn group(n: usize) -> Vec<ThreadTransport> {
        let n = n.max(1);
        let shared = Arc::new(Rendezvous {
            size: n,
            state: Mutex::new(RendezvousState { slots: vec![None; n], read: 0, generation: 0 }),
            wake: Condvar::new(),
        });
        (0..n).map(|rank| ThreadTransport { rank, shared: shared.clone() }).collect()
    }

    /// Deposit `send`, wait for every rank's, and call `read` with all of them.
    fn rendezvous(&self, send: &[u8], read: impl FnOnce(&[Option<Vec<u8>>])) -> Result<(), TransportError> {
        let s = &self.shared;
        let mut st = s.state.lock().map_err(|_| TransportError("a rank panicked".into()))?;
        // Wait until the previous exchange is fully read (our slot is free).
        while st.slots[self.rank].is_some() {
            st = s.wake.wait(st).map_err(|_| TransportError("a rank panicked".into()))?;
        }
        st.slots[self.rank] = Some(send.to_vec());
        let generation = st.generation;
        s.wake.notify_all();
        while st.slots.iter().any(Option::is_none) && st.generation == generation {
            st = s.wake.wait(st).map_err(|_| TransportError("a rank panicked".into()))?;
        }
        read(&st.slots);
        st.read += 1;
        if st.read == s.size {
            st.read = 0;
            st.generation += 1;
            st.slots.iter_mut().for_each(|slot| *slot = None);
            s.wake.notify_all();
        } else {
            // Keep the slots until every rank has read them.
            while st.generation == generation {
                st = s.wake.wait(st).map_err(|_| TransportError("a rank panicked".into()))?;
            }
        }
        Ok(())
    }
}

impl Transport for ThreadTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn host_size(&self) -> usize {
        self.shared.size
    }

    fn exchange(&self, send: &[u8], recv: &mut [u8]) -> Result<(), TransportError> {
        let n = send.len();
        if recv.len() != n * self.shared.size {
            return Err(TransportError(format!(
                "receive buffer of {} bytes for {} x {n}",
                recv.len(),
                self.shared.size
            )));
        }
        let mut bad = None;
        self.rendezvous(send, |slots| {
            for (p, slot) in slots.iter().enumerate().filter(|&(p, _)| p != self.rank) {
                match slot {
                    Some(b) if b.len() == n => recv[p * n..(p + 1) * n].copy_from_slice(b),
                    _ => bad = Some(p),
                }
            }
        })?;
        match bad {
            Some(p) => Err(TransportError(format!("rank {p} sent a different length"))),
            None => Ok(()),
        }
    }

    fn broadcast(&self, root: usize, buf: &mut [u8]) -> Result<(), TransportError> {
        let mut bad = false;
        let send = if root == self.rank { buf.to_vec() } else { Vec::new() };
        self.rendezvous(&send, |slots| match slots.get(root) {
            Some(Some(b)) if b.len() == buf.len() => buf.copy_from_slice(b),
            _ => bad = true,
        })?;
        if bad {
            return Err(TransportError(format!("broadcast root {root} sent a different length")));
        }
        Ok(())
    }
}

/// The transport of a [`crate::replicas::Comm`] spanning processes: this
/// process's replicas are `first..first + local` of `local x size`.
#[derive(Clone, Debug)]
pub struct Span {
    /// The transport to the other processes.
    pub transport: Arc<dyn Transport>,
    /// Replicas of this process.
    pub local: usize,
}

impl Span {
    /// The global index of this process's first replica.
    pub fn first(&self) -> usize {
        self.transport.rank() * self.local
    }

    /// Replicas of all processes.
    pub fn global(&self) -> usize {
        self.transport.size() * self.local
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_transport_exchanges_and_agrees() {
        let ends = ThreadTransport::group(3);
        std::thread::scope(|s| {
            for t in &ends {
                s.spawn(move || {
                    for round in 0..20u8 {
                        let r = t.rank() as u8;
                        let mut recv = vec![0u8; 3 * 2];
                        t.exchange(&[r, round], &mut recv).unwrap();
                        for p in (0..3u8).filter(|&p| p != r) {
                            assert_eq!(&recv[2 * p as usize..2 * p as usize + 2], &[p, round]);
                        }
                        // All-to-all: process r sends [r, p] as its part for p.
                        let send: Vec<u8> = (0..3u8).flat_map(|p| [r, p]).collect();
                        let mut recv = vec![0xEEu8; 6];
                        t.exchange_parts(&send, &mut recv).unwrap();
                        for p in 0..3u8 {
                            let want = if p == r { [0xEE, 0xEE] } else { [p, r] };
                            assert_eq!(&recv[2 * p as usize..2 * p as usize + 2], &want);
                        }
                        let mut parts = vec![0u8; 6];
                        parts[2 * r as usize..2 * r as usize + 2].copy_from_slice(&[r, round]);
                        t.gather_in_place(&mut parts).unwrap();
                        assert_eq!(parts, (0..3u8).flat_map(|p| [p, round]).collect::<Vec<_>>());
                        assert!(t.exchange_parts(&[0; 5], &mut [0; 5]).is_err(), "5 bytes do not split in 3");
                        let mut b = if r == 1 { vec![round; 4] } else { vec![0; 4] };
                        t.broadcast(1, &mut b).unwrap();
                        assert_eq!(b, vec![round; 4]);
                    }
                    let ok = Header { step: Step::End, failed: false };
                    agree(t, ok).unwrap();
                    let failed = Header { step: Step::End, failed: t.rank() == 2 };
                    assert_eq!(agree(t, failed), Err(SpanError::RankFailed { rank: 2, size: 3 }));
                    let step = if t.rank() == 0 { Step::End } else { Step::Collective([4, 0]) };
                    let e = agree(t, Header { step, failed: false }).unwrap_err();
                    assert!(matches!(e, SpanError::Desync { .. }), "{e}");
                });
            }
        });
    }
}
