//! A packed f32 GEMM in BLIS's loop order: a block of `kc` rows of the rhs
//! is packed into panels of `NR` columns, a block of `mc × kc` of the lhs
//! into panels of `MR` rows, and an `MR × NR` register tile sums one lhs
//! panel times one rhs panel while one of the two stays in L1.
//!
//! Two register tiles ([`Tiling`]): the 6 × 16 tile of eight-lane AVX2
//! vectors ([`Avx2Tile`], the rhs panel in L1 while the lhs panels stream
//! past it) and a 6 × 64 tile of sixteen-lane AVX-512 vectors
//! ([`Avx512Tile`], the lhs panel in L1 while the rhs panels stream past
//! it); the loop nests, the packing and the stores are the same code for
//! both.
//!
//! Where the lhs panel stays in L1, the rhs panels of a plain matrix of
//! contiguous rows are packed by the first row of tiles of each block as
//! they read them (`tile::sums_packing`), the loads overlapping the FMAs
//! instead of a packing pass waiting on level 3.
//!
//! Operands and results are matrices of any strides, or *folded* ones
//! ([`Fold`]): an axis that runs over the positions of several images lying
//! apart in memory (a pointwise convolution's batch, `conv/folded.rs`),
//! which the packing reads run by run within an image and the tiles store
//! image by image.
//!
//! `gemm`'s AVX2 path leaves half the FMA peak behind on a Zen 3 from
//! 1024-sized products on (46 GFLOP/s of 89 on one core); on an Ice Lake
//! its AVX-512 path packs a transposed lhs slowly (the weight gradients ran
//! at 36-45% of the peak in the gpt example's step). See BENCHMARKS.md.
//!
//! Values: each result element is summed over `k` in order within a block
//! of [`Blocking::kc`] (a function of `k` and the tiling alone), then the
//! blocks are added to the result in order. The thread split, `mc` and `nc`
//! change which elements a call computes, never how, so a product gives the
//! same bits on one thread or many. Padding rows and columns of the panels
//! are zeros and are never stored.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::super::tile::{sums_of, sums_packing, Lanes};

/// Values the packing buffers are aligned to (64 bytes: a cache line).
const ALIGN: usize = 16;

/// The register tile a product runs, chosen when its kernel is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tiling {
    /// 6 × 16 of AVX2 + FMA (any x86-64-v3 CPU).
    Avx2,
    /// 6 × 64 of AVX-512F.
    Avx512,
}

/// One register tile's shape, blocking and kernel.
trait Tile {
    /// Rows of a tile (the lhs panel's width).
    const MR: usize;
    /// Columns of a tile (the rhs panel's width).
    const NR: usize;
    /// Largest depth of a block (an rhs panel of `NR × KC` values stays in L1).
    const KC: usize;
    /// Most values of a packed lhs block.
    const MC_VALUES: usize;
    /// Most values of a packed rhs block.
    const NC_VALUES: usize;
    /// The loop order: an lhs panel stays in L1 while the rhs panels of a
    /// block in level 2 stream past it (BLIS's order with the operands'
    /// roles swapped), else an rhs panel stays in L1 while the lhs panels of a
    /// block in level 2 stream past it.
    const A_IN_L1: bool;

    /// `s = beta · Σ_p a[p] ⊗ b[p]` over `kb` steps of an lhs panel and an
    /// rhs panel, stored as `out` says.
    ///
    /// # Safety
    /// The CPU runs the tile's instructions; the panels hold `kb` steps;
    /// `out`'s elements are valid and this call's alone, and so are its
    /// addends' (those not null).
    unsafe fn tile(kb: usize, a: *const f32, b: *const f32, out: Out);

    /// [`Tile::tile`] reading the rhs panel from its matrix (step `p` at
    /// `src.0 + p · src.1`, `NR` contiguous values) and packing it into `b`:
    /// as it goes where the tile has a kernel for it ([`sums_packing`]),
    /// else a copy first.
    ///
    /// # Safety
    /// As [`Tile::tile`] and [`sums_packing`].
    unsafe fn tile_packing(kb: usize, a: *const f32, src: (*const f32, isize), b: *mut f32, out: Out) {
        // SAFETY: the panel's `kb` rows of `NR` values into `b` (contract), then the tile.
        unsafe {
            for p in 0..kb {
                std::ptr::copy_nonoverlapping(src.0.offset(p as isize * src.1), b.add(p * Self::NR), Self::NR);
            }
            Self::tile(kb, a, b, out)
        }
    }

    /// [`panel_sums`] over this tile's rhs panels (`NR` columns wide).
    ///
    /// # Safety
    /// As [`panel_sums`].
    unsafe fn column_sums(kb: usize, nb: usize, panels: *const f32, sums: *mut f32, first: bool);
}

/// Where a tile's sums go: the `mr × nr` corner of the tile at `y` (row
/// stride `rs`, column stride `cs`, its columns folded as `cols` says),
/// stored as `store` says after a product by `beta`, then `add`'s addends
/// added (the tile's own: `bias` at its first column, `residual` at its
/// first element, with `y`'s layout).
#[derive(Clone, Copy, Debug)]
struct Out {
    y: *mut f32,
    rs: isize,
    cs: isize,
    cols: Fold,
    mr: usize,
    nr: usize,
    store: Store,
    beta: f32,
    add: Addends,
}

/// The AVX2 + FMA tile of `kernels/tile` (6 × 16, shared with the
/// implicit-GEMM convolutions): its rhs panel (16 × 256 values, 16 KiB, half
/// of an L1) stays in L1 while the lhs panels of a block in level 2 stream
/// past it.
struct Avx2Tile;

impl Tile for Avx2Tile {
    const MR: usize = super::super::tile::MR;
    const NR: usize = super::super::tile::NR;
    const KC: usize = 256;
    /// 192 KiB: within a 512 KiB level 2 beside the rhs panels streaming through it.
    const MC_VALUES: usize = 48 * 1024;
    /// 4 MiB: 4096 columns at a depth of 256, in level 3.
    const NC_VALUES: usize = 1024 * 1024;
    const A_IN_L1: bool = false;

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile(kb: usize, a: *const f32, b: *const f32, out: Out) {
        // SAFETY: the trait's contract; AVX2 and FMA are this function's features.
        unsafe { run_tile::<__m256, { Self::MR }, 2>(kb, a, b, out) }
    }

