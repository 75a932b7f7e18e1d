//! The weight gradient of the implicit-GEMM convolution ([`super::implicit`])
//! on AVX2 + FMA: `dw[o][k] = Σ_p dy[o][p] · col[k][p]` over the positions
//! `p` of the batch, without an im2col matrix.
//!
//! The reduction runs over positions, the contiguous dimension of both
//! operands, so both are packed transposed, a block of positions at a time:
//! the output gradient into panels of [`MR`] channels × positions, and the
//! positions into panels of [`NR`] steps of `k` × positions, by packing them
//! as the forward pass does (16 positions × `k`, the im2col by masked loads)
//! and transposing 16 × 16 blocks in registers. The 6 × 16 tile then adds
//! each block's products into `dw`.
//!
//! Tasks are chunks of the batch's positions (each summed into its own
//! partial, reduced in chunk order at the end) and, when the positions are
//! few, blocks of input channels; each weight is summed in an order fixed at
//! build time, whatever the thread count.

use super::implicit::Implicit;
use super::layout::ConvElem;
use super::{ConvKernel, Cut, Io, PlanCx, Task};
#[cfg(target_arch = "x86_64")]
use crate::kernels::tile::tile;
use crate::kernels::tile::{MR, NR};

/// Positions per packed block, at most.
const NCW: usize = 256;
/// Packed output-gradient elements per block (512 KiB): fewer positions per
/// block for layers of more than 512 output channels (each block reads and
/// writes the task's weights once).
const A_BLOCK: usize = 1 << 17;
/// Positions per chunk of the batch, at least (shorter sums pay more for
/// the partials and the tile's start).
const MIN_CHUNK: usize = 512;

impl Implicit {
    /// Positions per packed block.
    fn wgrad_block(&self) -> usize {
        let mp = self.f.co_g.next_multiple_of(MR);
        (A_BLOCK / mp / NR * NR).clamp(4 * NR, NCW)
    }

    /// Scratch elements of a weight-gradient task: the packed output
    /// gradient, the packed positions and their transpose, and alignment slack.
    pub(crate) fn wgrad_scratch_len(&self) -> usize {
        let (nc, kb) = (self.wgrad_block(), self.cb * self.f.kk());
        self.f.co_g.next_multiple_of(MR) * nc + 2 * nc * kb.next_multiple_of(NR) + 32
    }

