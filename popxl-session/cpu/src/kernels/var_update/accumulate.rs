//! Accumulator updates: `Accumulate` (every PopART `AccumulationType`),
//! `AccumulatorScale` and `SparseAccumulate`. The accumulator (input 0) is read
//! and written through output pointer 0 only. Float accumulators take updates of
//! a compatible float type (float16 with float32 through the f16 adapter, so the
//! arithmetic is float32); integer `Accumulate` (add types only) runs the plain
//! in-place kernel of `var_update`.

use half::f16;
use popart_ir::ops::all as ir;
use popart_ir::ops::var_update::AccumulationType;
use popart_ir::ops::var_update::{AccumulateAttrs, AccumulatorScaleAttrs, SparseAccumulateAttrs};
use popart_ir::DataType;

use super::update_in_place;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelRunError, KernelSpec};
use crate::kernels::broadcast::Broadcast;
use crate::kernels::dispatch::{with_float, with_index};
use crate::kernels::elem::{Float, IndexElem};
use crate::kernels::float16::{f16_adapter, has_f16};
use crate::kernels::par::par_range;
use crate::kernels::ptr::{slice, slice_mut, SendPtr};
use crate::kernels::spec::{boxed, norm_axis, BuildResult, SpecExt, Types};
use crate::kernels::KernelEntry;

/// A scalar operand: a constant (attribute) or a one-element input of any numeric
/// dtype, read as f64 at run time.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scalar {
    /// A constant.
    Const(f64),
    /// A one-element input at this position, of this dtype.
    Input(usize, DataType),
}

impl Scalar {
    /// The value.
    ///
    /// # Safety
    /// An input position must be valid for `args` and hold one element of its dtype.
    #[inline]
    pub(crate) unsafe fn get(self, args: &KernelArgs<'_>) -> f64 {
        match self {
            Scalar::Const(v) => v,
            // SAFETY: input `p` holds one element of `dt` (this method's contract).
            Scalar::Input(p, dt) => unsafe { read_f64(args.inputs[p], dt) },
        }
    }

    /// The scalar at input `index`, else the attribute's decoded `value`, else
    /// `default` (a build error when none is given); `attr` names it in errors.
    pub(crate) fn of(
        spec: &KernelSpec<'_>,
        index: u32,
        value: Option<f64>,
        default: Option<f64>,
    ) -> Result<Scalar, KernelError> {
        match spec.opt_input(index) {
            Some(s) if s.nelms() == 1 && s.dtype() != DataType::Bool => Ok(Scalar::Input(s.pos, s.dtype())),
            Some(s) => Err(spec.error(format!("input {index} must be a one-element tensor, got {}", s.info))),
            None => value
                .or(default)
                .map(Scalar::Const)
                .ok_or_else(|| spec.error(format!("missing scalar: attribute or input {index}"))),
        }
    }
}

/// Read one element of dtype `dt` at `p` as f64.
///
/// # Safety
/// `p` points to one valid element of `dt`.
#[inline]
pub(crate) unsafe fn read_f64(p: *const u8, dt: DataType) -> f64 {
    // SAFETY: `p` points to one element of `dt` (this function's contract), read
    // as that type.
    unsafe {
        match dt {
            DataType::Float16 => (*(p as *const f16)).to_f64(),
            DataType::Float32 => f64::from(*(p as *const f32)),
            DataType::Float64 => *(p as *const f64),
            DataType::Int8 => f64::from(*(p as *const i8)),
            DataType::Int16 => f64::from(*(p as *const i16)),
            DataType::Int32 => f64::from(*(p as *const i32)),
            DataType::Int64 => *(p as *const i64) as f64,
            DataType::Uint8 => f64::from(*p),
            DataType::Uint16 => f64::from(*(p as *const u16)),
            DataType::Uint32 => f64::from(*(p as *const u32)),
            DataType::Uint64 => *(p as *const u64) as f64,
            DataType::Bool => f64::from(*p),
            DataType::Float8_143 | DataType::Float8_152 => match popart_ir::float8::Float8Format::of(dt) {
                Some(f) => f.decode_f64(*p),
                None => f64::NAN,
            },
        }
    }
}

