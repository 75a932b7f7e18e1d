//! Host-side seed creation (PopXL's `popxl.create_seeds`), bit-exact with numpy:
//! PopXL draws `uint64` values with `np.random.default_rng(seed + offset)`, that is
//! numpy's `SeedSequence` hashing of the seed and its `PCG64` generator (XSL-RR
//! output of a 128-bit LCG), and splits each into `[high, low]` 32-bit words.

use ndarray::{ArrayD, IxDyn};

use crate::{PopXlError, Result};

/// Keyword arguments of [`create_seeds_with`] (PopXL's defaults: offset 0, one of
/// everything).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeedOptions {
    /// Added to the seed.
    pub offset: u64,
    /// Batches per step.
    pub batches_per_step: usize,
    /// Gradient accumulation factor.
    pub gradient_accumulation_factor: usize,
    /// Replicas.
    pub replicas: usize,
}

impl Default for SeedOptions {
    fn default() -> Self {
        SeedOptions { offset: 0, batches_per_step: 1, gradient_accumulation_factor: 1, replicas: 1 }
    }
}

/// One `uint32[2]` seed from `seed`, as PopXL's `create_seeds(seed)`.
///
/// ```
/// let s = popxl::create_seeds(0);
/// assert_eq!(s.shape(), &[2]);
/// assert_eq!(s.iter().copied().collect::<Vec<u32>>(), vec![2735729615, 3653403231]);
/// ```
pub fn create_seeds(seed: u64) -> ArrayD<u32> {
    let mut rng = Pcg64::from_seed_sequence(&SeedSequence::new(u128::from(seed)));
    let v = rng.next_u64();
    ndarray::arr1(&[(v >> 32) as u32, v as u32]).into_dyn()
}

/// `batches_per_step * gradient_accumulation_factor * replicas` seeds from
/// `seed + offset` (PopXL's `create_seeds`), of shape
/// `[batches_per_step, gradient_accumulation_factor, replicas, 2]` with the size-1
/// dimensions removed (numpy's `squeeze`, so one seed is `[2]`). An empty count
/// gives an empty array; a count whose size overflows is an error.
///
/// ```
/// use popxl::{create_seeds_with, SeedOptions};
/// let s = create_seeds_with(42, SeedOptions { batches_per_step: 3, replicas: 2, ..Default::default() }).unwrap();
/// assert_eq!(s.shape(), &[3, 2, 2]);
/// ```
pub fn create_seeds_with(seed: u64, options: SeedOptions) -> Result<ArrayD<u32>> {
    let SeedOptions { offset, batches_per_step: b, gradient_accumulation_factor: g, replicas: r } = options;
    let count = b.checked_mul(g).and_then(|n| n.checked_mul(r)).filter(|n| n.checked_mul(2).is_some());
    let count = count.ok_or_else(|| PopXlError::IntegerOutOfRange {
        what: "create_seeds: batches_per_step * gradient_accumulation_factor * replicas".to_string(),
        value: format!("{b} * {g} * {r}"),
        ty: "usize",
    })?;
    let words = seed_words(u128::from(seed) + u128::from(offset), count)?;
    let shape: Vec<usize> = [b, g, r, 2].into_iter().filter(|&d| d != 1).collect();
    let len = words.len();
    ArrayD::from_shape_vec(IxDyn(&shape), words).map_err(|_| PopXlError::ShapeMismatch {
        what: "create_seeds: the seeds".to_string(),
        expected: format!("of shape {shape:?}"),
        got: format!("{len} words"),
    })
}

/// `count` draws of PCG64 seeded by `SeedSequence(entropy)`, each as `[high, low]`.
fn seed_words(entropy: u128, count: usize) -> Result<Vec<u32>> {
    let mut rng = Pcg64::from_seed_sequence(&SeedSequence::new(entropy));
    let mut out = Vec::new();
    out.try_reserve_exact(count.saturating_mul(2)).map_err(|_| PopXlError::AllocationFailed {
        what: format!("create_seeds: {count} seeds"),
        bytes: count.saturating_mul(8),
    })?;
    for _ in 0..count {
        let v = rng.next_u64();
        out.push((v >> 32) as u32);
        out.push(v as u32);
    }
    Ok(out)
}

