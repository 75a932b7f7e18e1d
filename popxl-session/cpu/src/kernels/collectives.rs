//! Collective kernels: `ReplicatedAllReduce(Inplace)`, `ReplicatedAllGather`,
//! `ReplicatedReduceScatter` across the replicas of a replicated session, and
//! `AllReduce` across the inputs of one replica (its IPUs).
//!
//! A replica's kernel finds its replica with [`replicas::current`] and its group
//! with [`GroupPos::of`], and meets the other replicas in one
//! [`Comm::exchange`](crate::replicas::Comm::exchange). The work is split so
//! that every output element is computed by exactly one replica, in a fixed
//! order:
//! - all-reduce: group member `j` reduces chunk `j` of the elements over the
//!   members' inputs, in member order, and writes it into every member's output
//!   (so the in-place variant, whose output is its input, reads each element
//!   before anyone writes it);
//! - all-gather: each replica fills its own output from the members' inputs;
//! - reduce-scatter: each replica reduces its own shard over the members'
//!   inputs, in member order; `local` takes the shard from its own input and
//!   meets no one.
//!
//! Reductions accumulate in blocks of [`BLOCK`] elements on the stack (float16
//! in float32, rounded once), so `run` allocates nothing. Padding elements of a
//! shard (past the input's end) are zero, as PopART pads with zeros before
//! reducing.
//!
//! Without a replica context (a session with one replica) a collective's group
//! is its replica alone: an all-reduce maps its input as a group of one
//! (`square_add` squares it), an all-gather places the input first and zeros
//! the rest, a reduce-scatter returns shard 0. With a replica context but a
//! group of one, no exchange takes place. Collective kernels do not use the
//! worker team: the replicas are the parallelism.

use std::marker::PhantomData;

use half::f16;
use popart_ir::ops::all as ir;
use popart_ir::ops::collectives::{shard_len, CollectiveOperator};
use popart_ir::ops::collectives::{AllGatherAttrs, AllReduceAttrs, IpuAllReduceAttrs, ReduceScatterAttrs};
use popart_ir::DataType;

use super::dispatch::with_bits;
use super::elem::{Bool8, Num};
use super::ptr::{slice, slice_mut};
use super::spec::{BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelRunError, KernelSpec};
use crate::replicas::{self, GroupPos, ReplicaCtx};

/// Elements reduced per block, accumulated on the stack.
const BLOCK: usize = 256;

/// An element type of a reduction and the type it accumulates in.
trait Elem: Copy + Send + Sync + 'static {
    type Acc: Copy + Default;
    fn load(self) -> Self::Acc;
    fn store(a: Self::Acc) -> Self;
}

macro_rules! native_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            type Acc = $t;
            #[inline(always)]
            fn load(self) -> $t { self }
            #[inline(always)]
            fn store(a: $t) -> $t { a }
        }
    )*};
}
native_elem!(f32, i32, u32);

impl Elem for f16 {
    type Acc = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn store(a: f32) -> f16 {
        f16::from_f32(a)
    }
}

impl Elem for Bool8 {
    type Acc = bool;
    #[inline(always)]
    fn load(self) -> bool {
        self.0 != 0
    }
    #[inline(always)]
    fn store(a: bool) -> Bool8 {
        Bool8(u8::from(a))
    }
}

/// How a reduction combines the values of `count` sources: `first` maps the
/// first, `next` folds in each following one, `finish` completes the result.
trait Combine<A>: Send + Sync + 'static {
    fn first(x: A) -> A;
    fn next(acc: A, x: A) -> A;
    #[inline(always)]
    fn finish(acc: A, _count: usize) -> A {
        acc
    }
}

macro_rules! num_combine {
    ($($name:ident: first |$x:ident| $first:expr, next |$a:ident, $y:ident| $next:expr;)*) => {$(
        struct $name;
        impl<A: Num> Combine<A> for $name {
            #[inline(always)]
            fn first($x: A) -> A { $first }
            #[inline(always)]
            fn next($a: A, $y: A) -> A { $next }
        }
    )*};
}
num_combine! {
    AddC: first |x| x, next |a, x| a.add(x);
    MulC: first |x| x, next |a, x| a.mul(x);
    MinC: first |x| x, next |a, x| a.minimum(x);
    MaxC: first |x| x, next |a, x| a.maximum(x);
    SquareAddC: first |x| x.mul(x), next |a, x| a.add(x.mul(x));
}