/// `t = a * t + b * x`, `a * t + b * x²` or `max(a * t, |x|)`: every accumulation
/// type is one of these forms with `(a, b)` computed from the factor per run.
trait Form<T>: Send + Sync + 'static {
    fn f(t: T, x: T, a: T, b: T) -> T;
}
struct Linear;
impl<T: Float> Form<T> for Linear {
    #[inline(always)]
    fn f(t: T, x: T, a: T, b: T) -> T {
        a * t + b * x
    }
}
struct Square;
impl<T: Float> Form<T> for Square {
    #[inline(always)]
    fn f(t: T, x: T, a: T, b: T) -> T {
        a * t + b * x * x
    }
}
struct Infinity;
impl<T: Float> Form<T> for Infinity {
    #[inline(always)]
    fn f(t: T, x: T, a: T, _: T) -> T {
        (a * t).maximum(x.abs())
    }
}

/// `(a, b)` of `ty` for factor `f` (PopART's formulas, see [`AccumulationType`]).
fn coefficients(ty: AccumulationType, f: f64) -> (f64, f64) {
    use AccumulationType as A;
    match ty {
        A::Add => (1.0, 1.0),
        A::DampenedAdd | A::DampenedAddSquare => (1.0, f),
        A::DecayAdd | A::DecayAddSquare | A::Infinity => (f, 1.0),
        A::MovingAverage | A::MovingAverageSquare => (f, 1.0 - f),
        A::Mean => {
            let b = 1.0 / (f + 1.0);
            (1.0 - b, b)
        }
    }
}

/// `Accumulate` on float `T`, `x` broadcast to `t`.
struct AccumulateKernel<T, F> {
    plan: Broadcast<1>,
    x: usize,
    ty: AccumulationType,
    factor: Scalar,
    _t: Types<(T, F)>,
}

impl<T: Float, F: Form<T>> Kernel for AccumulateKernel<T, F> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the build made an `Input` factor only of a one-element input
        // (`Scalar::of`), which `args` holds.
        let (a, b) = coefficients(self.ty, unsafe { self.factor.get(args) });
        let (a, b) = (T::from_f64(a), T::from_f64(b));
        // SAFETY: the accumulator is read and written through output 0 only and
        // `x` is another buffer.
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

fn build_accumulate(spec: &KernelSpec<'_>) -> BuildResult {
    let (t, x, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    if y.info != t.info || t.pos != 0 {
        return Err(spec.error(format!("output {} must be the updated input 0 {}", y.info, t.info)));
    }
    let a = spec.typed::<AccumulateAttrs>()?;
    let ty = a.kind();
    if !t.dtype().is_floating_point() {
        if !matches!(ty, AccumulationType::Add | AccumulationType::DampenedAdd) {
            return Err(spec.unsupported_dtype(t.dtype()));
        }
        return super::build(spec);
    }
    if has_f16(spec) {
        return f16_adapter(spec, true, build_accumulate);
    }
    if t.dtype() != x.dtype() {
        return Err(spec.error(format!("cannot accumulate {} into {}", x.info, t.info)));
    }
    let plan = Broadcast::new(t.shape(), [x.shape()])
        .ok_or_else(|| spec.error(format!("update {} does not broadcast to {}", x.info, t.info)))?;
    let default = if ty.factor_defaults_to_one() || ty == AccumulationType::Add { Some(1.0) } else { None };
    let factor = Scalar::of(spec, 2, a.factor, default)?;
    let xp = x.pos;
    let dt = t.dtype();
    use AccumulationType as A;
    with_float!(dt, T => match ty {
        A::DampenedAddSquare | A::DecayAddSquare | A::MovingAverageSquare =>
            boxed(AccumulateKernel::<T, Square> { plan, x: xp, ty, factor, _t: Types::default() }),
        A::Infinity => boxed(AccumulateKernel::<T, Infinity> { plan, x: xp, ty, factor, _t: Types::default() }),
        _ => boxed(AccumulateKernel::<T, Linear> { plan, x: xp, ty, factor, _t: Types::default() }),
    }, _ => Err(spec.unsupported_dtype(dt)))
}

/// `AccumulatorScale` with a constant 0: zero the bytes of the tensor.
struct ZeroKernel {
    nbytes: usize,
}

impl Kernel for ZeroKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the output holds the spec's `nbytes` (`KernelArgs`).
        unsafe { std::ptr::write_bytes(args.outputs[0], 0, self.nbytes) };
        Ok(())
    }
}