/// numpy's `SeedSequence` (pool size 4, no spawn key) for a non-negative integer entropy.
struct SeedSequence {
    pool: [u32; 4],
}

const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;

impl SeedSequence {
    fn new(entropy: u128) -> Self {
        // The entropy as little-endian 32-bit words (0 is one word).
        let mut words = Vec::new();
        let mut n = entropy;
        loop {
            words.push(n as u32);
            n >>= 32;
            if n == 0 {
                break;
            }
        }
        let mut hash_const = INIT_A;
        let mut hashmix = |value: u32| -> u32 {
            let mut v = value ^ hash_const;
            hash_const = hash_const.wrapping_mul(MULT_A);
            v = v.wrapping_mul(hash_const);
            v ^ (v >> XSHIFT)
        };
        let mix = |x: u32, y: u32| -> u32 {
            let r = MIX_MULT_L.wrapping_mul(x).wrapping_sub(MIX_MULT_R.wrapping_mul(y));
            r ^ (r >> XSHIFT)
        };
        let mut pool = [0u32; 4];
        for (i, p) in pool.iter_mut().enumerate() {
            *p = hashmix(words.get(i).copied().unwrap_or(0));
        }
        for src in 0..4 {
            for dst in 0..4 {
                if src != dst {
                    let h = hashmix(pool[src]);
                    pool[dst] = mix(pool[dst], h);
                }
            }
        }
        for &w in words.iter().skip(4) {
            for p in pool.iter_mut() {
                let h = hashmix(w);
                *p = mix(*p, h);
            }
        }
        SeedSequence { pool }
    }

    /// `generate_state(n, uint64)`: `2n` hashed 32-bit words, paired little-endian.
    fn generate_u64(&self, n: usize) -> Vec<u64> {
        let mut hash_const = INIT_B;
        let words: Vec<u32> = (0..2 * n)
            .map(|i| {
                let mut v = self.pool[i % 4] ^ hash_const;
                hash_const = hash_const.wrapping_mul(MULT_B);
                v = v.wrapping_mul(hash_const);
                v ^ (v >> XSHIFT)
            })
            .collect();
        words.chunks(2).map(|c| u64::from(c[0]) | (u64::from(c[1]) << 32)).collect()
    }
}

/// numpy's `PCG64`: a 128-bit LCG with the XSL-RR output function.
struct Pcg64 {
    state: u128,
    inc: u128,
}

const PCG_MULT: u128 = 0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645;

impl Pcg64 {
    fn from_seed_sequence(seq: &SeedSequence) -> Self {
        let v = seq.generate_u64(4);
        let seed = (u128::from(v[0]) << 64) | u128::from(v[1]);
        let initseq = (u128::from(v[2]) << 64) | u128::from(v[3]);
        let mut rng = Pcg64 { state: 0, inc: (initseq << 1) | 1 };
        rng.step();
        rng.state = rng.state.wrapping_add(seed);
        rng.step();
        rng
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    fn next_u64(&mut self) -> u64 {
        self.step();
        let s = self.state;
        ((s >> 64) as u64 ^ s as u64).rotate_right((s >> 122) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_zero_matches_popxl() {
        assert_eq!(create_seeds(0).iter().copied().collect::<Vec<u32>>(), vec![2735729615, 3653403231]);
    }

    #[test]
    fn zero_count_and_overflow() {
        let empty = create_seeds_with(1, SeedOptions { replicas: 0, ..Default::default() }).unwrap();
        assert_eq!(empty.shape(), &[0, 2]);
        let huge = SeedOptions { batches_per_step: usize::MAX, replicas: 2, ..Default::default() };
        assert!(create_seeds_with(1, huge).is_err());
    }
}
