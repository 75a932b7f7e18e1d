//! A packed f32 GEMM for CPUs whose widest tier is AVX2 + FMA, in BLIS's
//! loop order: a block of `kc` rows of the rhs is packed into panels of
//! [`NR`] columns (kept in level 3), a block of `mc × kc` of the lhs into
//! panels of [`MR`] rows (kept in level 2), and a [`MR`] × [`NR`] register
//! tile sums one lhs panel times one rhs panel (the rhs panel stays in L1
//! while the lhs panels stream past it).
//!
//! `gemm`'s AVX2 path leaves half the FMA peak behind on a Zen 3 from
//! 1024-sized products on (46 GFLOP/s of 89 on one core); this one keeps the
//! lhs block in level 2 and the register tile's rhs panel in L1 at every
//! size (see BENCHMARKS.md).
//!
//! Values: each result element is summed over `k` in order within a block
//! of [`Blocking::kc`] (a function of `k` alone), then the blocks are added
//! to the result in order. The thread split, `mc` and `nc` change which
//! elements a call computes, never how, so a product gives the same bits on
//! one thread or many. Padding rows and columns of the panels are zeros and
//! are never stored.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::super::tile::{MR, NR};

/// Largest depth of a block: an rhs panel of `NR × KC` values is 16 KiB, half
/// of an L1.
const KC: usize = 256;
/// Values of a packed lhs block (192 KiB: within a 512 KiB level 2 beside the
/// rhs panels streaming through it).
const MC_VALUES: usize = 48 * 1024;
/// Most columns of a packed rhs block (`KC × NC_MAX` values: 4 MiB).
const NC_MAX: usize = 4096;
/// Values the packing buffers are aligned to (64 bytes: a cache line).
const ALIGN: usize = 16;

/// Block sizes of one product, fixed when its kernel is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Blocking {
    /// Rows of a packed lhs block (a multiple of [`MR`]).
    pub mc: usize,
    /// Depth of a block: the only choice that changes the values.
    pub kc: usize,
    /// Columns of a packed rhs block (a multiple of [`NR`]).
    pub nc: usize,
}

