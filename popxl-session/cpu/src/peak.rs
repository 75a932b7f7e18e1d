//! This machine's float32 FMA peak, measured: twelve independent chains of
//! vector FMAs per thread (enough to hide the FMA latency on two pipes), 512-bit
//! where the CPU has AVX-512F, else 256-bit AVX2+FMA, else scalar; picked at run
//! time. `threads` copies run at once on scoped threads, one per core, so the
//! figure includes any clock drop under load. FLOPs = 2 per lane per FMA.

use std::time::Instant;

/// Measured fp32 peak in GFLOP/s over `threads` threads, and the ISA used.
pub fn fma_peak_gflops(threads: usize) -> (f64, &'static str) {
    let isa = isa();
    let iters: u64 = 40_000_000;
    let t0 = Instant::now();
    let flops_per_thread: f64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads.max(1)).map(|_| s.spawn(move || chains(isa, iters))).collect();
        // A chain thread cannot panic; one that did would count as no work.
        hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum::<f64>() / threads.max(1) as f64
    });
    let secs = t0.elapsed().as_secs_f64();
    (flops_per_thread * threads.max(1) as f64 / secs / 1e9, isa)
}

/// The widest FMA instruction set this CPU has: `avx512`, `avx2` or `scalar`.
pub fn isa() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return "avx512";
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            return "avx2";
        }
    }
    "scalar"
}

/// Runs the chains; returns the FLOPs done.
fn chains(isa: &str, iters: u64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: each branch runs only when the CPU has the features it is compiled for.
        if isa == "avx512" {
            return unsafe { chains512(iters) };
        }
        if isa == "avx2" {
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
