//! `ReplicatedScaledAddMatMulRhsGradInplace(g, x, w)`: `w += b * reduce(xᵀ @ g)`
//! over a replica group (the `fuse-weight-update` pattern's data-parallel SGD
//! step for a weight whose gradient is a matmul's).
//!
//! The product is `W[K, N] += s · Σ_j X_jᵀ[K, M] @ G_j[M, N]`, `M` every row of
//! `x` (its batch dims folded in, as `MatMulRhsGrad` does) and `s` = `b`
//! (divided by the group size for `mean`). Member `p` of a group owns chunk
//! `p` of the `K` rows of `W`: in blocks of rows, it multiplies every member's
//! `x` and `g` into a scratch block (member order, accumulating, the GEMM
//! applying `s`) and adds the block into that block of every member's weight.
//! Each weight element is read and written once per step, no gradient is ever
//! stored, and the sum does not depend on timing. The results equal the
//! unfused all-reduce and update up to rounding (the scale is applied inside
//! the GEMM). The scratch is reserved when the kernel is built; the rows are
//! split over the replica's worker team when the product is large.
//!
//! Measured alternatives, both about 5% slower per MNIST b128/h512 step with
//! two replicas on a 2-core machine: each member adding every member's product
//! rows into its own weight only (remote reads instead of remote writes, after
//! a barrier), and the same pipelined block by block through progress counters.
//!
//! When every member's weight is known to be equal before the update (the
//! lowered call's `weight_invariant`, which lowering sets for weights only
//! such updates write; see `popart_lower::KernelCall::weight_invariant`), member `p` accumulates
//! its chunk straight into its own weight, in member order, and copies the
//! updated rows into the other members' weights. There is no scratch block and
//! no read of another member's weight: about 7% faster per MNIST b128/h512
//! step with two replicas on a 2-core machine. Every member still ends with
//! the same bytes. It rounds once per member, where the scratch path rounds
//! the sum and then the update, so only groups of two take it. For larger
//! groups it drifts measurably: 1.2e-5 relative after the MNIST equivalence
//! test's steps at four replicas.
//!
//! Without a replica context, or with a group of one, it is the local
//! `w += b * (xᵀ @ g)` accumulated by the GEMM into `w`.

use std::sync::Mutex;

use half::f16;
use popart_ir::ops::all as ir;
use popart_ir::DataType;

use super::chunk;
use super::update::{Float, UpdateAttrs};
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelRunError, KernelSpec};
use crate::kernels::matmul::{MatElem, GEMM_PAR_MIN};
use crate::kernels::par::Simd;
use crate::kernels::ptr::{slice_mut, SendPtr};
use crate::kernels::spec::{boxed, BuildResult, SpecExt, Types};
use crate::kernels::KernelEntry;
use crate::replicas::{self, GroupPos};
use crate::team;

/// Bytes of scratch per block of rows (a block stays in L2 while it is added
/// into every member's weight).
const BLOCK_BYTES: usize = 1 << 20;

struct Kern<T> {
    /// `W` is `[k, n]`; `x` and `g` are `[m, k]` and `[m, n]` (rows folded).
    k: usize,
    n: usize,
    m: usize,
    /// Rows of `W` per scratch block.
    block_rows: usize,
    stride: usize,
    group_size: usize,
    mean: bool,
    b: f64,
    /// Every member's weight is the same before the update
    /// ([`KernelSpec::weight_invariant`]) and the group has two members: accumulate
    /// into the own weight and copy.
    invariant: bool,
    /// One block per worker-team thread, reserved at build time (none when
    /// `invariant`).
    scratch: Mutex<Vec<T>>,
    slots: usize,
    _t: Types<T>,
}

/// The members of an update: how many, the position of the member
/// running when it updates its own weight and copies it (`weight_invariant`),
/// and, when the replicas span processes, the only member whose weight it
/// writes (its own: every member computes all rows).
#[derive(Clone, Copy)]
struct Group {
    count: usize,
    own: Option<usize>,
    solo: Option<usize>,
}

