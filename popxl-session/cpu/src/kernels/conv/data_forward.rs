//! The data gradient of a stride-1 convolution on small planes, run as the
//! forward convolution it equals: `dx = conv(dy, w')`, where `dy` is padded
//! by `(k − 1)·d − p` and `w'[g·ci_g + i][o]` is the group's weight
//! `w[g·co_g + o][i]` flipped in both spatial dims.
//!
//! The batched im2col data gradient multiplies `wᵀ` (`ci_g·k² × co_g`) by `dy`
//! into a column matrix `k²` times larger than `dx` and adds it back with
//! `col2im`; on 7x7 and 14x14 planes that matrix leaves the cache and the
//! pass ran at 0.66-0.74x of PyTorch on a Zen 2 EPYC, against 0.8-0.9x for
//! the forward pass of the same layer. The forward plan reads `dy` through
//! im2col and writes `dx` once. The cost is one copy of the weights per run
//! into a buffer reserved when the kernel is built.

use std::sync::Mutex;

use popart_ir::ops::conv::ConvGeometry;

use super::super::par::{par_split, PAR_MIN_ELEMS};
use super::super::ptr::SendPtr;
use super::super::spec::{BuildResult, SpecExt};
use super::layout::{ConvElem, Geo2};
use super::{ConvKernel, Pass, PlanCx};
use crate::kernel::{Kernel, KernelArgs, KernelResult};

/// Output positions per weight element below which copying the weights costs
/// too much next to the product.
const MIN_REUSE: usize = 256;

/// A data gradient run by a forward plan over flipped, transposed weights.
struct DataAsForward<T> {
    /// The original geometry (of the convolution whose data gradient this is).
    geo: Geo2,
    /// The forward plan of `dx = conv(dy, w')`: inputs `[dy, w']`.
    inner: Box<dyn Kernel>,
    /// Argument positions of `dy` and `w`.
    dy: usize,
    w: usize,
    /// `w'`, rewritten at every run.
    wt: Mutex<Vec<T>>,
}

/// The forward geometry whose output is the data gradient of `g`, when `g`
/// has stride 1 and its padding is at most `(k − 1)·d` on both sides.
pub(super) fn forward_geometry(g: &Geo2) -> Option<ConvGeometry> {
    let (rh, rw) = (((g.kh - 1) * g.dh) as isize, ((g.kw - 1) * g.dw) as isize);
    let fits = |p: isize, reach: isize, i: usize, o: usize| p >= 0 && p <= reach && i as isize + p >= o as isize;
    let ok = g.sh == 1 && g.sw == 1 && fits(g.ph, rh, g.ih, g.oh) && fits(g.pw, rw, g.iw, g.ow);
    ok.then(|| ConvGeometry {
        batch: g.n,
        group: g.groups,
        in_channels: g.groups * g.co_g,
        out_channels: g.groups * g.ci_g,
        in_size: vec![g.oh, g.ow],
        kernel: vec![g.kh, g.kw],
        out_size: vec![g.ih, g.iw],
        strides: vec![1, 1],
        dilations: vec![g.dh, g.dw],
        pad_begin: vec![(rh - g.ph) as usize, (rw - g.pw) as usize],
    })
}

impl<T: ConvElem> ConvKernel<T> {
    /// The data gradient of `g` as a forward plan, when the geometry allows
    /// it and the weights are reused enough (`cx.pos`: `[x, w, y]`, `y` being `dy`).
    pub(super) fn data_as_forward(cx: &PlanCx<'_, '_>) -> Option<BuildResult> {
        let (spec, g, pos) = (cx.spec, &cx.g, cx.pos);
        // The forward plan's column matrix (`co_g·k²` rows of `ih·iw`) must
        // be no larger than the im2col path's (`ci_g·k²` rows of `oh·ow`):
        // LeNet's 5x5 data gradient on 8x8 planes (50 to 20 channels) would
        // read a matrix 5.6x larger, and its CNN step ran 1.6x slower.
        let larger = g.co_g * g.ih * g.iw > g.ci_g * g.oh * g.ow;
        if g.n * g.oh * g.ow < MIN_REUSE || g.kk() == 1 || larger {
            return None;
        }
        let fwd = Geo2::new(&forward_geometry(g)?)?;
        let wlen = g.groups * g.co_g * g.kdim();
        let build = || -> BuildResult {
            let wt = popart_ir::size::try_zeroed_vec::<T>(wlen, "flipped convolution weights")
                .map_err(|e| spec.error(e.to_string()))?;
            let inner = Self::plan(PlanCx::new(spec, fwd, Pass::Forward, [0, 1, 0], cx.macs, cx.out_len))?;
            Ok(Box::new(DataAsForward { geo: g.clone(), inner, dy: pos[2], w: pos[1], wt: Mutex::new(wt) }))
        };
        Some(build())
    }
}

impl<T: ConvElem> DataAsForward<T> {
    /// `wt[(g·ci_g + i)·co_g + o]` = the taps of `w[g·co_g + o][i]` reversed,
    /// rows of `wt` split over the team.
    ///
    /// # Safety
    /// `w` valid for the weight's reads; `wt` its length.
    unsafe fn flip(&self, w: *const T, wt: &mut [T]) {
        let g = &self.geo;
        let (kk, kdim, rows) = (g.kk(), g.kdim(), g.groups * g.ci_g);
        let (src, dst) = (SendPtr(w as *mut T), SendPtr(wt.as_mut_ptr()));
        let min = (PAR_MIN_ELEMS / (g.co_g * kk).max(1)).max(1);
        par_split(rows, min, 1, move |range| {
            for row in range {
                let (gi, i) = (row / g.ci_g, row % g.ci_g);
                for o in 0..g.co_g {
                    // SAFETY: row `row` of `wt` is this piece's own; `w` is read only.
                    unsafe {
                        let s = src.get().add((gi * g.co_g + o) * kdim + i * kk);
                        let d = dst.get().add((row * g.co_g + o) * kk);
                        for t in 0..kk {
                            *d.add(kk - 1 - t) = *s.add(t);
                        }
                    }
                }
            }
        });
    }
}

impl<T: ConvElem> Kernel for DataAsForward<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let mut wt = self.wt.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: input `w` is the weight of the geometry the plan was built for
        // (this function's contract); `wt` holds the flipped weight's `wlen`.
        unsafe { self.flip(args.inputs[self.w] as *const T, &mut wt) };
        let inputs = [args.inputs[self.dy], wt.as_ptr() as *const u8];
        // SAFETY: the inner forward plan reads `dy` (this call's input, of the
        // forward geometry's input shape) and the flipped weight in `wt`, held
        // locked for the call; it writes this call's output, the data gradient.
        unsafe { self.inner.run(&KernelArgs { inputs: &inputs, outputs: args.outputs }) }
    }
}
