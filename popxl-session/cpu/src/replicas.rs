//! Replicas on the `cpu` device: the communicator collectives use and the
//! per-thread replica context.
//!
//! A replicated session runs one executor per replica, each on its own thread
//! (replica 0 on the caller's). The replicas run independently and meet only
//! at collectives: a collective kernel calls [`Comm::exchange`], which
//! 1. publishes the replica's input and output pointers,
//! 2. waits until every replica has published (a barrier),
//! 3. runs the kernel's closure, which may read every replica's input and
//!    write any part of every replica's output that it alone writes (kernels
//!    split the work by the replica's position in its group, so each element
//!    is computed by exactly one replica, in a fixed order: results do not
//!    depend on thread timing),
//! 4. waits until every replica has finished its part (a second barrier), so
//!    no replica reuses its buffers while another still reads them.
//!
//! Every replica executes the same program, so they reach the same collectives
//! in the same order. When one replica fails (a kernel's run-time check), it
//! [aborts](Comm::abort) the communicator: replicas waiting in or arriving at
//! an exchange get [`Aborted`] and stop too, so a failure never deadlocks.
//!
//! A kernel finds its replica through [`current`], set by [`enter`] for the
//! duration of a replica's execution; without one (a session with one
//! replica) collectives act on a single replica.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex};

use crate::transport::{self, Header, Span, SpanError, Step};
use std::time::{Duration, Instant};

/// The collective was abandoned because another replica failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("another replica failed: the collective was abandoned")]
pub struct Aborted;

/// How long a waiting replica spins before yielding, and yields before parking.
const SPIN: Duration = Duration::from_micros(20);
const YIELD: Duration = Duration::from_micros(200);

/// A reusable barrier of `n` threads that can be aborted.
struct Barrier {
    n: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    aborted: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Barrier {
    fn new(n: usize) -> Self {
        Barrier {
            n,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            aborted: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    fn wait(&self) -> Result<(), Aborted> {
        if self.aborted.load(SeqCst) {
            return Err(Aborted);
        }
        let gen = self.generation.load(SeqCst);
        if self.arrived.fetch_add(1, SeqCst) + 1 == self.n {
            self.arrived.store(0, SeqCst);
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.generation.fetch_add(1, SeqCst);
            self.wake.notify_all();
            return Ok(());
        }
        let start = Instant::now();
        loop {
            if self.generation.load(SeqCst) != gen {
                return Ok(());
            }
            if self.aborted.load(SeqCst) {
                return Err(Aborted);
            }
            let waited = start.elapsed();
            if waited < SPIN {
                std::hint::spin_loop();
            } else if waited < YIELD {
                std::thread::yield_now();
            } else {
                let g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                if self.generation.load(SeqCst) == gen && !self.aborted.load(SeqCst) {
                    let _ = self.wake.wait_timeout(g, Duration::from_millis(1));
                }
            }
        }
    }

    fn abort(&self) {
        self.aborted.store(true, SeqCst);
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.wake.notify_all();
    }

    fn reset(&mut self) {
        *self.arrived.get_mut() = 0;
        *self.aborted.get_mut() = false;
    }
}

/// The communicator of the replicas of one session.
pub struct Comm {
    /// The barrier of this process's replicas.
    barrier: Barrier,
    /// Per replica (of every process), the input pointers of the current
    /// exchange: this process's own buffers, mirrors of the others'.
    inputs: Vec<[AtomicPtr<u8>; MAX_INPUTS]>,
    /// Per replica, the output pointer (null for other processes' replicas).
    outputs: Vec<AtomicPtr<u8>>,
    /// Per replica, the bytes of its output when the output is the
    /// concatenation of every replica's input ([`Comm::exchange_gather`]), else 0.
    gather_bytes: Vec<AtomicUsize>,
    /// The other processes, when the replicas span several.
    span: Option<Spanning>,
}

/// The cross-process part of a [`Comm`].
struct Spanning {
    span: Span,
    /// The programs may fail while running: agree before every collective
    /// and at the end of every run.
    checked: bool,
    /// Used by this process's first replica between barriers only.
    state: Mutex<SpanState>,
}

#[derive(Default)]
struct SpanState {
    /// This process's inputs, packed for the transport.
    send: Vec<u8>,
    /// Every process's packed inputs (this process's slot unused).
    mirror: Vec<u8>,
    /// A failure found at an exchange of the current step: the exchange that
    /// told every process, so the step ends without another.
    failure: Option<SpanError>,
}

/// Input pointers one replica can publish in an exchange.
pub const MAX_INPUTS: usize = 2;

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm").field("replicas", &self.inputs.len()).field("local", &self.barrier.n).finish()
    }
}

impl Comm {
    /// A communicator for `replicas` replicas (at least 1), all in this process.
    pub fn new(replicas: usize) -> Self {
        let n = replicas.max(1);
        let null = || AtomicPtr::new(std::ptr::null_mut());
        Comm {
            barrier: Barrier::new(n),
            inputs: (0..n).map(|_| [null(), null()]).collect(),
            outputs: (0..n).map(|_| null()).collect(),
            gather_bytes: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            span: None,
        }
    }

