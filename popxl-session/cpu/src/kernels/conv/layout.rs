//! The layout work of the convolution kernels: the 2-D geometry every
//! convolution is reduced to, `im2col` / `col2im` over blocks of rows and
//! columns, and the direct loops used when each output channel reads a single
//! input channel (depthwise convolutions and `C_in / group == 1`).
//!
//! A 1-D convolution is a 2-D one of height 1; an N-d one (N > 2) is a 2-D one
//! over its last two dims, its leading dims described by [`Outer`]. Column `p` of an im2col matrix is
//! output position `(p / ow, p % ow)`; row `r` is `(c, ki, kj)` with
//! `r = (c · kh + ki) · kw + kj`, the weight layout `[C_out, C_in / group, kh, kw]`.

use std::ops::{AddAssign, Mul, Range};

use popart_ir::ops::conv::ConvGeometry;

use super::super::matmul::MatElem;
use super::super::ptr::{slice, slice_mut};
use super::{ConvKernel, Io, Pass, Task};

/// Element types of the convolution kernels (f32, f64).
pub(crate) trait ConvElem: MatElem + AddAssign + Mul<Output = Self> + Default {}
impl<T: MatElem + AddAssign + Mul<Output = T> + Default> ConvElem for T {}

/// A convolution with two spatial dims, sizes as `usize`, padding as `isize`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Geo2 {
    pub n: usize,
    pub groups: usize,
    /// Input and output channels per group.
    pub ci_g: usize,
    pub co_g: usize,
    pub ih: usize,
    pub iw: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
    pub sh: usize,
    pub sw: usize,
    pub dh: usize,
    pub dw: usize,
    pub ph: isize,
    pub pw: isize,
    /// Per kernel column `kj`: the valid output columns and the input column of
    /// output column 0 (see [`Geo2::valid_cols`]), computed once.
    cols: Vec<(usize, usize, isize)>,
}

impl Geo2 {
    /// The 2-D form of a 1-D or 2-D geometry; `None` for more spatial dims.
    pub(crate) fn new(g: &ConvGeometry) -> Option<Self> {
        let two = |v: &[usize], fill: usize| match v.len() {
            1 => Some((fill, v[0])),
            2 => Some((v[0], v[1])),
            _ => None,
        };
        let (ih, iw) = two(&g.in_size, 1)?;
        let (kh, kw) = two(&g.kernel, 1)?;
        let (oh, ow) = two(&g.out_size, 1)?;
        let (sh, sw) = two(&g.strides, 1)?;
        let (dh, dw) = two(&g.dilations, 1)?;
        let (ph, pw) = two(&g.pad_begin, 0)?;
        let mut geo = Geo2 {
            n: g.batch,
            groups: g.group,
            // A pool's groups are its channels, which may be 0.
            ci_g: g.in_channels.checked_div(g.group).unwrap_or(0),
            co_g: g.out_channels.checked_div(g.group).unwrap_or(0),
            ih,
            iw,
            kh,
            kw,
            oh,
            ow,
            sh,
            sw,
            dh,
            dw,
            ph: ph as isize,
            pw: pw as isize,
            cols: Vec::new(),
        };
        geo.cols = (0..kw).map(|kj| geo.compute_valid_cols(kj)).collect();
        Some(geo)
    }
    /// Kernel taps per channel.
    pub(crate) fn kk(&self) -> usize {
        self.kh * self.kw
    }
    /// Rows of the im2col matrix of one group.
    pub(crate) fn kdim(&self) -> usize {
        self.ci_g * self.kk()
    }
    /// Input plane size.
    pub(crate) fn ip(&self) -> usize {
        self.ih * self.iw
    }
    /// Output plane size.
    pub(crate) fn op(&self) -> usize {
        self.oh * self.ow
    }
    /// A 1x1, stride 1, unpadded convolution: the input planes are the im2col matrix.
    pub(crate) fn pointwise(&self) -> bool {
        // End padding makes the output larger than the input: not a plain product.
        self.kh == 1
            && self.kw == 1
            && self.sh == 1
            && self.sw == 1
            && self.ph == 0
            && self.pw == 0
            && self.oh == self.ih
            && self.ow == self.iw
    }
    /// The input row read by output row `o` at tap `ki`, if inside the input.
    #[inline]
    pub(crate) fn in_row(&self, o: usize, ki: usize) -> Option<usize> {
        let r = (o * self.sh + ki * self.dh) as isize - self.ph;
        (r >= 0 && (r as usize) < self.ih).then_some(r as usize)
    }
    /// The output columns `t` whose input column `t·sw + kj·dw − pw` is inside the
    /// input, and the input column of `t = 0` (possibly negative).
    #[inline]
    pub(crate) fn valid_cols(&self, kj: usize) -> (Range<usize>, isize) {
        let (lo, hi, off) = self.cols[kj];
        (lo..hi, off)
    }

