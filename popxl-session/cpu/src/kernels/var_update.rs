//! In-place variable updates: `AddInplace`, `ScaledAddInplace`, `CopyVarUpdate`
//! and integer `Accumulate` (float accumulators are in [`accumulate`]). The updated
//! tensor (input 0) is read and written through output pointer 0 only, as the
//! aliasing invariant requires.

use super::broadcast::Broadcast;
use super::dispatch::with_num;
use super::elem::Num;
use super::float16::{f16_adapter, has_f16};
use super::par::par_range;
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{BuildResult, SpecExt, Types};
use super::unary::CopyKernel;
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use popart_ir::ops::all as ir;
use popart_ir::ops::var_update::{AccumulateAttrs, ScaleAttrs};

pub(super) mod accumulate;

/// Where a scalar coefficient comes from.
#[derive(Clone, Copy, Debug)]
enum Coef<T> {
    Const(T),
    /// A one-element input at this position, read at run time.
    Input(usize),
}

impl<T: Num> Coef<T> {
    #[inline(always)]
    unsafe fn get(self, args: &KernelArgs<'_>) -> T {
        match self {
            Coef::Const(v) => v,
            // SAFETY: input `p` holds one `T` (this method's contract).
            Coef::Input(p) => unsafe { *(args.inputs[p] as *const T) },
        }
    }
    fn is_one(self) -> bool {
        matches!(self, Coef::Const(v) if v == T::ONE)
    }
}

/// The update formula; implemented by zero-sized types.
trait Update<T>: Send + Sync + 'static {
    fn f(t: T, x: T, a: T, b: T) -> T;
}
struct AddU;
impl<T: Num> Update<T> for AddU {
    #[inline(always)]
    fn f(t: T, x: T, _: T, _: T) -> T {
        t.add(x)
    }
}
struct AxpyU;
impl<T: Num> Update<T> for AxpyU {
    #[inline(always)]
    fn f(t: T, x: T, _: T, b: T) -> T {
        t.add(b.mul(x))
    }
}
struct ScaledU;
impl<T: Num> Update<T> for ScaledU {
    #[inline(always)]
    fn f(t: T, x: T, a: T, b: T) -> T {
        a.mul(t).add(b.mul(x))
    }
}

/// `t = F(t, x, a, b)` in place, `x` broadcast to `t`.
struct InPlace<T, F> {
    plan: Broadcast<1>,
    x: usize,
    a: Coef<T>,
    b: Coef<T>,
    _t: Types<F>,
}

/// `t[i] = f(t[i], x[i])` over `plan` (`x` broadcast to `t`), threaded.
///
/// # Safety
/// `t` is the updated tensor's buffer, accessed only through this pointer (the
/// kernel's output pointer); `x` is a different buffer of the planned shape.
pub(super) unsafe fn update_in_place<T: Copy + Send + Sync>(
    plan: &Broadcast<1>,
    t: *mut T,
    x: *const T,
    f: impl Fn(T, T) -> T + Copy + Send + Sync,
) {
    let (t, x) = (SendPtr(t), SendPtr(x as *mut T));
    let [sx] = plan.inner_strides();
    par_range(
        plan.len(),
        #[inline(always)]
        move |r| {
            // A local copy of `f` (and the scalars it holds): stores through `t`
            // cannot alias it, so the loops vectorise.
            let f = f;
            plan.for_segments(
                r,
                #[inline(always)]
                |o, [ix], len| {
                    // SAFETY: the caller's contract; segments of different pieces are disjoint.
                    unsafe {
                        let ts = slice_mut(t.get().add(o), len);
                        if sx == 1 {
                            for (v, &u) in ts.iter_mut().zip(slice(x.get().add(ix), len)) {
                                *v = f(*v, u);
                            }
                        } else {
                            let u = *x.get().add(ix);
                            for v in ts {
                                *v = f(*v, u);
                            }
                        }
                    }
                },
            );
        },
    );
}

impl<T: Num, F: Update<T>> Kernel for InPlace<T, F> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the build checked that an `Input` coefficient is a one-element
        // input of the kernel's dtype, and `args` holds the spec's buffers.
        let (a, b) = unsafe { (self.a.get(args), self.b.get(args)) };
        // SAFETY: the updated tensor is read and written through output 0 only;
        // `x` is a different buffer (the executor guarantees non-overlap).
        unsafe {
            update_in_place(
                &self.plan,
                args.outputs[0] as *mut T,
                args.inputs[self.x] as *const T,
                #[inline(always)]
                move |t, u| F::f(t, u, a, b),
            )
        };
        Ok(())
    }
}

fn coef<T: Num>(spec: &KernelSpec<'_>, value: Option<f64>, input: u32) -> Result<Coef<T>, KernelError> {
    match spec.opt_input(input) {
        Some(s) if s.nelms() == 1 && s.dtype() == spec.input(0)?.dtype() => Ok(Coef::Input(s.pos)),
        Some(s) => Err(spec.error(format!(
            "input {input} must be a one-element {} tensor, got {}",
            spec.input(0)?.dtype(),
            s.info
        ))),
        None => Ok(Coef::Const(T::from_f64(value.unwrap_or(1.0)))),
    }
}

