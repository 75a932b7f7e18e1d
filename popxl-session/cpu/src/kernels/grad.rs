//! Elementwise gradient kernels created by autodiff: `BinaryGrad`, `WhereGrad`,
//! `ReduceGrad`, `Sum` and `Init`. (The unary gradient ops `ReluGrad`...,
//! the matmul, softmax, loss, slice, gather and reduce-to-shape gradients live
//! with their forward ops.)
//!
//! Input 0 is always the incoming gradient `g`; see `popart_ir::ops::grad` for
//! the forward tensors each op reads.

use popart_ir::DataType;

use super::binary::{MapN, NAry};
use super::broadcast::Broadcast;
use super::dispatch::{with_bits, with_float, with_num};
use super::elem::{Bool8, Float, Num};
use super::float16::{f16_adapter, has_f16};
use super::par::{par_fill, par_range};
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{boxed, norm_axes, BuildResult, Slot, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use popart_ir::ops::all as ir;
use popart_ir::ops::grad::{
    BinaryDerivative, BinaryGradAttrs, InitAttrs, InitType, ReduceGradAttrs, ReduceKind, WhereGradAttrs,
};

macro_rules! grad3 {
    ($($name:ident: |$g:ident, $p:ident, $q:ident| $e:expr;)*) => {$(
        struct $name;
        impl<T: Float> MapN<T, 3> for $name {
            #[inline(always)]
            fn f([$g, $p, $q]: [T; 3]) -> T { $e }
        }
    )*};
}
grad3! {
    // (g, a, b)
    DivRhsG: |g, a, b| -((g * a) / (b * b));
    PowLhsG: |g, a, b| g * b * a.pow(b - T::ONE);
    // (g, a, y)
    PowRhsG: |g, a, y| g * y * a.ln();
    // (g, operand, y): g where operand == y (also ReduceGrad max/min with (g, x, y)).
    MaskEqG: |g, v, y| if v == y { g } else { T::ZERO };
}

/// `y = g[broadcast] * scale` (`ReduceGrad` sum and mean).
struct BroadcastScale<T> {
    plan: Broadcast<1>,
    scale: T,
    src: usize,
}

impl<T: Num> Kernel for BroadcastScale<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let g = SendPtr(args.inputs[self.src] as *mut T);
        let y = SendPtr(args.outputs[0] as *mut T);
        let [s] = self.plan.inner_strides();
        let scale = self.scale;
        par_range(
            self.plan.len(),
            #[inline(always)]
            move |r| {
                self.plan.for_segments(r, |o, [ig], len| {
                    // SAFETY: offsets come from the plan; the output overlaps no input.
                    unsafe {
                        let ys = slice_mut(y.get().add(o), len);
                        if s == 1 {
                            for (out, &v) in ys.iter_mut().zip(slice(g.get().add(ig), len)) {
                                *out = v.mul(scale);
                            }
                        } else {
                            ys.fill((*g.get().add(ig)).mul(scale));
                        }
                    }
                });
            },
        );
        Ok(())
    }
}

/// `WhereGrad{arg}(g, cond)`: `g` where the condition selects operand `arg`, else 0.
struct WhereGradKernel<E> {
    plan: Broadcast<2>,
    pos: [usize; 2],
    /// Condition value that passes `g` through (true for arg 0).
    pass: bool,
    _t: Types<E>,
}

impl<E: Copy + Default + Send + Sync + 'static> Kernel for WhereGradKernel<E> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let g = SendPtr(args.inputs[self.pos[0]] as *mut E);
        let c = SendPtr(args.inputs[self.pos[1]] as *mut Bool8);
        let y = SendPtr(args.outputs[0] as *mut E);
        let [sg, sc] = self.plan.inner_strides();
        let pass = self.pass;
        par_range(
            self.plan.len(),
            #[inline(always)]
            move |r| {
                self.plan.for_segments(r, |o, [ig, ic], len| {
                    // SAFETY: offsets come from the plan; the output overlaps no input.
                    unsafe {
                        let (g, c) = (g.get().add(ig), c.get().add(ic));
                        for (i, out) in slice_mut(y.get().add(o), len).iter_mut().enumerate() {
                            *out = if ((*c.add(i * sc)).0 != 0) == pass { *g.add(i * sg) } else { E::default() };
                        }
                    }
                });
            },
        );
        Ok(())
    }
}

/// `Sum(x0, x1, ...)` of equally shaped inputs, blockwise for cache reuse.
struct SumKernel<T> {
    n: usize,
    _t: Types<T>,
}

