//! `MatMul` with numpy `matmul` semantics and its gradients `MatMulLhsGrad`
//! (`g @ bᵀ` reduced to `a`'s shape) and `MatMulRhsGrad` (`aᵀ @ g` reduced to
//! `b`'s shape); `MatMulRhsBiasGrad` adds `g`'s column sums (a bias's
//! gradient), which the packed GEMM takes from the panels it packs of `g`.
//!
//! The factory turns an op into a list of GEMM calls over fixed offsets and
//! strides (transposes are stride swaps, never copies). When the rhs has no
//! batch dims the batch is folded into one call: `[B, m, k] @ [k, n]` is one
//! `(B·m) × k × n` GEMM, and its rhs gradient one `k × (B·m) × n` GEMM that also
//! performs the batch reduction. Float types run on the `gemm` crate, float32
//! products also on the packed GEMM of [`packed`] (every product of 128 rows
//! and columns or more on AVX2 CPUs, the weight gradients on Intel's AVX-512
//! ones); integer types on a straightforward loop.

use gemm::Parallelism;
use half::f16;
use popart_ir::ops::broadcast_shapes;

use super::broadcast::Broadcast;
use super::dispatch::with_num;
use super::elem::Num;
use super::par::{self, par_split, Simd};
use super::ptr::{slice, slice_mut, SendPtr};
use super::scratch;
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};
use crate::team;
use gemv::RowProduct;
use packed::{Blocking, Tiling};
use popart_ir::ops::all as ir;
use popart_ir::ops::var_update::ScaledAddMatMulAttrs;
use std::ops::Range;

mod gemv;
pub(super) mod packed;

/// Multiply-adds from which one GEMM call is split over the worker team.
pub(super) const GEMM_PAR_MIN: usize = 1 << 18;

/// Multiply-adds from which a one-row product ([`gemv`]) is split over the
/// team (a batch of them, their calls): it reads each matrix element once,
/// so splitting its columns (or the batch) splits the memory traffic, which
/// pays from a smaller size than a GEMM's (the decode program's attention:
/// four heads of `[1, 64] x [64, 128]`, their caches read from level 3).
const GEMV_PAR_MIN: usize = 1 << 15;

/// Rows and columns from which a float32 product runs [`packed::gemm`] on
/// AVX2 CPUs: below, packing the whole rhs for a few rows, or padding a few
/// columns to the tile's 16, cost more than `gemm`'s unpacked paths (the
/// MNIST products of batch 8 measured 0.57x, `[128, 512] @ [512, 10]`
/// 0.5-0.7x; from 128 rows and columns level or faster).
const PACKED_MIN: usize = 128;

/// Element types a GEMM can run on.
pub(crate) trait MatElem: Copy + Send + Sync + 'static {
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// From an attribute value.
    fn from_f64(v: f64) -> Self;
    /// Product.
    fn times(self, o: Self) -> Self;
    /// `self + o` (wrapping for integers).
    fn plus(self, o: Self) -> Self;
    /// `dst = alpha · dst + beta · lhs @ rhs` when `read_dst`, else `dst = beta · lhs @ rhs`,
    /// with element strides (rs: row stride, cs: column stride).
    ///
    /// # Safety
    /// Every pointer must be valid for the addressed elements; `dst` must not overlap the operands.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        n: usize,
        k: usize,
        dst: *mut Self,
        dst_rs: isize,
        dst_cs: isize,
        read_dst: bool,
        lhs: *const Self,
        lhs_rs: isize,
        lhs_cs: isize,
        rhs: *const Self,
        rhs_rs: isize,
        rhs_cs: isize,
        alpha: Self,
        beta: Self,
    );

    /// Whether this type has the row-vector loops ([`Self::row_product`]).
    const ROW_LOOPS: bool = false;

    /// Run `p` as a [`RowProduct`] if this type has the row-vector loops
    /// (f32, f64); false if not, and nothing is written.
    ///
    /// # Safety
    /// As [`RowProduct::run`].
    #[inline]
    unsafe fn row_product(_p: &RowProduct<Self>, _dst: *mut Self, _lhs: *const Self, _rhs: *const Self) -> bool {
        false
    }

    /// Whether this type has the packed GEMM ([`packed::gemm`], f32).
    const PACKED: bool = false;

    /// [`Self::gemm`] through the packed GEMM with blocking `bl` and the
    /// packing buffer `pack` of at least [`Blocking::pack_len`] f32 values,
    /// then `add`'s bias row (`n` values) and residual (at `dst`'s strides)
    /// added where not null, and the rhs's column sums written to `sums`
    /// (`n` values) where not null, if this type has it ([`Self::PACKED`]);
    /// false if not, and nothing is written.
    ///
    /// # Safety
    /// As [`Self::gemm`]; the CPU runs AVX2 and FMA (and AVX-512F for
    /// [`Tiling::Avx512`]'s blocking); the addends are valid for
    /// their elements; `pack` overlaps nothing else the call touches.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    unsafe fn packed_gemm(
        _bl: &Blocking,
        _m: usize,
        _n: usize,
        _k: usize,
        _dst: *mut Self,
        _dst_s: (isize, isize),
        _read_dst: bool,
        _lhs: (*const Self, isize, isize),
        _rhs: (*const Self, isize, isize),
        _alpha: Self,
        _beta: Self,
        _add: (*const Self, *const Self),
        _sums: *mut Self,
        _pack: &mut [u64],
    ) -> bool {
        false
    }
}