    fn compute_valid_cols(&self, kj: usize) -> (usize, usize, isize) {
        let off = (kj * self.dw) as isize - self.pw;
        let sw = self.sw as isize;
        // t·sw + off >= 0  and  t·sw + off < iw
        let lo = if off >= 0 { 0 } else { ((-off) + sw - 1) / sw };
        let hi = if (self.iw as isize) <= off { 0 } else { ((self.iw as isize - off) + sw - 1) / sw };
        let (lo, hi) = (lo as usize, (hi as usize).min(self.ow));
        (lo.min(hi), hi, off)
    }
}

/// The leading spatial dims of an N-d geometry (all but the last two; none
/// for 1-D and 2-D): the output positions, kernel taps and input positions
/// over those dims, each flattened row-major, and for every output position
/// the input position each tap reads (`None` in the padding), computed once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Outer {
    /// Output positions, taps and input positions (products over the leading dims).
    pub out: usize,
    pub taps: usize,
    pub inp: usize,
    /// `reads[o · taps + k]`: the input position tap `k` of output position `o` reads.
    reads: Vec<Option<usize>>,
}

impl Outer {
    /// The input position read by tap `k` at output position `o`, if inside the input.
    #[inline]
    pub(crate) fn read(&self, o: usize, k: usize) -> Option<usize> {
        self.reads[o * self.taps + k]
    }
    /// Taps of output position `o` inside the input, in tap order: `(tap, input position)`.
    #[inline]
    pub(crate) fn valid(&self, o: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.reads[o * self.taps..(o + 1) * self.taps].iter().enumerate().filter_map(|(k, r)| r.map(|i| (k, i)))
    }
    /// The leading dims `0..m` of `g`.
    fn new(g: &ConvGeometry, m: usize) -> Self {
        let (out, taps, inp) = (
            g.out_size[..m].iter().product::<usize>(),
            g.kernel[..m].iter().product::<usize>(),
            g.in_size[..m].iter().product::<usize>(),
        );
        let mut reads = Vec::with_capacity(out * taps);
        for o in 0..out {
            for k in 0..taps {
                // Row-major digits of o and k, last dim fastest.
                let (mut ro, mut rk, mut at, mut scale, mut inside) = (o, k, 0usize, 1usize, true);
                for d in (0..m).rev() {
                    let (od, kd) = (ro % g.out_size[d], rk % g.kernel[d]);
                    ro /= g.out_size[d];
                    rk /= g.kernel[d];
                    let i = (od * g.strides[d] + kd * g.dilations[d]) as isize - g.pad_begin[d] as isize;
                    inside &= i >= 0 && (i as usize) < g.in_size[d];
                    at += i.max(0) as usize * scale;
                    scale *= g.in_size[d];
                }
                reads.push(inside.then_some(at));
            }
        }
        Outer { out, taps, inp, reads }
    }
}

/// Splits an N-d geometry (N ≥ 1) into the 2-D geometry of its last two dims
/// (one dim: height 1), batch and channels unchanged, and its leading dims.
pub(crate) fn split_geometry(g: &ConvGeometry) -> Option<(ConvGeometry, Outer)> {
    let nd = g.kernel.len();
    if nd == 0
        || [g.in_size.len(), g.out_size.len(), g.strides.len(), g.dilations.len(), g.pad_begin.len()]
            .iter()
            .any(|&l| l != nd)
    {
        return None;
    }
    let m = nd.saturating_sub(2);
    let inner = ConvGeometry {
        in_size: g.in_size[m..].to_vec(),
        kernel: g.kernel[m..].to_vec(),
        out_size: g.out_size[m..].to_vec(),
        strides: g.strides[m..].to_vec(),
        dilations: g.dilations[m..].to_vec(),
        pad_begin: g.pad_begin[m..].to_vec(),
        ..g.clone()
    };
    Some((inner, Outer::new(g, m)))
}