/// `AccumulatorScale`: `t *= f`.
struct ScaleKernel<T> {
    n: usize,
    factor: Scalar,
    _t: Types<T>,
}

impl<T: Float> Kernel for ScaleKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the build made an `Input` factor only of a one-element input
        // (`Scalar::of`), which `args` holds.
        let f = T::from_f64(unsafe { self.factor.get(args) });
        let t = SendPtr(args.outputs[0] as *mut T);
        par_range(
            self.n,
            #[inline(always)]
            move |r| {
                // SAFETY: the tensor holds `n` elements; pieces are disjoint.
                for v in unsafe { slice_mut(t.get().add(r.start), r.len()) } {
                    *v = *v * f;
                }
            },
        );
        Ok(())
    }
}

fn build_scale(spec: &KernelSpec<'_>) -> BuildResult {
    let (t, y) = (spec.input(0)?, spec.output(0)?);
    if y.info != t.info || t.pos != 0 {
        return Err(spec.error(format!("output {} must be the updated input 0 {}", y.info, t.info)));
    }
    let factor = Scalar::of(spec, 2, spec.typed::<AccumulatorScaleAttrs>()?.factor, None)?;
    if matches!(factor, Scalar::Const(f) if f == 0.0) {
        return boxed(ZeroKernel { nbytes: t.info.nbytes() });
    }
    if has_f16(spec) {
        return f16_adapter(spec, true, build_scale);
    }
    let (dt, n) = (t.dtype(), t.nelms());
    with_float!(dt, T => boxed(ScaleKernel::<T> { n, factor, _t: Types::default() }),
        _ => Err(spec.unsupported_dtype(dt)))
}

/// `[outer, axis_len, inner]` accumulator updated at `nidx` rows along the axis.
#[derive(Clone, Copy, Debug)]
struct SparseDims {
    outer: usize,
    axis_len: usize,
    inner: usize,
    nidx: usize,
}

impl SparseDims {
    /// The row of index value `v` (negative counts from the end), if in range.
    #[inline(always)]
    fn row(&self, v: i64) -> Option<usize> {
        let a = self.axis_len as i64;
        let v = if v < 0 { v + a } else { v };
        (0..a).contains(&v).then_some(v as usize)
    }
}

/// `SparseAccumulate`: out-of-range indices add nothing (or, with `check`, are an
/// error raised before anything is written).
struct SparseAccumulateKernel<T, I> {
    d: SparseDims,
    x: usize,
    idx: usize,
    factor: Scalar,
    check: bool,
    _t: Types<(T, I)>,
}

impl<T: Float, I: IndexElem> Kernel for SparseAccumulateKernel<T, I> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let d = self.d;
        // SAFETY: the indices hold `nidx` elements (`KernelArgs`).
        let idx = unsafe { slice(args.inputs[self.idx] as *const I, d.nidx) };
        if self.check {
            if let Some(&v) = idx.iter().find(|&&v| d.row(v.to_i64()).is_none()) {
                return Err(KernelRunError::IndexOutOfRange { index: v.to_i64(), bound: d.axis_len });
            }
        }
        // SAFETY: the build made an `Input` factor only of a one-element input
        // (`Scalar::of`), which `args` holds.
        let f = T::from_f64(unsafe { self.factor.get(args) });
        let x = args.inputs[self.x] as *const T;
        // SAFETY: the accumulator, read and written through output 0 only, is the
        // `[outer, axis_len, inner]` tensor (`KernelArgs`).
        let t = unsafe { slice_mut(args.outputs[0] as *mut T, d.outer * d.axis_len * d.inner) };
        for o in 0..d.outer {
            for (j, &v) in idx.iter().enumerate() {
                if let Some(r) = d.row(v.to_i64()) {
                    // SAFETY: row `(o, j)` of the `[outer, nidx, inner]` update, another
                    // buffer than the accumulator.
                    let src = unsafe { slice(x.add((o * d.nidx + j) * d.inner), d.inner) };
                    let dst = &mut t[(o * d.axis_len + r) * d.inner..][..d.inner];
                    for (a, &b) in dst.iter_mut().zip(src) {
                        *a = *a + f * b;
                    }
                }
            }
        }
        Ok(())
    }
}