macro_rules! gemm_elem {
    ($($t:ty => $one:expr, $zero:expr, $from:expr $(, $rows:ident $(, $packed:ident)?)?;)*) => {$(
        impl MatElem for $t {
            $(
            // Defined where the row loops are (the `$rows` entry point given).
            const ROW_LOOPS: bool = {
                let _ = stringify!($rows);
                true
            };
            #[inline]
            unsafe fn $rows(p: &RowProduct<Self>, dst: *mut Self, lhs: *const Self, rhs: *const Self) -> bool {
                // SAFETY: this function's contract is `run`'s.
                unsafe { p.run(dst, lhs, rhs) };
                true
            }
            $(
            // Defined where the packed GEMM is (the `$packed` entry point given).
            const PACKED: bool = {
                let _ = stringify!($packed);
                cfg!(target_arch = "x86_64")
            };
            #[inline]
            unsafe fn $packed(
                bl: &Blocking,
                m: usize,
                n: usize,
                k: usize,
                dst: *mut Self,
                dst_s: (isize, isize),
                read_dst: bool,
                lhs: (*const Self, isize, isize),
                rhs: (*const Self, isize, isize),
                alpha: Self,
                beta: Self,
                add: (*const Self, *const Self),
                sums: *mut Self,
                pack: &mut [u64],
            ) -> bool {
                #[cfg(target_arch = "x86_64")]
                {
                    // SAFETY: a `u64` holds two `f32`s, at an alignment `f32` accepts.
                    let pack = unsafe { std::slice::from_raw_parts_mut(pack.as_mut_ptr() as *mut f32, pack.len() * 2) };
                    let lhs = packed::Operand::matrix(lhs.0, lhs.1, lhs.2);
                    let rhs = packed::Operand::matrix(rhs.0, rhs.1, rhs.2);
                    let dst = packed::Dst::matrix(dst, dst_s.0, dst_s.1);
                    let add = packed::Addends { bias: add.0, residual: add.1 };
                    // SAFETY: this function's contract is `packed::gemm`'s.
                    unsafe { packed::gemm(bl, m, n, k, dst, read_dst, lhs, rhs, alpha, beta, add, sums, pack) };
                    true
                }
                #[cfg(not(target_arch = "x86_64"))]
                false
            }
            )?
            )?
            const ZERO: Self = $zero;
            const ONE: Self = $one;
            #[inline]
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
            #[inline]
            fn times(self, o: Self) -> Self {
                self * o
            }
            #[inline]
            fn plus(self, o: Self) -> Self {
                self + o
            }
            #[inline]
            unsafe fn gemm(
                m: usize, n: usize, k: usize,
                dst: *mut Self, dst_rs: isize, dst_cs: isize, read_dst: bool,
                lhs: *const Self, lhs_rs: isize, lhs_cs: isize,
                rhs: *const Self, rhs_rs: isize, rhs_cs: isize,
                alpha: Self, beta: Self,
            ) {
                // SAFETY: `gemm::gemm` asks what this function's contract guarantees:
                // pointers valid for the addressed elements, `dst` overlapping no
                // operand (its strides are given column first).
                unsafe {
                    gemm::gemm(
                        m, n, k, dst, dst_cs, dst_rs, read_dst, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs,
                        alpha, beta, false, false, false, Parallelism::None,
                    );
                }
            }
        }
    )*};
}
gemm_elem! {
    f32 => 1.0, 0.0, |v: f64| v as f32, row_product, packed_gemm;
    f64 => 1.0, 0.0, |v: f64| v, row_product;
    f16 => f16::ONE, f16::ZERO, f16::from_f64;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl MatElem for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn times(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn plus(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            unsafe fn gemm(
                m: usize, n: usize, k: usize,
                dst: *mut Self, dst_rs: isize, dst_cs: isize, read_dst: bool,
                lhs: *const Self, lhs_rs: isize, lhs_cs: isize,
                rhs: *const Self, rhs_rs: isize, rhs_cs: isize,
                alpha: Self, beta: Self,
            ) {
                // SAFETY: `naive_gemm`'s contract is this function's.
                unsafe {
                    naive_gemm(
                        m, n, k, dst, dst_rs, dst_cs, read_dst, lhs, lhs_rs, lhs_cs, rhs, rhs_rs, rhs_cs, alpha, beta,
                    );
                }
            }
        }
    )*};
}
int_elem!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Integer GEMM (wrapping arithmetic).
///
/// # Safety
/// As [`MatElem::gemm`].
#[allow(clippy::too_many_arguments)]
unsafe fn naive_gemm<T: Num>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_rs: isize,
    dst_cs: isize,
    read_dst: bool,
    lhs: *const T,
    lhs_rs: isize,
    lhs_cs: isize,
    rhs: *const T,
    rhs_rs: isize,
    rhs_cs: isize,
    alpha: T,
    beta: T,
) {
    for i in 0..m as isize {
        for j in 0..n as isize {
            // SAFETY: `(i, j)` is an element of the `m × n` result, `(i, p)` of the
            // `m × k` lhs and `(p, j)` of the `k × n` rhs, all addressed through
            // their strides (this function's contract); `dst` overlaps neither.
            unsafe {
                let d = dst.offset(i * dst_rs + j * dst_cs);
                let mut acc = T::ZERO;
                for p in 0..k as isize {
                    acc = acc.add((*lhs.offset(i * lhs_rs + p * lhs_cs)).mul(*rhs.offset(p * rhs_rs + j * rhs_cs)));
                }
                acc = acc.mul(beta);
                *d = if read_dst { alpha.mul(*d).add(acc) } else { acc };
            }
        }
    }
}

/// One GEMM call: element offsets into dst/lhs/rhs; `accumulate` adds to dst.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Job {
    dst: usize,
    lhs: usize,
    rhs: usize,
    accumulate: bool,
}

/// Every GEMM call of one op, fixed at build time.
#[derive(Clone, Debug)]
struct GemmPlan {
    m: usize,
    n: usize,
    k: usize,
    /// (row, column) strides of dst, lhs and rhs.
    dst_s: (isize, isize),
    lhs_s: (isize, isize),
    rhs_s: (isize, isize),
    jobs: Vec<Job>,
    /// Input positions of the lhs and rhs operands.
    lhs_pos: usize,
    rhs_pos: usize,
    /// Output elements (zeroed when no call writes them: empty reduction).
    out_len: usize,
}

/// `MatMulAdd`'s addends: the bias row and the optional residual (null when
/// absent); and `MatMulRhsBiasGrad`'s second output, the rhs's column sums
/// (null for the other ops), which the packed GEMM writes as it packs the rhs.
struct Addends<T> {
    bias: *const T,
    residual: *const T,
    sums: *mut T,
}

impl<T> Clone for Addends<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Addends<T> {}

// SAFETY: read-only pointers into the kernel's inputs, shared by its tasks
// (as `SendPtr`), which only read them.
unsafe impl<T> Send for Addends<T> {}
// SAFETY: as for `Send`.
unsafe impl<T> Sync for Addends<T> {}

struct MatMulKernel<T> {
    plan: GemmPlan,
    /// `MatMulAdd`: input position of the row vector added to every result row.
    bias_pos: Option<usize>,
    /// `MatMulAdd`'s optional residual: input position of the tensor of the
    /// result's shape added after the bias.
    residual_pos: Option<usize>,
    /// `ScaledAddMatMulRhsGradInplace`: `dst = a · dst + b · product`, as (a, b).
    update: Option<(T, T)>,
    /// `MatMulRhsBiasGrad`: output position of the rhs's (`g`'s) column sums,
    /// `n` values each summed from 0 over the `k` rows in order (the one
    /// job's: the weight has no batch dims).
    sums_pos: Option<usize>,
    zero_fill: bool,
    jobs_independent: bool,
    /// The product has one row, with operand strides [`gemv`] takes: its
    /// calls (and every column block of them) run as [`RowProduct`]s.
    one_row: bool,
    /// Rows per piece of a one-row product's matrix ([`gemv::piece_rows`]).
    piece_rows: usize,
    /// The pieces' sums of a split one-row product cut into pieces (the
    /// shared scratch slot, grown at build time to the pieces × `n` values).
    parts: Option<scratch::Slot>,
    /// A split GEMM reading an operand transposed cuts its columns whenever
    /// they give every thread a block (set where `gemm` runs its AVX-512
    /// microkernels for this product; see [`Self::call_split`]).
    transposed_by_cols: bool,
    /// The blocking of [`packed::gemm`] where this product runs it (f32 on
    /// CPUs whose widest tier is AVX2, and weight gradients on Intel's AVX-512
    /// CPUs), and the packing buffers of its pieces
    /// (one scratch slot per thread, grown at build time).
    packed: Option<Blocking>,
    packs: Vec<scratch::Slot>,
    _t: Types<T>,
}

impl<T: MatElem> MatMulKernel<T> {
    /// One GEMM call of the plan, single-threaded.
    ///
    /// # Safety
    /// As [`Self::block`], for the whole `m × n` result of `j`.
    #[inline]
    unsafe fn call(&self, j: &Job, dst: *mut T, lhs: *const T, rhs: *const T, add: Addends<T>) {
        let p = &self.plan;
        // SAFETY: this function's contract, over all rows and columns.
        unsafe { self.block(j, dst, lhs, rhs, add, 0..p.m, 0..p.n, 0) };
    }

