//! Threading and SIMD dispatch: the parallel range splitters over the worker team
//! ([`team`]) and [`wide_simd!`] for maps also compiled for AVX-512.

use std::ops::Range;

use crate::cpu::team;

/// Elements below which a kernel never splits work over threads.
pub(crate) const PAR_MIN_ELEMS: usize = 1 << 18;
/// Smallest piece of work handed to one parallel task.
const PAR_CHUNK: usize = 1 << 14;

/// Run `f` over `0..n`, split into contiguous pieces over the worker team ([`team`])
/// when `n` is at least [`PAR_MIN_ELEMS`] and more than one thread is available.
#[inline]
pub(crate) fn par_range(n: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    par_split(n, PAR_MIN_ELEMS, PAR_CHUNK, f);
}

/// [`par_range`] for work costing about `cost` simple elementwise operations per
/// item (transcendental maps): splits `cost` times earlier, in pieces `cost` times smaller.
#[inline]
pub(crate) fn par_range_cost(n: usize, cost: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    let cost = cost.max(1);
    par_split(n, PAR_MIN_ELEMS / cost, PAR_CHUNK / cost, f);
}

/// Run `f` over `0..n` in pieces of at least `min_chunk` items on the worker team
/// when `n >= min_total` (sequentially otherwise or with one thread).
pub(crate) fn par_split(n: usize, min_total: usize, min_chunk: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    let min_chunk = min_chunk.max(1);
    if n < min_total || n < 2 * min_chunk {
        f(0..n);
        return;
    }
    let threads = team::num_threads();
    if threads <= 1 {
        f(0..n);
        return;
    }
    let chunk = n.div_ceil(threads * 4).max(min_chunk);
    let pieces = n.div_ceil(chunk);
    team::run(pieces, &|p| f(p * chunk..((p + 1) * chunk).min(n)));
}

/// True when the CPU runs AVX-512 (F, VL, DQ, BW): expensive elementwise maps
/// are then also compiled for it and picked at run time (1.5-2x on gelu, exp).
pub(crate) fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Defines `$name(wide, args..)`: runs the `#[inline(always)]` function `$body`
/// compiled for AVX-512 when `wide` (see [`has_avx512`]), as built otherwise.
macro_rules! wide_simd {
    ($(#[$m:meta])* $vis:vis fn $name:ident<$($g:ident: $b:path),*>($($a:ident: $t:ty),*) => $body:ident) => {
        $(#[$m])*
        #[inline]
        $vis fn $name<$($g: $b),*>(wide: bool, $($a: $t),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw")]
                unsafe fn wide_body<$($g: $b),*>($($a: $t),*) {
                    $body::<$($g),*>($($a),*)
                }
                if wide {
                    // SAFETY: `wide` is only true when the CPU has these features.
                    return unsafe { wide_body::<$($g),*>($($a),*) };
                }
            }
            let _ = wide;
            $body::<$($g),*>($($a),*)
        }
    };
}
pub(crate) use wide_simd;

#[cfg(test)]
mod tests {
    use super::*;

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