impl Blocking {
    /// The blocks of an `m × k` times `k × n` product: `kc` cuts `k` into
    /// equal blocks of at most [`KC`] (a depth up to 1.25 [`KC`] is one
    /// block), `mc` and `nc` cut `m` and `n` evenly within their bounds.
    pub(crate) fn new(m: usize, n: usize, k: usize) -> Blocking {
        let k = k.max(1);
        let kc = if k <= KC + KC / 4 { k } else { k.div_ceil(k.div_ceil(KC)) };
        let mc_max = (MC_VALUES / kc / MR).max(1) * MR;
        let m = m.max(1);
        let mc = m.div_ceil(m.div_ceil(mc_max)).next_multiple_of(MR);
        let n = n.max(1);
        let nc = n.div_ceil(n.div_ceil(NC_MAX)).next_multiple_of(NR);
        Blocking { mc, kc, nc }
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

/// An operand: its first element and its (row, column) element strides.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Operand {
    /// Element `(0, 0)`.
    pub ptr: *const f32,
    /// Row stride.
    pub rs: isize,
    /// Column stride.
    pub cs: isize,
}

impl Operand {
    /// Element `(r, c)`'s address.
    ///
    /// # Safety
    /// `(r, c)` is an element of the operand.
    #[inline(always)]
    unsafe fn at(&self, r: usize, c: usize) -> *const f32 {
        // SAFETY: this function's contract.
        unsafe { self.ptr.offset(r as isize * self.rs + c as isize * self.cs) }
    }
}

/// `dst = alpha · dst + beta · lhs @ rhs` when `read_dst`, else `dst = beta ·
/// lhs @ rhs`, for an `m × k` lhs, `k × n` rhs and `m × n` dst (row stride
/// `dst_rs`, column stride `dst_cs`), through the packing buffer `pack` of at
/// least [`Blocking::pack_len`] values; then `add`'s addends.
///
/// # Safety
/// The CPU runs AVX2 and FMA; the operands, `dst` and `add`'s addends are
/// valid for their addressed elements (the bias for `n` values) and `dst`
/// overlaps neither operand, addend nor `pack`; `bl`
/// came from [`Blocking::new`] (any `m`, `n`: the call may be a block of a
/// larger product whose `k` is this one's).
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gemm(
    bl: &Blocking,
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: isize,
    dst_cs: isize,
    read_dst: bool,
    lhs: Operand,
    rhs: Operand,
    alpha: f32,
    beta: f32,
    add: Addends,
    pack: &mut [f32],
) {
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    let (mc, kc, nc) = (bl.mc, bl.kc, bl.nc);
    let base = pack.as_mut_ptr();
    let apack = base.wrapping_add(base.align_offset(ALIGN * 4));
    let bpack = apack.wrapping_add((mc * kc).next_multiple_of(ALIGN));
    debug_assert!(bl.pack_len().is_some_and(|l| pack.len() >= l));
    for jc in (0..n).step_by(nc) {
        let nb = nc.min(n - jc);
        for pc in (0..k).step_by(kc) {
            let kb = kc.min(k - pc);
            // SAFETY: rows `pc..pc + kb` and columns `jc..jc + nb` of the rhs;
            // `bpack` holds `nc × kc` values (the buffer's contract).
            unsafe { pack_b(kb, nb, rhs, pc, jc, bpack) };
            let store = match (pc, read_dst) {
                (0, false) => Store::Overwrite,
                (0, true) => Store::Scale(alpha),
                _ => Store::Add,
            };
            let last = pc + kb == k;
            for ic in (0..m).step_by(mc) {
                let mb = mc.min(m - ic);
                // SAFETY: rows `ic..ic + mb` and columns `pc..pc + kb` of the lhs;
                // `apack` holds `mc × kc` values.
                unsafe { pack_a(mb, kb, lhs, ic, pc, apack) };
                for jr in (0..nb).step_by(NR) {
                    let nr = NR.min(nb - jr);
                    let bp = bpack.wrapping_add(jr * kb);
                    for ir in (0..mb).step_by(MR) {
                        let mr = MR.min(mb - ir);
                        let ap = apack.wrapping_add(ir * kb);
                        let (r, c) = ((ic + ir) as isize, (jc + jr) as isize);
                        let at = r * dst_rs + c * dst_cs;
                        let add = match last {
                            true => add.at(c, at),
                            false => Addends::NONE,
                        };
                        // SAFETY: the panels were packed above with `kb` steps; the
                        // tile's `mr × nr` elements lie inside `dst` and the addends
                        // (contract).
                        unsafe {
                            let y = dst.offset(at);
                            tile(kb, ap, bp, y, dst_rs, dst_cs, mr, nr, store, beta, add);
                        }
                    }
                }
            }
        }
    }
}

/// Packs rows `r0..r0 + mb`, columns `c0..c0 + kb` of the lhs into panels
/// of [`MR`] rows: panel `q`'s step `p` holds rows `q·MR..` of column `p`,
/// rows past `mb` zero.
///
/// # Safety
/// The block lies inside the lhs; `out` holds `mb` rounded up to [`MR`] times
/// `kb` values.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_a(mb: usize, kb: usize, a: Operand, r0: usize, c0: usize, out: *mut f32) {
    let full = mb / MR * MR;
    if a.rs == 1 {
        // Columns contiguous (a transposed operand): each column's `mb` values
        // read in memory order, six to a panel.
        // SAFETY: column `c0 + p`'s rows `r0 .. r0 + full` lie inside the lhs
        // (contract).
        unsafe { pack_lines::<MR>(kb, full, |p| a.at(r0, c0 + p), out) };
        if full == mb {
            return;
        }
    }
    let start = if a.rs == 1 { full } else { 0 };
    // `start` is a multiple of MR: panel `i0 / MR` starts at row `i0`.
    for i0 in (start..mb).step_by(MR) {
        let rows = MR.min(mb - i0);
        let panel = out.wrapping_add(i0 * kb);
        // SAFETY: rows `r0 + i0 ..` (below `r0 + mb`) and columns `c0 .. c0 + kb`
        // of the lhs; the panel's `MR × kb` values inside `out` (contract).
        unsafe {
            if a.cs == 1 && rows == MR {
                // Rows contiguous: eight steps of the six rows at a time, through registers.
                let src: [*const f32; MR] = std::array::from_fn(|i| a.at(r0 + i0 + i, c0));
                let mut p = 0;
                while p + 8 <= kb {
                    transpose_6x8(&src, p, panel.add(p * MR));
                    p += 8;
                }
                for p in p..kb {
                    for (i, s) in src.iter().enumerate() {
                        *panel.add(p * MR + i) = *s.add(p);
                    }
                }
            } else {
                for p in 0..kb {
                    for i in 0..MR {
                        *panel.add(p * MR + i) = if i < rows { *a.at(r0 + i0 + i, c0 + p) } else { 0.0 };
                    }
                }
            }
        }
    }
}

/// Steps `0..kb` of the `full / W` full panels of width `W` from a source
/// whose step `p` holds the panels' values in order, contiguous from
/// `line(p)`: each line read once in memory order.
///
/// # Safety
/// `line(p)` is valid for `full` reads for every `p < kb`; `out` holds
/// `full × kb` values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn pack_lines<const W: usize>(kb: usize, full: usize, line: impl Fn(usize) -> *const f32, out: *mut f32) {
    for p in 0..kb {
        let src = line(p);
        for q in 0..full / W {
            // SAFETY: `W` values of line `p` and step `p` of panel `q` (contract).
            unsafe { std::ptr::copy_nonoverlapping(src.add(q * W), out.add(q * W * kb + p * W), W) };
        }
    }
}

