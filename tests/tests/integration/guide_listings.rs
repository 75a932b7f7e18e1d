//! Every Rust listing of the user guide (`docs/guide/listings/rust/`), compiled and run.
//!
//! Each listing is a complete program whose `main` checks its own results against values
//! computed independently in the listing; [`every_listing_is_run_and_in_the_book`] keeps
//! this list, the listing files and the book's `{{#include}}`s in step.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

macro_rules! listings {
    ($($name:ident),* $(,)?) => {
        $(
            #[allow(dead_code)]
            mod $name {
                include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/guide/listings/rust/", stringify!($name), ".rs"));

                #[test]
                fn runs() {
                    if let Err(e) = main() {
                        panic!("listing {}.rs failed: {e}", stringify!($name));
                    }
                }
            }
        )*
        /// The listings this file runs.
        const RUN: &[&str] = &[$(stringify!($name)),*];
    };
}

listings!(
    tensor_addition,
    basic_graph,
    call_with_info,
    repeat,
    tensor_operators,
    tensor_data,
    inplace_views,
    autodiff,
    host_transfers,
    remote_variable,
    code_loading,
    replication,
);

fn guide_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guide")
}

/// The stems of the files with extension `ext` in `dir`.
fn stems(dir: &Path, ext: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect()
}

#[test]
fn every_listing_is_run_and_in_the_book() {
    let dir = guide_dir();
    let rust = stems(&dir.join("listings/rust"), "rs");
    let python = stems(&dir.join("listings/python"), "py");
    let run: BTreeSet<String> = RUN.iter().map(|s| s.to_string()).collect();
    assert_eq!(rust, run, "listings/rust and the list in this file differ");
    assert_eq!(rust, python, "every listing is given in both Rust and Python");

    let mut included = BTreeSet::new();
    for chapter in stems(&dir.join("src"), "md") {
        let text = std::fs::read_to_string(dir.join("src").join(format!("{chapter}.md"))).unwrap_or_default();
        for line in text.lines() {
            if let Some(rest) = line.trim().strip_prefix("{{#include ../listings/") {
                let path = rest.trim_end_matches("}}");
                let path = path.split(':').next().unwrap_or(path);
                assert!(dir.join("listings").join(path).is_file(), "{chapter}.md includes a missing {path}");
                included.insert(path.to_string());
            }
        }
    }
    for name in &rust {
        for file in [format!("rust/{name}.rs"), format!("python/{name}.py")] {
            assert!(included.contains(&file), "no chapter includes listings/{file}");
        }
    }
}
