//! The layout ARCHITECTURE.md promises: each kernel family of the cpu device
//! (`popxl-session/cpu/src/kernels/<family>.rs` or `<family>/`) has the IR
//! family of the same name (`popart-ir/src/ops/<family>.rs` or `<family>/`),
//! or is listed, with the reason, in ARCHITECTURE.md's table of kernel files
//! that are not op families.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the tests crate sits in the workspace").to_path_buf()
}

/// Module names in a source folder: `x.rs` and `x/` give `x` (`mod.rs` and
/// `lib.rs` are not modules of their own).
fn modules(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let is_rs = path.extension().is_some_and(|e| e == "rs");
        if (is_rs || path.is_dir()) && name != "mod" && name != "lib" {
            out.insert(name);
        }
    }
    out
}

/// The first column of the table under the `<!-- kernel-files-not-families -->`
/// marker of ARCHITECTURE.md (backquoted names).
fn exceptions() -> BTreeSet<String> {
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let start = text.find("<!-- kernel-files-not-families -->").expect("ARCHITECTURE.md has the exceptions table");
    text[start..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .filter_map(|cell| cell.trim().strip_prefix('`')?.split('`').next().map(str::to_string))
        .collect()
}

#[test]
fn every_kernel_family_has_an_ir_family_or_a_stated_reason() {
    let root = workspace();
    let kernels = modules(&root.join("popxl-session/cpu/src/kernels"));
    let ir = modules(&root.join("popart-ir/src/ops"));
    let except = exceptions();
    let orphans: Vec<_> = kernels.iter().filter(|k| !ir.contains(*k) && !except.contains(*k)).collect();
    assert!(
        orphans.is_empty(),
        "kernel files without an IR family of the same name and not in ARCHITECTURE.md's table: {orphans:?}"
    );
    // The table lists only files that exist and are not families.
    let stale: Vec<_> = except.iter().filter(|e| !kernels.contains(*e) || ir.contains(*e)).collect();
    assert!(stale.is_empty(), "ARCHITECTURE.md's table lists {stale:?}, which are families or do not exist");
}

/// Every `.rs` file below `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn kernel_and_ir_files_are_named_by_concept() {
    let root = workspace();
    let mut files = Vec::new();
    sources(&root.join("popxl-session/cpu/src/kernels"), &mut files);
    sources(&root.join("popart-ir/src/ops"), &mut files);
    assert!(files.len() > 40, "the walk found the source files ({} of them)", files.len());
    // No file split by line count, at any depth.
    let split: Vec<_> = files.iter().filter(|p| p.file_stem().unwrap().to_string_lossy().ends_with("_ext")).collect();
    assert!(split.is_empty(), "files named by a split, not a concept: {split:?}");
    // No module hidden under another file name.
    let renamed: Vec<_> =
        files.iter().filter(|p| std::fs::read_to_string(p).unwrap().contains(concat!("#[", "path"))).collect();
    assert!(renamed.is_empty(), "`#[path]` modules: {renamed:?}");
}
