//! This machine's float32 FMA peak, measured: twelve independent chains of
//! vector FMAs per thread (enough to hide the FMA latency on two pipes), 512-bit
//! where the CPU has AVX-512F, else 256-bit AVX2+FMA, else scalar; picked at run
//! time. One copy runs on each of `threads` threads of the worker team at
//! once, so the figure includes any clock drop under load. FLOPs = 2 per lane
//! per FMA.
//!
//! [`PeakProbe`] is the honest limit a benchmark compares itself with: the best
//! of [`PROBES`] short probes on the worker team's own threads, taken just
//! before and just after the timed work; a host disturbed in between (the two
//! bests more than [`TOLERANCE`] apart) gives no share of peak at all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::team;

/// Short probes per measurement ([`PeakProbe::before`], [`PeakProbe::after`]).
pub const PROBES: usize = 5;

/// Largest relative difference between the before and after bests of a
/// steady host: `|before - after| / max(before, after)`.
pub const TOLERANCE: f64 = 0.10;

/// FMA iterations of one short probe on one thread (about 50 ms on a 3 GHz
/// core with two 256-bit FMA pipes: 12 chains of one FMA each, 6 cycles).
const PROBE_ITERS: u64 = 25_000_000;

/// The best of `probes` short FMA probes on the worker team's threads
/// (`threads` tasks through [`team::run`], capped at `threads` threads): GFLOP/s.
pub fn best_of_probes(threads: usize, probes: usize) -> f64 {
    let threads = threads.max(1);
    let isa = isa();
    let flops = AtomicU64::new(0);
    let mut best: f64 = 0.0;
    for _ in 0..probes.max(1) {
        flops.store(0, Ordering::Relaxed);
        let t0 = Instant::now();
        team::with_max_threads(threads, || {
            team::run(threads, &|_| {
                flops.fetch_add(chains(isa, PROBE_ITERS) as u64, Ordering::Relaxed);
            })
        });
        let secs = t0.elapsed().as_secs_f64().max(1e-9);
        best = best.max(flops.load(Ordering::Relaxed) as f64 / secs / 1e9);
    }
    best
}

/// A peak measurement around timed work: [`PeakProbe::before`] it,
/// [`PeakProbe::after`] it.
///
/// ```no_run
/// use popxl_cpu::peak::PeakProbe;
/// let probe = PeakProbe::before(2);
/// // ... the timed steps ...
/// match probe.after().peak() {
///     Some(peak) => println!("peak {peak:.0} GFLOP/s"),
///     None => println!("the host was disturbed: no share of peak"),
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeakProbe {
    threads: usize,
    before: f64,
    /// When the before probes ended.
    at: Instant,
}

impl PeakProbe {
    /// The best of [`PROBES`] short probes on `threads` threads of the team, now.
    pub fn before(threads: usize) -> PeakProbe {
        PeakProbe { threads: threads.max(1), before: best_of_probes(threads, PROBES), at: Instant::now() }
    }

    /// The best GFLOP/s of the probes before the timed work (for shares printed
    /// while it runs; [`PeakProbe::after`] says whether the host kept it).
    pub fn before_gflops(&self) -> f64 {
        self.before
    }

    /// The best of [`PROBES`] probes again, and the verdict on the two.
    pub fn after(self) -> PeakVerdict {
        let after = best_of_probes(self.threads, PROBES);
        PeakVerdict::judge(self.before, after, self.threads, self.at.elapsed())
    }
}

/// The two bests of a [`PeakProbe`] and whether they agree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeakVerdict {
    /// Best GFLOP/s before the timed work.
    pub before: f64,
    /// Best GFLOP/s after it.
    pub after: f64,
    /// Threads probed.
    pub threads: usize,
    /// The FMA instructions used ([`isa`]).
    pub isa: &'static str,
    /// From the end of the before probes to the end of the after probes.
    pub span: Duration,
    /// The two agree within [`TOLERANCE`] (and are positive, finite).
    pub steady: bool,
}

impl PeakVerdict {
    /// The verdict on bests `before` and `after` (GFLOP/s): steady when both
    /// are positive and finite and differ by at most [`TOLERANCE`] of the larger.
    pub fn judge(before: f64, after: f64, threads: usize, span: Duration) -> PeakVerdict {
        let hi = before.max(after);
        let ok = before.is_finite() && after.is_finite() && before > 0.0 && after > 0.0;
        let steady = ok && (before - after).abs() <= TOLERANCE * hi;
        PeakVerdict { before, after, threads, isa: isa(), span, steady }
    }