    /// Rows `rows` and columns `cols` of one GEMM call's result (`add`: the
    /// `MatMulAdd` row vector and residual, added to the block right after its
    /// product, while the block is in cache: the values are exactly those of
    /// `MatMul` then `Add`s).
    ///
    /// # Safety
    /// `dst`, `lhs` and `rhs` are the kernel's output and operands, which the
    /// plan's jobs address inside (built from their shapes), and `add` the
    /// `n`-element row vector when `bias_pos` is set and the residual of the
    /// output's layout when `residual_pos` is; `rows` lies in `0..m` and
    /// `cols` in `0..n`; this block of `j`'s result is touched by no one else
    /// during the call, and the output overlaps no operand. `piece` picks the
    /// packing buffer (any value: pieces sharing one take turns).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn block(
        &self,
        j: &Job,
        dst: *mut T,
        lhs: *const T,
        rhs: *const T,
        add: Addends<T>,
        rows: Range<usize>,
        cols: Range<usize>,
        piece: usize,
    ) {
        let p = &self.plan;
        let (r0, c0) = (rows.start as isize, cols.start as isize);
        let (read_dst, alpha, beta) = self.scales(j);
        // SAFETY: job `j`'s offsets and the plan's strides address its `m × n`
        // result, `m × k` lhs and `k × n` rhs inside the buffers, of which this is
        // the `rows × cols` block; the output overlaps no operand (this function's
        // contract).
        unsafe {
            let d = dst.add(j.dst).offset(r0 * p.dst_s.0 + c0 * p.dst_s.1);
            let l = lhs.add(j.lhs).offset(r0 * p.lhs_s.0);
            let r = rhs.add(j.rhs).offset(c0 * p.rhs_s.1);
            let row = self.one_row.then(|| RowProduct {
                n: cols.len(),
                k: p.k,
                dst_cs: p.dst_s.1,
                rhs_s: p.rhs_s,
                alpha,
                beta,
                read_dst,
                piece_rows: self.piece_rows,
            });
            if !row.is_some_and(|row| T::row_product(&row, d, l, r)) {
                let (m, n, (drs, dcs), (lrs, lcs), (rrs, rcs)) = (rows.len(), cols.len(), p.dst_s, p.lhs_s, p.rhs_s);
                let done = match (&self.packed, self.packs.get(piece % self.packs.len().max(1))) {
                    (Some(bl), Some(slot)) => {
                        // The addends go into the tiles' stores.
                        let bias = if self.bias_pos.is_some() { add.bias.add(cols.start) } else { std::ptr::null() };
                        let residual = match self.residual_pos {
                            Some(_) => add.residual.add(j.dst).offset(r0 * drs + c0 * dcs),
                            None => std::ptr::null(),
                        };
                        // The column sums from the blocks of the first rows (each
                        // column in one of them).
                        let sums = match rows.start {
                            0 if !add.sums.is_null() => add.sums.add(cols.start),
                            _ => std::ptr::null_mut(),
                        };
                        let mut pack = slot.lock().unwrap_or_else(|e| e.into_inner());
                        let (lhs, rhs, add) = ((l, lrs, lcs), (r, rrs, rcs), (bias, residual));
                        T::packed_gemm(bl, m, n, p.k, d, p.dst_s, read_dst, lhs, rhs, alpha, beta, add, sums, &mut pack)
                    }
                    _ => false,
                };
                if done {
                    return;
                }
                T::gemm(m, n, p.k, d, drs, dcs, read_dst, l, lrs, lcs, r, rrs, rcs, alpha, beta);
            }
        }
        // SAFETY: this function's contract.
        unsafe { self.add_bias(j, dst, add, rows, cols) };
    }

    /// `(read_dst, alpha, beta)` of job `j`'s products: `dst = alpha · dst +
    /// beta · product` when `read_dst`, else `beta · product`.
    fn scales(&self, j: &Job) -> (bool, T, T) {
        match self.update {
            None => (j.accumulate, T::ONE, T::ONE),
            // The first product into a block scales the old value by `a`; later ones add.
            Some((a, b)) => (true, if j.accumulate { T::ONE } else { a }, b),
        }
    }

    /// `MatMulAdd`'s bias (then residual) added to a block of job `j`'s result.
    /// Forward jobs never accumulate (`build`), so each block gets them once.
    ///
    /// # Safety
    /// As [`Self::block`].
    #[inline]
    unsafe fn add_bias(&self, j: &Job, dst: *mut T, add: Addends<T>, rows: Range<usize>, cols: Range<usize>) {
        let p = &self.plan;
        if self.bias_pos.is_some() {
            // SAFETY: with `bias_pos` set, `add.bias` holds `n` elements and `cols`
            // lies in `0..n`; with `residual_pos` set, `add.residual` has the
            // output's layout (forward: unit column stride); the rows are those of
            // this block, this call's alone.
            unsafe {
                let b = slice(add.bias.add(cols.start), cols.len());
                for r in rows {
                    let at = j.dst as isize + r as isize * p.dst_s.0 + cols.start as isize * p.dst_s.1;
                    let row = slice_mut(dst.offset(at), cols.len());
                    row.iter_mut().zip(b).for_each(|(y, &v)| *y = y.plus(v));
                    if self.residual_pos.is_some() {
                        let res = slice(add.residual.offset(at), cols.len());
                        row.iter_mut().zip(res).for_each(|(y, &v)| *y = y.plus(v));
                    }
                }
            }
        }
    }

    /// A one-row product whose matrix is cut into pieces of contiguous rows
    /// ([`gemv::piece_rows`]), split over the team: each task sums one piece
    /// (over a block of columns when the threads outnumber the pieces) into
    /// the shared scratch, then the pieces' sums are added in order and
    /// stored: the values [`RowProduct`] gives on one thread.
    ///
    /// # Safety
    /// As [`Self::call`]; `parts` is [`Self::parts`], grown to the pieces × `n`
    /// values.
    #[allow(clippy::too_many_arguments)]
    unsafe fn pieces_split(
        &self,
        j: &Job,
        d: SendPtr<T>,
        l: SendPtr<T>,
        r: SendPtr<T>,
        b: Addends<T>,
        threads: usize,
        parts: &scratch::Slot,
    ) {
        let p = &self.plan;
        let (n, k, rows) = (p.n, p.k, self.piece_rows);
        let pieces = k.div_ceil(rows);
        let width = n.div_ceil(threads.div_ceil(pieces)).next_multiple_of(16);
        let blocks = n.div_ceil(width);
        let mut guard = parts.lock().unwrap_or_else(|e| e.into_inner());
        let sums = SendPtr(guard.as_mut_ptr() as *mut T);
        team::run(pieces * blocks, &|t| {
            let (i, c) = (t % pieces, t / pieces);
            let (p0, c0) = (i * rows, c * width);
            let (kp, w) = ((p0 + rows).min(k) - p0, (c0 + width).min(n) - c0);
            let one = RowProduct {
                n: w,
                k: kp,
                dst_cs: 1,
                rhs_s: p.rhs_s,
                alpha: T::ONE,
                beta: T::ONE,
                read_dst: false,
                piece_rows: kp,
            };
            // SAFETY: rows `p0..p0 + kp` and columns `c0..c0 + w` of job `j`'s
            // `k × n` matrix (contiguous rows) and elements `p0..p0 + kp` of its
            // row (unit stride, `gemv::applies`), into piece `i`'s `n` sums at
            // columns `c0..`: each task its own block of the scratch, which holds
            // pieces × `n` values (contract).
            unsafe {
                let lhs = l.get().add(j.lhs + p0);
                let rhs = r.get().add(j.rhs).offset(p0 as isize * p.rhs_s.0 + c0 as isize);
                T::row_product(&one, sums.get().add(i * n + c0), lhs, rhs);
            }
        });
        let (read_dst, alpha, beta) = self.scales(j);
        // SAFETY: the pieces' sums are written (the team is done); the result's
        // one row holds `n` elements at column stride `dst_s.1` from job `j`'s
        // offset, this call's alone (contract).
        unsafe {
            let all = slice(sums.get() as *const T, pieces * n);
            let dst = d.get().add(j.dst);
            for col in 0..n {
                let mut t = all[col];
                for i in 1..pieces {
                    t = t.plus(all[i * n + col]);
                }
                let y = dst.offset(col as isize * p.dst_s.1);
                *y = if read_dst { alpha.times(*y).plus(beta.times(t)) } else { beta.times(t) };
            }
            self.add_bias(j, d.get(), b, 0..1, 0..n);
        }
        drop(guard);
    }

    /// One GEMM call split over the worker team: the column range when an
    /// operand is read transposed, the columns make a block per thread and
    /// `gemm` runs AVX-512, else the larger of the row and column ranges, is
    /// cut into one block per thread (multiples of 16), each block a
    /// single-threaded GEMM.
    ///
    /// # Safety
    /// As [`Self::call`].
    unsafe fn call_split(&self, j: &Job, d: SendPtr<T>, l: SendPtr<T>, r: SendPtr<T>, b: Addends<T>, threads: usize) {
        let p = &self.plan;
        if let Some(parts) = &self.parts {
            // SAFETY: this function's contract; `parts` was grown for this product.
            return unsafe { self.pieces_split(j, d, l, r, b, threads, parts) };
        }
        // On AVX-512 a product reading an operand transposed (the gradients')
        // splits its columns whenever they give every thread a block: measured
        // 6-10% faster on the gpt example's data and weight gradients, where
        // splitting the rows has every thread pack the transposed operand
        // whole. With `gemm`'s AVX2 microkernels the same rule is 1.1-1.15x
        // slower on the [1024, 2048] x [2048, 256] weight gradient and level
        // elsewhere, so there (and in the forward) the larger of the two splits.
        let transposed = self.transposed_by_cols && (p.lhs_s.1 != 1 || p.rhs_s.1 != 1);
        let by_rows = p.m > p.n && !(transposed && p.n >= 16 * threads);
        let len = if by_rows { p.m } else { p.n };
        let block = len.div_ceil(threads).next_multiple_of(16);
        let pieces = len.div_ceil(block);
        if pieces < 2 {
            // SAFETY: this function's contract.
            return unsafe { self.call(j, d.get(), l.get(), r.get(), b) };
        }
        team::run(pieces, &|i| {
            let part = i * block..((i + 1) * block).min(len);
            let (rows, cols) = if by_rows { (part, 0..p.n) } else { (0..p.m, part) };
            // SAFETY: blocks write disjoint parts of the result.
            unsafe { self.block(j, d.get(), l.get(), r.get(), b, rows, cols, i) };
        });
    }
}

