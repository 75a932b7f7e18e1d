//! The PyTorch side of a benchmark that alternates its measurements with
//! ours: a `bench/*.py` script started with `--serve`, which answers each
//! request line (`label pass`) with the milliseconds of one call from one
//! measurement, so both sides see the same phases of a shared machine.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

/// A running `--serve` script.
pub struct TorchServer {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl TorchServer {
    /// Starts `python3 script --serve args...`; `None` (with a message) when it cannot run.
    pub fn start(script: &str, args: &[String]) -> Option<TorchServer> {
        let mut child = Command::new("python3")
            .arg(script)
            .arg("--serve")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| eprintln!("cannot run python3 {script}: {e}"))
            .ok()?;
        let out = BufReader::new(child.stdout.take()?);
        Some(TorchServer { child, out })
    }

    /// Milliseconds of one call of `pass` of `label`, or `None` if the script failed.
    pub fn measure(&mut self, label: &str, pass: &str) -> Option<f64> {
        let stdin = self.child.stdin.as_mut()?;
        writeln!(stdin, "{label} {pass}").ok()?;
        stdin.flush().ok()?;
        let mut line = String::new();
        self.out.read_line(&mut line).ok()?;
        line.trim().parse().ok()
    }
}

/// The median of `v` (not empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