    /// A communicator for `span.local` replicas in this process (at least 1),
    /// replicas `span.first()..` of the `span.global()` replicas of every
    /// process ([`crate::transport`]).
    pub fn spanning(span: Span) -> Self {
        let span = Span { local: span.local.max(1), ..span };
        let null = || AtomicPtr::new(std::ptr::null_mut());
        let n = span.global();
        Comm {
            barrier: Barrier::new(span.local),
            inputs: (0..n).map(|_| [null(), null()]).collect(),
            outputs: (0..n).map(|_| null()).collect(),
            gather_bytes: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            span: Some(Spanning { span, checked: true, state: Mutex::new(SpanState::default()) }),
        }
    }

    /// Number of replicas (of every process).
    pub fn num_replicas(&self) -> usize {
        self.inputs.len()
    }

    /// The processes the replicas span, if more than this one.
    pub fn span(&self) -> Option<&Span> {
        self.span.as_ref().map(|s| &s.span)
    }

    /// The global indices of this process's replicas.
    pub fn local_replicas(&self) -> std::ops::Range<usize> {
        match &self.span {
            Some(s) => s.span.first()..s.span.first() + s.span.local,
            None => 0..self.inputs.len(),
        }
    }

    /// Whether the programs may fail while running (default true): when not,
    /// the processes agree only at the start of a run, not before every
    /// collective and at the end ([`crate::transport`]).
    pub fn set_checked(&mut self, checked: bool) {
        if let Some(s) = &mut self.span {
            s.checked = checked;
        }
    }

    /// Whether the processes agree before every collective and at the end of
    /// every run (false within one process).
    pub fn checked(&self) -> bool {
        self.span.as_ref().is_some_and(|s| s.checked)
    }

    /// Start a run of a communicator spanning processes: tell every process
    /// whether this one is ready (`ok`: its inputs checked and bound) and
    /// learn theirs. Every process calls it once per run before running.
    pub fn start(&mut self, ok: bool) -> Result<(), SpanError> {
        let Some(s) = &mut self.span else { return Ok(()) };
        transport::agree(&*s.span.transport, Header { step: Step::Start, failed: !ok })
    }

    /// Make the next execution start afresh (after an abort).
    pub fn reset(&mut self) {
        self.barrier.reset();
        if let Some(s) = &mut self.span {
            s.state.get_mut().unwrap_or_else(|e| e.into_inner()).failure = None;
        }
    }

    /// Abandon every exchange in progress or to come until [`Comm::reset`].
    pub fn abort(&self) {
        self.barrier.abort();
    }

    /// End a run of a communicator spanning processes: unless an exchange of
    /// the run already found a failure (returned here), tell every process
    /// whether this one's run succeeded (`ok`) and learn theirs (when
    /// [`Comm::checked`]; a run that cannot fail ends without agreement).
    /// Every process calls it once per run, after its replicas have stopped.
    /// Nothing to do within one process.
    pub fn finish(&mut self, ok: bool) -> Result<(), SpanError> {
        let Some(s) = &mut self.span else { return Ok(()) };
        let st = s.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = st.failure.take() {
            return Err(e);
        }
        if !s.checked {
            return Ok(());
        }
        transport::agree(&*s.span.transport, Header { step: Step::End, failed: !ok })
    }

