//! Adam-family optimizer kernels: `AdamUpdater` (Adam, LAMB, AdaMax updater
//! terms, incrementing the time step in place), `AdamVarUpdate` (the weight
//! update with LAMB's trust ratio) and `AdamStep` (a whole step of one weight
//! in one pass over its four tensors, each value computed by the same f32/f64
//! operations as the four ops it replaces). Float16 tensors go through the f16 adapter;
//! the time step is never float16 (the IR refuses it), so the adapter passes its
//! pointer through and the increment lands in the step's own buffer.

use popart_ir::ops::all as ir;
use popart_ir::ops::optimizer::AdamMode;
use popart_ir::ops::optimizer::{AdamStepAttrs, AdamUpdaterAttrs, AdamVarUpdateAttrs};
use popart_ir::DataType;

use super::dispatch::with_float;
use super::elem::{Float, Num};
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

/// The bias corrections `(1 − beta1^t, 1 − beta2^t)` of step `t` (AdaMax: `v`
/// uncorrected), or `(1, 1)`.
fn corrections(bias: bool, adamax: bool, step: Option<f64>, beta1: f64, beta2: f64) -> (f64, f64) {
    let (mut c1, mut c2) = (1.0, 1.0);
    if let (true, Some(t)) = (bias, step) {
        c1 = 1.0 - beta1.powf(t);
        if !adamax {
            c2 = 1.0 - beta2.powf(t);
        }
    }
    (c1, c2)
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
        let (c1, c2) = corrections(self.bias, ADAMAX, step, beta1, beta2);
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

/// `AdamStep` on `T` (see [`ir::AdamStep`]): `ADAMAX` skips the square root
/// of `v`, `DECAY` adds `wd · w` to the updater term.
struct AdamStepKernel<T, const ADAMAX: bool, const DECAY: bool> {
    n: usize,
    /// Position and dtype of the step, when connected.
    step: Option<(usize, DataType)>,
    bias: bool,
    beta1: f64,
    beta2: f64,
    /// The moments' coefficients `(f, 1 − f)`, as `Accumulate` computes them.
    m_coef: (T, T),
    v_coef: (T, T),
    eps: T,
    wd: T,
    /// The update `w = a · w + b · u` (`w + b · u` when `a` is 1, as `ScaledAddInplace`).
    a: Option<T>,
    b: T,
}

impl<T: Float, const ADAMAX: bool, const DECAY: bool> Kernel for AdamStepKernel<T, ADAMAX, DECAY> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // The step, both moments: written inputs, through their own pointers,
        // which the executor gives this op alone for the run; the weight through
        // output 0.
        // SAFETY: the build checked the step is one element of `dt`.
        let step = self.step.map(|(p, dt)| unsafe { increment_step(args.inputs[p] as *mut u8, dt) });
        let (c1, c2) = corrections(self.bias, ADAMAX, step, self.beta1, self.beta2);
        let (c1, c2) = (T::from_f64(c1), T::from_f64(c2));
        let w = SendPtr(args.outputs[0] as *mut T);
        let g = SendPtr(args.inputs[1] as *mut T);
        let (m, v) = (SendPtr(args.inputs[2] as *mut T), SendPtr(args.inputs[3] as *mut T));
        let ((ma, mb), (va, vb), eps, wd, a, b) = (self.m_coef, self.v_coef, self.eps, self.wd, self.a, self.b);
        par_range_cost(
            self.n,
            4,
            #[inline(always)]
            move |r| {
                // SAFETY: the four buffers hold `n` elements each and are distinct
                // (the IR's alias rules: three are written); pieces are disjoint.
                let (ws, gs, ms, vs) = unsafe {
                    (
                        slice_mut(w.get().add(r.start), r.len()),
                        slice(g.get().add(r.start), r.len()),
                        slice_mut(m.get().add(r.start), r.len()),
                        slice_mut(v.get().add(r.start), r.len()),
                    )
                };
                for (((wi, &gi), mi), vi) in ws.iter_mut().zip(gs).zip(ms).zip(vs) {
                    *mi = ma * *mi + mb * gi;
                    *vi = va * *vi + vb * gi * gi;
                    let vc = *vi / c2;
                    let denom = if ADAMAX { vc } else { vc.sqrt() };
                    let mut u = (*mi / c1) / (denom + eps);
                    if DECAY {
                        u = u + wd * *wi;
                    }
                    *wi = match a {
                        None => *wi + b * u,
                        Some(a) => a * *wi + b * u,
                    };
                }
            },
        );
        Ok(())
    }
}

