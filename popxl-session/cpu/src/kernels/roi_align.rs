//! `RoiAlign` (PopXL `roi_align`, average of bilinear samples per bin) and
//! `RoiAlignGrad`, float32 and float64 features, any integer batch index.
//!
//! Both passes walk the same sample grid: per ROI and bin, the sample
//! positions and their four bilinear weights depend only on the ROI, so they
//! are computed once per (ROI, bin) and applied to every channel. The forward
//! pass is split over ROIs above a size threshold (each ROI writes its own
//! output rows); the gradient scatters into the shared input gradient and
//! runs on the calling thread, in ROI order, so sums are reproducible. A batch
//! index outside `[0, N)` gives zeros (no gradient), or with `check_indices`
//! the error `IndexOutOfRange` before anything is written.

use popart_ir::ops::all as ir;
use popart_ir::ops::roi_align::RoiAlignAttrs;

use super::dispatch::{with_float, with_index};
use super::elem::{Float, IndexElem};
use super::par::par_split;
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelRunError, KernelSpec};

/// Registered kernels.
pub(crate) const KERNELS: &[KernelEntry] = &[(&ir::RoiAlign, build), (&ir::RoiAlignGrad, build)];

/// Samples (ROIs × bins × channels) below which the forward pass stays on one thread.
const PAR_MIN: usize = 1 << 14;

struct Roi<T, I> {
    grad: bool,
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    rois: usize,
    oh: usize,
    ow: usize,
    scale: f64,
    ratio: usize,
    /// Positions of (x or g, rois, batch_index) in the inputs.
    pos: [usize; 3],
    /// A batch index outside `[0, N)` is an error (`check_indices`), not zeros.
    check: bool,
    _t: Types<(T, I)>,
}

fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let grad = spec.is::<ir::RoiAlignGrad>();
    let off = u32::from(grad);
    let x = spec.input(off)?;
    let (rois, idx) = (spec.input(1 + off)?, spec.input(2 + off)?);
    let s = x.shape();
    if s.len() != 4 || rois.shape().len() != 2 {
        return Err(spec.error("expected x [N, C, H, W] and rois [R, 4]"));
    }
    let a: RoiAlignAttrs = spec.typed()?;
    let (oh, ow) = (a.output_height.max(1) as usize, a.output_width.max(1) as usize);
    let pos = [spec.input(0)?.pos, rois.pos, idx.pos];
    let (dt, it) = (x.dtype(), idx.dtype());
    let scale = a.spatial_scale;
    let ratio = a.sampling_ratio.max(0) as usize;
    let (n, c, h, w, r) = (s[0], s[1], s[2], s[3], rois.shape()[0]);
    with_float!(dt, T => with_index!(it, I => Ok(Box::new(Roi::<T, I> {
        grad, n, c, h, w, rois: r, oh, ow, scale, ratio, pos, check: spec.check_indices, _t: Types::default(),
    })), _ => Err(spec.unsupported_dtype(it))), _ => Err(spec.unsupported_dtype(dt)))
}

/// Widening to f64 (sample arithmetic is done in f64, as coordinates are).
trait ToF64 {
    fn to_f64(self) -> f64;
}
impl ToF64 for f32 {
    fn to_f64(self) -> f64 {
        self as f64
    }
}
impl ToF64 for f64 {
    fn to_f64(self) -> f64 {
        self
    }
}

/// One bilinear sample: four (flat plane offset, weight) pairs, or none.
type Sample = Option<[(usize, f64); 4]>;

impl<T: Float + ToF64, I: IndexElem> Roi<T, I> {
    /// The bilinear taps of a sample at (y, x), as torchvision.
    fn sample(&self, y: f64, x: f64) -> Sample {
        let (h, w) = (self.h as f64, self.w as f64);
        if y < -1.0 || y > h || x < -1.0 || x > w {
            return None;
        }
        let (mut y, mut x) = (y.max(0.0), x.max(0.0));
        let (mut yl, mut xl) = (y as usize, x as usize);
        let (yh, xh);
        if yl >= self.h - 1 {
            yl = self.h - 1;
            yh = yl;
            y = yl as f64;
        } else {
            yh = yl + 1;
        }
        if xl >= self.w - 1 {
            xl = self.w - 1;
            xh = xl;
            x = xl as f64;
        } else {
            xh = xl + 1;
        }
        let (ly, lx) = (y - yl as f64, x - xl as f64);
        let (hy, hx) = (1.0 - ly, 1.0 - lx);
        Some([
            (yl * self.w + xl, hy * hx),
            (yl * self.w + xh, hy * lx),
            (yh * self.w + xl, ly * hx),
            (yh * self.w + xh, ly * lx),
        ])
    }