    /// The peak to compare with (the better of the two bests), `None` when
    /// the host was disturbed.
    pub fn peak(&self) -> Option<f64> {
        self.steady.then(|| self.before.max(self.after))
    }

    /// One line for a benchmark's output: the peak, or that the host was
    /// disturbed with both numbers.
    pub fn describe(&self) -> String {
        match self.peak() {
            Some(p) => format!(
                "fp32 FMA peak {p:.0} GFLOP/s on {} threads ({}; best of {PROBES} probes before {:.0} and after {:.0})",
                self.threads, self.isa, self.before, self.after
            ),
            None => format!(
                "the host was disturbed: the fp32 FMA peak measured {:.0} GFLOP/s before the timed steps and {:.0} \
                 after (more than {:.0}% apart; {} threads, {}): no share of peak",
                self.before,
                self.after,
                TOLERANCE * 100.0,
                self.threads,
                self.isa
            ),
        }
    }
}

/// The widest FMA instruction set the kernels use: `avx512`, `avx2` or
/// `scalar` (at most `avx2` without the `avx512` feature or under
/// `POPXL_CPU_SIMD=avx2`, as the kernels).
pub fn isa() -> &'static str {
    use crate::kernels::par::Simd;
    match Simd::best() {
        Simd::Avx512 => "avx512",
        Simd::Avx2 => "avx2",
        Simd::Base => "scalar",
    }
}

/// Runs the chains; returns the FLOPs done.
fn chains(isa: &str, iters: u64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        // Each branch runs only when the CPU has the features it is compiled for.
        if isa == "avx512" {
            // SAFETY: `isa` is "avx512" only when the CPU has AVX-512F (see the caller).
            return unsafe { chains512(iters) };
        }
        if isa == "avx2" {
            // SAFETY: `isa` is "avx2" only when the CPU has AVX2 and FMA (see the caller).
            return unsafe { chains256(iters) };
        }
    }
    let mut acc = [0f32; 12];
    let (m, c) = (std::hint::black_box(0.999_999f32), std::hint::black_box(1e-7f32));
    for _ in 0..iters / 8 {
        for a in acc.iter_mut() {
            *a = a.mul_add(m, c);
        }
    }
    std::hint::black_box(acc);
    2.0 * 12.0 * (iters / 8) as f64
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn chains512(iters: u64) -> f64 {
    use std::arch::x86_64::*;
    let (m, c) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
    let mut acc = [_mm512_setzero_ps(); 12];
    for _ in 0..iters {
        for a in acc.iter_mut() {
            *a = _mm512_fmadd_ps(*a, m, c);
        }
    }
    std::hint::black_box(acc);
    2.0 * 16.0 * 12.0 * iters as f64
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn chains256(iters: u64) -> f64 {
    use std::arch::x86_64::*;
    let (m, c) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let mut acc = [_mm256_setzero_ps(); 12];
    for _ in 0..iters {
        for a in acc.iter_mut() {
            *a = _mm256_fmadd_ps(*a, m, c);
        }
    }
    std::hint::black_box(acc);
    2.0 * 8.0 * 12.0 * iters as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(before: f64, after: f64) -> PeakVerdict {
        PeakVerdict::judge(before, after, 2, Duration::ZERO)
    }

    #[test]
    fn agreeing_bests_give_the_larger() {
        assert_eq!(judge(180.0, 187.0).peak(), Some(187.0));
        assert_eq!(judge(187.0, 180.0).peak(), Some(187.0));
        assert_eq!(judge(100.0, 100.0).peak(), Some(100.0));
    }

    #[test]
    fn ten_percent_is_the_boundary() {
        // 90 vs 100: exactly 10% of the larger apart: still steady.
        assert_eq!(judge(90.0, 100.0).peak(), Some(100.0));
        assert_eq!(judge(100.0, 89.9).peak(), None);
        // The run of issue 37: 95 against 182-187.
        let v = judge(95.0, 184.0);
        assert!(!v.steady);
        assert_eq!(v.peak(), None);
        assert!(v.describe().contains("disturbed") && v.describe().contains("95") && v.describe().contains("184"));
        assert!(judge(184.0, 186.0).describe().contains("186"));
    }

    #[test]
    fn unusable_numbers_are_never_steady() {
        for (a, b) in [(0.0, 0.0), (f64::NAN, 10.0), (10.0, f64::INFINITY), (-1.0, -1.0)] {
            assert_eq!(judge(a, b).peak(), None, "{a} {b}");
        }
    }

    #[test]
    fn a_short_probe_measures_something() {
        let g = best_of_probes(1, 1);
        assert!(g.is_finite() && g > 0.0, "{g}");
    }
}