impl<T: Num> Kernel for SumKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let y = SendPtr(args.outputs[0] as *mut T);
        let ins = args.inputs;
        // Raw input pointers are only read; wrap for the closure.
        let first = SendPtr(ins[0] as *mut T);
        let rest = SendPtr(ins.as_ptr() as *mut *const u8);
        let count = ins.len();
        par_range(
            self.n,
            #[inline(always)]
            move |r| {
                const BLOCK: usize = 4096;
                let mut start = r.start;
                while start < r.end {
                    let len = BLOCK.min(r.end - start);
                    // SAFETY: every input and the output hold `n` elements; pieces are disjoint.
                    unsafe {
                        let ys = slice_mut(y.get().add(start), len);
                        ys.copy_from_slice(slice(first.get().add(start), len));
                        for k in 1..count {
                            let x = *rest.get().add(k) as *const T;
                            for (o, &v) in ys.iter_mut().zip(slice(x.add(start), len)) {
                                *o = o.add(v);
                            }
                        }
                    }
                    start += len;
                }
            },
        );
        Ok(())
    }
}

/// `Init`: zero bytes.
struct InitKernel {
    /// Bytes to zero: the output's, or none for `InitType::Undef`.
    nbytes: usize,
}

impl Kernel for InitKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: output 0 holds at least `nbytes` (`KernelArgs`).
        unsafe { par_fill(args.outputs[0], self.nbytes, 0) };
        Ok(())
    }
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::Init, build_init),
    (&ir::WhereGrad, build_where_grad),
    (&ir::BinaryGrad, build_binary_grad),
    (&ir::ReduceGrad, build_reduce_grad),
    (&ir::Sum, build_sum),
];

fn build_init(spec: &KernelSpec<'_>) -> BuildResult {
    let undef = spec.typed::<InitAttrs>()?.init_type == Some(InitType::Undef);
    Ok(Box::new(InitKernel { nbytes: if undef { 0 } else { spec.output(0)?.info.nbytes() } }))
}

fn build_where_grad(spec: &KernelSpec<'_>) -> BuildResult {
    let y = spec.output(0)?;
    let (g, c) = (spec.input(0)?, spec.input(1)?);
    if c.dtype() != DataType::Bool || y.dtype() != g.dtype() {
        return Err(spec.error(format!(
            "expected a bool condition and {} output, got {} and {}",
            g.dtype(),
            c.info,
            y.info
        )));
    }
    let plan = Broadcast::new(y.shape(), [g.shape(), c.shape()])
        .ok_or_else(|| spec.error("gradient and condition do not broadcast to the output"))?;
    let pass = match spec.typed::<WhereGradAttrs>()?.arg {
        0 => true,
        1 => false,
        a => return Err(spec.error(format!("`arg` must be 0 or 1, got {a}"))),
    };
    let pos = [g.pos, c.pos];
    with_bits!(g.dtype(), E => boxed(WhereGradKernel::<E> { plan, pos, pass, _t: Types::default() }))
}

/// The gradient `g` and output `y` of an arithmetic gradient op, of one dtype.
fn grad_operands<'s>(spec: &'s KernelSpec<'_>) -> Result<(Slot<'s>, Slot<'s>, DataType), KernelError> {
    let (g, y) = (spec.input(0)?, spec.output(0)?);
    let dt = g.dtype();
    if y.dtype() != dt {
        return Err(spec.error(format!("output dtype {} differs from the gradient's {dt}", y.dtype())));
    }
    Ok((g, y, dt))
}

fn build_binary_grad(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_binary_grad);
    }
    let (g, y, dt) = grad_operands(spec)?;
    let derivative = spec.typed::<BinaryGradAttrs>()?.derivative;
    if y.shape() != g.shape() {
        return Err(spec.error(format!("output {} must have the gradient's shape {:?}", y.info, g.shape())));
    }
    let [i0, i1, i2] = derivative.operands();
    let operands = [spec.input(i0)?, spec.input(i1)?, spec.input(i2)?];
    if operands.iter().any(|s| s.dtype() != dt) {
        return Err(spec.error("operands must share the gradient's dtype"));
    }
    let shapes = [operands[0].shape(), operands[1].shape(), operands[2].shape()];
    let pos = operands.map(|s| s.pos);
    macro_rules! bin {
            ($f:ty) => {
                with_float!(dt, T => NAry::<T, $f, 3>::boxed(spec, g.shape(), shapes, pos),
                    _ => Err(spec.unsupported_dtype(dt)))
            };
        }
    match derivative {
        BinaryDerivative::DivRhs => bin!(DivRhsG),
        BinaryDerivative::PowLhs => bin!(PowLhsG),
        BinaryDerivative::PowRhs => bin!(PowRhsG),
        BinaryDerivative::MaxLhs | BinaryDerivative::MaxRhs | BinaryDerivative::MinLhs | BinaryDerivative::MinRhs => {
            bin!(MaskEqG)
        }
    }
}