/// Eight steps `p..p + 8` of six contiguous rows written as 8 groups of 6
/// values (`out[s · 6 + i] = src[i][p + s]`).
///
/// # Safety
/// The CPU has AVX; each row holds `p + 8` values; `out` holds 48.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn transpose_6x8(src: &[*const f32; MR], p: usize, out: *mut f32) {
    // SAFETY: this function's contract.
    unsafe {
        let z = _mm256_setzero_ps();
        let rows = std::array::from_fn(|i| if i < MR { _mm256_loadu_ps(src[i].add(p)) } else { z });
        let mut t = [0f32; 64];
        for (s, c) in super::super::conv::transpose8(rows).iter().enumerate() {
            _mm256_storeu_ps(t.as_mut_ptr().add(s * 8), *c);
        }
        for s in 0..8 {
            std::ptr::copy_nonoverlapping(t.as_ptr().add(s * 8), out.add(s * MR), MR);
        }
    }
}

/// Packs rows `r0..r0 + kb`, columns `c0..c0 + nb` of the rhs into panels
/// of [`NR`] columns: panel `q`'s step `p` holds columns `q·NR..` of row `p`,
/// columns past `nb` zero.
///
/// # Safety
/// The block lies inside the rhs; `out` holds `nb` rounded up to [`NR`] times
/// `kb` values.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_b(kb: usize, nb: usize, b: Operand, r0: usize, c0: usize, out: *mut f32) {
    let full = nb / NR * NR;
    if b.cs == 1 {
        // Rows contiguous: each row's `nb` values read in memory order, 16 to a
        // panel (reading a panel's rows one after another would touch a page
        // per row of a wide matrix).
        // SAFETY: row `r0 + p`'s columns `c0 .. c0 + full` lie inside the rhs
        // (contract).
        unsafe { pack_lines::<NR>(kb, full, |p| b.at(r0 + p, c0), out) };
        if full == nb {
            return;
        }
    }
    let start = if b.cs == 1 { full } else { 0 };
    // `start` is a multiple of NR: panel `j0 / NR` starts at column `j0`.
    for j0 in (start..nb).step_by(NR) {
        let cols = NR.min(nb - j0);
        let panel = out.wrapping_add(j0 * kb);
        // SAFETY: rows `r0 .. r0 + kb` and columns `c0 + j0 ..` (below `c0 + nb`)
        // of the rhs; the panel's `NR × kb` values inside `out` (contract).
        unsafe {
            if b.rs == 1 {
                // Rows contiguous in memory (a transposed operand): read down each column.
                for j in 0..NR {
                    if j < cols {
                        let src = b.at(r0, c0 + j0 + j);
                        for p in 0..kb {
                            *panel.add(p * NR + j) = *src.add(p);
                        }
                    } else {
                        for p in 0..kb {
                            *panel.add(p * NR + j) = 0.0;
                        }
                    }
                }
            } else {
                for p in 0..kb {
                    for j in 0..NR {
                        *panel.add(p * NR + j) = if j < cols { *b.at(r0 + p, c0 + j0 + j) } else { 0.0 };
                    }
                }
            }
        }
    }
}