struct MeanC;
impl<A: Num> Combine<A> for MeanC {
    #[inline(always)]
    fn first(x: A) -> A {
        x
    }
    #[inline(always)]
    fn next(a: A, x: A) -> A {
        a.add(x)
    }
    #[inline(always)]
    fn finish(a: A, count: usize) -> A {
        a.div(A::from_f64(count as f64))
    }
}

struct AndC;
impl Combine<bool> for AndC {
    #[inline(always)]
    fn first(x: bool) -> bool {
        x
    }
    #[inline(always)]
    fn next(a: bool, x: bool) -> bool {
        a & x
    }
}

struct OrC;
impl Combine<bool> for OrC {
    #[inline(always)]
    fn first(x: bool) -> bool {
        x
    }
    #[inline(always)]
    fn next(a: bool, x: bool) -> bool {
        a | x
    }
}

/// Element `lo..hi` of every destination `dst(d)`, `d < ndst`, gets the
/// reduction of that element over the sources `src(k)`, `k < count`, in order.
/// Each block is read from every source before it is written anywhere, so a
/// destination may be one of the sources.
///
/// # Safety
/// Every `src(k)` is valid for reads and every `dst(d)` for writes of `hi`
/// elements; no one else writes elements `lo..hi` of any of them meanwhile.
unsafe fn reduce_into<T: Elem, C: Combine<T::Acc>>(
    count: usize,
    src: impl Fn(usize) -> *const T,
    ndst: usize,
    dst: impl Fn(usize) -> *mut T,
    lo: usize,
    hi: usize,
) {
    let mut acc = [T::Acc::default(); BLOCK];
    let mut start = lo;
    while start < hi {
        let len = (hi - start).min(BLOCK);
        let acc = &mut acc[..len];
        // SAFETY: `start + len <= hi`: within every source, which no one writes
        // meanwhile (this function's contract); likewise for the other sources.
        for (a, &x) in acc.iter_mut().zip(unsafe { slice(src(0).add(start), len) }) {
            *a = C::first(x.load());
        }
        for k in 1..count {
            // SAFETY: as above.
            for (a, &x) in acc.iter_mut().zip(unsafe { slice(src(k).add(start), len) }) {
                *a = C::next(*a, x.load());
            }
        }
        for d in 0..ndst {
            // SAFETY: `start + len <= hi`, within the destination, which only this call
            // touches meanwhile; the source slices above are no longer used.
            for (o, &a) in unsafe { slice_mut(dst(d).add(start), len) }.iter_mut().zip(acc.iter()) {
                *o = T::store(C::finish(a, count));
            }
        }
        start += len;
    }
}

/// Elements `lo..hi` of `n` split into `parts` near-equal chunks: chunk `j`.
pub(super) fn chunk(n: usize, parts: usize, j: usize) -> (usize, usize) {
    let (q, r) = (n / parts.max(1), n % parts.max(1));
    let lo = j * q + j.min(r);
    (lo, lo + q + usize::from(j < r))
}

/// A collective's group: `(stride, group_size)` from its attributes.
#[derive(Clone, Copy, Debug)]
struct Group {
    stride: usize,
    size: usize,
}

impl Group {
    /// The group of a collective's `stride` and `group_size` attributes.
    fn of(spec: &KernelSpec<'_>, stride: i64, group_size: i64) -> Result<Group, KernelError> {
        let positive = |v: i64| usize::try_from(v).ok().filter(|&v| v > 0);
        match (positive(stride), positive(group_size)) {
            (Some(stride), Some(size)) => Ok(Group { stride, size }),
            _ => Err(spec.error(format!("stride {stride} and group size {group_size} must be positive"))),
        }
    }

    /// This replica's position in its group; `Err` when the grouping does not
    /// fit the session's replicas (the IR is verified against its replication
    /// factor, so every replica finds the same and none waits for the others).
    fn position(self, ctx: &ReplicaCtx<'_>) -> Result<GroupPos, KernelRunError> {
        GroupPos::of(ctx.num_replicas(), self.stride, self.size, ctx.index).ok_or(KernelRunError::ReplicaAborted)
    }

    /// True when the kernel must meet the other replicas.
    fn exchanges(self, ctx: &Option<ReplicaCtx<'_>>) -> bool {
        self.size > 1 && ctx.is_some()
    }
}

