//! The forward pass of convolutions with few output positions per image
//! (`Im2colSplit::SharedColT`: batch 1, late layers, stride 2): float32 on
//! AVX-512.
//!
//! A GEMM over `49` positions vectorises badly along the positions (the
//! `gemm` crate's 64-row tile runs a quarter empty) and packing the weights
//! to vectorise along the output channels costs as much as the product. Here
//! the im2col matrix is written positions-major (`colᵀ`: one row of `kdim`
//! taps per position, [`im2col_t`]), so that each output is the dot product
//! of a weight row and a `colᵀ` row, both contiguous: a register tile of
//! [`OR`] output channels × [`PR`] positions keeps one 16-lane partial sum
//! per output, fed per 16 taps by `OR + PR` vector loads and `OR · PR` FMAs,
//! and adds its lanes once at the end. The weights are read where they are;
//! `colᵀ` (`op · kdim` values) stays in the level-2 cache for every tile.
//! Each output is summed in the same order whatever the thread count.

use std::any::TypeId;
use std::ops::Range;

use super::super::par::Simd;
use super::layout::{ConvElem, Geo2};

/// Output channels per register tile.
const OR: usize = 3;
/// Positions per register tile.
const PR: usize = 7;
/// Positions per image from which this method is not taken: the `gemm`
/// crate's 64-position tiles fill there (and at 16, 32 and 48 positions, its
/// narrower ones).
pub(super) const MAX_POSITIONS: usize = 64;

/// Whether a shared-matrix forward pass over `op` positions per image takes
/// this method: float32 on a CPU with AVX-512, fewer than [`MAX_POSITIONS`]
/// positions, not a whole number of 16-lane vectors.
pub(super) fn suits<T: ConvElem>(op: usize) -> bool {
    cfg!(target_arch = "x86_64")
        && TypeId::of::<T>() == TypeId::of::<f32>()
        && Simd::best() == Simd::Avx512
        && op < MAX_POSITIONS
        && !op.is_multiple_of(16)
}

/// Positions-major im2col: row `p - cols.start` of `dst` (`ld` apart) holds
/// the `kdim` taps of output position `p` of `cols` (input channel, then
/// kernel row, then kernel column, as the weight rows), 0 where the tap
/// falls in the padding.
///
/// # Safety
/// `x` holds the `ci_g` input planes of one group of one image; `dst` holds
/// `cols.len()` rows of `ld >= kdim` values; `cols` lies in `0..op`.
pub(super) unsafe fn im2col_t(g: &Geo2, x: *const f32, cols: Range<usize>, dst: *mut f32, ld: usize) {
    let (kk, ip) = (g.kk(), g.ip());
    for (pi, p) in cols.enumerate() {
        let (o, t) = (p / g.ow, p % g.ow);
        for c in 0..g.ci_g {
            for ki in 0..g.kh {
                let row = g.in_row(o, ki);
                for kj in 0..g.kw {
                    let (valid, off) = g.valid_cols(kj);
                    // SAFETY: tap `(ki, kj)` of channel `c` is element `c·kk + ki·kw + kj`
                    // of row `pi` (`< ld`); a valid tap (`in_row`, `valid_cols`) reads
                    // input column `t·sw + off >= 0` of row `ir` of plane `c` of `x`.
                    unsafe {
                        let v = match row {
                            Some(ir) if valid.contains(&t) => {
                                *x.offset((c * ip + ir * g.iw) as isize + (t * g.sw) as isize + off)
                            }
                            _ => 0.0,
                        };
                        *dst.add(pi * ld + c * kk + ki * g.kw + kj) = v;
                    }
                }
            }
        }
    }
}

/// The operands of a product `y[o][p] = Σ_r w[o][r] · colt[p][r]` over
/// positions `p` of `0..op`: weight rows `kdim` apart, `colᵀ` rows `ldc`
/// apart, output rows `op` apart.
#[cfg(target_arch = "x86_64")]
pub(super) struct Tiles {
    pub w: *const f32,
    pub kdim: usize,
    pub colt: *const f32,
    pub ldc: usize,
    pub y: *mut f32,
    pub op: usize,
}