fn build_sparse(spec: &KernelSpec<'_>) -> BuildResult {
    let (t, x, idx, y) = (spec.input(0)?, spec.input(1)?, spec.input(3)?, spec.output(0)?);
    if y.info != t.info || t.pos != 0 {
        return Err(spec.error(format!("output {} must be the updated input 0 {}", y.info, t.info)));
    }
    if t.info.rank() == 0 {
        return Err(spec.error("cannot sparse-accumulate into a scalar"));
    }
    if has_f16(spec) {
        return f16_adapter(spec, true, build_sparse);
    }
    let a = spec.typed::<SparseAccumulateAttrs>()?;
    let axis = norm_axis(spec, a.axis, t.info.rank())?;
    let mut want = t.shape()[..axis].to_vec();
    want.extend_from_slice(idx.shape());
    want.extend_from_slice(&t.shape()[axis + 1..]);
    if x.shape() != want.as_slice() || x.dtype() != t.dtype() {
        return Err(spec.error(format!("update {} should be {}{want:?}", x.info, t.dtype())));
    }
    let d = SparseDims {
        outer: t.shape()[..axis].iter().product(),
        axis_len: t.shape()[axis],
        inner: t.shape()[axis + 1..].iter().product(),
        nidx: idx.nelms(),
    };
    let factor = Scalar::of(spec, 2, a.factor, Some(1.0))?;
    let (xp, ip, check) = (x.pos, idx.pos, spec.check_indices);
    let bad_idx = || spec.error(format!("indices must be integers, got {}", idx.dtype()));
    let dt = t.dtype();
    with_float!(dt, T => with_index!(idx.dtype(), I =>
        boxed(SparseAccumulateKernel::<T, I> { d, x: xp, idx: ip, factor, check, _t: Types::default() }),
        _ => Err(bad_idx())), _ => Err(spec.unsupported_dtype(dt)))
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] =
    &[(&ir::Accumulate, build_accumulate), (&ir::AccumulatorScale, build_scale), (&ir::SparseAccumulate, build_sparse)];

#[cfg(test)]
mod tests {
    use crate::kernel::KernelRunError;
    use crate::kernels::testutil::{assert_close, run_op, t, try_run_op_checked};
    use popart_ir::ops::var_update::SparseAccumulateAttrs;
    use popart_ir::ops::var_update::{AccumulateAttrs, AccumulationType, AccumulatorScaleAttrs};
    use popart_ir::{Attributes, DataType, OpAttrs};

    use AccumulationType as A;

    fn acc(ty: AccumulationType, factor: Option<f64>) -> Attributes {
        AccumulateAttrs { kind: Some(ty), factor }.to_attrs()
    }

    #[test]
    fn every_accumulation_type_matches_its_formula() {
        let tv = [1.0, -2.0, 3.0, 0.5];
        let xv = [0.5, 4.0, -1.0, -3.0];
        let f = 0.25;
        type Rule = fn(f64, f64, f64) -> f64;
        let cases: [(A, Rule); 9] = [
            (A::Add, |t, x, _| t + x),
            (A::DampenedAdd, |t, x, f| t + f * x),
            (A::DampenedAddSquare, |t, x, f| t + f * x * x),
            (A::DecayAdd, |t, x, f| f * t + x),
            (A::DecayAddSquare, |t, x, f| f * t + x * x),
            (A::MovingAverage, |t, x, f| f * t + (1.0 - f) * x),
            (A::MovingAverageSquare, |t, x, f| f * t + (1.0 - f) * x * x),
            (A::Infinity, |t, x, f| (f * t).max(x.abs())),
            (A::Mean, |t, x, f| (f / (f + 1.0)) * t + x / (f + 1.0)),
        ];
        for (ty, rule) in cases {
            let want: Vec<f64> = tv.iter().zip(&xv).map(|(&t, &x)| rule(t, x, f)).collect();
            let attrs = acc(ty, (ty != A::Add).then_some(f));
            for dt in [DataType::Float32, DataType::Float64] {
                let ins = [(0, t(dt, &[4], &tv)), (1, t(dt, &[4], &xv))];
                assert_close(&run_op("Accumulate", attrs.clone(), &ins)[0].to_f64_vec(), &want, 1e-6);
            }
            // The factor as a tensor of another float type.
            if ty != A::Add {
                let ins = [
                    (0, t(DataType::Float64, &[4], &tv)),
                    (1, t(DataType::Float64, &[4], &xv)),
                    (2, t(DataType::Float32, &[], &[f])),
                ];
                assert_close(&run_op("Accumulate", acc(ty, None), &ins)[0].to_f64_vec(), &want, 1e-12);
            }
        }
    }