/// Writes im2col rows `rows` and columns `cols` of one image group (`x`: its
/// `ci_g` input planes) into `dst` with leading dimension `ld`.
///
/// # Safety
/// `x` must be valid for `ci_g · ih · iw` reads and `dst` for `rows.len() · ld` writes.
#[inline(always)]
pub(crate) unsafe fn im2col<T: ConvElem>(
    g: &Geo2,
    x: *const T,
    rows: Range<usize>,
    cols: Range<usize>,
    dst: *mut T,
    ld: usize,
) {
    let kk = g.kk();
    for (ri, r) in rows.enumerate() {
        let (c, ki, kj) = (r / kk, (r % kk) / g.kw, r % g.kw);
        // SAFETY: row `r` of the matrix is input channel `c < ci_g`'s tap
        // `(ki, kj)`: plane `c` of `x` (`ci_g · ih · iw` reads); `in_row` only
        // yields input rows `ir < ih` and `valid_cols` the output columns whose
        // input column `t·sw + off` lies in `0..iw`; the destination is row `ri`
        // of `dst`, columns `p - cols.start < cols.len() <= ld` (this function's
        // contract).
        unsafe {
            let plane = x.add(c * g.ip());
            let drow = dst.add(ri * ld);
            let (valid, off) = g.valid_cols(kj);
            let mut p = cols.start;
            while p < cols.end {
                let (o, t0) = (p / g.ow, p % g.ow);
                let t1 = g.ow.min(t0 + cols.end - p);
                let d = drow.add(p - cols.start);
                match g.in_row(o, ki) {
                    None => std::ptr::write_bytes(d, 0, t1 - t0),
                    Some(ir) => {
                        let src = plane.add(ir * g.iw);
                        let (lo, hi) = (valid.start.clamp(t0, t1), valid.end.clamp(t0, t1));
                        std::ptr::write_bytes(d, 0, lo - t0);
                        if g.sw == 1 {
                            copy_row(src.offset(lo as isize + off), d.add(lo - t0), hi - lo);
                        } else if g.sw == 2 && hi > lo {
                            let n = hi - lo;
                            let from = slice(src.offset((2 * lo) as isize + off), 2 * n - 1);
                            gather2(from, slice_mut(d.add(lo - t0), n));
                        } else {
                            for t in lo..hi {
                                *d.add(t - t0) = *src.offset((t * g.sw) as isize + off);
                            }
                        }
                        std::ptr::write_bytes(d.add(hi - t0), 0, t1 - hi);
                    }
                }
                p += t1 - t0;
            }
        }
    }
}

/// `to[t] = from[2t]`: the input columns of a stride-2 im2col row, as whole
/// pairs so the loop vectorises (even lanes of two vectors).
#[inline(always)]
fn gather2<T: Copy>(from: &[T], to: &mut [T]) {
    debug_assert_eq!(from.len() + 1, 2 * to.len());
    if let Some((last, head)) = to.split_last_mut() {
        for (o, pair) in head.iter_mut().zip(from.chunks_exact(2)) {
            *o = pair[0];
        }
        *last = from[2 * head.len()];
    }
}

/// `to[2t] += from[t]`: a stride-2 row added back by [`col2im`], as whole
/// pairs (the odd element written back unchanged) so the loop vectorises.
#[inline(always)]
fn scatter_add2<T: ConvElem>(from: &[T], to: &mut [T]) {
    debug_assert_eq!(to.len() + 1, 2 * from.len());
    if let Some((last, head)) = from.split_last() {
        for (pair, &v) in to.chunks_exact_mut(2).zip(head) {
            let (mut a, b) = (pair[0], pair[1]);
            a += v;
            pair[0] = a;
            pair[1] = b;
        }
        to[2 * head.len()] += *last;
    }
}

/// Adds im2col rows `rows` (all `op` columns, leading dimension `ld`) of `src`
/// back into the input planes `dx` of one image group: the adjoint of [`im2col`].
///
/// # Safety
/// `src` must be valid for `rows.len() · ld` reads and `dx` for `ci_g · ih · iw`
/// reads and writes, not overlapping.
#[inline(always)]
pub(crate) unsafe fn col2im<T: ConvElem>(g: &Geo2, src: *const T, ld: usize, rows: Range<usize>, dx: *mut T) {
    let (kk, op) = (g.kk(), ld);
    for (ri, r) in rows.enumerate() {
        let (c, ki, kj) = (r / kk, (r % kk) / g.kw, r % g.kw);
        // SAFETY: plane `c < ci_g` of `dx`; `in_row` only yields input rows
        // `ir < ih` and `valid_cols` the output columns whose input column
        // `t·sw + off` lies in `0..iw`; row `ri` of `src`, its `oh · ow <= ld`
        // columns (this function's contract); `src` and `dx` do not overlap.
        unsafe {
            let plane = dx.add(c * g.ip());
            let (valid, off) = g.valid_cols(kj);
            for o in 0..g.oh {
                let Some(ir) = g.in_row(o, ki) else { continue };
                let s = src.add(ri * op + o * g.ow);
                let d = plane.add(ir * g.iw);
                if g.sw == 1 {
                    let d = d.offset(off);
                    for t in valid.clone() {
                        *d.add(t) += *s.add(t);
                    }
                } else if g.sw == 2 && !valid.is_empty() {
                    let n = valid.len();
                    let to = slice_mut(d.offset((2 * valid.start) as isize + off), 2 * n - 1);
                    scatter_add2(slice(s.add(valid.start), n), to);
                } else {
                    for t in valid.clone() {
                        *d.offset((t * g.sw) as isize + off) += *s.add(t);
                    }
                }
            }
        }
    }
}

