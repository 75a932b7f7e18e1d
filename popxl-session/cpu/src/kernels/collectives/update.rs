//! `ReplicatedAllReduceScaledAddInplace(w, g)`: `w += b * reduce(g)` over a
//! replica group (the `fuse-all-reduce-update` pattern's data-parallel SGD
//! step). Member `j` of a group reduces chunk `j` of the members' gradients,
//! in member order, and adds `b` times the result into chunk `j` of every
//! member's weight: one pass, the reduced gradient never stored. In float32
//! the results are those of the unfused all-reduce followed by the update, bit
//! for bit (the same sum in member order, division and multiply-add).

use half::f16;
use popart_ir::ops::all as ir;
use popart_ir::ops::collectives::AllReduceUpdateAttrs;
use popart_ir::ops::collectives::CollectiveOperator;
use popart_ir::DataType;

use super::chunk;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelRunError, KernelSpec};
use crate::kernels::par::Simd;
use crate::kernels::ptr::{slice, slice_mut};
use crate::kernels::spec::{boxed, BuildResult, SpecExt, Types};
use crate::kernels::KernelEntry;
use crate::replicas::{self, GroupPos};

/// Elements reduced per block, accumulated on the stack.
const BLOCK: usize = 256;

/// A float element: loaded to and stored from f32.
pub(super) trait Float: Copy + Send + Sync + 'static {
    /// As f32.
    fn load(self) -> f32;
    /// From f32, rounded.
    fn store(x: f32) -> Self;
    /// `dst[i] += src[i]` (in f32, rounded once).
    #[inline(always)]
    fn add_assign(dst: &mut [Self], src: &[Self]) {
        for (o, &a) in dst.iter_mut().zip(src) {
            *o = Self::store(o.load() + a.load());
        }
    }
}

impl Float for f32 {
    #[inline(always)]
    fn load(self) -> f32 {
        self
    }
    #[inline(always)]
    fn store(x: f32) -> f32 {
        x
    }
}

impl Float for f16 {
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn store(x: f32) -> f16 {
        f16::from_f32(x)
    }
}

struct UpdateKernel<T> {
    n: usize,
    stride: usize,
    group_size: usize,
    mean: bool,
    b: f32,
    _t: Types<T>,
}

impl<T: Float> UpdateKernel<T> {
    /// `w_d[lo..hi] += b * reduce(g_k[lo..hi])` over the `count` members'
    /// gradients, for every destination `d < dsts`.
    ///
    /// # Safety
    /// Every `g(k)` and `w(d)` holds `hi` elements; nobody else touches
    /// elements `lo..hi` of any `w(d)` meanwhile, and no `g(k)` is written.
    #[allow(clippy::too_many_arguments)]
    unsafe fn apply(
        &self,
        count: usize,
        g: impl Fn(usize) -> *const T,
        dsts: usize,
        w: impl Fn(usize) -> *mut T,
        lo: usize,
        hi: usize,
    ) {
        // As the unfused ops compute it: the mean (a division), then `w + b * mean`.
        let (divisor, b) = (if self.mean { count as f32 } else { 1.0 }, self.b);
        // The AVX2 build where the CPU has it.
        Simd::for_cost(1).run_narrow(
            #[inline(always)]
            move || {
                let mut acc = [0f32; BLOCK];
                let mut start = lo;
                while start < hi {
                    let len = (hi - start).min(BLOCK);
                    let acc = &mut acc[..len];
                    // SAFETY: `start + len <= hi`, within every `g(k)`, which nobody writes
                    // (this method's contract); likewise below.
                    for (a, &x) in acc.iter_mut().zip(unsafe { slice(g(0).add(start), len) }) {
                        *a = x.load();
                    }
                    for k in 1..count {
                        // SAFETY: as above.
                        for (a, &x) in acc.iter_mut().zip(unsafe { slice(g(k).add(start), len) }) {
                            *a += x.load();
                        }
                    }
                    for d in 0..dsts {
                        // SAFETY: `start..start + len` lies in `lo..hi` of `w(d)`, which only
                        // this call touches meanwhile (this method's contract).
                        for (o, &a) in unsafe { slice_mut(w(d).add(start), len) }.iter_mut().zip(acc.iter()) {
                            *o = T::store(o.load() + b * (a / divisor));
                        }
                    }
                    start += len;
                }
            },
        );
    }
}

