//! `ScaledAdd`: `a x + b y`, `y` broadcast to `x`'s shape, each coefficient an
//! attribute or a one-element input read at run time.

use popart_ir::ops::all as ir;
use popart_ir::ops::var_update::ScaleAttrs;
use popart_ir::DataType;

use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use crate::kernels::broadcast::Broadcast;
use crate::kernels::dispatch::with_num;
use crate::kernels::elem::Num;
use crate::kernels::float16::{f16_adapter, has_f16};
use crate::kernels::par::par_range;
use crate::kernels::ptr::{slice, slice_mut, SendPtr};
use crate::kernels::spec::{BuildResult, SpecExt};
use crate::kernels::KernelEntry;

/// The kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[(&ir::ScaledAdd, build_scaled_add)];

/// Where a coefficient comes from.
#[derive(Clone, Copy)]
enum Coef<T> {
    Const(T),
    /// A one-element input at this position, read at run time.
    Input(usize),
}

impl<T: Copy> Coef<T> {
    /// # Safety
    /// An `Input` position must hold one valid element.
    #[inline(always)]
    unsafe fn get(self, args: &KernelArgs<'_>) -> T {
        match self {
            Coef::Const(v) => v,
            // SAFETY: input `p` holds one `T` (this method's contract).
            Coef::Input(p) => unsafe { *(args.inputs[p] as *const T) },
        }
    }
}

/// `out = a x + b y`, `y` broadcast to `x`'s shape.
struct ScaledAddKernel<T> {
    plan: Broadcast<2>,
    pos: [usize; 2],
    coefs: [Coef<T>; 2],
}

impl<T: Num> Kernel for ScaledAddKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the build checked that an `Input` coefficient is a one-element
        // input of the kernel's dtype, and `args` holds the spec's buffers.
        let (a, b) = unsafe { (self.coefs[0].get(args), self.coefs[1].get(args)) };
        let x = SendPtr(args.inputs[self.pos[0]] as *mut T);
        let y = SendPtr(args.inputs[self.pos[1]] as *mut T);
        let out = SendPtr(args.outputs[0] as *mut T);
        let [_, sy] = self.plan.inner_strides();
        par_range(
            self.plan.len(),
            #[inline(always)]
            move |r| {
                self.plan.for_segments(r, |o, [ix, iy], len| {
                    // SAFETY: offsets come from the plan; the output overlaps no input.
                    unsafe {
                        let os = slice_mut(out.get().add(o), len);
                        let xs = slice(x.get().add(ix), len);
                        if sy == 1 {
                            for ((v, &p), &q) in os.iter_mut().zip(xs).zip(slice(y.get().add(iy), len)) {
                                *v = a.mul(p).add(b.mul(q));
                            }
                        } else {
                            let bq = b.mul(*y.get().add(iy));
                            for (v, &p) in os.iter_mut().zip(xs) {
                                *v = a.mul(p).add(bq);
                            }
                        }
                    }
                });
            },
        );
        Ok(())
    }
}

fn coef<T: Num>(spec: &KernelSpec<'_>, value: Option<f64>, input: u32, dt: DataType) -> Result<Coef<T>, KernelError> {
    match spec.opt_input(input) {
        Some(s) if s.nelms() == 1 && s.dtype() == dt => Ok(Coef::Input(s.pos)),
        Some(s) => Err(spec.error(format!("input {input} must be a one-element {dt} tensor, got {}", s.info))),
        None => Ok(Coef::Const(T::from_f64(value.unwrap_or(1.0)))),
    }
}

fn build_scaled_add(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_scaled_add);
    }
    let (x, y, out) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    let dt = x.dtype();
    if out.info != x.info || y.dtype() != dt {
        return Err(spec.error(format!("x {}, y {} and output {} do not fit", x.info, y.info, out.info)));
    }
    let plan = Broadcast::new(x.shape(), [x.shape(), y.shape()])
        .ok_or_else(|| spec.error(format!("y {} does not broadcast to x {}", y.info, x.info)))?;
    let pos = [x.pos, y.pos];
    let ScaleAttrs { a, b } = spec.typed()?;
    with_num!(dt, T => Ok(Box::new(ScaledAddKernel::<T> {
        plan, pos, coefs: [coef(spec, a, 2, dt)?, coef(spec, b, 3, dt)?]
    })), _ => Err(spec.unsupported_dtype(dt)))
}