fn build_typed<T: Num>(spec: &KernelSpec<'_>) -> BuildResult {
    let (t, x) = (spec.input(0)?, spec.input(1)?);
    let plan = Broadcast::new(t.shape(), [x.shape()])
        .ok_or_else(|| spec.error(format!("update {} does not broadcast to {}", x.info, t.info)))?;
    let (a, b): (Coef<T>, Coef<T>) = match () {
        _ if spec.is::<ir::AddInplace>() => (Coef::Const(T::ONE), Coef::Const(T::ONE)),
        _ if spec.is::<ir::Accumulate>() => {
            (Coef::Const(T::ONE), coef(spec, spec.typed::<AccumulateAttrs>()?.factor, 2)?)
        }
        _ => {
            let ScaleAttrs { a, b } = spec.typed()?;
            (coef(spec, a, 2)?, coef(spec, b, 3)?)
        }
    };
    let xp = x.pos;
    Ok(match (a.is_one(), b.is_one()) {
        (true, true) => Box::new(InPlace::<T, AddU> { plan, x: xp, a, b, _t: Types::default() }),
        (true, false) => Box::new(InPlace::<T, AxpyU> { plan, x: xp, a, b, _t: Types::default() }),
        _ => Box::new(InPlace::<T, ScaledU> { plan, x: xp, a, b, _t: Types::default() }),
    })
}

/// Build the in-place update kernels.
pub(crate) fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let (t, x, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    if y.info != t.info || t.dtype() != x.dtype() {
        return Err(
            spec.error(format!("output {} must equal the updated tensor {} (update {})", y.info, t.info, x.info))
        );
    }
    if t.pos != 0 {
        return Err(spec.error("the updated tensor must be input 0"));
    }
    if spec.is::<ir::CopyVarUpdate>() {
        if x.shape() != t.shape() {
            return Err(spec.error(format!("copy of {} into {}", x.info, t.info)));
        }
        return Ok(Box::new(CopyKernel { nbytes: t.info.nbytes(), src: x.pos }));
    }
    if has_f16(spec) {
        return f16_adapter(spec, true, build);
    }
    let dt = t.dtype();
    with_num!(dt, T => build_typed::<T>(spec), _ => Err(spec.unsupported_dtype(dt)))
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] =
    &[(&ir::AddInplace, build), (&ir::ScaledAddInplace, build), (&ir::CopyVarUpdate, build)];

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, run_op, t};
    use popart_ir::ops::var_update::{AccumulateAttrs, ScaleAttrs};
    use popart_ir::{Attributes, DataType, OpAttrs};

    fn factor(f: f64) -> Attributes {
        AccumulateAttrs { kind: None, factor: Some(f) }.to_attrs()
    }

    #[test]
    fn add_inplace_and_accumulate_with_broadcast() {
        let v = t(DataType::Float32, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let x = t(DataType::Float32, &[3], &[10.0, 20.0, 30.0]);
        let out = &run_op("AddInplace", Attributes::new(), &[(0, v.clone()), (1, x.clone())])[0];
        assert_eq!(out.to_f64_vec(), vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
        let f = factor(0.5);
        let out = &run_op("Accumulate", f, &[(0, v.clone()), (1, x.clone())])[0];
        assert_eq!(out.to_f64_vec(), vec![6.0, 12.0, 18.0, 9.0, 15.0, 21.0]);
        let ft = t(DataType::Float32, &[], &[-1.0]);
        let out = &run_op("Accumulate", Attributes::new(), &[(0, v), (1, x), (2, ft)])[0];
        assert_eq!(out.to_f64_vec(), vec![-9.0, -18.0, -27.0, -6.0, -15.0, -24.0]);
    }

    #[test]
    fn scaled_add_with_attributes_and_tensors() {
        let v = t(DataType::Float64, &[3], &[1.0, 2.0, 3.0]);
        let y = t(DataType::Float64, &[3], &[4.0, 5.0, 6.0]);
        let ab = ScaleAttrs { a: Some(2.0), b: Some(-0.5) }.to_attrs();
        let out = &run_op("ScaledAddInplace", ab, &[(0, v.clone()), (1, y.clone())])[0];
        assert_close(&out.to_f64_vec(), &[0.0, 1.5, 3.0], 0.0);
        let b = ScaleAttrs { a: None, b: Some(-0.1) }.to_attrs();
        let out = &run_op("ScaledAddInplace", b, &[(0, v.clone()), (1, y.clone())])[0];
        assert_close(&out.to_f64_vec(), &[0.6, 1.5, 2.4], 1e-15);
        let (ta, tb) = (t(DataType::Float64, &[1], &[3.0]), t(DataType::Float64, &[], &[1.0]));
        let out = &run_op("ScaledAddInplace", Attributes::new(), &[(0, v), (1, y), (2, ta), (3, tb)])[0];
        assert_close(&out.to_f64_vec(), &[7.0, 11.0, 15.0], 0.0);
    }

    #[test]
    fn copy_var_update_and_other_dtypes() {
        let v = t(DataType::Int32, &[2], &[1.0, 2.0]);
        let x = t(DataType::Int32, &[2], &[7.0, -7.0]);
        assert_eq!(
            run_op("CopyVarUpdate", Attributes::new(), &[(0, v.clone()), (1, x.clone())])[0].to_f64_vec(),
            vec![7.0, -7.0]
        );
        assert_eq!(run_op("AddInplace", Attributes::new(), &[(0, v), (1, x)])[0].to_f64_vec(), vec![8.0, -5.0]);
        let h = t(DataType::Float16, &[2], &[1.0, 2.0]);
        let hx = t(DataType::Float16, &[2], &[0.5, 0.25]);
        let f = factor(2.0);
        assert_eq!(run_op("Accumulate", f, &[(0, h), (1, hx)])[0].to_f64_vec(), vec![2.0, 2.5]);
    }

    #[test]
    fn large_in_place_update_in_parallel() {
        let n = 100_000;
        let v: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let out = &run_op(
            "AddInplace",
            Attributes::new(),
            &[(0, t(DataType::Float64, &[n], &v)), (1, t(DataType::Float64, &[], &[1.0]))],
        )[0];
        assert!(out.to_f64_vec().iter().enumerate().all(|(i, &x)| x == i as f64 + 1.0));
    }
}