/// Operator `op`, checked against the element type.
fn operator(spec: &KernelSpec<'_>, op: CollectiveOperator, dtype: DataType) -> Result<CollectiveOperator, KernelError> {
    if !op.supports(dtype) {
        return Err(spec.error(format!("collective operator `{op}` does not support {dtype}")));
    }
    Ok(op)
}

/// Makes a reduction kernel for an element type and a combination.
trait MakeReduce {
    fn make<T: Elem, C: Combine<T::Acc>>(self) -> Box<dyn Kernel>;
}

/// The reduction kernel of `op` on `dtype` made by `m` (`local` excluded).
fn dispatch_reduce(spec: &KernelSpec<'_>, dtype: DataType, op: CollectiveOperator, m: impl MakeReduce) -> BuildResult {
    use CollectiveOperator as O;
    macro_rules! num {
        ($T:ty) => {
            match op {
                O::Add => m.make::<$T, AddC>(),
                O::Mean => m.make::<$T, MeanC>(),
                O::Mul => m.make::<$T, MulC>(),
                O::Min => m.make::<$T, MinC>(),
                O::Max => m.make::<$T, MaxC>(),
                O::SquareAdd => m.make::<$T, SquareAddC>(),
                O::LogicalAnd | O::LogicalOr | O::Local => return Err(spec.unsupported_dtype(dtype)),
            }
        };
    }
    Ok(match (dtype, op) {
        (DataType::Float32, _) => num!(f32),
        (DataType::Float16, _) => num!(f16),
        (DataType::Int32, _) => num!(i32),
        (DataType::Uint32, _) => num!(u32),
        (DataType::Bool, O::LogicalAnd) => m.make::<Bool8, AndC>(),
        (DataType::Bool, O::LogicalOr) => m.make::<Bool8, OrC>(),
        _ => return Err(spec.unsupported_dtype(dtype)),
    })
}

/// Checks that every connected tensor of `slots` has `n` elements of `dtype`.
fn check_same(spec: &KernelSpec<'_>, x: &popart_ir::TensorInfo, y: &popart_ir::TensorInfo) -> Result<(), KernelError> {
    if x != y {
        return Err(spec.error(format!("output {y} does not match input {x}")));
    }
    Ok(())
}

// ---------------------------------------------------------------- all-reduce

/// `ReplicatedAllReduce(Inplace)`.
struct AllReduceKernel<T, C> {
    n: usize,
    group: Group,
    /// The input is the output (read through the output pointer).
    in_place: bool,
    _t: Types<(T, C)>,
}

struct AllReduceMaker {
    n: usize,
    group: Group,
    in_place: bool,
}

impl MakeReduce for AllReduceMaker {
    fn make<T: Elem, C: Combine<T::Acc>>(self) -> Box<dyn Kernel> {
        Box::new(AllReduceKernel::<T, C> { n: self.n, group: self.group, in_place: self.in_place, _t: PhantomData })
    }
}