impl<T: MatElem + Float> Kern<T> {
    /// `dst[len, n] (+)= scale · x[:, r0..r0+len]ᵀ @ g`, accumulating into `dst`
    /// when `accumulate` (the GEMM applies `scale`).
    ///
    /// # Safety
    /// `x` and `g` hold the op's `m·k` and `m·n` elements, `dst` holds `len · n`
    /// elements and overlaps neither, and `r0 + len <= k`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn product(&self, dst: *mut T, accumulate: bool, r0: usize, len: usize, x: *const T, g: *const T, scale: T) {
        let (n, k, m) = (self.n, self.k, self.m);
        // SAFETY: `x` is `[m, k]` row-major, so columns `r0..r0 + len <= k` of it,
        // `g` `[m, n]` and `dst` `[len, n]` are within their buffers, and `dst`
        // overlaps neither (this method's contract).
        unsafe {
            T::gemm(
                len,
                n,
                m,
                dst,
                n as isize,
                1,
                accumulate,
                x.add(r0),
                1,
                k as isize,
                g,
                n as isize,
                1,
                T::ONE,
                scale,
            )
        };
    }
    /// Rows `rows` of every member's weight: `w_d[rows] += b * reduce_j(x_jᵀ @ g_j)[rows]`.
    ///
    /// # Safety
    /// `x(j)`, `g(j)` and `w(d)` hold the op's `m·k`, `m·n` and `k·n` elements;
    /// nobody else touches rows `rows` of any `w(d)` meanwhile; `block` holds
    /// `block_rows · n` elements. With `own`, every `w(d)` holds the same rows
    /// `rows` and `w(own)` is updated then copied to the others.
    unsafe fn rows(
        &self,
        group: Group,
        x: &dyn Fn(usize) -> *const T,
        g: &dyn Fn(usize) -> *const T,
        w: &dyn Fn(usize) -> *mut T,
        rows: std::ops::Range<usize>,
        block: *mut T,
    ) {
        let Group { count, own, solo } = group;
        let writes = |d: usize| !matches!(solo, Some(s) if s != d);
        let n = self.n;
        let scale = T::from_f64(self.b / if self.mean { count as f64 } else { 1.0 });
        if let Some(own) = own {
            // Every member's rows are equal: accumulate into the own weight, in
            // member order, then copy the rows to the other members.
            let mine = w(own);
            for j in 0..count {
                // SAFETY: rows `rows` (`< k`) of `w(own)` are `rows.len() · n` elements
                // only this call touches, and no `x(j)`, `g(j)` (this method's contract).
                unsafe { self.product(mine.add(rows.start * n), true, rows.start, rows.len(), x(j), g(j), scale) };
            }
            for d in (0..count).filter(|&d| d != own && writes(d)) {
                // SAFETY: the same rows of two distinct members' weights, both only
                // this call's meanwhile.
                unsafe {
                    std::ptr::copy_nonoverlapping(mine.add(rows.start * n), w(d).add(rows.start * n), rows.len() * n)
                };
            }
            return;
        }
        let mut r0 = rows.start;
        while r0 < rows.end {
            let len = (rows.end - r0).min(self.block_rows);
            // block[len, n] = scale · Σ_j x_j[:, r0..r0+len]ᵀ @ g_j, in member order.
            for j in 0..count {
                // SAFETY: `block` holds `block_rows · n >= len · n` elements, overlaps no
                // operand, and `r0 + len <= rows.end <= k` (this method's contract).
                unsafe { self.product(block, j > 0, r0, len, x(j), g(j), scale) };
            }
            // SAFETY: as above; the block is only read from here on.
            let acc = unsafe { std::slice::from_raw_parts(block, len * n) };
            for d in (0..count).filter(|&d| writes(d)) {
                // SAFETY: rows `r0..r0 + len` of `w(d)`, only this call's meanwhile.
                let dst = unsafe { slice_mut(w(d).add(r0 * n), len * n) };
                Simd::for_cost(1).run_narrow(
                    #[inline(always)]
                    || T::add_assign(dst, acc),
                );
            }
            r0 += len;
        }
    }

    /// [`Kern::rows`] over `lo..hi`, split over the worker team when large.
    ///
    /// # Safety
    /// As [`Kern::rows`] for `lo..hi`.
    unsafe fn chunk_rows(
        &self,
        group: Group,
        x: &(dyn Fn(usize) -> *const T + Sync),
        g: &(dyn Fn(usize) -> *const T + Sync),
        w: &(dyn Fn(usize) -> *mut T + Sync),
        lo: usize,
        hi: usize,
    ) {
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let base = SendPtr(scratch.as_mut_ptr());
        let work = (hi - lo) * self.n * self.m * group.count;
        let parts = if work >= GEMM_PAR_MIN { team::num_threads().min(self.slots).min(hi - lo) } else { 1 };
        if parts <= 1 {
            // SAFETY: the scratch has room for `slots · block_rows · n` elements (reserved
            // at build, except for the own-weight path, which uses none), this call's
            // alone under the lock; the rest is this method's contract.
            return unsafe { self.rows(group, x, g, w, lo..hi, base.get()) };
        }
        let slot = self.block_rows * self.n;
        team::run(parts, &|i| {
            let (a, b) = chunk(hi - lo, parts, i);
            // SAFETY: parts cover disjoint rows and use disjoint scratch blocks
            // (`parts <= slots`); the caller's contract covers the rest.
            unsafe { self.rows(group, x, g, w, lo + a..lo + b, base.get().wrapping_add(i * slot)) };
        });
    }

    /// `w += b · xᵀ @ g` with the GEMM accumulating into `w`, its rows split
    /// over the worker team when large.
    ///
    /// # Safety
    /// `x`, `g` and `w` hold the op's `m·k`, `m·n` and `k·n` elements; only `w` is written.
    unsafe fn local(&self, x: *const T, g: *const T, w: *mut T) {
        let (n, k, m) = (self.n, self.k, self.m);
        let scale = T::from_f64(self.b);
        let rows = |r: std::ops::Range<usize>, x: *const T, g: *const T, w: *mut T| {
            // SAFETY: the caller's contract; `r` lies within `0..k`.
            unsafe { self.product(w.add(r.start * n), true, r.start, r.len(), x, g, scale) };
        };
        let parts = if k * n * m >= GEMM_PAR_MIN { team::num_threads().min(k.div_ceil(16)) } else { 1 };
        if parts <= 1 {
            return rows(0..k, x, g, w);
        }
        let (xs, gs, ws) = (SendPtr(x as *mut T), SendPtr(g as *mut T), SendPtr(w));
        team::run(parts, &|i| {
            let (a, b) = chunk(k, parts, i);
            rows(a..b, xs.get(), gs.get(), ws.get());
        });
    }
}

