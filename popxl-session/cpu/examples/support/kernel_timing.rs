//! Kernel timing shared by the kernel benches that alternate with PyTorch
//! (`layer_norm_bench`, `batch_norm_bench`): a kernel built as a session builds
//! it, one measurement, and medians of ours and PyTorch's alternated.

use std::time::Instant;

use popart_ir::{Attributes, TensorInfo};
use popxl_cpu::kernel::{Kernel, KernelSpec};
use popxl_cpu::kernels::build_kernel;

use crate::torch_server::{median, TorchServer};

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
