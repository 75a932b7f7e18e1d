//! Pooling: `MaxPool`, `AveragePool` and their gradients, float32 and float64,
//! 1-D and 2-D, one plane (image, channel) at a time, planes split over the
//! worker team above a size threshold.
//!
//! The geometry is the convolution's ([`Geo2`], one group per channel), so a
//! forward pass is the direct convolution's loop: for each output row and
//! window tap, one pass over the output columns whose input is inside the
//! input (vectorised along the row). Window element counts are separable
//! (valid rows × valid columns) and precomputed at build time.

use popart_ir::ops::all as ir;
use popart_ir::ops::pool::pool_geometry;

use super::conv_layout::Geo2;
use super::dispatch::with_float;
use super::elem::Float;
use super::par::{par_split, Simd};
use super::ptr::{slice_mut, SendPtr};
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::cpu::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};

/// Registered kernels.
pub(crate) const KERNELS: &[KernelEntry] =
    &[(&ir::MaxPool, build), (&ir::AveragePool, build), (&ir::MaxPoolGrad, build), (&ir::AveragePoolGrad, build)];

/// Window reads below which a pool runs on the calling thread only.
const PAR_MIN_READS: usize = 1 << 17;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Max,
    Avg,
    MaxGrad,
    AvgGrad,
}

struct PoolKernel<T> {
    geo: Geo2,
    kind: Kind,
    planes: usize,
    /// Valid window rows per output row, valid window columns per output column.
    rows: Vec<u32>,
    cols: Vec<u32>,
    /// Positions of the inputs used (x or g first, then x, then y).
    pos: Vec<usize>,
    parallel: bool,
    _t: Types<T>,
}

fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let kind = if spec.is::<ir::MaxPool>() {
        Kind::Max
    } else if spec.is::<ir::AveragePool>() {
        Kind::Avg
    } else if spec.is::<ir::MaxPoolGrad>() {
        Kind::MaxGrad
    } else {
        Kind::AvgGrad
    };
    let x = if matches!(kind, Kind::Max | Kind::Avg) { spec.input(0)? } else { spec.input(1)? };
    let geo = pool_geometry(x.shape(), spec.attrs).map_err(|m| spec.error(m))?;
    let want = if matches!(kind, Kind::Max | Kind::Avg) { geo.y_shape() } else { geo.x_shape() };
    let out = spec.output(0)?;
    if out.shape() != want.as_slice() || spec.inputs.iter().any(|(_, i)| i.dtype != out.dtype()) {
        return Err(spec.error(format!("the result {} does not match the pool ({want:?})", out.info)));
    }
    let g = Geo2::new(&geo)
        .ok_or_else(|| spec.error(format!("{}-d pools are not supported (1-d and 2-d are)", geo.kernel.len())))?;
    let rows = (0..g.oh).map(|o| (0..g.kh).filter(|&ki| g.in_row(o, ki).is_some()).count() as u32).collect();
    let mut cols = vec![0u32; g.ow];
    for kj in 0..g.kw {
        for t in g.valid_cols(kj).0 {
            cols[t] += 1;
        }
    }
    let pos = match kind {
        Kind::Max | Kind::Avg => vec![x.pos],
        Kind::MaxGrad => vec![spec.input(0)?.pos, x.pos, spec.input(2)?.pos],
        Kind::AvgGrad => vec![spec.input(0)?.pos],
    };
    let planes = g.n * g.groups;
    let parallel = planes > 1 && planes * g.op() * g.kk() >= PAR_MIN_READS;
    let dt = out.dtype();
    with_float!(dt, T => Ok(Box::new(PoolKernel::<T> { geo: g, kind, planes, rows, cols, pos, parallel, _t: Types::default() })),
        _ => Err(spec.unsupported_dtype(dt)))
}

