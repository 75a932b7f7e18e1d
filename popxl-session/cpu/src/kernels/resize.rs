//! `Resize` (PopXL `interpolate`, nearest and linear) and `ResizeGrad`, float32
//! and float64.
//!
//! The map is separable: each resized dim is applied in turn as `[outer, len,
//! inner] -> [outer, out, inner]` with the per-index taps of
//! [`ResizeParams::taps`](popart_ir::ops::resize::ResizeParams::taps), computed at build time, through two ping-pong
//! scratch buffers sized at build time. The gradient applies the adjoint of
//! each dim's map (a scatter-add of the taps) in reverse order.

use std::sync::Mutex;

use popart_ir::ops::all as ir;
use popart_ir::ops::resize::{ResizeAttrs, ResizeGradAttrs};

use super::dispatch::with_float;
use super::elem::Float;
use super::ptr::{slice, slice_mut};
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};

/// Registered kernels.
pub(crate) const KERNELS: &[KernelEntry] = &[(&ir::Resize, build), (&ir::ResizeGrad, build)];

/// One resized dim: `[outer, len, inner] -> [outer, out, inner]`.
struct Stage {
    outer: usize,
    len: usize,
    out: usize,
    inner: usize,
    taps: Vec<(usize, usize, f64)>,
}

struct ResizeKernel<T> {
    grad: bool,
    stages: Vec<Stage>,
    in_len: usize,
    out_len: usize,
    src: usize,
    scratch: Mutex<(Vec<T>, Vec<T>)>,
    _t: Types<T>,
}

fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let grad = spec.is::<ir::ResizeGrad>();
    // The gradient's output has the forward input's shape (attribute `shape`).
    let x = if grad { spec.output(0)? } else { spec.input(0)? };
    let src = spec.input(0)?.pos;
    let shape = x.shape().to_vec();
    let p = if grad {
        spec.typed::<ResizeGradAttrs>()?.params(shape.len())
    } else {
        spec.typed::<ResizeAttrs>()?.params(shape.len())
    };
    let p = p.map_err(|m| spec.error(m))?;
    let out_shape = p.out_shape(&shape);
    let want = if grad { shape.clone() } else { out_shape.clone() };
    if spec.output(0)?.shape() != want.as_slice() {
        return Err(spec.error(format!("the result {} does not match the resize ({want:?})", spec.output(0)?.info)));
    }
    // Stages in dim order over the shape as it is resized.
    let mut cur = shape.clone();
    let mut stages = Vec::new();
    let mut biggest = 0;
    for d in 0..shape.len() {
        if p.scales[d] == 1.0 && out_shape[d] == shape[d] {
            continue;
        }
        let (outer, inner): (usize, usize) = (cur[..d].iter().product(), cur[d + 1..].iter().product());
        stages.push(Stage { outer, len: cur[d], out: out_shape[d], inner, taps: p.taps(d, cur[d], out_shape[d]) });
        cur[d] = out_shape[d];
        biggest = biggest.max(cur.iter().product::<usize>());
    }
    let dt = x.dtype();
    let (in_len, out_len) = (shape.iter().product(), out_shape.iter().product());
    with_float!(dt, T => {
        let buf = || popart_ir::size::try_zeroed_vec::<T>(biggest, "resize scratch").map_err(|e| spec.error(e.to_string()));
        Ok(Box::new(ResizeKernel::<T> {
            grad, stages, in_len, out_len, src, scratch: Mutex::new((buf()?, buf()?)), _t: Types::default(),
        }))
    }, _ => Err(spec.unsupported_dtype(dt)))
}

impl<T: Float> ResizeKernel<T> {
    /// `dst = stage(src)`.
    fn forward(s: &Stage, src: &[T], dst: &mut [T]) {
        for o in 0..s.outer {
            for (i, &(i0, i1, w1)) in s.taps.iter().enumerate() {
                let (a, b) =
                    (&src[(o * s.len + i0) * s.inner..][..s.inner], &src[(o * s.len + i1) * s.inner..][..s.inner]);
                let d = &mut dst[(o * s.out + i) * s.inner..][..s.inner];
                let (w1, w0) = (T::from_f64(w1), T::from_f64(1.0 - w1));
                for ((d, &a), &b) in d.iter_mut().zip(a).zip(b) {
                    *d = a * w0 + b * w1;
                }
            }
        }
    }

    /// `dst = stageᵀ(src)`: the adjoint, scattering each output back to its taps.
    fn backward(s: &Stage, src: &[T], dst: &mut [T]) {
        dst[..s.outer * s.len * s.inner].fill(T::ZERO);
        for o in 0..s.outer {
            for (i, &(i0, i1, w1)) in s.taps.iter().enumerate() {
                let g = &src[(o * s.out + i) * s.inner..][..s.inner];
                let (w1, w0) = (T::from_f64(w1), T::from_f64(1.0 - w1));
                for (k, &gv) in g.iter().enumerate() {
                    let a = (o * s.len + i0) * s.inner + k;
                    dst[a] = dst[a] + gv * w0;
                    let b = (o * s.len + i1) * s.inner + k;
                    dst[b] = dst[b] + gv * w1;
                }
            }
        }
    }
}

impl<T: Float> Kernel for ResizeKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (n_in, n_out) = if self.grad { (self.out_len, self.in_len) } else { (self.in_len, self.out_len) };
        // SAFETY: the input and the output hold the spec's `n_in` and `n_out`
        // elements and do not overlap (`KernelArgs`).
        let (input, output) =
            unsafe { (slice(args.inputs[self.src] as *const T, n_in), slice_mut(args.outputs[0] as *mut T, n_out)) };
        if self.stages.is_empty() {
            output.copy_from_slice(input);
            return Ok(());
        }
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b) = &mut *guard;
        let n = self.stages.len();
        // Stage k reads the previous result (the input first) and writes the
        // next buffer (the output last), alternating the two scratch buffers.
        let order: Vec<usize> = if self.grad { (0..n).rev().collect() } else { (0..n).collect() };
        for (step, &k) in order.iter().enumerate() {
            let s = &self.stages[k];
            let (src, dst): (&[T], &mut [T]) = match (step == 0, step + 1 == n, step % 2) {
                (true, true, _) => (input, &mut *output),
                (true, false, _) => (input, &mut a[..]),
                (false, true, 1) => (&a[..], &mut *output),
                (false, true, _) => (&b[..], &mut *output),
                (false, false, 1) => (&a[..], &mut b[..]),
                (false, false, _) => (&b[..], &mut a[..]),
            };
            if self.grad {
                Self::backward(s, src, dst);
            } else {
                Self::forward(s, src, dst);
            }
        }
        Ok(())
    }
}
