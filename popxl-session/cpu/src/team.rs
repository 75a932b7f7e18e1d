//! The `cpu` device's worker team: fork-join parallelism for kernels with a
//! dispatch latency of well under a microsecond.
//!
//! A training step runs dozens of kernels back to back, several of them split
//! over threads. A general-purpose pool puts idle workers to sleep within tens of
//! microseconds, and waking one costs about as much again on every split kernel.
//! The team instead keeps its workers spinning for [`SPIN`] after their last
//! task (a whole step and the host work between steps), then parks them.
//!
//! - [`run`] executes `task(0..n)` on the calling thread and the workers, tasks
//!   claimed dynamically, and returns when all are done (borrowed data is safe,
//!   as with scoped threads).
//! - One job at a time: a caller that finds the team busy (another session on
//!   another thread, or a kernel nested inside a task) runs its tasks itself,
//!   sequentially, so the team can never deadlock or oversubscribe the cores.
//! - Team size: `POPXL_NUM_THREADS` if set, else the available parallelism;
//!   [`with_max_threads`] caps it for the current thread (benchmarks, tests).
//! - Tracing ([`set_tracing`]): each worker records the span of every job it
//!   joins ([`worker_spans`]) on the clock of [`clock_ns`], into a buffer
//!   reserved when tracing is turned on (one relaxed load per job when off).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking.
pub const SPIN: Duration = Duration::from_millis(2);

/// One published job.
struct Job<'a> {
    task: &'a (dyn Fn(usize) + Sync),
    n: usize,
    /// Workers allowed to join (beyond the caller).
    max_workers: usize,
    /// Next unclaimed task.
    next: AtomicUsize,
    /// Tasks finished.
    done: AtomicUsize,
    /// Workers that joined.
    joined: AtomicUsize,
    /// A task panicked (re-raised on the caller).
    panicked: AtomicBool,
}

impl Job<'_> {
    /// Claim and run tasks until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, SeqCst);
            if i >= self.n {
                return;
            }
            // A panicking task still counts as done, so nobody waits forever.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.task)(i))).is_err() {
                self.panicked.store(true, SeqCst);
            }
            self.done.fetch_add(1, SeqCst);
        }
    }
}

struct Shared {
    /// Bumped each time a job is published.
    epoch: AtomicU64,
    /// The current job (a `*const Job` on the caller's stack) or null.
    job: AtomicPtr<()>,
    /// Workers currently holding the job pointer.
    users: AtomicUsize,
    /// Workers parked on `wake`.
    sleeping: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    /// Held by the caller for the duration of a job.
    submit: Mutex<()>,
    /// Job spans `(start_ns, end_ns)` of worker `i + 1`, at index `i`, while tracing.
    spans: Vec<Mutex<Vec<(u64, u64)>>>,
}

/// Workers record their job spans.
static TRACING: AtomicBool = AtomicBool::new(false);

/// Nanoseconds since the first call in this process (a monotonic clock shared
/// by the executor's kernel spans and the workers' job spans).
pub fn clock_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// One job a worker took part in, while tracing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerSpan {
    /// The worker (1 to the team size - 1; the calling thread is 0 and records nothing).
    pub worker: usize,
    /// When it joined the job ([`clock_ns`]).
    pub start_ns: u64,
    /// When it found no task left.
    pub end_ns: u64,
}

/// Turn the workers' job spans on with room for `capacity` spans per worker
/// (earlier spans are cleared), or off (`None`, freeing them). Spans beyond
/// the room are dropped: a worker never allocates while tracing.
pub fn set_tracing(capacity: Option<usize>) {
    let t = team();
    TRACING.store(false, SeqCst);
    for log in &t.shared.spans {
        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
        *log = capacity.map_or_else(Vec::new, Vec::with_capacity);
    }
    TRACING.store(capacity.is_some(), SeqCst);
}

/// The job spans recorded since [`set_tracing`], by worker then time.
pub fn worker_spans() -> Vec<WorkerSpan> {
    let mut out = Vec::new();
    for (i, log) in team().shared.spans.iter().enumerate() {
        let log = log.lock().unwrap_or_else(|e| e.into_inner());
        out.extend(log.iter().map(|&(start_ns, end_ns)| WorkerSpan { worker: i + 1, start_ns, end_ns }));
    }
    out
}

struct Team {
    shared: &'static Shared,
    workers: usize,
}

thread_local! {
    static MAX_THREADS: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn team() -> &'static Team {
    static TEAM: OnceLock<Team> = OnceLock::new();
    TEAM.get_or_init(|| {
        let threads = std::env::var("POPXL_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            epoch: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            users: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            submit: Mutex::new(()),
            spans: (1..threads).map(|_| Mutex::new(Vec::new())).collect(),
        }));
        let mut workers = 0;
        for i in 1..threads {
            let spawned =
                std::thread::Builder::new().name(format!("popxl-cpu-{i}")).spawn(move || worker(shared, i)).is_ok();
            workers += spawned as usize;
        }
        Team { shared, workers }
    })
}

