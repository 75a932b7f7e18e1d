//! Threading and SIMD dispatch: the parallel range splitters over the worker team
//! ([`team`]), and the SIMD tiers ([`Simd`], [`wide_simd!`]) kernels' loops are
//! compiled for and picked at run time.

use std::ops::Range;

use super::ptr::{slice, slice_mut, SendPtr};
use crate::team;

/// Elements below which a kernel never splits work over threads.
pub(crate) const PAR_MIN_ELEMS: usize = 1 << 18;
/// Smallest piece of work handed to one parallel task.
const PAR_CHUNK: usize = 1 << 14;

/// Run `f` over `0..n`, split into contiguous pieces over the worker team ([`team`])
/// when `n` is at least [`PAR_MIN_ELEMS`] and more than one thread is available.
/// Each piece runs the AVX2 build of `f` where the CPU has it ([`Simd::run_narrow`]).
#[inline]
pub(crate) fn par_range(n: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    par_split(n, PAR_MIN_ELEMS, PAR_CHUNK, f);
}

/// `f(start, xs, ys)` over the pieces [`par_range`] makes of `0..n`: `xs` and
/// `ys` are a piece's elements of `x` and `y`, `start` the index of its first
/// element (one input to one output of another type: casts, predicates, masks).
///
/// # Safety
/// `x` must hold `n` elements of `S` and `y` `n` elements of `D`, both valid for
/// the call, and they must not overlap.
#[inline(always)]
pub(crate) unsafe fn par_map<S, D>(n: usize, x: *const S, y: *mut D, f: impl Fn(usize, &[S], &mut [D]) + Sync + Send) {
    let (x, y) = (SendPtr(x as *mut S), SendPtr(y));
    par_range(
        n,
        #[inline(always)]
        move |r| {
            // SAFETY: both buffers hold `n` elements and do not overlap (the caller's
            // contract); the pieces of `0..n` are disjoint.
            let (xs, ys) = unsafe { (slice(x.get().add(r.start), r.len()), slice_mut(y.get().add(r.start), r.len())) };
            f(r.start, xs, ys);
        },
    );
}

/// Copies `n` elements from `src` to `dst` in the pieces [`par_range`] makes:
/// a large copy is bound by memory bandwidth, which one core does not use up.
///
/// # Safety
/// `src` and `dst` must hold `n` elements each, valid for the call, and must
/// not overlap.
#[inline]
pub(crate) unsafe fn par_copy<E: Copy>(src: *const E, dst: *mut E, n: usize) {
    let (s, d) = (SendPtr(src as *mut E), SendPtr(dst));
    par_range(n, move |r| {
        // SAFETY: both hold `n` elements and do not overlap (the caller's
        // contract); the pieces of `0..n` are disjoint.
        unsafe { slice_mut(d.get().add(r.start), r.len()).copy_from_slice(slice(s.get().add(r.start), r.len())) }
    });
}

/// Writes `v` to the `n` elements at `dst` in the pieces [`par_range`] makes.
///
/// # Safety
/// `dst` must hold `n` elements, valid for the call.
#[inline]
pub(crate) unsafe fn par_fill<E: Copy + Send + Sync>(dst: *mut E, n: usize, v: E) {
    let d = SendPtr(dst);
    par_range(n, move |r| {
        // SAFETY: `dst` holds `n` elements (the caller's contract); the pieces
        // of `0..n` are disjoint.
        unsafe { slice_mut(d.get().add(r.start), r.len()).fill(v) }
    });
}

/// [`par_range`] for work costing about `cost` simple elementwise operations per
/// item (transcendental maps): splits `cost` times earlier, in pieces `cost` times
/// smaller, and runs the build of `f` for that cost ([`Simd::for_cost`]).
#[inline]
pub(crate) fn par_range_cost(n: usize, cost: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    let cost = cost.max(1);
    if cost > 1 {
        par_split_tier::<true>(n, PAR_MIN_ELEMS / cost, PAR_CHUNK / cost, f);
    } else {
        par_split(n, PAR_MIN_ELEMS, PAR_CHUNK, f);
    }
}

/// Run `f` over `0..n` in pieces of at least `min_chunk` items on the worker team
/// when `n >= min_total` (sequentially otherwise or with one thread); each piece
/// runs the AVX2 build of `f` where the CPU has it.
#[inline]
pub(crate) fn par_split(n: usize, min_total: usize, min_chunk: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    par_split_tier::<false>(n, min_total, min_chunk, f);
}

