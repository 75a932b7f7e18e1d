//! The register tiles of the packed products: `Σ_k a[k] ⊗ b[k]` over packed
//! panels ([`sums_of`], over any [`Lanes`] vector type and tile shape), and
//! the AVX2 + FMA tile, the 6 × 16 shape of BLIS's Haswell kernel. Twelve
//! accumulators of 8 lanes, two vector loads of `b` and six broadcasts of `a`
//! per `k`: 12 FMAs for 8 loads, so the two FMA pipes stay busy from the
//! level-1 cache. The packed GEMM (`matmul/packed`, also with an AVX-512
//! tile) stores the sums through its own epilogue ([`sums`], [`sums_of`]);
//! the implicit-GEMM convolution
//! (`conv/implicit`, `conv/implicit_wgrad`) adds or writes them ([`tile`]).

/// Rows of a tile (the `a` panel's width); the panel shapes are defined on
/// every target, the tile on x86-64 only.
pub(crate) const MR: usize = 6;
/// Columns of a tile (the `b` panel's width).
pub(crate) const NR: usize = 16;
/// Steps of the tile's loop unrolled (fewer loop instructions per FMA).
const UNROLL: usize = 4;

/// The tile's sums over `kc` steps: `a` holds `kc` groups of [`MR`] values,
/// `b` `kc` groups of [`NR`]; row `i`'s 16 sums are `[i][0]` (columns 0-7)
/// and `[i][1]` (8-15), each summed over `k` in order.
///
/// # Safety
/// The CPU has AVX2 and FMA; `a`, `b` valid for `kc · MR`, `kc · NR` reads.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn sums(kc: usize, a: *const f32, b: *const f32) -> [[std::arch::x86_64::__m256; 2]; MR] {
    // SAFETY: this function's contract.
    unsafe { sums_of(kc, a, b) }
}

/// A register tile's sums `Σ_k a[k] ⊗ b[k]` over `kc` steps of packed
/// panels: `a` holds `kc` groups of `R` values, `b` `kc` groups of `C · V::N`;
/// row `i`'s sums of columns `h · V::N ..` are `[i][h]`, each summed over `k`
/// in order. Per step: `C` vector loads of `b`, `R` broadcasts of `a`, `R ·
/// C` FMAs.
///
/// # Safety
/// The CPU runs `V`'s instructions; `a`, `b` valid for `kc · R`, `kc · C ·
/// V::N` reads.
#[inline(always)]
pub(crate) unsafe fn sums_of<V: Lanes, const R: usize, const C: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
) -> [[V; C]; R] {
    let w = C * V::N;
    /// One step: `b`'s `C` vectors times each of `a`'s `R` values.
    #[inline(always)]
    unsafe fn step<V: Lanes, const R: usize, const C: usize>(acc: &mut [[V; C]; R], a: *const f32, b: *const f32) {
        // SAFETY: one group of each panel (the caller's contract).
        unsafe { fmas(acc, a, std::array::from_fn(|h| V::load(b.add(h * V::N)))) }
    }
    // SAFETY: `V`'s instructions (this function's contract); steps `0..kc`
    // read groups inside the panels' valid reads.
    unsafe {
        let mut acc = [[V::splat(0.0); C]; R];
        let mut k = 0;
        while k + UNROLL <= kc {
            for u in 0..UNROLL {
                step(&mut acc, a.add((k + u) * R), b.add((k + u) * w));
            }
            k += UNROLL;
        }
        while k < kc {
            step(&mut acc, a.add(k * R), b.add(k * w));
            k += 1;
        }
        acc
    }
}

/// [`sums_of`] over an rhs panel packed on the way: step `k`'s `C · V::N`
/// values are read from the rhs's matrix at `src + k · rs` and stored into
/// the panel at `b + k · C · V::N`, which [`sums_of`] reads for the tiles
/// after this one, so the first tile of a row of tiles packs the panels the
/// others read, its loads overlapping the FMAs instead of a packing pass of
/// their own. The source `prefetch` steps ahead is prefetched (its rows lie
/// a stride apart: the hardware's prefetchers miss them). Same sums, same
/// order, as [`sums_of`] over the packed panel.
///
/// # Safety
/// As [`sums_of`]; `src` valid for `C · V::N` reads at each of `kc` steps
/// `rs` apart, `b` for the panel's `kc · C · V::N` writes, overlapping
/// neither `a` nor the source.
#[inline(always)]
pub(crate) unsafe fn sums_packing<V: Lanes, const R: usize, const C: usize>(
    kc: usize,
    a: *const f32,
    (src, rs): (*const f32, isize),
    b: *mut f32,
    prefetch: isize,
) -> [[V; C]; R] {
    let w = C * V::N;
    // SAFETY: steps `0..kc` of the panels and the source rows (contract);
    // prefetches are hints and never fault.
    unsafe {
        let mut acc = [[V::splat(0.0); C]; R];
        for k in 0..kc {
            let row = src.offset(k as isize * rs);
            #[cfg(target_arch = "x86_64")]
            {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                let ahead = row.wrapping_offset(prefetch * rs) as *const i8;
                for line in (0..w * 4).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line));
                }
            }
            let bv: [V; C] = std::array::from_fn(|h| V::load(row.add(h * V::N)));
            for (h, v) in bv.iter().enumerate() {
                v.store(b.add(k * w + h * V::N));
            }
            fmas(&mut acc, a.add(k * R), bv);
        }
        acc
    }
}