    #[inline(always)]
    unsafe fn column_sums(kb: usize, nb: usize, panels: *const f32, sums: *mut f32, first: bool) {
        // SAFETY: the trait's contract.
        unsafe { panel_sums::<{ Self::NR }>(kb, nb, panels, sums, first) }
    }
}

/// The AVX-512 tile: 6 rows × 64 columns, 24 accumulators of sixteen lanes.
/// Per step four vector loads of the rhs panel and six broadcasts of the lhs
/// panel feed 24 FMAs (10 loads for 24 FMAs, as `gemm`'s 64 × 6 tile),
/// which keeps both of an Intel core's 512-bit FMA pipes busy. The lhs panel
/// (6 × 384 values, 9 KiB) stays in L1 while the rhs panels of a block in
/// level 2 stream past it (BLIS's Skylake-X order, the operands' roles
/// swapped). A 12 × 32 tile (14 loads for 24 FMAs) measured 0.9-1.05x of it
/// on an Ice Lake.
struct Avx512Tile;

impl Tile for Avx512Tile {
    const MR: usize = 6;
    const NR: usize = 64;
    const KC: usize = 384;
    /// 4 MiB: the lhs block in level 3.
    const MC_VALUES: usize = 1024 * 1024;
    /// 576 KiB: the rhs block in a 1.25 MiB level 2.
    const NC_VALUES: usize = 384 * 384;
    const A_IN_L1: bool = true;

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn tile(kb: usize, a: *const f32, b: *const f32, out: Out) {
        // SAFETY: the trait's contract; AVX-512F is this function's feature.
        unsafe { run_tile::<__m512, { Self::MR }, 4>(kb, a, b, out) }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn tile_packing(kb: usize, a: *const f32, src: (*const f32, isize), b: *mut f32, out: Out) {
        // SAFETY: the trait's contract; AVX-512F is this function's feature.
        unsafe {
            let acc = sums_packing::<__m512, { Self::MR }, 4>(kb, a, src, b, PREFETCH);
            store_tile(&acc, out);
        }
    }

    #[inline(always)]
    unsafe fn column_sums(kb: usize, nb: usize, panels: *const f32, sums: *mut f32, first: bool) {
        // SAFETY: the trait's contract.
        unsafe { panel_sums::<{ Self::NR }>(kb, nb, panels, sums, first) }
    }
}

/// A tile of `R` rows and `C` vectors of `V` columns: its full rows
/// prefetched, its sums ([`sums_of`]), then stored ([`store_tile`]).
///
/// # Safety
/// As [`Tile::tile`], the panels `R` and `C · V::N` wide.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn run_tile<V: Lanes, const R: usize, const C: usize>(kb: usize, a: *const f32, b: *const f32, out: Out) {
    let w = C * V::N;
    if out.mr == R && out.nr == w && out.cs == 1 && out.cols.is_plain() {
        for i in 0..R {
            for line in (0..w).step_by(16) {
                // SAFETY: a line of row `i` of the tile, a hint only.
                unsafe {
                    let p = out.y.offset(i as isize * out.rs).add(line);
                    _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
                }
            }
        }
    }
    // SAFETY: steps `0..kb` of both panels, then the tile (contract).
    unsafe {
        let acc = sums_of::<V, R, C>(kb, a, b);
        store_tile(&acc, out);
    }
}

/// Steps ahead of a tile that packs a panel from strided rows, prefetched
/// ([`sums_packing`]): 4 to 24 measured alike, none 3-4% slower.
const PREFETCH: isize = 12;

/// Block sizes of one product, fixed when its kernel is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Blocking {
    /// The register tile.
    pub tiling: Tiling,
    /// Rows of a packed lhs block (a multiple of the tile's rows).
    pub mc: usize,
    /// Depth of a block: with the tiling, the only choice that changes the values.
    pub kc: usize,
    /// Columns of a packed rhs block (a multiple of the tile's columns).
    pub nc: usize,
}

impl Blocking {
    /// The blocks of an `m × k` times `k × n` product on `tiling`: `kc` cuts
    /// `k` into equal blocks of at most the tile's `KC` (a depth up to 1.25
    /// `KC` is one block), `mc` and `nc` cut `m` and `n` evenly within their
    /// bounds.
    pub(crate) fn new(tiling: Tiling, m: usize, n: usize, k: usize) -> Blocking {
        match tiling {
            Tiling::Avx2 => Self::of::<Avx2Tile>(tiling, m, n, k),
            Tiling::Avx512 => Self::of::<Avx512Tile>(tiling, m, n, k),
        }
    }

    /// Whether a product of depth `k` is one block deep on `tiling` (each
    /// result tile stored once, with its addends).
    pub(crate) fn one_depth_block(tiling: Tiling, k: usize) -> bool {
        match tiling {
            Tiling::Avx2 => Self::one_block::<Avx2Tile>(k),
            Tiling::Avx512 => Self::one_block::<Avx512Tile>(k),
        }
    }

    /// A depth up to 1.25 `T::KC` is one block.
    fn one_block<T: Tile>(k: usize) -> bool {
        k <= T::KC + T::KC / 4
    }

    fn of<T: Tile>(tiling: Tiling, m: usize, n: usize, k: usize) -> Blocking {
        let k = k.max(1);
        let kc = if Self::one_block::<T>(k) { k } else { k.div_ceil(k.div_ceil(T::KC)) };
        let mc_max = (T::MC_VALUES / kc / T::MR).max(1) * T::MR;
        let m = m.max(1);
        let mc = m.div_ceil(m.div_ceil(mc_max)).next_multiple_of(T::MR);
        let n = n.max(1);
        let nc_max = (T::NC_VALUES / kc / T::NR).max(1) * T::NR;
        let nc = n.div_ceil(n.div_ceil(nc_max)).next_multiple_of(T::NR);
        Blocking { tiling, mc, kc, nc }
    }

    /// f32 values of packing buffer one call needs ([`gemm`]'s `pack`).
    pub(crate) fn pack_len(&self) -> Option<usize> {
        let a = self.mc.checked_mul(self.kc)?.checked_next_multiple_of(ALIGN)?;
        let b = self.nc.checked_mul(self.kc)?;
        a.checked_add(b)?.checked_add(ALIGN)
    }
}

