//! A gang: `n - 1` persistent threads that, with the caller, run `n` tasks
//! *concurrently* (task `i` on member `i`, task 0 on the caller), the way a
//! replicated session runs its replicas. Unlike the worker team, whose tasks
//! are claimed dynamically by whoever is free, every task here gets its own
//! thread, so tasks may wait for each other (replicas meet at collectives).
//!
//! Members spin for [`SPIN`] after a task (the next step comes soon after),
//! then park; starting a task costs a store and, for a parked member, a wake.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle member spins before parking.
pub const SPIN: Duration = Duration::from_millis(10);

type Task = *const (dyn Fn(usize) + Sync);

struct Slot {
    /// Bumped by the caller to start a task.
    start: AtomicU64,
    /// Set to `start` by the member when its task has returned.
    done: AtomicU64,
    /// The task of the current epoch (valid while `start != done`).
    task: UnsafeCell<Option<Task>>,
    /// The task panicked.
    panicked: AtomicBool,
    quit: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `task` is written by the caller only while the member is idle
// (`done == start`) and read by the member only after `start` changed, with
// SeqCst ordering in between; the task itself is `Sync`.
unsafe impl Sync for Slot {}
// SAFETY: as above; the raw task pointer is only dereferenced under that protocol.
unsafe impl Send for Slot {}

/// A gang of threads: see the [module docs](self).
pub struct Gang {
    slots: Vec<Arc<Slot>>,
    handles: Vec<JoinHandle<()>>,
    epoch: u64,
}

impl std::fmt::Debug for Gang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gang").field("members", &(self.slots.len() + 1)).finish()
    }
}

impl Gang {
    /// A gang of `n` members (the caller and `n - 1` threads). Threads that
    /// cannot be spawned are an error naming the count.
    pub fn new(n: usize) -> Result<Gang, std::io::Error> {
        let mut slots = Vec::new();
        let mut handles = Vec::new();
        for i in 1..n.max(1) {
            let slot = Arc::new(Slot {
                start: AtomicU64::new(0),
                done: AtomicU64::new(0),
                task: UnsafeCell::new(None),
                panicked: AtomicBool::new(false),
                quit: AtomicBool::new(false),
                lock: Mutex::new(()),
                wake: Condvar::new(),
            });
            let s = slot.clone();
            handles.push(std::thread::Builder::new().name(format!("popxl-replica-{i}")).spawn(move || member(&s, i))?);
            slots.push(slot);
        }
        Ok(Gang { slots, handles, epoch: 0 })
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.slots.len() + 1
    }

    /// Always false: a gang has at least the caller.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Run `task(i)` for every member `i` concurrently and wait for all. A
    /// panicking task is re-raised here once all have returned.
    pub fn run(&mut self, task: &(dyn Fn(usize) + Sync)) {
        self.epoch += 1;
        let epoch = self.epoch;
        // SAFETY: lifetime erasure only; every member finishes with the task
        // before this function returns (we wait for `done == epoch` below, even
        // when task 0 panics), so the pointer never outlives `task`.
        let ptr: Task = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), Task>(task) };
        for s in &self.slots {
            // SAFETY: the member is idle (its previous task was waited for).
            unsafe { *s.task.get() = Some(ptr) };
            s.start.store(epoch, SeqCst);
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_one();
        }
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task(0)));
        let t0 = Instant::now();
        for s in &self.slots {
            while s.done.load(SeqCst) != epoch {
                // Members usually finish together (they meet at collectives):
                // spin briefly, then give the core away.
                if t0.elapsed() < Duration::from_micros(50) {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        let panicked = self.slots.iter().any(|s| s.panicked.swap(false, SeqCst));
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if panicked {
            panic!("a replica thread panicked");
        }
    }
}

fn member(s: &Slot, index: usize) {
    let mut seen = 0u64;
    loop {
        let idle = Instant::now();
        loop {
            if s.quit.load(SeqCst) {
                return;
            }
            if s.start.load(SeqCst) != seen {
                break;
            }
            if idle.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                let g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
                if s.start.load(SeqCst) == seen && !s.quit.load(SeqCst) {
                    let _ = s.wake.wait_timeout(g, Duration::from_millis(50));
                }
            }
        }
        seen = s.start.load(SeqCst);
        // SAFETY: published before `start` was bumped; the caller keeps the
        // task alive until `done` reaches `seen`.
        if let Some(task) = unsafe { *s.task.get() } {
            // SAFETY: the task is alive until `done` reaches `seen` (the caller waits for it).
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { (*task)(index) }));
            if r.is_err() {
                s.panicked.store(true, SeqCst);
            }
        }
        s.done.store(seen, SeqCst);
    }
}

impl Drop for Gang {
    fn drop(&mut self) {
        for s in &self.slots {
            s.quit.store(true, SeqCst);
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_one();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn tasks_run_concurrently_and_can_wait_for_each_other() {
        let mut gang = Gang::new(4).unwrap();
        let arrived = AtomicUsize::new(0);
        let hits: Vec<AtomicUsize> = (0..4).map(|_| AtomicUsize::new(0)).collect();
        for round in 1..=50 {
            gang.run(&|i| {
                // A barrier: only possible if all four tasks run at once.
                arrived.fetch_add(1, SeqCst);
                while arrived.load(SeqCst) < 4 * round {
                    std::thread::yield_now();
                }
                hits[i].fetch_add(1, SeqCst);
            });
        }
        assert!(hits.iter().all(|h| h.load(SeqCst) == 50));
    }

    #[test]
    fn a_panicking_member_is_reported_to_the_caller() {
        let mut gang = Gang::new(2).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gang.run(&|i| {
                if i == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        gang.run(&|_| {});
    }
}