impl<T: Elem, C: Combine<T::Acc>> Kernel for AllReduceKernel<T, C> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let out = args.outputs[0] as *mut T;
        let x = if self.in_place { out as *const T } else { args.inputs[0] as *const T };
        let (n, group) = (self.n, self.group);
        replicas::current(|ctx| {
            let Some(ctx) = ctx.filter(|_| group.size > 1) else {
                // SAFETY: `x` and `out` hold `n` elements (the executor's
                // contract); an in-place `x` is `out`, read before written.
                unsafe { reduce_into::<T, C>(1, |_| x, 1, |_| out, 0, n) };
                return Ok(());
            };
            let pos = group.position(&ctx)?;
            let bytes = n * std::mem::size_of::<T>();
            if group.stride == 1 && pos.size == ctx.num_replicas() && ctx.comm.splits_all_reduce(n) {
                // One replica per process: reduce-scatter, then all-gather.
                let part = n / ctx.comm.span().map_or(1, |s| s.transport.size());
                // SAFETY: `x` and `out` hold `n` elements for the whole call, and are
                // one buffer or disjoint (the executor's contract).
                return unsafe {
                    ctx.comm.all_reduce_split(ctx.index, x as *const u8, out as *mut u8, bytes, |src, dst| {
                        // SAFETY: `src(p)` holds process `p`'s `part` elements of this
                        // process's part and `dst` the part of `out`, which only this
                        // replica touches meanwhile (`all_reduce_split`).
                        reduce_into::<T, C>(pos.size, |p| src(p) as *const T, 1, |_| dst as *mut T, 0, part)
                    })
                }
                .map_err(|_| KernelRunError::ReplicaAborted);
            }
            // SAFETY: `x` holds `n` elements for the whole call.
            unsafe {
                ctx.comm.exchange(ctx.index, x as *const u8, bytes, out as *mut u8, |peers| {
                    let src = |k: usize| peers.input(pos.member(k)) as *const T;
                    if peers.solo() {
                        // SAFETY: every member's input holds `n` elements that no one
                        // writes during the exchange (an in-place input is read from
                        // its mirror); `out` is this replica's own, written by it alone.
                        return reduce_into::<T, C>(pos.size, src, 1, |_| out, 0, n);
                    }
                    let (lo, hi) = chunk(n, pos.size, pos.index);
                    let dst = |k: usize| peers.output(pos.member(k)) as *mut T;
                    // SAFETY: every member published buffers of `n` elements of
                    // this op (all replicas run the same kernel); only this
                    // member reads or writes elements `lo..hi` during the exchange.
                    reduce_into::<T, C>(pos.size, src, pos.size, dst, lo, hi)
                })
            }
            .map_err(|_| KernelRunError::ReplicaAborted)
        })
    }
}

fn build_all_reduce(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    check_same(spec, x.info, y.info)?;
    let a = spec.typed::<AllReduceAttrs>()?;
    let op = operator(spec, a.op, x.dtype())?;
    let group = Group::of(spec, a.stride, a.group_size)?;
    let maker = AllReduceMaker { n: x.nelms(), group, in_place: spec.is::<ir::ReplicatedAllReduceInplace>() };
    dispatch_reduce(spec, x.dtype(), op, maker)
}

// ---------------------------------------------------------------- all-gather

/// `ReplicatedAllGather`: the first `m` elements of the members' inputs (`n`
/// elements each) concatenated in member order.
struct AllGatherKernel<T> {
    n: usize,
    m: usize,
    group: Group,
    _t: Types<T>,
}

impl<T: Copy + Send + Sync + 'static> AllGatherKernel<T> {
    /// Copy `src` into member `k`'s place of the output.
    ///
    /// # Safety
    /// `src` holds `n` elements, `out` holds `m` and is written by this replica only.
    unsafe fn place(&self, k: usize, src: *const T, out: *mut T) {
        let off = k * self.n;
        if off < self.m && !std::ptr::eq(src, out.wrapping_add(off).cast_const()) {
            let len = self.n.min(self.m - off);
            // SAFETY: `off + len <= m` and `len <= n`: within `out` and `src`, and `out`,
            // this replica's own output, overlaps no input (this method's contract;
            // an input received into its place in `out` is not copied).
            unsafe { std::ptr::copy_nonoverlapping(src, out.add(off), len) };
        }
    }
}

impl<T: Copy + Send + Sync + 'static> Kernel for AllGatherKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (x, out) = (args.inputs[0] as *const T, args.outputs[0] as *mut T);
        let group = self.group;
        replicas::current(|ctx| {
            if !group.exchanges(&ctx) {
                // SAFETY: `x` holds `n` elements, `out` `m`, and they do not overlap.
                unsafe {
                    self.place(0, x, out);
                    let done = self.n.min(self.m);
                    std::ptr::write_bytes(out.add(done), 0, self.m - done);
                }
                return Ok(());
            }
            let Some(ctx) = ctx else { return Ok(()) };
            let pos = group.position(&ctx)?;
            let size = std::mem::size_of::<T>();
            let bytes = self.n * size;
            // Over every replica without padding, the output is every input in
            // replica order: the other processes' may be received into it.
            let whole = pos.size == ctx.num_replicas() && pos.stride == 1 && self.m == pos.size * self.n;
            let out_bytes = if whole { self.m * size } else { 0 };
            // SAFETY: `x` holds `n` elements and `out` `m` for the whole call; they do
            // not overlap.
            unsafe {
                ctx.comm.exchange_gather(ctx.index, x as *const u8, bytes, out as *mut u8, out_bytes, |peers| {
                    for k in 0..pos.size {
                        // SAFETY: every member's input holds `n` elements, which
                        // no one writes during the exchange; `out` is this
                        // replica's own output, written by it alone, and
                        // `ceil(m / size) == n` keeps the copies in bounds.
                        self.place(k, peers.input(pos.member(k)) as *const T, out);
                    }
                })
            }
            .map_err(|_| KernelRunError::ReplicaAborted)
        })
    }
}