fn build_reduce_grad(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_reduce_grad);
    }
    let (g, x, dt) = grad_operands(spec)?;
    let ReduceGradAttrs { reduction, axes, .. } = spec.typed()?;
    // The output has the forward input's shape (attribute `shape`); `x` (input
    // 1) is connected only for the reductions whose formula reads it.
    if let Some((_, fx)) = spec.inputs.iter().find(|(i, _)| *i == 1) {
        if fx != x.info {
            return Err(spec.error(format!("output {} must match the forward input {fx}", x.info)));
        }
    }
    let axes = norm_axes(spec, &axes, x.info.rank())?;
    let kept: Vec<usize> = x.shape().iter().enumerate().map(|(d, &n)| if axes.contains(&d) { 1 } else { n }).collect();
    let kept_len: usize = kept.iter().product();
    if g.nelms() != kept_len {
        return Err(spec.error(format!("gradient {} does not match the reduced shape {kept:?}", g.info)));
    }
    let count = x.nelms().checked_div(kept_len).unwrap_or(1);
    match reduction {
        ReduceKind::Sum | ReduceKind::Mean => {
            let plan = Broadcast::new(x.shape(), [&kept[..]]).ok_or_else(|| spec.error("bad reduction shape"))?;
            let scale = if reduction == ReduceKind::Mean { 1.0 / count.max(1) as f64 } else { 1.0 };
            let src = g.pos;
            with_num!(dt, T => boxed(BroadcastScale::<T> { plan, scale: T::from_f64(scale), src }),
                    _ => Err(spec.unsupported_dtype(dt)))
        }
        ReduceKind::Max | ReduceKind::Min => {
            let fy = spec.input(2)?;
            if fy.nelms() != kept_len {
                return Err(spec.error(format!("forward output {} does not match {kept:?}", fy.info)));
            }
            let fx = spec.input(1)?;
            let shapes = [&kept[..], x.shape(), &kept[..]];
            with_float!(dt, T => NAry::<T, MaskEqG, 3>::boxed(spec, x.shape(), shapes, [g.pos, fx.pos, fy.pos]),
                    _ => Err(spec.unsupported_dtype(dt)))
        }
        ReduceKind::Prod
        | ReduceKind::L1
        | ReduceKind::L2
        | ReduceKind::LogSum
        | ReduceKind::LogSumExp
        | ReduceKind::SumSquare => super::reduce::groups::build_reduce_grad(spec, reduction),
    }
}