/// One step of a tile: the rhs's `C` vectors `bv` times each of `a`'s `R`
/// values, added to the sums.
///
/// # Safety
/// The CPU runs `V`'s instructions; `a` valid for `R` reads.
#[inline(always)]
unsafe fn fmas<V: Lanes, const R: usize, const C: usize>(acc: &mut [[V; C]; R], a: *const f32, bv: [V; C]) {
    // SAFETY: this function's contract.
    unsafe {
        for (i, row) in acc.iter_mut().enumerate() {
            let ai = V::splat(*a.add(i));
            for (r, &bh) in row.iter_mut().zip(&bv) {
                *r = ai.fmadd(bh, *r);
            }
        }
    }
}

/// The vector operations of the register tiles, over one register of f32
/// lanes (`__m256` with AVX2 + FMA, `__m512` with AVX-512F). Every method
/// asks that the CPU runs the type's instructions, and `load` and `store`
/// that `p` is valid for `N` values.
pub(crate) trait Lanes: Copy {
    /// f32 values of the register.
    const N: usize;
    /// # Safety
    /// See the trait.
    unsafe fn load(p: *const f32) -> Self;
    /// # Safety
    /// See the trait.
    unsafe fn store(self, p: *mut f32);
    /// # Safety
    /// See the trait.
    unsafe fn add(self, o: Self) -> Self;
    /// # Safety
    /// See the trait.
    unsafe fn mul(self, o: Self) -> Self;
    /// `self · b + c`, rounded once.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn fmadd(self, b: Self, c: Self) -> Self;
    /// # Safety
    /// See the trait.
    unsafe fn splat(v: f32) -> Self;
}

/// [`Lanes`] for a vector type from its intrinsics.
macro_rules! lanes {
    ($v:ty, $n:expr, $load:ident, $store:ident, $add:ident, $mul:ident, $fmadd:ident, $set1:ident) => {
        #[cfg(target_arch = "x86_64")]
        impl Lanes for $v {
            const N: usize = $n;
            #[inline(always)]
            unsafe fn load(p: *const f32) -> Self {
                // SAFETY: the trait's contract.
                unsafe { std::arch::x86_64::$load(p) }
            }
            #[inline(always)]
            unsafe fn store(self, p: *mut f32) {
                // SAFETY: the trait's contract.
                unsafe { std::arch::x86_64::$store(p, self) }
            }
            #[inline(always)]
            unsafe fn add(self, o: Self) -> Self {
                // SAFETY: the trait's contract.
                unsafe { std::arch::x86_64::$add(self, o) }
            }
            #[inline(always)]
            unsafe fn mul(self, o: Self) -> Self {
                // SAFETY: the trait's contract.
                unsafe { std::arch::x86_64::$mul(self, o) }
            }
            #[inline(always)]
            unsafe fn fmadd(self, b: Self, c: Self) -> Self {
                // SAFETY: the trait's contract.
                unsafe { std::arch::x86_64::$fmadd(self, b, c) }
            }
            #[inline(always)]
            unsafe fn splat(v: f32) -> Self {
                // SAFETY: the trait's contract.
                unsafe { std::arch::x86_64::$set1(v) }
            }
        }
    };
}
lanes!(
    std::arch::x86_64::__m256,
    8,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_add_ps,
    _mm256_mul_ps,
    _mm256_fmadd_ps,
    _mm256_set1_ps
);
lanes!(
    std::arch::x86_64::__m512,
    16,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_add_ps,
    _mm512_mul_ps,
    _mm512_fmadd_ps,
    _mm512_set1_ps
);

/// `C (+)= A · B` over `kc` steps ([`sums`]); row `i` of `C` starts at
/// `c + i · ldc`, its 16 values contiguous. `add`: add to `C`, else
/// overwrite it.
///
/// # Safety
/// The CPU has AVX2 and FMA; `a`, `b` valid for `kc · MR`, `kc · NR` reads;
/// `C`'s six rows valid for 16 reads and writes each.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn tile(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
    use std::arch::x86_64::*;
    // SAFETY: this function's contract is `sums`'s, then rows `0..MR` of `C`,
    // each valid for 16 reads and writes.
    unsafe {
        let acc = sums(kc, a, b);
        for (i, row) in acc.iter().enumerate() {
            let p = c.add(i * ldc);
            for (h, &v) in row.iter().enumerate() {
                let v = if add { _mm256_add_ps(_mm256_loadu_ps(p.add(8 * h)), v) } else { v };
                _mm256_storeu_ps(p.add(8 * h), v);
            }
        }
    }
}