fn build_all_gather(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    let a = spec.typed::<AllGatherAttrs>()?;
    let group = Group::of(spec, a.stride, a.group_size)?;
    let (n, m) = (x.nelms(), y.nelms());
    if x.dtype() != y.dtype() || shard_len(m, group.size) != n {
        return Err(spec.error(format!("cannot gather {} from {} replicas into {}", x.info, group.size, y.info)));
    }
    with_bits!(x.dtype(), B => Ok(Box::new(AllGatherKernel::<B> { n, m, group, _t: PhantomData })))
}

// ---------------------------------------------------------------- reduce-scatter

/// `ReplicatedReduceScatter` with a reduction: each replica's shard (`c`
/// elements of the zero-padded `n`) reduced over the members.
struct ReduceScatterKernel<T, C> {
    n: usize,
    c: usize,
    group: Group,
    _t: Types<(T, C)>,
}

struct ReduceScatterMaker {
    n: usize,
    c: usize,
    group: Group,
}

impl MakeReduce for ReduceScatterMaker {
    fn make<T: Elem, C: Combine<T::Acc>>(self) -> Box<dyn Kernel> {
        Box::new(ReduceScatterKernel::<T, C> { n: self.n, c: self.c, group: self.group, _t: PhantomData })
    }
}

impl<T, C> ReduceScatterKernel<T, C> {
    /// First element of shard `j` and how many of its elements are not padding.
    fn shard(&self, j: usize) -> (usize, usize) {
        let base = j.saturating_mul(self.c);
        (base, self.n.saturating_sub(base).min(self.c))
    }
}

/// Zero the padding of a shard: elements `valid..c` of `out`.
///
/// # Safety
/// `out` is valid for writes of `c` elements.
unsafe fn zero_tail<T>(out: *mut T, valid: usize, c: usize) {
    // SAFETY: `valid..c` lies in `out`'s `c` elements (this function's contract).
    unsafe { std::ptr::write_bytes(out.add(valid), 0, c - valid) };
}

impl<T: Elem, C: Combine<T::Acc>> Kernel for ReduceScatterKernel<T, C> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (x, out) = (args.inputs[0] as *const T, args.outputs[0] as *mut T);
        let group = self.group;
        replicas::current(|ctx| {
            let Some(ctx) = ctx.filter(|_| group.size > 1) else {
                let (base, valid) = self.shard(0);
                // SAFETY: `x` holds `n` elements (`base + valid <= n`), `out` `c`.
                unsafe {
                    reduce_into::<T, C>(1, |_| x.add(base), 1, |_| out, 0, valid);
                    zero_tail(out, valid, self.c);
                }
                return Ok(());
            };
            let pos = group.position(&ctx)?;
            let (base, valid) = self.shard(pos.index);
            let bytes = self.n * std::mem::size_of::<T>();
            // SAFETY: `x` holds `n` elements for the whole call.
            unsafe {
                ctx.comm.exchange(ctx.index, x as *const u8, bytes, out as *mut u8, |peers| {
                    // Only called for `k < size` and when `valid > 0`, so `base < n`.
                    let src = |k: usize| (peers.input(pos.member(k)) as *const T).wrapping_add(base);
                    // SAFETY: the members' inputs hold `n` elements and no one
                    // writes them during the exchange; `out` is this replica's
                    // own output of `c` elements, written by it alone.
                    reduce_into::<T, C>(pos.size, src, 1, |_| out, 0, valid);
                    zero_tail(out, valid, self.c);
                })
            }
            .map_err(|_| KernelRunError::ReplicaAborted)
        })
    }
}

/// `ReplicatedReduceScatter{op: local}`: the replica's own shard of its own input.
struct LocalShardKernel<T> {
    n: usize,
    c: usize,
    group: Group,
    _t: Types<T>,
}

