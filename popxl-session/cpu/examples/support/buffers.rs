//! Helpers shared by the kernel benchmarks: aligned, deterministically filled f32
//! buffers and option parsing.

/// 64 bytes of f32, 64-byte aligned, as the executor's arena provides.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct Line(pub [f32; 16]);

/// At least `n` f32 values (one line minimum) in [-0.5, 0.5), from `seed`.
pub fn buffer(n: usize, seed: u64) -> Vec<Line> {
    let mut state = seed;
    let mut v = vec![Line([0.0; 16]); n.div_ceil(16).max(1)];
    for x in v.iter_mut().flat_map(|l| l.0.iter_mut()) {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *x = ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5;
    }
    v
}

/// A comma-separated list of integers (`--sizes 256,512`); panics with a usage hint.
pub fn parse_list(s: &str) -> Vec<usize> {
    s.split(',').map(|x| x.trim().parse().expect("a comma-separated list of integers")).collect()
}