/// The register tile: `s = beta · Σ_p a[p] ⊗ b[p]` over `kb` steps of an lhs
/// panel and an rhs panel, stored into the `mr × nr` corner of the tile at
/// `y` (row stride `rs`, column stride `cs`) as `store` says, then `add`'s
/// addends added (the tile's own: `bias` at its first column, `residual` at
/// its first element, with `y`'s strides).
///
/// # Safety
/// The panels hold `kb` steps; the tile's
/// `mr × nr` elements are valid and this call's alone, and so are the
/// addends' (those not null).
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile(
    kb: usize,
    a: *const f32,
    b: *const f32,
    y: *mut f32,
    rs: isize,
    cs: isize,
    mr: usize,
    nr: usize,
    store: Store,
    beta: f32,
    add: Addends,
) {
    let full = mr == MR && nr == NR && cs == 1;
    if full {
        for i in 0..MR {
            // SAFETY: row `i` of the tile, a hint only.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(y.offset(i as isize * rs) as *const i8) };
        }
    }
    // SAFETY: steps `0..kb` of both panels (contract).
    let acc = unsafe { super::super::tile::sums(kb, a, b) };
    let vb = _mm256_set1_ps(beta);
    if full {
        // SAFETY: the whole tile, unit column stride (contract).
        unsafe {
            for (i, row) in acc.iter().enumerate() {
                let yi = y.offset(i as isize * rs);
                for (h, v) in row.iter().enumerate() {
                    let s = _mm256_mul_ps(*v, vb);
                    let out = match store {
                        Store::Overwrite => s,
                        Store::Scale(alpha) => {
                            _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(alpha), _mm256_loadu_ps(yi.add(8 * h))), s)
                        }
                        Store::Add => _mm256_add_ps(_mm256_loadu_ps(yi.add(8 * h)), s),
                    };
                    let out = match add.bias.is_null() {
                        true => out,
                        false => _mm256_add_ps(out, _mm256_loadu_ps(add.bias.add(8 * h))),
                    };
                    let out = match add.residual.is_null() {
                        true => out,
                        false => {
                            let res = add.residual.offset(i as isize * rs + 8 * h as isize);
                            _mm256_add_ps(out, _mm256_loadu_ps(res))
                        }
                    };
                    _mm256_storeu_ps(yi.add(8 * h), out);
                }
            }
        }
        return;
    }
    let mut t = [0f32; MR * NR];
    for (i, row) in acc.iter().enumerate() {
        for (h, v) in row.iter().enumerate() {
            // SAFETY: 8 values of `t`'s row `i`.
            unsafe { _mm256_storeu_ps(t.as_mut_ptr().add(i * NR + 8 * h), _mm256_mul_ps(*v, vb)) };
        }
    }
    for i in 0..mr {
        for j in 0..nr {
            // SAFETY: element `(i, j)` of the tile's valid corner (contract).
            unsafe {
                let at = i as isize * rs + j as isize * cs;
                let e = y.offset(at);
                let mut v = store_one(*e, t[i * NR + j], store);
                if !add.bias.is_null() {
                    v += *add.bias.add(j);
                }
                if !add.residual.is_null() {
                    v += *add.residual.offset(at);
                }
                *e = v;
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

    fn has_avx2() -> bool {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
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
        if !has_avx2() {
            return;
        }
        let mut next = uniform(11);
        let shapes = [(1, 1, 1), (5, 7, 3), (6, 16, 8), (13, 33, 300), (40, 17, 700), (7, 50, 321), (64, 64, 64)];
        for &(m, n, k) in &shapes {
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
                let bl = Blocking::new(m, n, k);
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
                        y.as_mut_ptr(),
                        n as isize,
                        1,
                        read_dst,
                        Operand { ptr: av.as_ptr(), rs: ars, cs: acs },
                        Operand { ptr: bv.as_ptr(), rs: brs, cs: bcs },
                        alpha,
                        beta,
                        Addends::NONE,
                        &mut pack,
                    )
                };
                for e in 0..m * n {
                    let w = if read_dst { alpha as f64 * y0[e] as f64 } else { 0.0 } + beta as f64 * want[e];
                    let tol = 1e-5 * (k as f64).sqrt() * 4.0 + 1e-6;
                    assert!((y[e] as f64 - w).abs() <= tol, "{m}x{n}x{k} {ta} {tb}: {e}: {} vs {w}", y[e]);
                }
            }
        }
    }

    #[test]
    fn blocks_of_a_product_give_its_bits() {
        if !has_avx2() {
            return;
        }
        // A product computed whole equals, bit for bit, the same product computed
        // as row blocks and column blocks (the team's splits) with its blocking.
        let mut next = uniform(3);
        let (m, n, k) = (50, 70, 600);
        let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
        let bl = Blocking::new(m, n, k);
        let mut pack = vec![0.0; bl.pack_len().unwrap()];
        let run = |rows: std::ops::Range<usize>, cols: std::ops::Range<usize>, y: &mut [f32], pack: &mut [f32]| {
            // SAFETY: AVX2 checked; the block lies inside the operands and `y`.
            unsafe {
                gemm(
                    &bl,
                    rows.len(),
                    cols.len(),
                    k,
                    y.as_mut_ptr().add(rows.start * n + cols.start),
                    n as isize,
                    1,
                    false,
                    Operand { ptr: a.as_ptr().add(rows.start * k), rs: k as isize, cs: 1 },
                    Operand { ptr: b.as_ptr().add(cols.start), rs: n as isize, cs: 1 },
                    1.0,
                    1.0,
                    Addends::NONE,
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
        for k in [1, 100, 256, 320, 321, 768, 1024, 2048, 5000] {
            let kc = Blocking::new(1, 1, k).kc;
            for (m, n) in [(6, 16), (2048, 1024), (10_000, 5)] {
                let b = Blocking::new(m, n, k);
                assert_eq!(b.kc, kc);
                assert!(b.kc <= KC + KC / 4 && b.mc.is_multiple_of(MR) && b.nc.is_multiple_of(NR));
                assert!(b.mc * b.kc <= MC_VALUES + MR * b.kc && b.nc <= NC_MAX);
            }
        }
    }
}