impl<T: Copy + Send + Sync + 'static> Kernel for LocalShardKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let (x, out) = (args.inputs[0] as *const T, args.outputs[0] as *mut T);
        let j = replicas::current(|ctx| match ctx {
            Some(ctx) if self.group.size > 1 => self.group.position(&ctx).map(|p| p.index),
            _ => Ok(0),
        })?;
        let base = j.saturating_mul(self.c);
        let valid = self.n.saturating_sub(base).min(self.c);
        // SAFETY: the input holds `n >= base + valid` elements and the output, the
        // shard, `c >= valid`; they do not overlap (`KernelArgs`).
        unsafe {
            if valid > 0 {
                std::ptr::copy_nonoverlapping(x.add(base), out, valid);
            }
            zero_tail(out, valid, self.c);
        }
        Ok(())
    }
}

fn build_reduce_scatter(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    let a = spec.typed::<ReduceScatterAttrs>()?;
    let group = Group::of(spec, a.stride, a.group_size)?;
    let (n, c) = (x.nelms(), y.nelms());
    if x.dtype() != y.dtype() || shard_len(n, group.size) != c {
        return Err(spec.error(format!("cannot scatter {} over {} replicas into {}", x.info, group.size, y.info)));
    }
    match operator(spec, a.op, x.dtype())? {
        CollectiveOperator::Local => {
            with_bits!(x.dtype(), B => Ok(Box::new(LocalShardKernel::<B> { n, c, group, _t: PhantomData })))
        }
        op => dispatch_reduce(spec, x.dtype(), op, ReduceScatterMaker { n, c, group }),
    }
}

// ---------------------------------------------------------------- AllReduce (IPUs)

/// `AllReduce`: every output the reduction of all inputs (or, with
/// `identical_inputs`, each output a copy of its input).
struct MultiAllReduceKernel<T, C> {
    n: usize,
    k: usize,
    _t: Types<(T, C)>,
}

struct MultiMaker {
    n: usize,
    k: usize,
}

impl MakeReduce for MultiMaker {
    fn make<T: Elem, C: Combine<T::Acc>>(self) -> Box<dyn Kernel> {
        Box::new(MultiAllReduceKernel::<T, C> { n: self.n, k: self.k, _t: PhantomData })
    }
}

impl<T: Elem, C: Combine<T::Acc>> Kernel for MultiAllReduceKernel<T, C> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let src = |i: usize| args.inputs[i] as *const T;
        let dst = |i: usize| args.outputs[i] as *mut T;
        // SAFETY: the `k` inputs and outputs hold `n` elements each (`KernelArgs`), and
        // this kernel, run by one thread, is their only user meanwhile.
        unsafe { reduce_into::<T, C>(self.k, src, self.k, dst, 0, self.n) };
        Ok(())
    }
}

/// `AllReduce{identical_inputs}`: output `i` is input `i`.
struct CopyEachKernel {
    nbytes: usize,
}

impl Kernel for CopyEachKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        for (&x, &y) in args.inputs.iter().zip(args.outputs) {
            // SAFETY: every input and output holds `nbytes`, and outputs overlap no
            // input (`KernelArgs`).
            unsafe { std::ptr::copy_nonoverlapping(x, y, self.nbytes) };
        }
        Ok(())
    }
}

fn build_multi_all_reduce(spec: &KernelSpec<'_>) -> BuildResult {
    let first = spec.input(0)?;
    if spec.inputs.len() != spec.outputs.len() {
        return Err(spec.error(format!("{} inputs but {} outputs", spec.inputs.len(), spec.outputs.len())));
    }
    for ((_, x), (_, y)) in spec.inputs.iter().zip(&spec.outputs) {
        check_same(spec, first.info, x)?;
        check_same(spec, x, y)?;
    }
    let a = spec.typed::<IpuAllReduceAttrs>()?;
    let op = operator(spec, a.op, first.dtype())?;
    if a.identical_inputs {
        return Ok(Box::new(CopyEachKernel { nbytes: first.info.nbytes() }));
    }
    dispatch_reduce(spec, first.dtype(), op, MultiMaker { n: first.nelms(), k: spec.inputs.len() })
}

pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::ReplicatedAllReduce, build_all_reduce),
    (&ir::ReplicatedAllReduceInplace, build_all_reduce),
    (&ir::ReplicatedAllGather, build_all_gather),
    (&ir::ReplicatedReduceScatter, build_reduce_scatter),
    (&ir::AllReduce, build_multi_all_reduce),
];

pub(super) mod matmul_update;
pub(super) mod update;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_update;