/// Direct convolution of one output plane `y` from one input plane `x` with
/// the `kh · kw` taps `w`: `y = Σ taps` (overwrites `y`).
///
/// # Safety
/// `x`: `ih · iw` reads, `y`: `oh · ow` writes, `w`: `kh · kw` reads.
#[inline(always)]
pub(crate) unsafe fn direct_fwd_plane<T: ConvElem>(g: &Geo2, x: *const T, w: *const T, y: *mut T) {
    // SAFETY: `y` holds `oh · ow` elements (this function's contract).
    unsafe { std::ptr::write_bytes(y, 0, g.op()) };
    for o in 0..g.oh {
        // SAFETY: row `o < oh` of `y`; `in_row` only yields input rows `ir < ih`,
        // `valid_cols` the output columns `t < ow` whose input column
        // `t·sw + off` lies in `0..iw`; tap `ki · kw + kj < kh · kw` of `w`.
        unsafe {
            let yr = y.add(o * g.ow);
            for ki in 0..g.kh {
                let Some(ir) = g.in_row(o, ki) else { continue };
                let xr = x.add(ir * g.iw);
                for kj in 0..g.kw {
                    let wv = *w.add(ki * g.kw + kj);
                    let (valid, off) = g.valid_cols(kj);
                    if g.sw == 1 {
                        let xs = xr.offset(off);
                        for t in valid {
                            *yr.add(t) += wv * *xs.add(t);
                        }
                    } else {
                        for t in valid {
                            *yr.add(t) += wv * *xr.offset((t * g.sw) as isize + off);
                        }
                    }
                }
            }
        }
    }
}

/// Adds the data gradient of one direct plane convolution: `dx += adjoint(dy)`.
///
/// # Safety
/// `dy`: `oh · ow` reads, `dx`: `ih · iw` reads and writes, `w`: `kh · kw` reads.
#[inline(always)]
pub(crate) unsafe fn direct_data_grad_plane<T: ConvElem>(g: &Geo2, dy: *const T, w: *const T, dx: *mut T) {
    for o in 0..g.oh {
        // SAFETY: row `o < oh` of `dy`; `in_row` only yields input rows `ir < ih`
        // of `dx`, `valid_cols` the output columns `t < ow` whose input column
        // `t·sw + off` lies in `0..iw`; tap `ki · kw + kj < kh · kw` of `w`.
        unsafe {
            let gr = dy.add(o * g.ow);
            for ki in 0..g.kh {
                let Some(ir) = g.in_row(o, ki) else { continue };
                let xr = dx.add(ir * g.iw);
                for kj in 0..g.kw {
                    let wv = *w.add(ki * g.kw + kj);
                    let (valid, off) = g.valid_cols(kj);
                    if g.sw == 1 {
                        let xs = xr.offset(off);
                        for t in valid {
                            *xs.add(t) += wv * *gr.add(t);
                        }
                    } else {
                        for t in valid {
                            *xr.offset((t * g.sw) as isize + off) += wv * *gr.add(t);
                        }
                    }
                }
            }
        }
    }
}

