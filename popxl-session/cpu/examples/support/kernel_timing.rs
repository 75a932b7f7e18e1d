//! Kernel timing shared by the kernel benches that alternate with PyTorch
//! (`layer_norm_bench`, `batch_norm_bench`): their command-line options, a
//! kernel built as a session builds it, one measurement, medians of ours and
//! PyTorch's alternated, and the forward and forward + backward timings of a
//! shape.

use std::time::Instant;

use popart_ir::{Attributes, TensorInfo};
use popxl_cpu::kernel::{Kernel, KernelSpec};
use popxl_cpu::kernels::build_kernel;

use crate::torch_server::{median, TorchServer};

/// The options of a kernel bench: `--threads`, `--shapes`, `--torch` (the
/// PyTorch script, started as a server), `--reps`, `--min-time`.
pub struct Options {
    /// The worker team's size.
    pub threads: usize,
    /// Comma-separated shapes, in the bench's own notation.
    pub shapes: String,
    /// The PyTorch server, when `--torch` names a script that runs.
    pub torch: Option<TorchServer>,
    /// Measurements per median.
    pub reps: usize,
    /// Seconds of one measurement at the least.
    pub min_time: f64,
}

impl Options {
    /// The options of the command line, `shapes` unless `--shapes` is given;
    /// panics on an unknown or malformed option.
    pub fn from_args(shapes: &str) -> Options {
        let (mut threads, mut shapes, mut torch, mut reps, mut min_time) =
            (2usize, shapes.to_string(), None::<String>, 5usize, 0.2f64);
        let args: Vec<String> = std::env::args().skip(1).collect();
        for pair in args.chunks(2) {
            let v = pair.get(1).cloned().unwrap_or_default();
            match pair[0].as_str() {
                "--threads" => threads = v.parse().expect("--threads takes an integer"),
                "--shapes" => shapes = v,
                "--torch" => torch = Some(v),
                "--reps" => reps = v.parse().expect("--reps takes an integer"),
                "--min-time" => min_time = v.parse().expect("--min-time takes seconds"),
                other => panic!("unknown option {other}; see the example's doc comment"),
            }
        }
        let args = ["--threads".to_string(), threads.to_string(), "--min-time".to_string(), min_time.to_string()];
        let torch = torch.and_then(|script| TorchServer::start(&script, &args));
        Options { threads, shapes, torch, reps, min_time }
    }

    /// Medians of `run_f` (pass `fwd`) and of `run_f` then `run_b` (pass
    /// `both`) on a team of `threads`, each with PyTorch's of `shape`.
    pub fn fwd_and_both(
        &mut self,
        shape: &str,
        run_f: impl Fn(),
        run_b: impl Fn(),
    ) -> ((f64, Option<f64>), (f64, Option<f64>)) {
        let (reps, min_time, torch) = (self.reps, self.min_time, &mut self.torch);
        popxl_cpu::team::with_max_threads(self.threads, || {
            let fwd = timed(reps, min_time, &run_f, torch, shape, "fwd");
            let both = timed(
                reps,
                min_time,
                || {
                    run_f();
                    run_b();
                },
                torch,
                shape,
                "both",
            );
            (fwd, both)
        })
    }
}

/// PyTorch's time over ours (above 1: we are faster), `-` without PyTorch's.
pub fn ratio(torch: Option<f64>, ours: f64) -> String {
    torch.map_or("-".into(), |t| format!("{:.2}", t / ours))
}

/// The kernel of builtin op `op` for these attributes and tensors, built
/// through `build_kernel` as a session builds it.
pub fn kernel(op: &str, attrs: &Attributes, ins: &[TensorInfo], outs: &[TensorInfo]) -> Box<dyn Kernel> {
    let spec = KernelSpec {
        def: popart_ir::lookup_op(op).expect("builtin op"),
        attrs,
        inputs: ins.iter().enumerate().map(|(i, t)| (i as u32, t.clone())).collect(),
        outputs: outs.iter().enumerate().map(|(i, t)| (i as u32, t.clone())).collect(),
        check_indices: false,
        weight_invariant: false,
    };
    build_kernel(&spec).expect("kernel")
}

/// Milliseconds of one call of `f`: one measurement of at least `min_time` s.
pub fn measure(min_time: f64, f: &mut impl FnMut()) -> f64 {
    let (mut n, t0) = (0u32, Instant::now());
    loop {
        f();
        n += 1;
        let el = t0.elapsed().as_secs_f64();
        if el >= min_time {
            return el / n as f64 * 1e3;
        }
    }
}

/// Medians of `reps` measurements of `f` (after a warm-up call) and of
/// PyTorch's `pass` of `shape`, alternated.
pub fn timed(
    reps: usize,
    min_time: f64,
    mut f: impl FnMut(),
    torch: &mut Option<TorchServer>,
    shape: &str,
    pass: &str,
) -> (f64, Option<f64>) {
    f();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        ours.push(measure(min_time, &mut f));
        if let Some(t) = torch.as_mut().and_then(|t| t.measure(shape, pass)) {
            theirs.push(t);
        }
    }
    (median(ours), (!theirs.is_empty()).then(|| median(theirs)))
}