    #[test]
    fn float32_accumulator_takes_float16_updates() {
        let ins =
            [(0, t(DataType::Float32, &[3], &[1.0, 2.0, 3.0])), (1, t(DataType::Float16, &[3], &[0.5, 0.25, 2.0]))];
        let out = run_op("Accumulate", acc(A::DampenedAddSquare, Some(2.0)), &ins);
        assert_eq!(out[0].info.dtype, DataType::Float32);
        assert_eq!(out[0].to_f64_vec(), vec![1.5, 2.125, 11.0]);
        // A float16 accumulator with a float32 update and a float32 factor tensor.
        let ins = [
            (0, t(DataType::Float16, &[2], &[1.0, 2.0])),
            (1, t(DataType::Float32, &[2], &[3.0, 5.0])),
            (2, t(DataType::Float32, &[], &[0.5])),
        ];
        assert_eq!(run_op("Accumulate", acc(A::MovingAverage, None), &ins)[0].to_f64_vec(), vec![2.0, 3.5]);
    }

    #[test]
    fn scale_and_zero() {
        let v = t(DataType::Float32, &[3], &[1.0, f64::NAN, -4.0]);
        let half = AccumulatorScaleAttrs { factor: Some(0.5) }.to_attrs();
        let out = run_op("AccumulatorScale", half, &[(0, v.clone())])[0].to_f64_vec();
        assert_eq!((out[0], out[2]), (0.5, -2.0));
        assert!(out[1].is_nan());
        let zero = AccumulatorScaleAttrs { factor: Some(0.0) }.to_attrs();
        assert_eq!(run_op("AccumulatorScale", zero.clone(), &[(0, v)])[0].to_f64_vec(), vec![0.0; 3]);
        let i = t(DataType::Int32, &[2], &[7.0, -7.0]);
        assert_eq!(run_op("AccumulatorScale", zero, &[(0, i)])[0].to_f64_vec(), vec![0.0; 2]);
        let h = t(DataType::Float16, &[2], &[1.0, 3.0]);
        let f = t(DataType::Float64, &[1], &[-2.0]);
        assert_eq!(run_op("AccumulatorScale", Attributes::new(), &[(0, h), (2, f)])[0].to_f64_vec(), vec![-2.0, -6.0]);
    }

    #[test]
    fn sparse_accumulate_adds_rows_with_repeats_and_negatives() {
        // t: [2, 3] accumulated along axis 1 at indices [2, 0, 2, -1].
        let tv = t(DataType::Float32, &[2, 3], &[0.0; 6]);
        let x = t(DataType::Float32, &[2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let idx = t(DataType::Int32, &[4], &[2.0, 0.0, 2.0, -1.0]);
        let a = SparseAccumulateAttrs { axis: 1, factor: Some(0.5) }.to_attrs();
        let out = run_op("SparseAccumulate", a.clone(), &[(0, tv.clone()), (1, x.clone()), (3, idx)]);
        assert_eq!(out[0].to_f64_vec(), vec![1.0, 0.0, 4.0, 3.0, 0.0, 10.0]);
        // Out of range: nothing added, or an error with run-time checks.
        let bad = t(DataType::Int64, &[4], &[2.0, 0.0, 5.0, 1.0]);
        let ins = [(0, tv), (1, x), (3, bad)];
        assert_eq!(run_op("SparseAccumulate", a.clone(), &ins)[0].to_f64_vec(), vec![1.0, 2.0, 0.5, 3.0, 4.0, 2.5]);
        let err = try_run_op_checked("SparseAccumulate", a, &ins).unwrap_err();
        assert_eq!(err, KernelRunError::IndexOutOfRange { index: 5, bound: 3 });
    }
}