impl<T: Float> PoolKernel<T> {
    /// The forward pass of one plane.
    #[inline(always)]
    unsafe fn forward(&self, x: *const T, y: *mut T) {
        let g = &self.geo;
        let max = self.kind == Kind::Max;
        for o in 0..g.oh {
            let yr = slice_mut(y.add(o * g.ow), g.ow);
            yr.fill(if max { T::LOWEST } else { T::ZERO });
            for ki in 0..g.kh {
                let Some(ir) = g.in_row(o, ki) else { continue };
                let xr = x.add(ir * g.iw);
                for kj in 0..g.kw {
                    let (valid, off) = g.valid_cols(kj);
                    for t in valid {
                        let v = *xr.offset((t * g.sw) as isize + off);
                        let a = &mut yr[t];
                        *a = if max { a.maximum(v) } else { *a + v };
                    }
                }
            }
            let rows = self.rows[o];
            for (t, a) in yr.iter_mut().enumerate() {
                let n = rows * self.cols[t];
                *a = match (n, max) {
                    (0, _) => T::ZERO,
                    (_, true) => *a,
                    (n, false) => *a / T::from_f64(n as f64),
                };
            }
        }
    }

    /// The gradient of one plane: `dx` from `gy` (and `x`, `y` for max).
    #[inline(always)]
    unsafe fn backward(&self, gy: *const T, x: *const T, y: *const T, dx: *mut T) {
        let g = &self.geo;
        std::ptr::write_bytes(dx, 0, g.ip());
        for o in 0..g.oh {
            let gr = gy.add(o * g.ow);
            if self.kind == Kind::AvgGrad {
                for ki in 0..g.kh {
                    let Some(ir) = g.in_row(o, ki) else { continue };
                    let dr = dx.add(ir * g.iw);
                    for kj in 0..g.kw {
                        let (valid, off) = g.valid_cols(kj);
                        for t in valid {
                            let n = self.rows[o] * self.cols[t];
                            let d = dr.offset((t * g.sw) as isize + off);
                            *d = *d + *gr.add(t) / T::from_f64(n as f64);
                        }
                    }
                }
                continue;
            }
            // Max: the first window element (row-major) equal to the output.
            for t in 0..g.ow {
                let m = *y.add(o * g.ow + t);
                'window: for ki in 0..g.kh {
                    let Some(ir) = g.in_row(o, ki) else { continue };
                    for kj in 0..g.kw {
                        let (valid, off) = g.valid_cols(kj);
                        if valid.contains(&t) {
                            let at = ir * g.iw + ((t * g.sw) as isize + off) as usize;
                            let v = *x.add(at);
                            #[allow(clippy::eq_op)]
                            if v == m || (v != v && m != m) {
                                *dx.add(at) = *dx.add(at) + *gr.add(t);
                                break 'window;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Planes `range` of the kernel's operands `[a, b, c, out]` (`a` the
    /// input or the output gradient; `b`, `c` the forward input and output,
    /// read by the max gradient only).
    #[inline(always)]
    fn planes_at(&self, range: std::ops::Range<usize>, [a, b, c, out]: [SendPtr<T>; 4]) {
        let (ip, op) = (self.geo.ip(), self.geo.op());
        for p in range {
            // SAFETY: plane p of every operand; planes are disjoint between tasks.
            unsafe {
                match self.kind {
                    Kind::Max | Kind::Avg => self.forward(a.get().add(p * ip), out.get().add(p * op)),
                    // x and y are only read by the max gradient (the average's
                    // positions alias g, never read: offsets computed wrapping).
                    _ => self.backward(
                        a.get().add(p * op),
                        b.get().wrapping_add(p * ip),
                        c.get().wrapping_add(p * op),
                        out.get().add(p * ip),
                    ),
                }
            }
        }
    }
}

impl<T: Float> Kernel for PoolKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let out = SendPtr(args.outputs[0] as *mut T);
        let input = |i: usize| SendPtr(args.inputs[self.pos[i]] as *mut T);
        let (a, b, c) = (input(0), input(self.pos.len().min(2) - 1), input(self.pos.len() - 1));
        let ptrs = [a, b, c, out];
        // The plane loops compile inside the SIMD tier's build (see `par`).
        if self.parallel {
            par_split(
                self.planes,
                2,
                1,
                #[inline(always)]
                move |range| self.planes_at(range, ptrs),
            );
        } else {
            Simd::for_cost(1).run_narrow(
                #[inline(always)]
                || self.planes_at(0..self.planes, ptrs),
            );
        }
        Ok(())
    }
}