    /// One collective step, called by every replica with its own pointers:
    /// after all replicas have published theirs, `work(peers)` runs on each
    /// replica with the pointers of all replicas ([`Peers`]), and
    /// the call returns when every replica's `work` has returned.
    ///
    /// `work` must only write output bytes that no other replica's `work`
    /// writes or reads (split the elements by the replica's position in its
    /// group, or, when [`Peers::solo`], only its own output), and may read any
    /// input bytes that no replica writes.
    ///
    /// # Safety
    /// `input` is valid for reads of `in_bytes` bytes until the call returns
    /// (the same count on every replica).
    pub unsafe fn exchange(
        &self,
        replica: usize,
        input: *const u8,
        in_bytes: usize,
        output: *mut u8,
        work: impl FnOnce(Peers<'_>),
    ) -> Result<(), Aborted> {
        // SAFETY: the caller's contract; the second input is empty.
        unsafe { self.exchange_inputs(replica, [input, std::ptr::null()], [in_bytes, 0], output, work) }
    }

    /// [`Comm::exchange`] for an all-gather over every replica: `output`
    /// (`out_bytes`, at least `num_replicas x in_bytes`) is to hold every
    /// replica's input in replica order, so the other processes' inputs may be
    /// received straight into their places in it ([`Peers::input`] then points
    /// there: copying it onto itself is to be skipped).
    ///
    /// # Safety
    /// As [`Comm::exchange`]; `output` is valid for writes of `out_bytes` bytes
    /// and overlaps no input.
    pub unsafe fn exchange_gather(
        &self,
        replica: usize,
        input: *const u8,
        in_bytes: usize,
        output: *mut u8,
        out_bytes: usize,
        work: impl FnOnce(Peers<'_>),
    ) -> Result<(), Aborted> {
        if let Some(slot) = self.gather_bytes.get(replica) {
            slot.store(out_bytes, SeqCst);
        }
        // SAFETY: the caller's contract.
        let r = unsafe { self.exchange_inputs(replica, [input, std::ptr::null()], [in_bytes, 0], output, work) };
        if let Some(slot) = self.gather_bytes.get(replica) {
            slot.store(0, SeqCst);
        }
        r
    }

    /// [`Comm::exchange`] publishing [`MAX_INPUTS`] input pointers
    /// ([`Peers::input_at`]).
    ///
    /// # Safety
    /// Each `inputs[i]` is valid for reads of `in_bytes[i]` bytes until the
    /// call returns (the same counts on every replica).
    pub unsafe fn exchange_inputs(
        &self,
        replica: usize,
        inputs: [*const u8; MAX_INPUTS],
        in_bytes: [usize; MAX_INPUTS],
        output: *mut u8,
        work: impl FnOnce(Peers<'_>),
    ) -> Result<(), Aborted> {
        if !self.local_replicas().contains(&replica) {
            return Err(Aborted);
        }
        for (slot, &p) in self.inputs[replica].iter().zip(&inputs) {
            slot.store(p as *mut u8, SeqCst);
        }
        self.outputs[replica].store(output, SeqCst);
        self.barrier.wait()?;
        let Some(s) = &self.span else {
            work(Peers { comm: self, solo: false });
            return self.barrier.wait();
        };
        if replica == s.span.first() {
            // SAFETY: every local replica published inputs of `in_bytes`
            // (the caller's contract) and waits at the barrier below.
            if unsafe { self.cross(s, in_bytes) }.is_err() {
                self.barrier.abort();
            }
        }
        self.barrier.wait()?;
        work(Peers { comm: self, solo: true });
        self.barrier.wait()
    }

    /// Whether [`Comm::all_reduce_split`] applies to an all-reduce of
    /// `elems` elements over every replica: the replicas span processes, one
    /// per process, and the elements split into one equal part per process.
    pub fn splits_all_reduce(&self, elems: usize) -> bool {
        self.span.as_ref().is_some_and(|s| s.span.local == 1 && elems.is_multiple_of(s.span.transport.size()))
    }

    /// An all-reduce over every replica, one per process (see
    /// [`Comm::splits_all_reduce`]), as MPI's own does it for large buffers:
    /// a reduce-scatter, then an all-gather. Each process receives the
    /// others' inputs for its own part only ([`Transport::exchange_parts`]),
    /// reduces that part with `reduce(src, dst)`, where `src(p)` is process
    /// (= replica) `p`'s input of the part, in order, and `dst` the part of
    /// `output`, then receives the other reduced parts into `output`
    /// ([`Transport::gather_in_place`]). Each element is reduced over the
    /// replicas in replica order, as [`Comm::exchange`] does.
    ///
    /// [`Transport::exchange_parts`]: crate::transport::Transport::exchange_parts
    /// [`Transport::gather_in_place`]: crate::transport::Transport::gather_in_place
    ///
    /// # Safety
    /// `input` is valid for reads and `output` for writes of `bytes` bytes
    /// (the same count on every process) until the call returns; they are
    /// the same buffer or do not overlap.
    pub unsafe fn all_reduce_split(
        &self,
        replica: usize,
        input: *const u8,
        output: *mut u8,
        bytes: usize,
        reduce: impl FnOnce(&dyn Fn(usize) -> *const u8, *mut u8),
    ) -> Result<(), Aborted> {
        let Some(s) = self.span.as_ref().filter(|s| s.span.local == 1) else { return Err(Aborted) };
        if !self.local_replicas().contains(&replica) {
            return Err(Aborted);
        }
        self.barrier.wait()?;
        let mut guard = s.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *guard;
        let transport = &*s.span.transport;
        let (size, rank) = (transport.size(), transport.rank());
        let part = bytes / size.max(1);
        let result = (|| {
            if s.checked {
                transport::agree(transport, Header { step: Step::Collective([bytes as u64, 0]), failed: false })?;
            }
            if st.mirror.len() < bytes {
                st.mirror.resize(bytes, 0);
            }
            // SAFETY: `input` holds `bytes` bytes, unwritten until the reduction
            // (this method's contract).
            let send = unsafe { std::slice::from_raw_parts(input, bytes) };
            transport.exchange_parts(send, &mut st.mirror[..bytes])?;
            let mirror = st.mirror.as_ptr();
            let src = |p: usize| if p == rank { input.wrapping_add(p * part) } else { mirror.wrapping_add(p * part) };
            reduce(&src, output.wrapping_add(rank * part));
            // SAFETY: `output` holds `bytes` bytes, no longer read through
            // `input` (the reduction is done) and used by no one else meanwhile.
            transport.gather_in_place(unsafe { std::slice::from_raw_parts_mut(output, bytes) })?;
            Ok::<(), SpanError>(())
        })();
        if let Err(e) = result {
            st.failure = Some(e);
            self.barrier.abort();
        }
        drop(guard);
        self.barrier.wait()
    }

    /// The cross-process part of an exchange, run by this process's first
    /// replica while the others wait: agree on the step, send this process's
    /// inputs to every other process and point the other processes' replicas'
    /// inputs at the copies received.
    ///
    /// # Safety
    /// Every local replica's published inputs hold `in_bytes` bytes.
    unsafe fn cross(&self, s: &Spanning, in_bytes: [usize; MAX_INPUTS]) -> Result<(), ()> {
        let mut st = s.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *st;
        let fail = |st: &mut SpanState, e: SpanError| {
            st.failure = Some(e);
            Err(())
        };
        let transport = &*s.span.transport;
        let step = Step::Collective(in_bytes.map(|b| b as u64));
        if s.checked {
            if let Err(e) = transport::agree(transport, Header { step, failed: false }) {
                return fail(st, e);
            }
        }
        let per_replica: usize = in_bytes.iter().sum();
        let (local, size, rank) = (s.span.local, transport.size(), transport.rank());
        let block = local * per_replica;
        if st.mirror.len() < block * size {
            st.mirror.resize(block * size, 0);
        }
        let first = s.span.first();
        let ptr = |r: usize, k: usize| self.inputs[r][k].load(SeqCst) as *const u8;
        let sent = if local == 1 && in_bytes[1] == 0 {
            // One replica, one input: send it in place.
            // SAFETY: the published input holds `in_bytes[0]` bytes (this method's contract).
            unsafe { std::slice::from_raw_parts(ptr(first, 0), in_bytes[0]) }
        } else {
            st.send.clear();
            for r in first..first + local {
                for (k, &n) in in_bytes.iter().enumerate() {
                    // SAFETY: as above, for each local replica and input.
                    st.send.extend_from_slice(unsafe { std::slice::from_raw_parts(ptr(r, k), n) });
                }
            }
            &st.send[..]
        };
        // An all-gather over every replica of one replica per process receives
        // straight into its output (laid out as the receive buffer).
        let gather = self.gather_bytes[first].load(SeqCst);
        let (recv, base) = if local == 1 && in_bytes[1] == 0 && gather >= block * size {
            let out = self.outputs[first].load(SeqCst);
            // SAFETY: the published output holds `gather` bytes, overlaps no input
            // and nobody else touches it until the exchange ends (`exchange_gather`).
            (unsafe { std::slice::from_raw_parts_mut(out, block * size) }, out)
        } else {
            let base = st.mirror.as_mut_ptr();
            (&mut st.mirror[..block * size], base)
        };
        if let Err(e) = transport.exchange(sent, recv) {
            return fail(st, e.into());
        }
        for p in (0..size).filter(|&p| p != rank) {
            for i in 0..local {
                let mut off = p * block + i * per_replica;
                for (k, &n) in in_bytes.iter().enumerate() {
                    self.inputs[p * local + i][k].store(base.wrapping_add(off), SeqCst);
                    off += n;
                }
            }
        }
        Ok(())
    }
}

/// The pointers every replica published for one [`Comm::exchange`].
#[derive(Clone, Copy)]
pub struct Peers<'a> {
    comm: &'a Comm,
    solo: bool,
}

impl Peers<'_> {
    /// The replicas span processes: each replica computes its whole output
    /// from every member's inputs (mirrored from the other processes) and
    /// writes no other replica's output. Computing every element in the same
    /// order as the split work does keeps the results independent of how the
    /// replicas are placed.
    pub fn solo(&self) -> bool {
        self.solo
    }

    /// Replica `r`'s input pointer (null for `r` out of range).
    pub fn input(&self, r: usize) -> *const u8 {
        self.input_at(r, 0)
    }

    /// Replica `r`'s input pointer `i` (null for `r` or `i` out of range).
    pub fn input_at(&self, r: usize, i: usize) -> *const u8 {
        self.comm.inputs.get(r).and_then(|p| p.get(i)).map_or(std::ptr::null(), |p| p.load(SeqCst) as *const u8)
    }

    /// Replica `r`'s output pointer (null for `r` out of range or in another process).
    pub fn output(&self, r: usize) -> *mut u8 {
        self.comm.outputs.get(r).map_or(std::ptr::null_mut(), |p| p.load(SeqCst))
    }
}

/// The replica a thread is executing, for kernels ([`current`]).
#[derive(Clone, Copy, Debug)]
pub struct ReplicaCtx<'a> {
    /// This replica's index, `0..num_replicas`.
    pub index: usize,
    /// The communicator of all replicas.
    pub comm: &'a Comm,
}

impl ReplicaCtx<'_> {
    /// Number of replicas (of every process).
    pub fn num_replicas(&self) -> usize {
        self.comm.num_replicas()
    }
}

