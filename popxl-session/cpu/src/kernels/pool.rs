//! Pooling: `MaxPool`, `AveragePool` and their gradients, float32 and float64,
//! any number of spatial dims, one plane (image, channel) at a time, planes
//! split over the worker team above a size threshold.
//!
//! The geometry is the convolution's ([`Geo2`] over the last two dims, one
//! group per channel; leading dims, as the depth of 3-D pools, by [`Outer`]),
//! so a forward pass is the direct convolution's loop: for each output row and
//! window tap, one pass over the output columns whose input is inside the
//! input (vectorised along the row). Window element counts are separable
//! (valid leading taps × valid rows × valid columns) and precomputed at build time.

use popart_ir::ops::all as ir;
use popart_ir::ops::pool::{pool_geometry, PoolAttrs};

use super::conv::{split_geometry, Geo2, Outer};
use super::dispatch::with_float;
use super::elem::Float;
use super::par::{par_split, Simd};
use super::ptr::{slice_mut, SendPtr};
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};

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
    /// The leading spatial dims (N-d pools).
    outer: Outer,
    /// Valid leading taps per leading output position.
    outer_counts: Vec<u32>,
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
    let geo = pool_geometry(x.shape(), &spec.typed::<PoolAttrs>()?).map_err(|m| spec.error(m))?;
    let want = if matches!(kind, Kind::Max | Kind::Avg) { geo.y_shape() } else { geo.x_shape() };
    let out = spec.output(0)?;
    if out.shape() != want.as_slice() || spec.inputs.iter().any(|(_, i)| i.dtype != out.dtype()) {
        return Err(spec.error(format!("the result {} does not match the pool ({want:?})", out.info)));
    }
    let (g, outer) = split_geometry(&geo)
        .and_then(|(g2, outer)| Some((Geo2::new(&g2)?, outer)))
        .ok_or_else(|| spec.error(format!("cannot pool over {} spatial dims", geo.kernel.len())))?;
    let outer_counts = (0..outer.out).map(|o| outer.valid(o).count() as u32).collect();
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
    let parallel = planes > 1 && planes * outer.out * outer.taps * g.op() * g.kk() >= PAR_MIN_READS;
    let dt = out.dtype();
    with_float!(dt, T => Ok(Box::new(PoolKernel::<T> { geo: g, outer, outer_counts, kind, planes, rows, cols, pos, parallel, _t: Types::default() })),
        _ => Err(spec.unsupported_dtype(dt)))
}

