//! Adam-family optimizer kernels: `AdamUpdater` (Adam, LAMB, AdaMax updater
//! terms, incrementing the time step in place) and `AdamVarUpdate` (the weight
//! update with LAMB's trust ratio). Float16 tensors go through the f16 adapter;
//! the time step is never float16 (the IR refuses it), so the adapter passes its
//! pointer through and the increment lands in the step's own buffer.

use popart_ir::ops::all as ir;
use popart_ir::ops::optimizer::AdamMode;
use popart_ir::ops::optimizer::{AdamUpdaterAttrs, AdamVarUpdateAttrs};
use popart_ir::DataType;

use super::dispatch::with_float;
use super::elem::Float;
use super::float16::{f16_adapter, has_f16};
use super::par::par_range_cost;
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{boxed, BuildResult, SpecExt, Types};
use super::var_update::accumulate::{read_f64, Scalar};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};

/// Add 1 to the one-element step of dtype `dt` at `p` (integers wrap) and return
/// the new value as f64.
///
/// # Safety
/// `p` points to one writable element of `dt`, which no one else accesses.
unsafe fn increment_step(p: *mut u8, dt: DataType) -> f64 {
    macro_rules! int {
        ($t:ty) => {{
            let s = p as *mut $t;
            // SAFETY: `p` holds one `dt` element only we access (this function's contract).
            unsafe { *s = (*s).wrapping_add(1) };
        }};
    }
    match dt {
        // SAFETY: as in `int!`.
        DataType::Float32 => unsafe { *(p as *mut f32) += 1.0 },
        // SAFETY: as in `int!`.
        DataType::Float64 => unsafe { *(p as *mut f64) += 1.0 },
        DataType::Int8 => int!(i8),
        DataType::Int16 => int!(i16),
        DataType::Int32 => int!(i32),
        DataType::Int64 => int!(i64),
        DataType::Uint8 => int!(u8),
        DataType::Uint16 => int!(u16),
        DataType::Uint32 => int!(u32),
        DataType::Uint64 => int!(u64),
        // Refused at build time.
        DataType::Float16 | DataType::Bool | DataType::Float8_143 | DataType::Float8_152 => {}
    }
    // SAFETY: `p` holds one `dt` element (this function's contract).
    unsafe { read_f64(p, dt) }
}

/// `AdamUpdater` on `T`: `ADAMAX` skips the square root of `v`, `DECAY` adds `wd * w`.
struct AdamUpdaterKernel<T, const ADAMAX: bool, const DECAY: bool> {
    n: usize,
    bias: bool,
    /// Positions of m, v, and w (when `DECAY`).
    m: usize,
    v: usize,
    w: usize,
    step: Option<(usize, DataType)>,
    wd: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    eps: Scalar,
    _t: Types<T>,
}