    /// Runs the weight gradient of positions `span` (of the whole batch),
    /// input channels `t.lo..t.hi` of group `t.g`, into `dw` (overwritten).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `x`, `dy`, `dw` hold the whole tensors;
    /// `scratch` holds [`Self::wgrad_scratch_len`] elements; tasks write
    /// disjoint weights of `dw`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn run_weights(
        &self,
        t: Task,
        span: std::ops::Range<usize>,
        x: *const f32,
        dy: *const f32,
        dw: *mut f32,
        scratch: *mut f32,
    ) {
        let f = &self.f;
        let (op, kk, kdim, m) = (f.op(), f.kk(), f.kdim(), f.co_g);
        // SAFETY: group `t.g < groups` of the tensors (this function's contract).
        let (xg, yg, wg) = unsafe { (x.add(t.g * f.ci_g * f.ip()), dy.add(t.g * m * op), dw.add(t.g * m * kdim)) };
        let ys = f.groups * m * op;
        let ncw = self.wgrad_block();
        let kbp = (self.cb * kk).next_multiple_of(NR);
        // SAFETY: the scratch holds [`Self::wgrad_scratch_len`] elements: 32 of
        // slack cover the alignment of `a` to 64 bytes, then the packed gradient, the packed
        // positions and their transpose.
        let (a, packed, bt) = unsafe {
            let a = scratch.add(scratch.align_offset(64));
            let packed = a.add(m.next_multiple_of(MR) * ncw);
            (a, packed, packed.add(ncw * kbp))
        };
        let mut buf = [0f32; MR * NR];
        for j0 in span.clone().step_by(ncw) {
            let nc = ncw.min(span.end - j0);
            let first = j0 == span.start;
            // SAFETY: positions `j0..j0 + nc` of `span` (inside the batch), into `a`'s
            // `co_g.next_multiple_of(MR) · ncw` elements.
            unsafe { self.pack_gradient(yg, ys, j0, nc, a) };
            for c0 in (t.lo..t.hi).step_by(self.cb) {
                let (k0, kb) = (c0 * kk, self.cb.min(t.hi - c0) * kk);
                // SAFETY: channels `c0..c0 + kb / kk <= t.hi` of the group, positions as
                // above, into `packed` (`ncw · kbp` elements) and its transpose `bt`;
                // AVX2 + FMA (this function's contract).
                unsafe {
                    self.pack_positions(xg, j0, nc, c0, kb / kk, packed);
                    transpose_panels(packed, nc, kb, bt);
                }
                for kq in (0..kb).step_by(NR) {
                    // SAFETY: step group `kq < kb` of `bt`, whose groups are `nc` rounded up
                    // to `NR` rows apart.
                    let (nw, bp) = (NR.min(kb - kq), unsafe { bt.add(kq * nc.next_multiple_of(NR)) });
                    for ir in (0..m).step_by(MR) {
                        // SAFETY: channels `ir..ir + mw <= m` of the packed gradient and of the
                        // group's weights, columns `k0 + kq..k0 + kq + nw` of the task's channels
                        // (disjoint from other tasks'); `tile` reads `nc` steps of both panels,
                        // writes `MR × NR` (full tile) or the local buffer, AVX2 + FMA.
                        unsafe {
                            let (mw, ap, dst) = (MR.min(m - ir), a.add(ir * nc), wg.add(ir * kdim + k0 + kq));
                            if mw == MR && nw == NR {
                                tile(nc, ap, bp, dst, kdim, !first);
                                continue;
                            }
                            tile(nc, ap, bp, buf.as_mut_ptr(), NR, false);
                            for ii in 0..mw {
                                for (jj, &v) in buf[ii * NR..ii * NR + nw].iter().enumerate() {
                                    let d = dst.add(ii * kdim + jj);
                                    *d = if first { v } else { *d + v };
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Packs the output gradient of positions `p0..p0 + nc` (of the whole
    /// batch, images `ys` apart) for every output channel of the group into
    /// panels of [`MR`] channels, `nc` groups of `MR` values each, zeros past
    /// the last channel.
    ///
    /// # Safety
    /// `dy`: the group's output planes of image 0; `dst` valid for
    /// `co_g.next_multiple_of(MR) · nc` writes.
    #[inline(always)]
    unsafe fn pack_gradient(&self, dy: *const f32, ys: usize, p0: usize, nc: usize, dst: *mut f32) {
        let (op, m) = (self.f.op(), self.f.co_g);
        for ir in (0..m).step_by(MR) {
            // SAFETY: panel `ir / MR` of `dst`, its `nc` groups of `MR`
            // (`co_g.next_multiple_of(MR) · nc` writes: this function's contract).
            let pa = unsafe { dst.add(ir * nc) };
            for r in 0..MR {
                let o = ir + r;
                if o >= m {
                    // SAFETY: as above.
                    (0..nc).for_each(|i| unsafe { *pa.add(i * MR + r) = 0.0 });
                    continue;
                }
                // Runs of positions within one image.
                // SAFETY: as above; position `p < p0 + nc` is image `img`'s position `pos`
                // (the batch's positions, this function's contract), run of `len`
                // positions within the image.
                unsafe {
                    let (mut p, mut d) = (p0, pa.add(r));
                    while p < p0 + nc {
                        let (img, pos) = (p / op, p % op);
                        let len = (op - pos).min(p0 + nc - p);
                        let src = dy.add(img * ys + o * op + pos);
                        for i in 0..len {
                            *d.add(i * MR) = *src.add(i);
                        }
                        (p, d) = (p + len, d.add(len * MR));
                    }
                }
            }
        }
    }
}

/// Transposes the panels `pack_positions` wrote (per 16 positions, `kb`
/// rows of 16) into panels of 16 steps of `k` (per step group, `nc` rows of
/// 16 values, one row per position, `nc` rounded up to 16 rows apart).
///
/// # Safety
/// AVX2; `src` holds `nc.next_multiple_of(16) · kb` values, `dst`
/// `kb.next_multiple_of(16) · nc.next_multiple_of(16)`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_panels(src: *const f32, nc: usize, kb: usize, dst: *mut f32) {
    use std::arch::x86_64::*;
    let ncp = nc.next_multiple_of(NR);
    for q in (0..ncp).step_by(NR) {
        // SAFETY: panel `q / NR` of `src` (`ncp · kb` values), step rows `kq + k <
        // kb` of it, and its `NR · NR` block of `dst`; AVX2 (this function's
        // contract).
        unsafe {
            let panel = src.add(q * kb);
            for kq in (0..kb).step_by(NR) {
                let rows = NR.min(kb - kq);
                let out = dst.add(kq * ncp + q * NR);
                // Four 8 × 8 blocks: steps kq + 8g.., positions q + 8h...
                for g in 0..2 {
                    for h in 0..2 {
                        let r: [__m256; 8] = std::array::from_fn(|i| {
                            let k = 8 * g + i;
                            if k < rows {
                                _mm256_loadu_ps(panel.add((kq + k) * NR + 8 * h))
                            } else {
                                _mm256_setzero_ps()
                            }
                        });
                        let c = transpose8(r);
                        for (j, v) in c.iter().enumerate() {
                            _mm256_storeu_ps(out.add((8 * h + j) * NR + 8 * g), *v);
                        }
                    }
                }
            }
        }
    }
}

/// The transpose of the 8 × 8 block whose rows are `r`: row `j` of the
/// result holds element `j` of every row.
///
/// # Safety
/// The CPU has AVX.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn transpose8(r: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    // SAFETY: the caller runs AVX (this function's contract); register
    // shuffles only.
    unsafe {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }
}

impl<T: ConvElem> ConvKernel<T> {
    /// Plans the implicit weight gradient: tasks are (chunk of the batch's
    /// positions, group, block of input channels), chunks first (each reads
    /// its share of `x` and `dy` once), channel blocks where the positions
    /// are too few for chunks of [`MIN_CHUNK`].
    pub(super) fn cut_implicit_weights(cx: &PlanCx<'_, '_>, im: &Implicit) -> Cut {
        let (g, parallel, want) = (&cx.g, cx.parallel, cx.want);
        let p = g.n * g.op();
        let per_group = if parallel { want.div_ceil(g.groups) } else { 1 };
        let chunks = per_group.min(p / MIN_CHUNK).max(1);
        let blocks = per_group.div_ceil(chunks).min(g.ci_g).max(1);
        // Chunk boundaries in whole panels of positions.
        let panels = p.div_ceil(NR);
        let bounds: Vec<usize> = (0..=chunks).map(|i| (panels * i / chunks * NR).min(p)).collect();
        let cut = |i: usize| g.ci_g * i / blocks;
        let mut tasks = Vec::new();
        for n in 0..chunks {
            for gi in 0..g.groups {
                for b in 0..blocks {
                    tasks.push(Task { n, g: gi, lo: cut(b), hi: cut(b + 1), o0: 0, o1: g.co_g });
                }
            }
        }
        Cut { tasks, chunks: bounds, scratch: im.wgrad_scratch_len() }
    }

    /// Runs task `t` of the implicit weight gradient `im` into `io.wpart`
    /// (the weights or chunk `t.n`'s partial), with the scratch `io.col`.
    ///
    /// # Safety
    /// As [`Implicit::run_weights`]; `T` is f32 (see [`ConvKernel::implicit_plan`]).
    pub(super) unsafe fn implicit_weights_task(&self, im: &Implicit, t: Task, io: Io<T>) {
        let Io { x, y, col, wpart: dw, .. } = io;
        let span = self.chunks[t.n]..self.chunks[t.n + 1];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: this function's contract, the task's positions `span` of chunk
        // `t.n`.
        unsafe {
            im.run_weights(t, span, x as *const f32, y as *const f32, dw as *mut f32, col as *mut f32)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (t, span, x, y, col, dw, im);
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::super::super::par::Simd;
    use super::super::super::testutil::assert_close;
    use super::super::tests::{inputs, Case, Inputs};
    use super::super::Task;
    use super::Implicit;

    /// Weight-gradient cases: partial tiles of channels and of steps of `k`,
    /// groups, asymmetric and large padding, dilation, positions spanning
    /// images, a 1-d plane, a stem-like layer of three input channels, many
    /// input channels (several blocks of `k`), many output channels
    /// (shorter position blocks), and pointwise layers of small planes.
    const CASES: [(Case, usize); 11] = [
        ((5, 1, 24, 20, 7, 7, 1, 1, [0, 0, 0, 0], [1, 1]), 1),
        ((3, 2, 20, 18, 5, 9, 1, 1, [0, 0, 0, 0], [1, 1]), 1),
        ((2, 1, 16, 24, 20, 20, 3, 3, [1, 1, 1, 1], [1, 1]), 1),
        ((3, 2, 5, 17, 9, 11, 3, 3, [1, 0, 2, 1], [1, 1]), 1),
        ((2, 1, 20, 16, 12, 13, 5, 5, [2, 2, 2, 2], [2, 2]), 1),
        ((5, 1, 3, 20, 7, 7, 3, 3, [1, 1, 1, 1], [1, 1]), 1),
        ((4, 1, 8, 32, 1, 40, 1, 5, [0, 2, 0, 2], [1, 1]), 1),
        ((1, 1, 3, 20, 40, 37, 7, 7, [3, 3, 2, 2], [1, 1]), 2),
        ((4, 1, 300, 20, 6, 7, 3, 3, [1, 1, 1, 1], [1, 1]), 1),
        ((2, 1, 40, 300, 9, 9, 3, 3, [1, 1, 1, 1], [1, 1]), 1),
        ((3, 2, 5, 17, 17, 19, 3, 3, [1, 0, 2, 1], [1, 1]), 2),
    ];

    /// Runs the weight gradient of each case directly, the positions cut
    /// into `chunks` partials (summed here) and the input channels into two
    /// blocks, against the f64 loop.
    #[test]
    fn implicit_weight_gradients_match_a_naive_loop() {
        if Simd::best() < Simd::Avx2 {
            return;
        }
        for (i, (c, s)) in CASES.into_iter().enumerate() {
            let Inputs { g, want: [_, _, want_dw], x, dy, .. } = inputs(c, s, 900 + i as u64);
            let im = Implicit::weights_for_tests(&g).unwrap_or_else(|| panic!("no implicit plan for {c:?}"));
            let p = g.n * g.op();
            for chunks in [1, 3] {
                let mut dw = vec![0f32; want_dw.len()];
                let mut scratch = vec![0f32; im.wgrad_scratch_len()];
                for ch in 0..chunks {
                    let span = p * ch / chunks..p * (ch + 1) / chunks;
                    let mut part = vec![f32::NAN; want_dw.len()];
                    for gi in 0..g.groups {
                        let half = g.ci_g / 2;
                        for (lo, hi) in [(0, half), (half, g.ci_g)] {
                            let t = Task { n: ch, g: gi, lo, hi, o0: 0, o1: g.co_g };
                            // SAFETY: the CPU has AVX2 and FMA (checked above); the
                            // slices hold the whole tensors; blocks write disjoint weights.
                            unsafe {
                                im.run_weights(
                                    t,
                                    span.clone(),
                                    x.as_ptr(),
                                    dy.as_ptr(),
                                    part.as_mut_ptr(),
                                    scratch.as_mut_ptr(),
                                )
                            };
                        }
                    }
                    dw.iter_mut().zip(&part).for_each(|(d, p)| *d += p);
                }
                let got: Vec<f64> = dw.iter().map(|&a| a as f64).collect();
                assert_close(&got, &want_dw, 1e-3);
            }
        }
    }
}
