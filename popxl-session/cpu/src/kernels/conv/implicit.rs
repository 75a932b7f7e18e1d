//! Implicit-GEMM convolution of float32 on AVX2 + FMA: forward passes of row
//! stride 1 or 2, and stride-1 data gradients as the forward convolution of
//! `dy` with the flipped, transposed weights (see `data_forward`),
//! without writing an im2col matrix or a flipped copy of the weights.
//!
//! The product `y[o][p] = Σ_k w[o][k] · col[k][p]` (`k` = input channel and
//! tap, `p` = output position over the whole batch) is blocked as BLIS blocks
//! a GEMM. A task packs the weights of up to `mc` output channels for every
//! `k` into panels of `MR` rows (read in order for the forward pass, flipped
//! and transposed for the data gradient); then, for each block of [`NC`]
//! positions and of [`KC`] steps of `k` (whole input channels), it packs the
//! positions into panels of `NR` columns and runs the 6 × 16 register tile
//! of [`super::gemm`] over every pair of panels. Packing the
//! positions *is* the im2col: per panel and tap, the panel's columns are a
//! few runs along one input row, read for every input channel by masked
//! loads (zeros where a tap reads padding; stride 2 keeps the even elements;
//! inner panels of stride-2 kernels of 5 or more columns split each input
//! row into even and odd elements once for all its taps).
//! Tiles of 16 positions in one image are stored straight into `y`, others
//! through a small buffer.
//!
//! A data gradient of fewer than [`MIN_POSITIONS`] positions runs
//! transposed ([`Implicit::trans`]). Weight gradients reuse the packing of
//! the positions, transposed (`implicit_wgrad`).
//!
//! Every output is summed over `k` in the same order whatever the task split,
//! so results do not depend on the thread count.

use std::any::TypeId;

use super::super::par::Simd;
use super::data_forward::forward_geometry;
use super::layout::{ConvElem, Geo2};
use super::{ConvKernel, Cut, Io, Pass, PlanCx, Task};
#[cfg(target_arch = "x86_64")]
use crate::kernels::tile::tile;
use crate::kernels::tile::{MR, NR};

/// Steps of `k` per packed block, rounded to whole input channels (a
/// 16-column panel of them is 16 KiB, half the level-1 cache).
const KC: usize = 512;
/// Packed weights a task keeps (4 MiB): all of a layer's usually, so each
/// weight is packed once per task; a block of `k` of them stays in the
/// level-2 cache while a block of positions goes over it.
const A_ELEMS: usize = 1 << 20;
/// Positions per packed block (256 KiB at `KC`: level-2 resident).
const NC: usize = 256;
/// Output channels (of the forward product) below which packing costs too
/// much next to the multiply-adds each packed value feeds.
const MIN_CHANNELS: usize = 16;
/// Multiply-adds of `k` below which the tile's loop is too short.
const MIN_K: usize = 16;
/// Output channels per task below which packing the positions again for
/// each block of channels costs too much.
const MIN_BLOCK: usize = 48;
/// Positions per task below which packing the weights costs too much next
/// to the multiply-adds each packed weight feeds.
pub(super) const MIN_POSITIONS: usize = 128;

/// The plan of an implicit-GEMM convolution (see the module doc).
#[derive(Debug)]
pub(crate) struct Implicit {
    /// The forward geometry computed: its input is `x` (`dy` for a data
    /// gradient), its output `y` (`dx`).
    pub(super) f: Geo2,
    /// The weights are the data gradient's: `w[c][o][taps]` read with `c`
    /// as `f`'s input channel, `o` as its output channel, taps reversed.
    pub(super) flipped: bool,
    /// Positions are the tile's rows and channels its columns: a data
    /// gradient of few positions (late layers at batch 1), where columns of
    /// 16 positions would be mostly padding. Its weights are read in blocks
    /// of 16 channels' contiguous taps, `dx` is stored through the tile buffer.
    pub(super) trans: bool,
    /// Input channels per block of `k` (all their taps).
    pub(super) cb: usize,
    /// Output channels whose packed weights (all steps of `k`) a task keeps at a time.
    mc: usize,
}

/// A run of panel columns within one output row: image offset of the input,
/// output row and first column, length, first column in the panel.
#[derive(Clone, Copy, Default)]
struct Seg {
    x: usize,
    oy: usize,
    ox: usize,
    len: usize,
    jj: usize,
}