/// Adds the weight gradient of one direct plane convolution to the taps `dw`:
/// `dw[ki, kj] += Σ_p dy[p] · x[input of p at (ki, kj)]`.
///
/// # Safety
/// `dy`: `oh · ow` reads, `x`: `ih · iw` reads, `dw`: `kh · kw` reads and writes.
#[inline(always)]
pub(crate) unsafe fn direct_weight_grad_plane<T: ConvElem>(g: &Geo2, dy: *const T, x: *const T, dw: *mut T) {
    for ki in 0..g.kh {
        for kj in 0..g.kw {
            // SAFETY: rows `o < oh` of `dy`, and the input rows `ir < ih` of `x`
            // that `in_row` yields; `valid_cols` keeps the output columns `t < ow`
            // whose input column `t·sw + off` lies in `0..iw`; tap `ki · kw + kj <
            // kh · kw` of `dw` (this function's contract).
            unsafe {
                let (valid, off) = g.valid_cols(kj);
                let mut acc = T::ZERO;
                for o in 0..g.oh {
                    let Some(ir) = g.in_row(o, ki) else { continue };
                    let gr = dy.add(o * g.ow);
                    let xr = x.add(ir * g.iw);
                    // Four partial sums so the loop vectorises.
                    let mut part = [T::ZERO; 4];
                    if g.sw == 1 {
                        let xs = xr.offset(off);
                        let (mut t, end) = (valid.start, valid.end);
                        while t + 4 <= end {
                            for (l, p) in part.iter_mut().enumerate() {
                                *p += *gr.add(t + l) * *xs.add(t + l);
                            }
                            t += 4;
                        }
                        for t in t..end {
                            part[0] += *gr.add(t) * *xs.add(t);
                        }
                    } else {
                        for t in valid.clone() {
                            part[0] += *gr.add(t) * *xr.offset((t * g.sw) as isize + off);
                        }
                    }
                    for p in part {
                        acc += p;
                    }
                }
                *dw.add(ki * g.kw + kj) += acc;
            }
        }
    }
}

/// Copies `n` elements: short rows (the planes of late layers are 7 to 14
/// wide) by fixed-size loads and stores instead of a `memcpy` call each (on
/// batch-32 depthwise layers of 7x7 planes the calls cost more than the
/// convolution); the tail too, so that no loop is turned back into a call.
///
/// # Safety
/// `src` valid for `n` reads, `dst` for `n` writes, not overlapping.
#[inline(always)]
pub(crate) unsafe fn copy_row<T: Copy>(src: *const T, dst: *mut T, n: usize) {
    use std::ptr::{read_unaligned as rd, write_unaligned as wr};
    if n > 64 {
        // SAFETY: `n` reads of `src` and writes of `dst`, not overlapping (this
        // function's contract).
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
        return;
    }
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements `i..i + 8 <= n` of both (this function's contract);
        // unaligned reads and writes of arrays of `T`.
        unsafe { wr(dst.add(i) as *mut [T; 8], rd(src.add(i) as *const [T; 8])) };
        i += 8;
    }
    if i + 4 <= n {
        // SAFETY: elements `i..i + 4 <= n`, as above.
        unsafe { wr(dst.add(i) as *mut [T; 4], rd(src.add(i) as *const [T; 4])) };
        i += 4;
    }
    if i + 2 <= n {
        // SAFETY: elements `i..i + 2 <= n`, as above.
        unsafe { wr(dst.add(i) as *mut [T; 2], rd(src.add(i) as *const [T; 2])) };
        i += 2;
    }
    if i < n {
        // SAFETY: element `i < n`, as above.
        unsafe { *dst.add(i) = *src.add(i) };
    }
}

/// The zero-padded plane of the stride-1 direct path: `hp` rows of `wp`
/// columns hold the input at offset `(ph, pw)`, so that every output of the
/// `oh × wp` extended grid (its last `wp − ow` columns are discarded) is
/// `Σ_taps w · xp[q + ki·dh·wp + kj·dw]`: one contiguous multiply-add per tap
/// over the whole plane, whatever its width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Padded {
    pub hp: usize,
    pub wp: usize,
}

impl Padded {
    /// The padded plane of a stride-1 geometry, or `None` for other strides.
    pub(crate) fn new(g: &Geo2) -> Option<Self> {
        (g.sh == 1 && g.sw == 1).then(|| Padded { hp: g.oh + (g.kh - 1) * g.dh, wp: g.ow + (g.kw - 1) * g.dw })
    }
    /// Elements of the padded plane, with the slack the last taps read past its end.
    pub(crate) fn plane_len(&self, g: &Geo2) -> usize {
        (self.hp * self.wp).max(self.tap(g, g.kh - 1, g.kw - 1) + self.ext_len(g))
    }
    /// Elements of the extended output grid, rounded up to whole vectors (the
    /// extra elements are computed and discarded: no scalar remainder loops,
    /// which dominate on the 7x7 planes of late layers).
    pub(crate) fn ext_len(&self, g: &Geo2) -> usize {
        (g.oh * self.wp).next_multiple_of(16)
    }
    /// Scratch of one plane and one grid.
    pub(crate) fn scratch_len(&self, g: &Geo2) -> usize {
        self.plane_len(g) + self.ext_len(g)
    }
    /// Offset of tap `(ki, kj)` in the padded plane.
    #[inline]
    fn tap(&self, g: &Geo2, ki: usize, kj: usize) -> usize {
        ki * g.dh * self.wp + kj * g.dw
    }