/// How a tile's sums reach the result: `y = s` (the first block of a
/// product that does not read `dst`), `y = alpha · y + s` (the first block
/// of one that does) or `y = y + s` (every later block), where `s` is the
/// tile's sum times `beta`.
#[derive(Clone, Copy, Debug)]
enum Store {
    Overwrite,
    Scale(f32),
    Add,
}

/// One element's store (the tile's vector stores compute the same: a product,
/// then a sum, never fused).
#[inline(always)]
fn store_one(y: f32, s: f32, store: Store) -> f32 {
    match store {
        Store::Overwrite => s,
        Store::Scale(alpha) => alpha * y + s,
        Store::Add => y + s,
    }
}

/// What is added to the product after its last block, while its tiles are
/// in registers (`MatMulAdd`: the values of the product, then `+ bias`,
/// then `+ residual`, as separate adds would give them).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Addends {
    /// The row vector added to every result row (its element for column 0 of
    /// the call), or null.
    pub bias: *const f32,
    /// The tensor of the result's layout added after the bias (its element
    /// `(0, 0)`, at `dst`'s strides), or null.
    pub residual: *const f32,
}

impl Addends {
    /// Nothing added.
    pub(crate) const NONE: Addends = Addends { bias: std::ptr::null(), residual: std::ptr::null() };

    /// The addends of the tile at column `c` and element offset `at` (null ones stay null).
    #[inline(always)]
    fn at(self, c: isize, at: isize) -> Addends {
        let shift = |p: *const f32, by: isize| if p.is_null() { p } else { p.wrapping_offset(by) };
        Addends { bias: shift(self.bias, c), residual: shift(self.residual, at) }
    }
}

/// An axis that runs over several images of `len` positions each (a batch
/// folded into the positions of a pointwise convolution): index `i` is
/// position `(phase + i) % len` of image `(phase + i) / len`, the images
/// `jump` elements apart, each position at the axis's stride from the one
/// before. [`Fold::NONE`]: a plain axis (one image, never ending).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fold {
    /// Positions per image (`usize::MAX`: a plain axis).
    pub len: usize,
    /// Elements from one image's first position to the next image's.
    pub jump: isize,
    /// Index 0's position in its image (below `len`).
    pub phase: usize,
}

impl Fold {
    /// A plain axis.
    pub(crate) const NONE: Fold = Fold { len: usize::MAX, jump: 0, phase: 0 };

    /// Images of `len` positions, `jump` elements apart, index 0 the first
    /// image's first position.
    pub(crate) fn images(len: usize, jump: isize) -> Fold {
        Fold { len: len.max(1), jump, phase: 0 }
    }

    /// Whether the axis is plain.
    #[inline(always)]
    pub(crate) fn is_plain(&self) -> bool {
        self.len == usize::MAX
    }

    /// Index `i`'s element offset from index 0's, the positions `stride` apart.
    #[inline(always)]
    pub(crate) fn offset(&self, i: usize, stride: isize) -> isize {
        if self.is_plain() {
            return i as isize * stride;
        }
        let q = self.phase + i;
        (q / self.len) as isize * self.jump + ((q % self.len) as isize - self.phase as isize) * stride
    }

    /// The axis seen from index `i` on (a block of it starting there).
    #[inline(always)]
    pub(crate) fn from(&self, i: usize) -> Fold {
        if self.is_plain() {
            return *self;
        }
        Fold { phase: (self.phase + i) % self.len, ..*self }
    }

    /// Indices from 0 on in index 0's image, at most `max`.
    #[inline(always)]
    fn first_run(&self, max: usize) -> usize {
        if self.is_plain() {
            max
        } else {
            (self.len - self.phase).min(max)
        }
    }

    /// The runs of indices `0..n` that lie in one image each, in order, as
    /// `(i, run, offset)`: `run` indices from `i`, index `i` at element offset
    /// `offset` from index 0's (the positions `stride` apart). An iterator,
    /// not a closure, so its loops compile inside the callers' SIMD features.
    #[inline(always)]
    fn runs(&self, n: usize, stride: isize) -> Runs {
        Runs { fold: *self, n, stride, i: 0, base: 0, run: self.first_run(n) }
    }
}

/// [`Fold::runs`]' iterator.
struct Runs {
    fold: Fold,
    n: usize,
    stride: isize,
    i: usize,
    base: isize,
    run: usize,
}

impl Iterator for Runs {
    type Item = (usize, usize, isize);

    #[inline(always)]
    fn next(&mut self) -> Option<(usize, usize, isize)> {
        if self.i >= self.n {
            return None;
        }
        let item = (self.i, self.run, self.base);
        let f = &self.fold;
        // The next image's first position (only a folded axis gets there
        // before `n`): one jump past index 0's image's first position.
        self.base = if self.i == 0 { f.jump - f.phase as isize * self.stride } else { self.base + f.jump };
        self.i += self.run;
        self.run = f.len.min(self.n - self.i);
        Some(item)
    }
}

/// An operand: its first element, its (row, column) element strides and
/// how its rows and columns fold over images (plain for a matrix).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Operand {
    /// Element `(0, 0)`.
    pub ptr: *const f32,
    /// Row stride.
    pub rs: isize,
    /// Column stride.
    pub cs: isize,
    /// The rows' fold.
    pub rows: Fold,
    /// The columns' fold.
    pub cols: Fold,
}

impl Operand {
    /// A matrix at `ptr` with row stride `rs` and column stride `cs`.
    pub(crate) fn matrix(ptr: *const f32, rs: isize, cs: isize) -> Operand {
        Operand { ptr, rs, cs, rows: Fold::NONE, cols: Fold::NONE }
    }

    /// Element `(r, c)`'s address.
    ///
    /// # Safety
    /// `(r, c)` is an element of the operand.
    #[inline(always)]
    unsafe fn at(&self, r: usize, c: usize) -> *const f32 {
        // SAFETY: this function's contract.
        unsafe { self.ptr.offset(self.rows.offset(r, self.rs) + self.cols.offset(c, self.cs)) }
    }
}

/// The result of a product: its element `(0, 0)`, its (row, column)
/// strides and its columns' fold (its rows are plain).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dst {
    /// Element `(0, 0)`.
    pub ptr: *mut f32,
    /// Row stride.
    pub rs: isize,
    /// Column stride.
    pub cs: isize,
    /// The columns' fold.
    pub cols: Fold,
}