impl Implicit {
    /// The implicit plan of pass `pass` over `g`, when the CPU's widest tier
    /// is AVX2 + FMA (AVX-512 CPUs run `direct2d`'s tiles and the `gemm`
    /// crate's) and the shape feeds the tile: a forward pass or weight
    /// gradient of at least [`MIN_POSITIONS`] positions (pointwise: planes of
    /// fewer than [`NC`] positions), or a
    /// stride-1 data gradient whose padding is at most `(k − 1)·d`, with at
    /// least [`MIN_CHANNELS`] output channels and [`MIN_K`] terms per output.
    pub(crate) fn new(g: &Geo2, pass: Pass) -> Option<Self> {
        Self::for_tier(g, pass, Simd::best())
    }

    /// [`Implicit::new`] on a CPU whose widest tier is `tier`.
    pub(super) fn for_tier(g: &Geo2, pass: Pass, tier: Simd) -> Option<Self> {
        if !cfg!(target_arch = "x86_64") || tier != Simd::Avx2 {
            return None;
        }
        let (f, flipped) = match pass {
            // A pointwise forward pass reads its operand where it lies (`Plan::Pointwise`).
            Pass::Forward if g.pointwise() => return None,
            Pass::Forward => (g.clone(), false),
            Pass::Data => (Geo2::new(&forward_geometry(g)?)?, true),
            // Weight gradients (`implicit_wgrad`); pointwise ones of large
            // planes are one long GEMM per image on the tensors (`Plan::Pointwise`).
            Pass::Weights if g.pointwise() && g.op() >= NC => return None,
            Pass::Weights => (g.clone(), false),
        };
        // Few positions: only a data gradient, transposed (see [`Implicit::trans`]).
        let few = f.n * f.op() < MIN_POSITIONS;
        let trans = few && pass == Pass::Data;
        if f.sw > 2 || f.co_g < MIN_CHANNELS || f.kdim() < MIN_K || (few && !flipped) {
            return None;
        }
        let kk = f.kk();
        let cb = (KC / kk).clamp(1, f.ci_g);
        let cb = f.ci_g.div_ceil(f.ci_g.div_ceil(cb));
        let mc = (A_ELEMS / f.kdim()).clamp(MR, f.co_g.max(MR));
        let mc = f.co_g.div_ceil(f.co_g.div_ceil(mc)).next_multiple_of(MR);
        Some(Implicit { f, flipped, trans, cb, mc })
    }

    /// The weight-gradient plan of `g` on any CPU with AVX2 and FMA.
    #[cfg(test)]
    pub(super) fn weights_for_tests(g: &Geo2) -> Option<Self> {
        Self::for_tier(g, Pass::Weights, Simd::Avx2)
    }

    /// Scratch elements of a task: one packed block of each operand, and
    /// slack to align them to cache lines.
    pub(crate) fn scratch_len(&self) -> usize {
        if self.trans {
            return ((self.f.n * self.f.op()).next_multiple_of(MR) + NC) * self.cb * self.f.kk() + 32;
        }
        self.mc * self.f.kdim() + self.cb * self.f.kk() * NC + 32
    }