impl<T: MatElem> Kernel for MatMulKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let p = &self.plan;
        let dst = args.outputs[0] as *mut T;
        let bias = self.bias_pos.map_or(std::ptr::null(), |i| args.inputs[i] as *const T);
        let residual = self.residual_pos.map_or(std::ptr::null(), |i| args.inputs[i] as *const T);
        // The packed GEMM writes the column sums as it packs; without it, a pass after the product.
        let sums_out = self.sums_pos.map_or(std::ptr::null_mut(), |i| args.outputs[i] as *mut T);
        let sums = if self.packed.is_some() { sums_out } else { std::ptr::null_mut() };
        let add = Addends { bias, residual, sums };
        if self.zero_fill {
            if !sums_out.is_null() {
                // SAFETY: the sums output holds `n` elements.
                unsafe { slice_mut(sums_out, p.n) }.fill(T::ZERO);
            }
            // SAFETY: the output holds `out_len` elements and overlaps no input (the
            // `KernelArgs` contract).
            let out = unsafe { slice_mut(dst, p.out_len) };
            match (self.update, self.bias_pos) {
                // An empty product: the update only scales.
                (Some((a, _)), _) => out.iter_mut().for_each(|v| *v = v.times(a)),
                (None, Some(_)) => {
                    // SAFETY: the `MatMulAdd` bias is a row vector of `n` elements.
                    let b = unsafe { slice(bias, p.n) };
                    out.chunks_mut(p.n.max(1)).for_each(|row| row.copy_from_slice(&b[..row.len()]));
                    if self.residual_pos.is_some() {
                        // SAFETY: the residual has the output's `out_len` elements.
                        let r = unsafe { slice(residual, p.out_len) };
                        out.iter_mut().zip(r).for_each(|(y, &v)| *y = y.plus(v));
                    }
                }
                (None, None) => out.fill(T::ZERO),
            }
            return Ok(());
        }
        let lhs = args.inputs[p.lhs_pos] as *const T;
        let rhs = args.inputs[p.rhs_pos] as *const T;
        let work = p.m * p.n * p.k;
        let threads = team::num_threads();
        let (d, l, r, b) = (SendPtr(dst), SendPtr(lhs as *mut T), SendPtr(rhs as *mut T), add);
        let par_min = if self.one_row { GEMV_PAR_MIN } else { GEMM_PAR_MIN };
        if threads > 1 && self.jobs_independent && p.jobs.len() >= threads && work * p.jobs.len() >= par_min {
            // Many independent products: whole calls per task.
            if self.packed.is_some() {
                // One run of calls per thread, each with its packing buffer.
                let per = p.jobs.len().div_ceil(threads);
                team::run(p.jobs.len().div_ceil(per), &|t| {
                    for j in &p.jobs[t * per..((t + 1) * per).min(p.jobs.len())] {
                        // SAFETY: independent jobs write disjoint output blocks.
                        unsafe { self.block(j, d.get(), l.get(), r.get(), b, 0..p.m, 0..p.n, t) };
                    }
                });
                return Ok(());
            }
            par_split(p.jobs.len(), 2, 1, |range| {
                for j in &p.jobs[range] {
                    // SAFETY: independent jobs write disjoint output blocks.
                    unsafe { self.call(j, d.get(), l.get(), r.get(), b) };
                }
            });
            return Ok(());
        }
        for j in &p.jobs {
            // SAFETY: the buffers are the kernel's output and operands, which the
            // plan was built for, the output overlapping no input (the `KernelArgs`
            // contract); jobs run one after another, each over its whole result.
            unsafe {
                if threads > 1 && work >= par_min {
                    self.call_split(j, d, l, r, b, threads);
                } else {
                    self.call(j, dst, lhs, rhs, add);
                }
            }
        }
        if !sums_out.is_null() && sums.is_null() {
            // SAFETY: the rhs is the plan's one job's `k × n` matrix of row stride
            // `rhs_s.0` and unit column stride (`build`), the sums output `n` values.
            unsafe { column_sums(p.k, p.n, p.rhs_s.0, rhs, sums_out) };
        }
        Ok(())
    }
}

/// `sums[j] = Σ_p rhs[p, j]` over the `k` rows in order, from 0 (the values
/// the packed GEMM's sums take), split over the team by columns.
///
/// # Safety
/// `rhs` holds `k` rows of `n` values at row stride `rs` (unit column
/// stride), `sums` `n` values overlapping it nowhere.
unsafe fn column_sums<T: MatElem>(k: usize, n: usize, rs: isize, rhs: *const T, sums: *mut T) {
    let (r, s) = (SendPtr(rhs as *mut T), SendPtr(sums));
    let min_cols = (par::PAR_MIN_ELEMS / k.max(1)).max(1);
    par_split(n, min_cols, 16, |cols| {
        // Blocks of 64 columns: their sums in registers over the rows.
        for c0 in cols.clone().step_by(64) {
            let w = 64.min(cols.end - c0);
            let mut acc = [T::ZERO; 64];
            for p in 0..k {
                // SAFETY: row `p`'s columns `c0..c0 + w` (contract).
                let row = unsafe { slice(r.get().offset(p as isize * rs).add(c0), w) };
                acc.iter_mut().zip(row).for_each(|(a, &v)| *a = a.plus(v));
            }
            // SAFETY: sums `c0..c0 + w`, this task's alone (contract).
            unsafe { slice_mut(s.get().add(c0), w) }.copy_from_slice(&acc[..w]);
        }
    });
}