thread_local! {
    static CURRENT: Cell<Option<(usize, *const Comm)>> = const { Cell::new(None) };
}

/// Run `f` as replica `index` of `comm`: kernels called inside see it through [`current`].
pub fn enter<R>(index: usize, comm: &Comm, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<(usize, *const Comm)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.replace(Some((index, comm as *const Comm)))));
    f()
}

/// Call `f` with the replica the current thread executes (`None` outside a
/// replicated execution).
pub fn current<R>(f: impl FnOnce(Option<ReplicaCtx<'_>>) -> R) -> R {
    match CURRENT.with(Cell::get) {
        // SAFETY: `enter` sets the pointer from a reference that outlives its
        // closure and restores the previous value when the closure returns; the
        // context handed to `f` does not outlive this call.
        Some((index, comm)) => f(Some(ReplicaCtx { index, comm: unsafe { &*comm } })),
        None => f(None),
    }
}

/// The index of the replica the current thread executes (0 outside a replicated execution).
pub fn current_index() -> usize {
    CURRENT.with(Cell::get).map_or(0, |(i, _)| i)
}

/// The group of one replica under a constant grouping `(stride, group_size)`:
/// its members are `member(0) < member(1) < ... < member(size - 1)` and the
/// replica is `member(index)` (computed in closed form, no allocation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupPos {
    /// The group's first replica.
    pub base: usize,
    /// Distance between consecutive members.
    pub stride: usize,
    /// Members in the group.
    pub size: usize,
    /// The replica's position in its group.
    pub index: usize,
}