    /// Copies the input plane `x` into the padded plane `xp` (zeros around).
    ///
    /// # Safety
    /// `x`: `ih · iw` reads; `xp`: [`Padded::plane_len`] writes.
    pub(crate) unsafe fn pad<T: ConvElem>(&self, g: &Geo2, x: *const T, xp: *mut T) {
        // SAFETY: `xp` holds `plane_len` elements (this function's contract).
        unsafe { std::ptr::write_bytes(xp, 0, self.plane_len(g)) };
        for r in 0..self.hp {
            let ir = r as isize - g.ph;
            if ir < 0 || ir as usize >= g.ih {
                continue;
            }
            let (lo, hi) = ((g.pw.max(0) as usize).min(self.wp), ((g.iw as isize + g.pw).max(0) as usize).min(self.wp));
            if lo < hi {
                // SAFETY: input row `ir < ih`, its columns `lo - pw..hi - pw` in
                // `0..iw` (`lo >= pw`, `hi <= iw + pw`), into columns `lo..hi <= wp`
                // of padded row `r < hp`.
                unsafe {
                    let src = x.add(ir as usize * g.iw).offset(lo as isize - g.pw);
                    copy_row(src, xp.add(r * self.wp + lo), hi - lo);
                }
            }
        }
    }

    /// `y = conv(plane)` for one output plane from the padded input `xp`, through the grid `ext`.
    ///
    /// # Safety
    /// `xp`: [`Padded::plane_len`] reads; `w`: `kh · kw` reads; `ext`: grid writes; `y`: `oh · ow` writes.
    pub(crate) unsafe fn fwd<T: ConvElem>(&self, g: &Geo2, xp: *const T, w: *const T, ext: *mut T, y: *mut T) {
        let n = self.ext_len(g);
        // SAFETY: `ext` holds the grid's `ext_len` elements, no other operand's
        // (this function's contract).
        let e = unsafe { std::slice::from_raw_parts_mut(ext, n) };
        e.fill(T::ZERO);
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                // SAFETY: tap `ki · kw + kj < kh · kw` of `w`; the plane's `plane_len`
                // covers every tap's offset plus the grid's `ext_len` (its slack).
                let (wv, src) =
                    unsafe { (*w.add(ki * g.kw + kj), std::slice::from_raw_parts(xp.add(self.tap(g, ki, kj)), n)) };
                for (d, &s) in e.iter_mut().zip(src) {
                    *d += wv * s;
                }
            }
        }
        for o in 0..g.oh {
            // SAFETY: grid row `o < oh` (`wp >= ow` columns), output row `o` of `y`.
            unsafe { copy_row(ext.add(o * self.wp), y.add(o * g.ow), g.ow) };
        }
    }

    /// Spreads the output plane `dy` over the grid `ext` (zeros in the extra columns).
    ///
    /// # Safety
    /// `dy`: `oh · ow` reads; `ext`: grid writes.
    pub(crate) unsafe fn spread<T: ConvElem>(&self, g: &Geo2, dy: *const T, ext: *mut T) {
        // SAFETY: `ext` holds the grid's `ext_len` elements (this function's contract).
        unsafe { std::ptr::write_bytes(ext, 0, self.ext_len(g)) };
        for o in 0..g.oh {
            // SAFETY: output row `o < oh` of `dy`, grid row `o` (`wp >= ow` columns).
            unsafe { copy_row(dy.add(o * g.ow), ext.add(o * self.wp), g.ow) };
        }
    }

    /// `dxp += adjoint(ext)` with the taps `w`: the data gradient on the padded plane.
    ///
    /// # Safety
    /// `ext`: grid reads; `w`: `kh · kw` reads; `dxp`: [`Padded::plane_len`] reads and writes.
    pub(crate) unsafe fn data_grad<T: ConvElem>(&self, g: &Geo2, ext: *const T, w: *const T, dxp: *mut T) {
        let n = self.ext_len(g);
        // SAFETY: `ext` holds the grid's `ext_len` elements (this function's contract).
        let e = unsafe { std::slice::from_raw_parts(ext, n) };
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                // SAFETY: tap `ki · kw + kj < kh · kw` of `w`; the plane's `plane_len`
                // covers every tap's offset plus the grid's `ext_len` (its slack);
                // `dxp` overlaps neither `ext` nor `w`.
                let (wv, dst) = unsafe {
                    (*w.add(ki * g.kw + kj), std::slice::from_raw_parts_mut(dxp.add(self.tap(g, ki, kj)), n))
                };
                for (d, &s) in dst.iter_mut().zip(e) {
                    *d += wv * s;
                }
            }
        }
    }

    /// Copies the input-sized part of the padded plane `xp` to `x` (the inverse of [`Padded::pad`]).
    ///
    /// # Safety
    /// `xp`: [`Padded::plane_len`] reads; `x`: `ih · iw` writes.
    pub(crate) unsafe fn crop<T: ConvElem>(&self, g: &Geo2, xp: *const T, x: *mut T) {
        // SAFETY: `x` holds `ih · iw` elements (this function's contract).
        unsafe { std::ptr::write_bytes(x, 0, g.ip()) };
        for ir in 0..g.ih {
            let r = ir as isize + g.ph;
            if r < 0 || r as usize >= self.hp {
                continue;
            }
            let (lo, hi) = ((g.pw.max(0) as usize).min(self.wp), ((g.iw as isize + g.pw).max(0) as usize).min(self.wp));
            if lo < hi {
                // SAFETY: padded row `r < hp`, its columns `lo..hi <= wp`, into input
                // row `ir < ih`, columns `lo - pw..hi - pw` in `0..iw` (`lo >= pw`,
                // `hi <= iw + pw`).
                unsafe {
                    let dst = x.add(ir * g.iw).offset(lo as isize - g.pw);
                    copy_row(xp.add(r as usize * self.wp + lo), dst, hi - lo);
                }
            }
        }
    }

    /// `dw[tap] += <ext, xp shifted by tap>` for every tap.
    ///
    /// # Safety
    /// `ext`: grid reads; `xp`: [`Padded::plane_len`] reads; `dw`: `kh · kw` reads and writes.
    pub(crate) unsafe fn weight_grad<T: ConvElem>(&self, g: &Geo2, ext: *const T, xp: *const T, dw: *mut T) {
        let n = self.ext_len(g);
        // SAFETY: `ext` holds the grid's `ext_len` elements (this function's contract).
        let e = unsafe { std::slice::from_raw_parts(ext, n) };
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                // SAFETY: the plane's `plane_len` covers every tap's offset plus the
                // grid's `ext_len` (its slack).
                let src = unsafe { std::slice::from_raw_parts(xp.add(self.tap(g, ki, kj)), n) };
                let mut part = [T::ZERO; 8];
                let (ec, sc) = (e.chunks_exact(8), src.chunks_exact(8));
                let (er, sr) = (ec.remainder(), sc.remainder());
                for (a, b) in ec.zip(sc) {
                    for l in 0..8 {
                        part[l] += a[l] * b[l];
                    }
                }
                for (a, b) in er.iter().zip(sr) {
                    part[0] += *a * *b;
                }
                let mut acc = T::ZERO;
                for p in part {
                    acc += p;
                }
                // SAFETY: tap `ki · kw + kj < kh · kw` of `dw` (this function's contract).
                unsafe { *dw.add(ki * g.kw + kj) += acc };
            }
        }
    }
}

