//! Attributes are read through the typed structs of `op_attrs!` (one decode
//! per op family, defaults written once), never by key: a scan of the sources
//! of popart-ir, popart-transforms and popart-lower for reads of an attribute
//! by a string literal (`attrs.int("axis")`, `ctx.ints("shape")`,
//! `op.attrs.graph("graph")`...). `attr.rs` (the decode machinery and its
//! doctests) is exempt.

use std::path::{Path, PathBuf};

/// The accessors of `Attributes` (and the former `InferContext` helpers)
/// that read one key.
const READERS: &[&str] = &["int", "float", "ints", "floats", "str", "bool", "dtype", "graph", "get"];

/// The `(line, text)` of every call `.reader("literal")` in `source`.
fn raw_reads(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in source.lines().enumerate() {
        for reader in READERS {
            let call = format!(".{reader}(\"");
            let mut rest = line;
            while let Some(i) = rest.find(&call) {
                let after = &rest[i + call.len()..];
                // A key: an identifier in quotes, closed right after.
                let key_len = after.find('"').unwrap_or(0);
                let key = &after[..key_len];
                let is_key = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if is_key && after[key_len + 1..].starts_with(')') {
                    found.push((n + 1, line.trim().to_string()));
                }
                rest = after;
            }
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_scan_finds_raw_reads() {
    let src = "let a = op.attrs.int(\"axis\").unwrap_or(0);\nlet g = ctx.graph(\"then_graph\")?;\n\
               let x = map.get(&key);\nlet s = format!(\"{}\", v.get(\"not a key\"));\nAttrs::of(op)?.axis";
    let lines: Vec<usize> = raw_reads(src).into_iter().map(|(n, _)| n).collect();
    assert_eq!(lines, vec![1, 2]);
}

#[test]
fn no_attribute_is_read_by_key_outside_the_typed_structs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in ["popart-ir", "popart-transforms", "popart-lower"] {
        rust_files(&root.join(krate).join("src"), &mut files);
    }
    assert!(files.len() > 50, "found only {} source files under {}", files.len(), root.display());
    let mut reads = Vec::new();
    for file in files.iter().filter(|f| !f.ends_with("popart-ir/src/attr.rs")) {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, code) in raw_reads(&text) {
            reads.push(format!("{}:{line}: {code}", file.strip_prefix(&root).unwrap_or(file).display()));
        }
    }
    assert!(reads.is_empty(), "attributes read by key (decode the op's typed struct instead):\n{}", reads.join("\n"));
}