    /// Packs input channels `c0..c0 + cb` (all taps: steps `c0·kk..`) of
    /// positions `p0..p0 + cols` (of the whole batch) into panels of [`NR`]
    /// columns at `dst`, zeros past `cols`: per panel and tap, the panel's
    /// columns are a few runs of one input row each, read for every channel
    /// by masked loads (lanes outside a run, or reading padding, stay zero).
    ///
    /// # Safety
    /// The CPU has AVX2; `x`: the group's input planes of image 0 (images
    /// `groups·ci_g·ih·iw` apart); `dst` valid for `cols.next_multiple_of(NR) · cb · kk` writes.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(super) unsafe fn pack_positions(
        &self,
        x: *const f32,
        p0: usize,
        cols: usize,
        c0: usize,
        cb: usize,
        dst: *mut f32,
    ) {
        use std::arch::x86_64::*;
        let f = &self.f;
        let (op, ip, kk) = (f.op(), f.ip(), f.kk());
        let kb = cb * kk;
        let xs = f.groups * f.ci_g * ip;
        // SAFETY: the CPU has AVX2 (this function's contract), as for every
        // intrinsic below.
        let lanes = unsafe { _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7) };
        // Elements lo..hi of the `sw · 16` a panel row reads, every `sw`-th,
        // as the masks of their vectors.
        // SAFETY: AVX2.
        let even = unsafe { _mm256_setr_epi32(-1, 0, -1, 0, -1, 0, -1, 0) };
        let mask = |lo: usize, hi: usize, v: i32| {
            // SAFETY: AVX2; register operations only.
            unsafe {
                let (lo, hi) = (_mm256_set1_epi32(lo as i32 - 1), _mm256_set1_epi32(hi as i32));
                let e = _mm256_add_epi32(lanes, _mm256_set1_epi32(8 * v));
                let m = _mm256_and_si256(_mm256_cmpgt_epi32(e, lo), _mm256_cmpgt_epi32(hi, e));
                if f.sw == 1 {
                    m
                } else {
                    _mm256_and_si256(m, even)
                }
            }
        };
        // The even elements of (a, b), in order.
        let evens = |a: __m256, b: __m256| {
            // SAFETY: AVX2; register operations only.
            unsafe {
                let t = _mm256_castps_pd(_mm256_shuffle_ps::<0b10_00_10_00>(a, b));
                _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(t))
            }
        };
        // SAFETY: channel `c0 < ci_g` of the group's planes (this function's contract).
        let xc0 = unsafe { x.add(c0 * ip) };
        // The masks of the input elements a split row reads (see `pack_split_rows`).
        // Kernels of at least 5 columns (3: as fast either way).
        let split = (f.sw == 2 && f.kw >= 5 && (f.kw - 1) * f.dw + 2 * NR <= 4 * NR).then(|| {
            // SAFETY: AVX2; register operations only.
            unsafe {
                let span = _mm256_set1_epi32(((f.kw - 1) * f.dw + 2 * NR - 1) as i32);
                std::array::from_fn(|v| {
                    _mm256_cmpgt_epi32(span, _mm256_add_epi32(lanes, _mm256_set1_epi32(8 * v as i32)))
                })
            }
        });
        // A tap's runs (set before use: zeroed once per call, not per tap).
        // SAFETY: AVX2.
        let mut runs = [(0isize, unsafe { [_mm256_setzero_si256(); 4] }); NR];
        let mut q = 0;
        while q < cols {
            let wd = NR.min(cols - q);
            // SAFETY: panel `q / NR` of `dst`, its `kb · NR` elements within the
            // `cols.next_multiple_of(NR) · cb · kk` writes (this function's contract).
            let pd = unsafe { dst.add(q * kb) };
            // The panel's columns as runs within one output row.
            let mut segs = [Seg::default(); NR];
            let mut ns = 0;
            let p = p0 + q;
            let (mut img, pos) = (p / op, p % op);
            let (mut oy, mut ox) = (pos / f.ow, pos % f.ow);
            let mut jj = 0;
            while jj < wd {
                let len = (wd - jj).min(f.ow - ox);
                segs[ns] = Seg { x: img * xs, oy, ox, len, jj };
                ns += 1;
                jj += len;
                ox += len;
                if ox == f.ow {
                    ox = 0;
                    oy += 1;
                    if oy == f.oh {
                        oy = 0;
                        img += 1;
                    }
                }
            }
            // Stride 2, one row, every tap's lanes inside the input: each
            // channel's input row is split into even and odd elements once.
            if let Some(split) = split.filter(|_| ns == 1 && segs[0].len == NR) {
                let s = segs[0];
                if (0..f.kw).all(|kx| f.valid_cols(kx).0.start <= s.ox && s.ox + NR <= f.valid_cols(kx).0.end) {
                    // SAFETY: every tap of the segment's 16 positions reads inside its
                    // input row (checked above); AVX2, and `xc0`, `pd` as above.
                    unsafe { self.pack_split_rows(xc0, s, cb, split, pd) };
                    q += NR;
                    continue;
                }
            }
            for t in 0..kk {
                let (ky, kx) = (t / f.kw, t % f.kw);
                let (valid, off) = f.valid_cols(kx);
                // The tap's runs: lane l of a run reads base + sw·l (masked to its valid lanes).
                let mut nr = 0;
                let mut full = false;
                for s in &segs[..ns] {
                    let Some(iy) = f.in_row(s.oy, ky) else { continue };
                    let lo = valid.start.clamp(s.ox, s.ox + s.len);
                    let hi = valid.end.clamp(lo, s.ox + s.len);
                    if hi > lo {
                        // Lane jj + (t − ox) reads input column t·sw + off.
                        let (l0, l1) = (s.jj + lo - s.ox, s.jj + hi - s.ox);
                        let base = (s.x + iy * f.iw) as isize + (s.ox as isize - s.jj as isize) * f.sw as isize + off;
                        let (e0, e1) = (l0 * f.sw, l1 * f.sw);
                        full = ns == 1 && l0 == 0 && l1 == NR;
                        // A full run only masks the odd lanes of its last vector at stride 2.
                        runs[nr] = if full {
                            (base, [even; 4])
                        } else {
                            (base, [mask(e0, e1, 0), mask(e0, e1, 1), mask(e0, e1, 2), mask(e0, e1, 3)])
                        };
                        nr += 1;
                    }
                }
                // SAFETY: tap `t < kk`'s row of the panel; channel `c < cb` moves it
                // `kk · NR` on, within the panel's `kb · NR` (written below, one row per
                // channel, and `xc` one plane on, within the `cb` channels from `c0`).
                let mut row = unsafe { pd.add(t * NR) };
                let mut xc = xc0;
                // One run over all 16 lanes (inside the plane): plain loads.
                if full {
                    let (base, m) = runs[0];
                    for _ in 0..cb {
                        // SAFETY: one run of all 16 lanes in one input row (`valid_cols` keeps
                        // their columns inside it) of channel `xc`: at stride 1 the two vectors
                        // from `b` lie inside the row; at stride 2 elements `0..31` from `b` lie
                        // inside it (lanes read the even ones), and the last vector's odd lanes,
                        // which may lie past the plane, are masked off; rows as above.
                        unsafe {
                            let b = xc.offset(base);
                            if f.sw == 1 {
                                _mm256_storeu_ps(row, _mm256_loadu_ps(b));
                                _mm256_storeu_ps(row.add(8), _mm256_loadu_ps(b.add(8)));
                            } else {
                                // The last vector's odd lanes may lie past the plane: masked.
                                let v = |i: usize| _mm256_loadu_ps(b.add(8 * i));
                                let v3 = _mm256_maskload_ps(b.add(24), m[3]);
                                _mm256_storeu_ps(row, evens(v(0), v(1)));
                                _mm256_storeu_ps(row.add(8), evens(v(2), v3));
                            }
                            row = row.add(kk * NR);
                            xc = xc.add(ip);
                        }
                    }
                    continue;
                }
                // Masked-off lanes are not read: a run's pointer may lie outside the row.
                if f.sw == 1 {
                    for _ in 0..cb {
                        // SAFETY: masked lanes only are read (each run's lanes hold valid
                        // input columns of one input row, its pointer offset wrapping); rows
                        // as above.
                        unsafe {
                            let (mut v0, mut v1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                            for &(base, m) in &runs[..nr] {
                                let b = xc.wrapping_offset(base);
                                v0 = _mm256_or_ps(v0, _mm256_maskload_ps(b, m[0]));
                                v1 = _mm256_or_ps(v1, _mm256_maskload_ps(b.wrapping_add(8), m[1]));
                            }
                            _mm256_storeu_ps(row, v0);
                            _mm256_storeu_ps(row.add(8), v1);
                            row = row.add(kk * NR);
                            xc = xc.add(ip);
                        }
                    }
                } else {
                    for _ in 0..cb {
                        // SAFETY: as in the stride-1 loop above.
                        unsafe {
                            let mut v = [_mm256_setzero_ps(); 4];
                            for &(base, m) in &runs[..nr] {
                                let b = xc.wrapping_offset(base);
                                for (i, v) in v.iter_mut().enumerate() {
                                    *v = _mm256_or_ps(*v, _mm256_maskload_ps(b.wrapping_add(8 * i), m[i]));
                                }
                            }
                            _mm256_storeu_ps(row, evens(v[0], v[1]));
                            _mm256_storeu_ps(row.add(8), evens(v[2], v[3]));
                            row = row.add(kk * NR);
                            xc = xc.add(ip);
                        }
                    }
                }
            }
            q += NR;
        }
    }

    /// Packs the panel of segment `s` (16 positions of one output row whose
    /// every tap reads inside the input row) at stride 2 into `pd`: per
    /// channel and kernel row, the `(kw − 1)·dw + 31` input elements the taps
    /// read are split once into even and odd ones (masked loads of up to 64
    /// elements, `masks`), and each tap is then 16 consecutive ones.
    ///
    /// # Safety
    /// As [`Self::pack_positions`].
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn pack_split_rows(
        &self,
        xc0: *const f32,
        s: Seg,
        cb: usize,
        masks: [std::arch::x86_64::__m256i; 8],
        pd: *mut f32,
    ) {
        use std::arch::x86_64::*;
        let f = &self.f;
        let (ip, kk) = (f.ip(), f.kk());
        let pick = |a: __m256, b: __m256, odd: bool| {
            // SAFETY: AVX2 (this function's contract); register operations only.
            unsafe {
                let t = if odd {
                    _mm256_shuffle_ps::<0b11_01_11_01>(a, b)
                } else {
                    _mm256_shuffle_ps::<0b10_00_10_00>(a, b)
                };
                _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(t)))
            }
        };
        let (mut even, mut odd) = ([0f32; 2 * NR], [0f32; 2 * NR]);
        // Pairs of vectors holding the elements the taps read.
        let pairs = ((f.kw - 1) * f.dw + 2 * NR - 1).div_ceil(NR);
        for ky in 0..f.kh {
            let iy = f.in_row(s.oy, ky);
            for c in 0..cb {
                // SAFETY: AVX2 (this function's contract). Channel `c < cb`, kernel row
                // `ky`: its `kw` rows of the panel at `pd` (`kb · NR` elements); the
                // segment's 16 positions read inside input row `iy < ih` at every tap
                // (checked by the caller), and `masks` keep the `(kw − 1)·dw + 31`
                // elements from its column `2·ox − pw` (offset wrapping: masked-off lanes
                // are not read); `even` and `odd` hold the `pairs · 8 <= 2 · NR` values.
                unsafe {
                    let mut row = pd.add((c * kk + ky * f.kw) * NR);
                    let Some(iy) = iy else {
                        for _ in 0..f.kw {
                            _mm256_storeu_ps(row, _mm256_setzero_ps());
                            _mm256_storeu_ps(row.add(8), _mm256_setzero_ps());
                            row = row.add(NR);
                        }
                        continue;
                    };
                    // Input column of lane 0 at tap 0: 2·ox − pw (inside the row).
                    let b = xc0.add(c * ip + s.x + iy * f.iw + 2 * s.ox).wrapping_offset(-f.pw);
                    for h in 0..pairs {
                        let v = |i: usize| _mm256_maskload_ps(b.wrapping_add(8 * i), masks[i]);
                        let (lo, hi) = (v(2 * h), v(2 * h + 1));
                        _mm256_storeu_ps(even.as_mut_ptr().add(8 * h), pick(lo, hi, false));
                        _mm256_storeu_ps(odd.as_mut_ptr().add(8 * h), pick(lo, hi, true));
                    }
                    for kx in 0..f.kw {
                        let d = kx * f.dw;
                        let src = if d.is_multiple_of(2) { even.as_ptr() } else { odd.as_ptr() }.add(d / 2);
                        _mm256_storeu_ps(row, _mm256_loadu_ps(src));
                        _mm256_storeu_ps(row.add(8), _mm256_loadu_ps(src.add(8)));
                        row = row.add(NR);
                    }
                }
            }
        }
    }

    /// Packs steps `k0..k0 + kb` (whole input channels) of output channels
    /// `o0..o0 + cols` into panels of [`MR`] rows at `dst`, zeros past `cols`.
    ///
    /// # Safety
    /// `w`: the group's weights; `dst` valid for `cols.next_multiple_of(MR) · kb` writes.
    #[inline(always)]
    unsafe fn pack_weights(&self, w: *const f32, o0: usize, cols: usize, k0: usize, kb: usize, dst: *mut f32) {
        let f = &self.f;
        let (kk, kdim) = (f.kk(), f.kdim());
        let mut q = 0;
        while q < cols {
            let wd = MR.min(cols - q);
            // SAFETY: panel `q / MR` of `dst`, its `kb · MR` elements within the
            // `cols.next_multiple_of(MR) · kb` writes (this function's contract).
            let pd = unsafe { dst.add(q * kb) };
            if self.flipped {
                // Step k = c·kk + t of output channel o reads the data
                // gradient's w[c][o][kk − 1 − t]: the panel's channels are
                // `kk` apart, so one step's values share a cache line or two.
                let row = f.co_g * kk;
                let (c0, mut d) = (k0 / kk, pd);
                for c in c0..c0 + kb / kk {
                    // SAFETY: channel `c` of the data gradient's weights (the group's),
                    // output channels `o0 + q + r < o0 + cols` of its row, their `kk` taps;
                    // `d` walks the panel's `kb · MR` elements, `MR` per step.
                    unsafe {
                        let base = w.add(c * row + (o0 + q) * kk + kk - 1);
                        for t in 0..kk {
                            let src = base.sub(t);
                            for r in 0..MR {
                                *d.add(r) = if r < wd { *src.add(r * kk) } else { 0.0 };
                            }
                            d = d.add(MR);
                        }
                    }
                }
            } else {
                for r in 0..MR {
                    // SAFETY: row `r` of the panel, its `kb` steps `MR` apart; output channel
                    // `o0 + q + r < o0 + cols` of the group's weights, steps `k0..k0 + kb`
                    // within its `kdim`.
                    unsafe {
                        let d = pd.add(r);
                        if r < wd {
                            let src = w.add((o0 + q + r) * kdim + k0);
                            for k in 0..kb {
                                *d.add(k * MR) = *src.add(k);
                            }
                        } else {
                            for k in 0..kb {
                                *d.add(k * MR) = 0.0;
                            }
                        }
                    }
                }
            }
            q += MR;
        }
    }

    /// Runs task `t`: positions `t.lo..t.hi` of the batch and output channels
    /// `t.o0..t.o1` of group `t.g`.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `x`, `w`, `y` are the forward product's
    /// tensors (see [`Implicit::f`]); `scratch` holds [`Self::scratch_len`]
    /// elements; tasks write disjoint outputs.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn run(&self, t: Task, x: *const f32, w: *const f32, y: *mut f32, scratch: *mut f32) {
        let f = &self.f;
        let (op, kdim) = (f.op(), f.kdim());
        // SAFETY: group `t.g < groups` of the tensors (this function's contract).
        let (xg, wg, yg) =
            unsafe { (x.add(t.g * f.ci_g * f.ip()), w.add(t.g * f.co_g * kdim), y.add(t.g * f.co_g * op)) };
        let ys = f.groups * f.co_g * op;
        // Offsets in `y` of a position and of a channel.
        let pos_off = |p: usize| (p / op) * ys + p % op;
        let ch_off = |o: usize| o * op;
        let (rows, cols) = (t.o0..t.o1, t.lo..t.hi);
        let kk = f.kk();
        // Cache-line aligned packed blocks: the weights of `mc` channels for
        // every step of `k` (block k0 at `a + k0 · mcp`), and NC positions for one block of `k`.
        // SAFETY: the scratch holds [`Self::scratch_len`] elements: 32 of slack
        // cover the alignment of `a` to 64 bytes, then the packed weights and
        // positions.
        let (a, b) = unsafe {
            let a = scratch.add(scratch.align_offset(64));
            (a, a.add(self.mc.next_multiple_of(MR) * kdim))
        };
        let mut buf = [0f32; MR * NR];
        for i0 in rows.clone().step_by(self.mc) {
            let mc = self.mc.min(rows.end - i0);
            let mcp = mc.next_multiple_of(MR);
            for c0 in (0..f.ci_g).step_by(self.cb) {
                let (k0, kb) = (c0 * kk, self.cb.min(f.ci_g - c0) * kk);
                // SAFETY: output channels `i0..i0 + mc` of the task's, steps `k0..k0 + kb`
                // into block `k0` of `a`; AVX2 + FMA.
                unsafe { self.pack_weights(wg, i0, mc, k0, kb, a.add(k0 * mcp)) };
            }
            for j0 in cols.clone().step_by(NC) {
                let nc = NC.min(cols.end - j0);
                for c0 in (0..f.ci_g).step_by(self.cb) {
                    let (k0, kb) = (c0 * kk, self.cb.min(f.ci_g - c0) * kk);
                    // SAFETY: positions `j0..j0 + nc` of the task's, channels `c0..c0 + kb / kk`
                    // into `b` (`cb · kk · NC` elements); AVX2 + FMA.
                    let ak = unsafe {
                        self.pack_positions(xg, j0, nc, c0, kb / kk, b);
                        a.add(k0 * mcp)
                    };
                    for jr in (0..nc).step_by(NR) {
                        let (j, nw) = (j0 + jr, NR.min(nc - jr));
                        // SAFETY: panel `jr / NR` of the packed positions.
                        let bp = unsafe { b.add(jr * kb) };
                        // Offsets of the tile's positions: one image's (a vector store) or several.
                        let whole = nw == NR && j % op + NR <= op;
                        let mut coff = [0usize; NR];
                        if !whole {
                            for (jj, c) in coff.iter_mut().enumerate().take(nw) {
                                *c = pos_off(j + jj);
                            }
                        }
                        for ir in (0..mc).step_by(MR) {
                            let (i, mw) = (i0 + ir, MR.min(mc - ir));
                            // SAFETY: channels `i..i + mw` of the packed weights and of the
                            // task's (disjoint from other tasks'), positions `j..j + nw` of it:
                            // `pos_off` maps them into `y`; a whole tile lies in one image's
                            // `op`; `tile` reads `kb` steps of both panels; AVX2 + FMA.
                            unsafe {
                                let ap = ak.add(ir * kb);
                                // Whole tile of 16 positions in one image: straight to `y`.
                                if mw == MR && whole {
                                    tile(kb, ap, bp, yg.add(ch_off(i) + pos_off(j)), op, k0 > 0);
                                    continue;
                                }
                                tile(kb, ap, bp, buf.as_mut_ptr(), NR, false);
                                if whole {
                                    let base = pos_off(j);
                                    coff.iter_mut().enumerate().for_each(|(jj, c)| *c = base + jj);
                                }
                                for ii in 0..mw {
                                    let (row, src) = (yg.add(ch_off(i + ii)), &buf[ii * NR..ii * NR + nw]);
                                    for (&c, &v) in coff[..nw].iter().zip(src) {
                                        let dst = row.add(c);
                                        *dst = if k0 > 0 { *dst + v } else { v };
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

impl Implicit {
    /// Runs task `t` of a transposed plan: all positions, input channels
    /// `t.o0..t.o1` of `dx`.
    ///
    /// # Safety
    /// As [`Implicit::run`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn run_trans(&self, t: Task, x: *const f32, w: *const f32, y: *mut f32, scratch: *mut f32) {
        let f = &self.f;
        let (op, ip, k) = (f.op(), f.ip(), f.kdim());
        let (xs, ys) = (f.groups * f.ci_g * ip, f.groups * f.co_g * op);
        // SAFETY: group `t.g < groups` of the tensors (this function's contract).
        let (xg, wg, yg) = unsafe { (x.add(t.g * f.ci_g * ip), w.add(t.g * f.co_g * k), y.add(t.g * f.co_g * op)) };
        let p = t.hi - t.lo;
        let kk = f.kk();
        // SAFETY: the scratch holds [`Self::scratch_len`] elements: 32 of slack
        // cover the alignment of `a` to 64 bytes, then the packed positions
        // (`p` rounded up to `MR`, `cb · kk` steps) and weights.
        let (a, b) = unsafe {
            let a = scratch.add(scratch.align_offset(64));
            (a, a.add(p.next_multiple_of(MR) * self.cb * kk))
        };
        let mut buf = [0f32; MR * NR];
        for j0 in (t.o0..t.o1).step_by(NC) {
            let nc = NC.min(t.o1 - j0);
            for c0 in (0..f.ci_g).step_by(self.cb) {
                let cn = self.cb.min(f.ci_g - c0);
                let (k0, kb) = (c0 * kk, cn * kk);
                // Step (c, tap) of input channel i is the data gradient's
                // w[c][i][kk − 1 − tap]; the panel's 16 channels are `16·kk`
                // contiguous values of `w` per `c`.
                for c in 0..cn {
                    // SAFETY: input channels `j0..j0 + nc <= t.o1` of the data gradient's
                    // weights for channel `c0 + c < ci_g`, their `kk` taps; the panel's
                    // `NR` columns of step rows `c · kk..(c + 1) · kk` in `b` (`cb · kk · NC`
                    // elements).
                    unsafe {
                        let src = wg.add((c0 + c) * f.co_g * kk + j0 * kk);
                        for q in (0..nc).step_by(NR) {
                            let (wd, d) = (NR.min(nc - q), b.add(q * kb + c * kk * NR));
                            if kk == 1 && wd == NR {
                                std::ptr::copy_nonoverlapping(src.add(q) as *const [f32; NR], d as *mut [f32; NR], 1);
                                continue;
                            }
                            for tt in 0..kk {
                                let (s, d) = (src.add(q * kk + kk - 1 - tt), d.add(tt * NR));
                                for jj in 0..NR {
                                    *d.add(jj) = if jj < wd { *s.add(jj * kk) } else { 0.0 };
                                }
                            }
                        }
                    }
                }
                // Positions: per tap, each row's input offset (or none: padding).
                for q in (0..p).step_by(MR) {
                    let wd = MR.min(p - q);
                    for tt in 0..kk {
                        let (ky, kx) = (tt / f.kw, tt % f.kw);
                        let (valid, off) = f.valid_cols(kx);
                        let mut offs = [None; MR];
                        for (r, o) in offs.iter_mut().enumerate().take(wd) {
                            let pos = t.lo + q + r;
                            let (img, pp) = (pos / op, pos % op);
                            let (oy, ox) = (pp / f.ow, pp % f.ow);
                            if let (Some(iy), true) = (f.in_row(oy, ky), valid.contains(&ox)) {
                                *o = Some(img * xs + iy * f.iw + (ox as isize + off) as usize);
                            }
                        }
                        for c in 0..cn {
                            // SAFETY: `offs` only holds input offsets inside the planes (`in_row`
                            // and `valid_cols`), of channel `c0 + c < ci_g`; row `q / MR` of the
                            // packed positions, step `c · kk + tt < kb`.
                            unsafe {
                                let (src, d) = (xg.add((c0 + c) * ip), a.add(q * kb + (c * kk + tt) * MR));
                                for (r, o) in offs.iter().enumerate() {
                                    *d.add(r) = o.map_or(0.0, |o| *src.add(o));
                                }
                            }
                        }
                    }
                }
                for jr in (0..nc).step_by(NR) {
                    let nw = NR.min(nc - jr);
                    for ir in (0..p).step_by(MR) {
                        // SAFETY: panels `ir / MR` and `jr / NR` of the packed blocks (`kb`
                        // steps each); positions `t.lo + ir + ii < t.hi` of the batch and
                        // channels `j0 + jr..+ nw` of the task's (disjoint from other tasks');
                        // AVX2 + FMA.
                        unsafe {
                            tile(kb, a.add(ir * kb), b.add(jr * kb), buf.as_mut_ptr(), NR, false);
                            for ii in 0..MR.min(p - ir) {
                                let pos = t.lo + ir + ii;
                                let row = yg.add((pos / op) * ys + pos % op + (j0 + jr) * op);
                                for (jj, &v) in buf[ii * NR..ii * NR + nw].iter().enumerate() {
                                    let dst = row.add(jj * op);
                                    *dst = if k0 > 0 { *dst + v } else { v };
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

impl<T: ConvElem> ConvKernel<T> {
    /// The implicit plan of a pass, when `T` is f32 and [`Implicit::new`] takes the shape.
    pub(super) fn implicit_plan(g: &Geo2, pass: Pass) -> Option<Implicit> {
        if TypeId::of::<T>() != TypeId::of::<f32>() {
            return None;
        }
        Implicit::new(g, pass)
    }

    /// Cuts the tasks of the implicit method: (group, block of positions of
    /// the batch, block of output channels), so the team has at least `want`.
    pub(super) fn cut_implicit(cx: &PlanCx<'_, '_>, im: &Implicit) -> Cut {
        let (g, parallel, want) = (&cx.g, cx.parallel, cx.want);
        let f = &im.f;
        let (p, m) = (f.n * f.op(), f.co_g);
        let threads = if parallel { want / 2 } else { 1 };
        let per_group = if parallel { want.div_ceil(f.groups) } else { 1 };
        // Blocks of positions first (each packed weight serves at least
        // MIN_POSITIONS of them), then of channels (at least MIN_BLOCK each:
        // each block packs the positions again), in whole panels, as even as
        // panels allow; with one block of positions, one channel block per
        // piece of the team (more blocks packed the positions more often:
        // 6-7% slower on ResNet's 14x14 and 7x7 layers at batch 1).
        let pb = if im.trans { 1 } else { per_group.min(p / MIN_POSITIONS).max(1) };
        let (pr, mr) = if im.trans { (MR, NR) } else { (NR, MR) };
        let mut mb = per_group.div_ceil(pb).min(m / MIN_BLOCK).max(1);
        if mb > threads && pb == 1 {
            mb = threads;
        }
        // Boundaries of `blocks` even blocks of `len` in panels of `r`.
        let cuts = |len: usize, blocks: usize, r: usize| {
            let panels = len.div_ceil(r);
            let blocks = blocks.min(panels).max(1);
            (0..=blocks).map(move |i| (panels * i / blocks * r).min(len)).collect::<Vec<_>>()
        };
        let (pc, mc) = (cuts(p, pb, pr), cuts(m, mb, mr));
        let mut tasks = Vec::new();
        for gi in 0..f.groups {
            for pw in pc.windows(2) {
                for mw in mc.windows(2) {
                    tasks.push(Task { n: 0, g: gi, lo: pw[0], hi: pw[1], o0: mw[0], o1: mw[1] });
                }
            }
        }
        Cut { tasks, chunks: vec![0, g.n], scratch: im.scratch_len() }
    }

    /// Runs task `t` of the implicit plan `im` with the scratch `io.col`.
    ///
    /// # Safety
    /// As [`Implicit::run`]; `T` is f32 (see [`ConvKernel::implicit_plan`]).
    pub(super) unsafe fn implicit_task(&self, im: &Implicit, t: Task, io: Io<T>) {
        let Io { x, w, y, col, .. } = io;
        let (src, dst) = if im.flipped { (y, x) } else { (x, y) };
        #[cfg(target_arch = "x86_64")]
        // SAFETY: this function's contract.
        unsafe {
            if im.trans {
                im.run_trans(t, src as *const f32, w as *const f32, dst as *mut f32, col as *mut f32);
            } else {
                im.run(t, src as *const f32, w as *const f32, dst as *mut f32, col as *mut f32);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (t, src, dst, w, col, im);
    }
}