impl<T: Float> Kernel for UpdateKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let w = args.outputs[0] as *mut T;
        let g = args.inputs[1] as *const T;
        let n = self.n;
        replicas::current(|ctx| {
            let Some(ctx) = ctx.filter(|_| self.group_size > 1) else {
                // SAFETY: `w` and `g` hold `n` elements and do not overlap (the
                // executor's contract: only `w` is aliased, to the output).
                unsafe { self.apply(1, |_| g, 1, |_| w, 0, n) };
                return Ok(());
            };
            let pos = GroupPos::of(ctx.num_replicas(), self.stride, self.group_size, ctx.index)
                .ok_or(KernelRunError::ReplicaAborted)?;
            let bytes = n * std::mem::size_of::<T>();
            // SAFETY: `g` holds `n` elements for the whole call.
            unsafe {
                ctx.comm.exchange(ctx.index, g as *const u8, bytes, w as *mut u8, |peers| {
                    let gs = |k: usize| peers.input(pos.member(k)) as *const T;
                    if peers.solo() {
                        // SAFETY: every member's gradient holds `n` elements, only
                        // read; `w` is this replica's own weight, updated by it alone.
                        return self.apply(pos.size, gs, 1, |_| w, 0, n);
                    }
                    let (lo, hi) = chunk(n, pos.size, pos.index);
                    let ws = |k: usize| peers.output(pos.member(k)) as *mut T;
                    // SAFETY: every member published its `n`-element gradient and
                    // weight of this op (all replicas run the same kernel); only this
                    // member touches elements `lo..hi` of the weights during the
                    // exchange, and gradients are only read.
                    self.apply(pos.size, gs, pos.size, ws, lo, hi)
                })
            }
            .map_err(|_| KernelRunError::ReplicaAborted)
        })
    }
}

/// The attributes of a fused data-parallel update: its group, whether `op` is
/// mean (else add) and the scale `b`.
pub(super) struct UpdateAttrs {
    pub stride: usize,
    pub group_size: usize,
    pub mean: bool,
    pub b: f64,
}

impl UpdateAttrs {
    /// Read and check them.
    pub(super) fn of(spec: &KernelSpec<'_>) -> Result<UpdateAttrs, KernelError> {
        let a: AllReduceUpdateAttrs = spec.typed()?;
        let positive = |v: i64, what: &str| {
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| spec.error(format!("{what} must be a positive integer")))
        };
        let (stride, group_size) = (positive(a.stride, "the stride")?, positive(a.group_size, "the group size")?);
        let mean = match a.op {
            CollectiveOperator::Add => false,
            CollectiveOperator::Mean => true,
            _ => return Err(spec.error("the operator must be add or mean")),
        };
        let b = a.b;
        Ok(UpdateAttrs { stride, group_size, mean, b })
    }
}

fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let (w, g, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    if w.info != g.info || w.info != y.info {
        return Err(spec.error(format!("weight {}, gradient {} and output {} must match", w.info, g.info, y.info)));
    }
    let UpdateAttrs { stride, group_size, mean, b } = UpdateAttrs::of(spec)?;
    let b = b as f32;
    let n = w.nelms();
    match w.dtype() {
        DataType::Float32 => boxed(UpdateKernel::<f32> { n, stride, group_size, mean, b, _t: Types::default() }),
        DataType::Float16 => boxed(UpdateKernel::<f16> { n, stride, group_size, mean, b, _t: Types::default() }),
        other => Err(spec.unsupported_dtype(other)),
    }
}

pub(crate) const KERNELS: &[KernelEntry] = &[(&ir::ReplicatedAllReduceScaledAddInplace, build)];
