//! One-input elementwise maps with two parameters fixed at build time: `Clip`
//! (its bounds) and `ClipGrad`, `IncrementMod` and `IncrementModInplace` (the
//! increment and the modulus).

use popart_ir::ops::all as ir;
use popart_ir::ops::unary::{ClipAttrs, IncrementModAttrs};
use popart_ir::DataType;

use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use crate::kernels::dispatch::{with_float, with_num};
use crate::kernels::elem::{Num, Rem};
use crate::kernels::float16::{f16_adapter, has_f16};
use crate::kernels::par::{par_range, par_range_cost};
use crate::kernels::ptr::{slice, slice_mut, SendPtr};
use crate::kernels::spec::{BuildResult, SpecExt, Types};
use crate::kernels::KernelEntry;

/// The kernels of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::Clip, build_clip),
    (&ir::ClipGrad, build_clip_grad),
    (&ir::IncrementMod, build_increment_mod),
    (&ir::IncrementModInplace, build_increment_mod),
];

/// `y = F(x, p)` with parameters `p` fixed at build time.
trait MapP<T>: Send + Sync + 'static {
    const COST: usize = 1;
    fn f(x: T, p: [T; 2]) -> T;
}

struct ClipMap;
impl<T: Num> MapP<T> for ClipMap {
    /// NaN fails both comparisons and propagates.
    #[inline(always)]
    fn f(x: T, [lo, hi]: [T; 2]) -> T {
        if x < lo {
            lo
        } else if x > hi {
            hi
        } else {
            x
        }
    }
}

struct IncrementModMap;
impl<T: Rem> MapP<T> for IncrementModMap {
    const COST: usize = 8;
    #[inline(always)]
    fn f(x: T, [inc, m]: [T; 2]) -> T {
        x.add(inc).rem(m)
    }
}

/// `y[i] = F(x[i], p)` over `n` contiguous elements; in place (input 0 read through
/// output 0) when `in_place`.
struct UnaryP<T, F> {
    n: usize,
    p: [T; 2],
    in_place: bool,
    _t: Types<F>,
}

impl<T: Copy + Send + Sync + 'static, F: MapP<T>> Kernel for UnaryP<T, F> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let x = SendPtr(args.inputs[0] as *mut T);
        let y = SendPtr(args.outputs[0] as *mut T);
        let (p, in_place) = (self.p, self.in_place);
        par_range_cost(
            self.n,
            F::COST,
            #[inline(always)]
            move |r| {
                // SAFETY: both buffers hold `n` elements; in place, only the output
                // pointer is used; otherwise they do not overlap.
                unsafe {
                    let ys = slice_mut(y.get().add(r.start), r.len());
                    if in_place {
                        for v in ys.iter_mut() {
                            *v = F::f(*v, p);
                        }
                    } else {
                        for (o, &v) in ys.iter_mut().zip(slice(x.get().add(r.start), r.len())) {
                            *o = F::f(v, p);
                        }
                    }
                }
            },
        );
        Ok(())
    }
}

/// One input, an output of the same info: (elements, dtype).
fn same_info(spec: &KernelSpec<'_>) -> Result<(usize, DataType), KernelError> {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    if x.info != y.info {
        return Err(spec.error(format!("output {} differs from input {}", y.info, x.info)));
    }
    Ok((x.nelms(), x.dtype()))
}

fn build_clip(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_clip);
    }
    let (n, dt) = same_info(spec)?;
    let (lo, hi) = spec.typed::<ClipAttrs>()?.bounds();
    // `from_f64` saturates for integers: infinite bounds become the type's limits.
    with_num!(dt, T => Ok(Box::new(UnaryP::<T, ClipMap> {
        n, p: [T::from_f64(lo), T::from_f64(hi)], in_place: false, _t: Types::default()
    })), _ => Err(spec.unsupported_dtype(dt)))
}

