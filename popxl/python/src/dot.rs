//! `Ir.dot_checkpoint`: the IR in Graphviz DOT format, written to a file.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;

use popxl::Ir;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

thread_local! {
    /// The directory of each IR's checkpoints (set by a `save_dir` argument).
    static SAVE_DIRS: RefCell<HashMap<u64, PathBuf>> = RefCell::new(HashMap::new());
}

/// Whether `POPART_DOT_CHECKS` (if set) activates checkpoint `check`.
fn active(check: &str) -> bool {
    match std::env::var("POPART_DOT_CHECKS") {
        Ok(list) => list.split(':').any(|c| c == "ALL" || c == check),
        Err(_) => true,
    }
}

/// Write `ir` as `<dir>/<check>_all.dot` (PopART's file name without separate
/// call-op files); `save_dir` becomes the IR's directory for later checkpoints.
pub fn checkpoint(ir: &Ir, check: &str, save_dir: Option<PathBuf>) -> PyResult<()> {
    let dir = match save_dir {
        Some(d) => {
            std::fs::create_dir_all(&d)
                .map_err(|e| PyOSError::new_err(format!("cannot create directory `{}`: {e}", d.display())))?;
            SAVE_DIRS.with(|m| m.borrow_mut().insert(ir.id(), d.clone()));
            d
        }
        None => SAVE_DIRS.with(|m| m.borrow().get(&ir.id()).cloned()).unwrap_or_default(),
    };
    if !active(check) {
        return Ok(());
    }
    let path = dir.join(format!("{check}_all.dot"));
    let text = ir.with_ir(popart_ir::dot::to_dot);
    std::fs::write(&path, text)
        .map_err(|e| PyOSError::new_err(format!("failed to open file `{}`: {e}", path.display())))
}