fn worker(s: &'static Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        // Wait for a new epoch: spin, then park.
        let mut idle_since: Option<Instant> = None;
        let mut spins = 0u32;
        loop {
            let e = s.epoch.load(SeqCst);
            if e != seen {
                seen = e;
                break;
            }
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) {
                // Give the core away now and then: when the host runs us on fewer
                // cores than threads, a pure spin would starve the thread with work.
                std::thread::yield_now();
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= SPIN {
                    let guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
                    s.sleeping.fetch_add(1, SeqCst);
                    let mut guard = guard;
                    while s.epoch.load(SeqCst) == seen {
                        guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                    }
                    s.sleeping.fetch_sub(1, SeqCst);
                    drop(guard);
                    idle_since = None;
                }
            }
        }
        // Join the job if it is still published.
        s.users.fetch_add(1, SeqCst);
        let p = s.job.load(SeqCst) as *const Job<'_>;
        if !p.is_null() {
            // SAFETY: the caller unpublishes the job and then waits for `users` to
            // drop to zero before its stack frame (holding the job) goes away; we
            // registered in `users` before loading the pointer.
            let job = unsafe { &*p };
            if job.joined.fetch_add(1, SeqCst) < job.max_workers {
                if TRACING.load(Relaxed) {
                    let start = clock_ns();
                    job.work();
                    let end = clock_ns();
                    if let Some(Ok(mut log)) = s.spans.get(index - 1).map(Mutex::try_lock) {
                        if log.len() < log.capacity() {
                            log.push((start, end));
                        }
                    }
                } else {
                    job.work();
                }
            }
        }
        s.users.fetch_sub(1, SeqCst);
    }
}

/// Spin until `done`, yielding the core now and then (a worker still finishing a
/// task may be waiting for it).
fn wait_until(done: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !done() {
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(256) {
            std::thread::yield_now();
        }
    }
}

/// Threads a [`run`] from this thread may use (caller included).
pub fn num_threads() -> usize {
    (team().workers + 1).min(MAX_THREADS.with(Cell::get)).max(1)
}

/// Run `f` with at most `threads` threads (caller included) for [`run`] calls
/// made from this thread.
///
/// ```
/// use popxl_cpu::team;
/// assert_eq!(team::with_max_threads(1, team::num_threads), 1);
/// ```
pub fn with_max_threads<R>(threads: usize, f: impl FnOnce() -> R) -> R {
    let old = MAX_THREADS.with(|m| m.replace(threads.max(1)));
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            MAX_THREADS.with(|m| m.set(self.0));
        }
    }
    let _restore = Restore(old);
    f()
}

/// Execute `task(i)` for every `i` in `0..n`, on this thread and the team's
/// workers, and return when every task has finished. Tasks run in no
/// particular order and possibly concurrently.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use popxl_cpu::team;
/// let sum = AtomicUsize::new(0);
/// team::run(100, &|i| {
///     sum.fetch_add(i, Ordering::Relaxed);
/// });
/// assert_eq!(sum.into_inner(), 4950);
/// ```
pub fn run(n: usize, task: &(dyn Fn(usize) + Sync)) {
    let threads = num_threads();
    if n <= 1 || threads <= 1 {
        (0..n).for_each(task);
        return;
    }
    let t = team();
    let s = t.shared;
    let _busy = match s.submit.try_lock() {
        Ok(guard) => guard,
        // A job that panicked released the lock while unwinding: the team is fine.
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            // Another job is running (another thread, or a task nesting a parallel kernel).
            (0..n).for_each(task);
            return;
        }
    };
    let job = Job {
        task,
        n,
        max_workers: (threads - 1).min(n - 1),
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        joined: AtomicUsize::new(0),
        panicked: AtomicBool::new(false),
    };
    s.job.store(&job as *const Job<'_> as *mut (), SeqCst);
    s.epoch.fetch_add(1, SeqCst);
    if s.sleeping.load(SeqCst) > 0 {
        let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
        s.wake.notify_all();
    }
    job.work();
    wait_until(|| job.done.load(SeqCst) >= n);
    s.job.store(std::ptr::null_mut(), SeqCst);
    wait_until(|| s.users.load(SeqCst) == 0);
    if job.panicked.load(SeqCst) {
        panic!("a parallel kernel task panicked");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_once() {
        for n in [0, 1, 2, 3, 17, 1000] {
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            run(n, &|i| {
                hits[i].fetch_add(1, SeqCst);
            });
            assert!(hits.iter().all(|h| h.load(SeqCst) == 1), "n = {n}");
        }
    }

    #[test]
    fn nested_and_concurrent_runs_complete() {
        let total = AtomicUsize::new(0);
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    for _ in 0..50 {
                        run(8, &|_| {
                            run(4, &|j| {
                                total.fetch_add(j + 1, SeqCst);
                            });
                        });
                    }
                });
            }
        });
        assert_eq!(total.into_inner(), 4 * 50 * 8 * 10);
    }

    #[test]
    fn parked_workers_wake_up() {
        let sum = AtomicUsize::new(0);
        run(4, &|i| {
            sum.fetch_add(i, SeqCst);
        });
        std::thread::sleep(SPIN * 3);
        run(4, &|i| {
            sum.fetch_add(i, SeqCst);
        });
        assert_eq!(sum.into_inner(), 12);
    }

    #[test]
    fn a_panicking_task_is_reported_and_the_team_survives() {
        let r = std::panic::catch_unwind(|| {
            run(8, &|i| {
                if i == 5 {
                    panic!("task 5");
                }
            })
        });
        assert!(r.is_err());
        let sum = AtomicUsize::new(0);
        run(8, &|i| {
            sum.fetch_add(i, SeqCst);
        });
        assert_eq!(sum.into_inner(), 28);
    }

    #[test]
    fn max_threads_is_scoped() {
        let before = num_threads();
        with_max_threads(1, || assert_eq!(num_threads(), 1));
        assert_eq!(num_threads(), before);
    }
}