/// numpy promotion of a matmul operand to at least 2-D: (batch dims, rows, cols).
fn promote(shape: &[usize], is_lhs: bool) -> (Vec<usize>, usize, usize) {
    match shape.len() {
        0 => (vec![], 1, 1),
        1 if is_lhs => (vec![], 1, shape[0]),
        1 => (vec![], shape[0], 1),
        r => (shape[..r - 2].to_vec(), shape[r - 2], shape[r - 1]),
    }
}

/// For every output batch index, the (lhs batch, rhs batch) indices.
fn batch_pairs(ob: &[usize], ab: &[usize], bb: &[usize]) -> Option<Vec<(usize, usize)>> {
    let plan = Broadcast::new(ob, [ab, bb])?;
    let nb: usize = ob.iter().product();
    let mut v = Vec::with_capacity(nb);
    let [sa, sb] = plan.inner_strides();
    plan.for_segments(0..nb, |_, [ia, ib], len| {
        for i in 0..len {
            v.push((ia + i * sa, ib + i * sb));
        }
    });
    Some(v)
}

/// Build `MatMul`, `MatMulLhsGrad`, `MatMulRhsGrad` and `ScaledAddMatMulRhsGradInplace`
/// (the rhs gradient accumulated into input 2, which output 0 aliases).
pub(crate) fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let update = if spec.is::<ir::ScaledAddMatMulRhsGradInplace>() {
        let ScaledAddMatMulAttrs { a, b } = spec.typed()?;
        if !spec.input(2)?.dtype().is_floating_point() {
            return Err(spec.unsupported_dtype(spec.input(2)?.dtype()));
        }
        Some((a, b))
    } else {
        None
    };
    let fwd = spec.is::<ir::MatMul>() || spec.is::<ir::MatMulAdd>();
    let (a, b) = if fwd { (spec.input(0)?, spec.input(1)?) } else { (spec.input(1)?, spec.input(2)?) };
    let g = if fwd { None } else { Some(spec.input(0)?) };
    let y = spec.output(0)?;
    let dt = a.dtype();
    if b.dtype() != dt || y.dtype() != dt || g.is_some_and(|g| g.dtype() != dt) {
        return Err(spec.error("operands and result must have the same dtype"));
    }
    if a.info.rank() == 0 || b.info.rank() == 0 {
        return Err(spec.error("matmul operands must have rank >= 1"));
    }
    let (ab, m, k) = promote(a.shape(), true);
    let (bb, k2, n) = promote(b.shape(), false);
    if k != k2 {
        return Err(spec.error(format!("inner dimensions differ: {:?} @ {:?}", a.shape(), b.shape())));
    }
    let ob = broadcast_shapes(&ab, &bb).ok_or_else(|| spec.error("batch dimensions do not broadcast"))?;
    let nb: usize = ob.iter().product();
    let mut out_shape = ob.clone();
    if a.info.rank() > 1 {
        out_shape.push(m);
    }
    if b.info.rank() > 1 {
        out_shape.push(n);
    }
    let (want_y, g_ok) = match g {
        None => (out_shape.clone(), true),
        Some(g) => {
            let want = if spec.is::<ir::MatMulLhsGrad>() { a.shape() } else { b.shape() };
            (want.to_vec(), g.nelms() == out_shape.iter().product::<usize>())
        }
    };
    if y.shape() != want_y.as_slice() || !g_ok {
        return Err(spec.error(format!("result {} does not match {:?} @ {:?}", y.info, a.shape(), b.shape())));
    }
    let (mk, kn, mn) = (m * k, k * n, m * n);
    let rhs_unbatched = bb.iter().product::<usize>() == 1;
    let (ki, ni) = (k as isize, n as isize);
    let pairs = if rhs_unbatched {
        Vec::new()
    } else {
        batch_pairs(&ob, &ab, &bb).ok_or_else(|| spec.error("batch dims do not broadcast"))?
    };
    // Accumulate flags: the first job writing a dst block overwrites it.
    let mut seen = Vec::new();
    let mut first_write = |idx: usize| {
        if seen.len() <= idx {
            seen.resize(idx + 1, false);
        }
        !std::mem::replace(&mut seen[idx], true)
    };
    let plan = match () {
        _ if fwd => {
            let (m_eff, jobs) = if rhs_unbatched {
                (nb * m, vec![Job { dst: 0, lhs: 0, rhs: 0, accumulate: false }])
            } else {
                let jobs = pairs
                    .iter()
                    .enumerate()
                    .map(|(i, &(ia, ib))| Job { dst: i * mn, lhs: ia * mk, rhs: ib * kn, accumulate: false })
                    .collect();
                (m, jobs)
            };
            GemmPlan {
                m: m_eff,
                n,
                k,
                dst_s: (ni, 1),
                lhs_s: (ki, 1),
                rhs_s: (ni, 1),
                jobs,
                lhs_pos: a.pos,
                rhs_pos: b.pos,
                out_len: y.nelms(),
            }
        }
        _ if spec.is::<ir::MatMulLhsGrad>() => {
            // dA[m, k] = g[m, n] @ bᵀ[n, k]; bᵀ(p, j) = b[j, p].
            let g = g.ok_or_else(|| spec.error("a matmul gradient needs its incoming gradient"))?;
            let (m_eff, jobs) = if rhs_unbatched {
                (nb * m, vec![Job { dst: 0, lhs: 0, rhs: 0, accumulate: false }])
            } else {
                let jobs = pairs
                    .iter()
                    .enumerate()
                    .map(|(i, &(ia, ib))| Job { dst: ia * mk, lhs: i * mn, rhs: ib * kn, accumulate: !first_write(ia) })
                    .collect();
                (m, jobs)
            };
            GemmPlan {
                m: m_eff,
                n: k,
                k: n,
                dst_s: (ki, 1),
                lhs_s: (ni, 1),
                rhs_s: (1, ni),
                jobs,
                lhs_pos: g.pos,
                rhs_pos: b.pos,
                out_len: y.nelms(),
            }
        }
        _ => {
            // dB[k, n] = aᵀ[k, m] @ g[m, n]; aᵀ(r, c) = a[c, r].
            let g = g.ok_or_else(|| spec.error("a matmul gradient needs its incoming gradient"))?;
            let (k_eff, jobs) = if rhs_unbatched {
                // The batch folds into the reduction dim: a as [(B m), k], g as [(B m), n].
                (nb * m, vec![Job { dst: 0, lhs: 0, rhs: 0, accumulate: false }])
            } else {
                let jobs = pairs
                    .iter()
                    .enumerate()
                    .map(|(i, &(ia, ib))| Job { dst: ib * kn, lhs: ia * mk, rhs: i * mn, accumulate: !first_write(ib) })
                    .collect();
                (m, jobs)
            };
            GemmPlan {
                m: k,
                n,
                k: k_eff,
                dst_s: (ni, 1),
                lhs_s: (1, ki),
                rhs_s: (ni, 1),
                jobs,
                lhs_pos: a.pos,
                rhs_pos: g.pos,
                out_len: y.nelms(),
            }
        }
    };
    let zero_fill = plan.k == 0 || plan.jobs.is_empty() || nb == 0;
    let empty = plan.m == 0 || plan.n == 0;
    let jobs_independent = plan.jobs.iter().all(|j| !j.accumulate) && fwd;
    let bias_pos = if spec.is::<ir::MatMulAdd>() {
        let c = spec.input(2)?;
        if c.dtype() != dt || c.shape() != [n] || y.shape().last() != Some(&n) {
            return Err(spec.error(format!("the addend {} must be a {dt}[{n}] vector", c.info)));
        }
        Some(c.pos)
    } else {
        None
    };
    let residual_pos = match spec.opt_input(3) {
        Some(r) if bias_pos.is_some() => {
            if r.info != y.info {
                return Err(spec.error(format!("the residual {} must have the result's info {}", r.info, y.info)));
            }
            Some(r.pos)
        }
        _ => None,
    };
    let sums_pos = if spec.is::<ir::MatMulRhsBiasGrad>() {
        let sums = spec.output(1)?;
        if !matches!(dt, popart_ir::DataType::Float32 | popart_ir::DataType::Float64) {
            return Err(spec.unsupported_dtype(dt));
        }
        if !rhs_unbatched || b.info.rank() != 2 || sums.dtype() != dt || sums.shape() != [n] {
            return Err(
                spec.error(format!("the bias gradient {} must be a {dt}[{n}] vector of a [k, n] weight", sums.info))
            );
        }
        Some(sums.pos)
    } else {
        None
    };
    macro_rules! kernel {
        ($t:ty) => {{
            let mut plan = plan;
            if empty {
                plan.jobs.clear();
            }
            let one_row = gemv::applies(plan.m, plan.lhs_s.1, plan.rhs_s);
            // A one-row product of contiguous matrix rows cut into pieces: their sums
            // are kept in the shared scratch when it is split.
            let piece_rows = if one_row && plan.rhs_s.1 == 1 { gemv::piece_rows(plan.k, plan.n) } else { plan.k };
            let parts = if <$t as MatElem>::ROW_LOOPS && piece_rows < plan.k {
                let values = plan
                    .k
                    .div_ceil(piece_rows)
                    .checked_mul(plan.n)
                    .ok_or_else(|| spec.error("the matmul is too large"))?;
                Some(scratch::shared(spec, (values * std::mem::size_of::<$t>()).div_ceil(8))?)
            } else {
                None
            };
            // The packed GEMM where `gemm`'s AVX2 microkernels would run, and on
            // Intel's AVX-512 cores for the products reading their lhs
            // transposed (the weight gradients: 1.1-1.3x `gemm`'s there, where
            // `gemm` packs the lhs slowly) and for the `MatMulAdd`s one block
            // deep, whose addends then go into the only store of each tile
            // (1.03-1.06x `gemm` and its separate pass over the result; deeper ones
            // store each tile once per block and stay with `gemm`, as do the
            // plain forward and data-gradient products, where it is faster),
            // where the product is no row.
            let tiling = match Simd::best() {
                Simd::Avx2 => Some(Tiling::Avx2),
                Simd::Avx512
                    if par::intel()
                        && ((plan.lhs_s.0 == 1 && plan.lhs_s.1 != 1)
                            || (bias_pos.is_some() && Blocking::one_depth_block(Tiling::Avx512, plan.k))) =>
                {
                    Some(Tiling::Avx512)
                }
                _ => None,
            };
            let packable =
                <$t as MatElem>::PACKED && plan.m.min(plan.n) >= PACKED_MIN && !one_row && !empty && !zero_fill;
            let (packed, packs) = if let Some(tiling) = tiling.filter(|_| packable) {
                let bl = Blocking::new(tiling, plan.m, plan.n, plan.k);
                let values = bl.pack_len().ok_or_else(|| spec.error("the matmul is too large"))?;
                let slots = team::num_threads().max(1);
                (Some(bl), scratch::slots(spec, slots, values.div_ceil(2))?)
            } else {
                (None, Vec::new())
            };
            let transposed_by_cols = Simd::best() == Simd::Avx512 && packed.is_none();
            Ok(Box::new(MatMulKernel::<$t> {
                plan,
                bias_pos,
                residual_pos,
                update: update.map(|(a, b)| (<$t as MatElem>::from_f64(a), <$t as MatElem>::from_f64(b))),
                sums_pos,
                zero_fill: zero_fill && !empty,
                jobs_independent,
                one_row,
                piece_rows,
                parts,
                transposed_by_cols,
                packed,
                packs,
                _t: Types::default(),
            }) as Box<dyn Kernel>)
        }};
    }
    match dt {
        popart_ir::DataType::Float16 => kernel!(f16),
        _ => with_num!(dt, T => kernel!(T), _ => Err(spec.unsupported_dtype(dt))),
    }
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::MatMul, build),
    (&ir::MatMulAdd, build),
    (&ir::MatMulLhsGrad, build),
    (&ir::MatMulRhsGrad, build),
    (&ir::MatMulRhsBiasGrad, build),
    (&ir::ScaledAddMatMulRhsGradInplace, build),
];

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, numeric_grad, run_op, t, Rng};
    use popart_ir::ops::matmul::matmul_shape;
    use popart_ir::ops::var_update::ScaledAddMatMulAttrs;
    use popart_ir::{Attributes, DataType, HostTensor, OpAttrs};

    use crate::team;

    /// numpy matmul written out: promote, broadcast batch, triple loop, squeeze.
    fn naive(a: &[f64], sa: &[usize], b: &[f64], sb: &[usize]) -> Vec<f64> {
        let a2: Vec<usize> = if sa.len() == 1 { vec![1, sa[0]] } else { sa.to_vec() };
        let b2: Vec<usize> = if sb.len() == 1 { vec![sb[0], 1] } else { sb.to_vec() };
        let (m, k, n) = (a2[a2.len() - 2], a2[a2.len() - 1], b2[b2.len() - 1]);
        let (ab, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
        let rank = ab.len().max(bb.len());
        let pad = |s: &[usize]| {
            let mut v = vec![1; rank - s.len()];
            v.extend_from_slice(s);
            v
        };
        let (pa, pb) = (pad(ab), pad(bb));
        let ob: Vec<usize> = pa.iter().zip(&pb).map(|(&x, &y)| x.max(y)).collect();
        let nb: usize = ob.iter().product();
        let mut out = Vec::new();
        for bi in 0..nb {
            let (mut rem, mut ia, mut ib, mut sa_, mut sb_) = (bi, 0, 0, 1, 1);
            for d in (0..rank).rev() {
                let idx = rem % ob[d];
                rem /= ob[d];
                ia += if pa[d] == 1 { 0 } else { idx * sa_ };
                ib += if pb[d] == 1 { 0 } else { idx * sb_ };
                sa_ *= pa[d];
                sb_ *= pb[d];
            }
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0.0;
                    for p in 0..k {
                        s += a[ia * m * k + i * k + p] * b[ib * k * n + p * n + j];
                    }
                    out.push(s);
                }
            }
        }
        out
    }

    const SHAPES: &[(&[usize], &[usize])] = &[
        (&[3, 4], &[4, 5]),
        (&[4], &[4, 5]),
        (&[3, 4], &[4]),
        (&[4], &[4]),
        (&[2, 3, 4], &[4, 5]),
        (&[2, 3, 4], &[2, 4, 5]),
        (&[3, 4], &[2, 4, 5]),
        (&[2, 1, 3, 4], &[5, 4, 2]),
        (&[4], &[3, 4, 2]),
        (&[2, 3, 4], &[4]),
        (&[8, 784], &[784, 32]),
        (&[3, 0], &[0, 4]),
    ];

    #[test]
    fn matmul_matches_naive_numpy_semantics() {
        let mut rng = Rng::new(11);
        for &(sa, sb) in SHAPES {
            let a = rng.vec(sa.iter().product(), -1.0, 1.0);
            let b = rng.vec(sb.iter().product(), -1.0, 1.0);
            let want = naive(&a, sa, &b, sb);
            for (dt, tol) in [(DataType::Float64, 1e-12), (DataType::Float32, 1e-5)] {
                let (ta, tb) = (t(dt, sa, &a), t(dt, sb, &b));
                let out = &run_op("MatMul", Attributes::new(), &[(0, ta), (1, tb)])[0];
                assert_eq!(out.info.shape, matmul_shape(sa, sb).unwrap());
                assert_close(&out.to_f64_vec(), &want, tol);
            }
        }
    }

    #[test]
    fn integer_and_half_matmul() {
        let a = t(DataType::Int32, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = t(DataType::Int32, &[3, 1], &[1.0, -1.0, 2.0]);
        assert_eq!(run_op("MatMul", Attributes::new(), &[(0, a), (1, b)])[0].to_f64_vec(), vec![5.0, 11.0]);
        let a = t(DataType::Float16, &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let b = t(DataType::Float16, &[2, 2], &[0.5, 0.0, 0.0, 2.0]);
        assert_eq!(run_op("MatMul", Attributes::new(), &[(0, a), (1, b)])[0].to_f64_vec(), vec![0.5, 4.0, 1.5, 8.0]);
    }

    #[test]
    fn large_matmul_is_correct_with_threads() {
        let mut rng = Rng::new(2);
        let (sa, sb) = ([96usize, 130], [130usize, 70]);
        let (a, b) = (rng.vec(96 * 130, -1.0, 1.0), rng.vec(130 * 70, -1.0, 1.0));
        let want = naive(&a, &sa, &b, &sb);
        let out = &run_op(
            "MatMul",
            Attributes::new(),
            &[(0, t(DataType::Float32, &sa, &a)), (1, t(DataType::Float32, &sb, &b))],
        );
        assert_close(&out[0].to_f64_vec(), &want, 1e-4);
        // Batched with per-job parallelism.
        let (sa, sb) = ([16usize, 40, 30], [16usize, 30, 20]);
        let (a, b) = (rng.vec(16 * 1200, -1.0, 1.0), rng.vec(16 * 600, -1.0, 1.0));
        let want = naive(&a, &sa, &b, &sb);
        let out = &run_op(
            "MatMul",
            Attributes::new(),
            &[(0, t(DataType::Float32, &sa, &a)), (1, t(DataType::Float32, &sb, &b))],
        );
        assert_close(&out[0].to_f64_vec(), &want, 1e-4);
    }

    /// Products large enough to be split over the worker team, by rows and by
    /// columns, forward and both gradients (with a folded batch), against loops.
    #[test]
    fn split_products_match_loops() {
        let mut rng = Rng::new(9);
        // Forward, more columns than rows (split by columns), then more rows than
        // columns (split by rows).
        for (sa, sb) in [([40usize, 200], [200usize, 300]), ([300, 200], [200, 40])] {
            let (a, b) = (rng.vec(sa[0] * sa[1], -1.0, 1.0), rng.vec(sb[0] * sb[1], -1.0, 1.0));
            let out = &run_op(
                "MatMul",
                Attributes::new(),
                &[(0, t(DataType::Float32, &sa, &a)), (1, t(DataType::Float32, &sb, &b))],
            );
            assert_close(&out[0].to_f64_vec(), &naive(&a, &sa, &b, &sb), 1e-4);
        }
        // Gradients of [2, 96, 130] @ [130, 70] (the data gradient's 130 columns
        // split).
        let (bs, m, k, n) = (2usize, 96usize, 130usize, 70usize);
        let (a, b, g) = (rng.vec(bs * m * k, -1.0, 1.0), rng.vec(k * n, -1.0, 1.0), rng.vec(bs * m * n, -1.0, 1.0));
        let mut want_da = vec![0.0; bs * m * k];
        let mut want_db = vec![0.0; k * n];
        for z in 0..bs {
            for i in 0..m {
                for j in 0..n {
                    let gv = g[(z * m + i) * n + j];
                    for p in 0..k {
                        want_da[(z * m + i) * k + p] += gv * b[p * n + j];
                        want_db[p * n + j] += a[(z * m + i) * k + p] * gv;
                    }
                }
            }
        }
        let ins: Vec<(u32, HostTensor)> = vec![
            (0, t(DataType::Float32, &[bs, m, n], &g)),
            (1, t(DataType::Float32, &[bs, m, k], &a)),
            (2, t(DataType::Float32, &[k, n], &b)),
        ];
        assert_close(&run_op("MatMulLhsGrad", Attributes::new(), &ins)[0].to_f64_vec(), &want_da, 1e-4);
        assert_close(&run_op("MatMulRhsGrad", Attributes::new(), &ins)[0].to_f64_vec(), &want_db, 1e-4);
    }

    /// One-row products of large matrices of contiguous rows (a decode
    /// step's) are summed in pieces: split over two threads or run on one,
    /// the same bits, with `MatMulAdd`'s bias and residual; close to loops.
    #[test]
    fn one_row_products_in_pieces_do_not_depend_on_the_threads() {
        let mut rng = Rng::new(33);
        for &(k, n) in &[(256usize, 1024usize), (1024, 256), (300, 260), (64, 2000)] {
            let (x, w) = (rng.vec(k, -1.0, 1.0), rng.vec(k * n, -1.0, 1.0));
            let (bias, res) = (rng.vec(n, -1.0, 1.0), rng.vec(n, -1.0, 1.0));
            let ins = vec![
                (0, t(DataType::Float32, &[1, k], &x)),
                (1, t(DataType::Float32, &[k, n], &w)),
                (2, t(DataType::Float32, &[n], &bias)),
                (3, t(DataType::Float32, &[1, n], &res)),
            ];
            let fused = || run_op("MatMulAdd", Attributes::new(), &ins)[0].to_f64_vec();
            let plain = || run_op("MatMul", Attributes::new(), &ins[..2])[0].to_f64_vec();
            let (one, two) = (team::with_max_threads(1, fused), team::with_max_threads(2, fused));
            assert_eq!(one, two, "MatMulAdd {k}x{n}");
            let (one_plain, two_plain) = (team::with_max_threads(1, plain), team::with_max_threads(2, plain));
            assert_eq!(one_plain, two_plain, "MatMul {k}x{n}");
            let want = naive(&x, &[1, k], &w, &[k, n]);
            assert_close(&two_plain, &want, 1e-4);
            let want: Vec<f64> = want.iter().zip(&bias).zip(&res).map(|((y, b), r)| y + b + r).collect();
            assert_close(&two, &want, 1e-4);
        }
    }

    /// Products large enough for the packed GEMM on AVX2 CPUs (from
    /// [`super::PACKED_MIN`] rows and columns; `gemm`'s elsewhere): the forward
    /// with its bias and residual, both gradients (operands read transposed),
    /// the fused weight update and a batched rhs (independent calls per
    /// thread) match loops, and give the same bits on one thread and two.
    #[test]
    fn large_products_match_loops_on_any_threads() {
        let mut rng = Rng::new(41);
        for &(bs, m, k, n) in &[(2usize, 130usize, 300usize, 130usize), (1, 257, 64, 200), (1, 130, 700, 131)] {
            let (x, w) = (rng.vec(bs * m * k, -1.0, 1.0), rng.vec(k * n, -1.0, 1.0));
            let (bias, res, g) =
                (rng.vec(n, -1.0, 1.0), rng.vec(bs * m * n, -1.0, 1.0), rng.vec(bs * m * n, -1.0, 1.0));
            let f32s = |shape: &[usize], v: &[f64]| t(DataType::Float32, shape, v);
            let fwd = vec![
                (0, f32s(&[bs * m, k], &x)),
                (1, f32s(&[k, n], &w)),
                (2, f32s(&[n], &bias)),
                (3, f32s(&[bs * m, n], &res)),
            ];
            let grads = vec![(0, f32s(&[bs * m, n], &g)), (1, f32s(&[bs * m, k], &x)), (2, f32s(&[k, n], &w))];
            let y = naive(&x, &[bs * m, k], &w, &[k, n]);
            let want_fwd: Vec<f64> = y.iter().enumerate().map(|(e, y)| y + bias[e % n] + res[e]).collect();
            // dX = g @ wᵀ, dW = xᵀ @ g.
            let wt: Vec<f64> = (0..n * k).map(|e| w[(e % k) * n + e / k]).collect();
            let xt: Vec<f64> = (0..k * bs * m).map(|e| x[(e % (bs * m)) * k + e / (bs * m)]).collect();
            let want_dx = naive(&g, &[bs * m, n], &wt, &[n, k]);
            let want_dw = naive(&xt, &[k, bs * m], &g, &[bs * m, n]);
            let (a, b) = (0.5, -0.25);
            let want_up: Vec<f64> = w.iter().zip(&want_dw).map(|(w, d)| a * w + b * d).collect();
            let up = ScaledAddMatMulAttrs { a, b }.to_attrs();
            // A batched rhs: `[bs, m, k] @ [bs, k, n]`, one call per batch.
            let wb: Vec<f64> = (0..bs).flat_map(|_| w.iter().copied()).collect();
            let batched = vec![(0, f32s(&[bs, m, k], &x)), (1, f32s(&[bs, k, n], &wb))];
            /// An op, its attributes, its inputs and the values it should give.
            type Case<'a> = (&'a str, Attributes, &'a [(u32, HostTensor)], &'a [f64]);
            let cases: Vec<Case<'_>> = vec![
                ("MatMulAdd", Attributes::new(), &fwd, &want_fwd),
                ("MatMul", Attributes::new(), &fwd[..2], &y),
                ("MatMulLhsGrad", Attributes::new(), &grads, &want_dx),
                ("MatMulRhsGrad", Attributes::new(), &grads, &want_dw),
                ("ScaledAddMatMulRhsGradInplace", up, &grads, &want_up),
                ("MatMul", Attributes::new(), &batched, &y),
            ];
            for (op, attrs, ins, want) in cases {
                let run = || run_op(op, attrs.clone(), ins)[0].to_f64_vec();
                let (one, two) = (team::with_max_threads(1, run), team::with_max_threads(2, run));
                assert_eq!(one, two, "{op} {bs}x{m}x{k}x{n}: one thread and two differ");
                assert_close(&two, want, 1e-4 * (k.max(bs * m) as f64).sqrt());
            }
        }
    }

    /// `MatMulRhsBiasGrad` gives `MatMulRhsGrad`'s bits and `g`'s column sums,
    /// each summed in row order from 0 in the dtype (bit for bit), on the packed
    /// GEMM (several depth blocks, split by rows and by columns) and off it
    /// (narrow weights, float64, one row), on one thread and two, and zeros for
    /// an empty batch.
    #[test]
    fn bias_gradient_is_the_column_sum_in_order() {
        let mut rng = Rng::new(77);
        let shapes =
            [(2usize, 300usize, 130usize, 131usize), (1, 700, 256, 200), (1, 1030, 64, 40), (1, 9, 1, 5), (1, 0, 3, 2)];
        for &(bs, m, k, n) in &shapes {
            let (x, w, g) = (rng.vec(bs * m * k, -1.0, 1.0), rng.vec(k * n, -1.0, 1.0), rng.vec(bs * m * n, -1.0, 1.0));
            for dt in [DataType::Float32, DataType::Float64] {
                let ins: Vec<(u32, HostTensor)> =
                    vec![(0, t(dt, &[bs, m, n], &g)), (1, t(dt, &[bs, m, k], &x)), (2, t(dt, &[k, n], &w))];
                let want_sums: Vec<f64> = (0..n)
                    .map(|j| match dt {
                        DataType::Float32 => (0..bs * m).fold(0f32, |a, p| a + g[p * n + j] as f32) as f64,
                        _ => (0..bs * m).fold(0f64, |a, p| a + g[p * n + j]),
                    })
                    .collect();
                let dw = run_op("MatMulRhsGrad", Attributes::new(), &ins)[0].to_f64_vec();
                for threads in [1, 2] {
                    let out = team::with_max_threads(threads, || run_op("MatMulRhsBiasGrad", Attributes::new(), &ins));
                    let what = format!("{dt} {bs}x{m}x{k}x{n} on {threads} threads");
                    assert_eq!(out[0].to_f64_vec(), dw, "{what}: the weight gradient");
                    assert_eq!(out[1].to_f64_vec(), want_sums, "{what}: the column sums");
                }
            }
        }
    }

    /// `ScaledAddMatMulRhsGradInplace` equals `a · w + b · MatMulRhsGrad(g, x, w)` computed
    /// separately, with a folded batch, split over threads (large) and not (small), and
    /// with an empty product (k = 0: only the scaling).
    #[test]
    fn fused_weight_update_matches_separate_ops() {
        let mut rng = Rng::new(21);
        for &(bs, m, k, n) in &[(1usize, 3usize, 4usize, 5usize), (2, 96, 130, 70), (1, 128, 784, 64), (1, 0, 3, 2)] {
            let (x, w, g) = (rng.vec(bs * m * k, -1.0, 1.0), rng.vec(k * n, -1.0, 1.0), rng.vec(bs * m * n, -1.0, 1.0));
            for dt in [DataType::Float32, DataType::Float64] {
                let ins: Vec<(u32, HostTensor)> =
                    vec![(0, t(dt, &[bs, m, n], &g)), (1, t(dt, &[bs, m, k], &x)), (2, t(dt, &[k, n], &w))];
                let dw = run_op("MatMulRhsGrad", Attributes::new(), &ins)[0].to_f64_vec();
                let (a, b) = (0.5, -0.25);
                let want: Vec<f64> = w.iter().zip(&dw).map(|(w, d)| a * w + b * d).collect();
                let attrs = ScaledAddMatMulAttrs { a, b }.to_attrs();
                let got = run_op("ScaledAddMatMulRhsGradInplace", attrs, &ins)[0].to_f64_vec();
                assert_close(&got, &want, if dt == DataType::Float32 { 1e-4 } else { 1e-12 });
            }
        }
    }

    /// Check both gradient ops against central finite differences of
    /// `L = sum(w ⊙ (a @ b))` for a fixed random `w` (so `g = w`).
    #[test]
    fn gradients_match_finite_differences() {
        let mut rng = Rng::new(5);
        for &(sa, sb) in SHAPES {
            let na: usize = sa.iter().product();
            let nb: usize = sb.iter().product();
            if na > 200 || nb > 200 {
                continue;
            }
            let a = rng.vec(na, -1.0, 1.0);
            let b = rng.vec(nb, -1.0, 1.0);
            let so = matmul_shape(sa, sb).unwrap();
            let w = rng.vec(so.iter().product(), -1.0, 1.0);
            let loss = |a: &[f64], b: &[f64]| naive(a, sa, b, sb).iter().zip(&w).map(|(y, w)| y * w).sum::<f64>();
            let want_da = numeric_grad(&a, 1e-6, |x| loss(x, &b));
            let want_db = numeric_grad(&b, 1e-6, |x| loss(&a, x));
            let ins: Vec<(u32, HostTensor)> = vec![
                (0, t(DataType::Float64, &so, &w)),
                (1, t(DataType::Float64, sa, &a)),
                (2, t(DataType::Float64, sb, &b)),
            ];
            let da = &run_op("MatMulLhsGrad", Attributes::new(), &ins)[0];
            let db = &run_op("MatMulRhsGrad", Attributes::new(), &ins)[0];
            assert_eq!(da.info.shape, sa);
            assert_eq!(db.info.shape, sb);
            assert_close(&da.to_f64_vec(), &want_da, 1e-7);
            assert_close(&db.to_f64_vec(), &want_db, 1e-7);
        }
    }
}