fn build_step(spec: &KernelSpec<'_>) -> BuildResult {
    let a: AdamStepAttrs = spec.typed()?;
    let (w, y) = (spec.input(0)?, spec.output(0)?);
    if y.info != w.info || w.pos != 0 {
        return Err(spec.error(format!("output {} must be the updated input 0 {}", y.info, w.info)));
    }
    for i in 1..4 {
        let t = spec.input(i)?;
        if t.info != w.info {
            return Err(spec.error(format!("input {i} {} must match the weight {}", t.info, w.info)));
        }
    }
    let step = match spec.opt_input(4) {
        Some(s) if s.nelms() == 1 && !matches!(s.dtype(), DataType::Float16 | DataType::Bool) => {
            Some((s.pos, s.dtype()))
        }
        Some(s) => {
            return Err(spec.error(format!("the time step must be a float32/float64/integer scalar, got {}", s.info)))
        }
        None => None,
    };
    let bias = a.mode.bias_correction();
    let adamax = a.mode == AdamMode::AdaMax;
    if bias && (step.is_none() || a.beta1.is_none() || (!adamax && a.beta2.is_none())) {
        return Err(spec.error("bias correction needs the time step and the betas"));
    }
    let wd = a.weight_decay.unwrap_or(0.0);
    let (n, dt) = (w.nelms(), w.dtype());
    macro_rules! kernel {
        ($T:ty, $adamax:literal, $decay:literal) => {{
            let c = |f: f64| (<$T as Num>::from_f64(f), <$T as Num>::from_f64(1.0 - f));
            boxed(AdamStepKernel::<$T, $adamax, $decay> {
                n,
                step,
                bias,
                beta1: if bias { a.beta1.unwrap_or(0.0) } else { 0.0 },
                beta2: if bias && !adamax { a.beta2.unwrap_or(0.0) } else { 0.0 },
                m_coef: c(a.m_factor),
                v_coef: c(a.v_factor),
                eps: <$T as Num>::from_f64(a.epsilon.unwrap_or(1e-7)),
                wd: <$T as Num>::from_f64(wd),
                a: (a.a != 1.0).then(|| <$T as Num>::from_f64(a.a)),
                b: <$T as Num>::from_f64(a.b),
            })
        }};
    }
    match dt {
        DataType::Float32 | DataType::Float64 => with_float!(dt, T => match (adamax, wd != 0.0) {
            (false, false) => kernel!(T, false, false),
            (false, true) => kernel!(T, false, true),
            (true, false) => kernel!(T, true, false),
            (true, true) => kernel!(T, true, true),
        }, _ => Err(spec.unsupported_dtype(dt))),
        _ => Err(spec.unsupported_dtype(dt)),
    }
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] =
    &[(&ir::AdamUpdater, build_updater), (&ir::AdamVarUpdate, build_var_update), (&ir::AdamStep, build_step)];

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, run_op, t};
    use super::trust_ratio;
    use popart_ir::ops::optimizer::{AdamMode, AdamStepAttrs, AdamUpdaterAttrs, AdamVarUpdateAttrs};
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
    fn adam_step_is_the_four_ops_in_one() {
        // AdaMax with bias correction and decay, and a decoupled scale `a`, one
        // step from moments (m, v) with gradient g; f64 values from the formulas.
        let (w, g, m, v) = ([1.0, -2.0, 0.5], [0.1, 0.3, -0.2], [0.05, 0.0, -0.1], [0.02, 0.01, 0.3]);
        let (f1, f2, b1, eps, wd, a, b) = (0.8, 0.9, 0.7, 1e-3, 0.01, 0.99, -0.1);
        let want: Vec<f64> = (0..3)
            .map(|i| {
                let m1 = f1 * m[i] + (1.0 - f1) * g[i];
                let v1 = f2 * v[i] + (1.0 - f2) * g[i] * g[i];
                let u = (m1 / (1.0 - b1)) / (v1 + eps) + wd * w[i];
                a * w[i] + b * u
            })
            .collect();
        let attrs = AdamStepAttrs {
            m_factor: f1,
            v_factor: f2,
            mode: AdamMode::AdaMax,
            weight_decay: Some(wd),
            beta1: Some(b1),
            beta2: None,
            epsilon: Some(eps),
            a,
            b,
        };
        for dt in [DataType::Float32, DataType::Float64] {
            let ins = [
                (0, t(dt, &[3], &w)),
                (1, t(dt, &[3], &g)),
                (2, t(dt, &[3], &m)),
                (3, t(dt, &[3], &v)),
                (4, t(DataType::Int32, &[], &[0.0])),
            ];
            assert_close(&run_op("AdamStep", attrs.to_attrs(), &ins)[0].to_f64_vec(), &want, 1e-6);
        }
    }

    #[test]
    fn adam_step_refuses_what_it_cannot_run() {
        use popart_ir::{lookup_op, Ir, TensorInfo};
        let attrs = AdamStepAttrs {
            m_factor: 0.9,
            v_factor: 0.999,
            mode: AdamMode::Adam,
            weight_decay: None,
            beta1: Some(0.9),
            beta2: Some(0.999),
            epsilon: None,
            a: 1.0,
            b: -0.1,
        };
        let err = |infos: &[(u32, TensorInfo)]| {
            let mut ir = Ir::new();
            let main = ir.main_graph_id();
            let ids: Vec<_> = infos
                .iter()
                .map(|(i, info)| (*i, ir.graph_mut(main).unwrap().add_input(&format!("in{i}"), info.clone()).unwrap()))
                .collect();
            let def = lookup_op("AdamStep").unwrap();
            ir.infer_outputs(main, def, &attrs.to_attrs(), &ids, "step").unwrap_err().to_string()
        };
        let f = |dt, n: usize| TensorInfo::new(dt, [n]);
        let step = (4, TensorInfo::new(DataType::Float32, [1]));
        let four = |v: TensorInfo| {
            vec![(0, f(DataType::Float32, 3)), (1, f(DataType::Float32, 3)), (2, f(DataType::Float32, 3)), (3, v)]
        };
        let mut ins = four(f(DataType::Float32, 4));
        ins.push(step.clone());
        assert!(err(&ins).contains("second moment"), "{}", err(&ins));
        let half: Vec<_> = (0..4).map(|i| (i, f(DataType::Float16, 3))).chain([step]).collect();
        assert!(err(&half).contains("float32 or float64"), "{}", err(&half));
        // Bias correction without the step.
        assert!(err(&four(f(DataType::Float32, 3))).contains("time step"));
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