    /// Calls `f(bin, taps, 1 / count)` for every sample of ROI `r` (box `b`).
    fn for_samples(&self, b: &[T], mut f: impl FnMut(usize, [(usize, f64); 4], f64)) {
        let v = |i: usize| ToF64::to_f64(b[i]) * self.scale;
        let (x0, y0, x1, y1) = (v(0), v(1), v(2), v(3));
        let (rw, rh) = ((x1 - x0).max(1.0), (y1 - y0).max(1.0));
        let (bh, bw) = (rh / self.oh as f64, rw / self.ow as f64);
        let gh = if self.ratio > 0 { self.ratio } else { (rh / self.oh as f64).ceil().max(0.0) as usize };
        let gw = if self.ratio > 0 { self.ratio } else { (rw / self.ow as f64).ceil().max(0.0) as usize };
        let inv = 1.0 / (gh * gw).max(1) as f64;
        for ph in 0..self.oh {
            for pw in 0..self.ow {
                for iy in 0..gh {
                    let y = y0 + ph as f64 * bh + (iy as f64 + 0.5) * bh / gh as f64;
                    for ix in 0..gw {
                        let x = x0 + pw as f64 * bw + (ix as f64 + 0.5) * bw / gw as f64;
                        if let Some(t) = self.sample(y, x) {
                            f(ph * self.ow + pw, t, inv);
                        }
                    }
                }
            }
        }
    }
}

impl<T: Float + ToF64, I: IndexElem> Kernel for Roi<T, I> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (plane, bins) = (self.h * self.w, self.oh * self.ow);
        // SAFETY: the boxes and batch indices hold the spec's `rois * 4` and `rois`
        // elements (`KernelArgs`), and are only read.
        let (boxes, index) = unsafe {
            (
                slice(args.inputs[self.pos[1]] as *const T, self.rois * 4),
                slice(args.inputs[self.pos[2]] as *const I, self.rois),
            )
        };
        let batch = |r: usize| usize::try_from(index[r].to_i64()).ok().filter(|&b| b < self.n);
        if self.check {
            if let Some(r) = (0..self.rois).find(|&r| batch(r).is_none()) {
                return Err(KernelRunError::IndexOutOfRange { index: index[r].to_i64(), bound: self.n });
            }
        }
        let out = SendPtr(args.outputs[0] as *mut T);
        let src = SendPtr(args.inputs[self.pos[0]] as *mut T);
        if self.grad {
            // SAFETY: in the gradient the output is the feature map's gradient
            // (`n * c * plane` elements) and input 0 the pooled gradient (`rois * c *
            // bins`); they do not overlap (`KernelArgs`).
            let (dx, g) =
                unsafe { (slice_mut(out.get(), self.n * self.c * plane), slice(src.get(), self.rois * self.c * bins)) };
            dx.fill(T::ZERO);
            for r in 0..self.rois {
                let Some(b) = batch(r) else { continue };
                self.for_samples(&boxes[r * 4..r * 4 + 4], |bin, taps, inv| {
                    for ch in 0..self.c {
                        let gv = g[(r * self.c + ch) * bins + bin];
                        let base = (b * self.c + ch) * plane;
                        for (at, wgt) in taps {
                            dx[base + at] = dx[base + at] + gv * T::from_f64(wgt * inv);
                        }
                    }
                });
            }
            return Ok(());
        }
        let body = |range: std::ops::Range<usize>| {
            for r in range {
                // SAFETY: ROI r writes only its own output rows; x is read only.
                let y = unsafe { slice_mut(out.get().add(r * self.c * bins), self.c * bins) };
                y.fill(T::ZERO);
                let Some(b) = batch(r) else { continue };
                // SAFETY: image b (< N) of the feature map, read only.
                let x = unsafe { slice(src.get().add(b * self.c * plane), self.c * plane) };
                self.for_samples(&boxes[r * 4..r * 4 + 4], |bin, taps, inv| {
                    for ch in 0..self.c {
                        let xp = &x[ch * plane..];
                        let mut v = 0.0;
                        for (at, wgt) in taps {
                            v += wgt * ToF64::to_f64(xp[at]);
                        }
                        let o = &mut y[ch * bins + bin];
                        *o = *o + T::from_f64(v * inv);
                    }
                });
            }
        };
        if self.rois * self.c * bins >= PAR_MIN {
            par_split(self.rois, 2, 1, body);
        } else {
            body(0..self.rois);
        }
        Ok(())
    }
}