impl<T: ConvElem> ConvKernel<T> {
    /// Runs a task of the direct method (through the padded plane `padded`
    /// when there is one) with the scratch `io.col` (inlined into
    /// [`ConvKernel::task`], so it compiles inside the SIMD tier's build).
    ///
    /// # Safety
    /// `io` holds the whole tensors and a scratch of the plan's size; tasks
    /// write disjoint planes.
    #[inline(always)]
    pub(super) unsafe fn direct_task(&self, t: Task, padded: Option<Padded>, io: Io<T>) {
        let Io { x, w, y, col, .. } = io;
        let g = &self.geo;
        let (kk, ip, op) = (g.kk(), g.ip(), g.op());
        // Output channel o (of all groups) reads input channel o / co_g.
        // SAFETY: image `n < g.n`, output channel `o < groups · co_g` of `y` (the
        // whole tensor: this function's contract).
        let y_plane = |n: usize, o: usize| unsafe { y.add((n * g.groups * g.co_g + o) * op) };
        let (xp, ext) = match padded {
            // SAFETY: the plan's scratch holds the padded plane and then the grid
            // (`Padded::scratch_len`).
            Some(p) => (col, unsafe { col.add(p.plane_len(g)) }),
            None => (col, col),
        };
        match self.pass {
            Pass::Forward => {
                let (n, c) = (t.n, t.g);
                // SAFETY: plane `c` of image `n` of `x`, the output planes of its `co_g`
                // channels (this task's alone) and their taps in `w`; `xp` and `ext` in
                // the plan's scratch, this piece's own.
                unsafe {
                    let xi = x.add((n * g.groups + c) * ip);
                    if let Some(p) = padded {
                        p.pad(g, xi, xp);
                    }
                    for o in c * g.co_g..(c + 1) * g.co_g {
                        match padded {
                            Some(p) => p.fwd(g, xp, w.add(o * kk), ext, y_plane(n, o)),
                            None => direct_fwd_plane(g, xi, w.add(o * kk), y_plane(n, o)),
                        }
                    }
                }
            }
            Pass::Data => {
                let (n, c) = (t.n, t.g);
                // SAFETY: plane `c` of image `n` of `dx` (this task's alone), the output
                // gradient planes of its `co_g` channels and their taps in `w`; `xp` and
                // `ext` in the plan's scratch, this piece's own.
                unsafe {
                    let dx = x.add((n * g.groups + c) * ip);
                    match padded {
                        Some(p) => std::ptr::write_bytes(xp, 0, p.plane_len(g)),
                        None => std::ptr::write_bytes(dx, 0, ip),
                    }
                    for o in c * g.co_g..(c + 1) * g.co_g {
                        match padded {
                            Some(p) => {
                                p.spread(g, y_plane(n, o), ext);
                                p.data_grad(g, ext, w.add(o * kk), xp);
                            }
                            None => direct_data_grad_plane(g, y_plane(n, o), w.add(o * kk), dx),
                        }
                    }
                    if let Some(p) = padded {
                        p.crop(g, xp, dx);
                    }
                }
            }
            Pass::Weights => {
                let o = t.g;
                // SAFETY: the `kk` taps of channel `o` of `dw` (this task's alone), its
                // input and output planes in every image; `xp` and `ext` in the plan's
                // scratch, this piece's own.
                unsafe {
                    let dw = w.add(o * kk);
                    std::ptr::write_bytes(dw, 0, kk);
                    for n in 0..g.n {
                        let xi = x.add((n * g.groups + o / g.co_g) * ip);
                        match padded {
                            Some(p) => {
                                p.pad(g, xi, xp);
                                p.spread(g, y_plane(n, o), ext);
                                p.weight_grad(g, ext, xp, dw);
                            }
                            None => direct_weight_grad_plane(g, y_plane(n, o), xi, dw),
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use popart_ir::ops::conv::{conv_geometry, ConvAttrs};

    fn geo(x: &[usize], w: &[usize], strides: &[i64], pads: &[i64], dil: &[i64]) -> Geo2 {
        let a = ConvAttrs {
            strides: Some(strides.to_vec()),
            pads: Some(pads.to_vec()),
            dilations: Some(dil.to_vec()),
            group: 1,
            auto_pad: None,
        };
        Geo2::new(&conv_geometry(x, w, &a).unwrap()).unwrap()
    }

    #[test]
    fn col2im_is_the_adjoint_of_im2col() {
        // <im2col(x), c> == <x, col2im(c)> for random x and c.
        let g = geo(&[1, 2, 7, 6], &[1, 2, 3, 2], &[2, 1], &[1, 0, 2, 1], &[1, 2]);
        let (rows, cols) = (g.kdim(), g.op());
        let x: Vec<f64> = (0..g.ci_g * g.ip()).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
        let c: Vec<f64> = (0..rows * cols).map(|i| ((i * 13) % 7) as f64 - 3.0).collect();
        let mut col = vec![0.0; rows * cols];
        let mut back = vec![0.0; x.len()];
        // SAFETY: the buffers have the sizes the functions read and write.
        unsafe {
            im2col(&g, x.as_ptr(), 0..rows, 0..cols, col.as_mut_ptr(), cols);
            col2im(&g, c.as_ptr(), cols, 0..rows, back.as_mut_ptr());
        }
        let lhs: f64 = col.iter().zip(&c).map(|(a, b)| a * b).sum();
        let rhs: f64 = x.iter().zip(&back).map(|(a, b)| a * b).sum();
        assert_eq!(lhs, rhs);
        // A block of rows and columns equals the same block of the whole matrix.
        let mut part = vec![0.0; 3 * 5];
        // SAFETY: `part` holds 3 rows of 5 columns.
        unsafe { im2col(&g, x.as_ptr(), 2..5, 4..9, part.as_mut_ptr(), 5) };
        for r in 0..3 {
            assert_eq!(part[r * 5..r * 5 + 5], col[(r + 2) * cols + 4..(r + 2) * cols + 9]);
        }
    }
}
