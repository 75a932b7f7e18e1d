//! Predicates and logical kernels (bool output): `IsNan IsInf IsFinite` on
//! float16/32/64 (read natively, no conversion), `LogicalNot LogicalAnd LogicalOr`
//! on bool bytes (0 or 1, so `&`/`|` of the bytes are the logical results).

use half::f16;
use popart_ir::ops::all as ir;
use popart_ir::DataType;

use super::binary::{Binary, Map2};
use super::dispatch::dispatch_dtype;
use super::elem::Bool8;
use super::par::par_map;
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::IsNan, build_pred::<IsNanP>),
    (&ir::IsInf, build_pred::<IsInfP>),
    (&ir::IsFinite, build_pred::<IsFiniteP>),
    (&ir::LogicalNot, build_not),
    (&ir::LogicalAnd, build_logical::<AndM>),
    (&ir::LogicalOr, build_logical::<OrM>),
];

/// Float classification of the element types.
trait Classify: Copy + Send + Sync + 'static {
    fn nan(self) -> bool;
    fn inf(self) -> bool;
}
macro_rules! classify {
    ($($t:ty),*) => {$(
        impl Classify for $t {
            #[inline(always)] fn nan(self) -> bool { self.is_nan() }
            #[inline(always)] fn inf(self) -> bool { self.is_infinite() }
        }
    )*};
}
classify!(f16, f32, f64);

/// A predicate of one element.
trait Pred<T>: Send + Sync + 'static {
    fn f(x: T) -> bool;
}
struct IsNanP;
impl<T: Classify> Pred<T> for IsNanP {
    #[inline(always)]
    fn f(x: T) -> bool {
        x.nan()
    }
}
struct IsInfP;
impl<T: Classify> Pred<T> for IsInfP {
    #[inline(always)]
    fn f(x: T) -> bool {
        x.inf()
    }
}
struct IsFiniteP;
impl<T: Classify> Pred<T> for IsFiniteP {
    #[inline(always)]
    fn f(x: T) -> bool {
        !x.nan() && !x.inf()
    }
}

/// `y[i] = P(x[i])` as a bool byte.
struct PredKernel<T, P> {
    n: usize,
    _t: Types<(T, P)>,
}

impl<T: Copy + Send + Sync + 'static, P: Pred<T>> Kernel for PredKernel<T, P> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (x, y) = (args.inputs[0] as *const T, args.outputs[0] as *mut Bool8);
        // SAFETY: the buffers hold `n` elements and do not overlap.
        unsafe {
            par_map(self.n, x, y, |_, xs, ys| {
                for (o, &v) in ys.iter_mut().zip(xs) {
                    *o = Bool8(P::f(v) as u8);
                }
            })
        };
        Ok(())
    }
}

fn build_pred<P: Pred<f16> + Pred<f32> + Pred<f64>>(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    if y.dtype() != DataType::Bool || y.shape() != x.shape() {
        return Err(spec.error(format!("output {} must be bool of the input's shape {:?}", y.info, x.shape())));
    }
    let n = x.nelms();
    dispatch_dtype!(x.dtype(), T => Ok(Box::new(PredKernel::<T, P> { n, _t: Types::default() })),
        _ => Err(spec.unsupported_dtype(x.dtype())); Float16: f16, Float32: f32, Float64: f64)
}

/// `!x` on bool bytes.
struct NotKernel {
    n: usize,
}

impl Kernel for NotKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the buffers hold `n` bytes and do not overlap.
        unsafe {
            par_map(self.n, args.inputs[0], args.outputs[0], |_, xs, ys| {
                for (o, &v) in ys.iter_mut().zip(xs) {
                    *o = (v == 0) as u8;
                }
            })
        };
        Ok(())
    }
}

fn build_not(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    if x.dtype() != DataType::Bool || y.info != x.info {
        return Err(spec.error(format!("input {} and output {} must be the same bool tensor", x.info, y.info)));
    }
    Ok(Box::new(NotKernel { n: x.nelms() }))
}

struct AndM;
impl Map2<Bool8, Bool8> for AndM {
    #[inline(always)]
    fn f(a: Bool8, b: Bool8) -> Bool8 {
        Bool8(a.0 & b.0)
    }
}
struct OrM;
impl Map2<Bool8, Bool8> for OrM {
    #[inline(always)]
    fn f(a: Bool8, b: Bool8) -> Bool8 {
        Bool8(a.0 | b.0)
    }
}

fn build_logical<F: Map2<Bool8, Bool8>>(spec: &KernelSpec<'_>) -> BuildResult {
    let (a, b, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    if [a.dtype(), b.dtype(), y.dtype()].iter().any(|&d| d != DataType::Bool) {
        return Err(spec.error(format!("operands {} and {} and output {} must be bool", a.info, b.info, y.info)));
    }
    Binary::<Bool8, Bool8, F>::boxed(spec, y.shape(), [a.shape(), b.shape()], [a.pos, b.pos])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{run_op, t};
    use popart_ir::{Attributes, DataType};

    #[test]
    fn predicates_on_every_float_type() {
        let xs = [0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -2.5];
        for dt in [DataType::Float16, DataType::Float32, DataType::Float64] {
            let run = |op| run_op(op, Attributes::new(), &[(0, t(dt, &[5], &xs))])[0].to_f64_vec();
            assert_eq!(run("IsNan"), vec![0.0, 1.0, 0.0, 0.0, 0.0], "{dt}");
            assert_eq!(run("IsInf"), vec![0.0, 0.0, 1.0, 1.0, 0.0], "{dt}");
            assert_eq!(run("IsFinite"), vec![1.0, 0.0, 0.0, 0.0, 1.0], "{dt}");
        }
    }

    #[test]
    fn logical_ops_broadcast() {
        let a = t(DataType::Bool, &[2, 2], &[0.0, 1.0, 0.0, 1.0]);
        let b = t(DataType::Bool, &[2, 1], &[0.0, 1.0]);
        let run = |op| run_op(op, Attributes::new(), &[(0, a.clone()), (1, b.clone())])[0].to_f64_vec();
        assert_eq!(run("LogicalAnd"), vec![0.0, 0.0, 0.0, 1.0]);
        assert_eq!(run("LogicalOr"), vec![0.0, 1.0, 1.0, 1.0]);
        assert_eq!(run_op("LogicalNot", Attributes::new(), &[(0, a)])[0].to_f64_vec(), vec![1.0, 0.0, 1.0, 0.0]);
    }
}