fn build_sum(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_sum);
    }
    let (_, y, dt) = grad_operands(spec)?;
    if spec.inputs.is_empty() || spec.inputs.iter().any(|(_, t)| t != y.info) {
        return Err(spec.error(format!("every input must be {}", y.info)));
    }
    let n = y.nelms();
    with_num!(dt, T => boxed(SumKernel::<T> { n, _t: Types::default() }), _ => Err(spec.unsupported_dtype(dt)))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, numeric_grad, run_op, t, Rng};
    use popart_ir::ops::all::{
        BinaryDerivative, BinaryGradAttrs, InitAttrs, InitType, ReduceGradAttrs, ReduceKind, WhereGradAttrs,
    };
    use popart_ir::ops::reduce::ReduceAttrs;
    use popart_ir::{Attributes, DataType, HostTensor, OpAttrs};

    fn f64s(shape: &[usize], v: &[f64]) -> HostTensor {
        t(DataType::Float64, shape, v)
    }

    fn fwd(op: &str, attrs: &Attributes, ins: &[(u32, HostTensor)]) -> Vec<f64> {
        run_op(op, attrs.clone(), ins)[0].to_f64_vec()
    }

    /// Every unary gradient op of the IR's table against a central difference
    /// of its forward op (a gradient op without a kernel fails here).
    #[test]
    fn unary_grads_match_finite_differences() {
        // Every line of the IR's differentiable unary table, its gradient op fed
        // the forward tensor the IR's grad rule connects (input or output), on
        // positive inputs and, where the op is defined there, on negative ones
        // (away from the kinks at 0).
        use popart_ir::ops::unary::DERIVATIVES;
        use popart_ir::{GradRule, GradSource, Ir, TensorInfo};
        let mut rng = Rng::new(1);
        let shape = [2, 3];
        assert_eq!(DERIVATIVES.len(), super::super::unary::GRAD_KERNELS.len());
        for (def, grad_def) in DERIVATIVES {
            let op = def.op_type();
            let mut ir = Ir::new();
            let main = ir.main_graph_id();
            let xin = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float64, shape)).unwrap();
            let id = ir.create_op(main, *def, Attributes::new(), &[(0, xin)], "f").unwrap();
            let from_y = match def.grad(&popart_ir::GradContext::new(ir.main_graph().op(id).unwrap(), ir.main_graph()))
            {
                GradRule::Ops(specs) => {
                    assert_eq!(specs[0].op.id(), grad_def.id(), "{op}");
                    specs[0].inputs.iter().any(|(_, s)| matches!(s, GradSource::FwdOutput(_)))
                }
                other => panic!("{op}: unexpected grad rule {other:?}"),
            };
            for sign in [1.0, -1.0] {
                let x: Vec<f64> = rng.vec(6, 0.2, 2.0).into_iter().map(|v| sign * v).collect();
                let none = Attributes::new();
                let y = fwd(op, &none, &[(0, f64s(&shape, &x))]);
                if y.iter().any(|v| !v.is_finite()) {
                    continue; // outside the op's domain (log, sqrt of negatives)
                }
                let w = rng.vec(6, -1.0, 1.0);
                let want = numeric_grad(&x, 1e-6, |x| {
                    fwd(op, &none, &[(0, f64s(&shape, x))]).iter().zip(&w).map(|(a, b)| a * b).sum()
                });
                let v = if from_y { &y } else { &x };
                let ins = [(0, f64s(&shape, &w)), (1, f64s(&shape, v))];
                let got = run_op(grad_def.op_type(), none.clone(), &ins)[0].to_f64_vec();
                assert_close(&got, &want, 1e-7);
                let ins32: Vec<_> =
                    ins.iter().map(|(i, h)| (*i, t(DataType::Float32, &shape, &h.to_f64_vec()))).collect();
                assert_close(&run_op(grad_def.op_type(), none, &ins32)[0].to_f64_vec(), &want, 1e-4);
            }
        }
    }

    /// BinaryGrad derivatives against central differences of Div, Pow, Maximum, Minimum
    /// (gradient at the broadcast shape, before autodiff's reduction).
    #[test]
    fn binary_grads_match_finite_differences() {
        let mut rng = Rng::new(2);
        let (sa, sb, so) = ([2usize, 3], [3usize], [2usize, 3]);
        let a = rng.vec(6, 0.5, 2.0);
        let b = rng.vec(3, 0.5, 2.0);
        let w = rng.vec(6, -1.0, 1.0);
        let none = Attributes::new();
        use BinaryDerivative as D;
        let cases = [
            ("Div", D::DivRhs, 1),
            ("Pow", D::PowLhs, 0),
            ("Pow", D::PowRhs, 1),
            ("Maximum", D::MaxLhs, 0),
            ("Maximum", D::MaxRhs, 1),
            ("Minimum", D::MinLhs, 0),
            ("Minimum", D::MinRhs, 1),
        ];
        for (op, func, wrt) in cases {
            // The gradient at the broadcast shape: differentiate w.r.t. a broadcast copy of the operand.
            let (expanded, shape_e): (Vec<f64>, &[usize]) =
                if wrt == 0 { (a.clone(), &sa) } else { ((0..6).map(|i| b[i % 3]).collect(), &so) };
            let want = numeric_grad(&expanded, 1e-6, |e| {
                let ins = if wrt == 0 {
                    [(0, f64s(shape_e, e)), (1, f64s(&sb, &b))]
                } else {
                    [(0, f64s(&sa, &a)), (1, f64s(shape_e, e))]
                };
                fwd(op, &none, &ins).iter().zip(&w).map(|(p, q)| p * q).sum()
            });
            let y = fwd(op, &none, &[(0, f64s(&sa, &a)), (1, f64s(&sb, &b))]);
            let attrs = BinaryGradAttrs { derivative: func }.to_attrs();
            let mut ins = vec![(0, f64s(&so, &w)), (1, f64s(&sa, &a)), (2, f64s(&sb, &b))];
            // Only the derivatives that read the forward output take it (inference refuses unread inputs).
            if !matches!(func, D::DivRhs | D::PowLhs) {
                ins.push((3, f64s(&so, &y)));
            }
            let got = run_op("BinaryGrad", attrs, &ins)[0].to_f64_vec();
            assert_close(&got, &want, 1e-7);
        }
    }

    #[test]
    fn where_grad_routes_the_gradient() {
        let g = f64s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let c = t(DataType::Bool, &[2], &[1.0, 0.0]);
        let arg = |arg| WhereGradAttrs { arg }.to_attrs();
        assert_eq!(
            run_op("WhereGrad", arg(0), &[(0, g.clone()), (1, c.clone())])[0].to_f64_vec(),
            vec![1.0, 0.0, 3.0, 0.0]
        );
        assert_eq!(run_op("WhereGrad", arg(1), &[(0, g), (1, c)])[0].to_f64_vec(), vec![0.0, 2.0, 0.0, 4.0]);
    }

    /// ReduceGrad for each reduction against central differences of the forward reduction.
    #[test]
    fn reduce_grads_match_finite_differences() {
        let mut rng = Rng::new(3);
        let shape = [2usize, 3, 4];
        let x = rng.vec(24, -1.0, 1.0);
        use ReduceKind as K;
        for (op, func) in [("ReduceSum", K::Sum), ("ReduceMean", K::Mean), ("ReduceMax", K::Max), ("ReduceMin", K::Min)]
        {
            for (axes, keepdims) in [(vec![1i64], false), (vec![0, 2], true), (vec![], false)] {
                let fa = ReduceAttrs { axes: axes.clone(), keepdims }.to_attrs();
                let y = run_op(op, fa.clone(), &[(0, f64s(&shape, &x))]).remove(0);
                let w = rng.vec(y.info.nelms(), -1.0, 1.0);
                let want = numeric_grad(&x, 1e-6, |x| {
                    fwd(op, &fa, &[(0, f64s(&shape, x))]).iter().zip(&w).map(|(p, q)| p * q).sum()
                });
                let ga = ReduceGradAttrs {
                    reduction: func,
                    axes,
                    keepdims,
                    shape: shape.iter().map(|&d| d as i64).collect(),
                }
                .to_attrs();
                let mut ins = vec![(0, f64s(&y.info.shape, &w))];
                if matches!(func, K::Max | K::Min) {
                    ins.push((1, f64s(&shape, &x)));
                    ins.push((2, y.clone()));
                }
                let got = run_op("ReduceGrad", ga, &ins)[0].to_f64_vec();
                assert_close(&got, &want, 1e-7);
            }
        }
    }

    #[test]
    fn sum_and_init() {
        let a = f64s(&[3], &[1.0, 2.0, 3.0]);
        let b = f64s(&[3], &[10.0, 20.0, 30.0]);
        let c = f64s(&[3], &[0.5, 0.5, 0.5]);
        let out = run_op("Sum", Attributes::new(), &[(0, a.clone()), (1, b), (2, c)]);
        assert_eq!(out[0].to_f64_vec(), vec![11.5, 22.5, 33.5]);
        assert_eq!(run_op("Sum", Attributes::new(), &[(0, a)])[0].to_f64_vec(), vec![1.0, 2.0, 3.0]);
        let n = 70_001;
        let big: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let out = run_op("Sum", Attributes::new(), &[(0, f64s(&[n], &big)), (1, f64s(&[n], &big))]);
        assert!(out[0].to_f64_vec().iter().enumerate().all(|(i, &v)| v == 2.0 * i as f64));
        let init = InitAttrs { shape: vec![2, 2], dtype: DataType::Int32, init_type: None }.to_attrs();
        let z = run_op("Init", init, &[]);
        assert_eq!(z[0].info, popart_ir::TensorInfo::new(DataType::Int32, [2, 2]));
        assert_eq!(z[0].to_f64_vec(), vec![0.0; 4]);
        // Large enough to be filled by the team; the output starts as garbage.
        let init = InitAttrs { shape: vec![3, 100_003], dtype: DataType::Float32, init_type: None }.to_attrs();
        assert!(run_op("Init", init, &[])[0].to_f64_vec().iter().all(|&v| v == 0.0));
        // `undef` leaves the buffer as it was (the test harness's 0x5A bytes).
        let undef = InitAttrs { shape: vec![2, 3], dtype: DataType::Int32, init_type: Some(InitType::Undef) };
        let u = run_op("Init", undef.to_attrs(), &[]);
        assert!(u[0].bytes.iter().all(|&b| b == 0x5A));
        let zero = InitAttrs { init_type: Some(InitType::Zero), ..undef };
        assert_eq!(run_op("Init", zero.to_attrs(), &[])[0].to_f64_vec(), vec![0.0; 6]);
    }
}