impl GroupPos {
    /// The group of `replica` under `(stride, group_size)` over `num_replicas`
    /// replicas; `None` when the grouping does not partition the replicas (see
    /// [`popart_ir::ReplicaGrouping::new`]) or `replica` is out of range.
    pub fn of(num_replicas: usize, stride: usize, group_size: usize, replica: usize) -> Option<GroupPos> {
        let stride = if group_size == 1 { 1 } else { stride };
        let span = stride.checked_mul(group_size)?;
        if stride == 0 || group_size == 0 || replica >= num_replicas || !num_replicas.is_multiple_of(span) {
            return None;
        }
        let base = replica / span * span + replica % stride;
        Some(GroupPos { base, stride, size: group_size, index: (replica / stride) % group_size })
    }

    /// The `i`-th member.
    pub fn member(&self, i: usize) -> usize {
        self.base + i * self.stride
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_sums_in_replica_order_and_aborts_release_waiters() {
        let comm = Comm::new(4);
        let data: Vec<Vec<f32>> = (0..4).map(|r| (0..8).map(|i| (r * 10 + i) as f32).collect()).collect();
        let mut outs = vec![vec![0f32; 8]; 4];
        let out_ptrs: Vec<usize> = outs.iter_mut().map(|o| o.as_mut_ptr() as usize).collect();
        std::thread::scope(|s| {
            for r in 0..4 {
                let (comm, data, out) = (&comm, &data, out_ptrs[r]);
                s.spawn(move || {
                    // Replica r reduces elements 2r, 2r+1 for everyone.
                    let work = |peers: Peers<'_>| {
                        for e in 2 * r..2 * r + 2 {
                            // SAFETY: every pointer holds 8 f32s; element e is written by replica r only.
                            let sum: f32 = (0..4).map(|p| unsafe { *(peers.input(p) as *const f32).add(e) }).sum();
                            for p in 0..4 {
                                // SAFETY: as above.
                                unsafe { *(peers.output(p) as *mut f32).add(e) = sum }
                            }
                        }
                    };
                    // SAFETY: each input holds 8 f32s for the whole exchange.
                    unsafe { comm.exchange(r, data[r].as_ptr() as *const u8, 32, out as *mut u8, work) }.unwrap();
                });
            }
        });
        let expected: Vec<f32> = (0..8).map(|i| (0..4).map(|r| (r * 10 + i) as f32).sum()).collect();
        for o in &outs {
            assert_eq!(o, &expected);
        }
        let comm = Comm::new(2);
        std::thread::scope(|s| {
            let c = &comm;
            // SAFETY: no input bytes.
            let waiter = s.spawn(move || unsafe { c.exchange(0, std::ptr::null(), 0, std::ptr::null_mut(), |_| {}) });
            std::thread::sleep(Duration::from_millis(5));
            comm.abort();
            assert_eq!(waiter.join().unwrap(), Err(Aborted));
        });
    }

    #[test]
    fn groups_follow_the_grouping() {
        for (rf, s, g) in [(8, 2, 2), (8, 1, 4), (8, 4, 2), (8, 2, 4), (4, 1, 1), (6, 3, 2), (1, 1, 1)] {
            let rg = popart_ir::ReplicaGrouping::new(rf, s, g).unwrap();
            for r in 0..rf {
                let pos = GroupPos::of(rf, s, g, r).unwrap();
                let members: Vec<usize> = (0..pos.size).map(|i| pos.member(i)).collect();
                assert_eq!(members, rg.members(rg.group_at(r)), "rf {rf} ({s},{g}) replica {r}");
                assert_eq!(pos.member(pos.index), r);
            }
        }
        assert_eq!(GroupPos::of(8, 3, 2, 0), None);
        assert_eq!(GroupPos::of(8, 1, 2, 8), None);
    }
}
