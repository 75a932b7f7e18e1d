//! The facade builds and reads op attributes through the IR's typed structs
//! (`popart_ir::ops::<family>::<Op>Attrs`), never by string key: a scan of
//! `popxl/src` for string-keyed attribute sets and reads.

use std::path::{Path, PathBuf};

/// Patterns of a string-keyed attribute access: the method call followed by a
/// string literal key (spaces and line breaks allowed before the quote), and
/// any raw attribute value built by hand.
const KEYED_CALLS: &[&str] = &[
    ".attr(", ".with(", ".set(", ".get(", ".remove(", ".int(", ".ints(", ".float(", ".floats(", ".str(", ".bool(",
    ".dtype(", ".graph(",
];
const RAW_VALUE: &str = "AttrValue::";

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("popxl/src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `(line, text)` of `src` where an attribute is set or read by a string key.
fn keyed_accesses(src: &str) -> Vec<(usize, String)> {
    let line_of = |at: usize| src[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    for call in KEYED_CALLS {
        for (at, _) in src.match_indices(call) {
            let rest = src[at + call.len()..].trim_start();
            if rest.starts_with('"') {
                found.push((line_of(at), format!("{call}{}", rest.lines().next().unwrap_or_default())));
            }
        }
    }
    for (at, _) in src.match_indices(RAW_VALUE) {
        found.push((line_of(at), src[at..].lines().next().unwrap_or_default().to_string()));
    }
    found.sort();
    found
}

#[test]
fn the_scan_finds_string_keyed_attributes() {
    let src = "b.attr(\"axis\", v)\n  .with(\n   \"k\", x)\nlet v = AttrValue::Int(1);\ng.with(|| 1); a.int(i)";
    let lines: Vec<usize> = keyed_accesses(src).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, vec![1, 2, 4]);
}

#[test]
fn facade_sets_and_reads_attributes_through_typed_structs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 20, "popxl/src has its sources ({} found)", files.len());
    let mut offences = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).expect("a source file is UTF-8");
        for (line, text) in keyed_accesses(&src) {
            offences.push(format!("{}:{line}: {text}", f.strip_prefix(&root).unwrap_or(f).display()));
        }
    }
    assert!(
        offences.is_empty(),
        "string-keyed op attributes in popxl/src (build the op's typed `XAttrs` struct and pass it to \
         `OpBuilder::typed`, read with `XAttrs::of(op)`):\n{}",
        offences.join("\n")
    );
}