impl<T: MatElem + Float> Kernel for Kern<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (g, x) = (args.inputs[0] as *const T, args.inputs[1] as *const T);
        let w = args.outputs[0] as *mut T;
        if self.k == 0 || self.n == 0 {
            return Ok(());
        }
        if self.m == 0 {
            // An empty product reduces to zeros on every replica: `w + b * 0`.
            // SAFETY: the output is the `[k, n]` weight (`KernelArgs`).
            let all = unsafe { slice_mut(w, self.k * self.n) };
            all.iter_mut().for_each(|o| *o = T::store(o.load() + self.b as f32 * 0.0));
            return Ok(());
        }
        replicas::current(|ctx| {
            let Some(ctx) = ctx.filter(|_| self.group_size > 1) else {
                // SAFETY: the executor's buffers hold the op's shapes; only `w` is written.
                unsafe { self.local(x, g, w) };
                return Ok(());
            };
            let pos = GroupPos::of(ctx.num_replicas(), self.stride, self.group_size, ctx.index)
                .ok_or(KernelRunError::ReplicaAborted)?;
            let own = self.invariant.then_some(pos.index);
            let size = std::mem::size_of::<T>();
            let bytes = [self.m * self.k * size, self.m * self.n * size];
            // SAFETY: `x` and `g` hold `m·k` and `m·n` elements for the whole call.
            unsafe {
                ctx.comm.exchange_inputs(ctx.index, [x as *const u8, g as *const u8], bytes, w as *mut u8, |peers| {
                    let x = |j: usize| peers.input_at(pos.member(j), 0) as *const T;
                    let g = |j: usize| peers.input_at(pos.member(j), 1) as *const T;
                    let w = |d: usize| peers.output(pos.member(d)) as *mut T;
                    // Spanning processes, every member computes all rows of its
                    // own weight, chunk by chunk as the members would (the same
                    // GEMM calls, so the same rounding).
                    let (solo, chunks) = match peers.solo() {
                        true => (Some(pos.index), 0..pos.size),
                        false => (None, pos.index..pos.index + 1),
                    };
                    for j in chunks {
                        let (lo, hi) = chunk(self.k, pos.size, j);
                        // SAFETY: every member published the buffers of this op (all
                        // replicas run the same kernel); only this member touches rows
                        // `lo..hi` of the weights it writes during the exchange, and
                        // `x` and `g` are only read.
                        self.chunk_rows(Group { count: pos.size, own, solo }, &x, &g, &w, lo, hi);
                    }
                })
            }
            .map_err(|_| KernelRunError::ReplicaAborted)
        })
    }
}

fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let (g, x, w, y) = (spec.input(0)?, spec.input(1)?, spec.input(2)?, spec.output(0)?);
    if (g.pos, x.pos) != (0, 1) {
        return Err(spec.error("inputs g and x must both be connected"));
    }
    if w.info != y.info || g.dtype() != w.dtype() || x.dtype() != w.dtype() {
        return Err(
            spec.error(format!("operands g {}, x {}, w {} and result {} do not match", g.info, x.info, w.info, y.info))
        );
    }
    let (k, n) = match w.shape() {
        [k] => (*k, 1),
        [k, n] => (*k, *n),
        _ => return Err(spec.error(format!("the weight {} must have rank 1 or 2", w.info))),
    };
    let m = x.nelms().checked_div(k).unwrap_or(0);
    if x.shape().last() != Some(&k) || g.nelms() != m * n {
        return Err(spec.error(format!("gradient {} does not match {:?} @ {:?}", g.info, x.shape(), w.shape())));
    }
    let UpdateAttrs { stride, group_size, mean, b } = UpdateAttrs::of(spec)?;
    // Accumulating member by member into the weight rounds once per member; the
    // scratch path rounds the sum, then the update. Two members round as often
    // either way, so only pairs take the short path, which needs no scratch.
    let invariant = spec.weight_invariant && group_size == 2;
    let block_rows = (BLOCK_BYTES / (4 * n.max(1))).max(16).min(k.max(1));
    let slots = team::num_threads().max(1);
    macro_rules! kernel {
        ($t:ty) => {{
            let len = if invariant { 0 } else { slots * block_rows * n };
            let mut scratch: Vec<$t> = Vec::new();
            scratch.try_reserve_exact(len).map_err(|_| spec.error("cannot reserve the scratch blocks"))?;
            scratch.resize(len, <$t as MatElem>::ZERO);
            boxed(Kern::<$t> {
                k,
                n,
                m,
                block_rows,
                stride,
                group_size,
                mean,
                b,
                invariant,
                scratch: Mutex::new(scratch),
                slots,
                _t: Types::default(),
            })
        }};
    }
    match w.dtype() {
        DataType::Float32 => kernel!(f32),
        DataType::Float16 => kernel!(f16),
        other => Err(spec.unsupported_dtype(other)),
    }
}

pub(crate) const KERNELS: &[KernelEntry] = &[(&ir::ReplicatedScaledAddMatMulRhsGradInplace, build)];