/// [`par_split`] running the widest build of `f` ([`Simd::run`]) when `WIDE`,
/// else at most its AVX2 build ([`Simd::run_narrow`]). `f` is inlined at one
/// call site per build.
fn par_split_tier<const WIDE: bool>(
    n: usize,
    min_total: usize,
    min_chunk: usize,
    f: impl Fn(Range<usize>) + Sync + Send,
) {
    let simd = Simd::best();
    let piece = |r: Range<usize>| {
        if WIDE {
            simd.run(
                #[inline(always)]
                || f(r),
            )
        } else {
            simd.run_narrow(
                #[inline(always)]
                || f(r),
            )
        }
    };
    let min_chunk = min_chunk.max(1);
    let threads = team::num_threads();
    if n < min_total || n < 2 * min_chunk || threads <= 1 {
        piece(0..n);
        return;
    }
    let chunk = n.div_ceil(threads * 4).max(min_chunk);
    let pieces = n.div_ceil(chunk);
    team::run(pieces, &|p| piece(p * chunk..((p + 1) * chunk).min(n)));
}

/// The instruction set a kernel's loops are compiled for, picked at kernel-build
/// time from what this CPU runs (the binary itself targets baseline x86-64).
///
/// The loops are plain Rust that LLVM vectorises; [`Simd::run`] and
/// [`wide_simd!`] compile them once per tier and call the build of the tier
/// asked for. No tier changes a result: Rust never contracts `a * b + c` into
/// a fused multiply-add, and the loops fix their own summation order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Simd {
    /// The baseline build (SSE2 on x86-64).
    Base,
    /// AVX2 and FMA (x86-64-v3).
    Avx2,
    /// AVX-512 F, VL, DQ and BW.
    Avx512,
}

impl Simd {
    /// The widest tier this CPU runs (detected once).
    pub(crate) fn best() -> Simd {
        static TIER: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
        *TIER.get_or_init(detect)
    }

    /// The tier for a loop costing about `cost` simple operations per element:
    /// AVX-512 pays only for expensive maps (1.5-2x on gelu, exp); cheap ones
    /// are bound by memory and run the AVX2 build.
    pub(crate) fn for_cost(cost: usize) -> Simd {
        if cost > 1 {
            Simd::best()
        } else {
            Simd::best().min(Simd::Avx2)
        }
    }

    /// Run `f` compiled for this tier: `f` and every `#[inline(always)]`
    /// function it calls are built with the tier's features. The caller
    /// obtained the tier from [`Simd::best`] or [`Simd::for_cost`], so the CPU
    /// runs it.
    #[inline(always)]
    pub(crate) fn run<R>(self, f: impl FnOnce() -> R) -> R {
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
            unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            match self {
                // SAFETY: tiers above `Base` come from `detect`, which checked the features.
                Simd::Avx512 => return unsafe { avx512(f) },
                // SAFETY: as above.
                Simd::Avx2 => return unsafe { avx2(f) },
                Simd::Base => {}
            }
        }
        f()
    }

    /// [`Simd::run`] without an AVX-512 build (one build fewer for loops bound by
    /// memory): the AVX-512 tier runs the AVX2 build.
    #[inline(always)]
    pub(crate) fn run_narrow<R>(self, f: impl FnOnce() -> R) -> R {
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            if self >= Simd::Avx2 {
                // SAFETY: tiers above `Base` come from `detect`, which checked the features.
                return unsafe { avx2(f) };
            }
        }
        f()
    }
}

/// The widest tier this CPU runs (at most [`Simd::Avx2`] in a build without
/// the `avx512` feature), lowered to `POPXL_CPU_SIMD` when that names a
/// narrower one ([`cap`]).
fn detect() -> Simd {
    let widest = widest();
    cap(widest, std::env::var("POPXL_CPU_SIMD").ok().as_deref())
}

/// `widest` lowered to the tier `var` names (`avx512`, `avx2` or `base`, any
/// case): as PyTorch's `ATEN_CPU_CAPABILITY`, how a machine with AVX-512 runs
/// (and CI tests) the code paths of a machine without it, in the same build.
/// It never raises the tier; an unknown name leaves it as detected.
fn cap(widest: Simd, var: Option<&str>) -> Simd {
    let asked = match var.map(str::to_ascii_lowercase).as_deref() {
        Some("avx512") => Simd::Avx512,
        Some("avx2") => Simd::Avx2,
        Some("base") => Simd::Base,
        _ => return widest,
    };
    widest.min(asked)
}

/// The widest tier this CPU and build run.
fn widest() -> Simd {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if cfg!(feature = "avx512")
            && has!("avx512f")
            && has!("avx512vl")
            && has!("avx512dq")
            && has!("avx512bw")
            && has!("avx2")
            && has!("fma")
        {
            return Simd::Avx512;
        }
        if has!("avx2") && has!("fma") {
            return Simd::Avx2;
        }
    }
    Simd::Base
}