#[cfg(target_arch = "x86_64")]
impl Tiles {
    /// The product's output channels `rows`.
    ///
    /// # Safety
    /// `w` holds the weight rows of `rows`, `colt` `op` rows of `kdim` values
    /// and `y` the output rows of `rows`, `op` values each, written by no one
    /// else; the CPU has AVX-512 F and VL.
    pub(super) unsafe fn forward(&self, rows: Range<usize>) {
        let mut o = rows.start;
        while o < rows.end {
            let or = (rows.end - o).min(OR);
            let mut p = 0;
            while p < self.op {
                let pr = (self.op - p).min(PR);
                // SAFETY: channels `o..o + or` and positions `p..p + pr` lie in the
                // ranges of this function's contract.
                unsafe { self.dispatch(or, pr, o, p) };
                p += pr;
            }
            o += or;
        }
    }

    /// The tile of `or ≤ OR` channels from `o` and `pr ≤ PR` positions from `p`.
    ///
    /// # Safety
    /// As [`Tiles::forward`], for these channels and positions.
    #[inline]
    unsafe fn dispatch(&self, or: usize, pr: usize, o: usize, p: usize) {
        type Tile = unsafe fn(&Tiles, usize, usize);
        macro_rules! row {
            ($r:expr) => {
                match pr {
                    1 => Self::tile::<$r, 1> as Tile,
                    2 => Self::tile::<$r, 2>,
                    3 => Self::tile::<$r, 3>,
                    4 => Self::tile::<$r, 4>,
                    5 => Self::tile::<$r, 5>,
                    6 => Self::tile::<$r, 6>,
                    _ => Self::tile::<$r, PR>,
                }
            };
        }
        let tile = match or {
            1 => row!(1),
            2 => row!(2),
            _ => row!(OR),
        };
        // SAFETY: this function's contract.
        unsafe { tile(self, o, p) }
    }

    /// One `R × P` register tile (see the module doc).
    ///
    /// VL as well as F: with F alone LLVM zeroes the accumulators through
    /// VEX-encoded `xmm` registers, so it keeps them in `zmm0`-`zmm15` and
    /// spills six of the 21 in the loop.
    ///
    /// # Safety
    /// As [`Self::dispatch`].
    #[target_feature(enable = "avx512f,avx512vl")]
    unsafe fn tile<const R: usize, const P: usize>(&self, o: usize, p: usize) {
        use std::arch::x86_64::*;
        // SAFETY: rows `o..o + R` of `w` and `y`, rows `p..p + P` of `colᵀ`, and
        // taps `0..kdim` of each (the caller's contract); the tail is masked.
        unsafe {
            let w: [*const f32; R] = std::array::from_fn(|i| self.w.add((o + i) * self.kdim));
            let c: [*const f32; P] = std::array::from_fn(|j| self.colt.add((p + j) * self.ldc));
            let mut acc = [[_mm512_setzero_ps(); P]; R];
            // One loop body for every 16 taps, the last masked: a separate tail
            // after the loop makes LLVM spill the accumulators.
            let tail = self.kdim % 16;
            let last = if tail == 0 { 0xffff } else { ((1u32 << tail) - 1) as u16 };
            let steps = self.kdim.div_ceil(16);
            for s in 0..steps {
                let k = s * 16;
                let m = if s + 1 == steps { last } else { 0xffff };
                let wv: [__m512; R] = std::array::from_fn(|i| _mm512_maskz_loadu_ps(m, w[i].add(k)));
                for j in 0..P {
                    let cv = _mm512_maskz_loadu_ps(m, c[j].add(k));
                    for i in 0..R {
                        acc[i][j] = _mm512_fmadd_ps(wv[i], cv, acc[i][j]);
                    }
                }
            }
            for (i, row) in acc.iter().enumerate() {
                for (j, v) in row.iter().enumerate() {
                    *self.y.add((o + i) * self.op + p + j) = _mm512_reduce_add_ps(*v);
                }
            }
        }
    }
}