impl<T: Float, const ADAMAX: bool, const DECAY: bool> Kernel for AdamUpdaterKernel<T, ADAMAX, DECAY> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // The step is a modified input: written through its own pointer, which the
        // executor gives this op alone for the duration of the run.
        // SAFETY: the build checked the step is one element of `dt`.
        let step = self.step.map(|(p, dt)| unsafe { increment_step(args.inputs[p] as *mut u8, dt) });
        // SAFETY: the build made `Input` scalars only of one-element inputs
        // (`Scalar::of`), which `args` holds (`KernelArgs`).
        let [beta1, beta2, eps, wd] = unsafe {
            [
                self.beta1.get(args),
                self.beta2.get(args),
                self.eps.get(args),
                if DECAY { self.wd.get(args) } else { 0.0 },
            ]
        };
        let (mut c1, mut c2) = (1.0, 1.0);
        if let (true, Some(t)) = (self.bias, step) {
            c1 = 1.0 - beta1.powf(t);
            if !ADAMAX {
                c2 = 1.0 - beta2.powf(t);
            }
        }
        let (c1, c2) = (T::from_f64(c1), T::from_f64(c2));
        let eps = T::from_f64(eps);
        let wd = T::from_f64(wd);
        let (m, v, w) =
            (args.inputs[self.m] as *const T, args.inputs[self.v] as *const T, args.inputs[self.w] as *const T);
        let (m, v, w) = (SendPtr(m as *mut T), SendPtr(v as *mut T), SendPtr(w as *mut T));
        let y = SendPtr(args.outputs[0] as *mut T);
        par_range_cost(
            self.n,
            4,
            #[inline(always)]
            move |r| {
                // SAFETY: every buffer holds `n` elements; the output overlaps no input;
                // pieces are disjoint.
                let (ms, vs, ys) = unsafe {
                    (
                        slice(m.get().add(r.start), r.len()),
                        slice(v.get().add(r.start), r.len()),
                        slice_mut(y.get().add(r.start), r.len()),
                    )
                };
                let update = |mi: T, vi: T| {
                    let vc = vi / c2;
                    let denom = if ADAMAX { vc } else { vc.sqrt() };
                    (mi / c1) / (denom + eps)
                };
                if DECAY {
                    // SAFETY: as above (`w` is connected when `DECAY`).
                    let ws = unsafe { slice(w.get().add(r.start), r.len()) };
                    for (((o, &mi), &vi), &wi) in ys.iter_mut().zip(ms).zip(vs).zip(ws) {
                        *o = update(mi, vi) + wd * wi;
                    }
                } else {
                    for ((o, &mi), &vi) in ys.iter_mut().zip(ms).zip(vs) {
                        *o = update(mi, vi);
                    }
                }
            },
        );
        Ok(())
    }
}

fn build_updater(spec: &KernelSpec<'_>) -> BuildResult {
    let a: AdamUpdaterAttrs = spec.typed()?;
    let mode = a.mode;
    let (m, v, y) = (spec.input(1)?, spec.input(2)?, spec.output(0)?);
    let step = match spec.opt_input(3) {
        Some(s) if s.nelms() == 1 && !matches!(s.dtype(), DataType::Float16 | DataType::Bool) => {
            Some((s.pos, s.dtype()))
        }
        Some(s) => {
            return Err(spec.error(format!("the time step must be a float32/float64/integer scalar, got {}", s.info)))
        }
        None => None,
    };
    if mode.bias_correction() && step.is_none() {
        return Err(spec.error("bias correction needs the time step (input 3)"));
    }
    if has_f16(spec) {
        return f16_adapter(spec, false, build_updater);
    }
    let w = spec.opt_input(0);
    let dt = y.dtype();
    let same = m.info == v.info && m.info == y.info && w.is_none_or(|w| w.info == y.info);
    if !same {
        return Err(spec.error(format!("m {}, v {} and the weight must match the output {}", m.info, v.info, y.info)));
    }
    let wd = Scalar::of(spec, 4, a.weight_decay, Some(0.0))?;
    let decay = !matches!(wd, Scalar::Const(x) if x == 0.0);
    let w = match (decay, w) {
        (true, Some(w)) => w.pos,
        (true, None) => return Err(spec.error("weight decay needs the weight (input 0)")),
        (false, _) => 0,
    };
    let bias = mode.bias_correction();
    let beta = |i, attr| if bias { Scalar::of(spec, i, attr, None) } else { Ok(Scalar::Const(0.0)) };
    let (beta1, beta2) =
        (beta(5, a.beta1)?, if mode == AdamMode::AdaMax { Scalar::Const(0.0) } else { beta(6, a.beta2)? });
    let eps = Scalar::of(spec, 7, a.epsilon, Some(1e-7))?;
    let (n, m, v) = (y.nelms(), m.pos, v.pos);
    macro_rules! kernel {
        ($T:ty, $adamax:literal, $decay:literal) => {
            boxed(AdamUpdaterKernel::<$T, $adamax, $decay> {
                n,
                bias,
                m,
                v,
                w,
                step,
                wd,
                beta1,
                beta2,
                eps,
                _t: Types::default(),
            })
        };
    }
    with_float!(dt, T => match (mode == AdamMode::AdaMax, decay) {
        (false, false) => kernel!(T, false, false),
        (false, true) => kernel!(T, false, true),
        (true, false) => kernel!(T, true, false),
        (true, true) => kernel!(T, true, true),
    }, _ => Err(spec.unsupported_dtype(dt)))
}