impl Dst {
    /// A matrix at `ptr` with row stride `rs` and column stride `cs`.
    pub(crate) fn matrix(ptr: *mut f32, rs: isize, cs: isize) -> Dst {
        Dst { ptr, rs, cs, cols: Fold::NONE }
    }
}

/// `dst = alpha · dst + beta · lhs @ rhs` when `read_dst`, else `dst = beta ·
/// lhs @ rhs`, for an `m × k` lhs, `k × n` rhs and `m × n` dst (each with
/// its strides and folds), through the packing buffer `pack` of at
/// least [`Blocking::pack_len`] values; then `add`'s addends. Where `sums` is
/// not null, the rhs's column sums are written there too (`n` values, each
/// summed from 0 over the `k` rows in order), from its packed panels.
///
/// # Safety
/// The CPU runs AVX2 and FMA, and AVX-512F for [`Tiling::Avx512`]; the
/// operands, `dst`, `add`'s addends and `sums` are valid for their addressed
/// elements (the bias and `sums` for `n` values) and `dst` and `sums`
/// overlap neither an operand, an addend, each other nor `pack`; `bl` came
/// from [`Blocking::new`] (any `m`, `n`: the call may be a block of a larger
/// product whose `k` is this one's).
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm(
    bl: &Blocking,
    m: usize,
    n: usize,
    k: usize,
    dst: Dst,
    read_dst: bool,
    lhs: Operand,
    rhs: Operand,
    alpha: f32,
    beta: f32,
    add: Addends,
    sums: *mut f32,
    pack: &mut [f32],
) {
    let (d, s) = ((dst, read_dst), (alpha, beta));
    // SAFETY: this function's contract.
    unsafe {
        match bl.tiling {
            Tiling::Avx2 => nest::<Avx2Tile>(bl, m, n, k, d, lhs, rhs, s, add, sums, pack),
            Tiling::Avx512 => nest::<Avx512Tile>(bl, m, n, k, d, lhs, rhs, s, add, sums, pack),
        }
    }
}

/// [`gemm`]'s loops around the register tile `T`: `d` is (dst, read_dst),
/// `s` (alpha, beta).
///
/// # Safety
/// As [`gemm`], `bl` made for `T`.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn nest<T: Tile>(
    bl: &Blocking,
    m: usize,
    n: usize,
    k: usize,
    d: (Dst, bool),
    lhs: Operand,
    rhs: Operand,
    s: (f32, f32),
    add: Addends,
    sums: *mut f32,
    pack: &mut [f32],
) {
    let ((dst, read_dst), (alpha, beta)) = (d, s);
    if m == 0 || n == 0 || k == 0 {
        if !sums.is_null() && k == 0 {
            // SAFETY: `sums` holds `n` values (contract).
            unsafe { std::slice::from_raw_parts_mut(sums, n).fill(0.0) };
        }
        return;
    }
    let (mc, kc, nc) = (bl.mc, bl.kc, bl.nc);
    let base = pack.as_mut_ptr();
    let apack = base.wrapping_add(base.align_offset(ALIGN * 4));
    let bpack = apack.wrapping_add((mc * kc).next_multiple_of(ALIGN));
    debug_assert!(bl.pack_len().is_some_and(|l| pack.len() >= l));
    // One `mb × kb` by `kb × nb` block product of packed panels at (ic, pc, jc).
    // The rhs panels of a block packed by its first row of tiles
    // ([`Tile::tile_packing`]) where the lhs panels stay in L1 (each row of
    // tiles is a pass over the rhs panels) and the rhs is a plain matrix of
    // contiguous rows; its partial panel is packed before. Measured 2-5%
    // faster on the gpt example's weight gradients (BENCHMARKS.md).
    let fuse = T::A_IN_L1 && rhs.cs == 1 && rhs.rows.is_plain() && rhs.cols.is_plain();
    let block = |ic: usize, mb: usize, pc: usize, kb: usize, jc: usize, nb: usize| {
        let store = match (pc, read_dst) {
            (0, false) => Store::Overwrite,
            (0, true) => Store::Scale(alpha),
            _ => Store::Add,
        };
        let last = pc + kb == k;
        let tile = |ir: usize, jr: usize| {
            let (mr, nr) = (T::MR.min(mb - ir), T::NR.min(nb - jr));
            let (ap, bp) = (apack.wrapping_add(ir * kb), bpack.wrapping_add(jr * kb));
            let c = jc + jr;
            let at = (ic + ir) as isize * dst.rs + dst.cols.offset(c, dst.cs);
            let add = match last {
                true => add.at(c as isize, at),
                false => Addends::NONE,
            };
            // A tile over two images or more stores its columns image by image.
            let cols = dst.cols.from(c);
            let cols = if cols.first_run(nr) < nr { cols } else { Fold::NONE };
            // SAFETY: the panels were packed with `kb` steps; the tile's `mr × nr`
            // elements lie inside `dst` and the addends (contract).
            unsafe {
                let out = Out { y: dst.ptr.offset(at), rs: dst.rs, cs: dst.cs, cols, mr, nr, store, beta, add };
                if fuse && ir == 0 && nr == T::NR {
                    T::tile_packing(kb, ap, (rhs.at(pc, c), rhs.rs), bp, out)
                } else {
                    T::tile(kb, ap, bp, out)
                }
            };
        };
        if T::A_IN_L1 {
            for ir in (0..mb).step_by(T::MR) {
                for jr in (0..nb).step_by(T::NR) {
                    tile(ir, jr);
                }
            }
        } else {
            for jr in (0..nb).step_by(T::NR) {
                for ir in (0..mb).step_by(T::MR) {
                    tile(ir, jr);
                }
            }
        }
    };
    if T::A_IN_L1 {
        // The lhs block in level 3, each rhs block in level 2 streaming its
        // panels past an lhs panel in L1.
        for ic in (0..m).step_by(mc) {
            let mb = mc.min(m - ic);
            for pc in (0..k).step_by(kc) {
                let kb = kc.min(k - pc);
                // SAFETY: rows `ic..ic + mb` and columns `pc..pc + kb` of the lhs into
                // `apack`, which holds `mc × kc` values (the buffer's contract).
                unsafe { pack_a::<T>(mb, kb, lhs, ic, pc, apack) };
                for jc in (0..n).step_by(nc) {
                    let nb = nc.min(n - jc);
                    // SAFETY: rows `pc..pc + kb` and columns `jc..jc + nb` of the rhs into
                    // `bpack`, which holds `nc × kc` values (the buffer's contract);
                    // the first row block packs each rhs block once, in order of `pc`.
                    unsafe {
                        let full = if fuse { nb / T::NR * T::NR } else { 0 };
                        pack_b::<T>(kb, nb - full, rhs, pc, jc + full, bpack.add(full * kb));
                    }
                    block(ic, mb, pc, kb, jc, nb);
                    if !sums.is_null() && ic == 0 {
                        // SAFETY: the block's panels are packed; `sums` holds `n` values.
                        unsafe { T::column_sums(kb, nb, bpack, sums.add(jc), pc == 0) };
                    }
                }
            }
        }
    } else {
        for jc in (0..n).step_by(nc) {
            let nb = nc.min(n - jc);
            for pc in (0..k).step_by(kc) {
                let kb = kc.min(k - pc);
                // SAFETY: rows `pc..pc + kb` and columns `jc..jc + nb` of the rhs into
                // `bpack`, which holds `nc × kc` values (the buffer's contract); each
                // rhs block is packed once, in order of `pc`.
                unsafe {
                    pack_b::<T>(kb, nb, rhs, pc, jc, bpack);
                    if !sums.is_null() {
                        T::column_sums(kb, nb, bpack, sums.add(jc), pc == 0);
                    }
                }
                for ic in (0..m).step_by(mc) {
                    let mb = mc.min(m - ic);
                    // SAFETY: rows `ic..ic + mb` and columns `pc..pc + kb` of the lhs into
                    // `apack`, which holds `mc × kc` values (the buffer's contract).
                    unsafe { pack_a::<T>(mb, kb, lhs, ic, pc, apack) };
                    block(ic, mb, pc, kb, jc, nb);
                }
            }
        }
    }
}

