//! The guards of `with graph:`, `with popxl.in_sequence():` and the other
//! building scopes, kept by the thread that entered them.
//!
//! The `popxl` building context is per thread and its guards are tied to that
//! thread, while the Python objects that enter it may be used from any thread.
//! So the guards live in a thread-local table keyed by the entering object:
//! `__exit__` pops the entry of the thread it runs on, and exiting a scope on a
//! thread that did not enter it is a `RuntimeError` naming the scope.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;

/// This thread's open guards, by the key of the object that entered them.
#[derive(Default)]
struct Open(HashMap<u64, Vec<Box<dyn Any>>>);

impl Drop for Open {
    fn drop(&mut self) {
        // The thread is ending with scopes still entered (a `__enter__` without its
        // `__exit__`). Dropping a guard would update the `popxl` context of this thread,
        // which may already be gone: the guards are leaked with the thread's context.
        for (_, guards) in self.0.drain() {
            guards.into_iter().for_each(std::mem::forget);
        }
    }
}

thread_local! {
    static OPEN: RefCell<Open> = RefCell::new(Open::default());
}

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// The scopes one Python object has entered, on whichever threads.
pub struct WithGuards {
    key: u64,
    /// Entered and not yet exited, over all threads.
    open: usize,
}

impl Default for WithGuards {
    fn default() -> Self {
        WithGuards { key: NEXT_KEY.fetch_add(1, Ordering::Relaxed), open: 0 }
    }
}

impl WithGuards {
    /// Keep `guard` on this thread until the matching [`WithGuards::exit`].
    pub fn enter<G: 'static>(&mut self, guard: G) -> PyResult<()> {
        let key = self.key;
        OPEN.try_with(|o| o.borrow_mut().0.entry(key).or_default().push(Box::new(guard)))
            .map_err(|_| PyRuntimeError::new_err("a popxl scope was entered on a thread that is exiting"))?;
        self.open += 1;
        Ok(())
    }

    /// Drop the guard this thread entered last; `what` names the scope in the
    /// error raised when it was entered on another thread only.
    pub fn exit(&mut self, what: &str) -> PyResult<()> {
        let key = self.key;
        let guard = OPEN
            .try_with(|o| {
                let mut o = o.borrow_mut();
                let g = o.0.get_mut(&key).and_then(Vec::pop);
                if o.0.get(&key).is_some_and(Vec::is_empty) {
                    o.0.remove(&key);
                }
                g
            })
            .ok()
            .flatten();
        match guard {
            Some(g) => {
                // Dropped outside the table's borrow: the guard updates the context.
                drop(g);
                self.open -= 1;
                Ok(())
            }
            None if self.open > 0 => Err(PyRuntimeError::new_err(format!(
                "`with {what}:` exited on a thread other than the one that entered it: a popxl scope applies to \
                 the thread that enters it and must be exited there"
            ))),
            // An `__exit__` without an `__enter__`: nothing to undo.
            None => Ok(()),
        }
    }
}

impl Drop for WithGuards {
    fn drop(&mut self) {
        if self.open == 0 {
            return;
        }
        // The object is collected with scopes still entered: undo those of this thread.
        let key = self.key;
        let guards = OPEN.try_with(|o| o.borrow_mut().0.remove(&key)).ok().flatten();
        drop(guards);
    }
}