/// Whether this CPU's 256-bit masked loads (`vmaskmovps`) cost more than the
/// copies they save: AMD's family 17h before Zen 2 (Zen and Zen+, models
/// below 30h), whose load ports are 128 bits wide. There the depthwise sweep
/// with masked loads ran 2-2.7x slower than the blocked kernel's padded
/// copies on 7x7 and 14x14 planes, where newer cores run it 1.3-2.3x faster.
/// Detected once.
pub(crate) fn slow_masked_loads() -> bool {
    static SLOW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SLOW.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::__cpuid;
            // SAFETY: CPUID leaves 0 and 1 exist on every x86-64 CPU.
            #[allow(unused_unsafe)]
            let (vendor, sig) = unsafe { (__cpuid(0), __cpuid(1).eax) };
            zen1((vendor.ebx, vendor.edx, vendor.ecx), sig)
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// Whether this CPU is an Intel one (CPUID's vendor "GenuineIntel"), whose
/// AVX-512 cores run 512-bit FMAs at full width on two pipes (AMD's Zen 4
/// runs each as two 256-bit halves). Detected once.
pub(crate) fn intel() -> bool {
    static INTEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *INTEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::__cpuid;
            // SAFETY: CPUID leaf 0 exists on every x86-64 CPU.
            #[allow(unused_unsafe)]
            let v = unsafe { __cpuid(0) };
            (v.ebx, v.edx, v.ecx) == (0x756e_6547, 0x4965_6e69, 0x6c65_746e)
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// Whether CPUID's vendor words (leaf 0: ebx, edx, ecx) and signature (leaf
/// 1: eax) name an AMD Zen or Zen+ core (family 17h, model below 30h).
fn zen1(vendor: (u32, u32, u32), sig: u32) -> bool {
    let amd = vendor == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
    let base = (sig >> 8) & 0xf;
    let family = if base == 0xf { base + ((sig >> 20) & 0xff) } else { base };
    let model = ((sig >> 4) & 0xf) | if base == 0xf { ((sig >> 16) & 0xf) << 4 } else { 0 };
    amd && family == 0x17 && model < 0x30
}

/// Defines `$name(simd, args..)`: runs the `#[inline(always)]` function `$body`
/// compiled for the [`Simd`] tier `simd`.
macro_rules! wide_simd {
    ($(#[$m:meta])* $vis:vis fn $name:ident<$($g:ident: $b:path),*>($($a:ident: $t:ty),*) => $body:ident) => {
        $(#[$m])*
        #[inline]
        $vis fn $name<$($g: $b),*>(simd: $crate::kernels::par::Simd, $($a: $t),*) {
            simd.run(
                #[inline(always)]
                || $body::<$($g),*>($($a),*),
            )
        }
    };
}
pub(crate) use wide_simd;

#[cfg(test)]
mod tests {
    use super::*;

    /// `POPXL_CPU_SIMD` lowers the tier, never raises it, and an unknown name
    /// leaves it as detected.
    #[test]
    fn simd_cap_only_lowers() {
        use Simd::*;
        assert_eq!(cap(Avx512, Some("avx2")), Avx2);
        assert_eq!(cap(Avx512, Some("AVX2")), Avx2);
        assert_eq!(cap(Avx512, Some("base")), Base);
        assert_eq!(cap(Avx2, Some("avx512")), Avx2);
        assert_eq!(cap(Base, Some("avx2")), Base);
        assert_eq!(cap(Avx512, Some("sse9")), Avx512);
        assert_eq!(cap(Avx2, None), Avx2);
    }

    /// The signatures of published CPUs: Zen (EPYC 7601, this project's AVX2
    /// benchmark machine's family 17h model 1) and Zen+ have slow masked loads;
    /// Zen 2, Zen 3, Zen 4 and Intel cores do not.
    #[test]
    fn zen1_is_told_from_cpuid() {
        let amd = (0x6874_7541, 0x6974_6e65, 0x444d_4163);
        let intel = (0x756e_6547, 0x6c65_746e, 0x4965_6e69);
        for (sig, want) in [(0x0080_0f12, true), (0x0080_0f82, true), (0x0083_0f10, false), (0x00a0_0f11, false)] {
            assert_eq!(zen1(amd, sig), want, "{sig:#x}");
        }
        assert!(!zen1(amd, 0x00a6_0f12), "Zen 4");
        assert!(!zen1(intel, 0x0080_0f12), "not AMD");
        assert!(!zen1(intel, 0x0005_0654), "Skylake-SP");
    }

    #[test]
    fn par_range_covers_everything_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let n = 300_001;
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        par_range(n, |r| {
            for i in r {
                hits[i].fetch_add(1, Ordering::Relaxed);
            }
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }
}