/// Packs rows `r0..r0 + mb`, columns `c0..c0 + kb` of the lhs into panels
/// of `T::MR` rows: panel `q`'s step `p` holds rows `q·MR..` of column `p`,
/// rows past `mb` zero.
///
/// # Safety
/// The CPU runs AVX2; the block lies inside the lhs; `out` holds `mb`
/// rounded up to `T::MR` times `kb` values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn pack_a<T: Tile>(mb: usize, kb: usize, a: Operand, r0: usize, c0: usize, out: *mut f32) {
    // The lhs read transposed is the rhs's layout: its rows (the lhs's
    // columns) contiguous.
    let t = Operand { ptr: a.ptr, rs: a.cs, cs: a.rs, rows: a.cols, cols: a.rows };
    // SAFETY: this function's contract, the operand's rows and columns swapped.
    unsafe { pack_panels(T::MR, kb, mb, t, c0, r0, out) };
}

/// Packs rows `r0..r0 + kb`, columns `c0..c0 + nb` of the rhs into panels
/// of `T::NR` columns: panel `q`'s step `p` holds columns `q·NR..` of row
/// `p`, columns past `nb` zero.
///
/// # Safety
/// The CPU runs AVX2; the block lies inside the rhs; `out` holds `nb`
/// rounded up to `T::NR` times `kb` values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn pack_b<T: Tile>(kb: usize, nb: usize, b: Operand, r0: usize, c0: usize, out: *mut f32) {
    // SAFETY: this function's contract.
    unsafe { pack_panels(T::NR, kb, nb, b, r0, c0, out) };
}

/// Packs rows `r0..r0 + kb` (the steps), columns `c0..c0 + nb` of `b` into
/// panels of `w` columns: panel `q`'s step `p` holds columns `q·w..` of row
/// `p`, columns past `nb` zero. Rows contiguous are read in memory order
/// (reading a panel's rows one after another would touch a page per row of
/// a wide matrix), folded columns run by run within an image; columns
/// contiguous (a transposed operand) through 8 × 8 register transposes,
/// folded rows run by run within an image.
///
/// # Safety
/// The CPU runs AVX2; `w` is at least 1; the block lies inside `b`;
/// `out` holds `nb` rounded up to `w` times `kb` values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn pack_panels(w: usize, kb: usize, nb: usize, b: Operand, r0: usize, c0: usize, out: *mut f32) {
    let full = nb / w * w;
    // SAFETY: the elements read lie in rows `r0..r0 + kb` and columns
    // `c0..c0 + nb` of `b`; panel `j0 / w` is `w × kb` values at `j0 · kb`
    // inside `out` (contract).
    unsafe {
        if b.cs == 1 && b.cols.is_plain() {
            for p in 0..kb {
                let src = b.at(r0 + p, c0);
                for q in 0..full / w {
                    std::ptr::copy_nonoverlapping(src.add(q * w), out.add(q * w * kb + p * w), w);
                }
            }
        } else if b.cs == 1 {
            // Runs of columns inside one image, cut again at the panels' edges.
            let cols = b.cols.from(c0);
            for p in 0..kb {
                let src = b.at(r0 + p, c0);
                for (j, run, off) in cols.runs(full, 1) {
                    let (mut j, end, mut from) = (j, j + run, src.offset(off));
                    while j < end {
                        let len = (w - j % w).min(end - j);
                        std::ptr::copy_nonoverlapping(from, out.add(j / w * w * kb + p * w + j % w), len);
                        (j, from) = (j + len, from.add(len));
                    }
                }
            }
        } else if b.rs == 1 {
            let rows = b.rows.from(r0);
            for j0 in (0..full).step_by(w) {
                let panel = out.add(j0 * kb);
                let mut j = 0;
                while j < w {
                    // Eight columns (fewer at the panel's end, the rest read
                    // again) of eight steps at a time, within one image.
                    let cols = 8.min(w - j);
                    let col: [*const f32; 8] = std::array::from_fn(|c| b.at(r0, c0 + j0 + j + c.min(cols - 1)));
                    for (p0, run, off) in rows.runs(kb, 1) {
                        let src: [*const f32; 8] = std::array::from_fn(|c| col[c].offset(off).wrapping_sub(p0));
                        let mut p = p0;
                        while p + 8 <= p0 + run {
                            let rows = std::array::from_fn(|c| _mm256_loadu_ps(src[c].wrapping_add(p)));
                            let t = super::super::conv::transpose8(rows);
                            for (s, v) in t.iter().enumerate() {
                                let at = panel.add((p + s) * w + j);
                                if cols == 8 {
                                    _mm256_storeu_ps(at, *v);
                                } else {
                                    let mut l = [0f32; 8];
                                    _mm256_storeu_ps(l.as_mut_ptr(), *v);
                                    std::ptr::copy_nonoverlapping(l.as_ptr(), at, cols);
                                }
                            }
                            p += 8;
                        }
                        for p in p..p0 + run {
                            for (c, s) in src.iter().enumerate().take(cols) {
                                *panel.add(p * w + j + c) = *s.wrapping_add(p);
                            }
                        }
                    }
                    j += cols;
                }
            }
        }
        let start = if b.cs == 1 || b.rs == 1 { full } else { 0 };
        for j0 in (start..nb).step_by(w) {
            let cols = w.min(nb - j0);
            let panel = out.add(j0 * kb);
            for p in 0..kb {
                for j in 0..w {
                    *panel.add(p * w + j) = if j < cols { *b.at(r0 + p, c0 + j0 + j) } else { 0.0 };
                }
            }
        }
    }
}