/// `AdamVarUpdate` on `T`: `w -= lr * ratio * x`.
struct AdamVarUpdateKernel<T> {
    n: usize,
    x: usize,
    /// Squared norms (r1², r2²) for LAMB's trust ratio.
    norms: Option<(Scalar, Scalar)>,
    lr: Scalar,
    /// `None`: no clipping of `r1`.
    mwn: Option<Scalar>,
    _t: Types<T>,
}

/// LAMB's trust ratio `min(r1, mwn) / r2` from squared norms, 1 when any is 0.
fn trust_ratio(r1sq: f64, r2sq: f64, mwn: f64) -> f64 {
    if r1sq == 0.0 || r2sq == 0.0 || mwn == 0.0 {
        1.0
    } else {
        r1sq.sqrt().min(mwn) / r2sq.sqrt()
    }
}

impl<T: Float> Kernel for AdamVarUpdateKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the build made `Input` scalars only of one-element inputs
        // (`Scalar::of`), which `args` holds (`KernelArgs`).
        let (ratio, lr) = unsafe {
            let ratio = match self.norms {
                Some((r1, r2)) => {
                    let mwn = self.mwn.map_or(f64::INFINITY, |m| m.get(args));
                    trust_ratio(r1.get(args), r2.get(args), mwn)
                }
                None => 1.0,
            };
            (ratio, self.lr.get(args))
        };
        let s = T::from_f64(-(lr * ratio));
        let w = SendPtr(args.outputs[0] as *mut T);
        let x = SendPtr(args.inputs[self.x] as *mut T);
        par_range_cost(
            self.n,
            1,
            #[inline(always)]
            move |r| {
                // SAFETY: `w` is accessed through the output pointer only, `x` is another
                // buffer of `n` elements; pieces are disjoint.
                let (ws, xs) =
                    unsafe { (slice_mut(w.get().add(r.start), r.len()), slice(x.get().add(r.start), r.len())) };
                for (a, &b) in ws.iter_mut().zip(xs) {
                    *a = *a + s * b;
                }
            },
        );
        Ok(())
    }
}