impl<T: Float> PoolKernel<T> {
    /// The forward pass of one plane (all its leading positions).
    ///
    /// # Safety
    /// `x` is one plane of the input (`outer.inp * ip` elements) and `y` one
    /// plane of the output (`outer.out * op`), which nothing else touches
    /// during the call.
    #[inline(always)]
    unsafe fn forward(&self, x: *const T, y: *mut T) {
        let g = &self.geo;
        let max = self.kind == Kind::Max;
        for od in 0..self.outer.out {
            // SAFETY: `od < outer.out`: output slice `od` of the plane (this
            // function's contract).
            let y = unsafe { y.add(od * g.op()) };
            for o in 0..g.oh {
                // SAFETY: row `o < oh` of slice `od`, this call's alone.
                let yr = unsafe { slice_mut(y.add(o * g.ow), g.ow) };
                yr.fill(if max { T::LOWEST } else { T::ZERO });
                for (_, id) in self.outer.valid(od) {
                    // SAFETY: `valid` yields leading input positions `id < outer.inp`.
                    let x = unsafe { x.add(id * g.ip()) };
                    for ki in 0..g.kh {
                        let Some(ir) = g.in_row(o, ki) else { continue };
                        // SAFETY: `in_row` only returns input rows `ir < ih`.
                        let xr = unsafe { x.add(ir * g.iw) };
                        for kj in 0..g.kw {
                            let (valid, off) = g.valid_cols(kj);
                            for t in valid {
                                // SAFETY: `valid_cols` keeps the output columns whose
                                // input column `t * sw + off` lies in `0..iw`.
                                let v = unsafe { *xr.offset((t * g.sw) as isize + off) };
                                let a = &mut yr[t];
                                *a = if max { a.maximum(v) } else { *a + v };
                            }
                        }
                    }
                }
                let rows = self.rows[o] * self.outer_counts[od];
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
    }

    /// The gradient of one plane (all its leading positions): `dx` from `gy`
    /// (and `x`, `y` for max).
    ///
    /// # Safety
    /// `gy` is one plane of the output gradient (`outer.out * op` elements) and
    /// `dx` one plane of the result (`outer.inp * ip`), which nothing else
    /// touches during the call; for the max gradient `x` and `y` are the same
    /// plane of the forward input and output (never read otherwise).
    #[inline(always)]
    unsafe fn backward(&self, gy: *const T, x: *const T, y: *const T, dx: *mut T) {
        let g = &self.geo;
        let (ip, op) = (g.ip(), g.op());
        // SAFETY: `dx` holds the plane's `outer.inp * ip` elements (this function's
        // contract).
        unsafe { std::ptr::write_bytes(dx, 0, self.outer.inp * ip) };
        for od in 0..self.outer.out {
            // SAFETY: `od < outer.out`: slice `od` of the gradient plane (`y` is
            // offset wrapping: it may not be an operand).
            let (gy, y) = (unsafe { gy.add(od * op) }, y.wrapping_add(od * op));
            for o in 0..g.oh {
                // SAFETY: row `o < oh` of slice `od`.
                let gr = unsafe { gy.add(o * g.ow) };
                if self.kind == Kind::AvgGrad {
                    let rows = self.rows[o] * self.outer_counts[od];
                    for (_, id) in self.outer.valid(od) {
                        // SAFETY: `valid` yields leading input positions `id < outer.inp`.
                        let dx = unsafe { dx.add(id * ip) };
                        for ki in 0..g.kh {
                            let Some(ir) = g.in_row(o, ki) else { continue };
                            // SAFETY: `in_row` only returns input rows `ir < ih`.
                            let dr = unsafe { dx.add(ir * g.iw) };
                            for kj in 0..g.kw {
                                let (valid, off) = g.valid_cols(kj);
                                for t in valid {
                                    let n = rows * self.cols[t];
                                    // SAFETY: `valid_cols` keeps the output columns
                                    // `t < ow` whose input column `t * sw + off` lies in
                                    // `0..iw`; `dx` is this call's alone.
                                    unsafe {
                                        let d = dr.offset((t * g.sw) as isize + off);
                                        *d = *d + *gr.add(t) / T::from_f64(n as f64);
                                    }
                                }
                            }
                        }
                    }
                    continue;
                }
                // Max: the first window element (row-major) equal to the output.
                for t in 0..g.ow {
                    // SAFETY: the max gradient reads the forward output, whose plane
                    // slice `od` holds `oh * ow` elements (this function's contract).
                    let m = unsafe { *y.add(o * g.ow + t) };
                    'window: for (_, id) in self.outer.valid(od) {
                        // SAFETY: `valid` yields leading input positions `id < outer.inp`
                        // of both the forward input and the result.
                        let (x, dx) = unsafe { (x.add(id * ip), dx.add(id * ip)) };
                        for ki in 0..g.kh {
                            let Some(ir) = g.in_row(o, ki) else { continue };
                            for kj in 0..g.kw {
                                let (valid, off) = g.valid_cols(kj);
                                if valid.contains(&t) {
                                    let at = ir * g.iw + ((t * g.sw) as isize + off) as usize;
                                    // SAFETY: `ir < ih` (`in_row`) and column `t * sw + off`
                                    // in `0..iw` (`t` in `valid`): `at < ip`.
                                    let v = unsafe { *x.add(at) };
                                    #[allow(clippy::eq_op)]
                                    if v == m || (v != v && m != m) {
                                        // SAFETY: as above, `at < ip`; `t < ow`; `dx` is
                                        // this call's alone.
                                        unsafe { *dx.add(at) = *dx.add(at) + *gr.add(t) };
                                        break 'window;
                                    }
                                }
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
        let (ip, op) = (self.geo.ip() * self.outer.inp, self.geo.op() * self.outer.out);
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

#[cfg(test)]
mod tests {
    use popart_ir::ops::pool::PoolAttrs;
    use popart_ir::{DataType, OpAttrs};

    use crate::kernels::testutil::{assert_close, infer, run_with_outputs, t, Rng};

    /// Row-major digits of `i` in `dims`.
    fn digits(mut i: usize, dims: &[usize]) -> Vec<usize> {
        let mut v = vec![0; dims.len()];
        for d in (0..dims.len()).rev() {
            v[d] = i % dims[d];
            i /= dims[d];
        }
        v
    }

    /// Max and average pools of `x` (`planes` planes of `size`) and their
    /// gradients of `g`, by the definition: `[max, avg, dmax, davg]`.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        planes: usize,
        size: &[usize],
        out: &[usize],
        k: &[usize],
        s: &[usize],
        d: &[usize],
        p: &[usize],
        x: &[f64],
        g: &[f64],
    ) -> [Vec<f64>; 4] {
        let (ip, op, kk): (usize, usize, usize) = (size.iter().product(), out.iter().product(), k.iter().product());
        let mut r = [vec![0.0; planes * op], vec![0.0; planes * op], vec![0.0; x.len()], vec![0.0; x.len()]];
        for pl in 0..planes {
            for q in 0..op {
                let ot = digits(q, out);
                // Inputs of the window, in row-major window order.
                let window: Vec<usize> = (0..kk)
                    .filter_map(|tap| {
                        let kt = digits(tap, k);
                        let mut at = 0usize;
                        for dim in 0..size.len() {
                            let v = (ot[dim] * s[dim] + kt[dim] * d[dim]) as isize - p[dim] as isize;
                            if v < 0 || v as usize >= size[dim] {
                                return None;
                            }
                            at = at * size[dim] + v as usize;
                        }
                        Some(pl * ip + at)
                    })
                    .collect();
                let yi = pl * op + q;
                let best = window.iter().copied().fold(None, |b: Option<usize>, i| match b {
                    Some(j) if x[j] >= x[i] => Some(j),
                    _ => Some(i),
                });
                if let Some(b) = best {
                    r[0][yi] = x[b];
                    r[2][b] += g[yi];
                }
                let n = window.len() as f64;
                for &i in &window {
                    r[1][yi] += x[i] / n;
                    r[3][i] += g[yi] / n;
                }
            }
        }
        r
    }

    #[test]
    fn pool3d_matches_the_definition() {
        // (size, kernel, strides, dilations, pads, ceil_mode)
        type Case<'a> = (&'a [usize], &'a [usize], &'a [usize], &'a [usize], &'a [usize], i64);
        let cases: [Case; 3] = [
            (&[5, 7, 8], &[3, 3, 3], &[2, 2, 2], &[1, 1, 1], &[1, 1, 1, 1, 1, 1], 0),
            (&[4, 9, 6], &[2, 3, 2], &[1, 2, 1], &[2, 1, 1], &[0, 1, 1, 1, 0, 1], 1),
            (&[3, 4, 5, 6], &[2, 2, 3, 2], &[1, 2, 1, 2], &[1, 1, 1, 1], &[1, 0, 1, 0, 0, 1, 1, 1], 0),
        ];
        let mut rng = Rng::new(11);
        for (size, k, s, d, p, ceil) in cases {
            let ints = |v: &[usize]| v.iter().map(|&a| a as i64).collect::<Vec<_>>();
            let attrs = PoolAttrs {
                kernel_shape: ints(k),
                strides: Some(ints(s)),
                dilations: Some(ints(d)),
                pads: Some(ints(p)),
                ceil_mode: ceil,
                auto_pad: None,
                out_pads: None,
                in_dilations: None,
            }
            .to_attrs();
            let xs = [vec![2, 3], size.to_vec()].concat();
            let xv = rng.vec(xs.iter().product(), -1.0, 1.0);
            for dt in [DataType::Float32, DataType::Float64] {
                let x = t(dt, &xs, &xv);
                let y_info = infer("MaxPool", &attrs, &[(0, x.info.clone())]).remove(0);
                let out = y_info.shape[2..].to_vec();
                let gv = rng.vec(y_info.nelms(), -1.0, 1.0);
                let want = naive(6, size, &out, k, s, d, p, &x.to_f64_vec(), &gv);
                let g = t(dt, &y_info.shape, &gv);
                let one = std::slice::from_ref(&y_info);
                let max = run_with_outputs("MaxPool", &attrs, &[(0, x.clone())], one);
                let avg = run_with_outputs("AveragePool", &attrs, &[(0, x.clone())], one);
                let xi = std::slice::from_ref(&x.info);
                let dmax =
                    run_with_outputs("MaxPoolGrad", &attrs, &[(0, g.clone()), (1, x.clone()), (2, max[0].clone())], xi);
                let davg = run_with_outputs("AveragePoolGrad", &attrs, &[(0, g), (1, x.clone())], xi);
                for (got, want) in [max, avg, dmax, davg].iter().zip(&want) {
                    assert_close(&got[0].to_f64_vec(), want, 1e-6);
                }
            }
        }
    }
}