/// Adds the `kb` steps of the packed rhs block at `panels` (panels of `W`
/// columns, as [`pack_panels`] writes them) to the column sums `sums` of its
/// `nb` columns, one step after another (each panel's sums in a `W`-value
/// accumulator: registers); `first` starts them from 0.
///
/// # Safety
/// `panels` holds `nb` rounded up to `W` times `kb` values; `sums` holds
/// `nb` values and overlaps no panel.
#[inline(always)]
unsafe fn panel_sums<const W: usize>(kb: usize, nb: usize, panels: *const f32, sums: *mut f32, first: bool) {
    for j0 in (0..nb).step_by(W) {
        let cols = W.min(nb - j0);
        // SAFETY: panel `j0 / W` is `W × kb` values at `j0 · kb`; the panel's
        // columns `..cols` are sums `j0..j0 + cols` (contract).
        unsafe {
            let panel = std::slice::from_raw_parts(panels.add(j0 * kb), W * kb);
            let out = std::slice::from_raw_parts_mut(sums.add(j0), cols);
            let mut acc = [0f32; W];
            if !first {
                acc[..cols].copy_from_slice(out);
            }
            for step in panel.chunks_exact(W) {
                acc.iter_mut().zip(step).for_each(|(a, &v)| *a += v);
            }
            out.copy_from_slice(&acc[..cols]);
        }
    }
}

