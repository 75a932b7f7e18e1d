//! The n-ary `Maximum` and `Minimum`: a copy of one input, the binary kernel
//! for two, a fused three-operand pass, then one in-place pass per further
//! input.

use popart_ir::ops::all as ir;

use super::{build_arith, ArithMap, Map2, MapN, NAry};
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};
use crate::kernels::broadcast::Broadcast;
use crate::kernels::dispatch::with_num;
use crate::kernels::elem::Num;
use crate::kernels::float16::{f16_adapter, has_f16};
use crate::kernels::par::par_range;
use crate::kernels::ptr::{slice, slice_mut, SendPtr};
use crate::kernels::spec::{BuildResult, SpecExt, Types};
use crate::kernels::unary::CopyKernel;
use crate::kernels::KernelEntry;

/// The kernels of this file.
pub(crate) const KERNELS: &[KernelEntry] =
    &[(&ir::Maximum, build_extremum::<MaxMap>), (&ir::Minimum, build_extremum::<MinMap>)];

struct MaxMap;
impl<T: Num> Map2<T, T> for MaxMap {
    #[inline(always)]
    fn f(a: T, b: T) -> T {
        a.maximum(b)
    }
}
impl<T: Num> MapN<T, 3> for MaxMap {
    #[inline(always)]
    fn f([a, b, c]: [T; 3]) -> T {
        a.maximum(b).maximum(c)
    }
}

struct MinMap;
impl<T: Num> Map2<T, T> for MinMap {
    #[inline(always)]
    fn f(a: T, b: T) -> T {
        a.minimum(b)
    }
}
impl<T: Num> MapN<T, 3> for MinMap {
    #[inline(always)]
    fn f([a, b, c]: [T; 3]) -> T {
        a.minimum(b).minimum(c)
    }
}

/// A three-operand map for every numeric type (`bound_alias!` takes type
/// arguments only, not the const `3`).
trait NumMap3:
    MapN<i8, 3>
    + MapN<i16, 3>
    + MapN<i32, 3>
    + MapN<i64, 3>
    + MapN<u8, 3>
    + MapN<u16, 3>
    + MapN<u32, 3>
    + MapN<u64, 3>
    + MapN<f32, 3>
    + MapN<f64, 3>
{
}
impl<F> NumMap3 for F where
    F: MapN<i8, 3>
        + MapN<i16, 3>
        + MapN<i32, 3>
        + MapN<i64, 3>
        + MapN<u8, 3>
        + MapN<u16, 3>
        + MapN<u32, 3>
        + MapN<u64, 3>
        + MapN<f32, 3>
        + MapN<f64, 3>
{
}

/// `y = F(y, x)` in place for each further input `x` (broadcast to `y`), after
/// `first` has combined the first three inputs.
struct FoldKernel<T, F> {
    first: Box<dyn Kernel>,
    rest: Vec<(Broadcast<1>, usize)>,
    _t: Types<(T, F)>,
}

impl<T: Copy + Send + Sync + 'static, F: Map2<T, T>> Kernel for FoldKernel<T, F> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: `first` was built from the same spec's first three inputs and its
        // output, so `args` (valid for the whole spec) satisfies its contract.
        unsafe { self.first.run(args) }?;
        let y = SendPtr(args.outputs[0] as *mut T);
        for (plan, pos) in &self.rest {
            let x = SendPtr(args.inputs[*pos] as *mut T);
            let [sx] = plan.inner_strides();
            par_range(
                plan.len(),
                #[inline(always)]
                move |r| {
                    plan.for_segments(r, |o, [ix], len| {
                        // SAFETY: the plan's offsets lie inside `x` and the output, which
                        // overlap no input.
                        unsafe {
                            let ys = slice_mut(y.get().add(o), len);
                            if sx == 1 {
                                for (v, &q) in ys.iter_mut().zip(slice(x.get().add(ix), len)) {
                                    *v = F::f(*v, q);
                                }
                            } else {
                                let q = *x.get().add(ix);
                                for v in ys.iter_mut() {
                                    *v = F::f(*v, q);
                                }
                            }
                        }
                    });
                },
            );
        }
        Ok(())
    }
}

/// `Maximum`/`Minimum` of n inputs: a copy (n = 1), the binary kernel (n = 2), a
/// fused three-operand pass (n = 3), then one in-place pass per further input.
fn build_extremum<F: ArithMap + NumMap3>(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_extremum::<F>);
    }
    let y = spec.output(0)?;
    let n = spec.inputs.len();
    let ins: Vec<_> = (0..n as u32).map(|i| spec.input(i)).collect::<Result<_, _>>()?;
    let dt = y.dtype();
    if let Some(x) = ins.iter().find(|x| x.dtype() != dt) {
        return Err(spec.error(format!("input {} does not have the output's dtype {dt}", x.info)));
    }
    match n {
        0 => Err(spec.error("needs at least one input")),
        1 if ins[0].info == y.info => Ok(Box::new(CopyKernel { nbytes: y.info.nbytes(), src: ins[0].pos })),
        1 => Err(spec.error(format!("output {} differs from the input {}", y.info, ins[0].info))),
        2 => build_arith::<F>(spec),
        _ => {
            let shapes = [ins[0].shape(), ins[1].shape(), ins[2].shape()];
            let pos = [ins[0].pos, ins[1].pos, ins[2].pos];
            with_num!(dt, T => {
                let first = NAry::<T, F, 3>::boxed(spec, y.shape(), shapes, pos)?;
                if n == 3 {
                    return Ok(first);
                }
                let rest = ins[3..]
                    .iter()
                    .map(|x| {
                        Broadcast::new(y.shape(), [x.shape()])
                            .map(|p| (p, x.pos))
                            .ok_or_else(|| spec.error(format!("{} does not broadcast to {}", x.info, y.info)))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Box::new(FoldKernel::<T, F> { first, rest, _t: Types::default() }))
            }, _ => Err(spec.unsupported_dtype(dt)))
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::testutil::{assert_close, run_op, t};
    use popart_ir::{Attributes, DataType};

    #[test]
    fn fold_of_five_inputs_broadcasts() {
        let xs = [
            t(DataType::Float32, &[2, 3], &[1.0, 9.0, 3.0, 4.0, 5.0, 6.0]),
            t(DataType::Float32, &[3], &[2.0, 2.0, 2.0]),
            t(DataType::Float32, &[2, 1], &[0.0, 7.0]),
            t(DataType::Float32, &[], &[3.5]),
            t(DataType::Float32, &[1, 3], &[-1.0, 10.0, 0.0]),
        ];
        let ins: Vec<_> = xs.iter().cloned().enumerate().map(|(i, x)| (i as u32, x)).collect();
        let got = run_op("Maximum", Attributes::new(), &ins)[0].to_f64_vec();
        assert_close(&got, &[3.5, 10.0, 3.5, 7.0, 10.0, 7.0], 0.0);
        let got = run_op("Minimum", Attributes::new(), &ins)[0].to_f64_vec();
        assert_close(&got, &[-1.0, 0.0, 0.0, -1.0, 2.0, 0.0], 0.0);
        let one = run_op("Maximum", Attributes::new(), &ins[..1])[0].to_f64_vec();
        assert_close(&one, &[1.0, 9.0, 3.0, 4.0, 5.0, 6.0], 0.0);
    }
}