fn build_increment_mod(spec: &KernelSpec<'_>) -> BuildResult {
    let in_place = spec.is::<ir::IncrementModInplace>();
    if has_f16(spec) {
        return f16_adapter(spec, in_place, build_increment_mod);
    }
    let (n, dt) = same_info(spec)?;
    let IncrementModAttrs { increment: inc, modulus: m } = spec.typed()?;
    with_num!(dt, T => Ok(Box::new(UnaryP::<T, IncrementModMap> {
        n, p: [T::from_f64(inc), T::from_f64(m)], in_place, _t: Types::default()
    })), _ => Err(spec.unsupported_dtype(dt)))
}

/// `ClipGrad(g, y)`: `g` where `y` is neither bound.
struct ClipGradKernel<T> {
    n: usize,
    lo: T,
    hi: T,
}

impl<T: Num> Kernel for ClipGradKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let g = SendPtr(args.inputs[0] as *mut T);
        let y = SendPtr(args.inputs[1] as *mut T);
        let out = SendPtr(args.outputs[0] as *mut T);
        let (lo, hi) = (self.lo, self.hi);
        par_range(
            self.n,
            #[inline(always)]
            move |r| {
                // SAFETY: three buffers of `n` elements; the output overlaps no input.
                unsafe {
                    let os = slice_mut(out.get().add(r.start), r.len());
                    let (gs, ys) = (slice(g.get().add(r.start), r.len()), slice(y.get().add(r.start), r.len()));
                    for ((o, &gv), &yv) in os.iter_mut().zip(gs).zip(ys) {
                        *o = if yv != lo && yv != hi { gv } else { T::ZERO };
                    }
                }
            },
        );
        Ok(())
    }
}

fn build_clip_grad(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_clip_grad);
    }
    let (g, y, out) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    if g.info != y.info || out.info != g.info {
        return Err(spec.error(format!("gradient {}, output {} and result {} must match", g.info, y.info, out.info)));
    }
    if g.pos != 0 {
        return Err(spec.error("the gradient must be input 0"));
    }
    let (lo, hi) = spec.typed::<ClipAttrs>()?.bounds();
    let (n, dt) = (g.nelms(), g.dtype());
    with_float!(dt, T => Ok(Box::new(ClipGradKernel::<T> { n, lo: T::from_f64(lo), hi: T::from_f64(hi) })),
        _ => Err(spec.unsupported_dtype(dt)))
}

#[cfg(test)]
mod tests {
    use crate::kernels::testutil::{run_op, t};
    use popart_ir::ops::unary::ClipAttrs;
    use popart_ir::{DataType, OpAttrs};

    #[test]
    fn clip_clamps_and_keeps_nan() {
        let x = t(DataType::Float32, &[5], &[-3.0, -1.0, 0.5, 2.0, f64::NAN]);
        let a = ClipAttrs { min: Some(-1.0), max: Some(1.0) }.to_attrs();
        let got = run_op("Clip", a, &[(0, x.clone())])[0].to_f64_vec();
        assert_eq!(&got[..4], &[-1.0, -1.0, 0.5, 1.0]);
        assert!(got[4].is_nan());
        let only_min = ClipAttrs { min: Some(0.0), max: None }.to_attrs();
        let got = run_op("Clip", only_min, &[(0, x)])[0].to_f64_vec();
        assert_eq!(&got[..4], &[0.0, 0.0, 0.5, 2.0]);
        let i = t(DataType::Int8, &[3], &[-128.0, 5.0, 127.0]);
        let only_max = ClipAttrs { min: None, max: Some(3.5) }.to_attrs();
        assert_eq!(run_op("Clip", only_max, &[(0, i)])[0].to_f64_vec(), vec![-128.0, 3.0, 3.0]);
    }

    #[test]
    fn clip_grad_is_zero_on_the_bounds() {
        let g = t(DataType::Float64, &[4], &[1.0, 2.0, 3.0, 4.0]);
        let y = t(DataType::Float64, &[4], &[-1.0, 0.0, 1.0, 0.999]);
        let a = ClipAttrs { min: Some(-1.0), max: Some(1.0) }.to_attrs();
        assert_eq!(run_op("ClipGrad", a, &[(0, g), (1, y)])[0].to_f64_vec(), vec![0.0, 2.0, 0.0, 4.0]);
    }
}