/// The register tile's sums `acc` (row `i`'s columns `h·N..` in
/// `acc[i][h]`) times `beta`, stored as `out` says.
///
/// # Safety
/// As [`Tile::tile`]; the tile holds at most 512 values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store_tile<V: Lanes, const MR: usize, const NV: usize>(acc: &[[V; NV]; MR], out: Out) {
    let Out { y, rs, cs, mr, nr, store, beta, add, .. } = out;
    let nr_full = NV * V::N;
    debug_assert!(MR * nr_full <= 512, "the partial tiles' buffer holds 512 values");
    // SAFETY: the tile's elements and the addends' (contract); vectors of
    // `V::N` values inside a full tile's rows of unit column stride.
    unsafe {
        let vb = V::splat(beta);
        if mr == MR && nr == nr_full && cs == 1 && out.cols.is_plain() {
            for (i, row) in acc.iter().enumerate() {
                let yi = y.offset(i as isize * rs);
                for (h, v) in row.iter().enumerate() {
                    let at = yi.add(h * V::N);
                    let s = v.mul(vb);
                    let out = match store {
                        Store::Overwrite => s,
                        Store::Scale(alpha) => V::splat(alpha).mul(V::load(at)).add(s),
                        Store::Add => V::load(at).add(s),
                    };
                    let out = match add.bias.is_null() {
                        true => out,
                        false => out.add(V::load(add.bias.add(h * V::N))),
                    };
                    let out = match add.residual.is_null() {
                        true => out,
                        false => out.add(V::load(add.residual.offset(i as isize * rs + (h * V::N) as isize))),
                    };
                    out.store(at);
                }
            }
            return;
        }
        let mut t = [0f32; 512];
        for (i, row) in acc.iter().enumerate() {
            for (h, v) in row.iter().enumerate() {
                v.mul(vb).store(t.as_mut_ptr().add(i * nr_full + h * V::N));
            }
        }
        // Column by column within each image the columns fold over (one run
        // for a plain tile), contiguous runs as slices.
        for (j0, run, off) in out.cols.runs(nr, cs) {
            for i in 0..mr {
                let at = i as isize * rs + off;
                let sums = &t[i * nr_full + j0..i * nr_full + j0 + run];
                let bias = (!add.bias.is_null()).then(|| std::slice::from_raw_parts(add.bias.add(j0), run));
                if cs == 1 {
                    let ys = std::slice::from_raw_parts_mut(y.offset(at), run);
                    ys.iter_mut().zip(sums).for_each(|(e, &v)| *e = store_one(*e, v, store));
                    if let Some(b) = bias {
                        ys.iter_mut().zip(b).for_each(|(e, &v)| *e += v);
                    }
                    if !add.residual.is_null() {
                        let r = std::slice::from_raw_parts(add.residual.offset(at), run);
                        ys.iter_mut().zip(r).for_each(|(e, &v)| *e += v);
                    }
                    continue;
                }
                for (j, &v) in sums.iter().enumerate() {
                    let at = at + j as isize * cs;
                    let e = y.offset(at);
                    let mut v = store_one(*e, v, store);
                    if let Some(b) = bias {
                        v += b[j];
                    }
                    if !add.residual.is_null() {
                        v += *add.residual.offset(at);
                    }
                    *e = v;
                }
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Values in `-0.5..0.5` from a linear congruential generator seeded by `seed`.
    fn uniform(mut seed: u64) -> impl FnMut() -> f32 {
        move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        }
    }

    /// The tilings this CPU runs.
    fn tilings() -> Vec<Tiling> {
        let mut t = Vec::new();
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            t.push(Tiling::Avx2);
            if is_x86_feature_detected!("avx512f") {
                t.push(Tiling::Avx512);
            }
        }
        t
    }

    /// `m × k` row-major values as an operand read plainly or transposed
    /// (stored `k × m`... as the strides say).
    fn operand(v: &[f32], rows: usize, cols: usize, transposed: bool) -> (Vec<f32>, isize, isize) {
        if transposed {
            let mut t = vec![0.0; v.len()];
            for r in 0..rows {
                for c in 0..cols {
                    t[c * rows + r] = v[r * cols + c];
                }
            }
            (t, 1, rows as isize)
        } else {
            (v.to_vec(), cols as isize, 1)
        }
    }

    #[test]
    fn products_match_the_definition_in_every_layout() {
        let mut next = uniform(11);
        let shapes = [
            (1, 1, 1),
            (5, 7, 3),
            (6, 16, 8),
            (12, 32, 9),
            (13, 33, 300),
            (40, 17, 700),
            (7, 50, 321),
            (64, 64, 64),
            (30, 70, 250),
            // Several blocks of columns and of depth, full panels and a partial one
            // (the AVX-512 tile packs the full ones as its first row of tiles runs).
            (13, 450, 900),
        ];
        for (tiling, &(m, n, k)) in tilings().into_iter().flat_map(|t| shapes.iter().map(move |s| (t, s))) {
            let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
            let y0: Vec<f32> = (0..m * n).map(|_| next()).collect();
            let want: Vec<f64> =
                (0..m * n).map(|e| (0..k).map(|p| a[e / n * k + p] as f64 * b[p * n + e % n] as f64).sum()).collect();
            for (ta, tb, read_dst) in
                [(false, false, false), (true, false, true), (false, true, false), (true, true, true)]
            {
                let (av, ars, acs) = operand(&a, m, k, ta);
                let (bv, brs, bcs) = operand(&b, k, n, tb);
                let bl = Blocking::new(tiling, m, n, k);
                let mut pack = vec![0.0; bl.pack_len().unwrap()];
                let mut y = y0.clone();
                let (alpha, beta) = (0.5f32, 2.0f32);
                // SAFETY: AVX2 checked; operands and dst sized for their strides.
                unsafe {
                    gemm(
                        &bl,
                        m,
                        n,
                        k,
                        Dst::matrix(y.as_mut_ptr(), n as isize, 1),
                        read_dst,
                        Operand::matrix(av.as_ptr(), ars, acs),
                        Operand::matrix(bv.as_ptr(), brs, bcs),
                        alpha,
                        beta,
                        Addends::NONE,
                        std::ptr::null_mut(),
                        &mut pack,
                    )
                };
                for e in 0..m * n {
                    let w = if read_dst { alpha as f64 * y0[e] as f64 } else { 0.0 } + beta as f64 * want[e];
                    let tol = 1e-5 * (k as f64).sqrt() * 4.0 + 1e-6;
                    assert!((y[e] as f64 - w).abs() <= tol, "{tiling:?} {m}x{n}x{k} {ta} {tb}: {e}: {} vs {w}", y[e]);
                }
            }
        }
    }

    /// `rows × cols` values `v` stored as `how` says: 0 a row-major matrix,
    /// 1 its columns folded over images of `len` (`[image][row][position]`),
    /// 2 its rows folded (`[image][column][position]`); the storage and the
    /// operand's strides and folds (pointer left null).
    fn folded(v: &[f32], rows: usize, cols: usize, how: u8, len: usize) -> (Vec<f32>, Operand) {
        let plain = Operand::matrix(std::ptr::null(), cols as isize, 1);
        let (axis, other) = match how {
            0 => return (v.to_vec(), plain),
            1 => (cols, rows),
            _ => (rows, cols),
        };
        let images = axis.div_ceil(len);
        let mut s = vec![f32::NAN; images * other * len];
        for r in 0..rows {
            for c in 0..cols {
                let (i, o) = if how == 1 { (c, r) } else { (r, c) };
                s[(i / len) * other * len + o * len + i % len] = v[r * cols + c];
            }
        }
        let fold = Fold::images(len, (other * len) as isize);
        let op = match how {
            1 => Operand { ptr: std::ptr::null(), rs: len as isize, cs: 1, rows: Fold::NONE, cols: fold },
            _ => Operand { ptr: std::ptr::null(), rs: 1, cs: len as isize, rows: fold, cols: Fold::NONE },
        };
        (s, op)
    }

    #[test]
    fn folded_operands_and_results_match_the_definition() {
        let mut next = uniform(5);
        for tiling in tilings() {
            for &(m, n, k, len) in &[(7, 70, 33, 7), (13, 130, 300, 49), (6, 64, 9, 64), (20, 40, 500, 3), (5, 9, 2, 1)]
            {
                let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
                let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
                let want: Vec<f64> = (0..m * n)
                    .map(|e| (0..k).map(|p| a[e / n * k + p] as f64 * b[p * n + e % n] as f64).sum())
                    .collect();
                // (lhs, rhs, dst): plain or the weight gradient's, forward's and data gradient's folds.
                for (ha, hb, hd) in [(0, 0, 1), (1, 2, 0), (0, 1, 1), (1, 1, 0), (2, 1, 1)] {
                    let (av, mut lhs) = folded(&a, m, k, ha, len);
                    let (bv, mut rhs) = folded(&b, k, n, hb, len);
                    (lhs.ptr, rhs.ptr) = (av.as_ptr(), bv.as_ptr());
                    let bl = Blocking::new(tiling, m, n, k);
                    let mut pack = vec![0.0; bl.pack_len().unwrap()];
                    let zeros = vec![0.0; m * n];
                    let (mut yv, dst0) = folded(&zeros, m, n, hd, len);
                    let run = |c0: usize, c1: usize, yv: &mut Vec<f32>, pack: &mut Vec<f32>| {
                        let dst = Dst { ptr: yv.as_mut_ptr(), rs: dst0.rs, cs: dst0.cs, cols: dst0.cols };
                        // SAFETY: AVX2 checked; columns `c0..c1` of the operands and
                        // the result, their storage sized for their folds.
                        unsafe {
                            let rhs = Operand { ptr: rhs.at(0, c0), cols: rhs.cols.from(c0), ..rhs };
                            let dst = Dst {
                                ptr: dst.ptr.offset(dst.cols.offset(c0, dst.cs)),
                                cols: dst.cols.from(c0),
                                ..dst
                            };
                            gemm(
                                &bl,
                                m,
                                c1 - c0,
                                k,
                                dst,
                                false,
                                lhs,
                                rhs,
                                1.0,
                                1.0,
                                Addends::NONE,
                                std::ptr::null_mut(),
                                pack,
                            )
                        };
                    };
                    run(0, n, &mut yv, &mut pack);
                    let y = |yv: &[f32], e: usize| match hd {
                        0 => yv[e],
                        _ => yv[(e % n / len) * m * len + (e / n) * len + e % n % len],
                    };
                    for (e, &want) in want.iter().enumerate() {
                        let tol = 1e-5 * (k as f64).sqrt() * 4.0 + 1e-6;
                        let got = y(&yv, e) as f64;
                        assert!(
                            (got - want).abs() <= tol,
                            "{tiling:?} {m}x{n}x{k} len {len} {ha}{hb}{hd}: {e}: {got} vs {want}"
                        );
                    }
                    // Column blocks starting inside an image give the same bits.
                    let (mut parts, _) = folded(&zeros, m, n, hd, len);
                    let cut = (n / 3).max(1).min(n);
                    run(0, cut, &mut parts, &mut pack);
                    run(cut, n, &mut parts, &mut pack);
                    for e in 0..m * n {
                        assert_eq!(
                            y(&parts, e).to_bits(),
                            y(&yv, e).to_bits(),
                            "{tiling:?} {m}x{n}x{k} blocks at {cut}"
                        );
                    }
                }
            }
        }
    }

    /// A tile packing its rhs panel from a strided matrix as it goes (the
    /// AVX-512 tile's fused kernel, the AVX2 tile's copy first) stores the
    /// bits of packing the panel first, then the tile, and leaves the panel
    /// packed.
    #[test]
    fn tiles_packing_their_rhs_panel_give_the_packed_tiles_bits() {
        fn check<T: Tile>(next: &mut impl FnMut() -> f32) {
            let (kb, rs) = (37, T::NR + 19);
            let a: Vec<f32> = (0..kb * T::MR).map(|_| next()).collect();
            let src: Vec<f32> = (0..kb * rs).map(|_| next()).collect();
            let packed: Vec<f32> = (0..kb).flat_map(|p| src[p * rs..p * rs + T::NR].to_vec()).collect();
            let run = |fused: bool| {
                let (mut y, mut b) = (vec![0f32; T::MR * T::NR], vec![0f32; kb * T::NR]);
                let out = Out {
                    y: y.as_mut_ptr(),
                    rs: T::NR as isize,
                    cs: 1,
                    cols: Fold::NONE,
                    mr: T::MR,
                    nr: T::NR,
                    store: Store::Overwrite,
                    beta: 1.0,
                    add: Addends::NONE,
                };
                // SAFETY: the tiling's features checked; panels of `kb` steps, the
                // source `kb` rows of `rs >= NR` values, the tile `MR × NR`.
                unsafe {
                    if fused {
                        T::tile_packing(kb, a.as_ptr(), (src.as_ptr(), rs as isize), b.as_mut_ptr(), out);
                    } else {
                        b.copy_from_slice(&packed);
                        T::tile(kb, a.as_ptr(), b.as_ptr(), out);
                    }
                }
                (y, b)
            };
            let ((y, b), (y0, b0)) = (run(true), run(false));
            assert_eq!(b, b0, "the panel packed");
            assert!(y.iter().zip(&y0).all(|(u, v)| u.to_bits() == v.to_bits()), "the tile's bits");
        }
        let mut next = uniform(23);
        for tiling in tilings() {
            match tiling {
                Tiling::Avx2 => check::<Avx2Tile>(&mut next),
                Tiling::Avx512 => check::<Avx512Tile>(&mut next),
            }
        }
    }

    #[test]
    fn blocks_of_a_product_give_its_bits() {
        for tiling in tilings() {
            blocks_give_the_bits(tiling);
        }
    }

    /// A product computed whole equals, bit for bit, the same product computed
    /// as row blocks and column blocks (the team's splits) with its blocking.
    fn blocks_give_the_bits(tiling: Tiling) {
        let mut next = uniform(3);
        let (m, n, k) = (50, 70, 600);
        let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
        let bl = Blocking::new(tiling, m, n, k);
        let mut pack = vec![0.0; bl.pack_len().unwrap()];
        let run = |rows: std::ops::Range<usize>, cols: std::ops::Range<usize>, y: &mut [f32], pack: &mut [f32]| {
            // SAFETY: AVX2 checked; the block lies inside the operands and `y`.
            unsafe {
                gemm(
                    &bl,
                    rows.len(),
                    cols.len(),
                    k,
                    Dst::matrix(y.as_mut_ptr().add(rows.start * n + cols.start), n as isize, 1),
                    false,
                    Operand::matrix(a.as_ptr().add(rows.start * k), k as isize, 1),
                    Operand::matrix(b.as_ptr().add(cols.start), n as isize, 1),
                    1.0,
                    1.0,
                    Addends::NONE,
                    std::ptr::null_mut(),
                    pack,
                )
            }
        };
        let mut whole = vec![0.0; m * n];
        run(0..m, 0..n, &mut whole, &mut pack);
        let mut parts = vec![0.0; m * n];
        run(0..17, 0..n, &mut parts, &mut pack);
        run(17..m, 0..33, &mut parts, &mut pack);
        run(17..m, 33..n, &mut parts, &mut pack);
        assert_eq!(whole, parts);
    }

    #[test]
    fn blocking_depends_on_the_depth_alone_for_values() {
        fn check<T: Tile>(tiling: Tiling) {
            for k in [1, 100, 256, 320, 321, 768, 1024, 2048, 5000] {
                let kc = Blocking::new(tiling, 1, 1, k).kc;
                for (m, n) in [(6, 16), (2048, 1024), (10_000, 5)] {
                    let b = Blocking::new(tiling, m, n, k);
                    assert_eq!(b.kc, kc);
                    assert!(b.kc <= T::KC + T::KC / 4 && b.mc.is_multiple_of(T::MR) && b.nc.is_multiple_of(T::NR));
                    assert!(b.mc * b.kc <= T::MC_VALUES + T::MR * b.kc && b.nc * b.kc <= T::NC_VALUES + T::NR * b.kc);
                }
            }
        }
        check::<Avx2Tile>(Tiling::Avx2);
        check::<Avx512Tile>(Tiling::Avx512);
    }
}