fn build_var_update(spec: &KernelSpec<'_>) -> BuildResult {
    let (w, x, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    if y.info != w.info || w.pos != 0 {
        return Err(spec.error(format!("output {} must be the updated input 0 {}", y.info, w.info)));
    }
    if has_f16(spec) {
        return f16_adapter(spec, true, build_var_update);
    }
    if x.info != w.info {
        return Err(spec.error(format!("updater {} does not match the weight {}", x.info, w.info)));
    }
    let norms = match (spec.opt_input(2), spec.opt_input(3)) {
        (Some(_), Some(_)) => Some((Scalar::of(spec, 2, None, None)?, Scalar::of(spec, 3, None, None)?)),
        (None, None) => None,
        _ => return Err(spec.error("the LAMB norms r1 and r2 go together")),
    };
    let a: AdamVarUpdateAttrs = spec.typed()?;
    let lr = Scalar::of(spec, 4, a.learning_rate, None)?;
    let has_mwn = spec.opt_input(5).is_some() || a.max_weight_norm.is_some();
    let mwn = if has_mwn { Some(Scalar::of(spec, 5, a.max_weight_norm, None)?) } else { None };
    let (dt, n, xp) = (w.dtype(), w.nelms(), x.pos);
    with_float!(dt, T => boxed(AdamVarUpdateKernel::<T> { n, x: xp, norms, lr, mwn, _t: Types::default() }),
        _ => Err(spec.unsupported_dtype(dt)))
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[(&ir::AdamUpdater, build_updater), (&ir::AdamVarUpdate, build_var_update)];

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, run_op, t};
    use super::trust_ratio;
    use popart_ir::ops::optimizer::{AdamMode, AdamUpdaterAttrs, AdamVarUpdateAttrs};
    use popart_ir::{DataType, OpAttrs};

    fn updater(mode: AdamMode) -> AdamUpdaterAttrs {
        AdamUpdaterAttrs { mode, weight_decay: None, beta1: None, beta2: None, epsilon: Some(1e-3) }
    }

    fn var_update(max_weight_norm: Option<f64>) -> AdamVarUpdateAttrs {
        AdamVarUpdateAttrs { learning_rate: Some(0.1), max_weight_norm }
    }

    #[test]
    fn adam_updater_without_bias_correction() {
        let (m, v, w) = ([0.1, -0.2, 0.3], [0.01, 0.04, 0.0], [1.0, 2.0, -1.0]);
        let want = |wd: f64, adamax: bool| -> Vec<f64> {
            (0..3)
                .map(|i| {
                    let d = if adamax { v[i] } else { f64::sqrt(v[i]) };
                    m[i] / (d + 1e-3) + wd * w[i]
                })
                .collect()
        };
        for dt in [DataType::Float32, DataType::Float64] {
            let ins = [(1, t(dt, &[3], &m)), (2, t(dt, &[3], &v))];
            let a = updater(AdamMode::AdamNoBias).to_attrs();
            assert_close(&run_op("AdamUpdater", a.clone(), &ins)[0].to_f64_vec(), &want(0.0, false), 1e-6);
            let lamb = updater(AdamMode::LambNoBias).to_attrs();
            assert_close(&run_op("AdamUpdater", lamb, &ins)[0].to_f64_vec(), &want(0.0, false), 1e-6);
            // Weight decay as a tensor of another float type.
            let mut ins = ins.to_vec();
            ins.push((0, t(dt, &[3], &w)));
            ins.push((4, t(DataType::Float64, &[], &[0.1])));
            assert_close(&run_op("AdamUpdater", a, &ins)[0].to_f64_vec(), &want(0.1, false), 1e-6);
        }
        // float16 moments: computed in float32, output float16.
        let ins = [(1, t(DataType::Float16, &[3], &m)), (2, t(DataType::Float16, &[3], &v))];
        let eps = updater(AdamMode::AdamNoBias).to_attrs();
        let out = &run_op("AdamUpdater", eps, &ins)[0];
        assert_eq!(out.info.dtype, DataType::Float16);
        assert_close(&out.to_f64_vec(), &want(0.0, false), 2e-3);
    }

    #[test]
    fn adam_var_update_with_and_without_trust_ratio() {
        let (w, x) = ([1.0, 2.0], [0.5, -1.0]);
        let lr = var_update(None).to_attrs();
        let ins = [(0, t(DataType::Float32, &[2], &w)), (1, t(DataType::Float32, &[2], &x))];
        assert_close(&run_op("AdamVarUpdate", lr.clone(), &ins)[0].to_f64_vec(), &[0.95, 2.1], 1e-7);
        let mut lamb = ins.to_vec();
        lamb.push((2, t(DataType::Float32, &[], &[4.0])));
        lamb.push((3, t(DataType::Float32, &[], &[16.0])));
        // ratio = 2 / 4
        assert_close(&run_op("AdamVarUpdate", lr.clone(), &lamb)[0].to_f64_vec(), &[0.975, 2.05], 1e-7);
        // max weight norm 1: ratio = 1 / 4
        let clip = var_update(Some(1.0)).to_attrs();
        assert_close(&run_op("AdamVarUpdate", clip, &lamb)[0].to_f64_vec(), &[0.9875, 2.025], 1e-7);
        assert_eq!(trust_ratio(0.0, 4.0, 1.0), 1.0);
        assert_eq!(trust_ratio(4.0, 0.0, 1.0), 1.0);
        assert_eq!(trust_ratio(4.0, 1.0, 0.0), 1.0);
    }
}
