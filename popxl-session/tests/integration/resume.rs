//! `--save` / `--resume` of the mnist, cnn and gpt examples, in separate
//! processes (this test binary re-run as a child that runs the example's
//! `run` with command-line arguments): training N steps equals training k
//! steps, saving, resuming in a fresh process and training N - k more, bit for
//! bit (every saved array's bytes, the checkpoint files, and every printed loss).

use std::path::{Path, PathBuf};
use std::process::Command;

use popxl::checkpoint;

// The examples share modules (`data.rs`, `support/*.rs`): each holds its own copy.
#[path = "../../examples/mnist/main.rs"]
#[allow(dead_code, clippy::duplicate_mod)]
pub(crate) mod mnist;

#[path = "../../examples/cnn/main.rs"]
#[allow(dead_code, clippy::duplicate_mod)]
mod cnn;

#[path = "../../examples/gpt/main.rs"]
#[allow(dead_code, clippy::duplicate_mod)]
pub(crate) mod gpt;

/// The child's example and arguments, one per line.
const CHILD: &str = "POPXL_RESUME_TEST_CHILD";

/// The child process: runs one example with the arguments of [`CHILD`].
#[test]
#[ignore = "the child process of the resume tests"]
fn example_child() {
    let Ok(spec) = std::env::var(CHILD) else { return };
    let mut lines = spec.lines().map(str::to_string);
    let example = lines.next().unwrap_or_default();
    let args: Vec<String> = lines.collect();
    let ran = match example.as_str() {
        "mnist" => mnist::run(args),
        "cnn" => cnn::run(args),
        "gpt" => gpt::run(args),
        other => Err(format!("no example `{other}`").into()),
    };
    if let Err(e) = ran {
        panic!("{example}: {e}");
    }
}

/// Run `example` with `args` in a child process: its stdout, or its stderr as the error.
fn run_example(example: &str, args: &[String]) -> Result<String, String> {
    let spec = std::iter::once(example.to_string()).chain(args.iter().cloned()).collect::<Vec<_>>().join("\n");
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["resume::example_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD, spec)
        .output()
        .expect("spawn the child");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The `step <i>: loss <x>` lines of a run.
fn losses(example: &str, args: &[String]) -> Vec<String> {
    let out = run_example(example, args).unwrap_or_else(|e| panic!("{example} {args:?} failed:\n{e}"));
    out.lines().filter(|l| l.starts_with("step ")).map(str::to_string).collect()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("popxl-resume-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

fn with(base: &[&str], more: &[&str]) -> Vec<String> {
    base.iter().chain(more).map(|s| s.to_string()).collect()
}

/// Every array of the checkpoint at `path`, sorted by name, as (dtype, shape, bytes).
fn arrays(path: &Path) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = checkpoint::load(path)
        .expect("load a checkpoint")
        .into_iter()
        .map(|(n, a)| {
            let t = a.to_host_tensor();
            (n, format!("{:?} {:?} {:02x?}", t.info.dtype, t.info.shape, t.bytes))
        })
        .collect();
    all.sort();
    all
}

/// Train `n` steps in one process and `k` then `n - k` in two, through a
/// checkpoint `file` (its extension picks the format); both runs must print
/// the same losses and save the same arrays, byte for byte. Returns the
/// directory holding `k.<ext>`, the checkpoint after `k` steps.
fn resumes_exactly(example: &str, base: &[&str], n: usize, k: usize, file: &str) -> PathBuf {
    let dir = scratch(&format!("{example}-{k}"));
    let (full, part, resumed) = (dir.join(format!("full-{file}")), dir.join(format!("k-{file}")), dir.join(file));
    let (n, k) = (n.to_string(), k.to_string());
    let full_path = full.to_string_lossy().into_owned();
    let part_path = part.to_string_lossy().into_owned();
    let resumed_path = resumed.to_string_lossy().into_owned();
    let one = losses(example, &with(base, &["--steps", &n, "--print-losses", "--save", &full_path]));
    let mut two = losses(example, &with(base, &["--steps", &k, "--print-losses", "--save", &part_path]));
    two.extend(losses(
        example,
        &with(base, &["--steps", &n, "--print-losses", "--resume", &part_path, "--save", &resumed_path]),
    ));
    assert_eq!(one.len(), n.parse::<usize>().expect("n"), "{example}: one loss per step");
    assert_eq!(two, one, "{example}: the losses of k + (n - k) steps differ from those of n steps");
    let (a, b) = (arrays(&full), arrays(&resumed));
    let names = |v: &[(String, String)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&b), names(&a), "{example}: the checkpoints hold other arrays");
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert!(x == y, "{example}: `{name}` after resuming differs from `{name}` trained without a stop");
    }
    if !full.is_dir() {
        assert!(std::fs::read(&full).ok() == std::fs::read(&resumed).ok(), "{example}: checkpoint files differ");
    }
    // The checkpoint after k steps is another state (the comparison above means something).
    assert_ne!(arrays(&part), a, "{example}: k steps saved what n steps save");
    dir
}

#[test]
fn mnist_resumes_bit_for_bit() {
    // Two epochs of 5 batches: stop inside the second epoch and at the epoch boundary.
    let base = ["--limit-batches", "5", "--epochs", "2", "--hidden", "16", "--lr", "0.05"];
    for k in [7, 5] {
        let dir = resumes_exactly("mnist", &base, 10, k, "state.npz");
        std::fs::remove_dir_all(dir).ok();
    }
    // Several batches per run and replicas with sharded weights (RTS).
    let rts = ["--limit-batches", "6", "--epochs", "2", "--host-transfers", "2", "--replicas", "2", "--rts"];
    let dir = resumes_exactly("mnist", &rts, 10, 4, "state.safetensors");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn cnn_resumes_bit_for_bit() {
    let base = ["--batch", "8", "--limit-batches", "3", "--epochs", "2", "--test-batch", "1000"];
    let dir = resumes_exactly("cnn", &base, 6, 4, "state.safetensors");
    // The momentum buffers are in the checkpoint.
    let saved = checkpoint::load(&dir.join("k-state.safetensors")).expect("load");
    assert!(saved.iter().any(|(n, a)| n == "l2.W.v" && a.to_f64_vec().iter().any(|&v| v != 0.0)));
    // A resume with another batch size is refused, naming it.
    let part = dir.join("k-state.safetensors").to_string_lossy().into_owned();
    let err = run_example("cnn", &with(&["--batch", "16", "--limit-batches", "3"], &["--resume", &part]))
        .expect_err("a resume with another batch size");
    assert!(err.contains("trained with batch 8, this run has 16"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn gpt_resumes_bit_for_bit() {
    let base = [
        "--layers",
        "2",
        "--heads",
        "2",
        "--width",
        "16",
        "--seq",
        "8",
        "--batch",
        "2",
        "--eval-every",
        "0",
        "--eval-batches",
        "1",
        "--sample",
        "0",
    ];
    let dir = resumes_exactly("gpt", &base, 6, 4, "state.npz");
    std::fs::remove_dir_all(dir).ok();
    // The layers as one loop, Adam's moments in remote buffers; a directory of .npy files.
    let scan = with(&base, &["--scan-layers", "--offload-optimizer"]);
    let scan: Vec<&str> = scan.iter().map(String::as_str).collect();
    let dir = resumes_exactly("gpt", &scan, 5, 2, "state");
    std::fs::remove_dir_all(dir).ok();
}
