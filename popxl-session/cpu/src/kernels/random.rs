//! Counter-based random kernels: `RandomUniform`, `RandomNormal`, `Dropout`,
//! `ShapedDropout`, and the seed derivation `ModifyRandomSeed`.
//!
//! Element `i` of an op's output is a pure function of the `uint32[2]` seed
//! value, the op kind and `i`: a SplitMix64 stream whose start is a hash of the
//! seed, evaluated at position `i`. Results are therefore independent of thread
//! count and of run order, and two `Dropout`s with the same seed and shape (the
//! forward op and the one applied to the incoming gradient) use the same mask.
//! `ShapedDropout` draws element `j` of its mask (of the `shape` attribute) the
//! same way, into a scratch buffer sized at build time, then broadcasts it.
//!
//! In a replicated session each replica folds its index into every seed
//! (see `stream_state`), so data-parallel dropout masks differ per replica.
//!
//! `ModifyRandomSeed([L, R], m)` is `[L, h]` with `h` the high 32 bits of the
//! first value of the `SeedSplit` stream of the seed `[L, R + m]` (wrapping).
//! PopART draws `h` with poprand on the IPU, which cannot be reproduced; this
//! keeps its contract: `L` is kept, different modifiers give unrelated seeds and
//! the same inputs always give the same seed.

use std::sync::Mutex;

use super::broadcast::Broadcast;
use super::dispatch::with_float;
use super::elem::Float;
use super::float16::{f16_adapter, has_f16};
use super::par::{par_map, par_range};
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{boxed, BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};
use popart_ir::ops::all as ir;
use popart_ir::ops::random::{DropoutAttrs, RandomNormalAttrs, RandomUniformAttrs, ShapedDropoutAttrs};
use popart_ir::{DataType, TensorInfo};

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The SplitMix64 output function.
#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Independent streams per op kind, so different random ops on one seed do not correlate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
enum Stream {
    Uniform = 1,
    Normal = 2,
    Dropout = 3,
    ShapedDropout = 4,
    SeedSplit = 5,
}

/// Start of the stream of `seed` for `stream`. In a replicated session the
/// replica index is folded into the seed, so replicas given the same seed
/// draw different numbers (replica 0 draws what an unreplicated run draws).
#[inline(always)]
fn stream_state(seed: [u32; 2], stream: Stream) -> u64 {
    let key = ((seed[1] as u64) << 32) | seed[0] as u64;
    let replica = crate::replicas::current_index() as u64;
    let key = if replica == 0 { key } else { key ^ mix(replica.wrapping_mul(GOLDEN) ^ 0x5EED) };
    mix(key ^ mix((stream as u64).wrapping_mul(GOLDEN)))
}

/// 64 random bits for element `index` of a stream.
#[inline(always)]
fn bits(state: u64, index: u64) -> u64 {
    mix(state.wrapping_add(index.wrapping_add(1).wrapping_mul(GOLDEN)))
}

/// Uniform in `[0, 1)` with 24 bits (exactly representable in f32).
#[inline(always)]
fn unit24(b: u64) -> f64 {
    (b >> 40) as f64 * (1.0 / (1u64 << 24) as f64)
}

/// Uniform in `[0, 1)` with 53 bits.
#[inline(always)]
fn unit53(b: u64) -> f64 {
    (b >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Two independent standard normals by Box–Muller from the two 32-bit halves of
/// `b`: elements `2k` and `2k + 1` of a normal tensor share the draw `bits(state, k)`.
#[inline(always)]
fn normal_pair(b: u64) -> (f64, f64) {
    let u1 = ((b >> 32) as f64 + 1.0) * (1.0 / 4_294_967_296.0); // (0, 1]
    let u2 = (b & 0xFFFF_FFFF) as f64 * (1.0 / 4_294_967_296.0); // [0, 1)
    let r = (-2.0 * u1.ln()).sqrt();
    let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
    (r * c, r * s)
}

/// The `uint32[2]` seed at `p`.
///
/// # Safety
/// `p` holds two `u32`.
#[inline(always)]
unsafe fn read_seed(p: *const u8) -> [u32; 2] {
    // SAFETY: `p` holds two `u32` (this function's contract).
    let s = unsafe { slice(p as *const u32, 2) };
    [s[0], s[1]]
}

#[derive(Clone, Copy, Debug)]
enum Dist {
    Uniform { low: f64, high: f64 },
    Normal { mean: f64, std: f64 },
}

/// `RandomUniform` / `RandomNormal` of `n` elements.
struct RandomKernel<T> {
    n: usize,
    dist: Dist,
    seed: usize,
    _t: Types<T>,
}

impl<T: Float> Kernel for RandomKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the seed input is a `uint32[2]` tensor (checked at build; `KernelArgs`).
        let seed = unsafe { read_seed(args.inputs[self.seed]) };
        let y = SendPtr(args.outputs[0] as *mut T);
        let dist = self.dist;
        let f64_bits = std::mem::size_of::<T>() == 8;
        par_range(
            self.n,
            #[inline(always)]
            move |r| {
                // SAFETY: the output holds `n` elements; pieces are disjoint.
                let ys = unsafe { slice_mut(y.get().add(r.start), r.len()) };
                match dist {
                    Dist::Uniform { low, high } => {
                        let st = stream_state(seed, Stream::Uniform);
                        for (i, o) in (r.start as u64..).zip(ys) {
                            let b = bits(st, i);
                            let u = if f64_bits { unit53(b) } else { unit24(b) };
                            *o = T::from_f64(low + (high - low) * u);
                        }
                    }
                    Dist::Normal { mean, std } => {
                        let st = stream_state(seed, Stream::Normal);
                        let z = |v: f64| T::from_f64(mean + std * v);
                        // A piece starting at an odd index takes the second of its pair.
                        let odd = r.start % 2;
                        let (head, body) = ys.split_at_mut(odd.min(ys.len()));
                        if let Some(o) = head.first_mut() {
                            *o = z(normal_pair(bits(st, r.start as u64 / 2)).1);
                        }
                        let first_pair = (r.start + odd) as u64 / 2;
                        let mut pairs = body.chunks_exact_mut(2);
                        for (k, o) in (first_pair..).zip(&mut pairs) {
                            let (a, b) = normal_pair(bits(st, k));
                            o[0] = z(a);
                            o[1] = z(b);
                        }
                        if let [last] = pairs.into_remainder() {
                            *last = z(normal_pair(bits(st, (r.end as u64 - 1) / 2)).0);
                        }
                    }
                }
            },
        );
        Ok(())
    }
}

/// `Dropout(x, seed)`: keep with probability `1 - p`, scaled by `1 / (1 - p)`.
struct DropoutKernel<T> {
    n: usize,
    p: f64,
    pos: [usize; 2],
    _t: Types<T>,
}

impl<T: Float> Kernel for DropoutKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the seed input is a `uint32[2]` tensor (checked at build; `KernelArgs`).
        let seed = unsafe { read_seed(args.inputs[self.pos[1]]) };
        let (x, y) = (args.inputs[self.pos[0]] as *const T, args.outputs[0] as *mut T);
        let (p, scale) = (self.p, T::from_f64(1.0 / (1.0 - self.p)));
        let st = stream_state(seed, Stream::Dropout);
        // SAFETY: the buffers hold `n` elements and do not overlap.
        unsafe {
            par_map(self.n, x, y, |start, xs, ys| {
                for ((i, o), &v) in (start as u64..).zip(ys).zip(xs) {
                    *o = if unit24(bits(st, i)) >= p { v * scale } else { T::ZERO };
                }
            })
        };
        Ok(())
    }
}

/// `ShapedDropout(x, seed)`: a mask of `mask_len` elements (0 or `1 / (1 - ratio)`)
/// drawn into scratch, broadcast over `x` by `plan` (operands `x`, mask).
struct ShapedDropoutKernel<T> {
    plan: Broadcast<2>,
    ratio: f64,
    mask: Mutex<Vec<T>>,
    pos: [usize; 2],
}

impl<T: Float> Kernel for ShapedDropoutKernel<T> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the seed input is a `uint32[2]` tensor (checked at build; `KernelArgs`).
        let seed = unsafe { read_seed(args.inputs[self.pos[1]]) };
        let st = stream_state(seed, Stream::ShapedDropout);
        let scale = T::from_f64(1.0 / (1.0 - self.ratio));
        let mut guard = self.mask.lock().unwrap_or_else(|e| e.into_inner());
        for (j, m) in (0u64..).zip(guard.iter_mut()) {
            *m = if unit24(bits(st, j)) >= self.ratio { scale } else { T::ZERO };
        }
        let mask = SendPtr(guard.as_mut_ptr());
        let x = SendPtr(args.inputs[self.pos[0]] as *mut T);
        let y = SendPtr(args.outputs[0] as *mut T);
        let [_, sm] = self.plan.inner_strides();
        par_range(
            self.plan.len(),
            #[inline(always)]
            move |r| {
                self.plan.for_segments(r, |o, [ix, im], len| {
                    // SAFETY: `x` and `y` hold the plan's elements and do not overlap, the
                    // mask is only read here; output segments of pieces are disjoint.
                    let (xs, ys) = unsafe { (slice(x.get().add(ix), len), slice_mut(y.get().add(o), len)) };
                    if sm == 1 {
                        // SAFETY: as above; the mask holds the segment.
                        let ms = unsafe { slice(mask.get().add(im), len) };
                        for ((o, &v), &m) in ys.iter_mut().zip(xs).zip(ms) {
                            *o = if m == T::ZERO { T::ZERO } else { v * m };
                        }
                    } else {
                        // SAFETY: as above.
                        let m = unsafe { *mask.get().add(im) };
                        if m == T::ZERO {
                            ys.fill(T::ZERO);
                        } else {
                            for (o, &v) in ys.iter_mut().zip(xs) {
                                *o = v * m;
                            }
                        }
                    }
                });
            },
        );
        Ok(())
    }
}

/// `ModifyRandomSeed(seed, modifier)`.
struct ModifySeedKernel {
    pos: [usize; 2],
}

impl Kernel for ModifySeedKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the build checked a `uint32[2]` seed and a one-element `uint32`
        // modifier (`KernelArgs`: the buffers hold them).
        let ([l, r], m) = unsafe { (read_seed(args.inputs[self.pos[0]]), *(args.inputs[self.pos[1]] as *const u32)) };
        let h = (bits(stream_state([l, r.wrapping_add(m)], Stream::SeedSplit), 0) >> 32) as u32;
        // SAFETY: the output is a `uint32[2]` tensor overlapping no input (`KernelArgs`).
        let out = unsafe { slice_mut(args.outputs[0] as *mut u32, 2) };
        out.copy_from_slice(&[l, h]);
        Ok(())
    }
}

fn build_modify_seed(spec: &KernelSpec<'_>) -> BuildResult {
    let (seed, m, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    let is_seed = |t: &TensorInfo| t.dtype == DataType::Uint32 && t.shape == [2];
    if !is_seed(seed.info) || !is_seed(y.info) || m.dtype() != DataType::Uint32 || m.nelms() != 1 {
        return Err(
            spec.error(format!("expected uint32[2] seeds and a uint32 modifier, got {} and {}", seed.info, m.info))
        );
    }
    boxed(ModifySeedKernel { pos: [seed.pos, m.pos] })
}

/// Build the random kernels.
pub(crate) fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let seed_index = if spec.is::<ir::Dropout>() || spec.is::<ir::ShapedDropout>() { 1 } else { 0 };
    let seed = spec.input(seed_index)?;
    if seed.dtype() != DataType::Uint32 || seed.shape() != [2] {
        return Err(spec.error(format!("the seed must be uint32[2], got {}", seed.info)));
    }
    if has_f16(spec) {
        return f16_adapter(spec, false, build);
    }
    let y = spec.output(0)?;
    let (dt, n) = (y.dtype(), y.nelms());
    match () {
        _ if spec.is::<ir::RandomUniform>() || spec.is::<ir::RandomNormal>() => {
            let dist = if spec.is::<ir::RandomUniform>() {
                let RandomUniformAttrs { low, high, .. } = spec.typed()?;
                Dist::Uniform { low, high }
            } else {
                let RandomNormalAttrs { mean, std, .. } = spec.typed()?;
                Dist::Normal { mean, std }
            };
            let seed = seed.pos;
            with_float!(dt, T => boxed(RandomKernel::<T> { n, dist, seed, _t: Types::default() }),
                _ => Err(spec.unsupported_dtype(dt)))
        }
        _ if spec.is::<ir::Dropout>() => {
            let x = spec.input(0)?;
            if x.info != y.info {
                return Err(spec.error(format!("output {} differs from input {}", y.info, x.info)));
            }
            let DropoutAttrs { p } = spec.typed()?;
            if !(0.0..1.0).contains(&p) {
                return Err(spec.error(format!("dropout probability must be in [0, 1), got {p}")));
            }
            let pos = [x.pos, seed.pos];
            with_float!(dt, T => boxed(DropoutKernel::<T> { n, p, pos, _t: Types::default() }),
                _ => Err(spec.unsupported_dtype(dt)))
        }
        _ if spec.is::<ir::ShapedDropout>() => {
            let x = spec.input(0)?;
            if x.info != y.info {
                return Err(spec.error(format!("output {} differs from input {}", y.info, x.info)));
            }
            let ShapedDropoutAttrs { ratio, shape } = spec.typed()?;
            if !(0.0..1.0).contains(&ratio) {
                return Err(spec.error(format!("dropout ratio must be in [0, 1), got {ratio}")));
            }
            let shape: Vec<usize> = shape
                .iter()
                .map(|&d| usize::try_from(d).map_err(|_| spec.error(format!("negative mask dimension {d}"))))
                .collect::<Result<_, _>>()?;
            let plan = Broadcast::new(x.shape(), [x.shape(), &shape])
                .ok_or_else(|| spec.error(format!("mask shape {shape:?} does not broadcast to {}", x.info)))?;
            let len: usize = shape.iter().product();
            let pos = [x.pos, seed.pos];
            with_float!(dt, T => {
                let mask = popart_ir::size::try_zeroed_vec::<T>(len, "shaped dropout mask")
                    .map_err(|e| spec.error(e.to_string()))?;
                boxed(ShapedDropoutKernel::<T> { plan, ratio, mask: Mutex::new(mask), pos })
            }, _ => Err(spec.unsupported_dtype(dt)))
        }
        _ => Err(spec.error(format!("`{}` is not a random op", spec.op_type()))),
    }
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::RandomUniform, build),
    (&ir::RandomNormal, build),
    (&ir::Dropout, build),
    (&ir::ShapedDropout, build),
    (&ir::ModifyRandomSeed, build_modify_seed),
];

#[cfg(test)]
mod tests {
    use super::super::testutil::{run_op, t};
    use popart_ir::ops::random::{DropoutAttrs, RandomNormalAttrs, RandomUniformAttrs, ShapedDropoutAttrs};
    use popart_ir::{Attributes, DataType, HostTensor, OpAttrs};

    fn seed(a: u32, b: u32) -> HostTensor {
        t(DataType::Uint32, &[2], &[a as f64, b as f64])
    }

    fn rand_attrs(op: &str, n: usize, dtype: DataType) -> Attributes {
        let shape = vec![n as i64];
        if op.ends_with("Uniform") {
            RandomUniformAttrs { shape, dtype, low: -2.0, high: 3.0 }.to_attrs()
        } else {
            RandomNormalAttrs { shape, dtype, mean: 1.5, std: 0.5 }.to_attrs()
        }
    }

    fn moments(v: &[f64]) -> (f64, f64) {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        (m, v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64)
    }

    #[test]
    fn uniform_and_normal_have_the_requested_moments() {
        let n = 200_000;
        for dt in [DataType::Float32, DataType::Float64] {
            let u = run_op("RandomUniform", rand_attrs("RandomUniform", n, dt), &[(0, seed(1, 2))])[0].to_f64_vec();
            assert!(u.iter().all(|&x| (-2.0..3.0).contains(&x)));
            let (m, v) = moments(&u);
            assert!((m - 0.5).abs() < 0.02 && (v - 25.0 / 12.0).abs() < 0.03, "uniform {m} {v}");
            let z = run_op("RandomNormal", rand_attrs("RandomNormal", n, dt), &[(0, seed(1, 2))])[0].to_f64_vec();
            let (m, v) = moments(&z);
            assert!((m - 1.5).abs() < 0.005 && (v - 0.25).abs() < 0.005, "normal {m} {v}");
            // Fraction within one std of the mean: 68.27%.
            let within = z.iter().filter(|&&x| (x - 1.5).abs() < 0.5).count() as f64 / n as f64;
            assert!((within - 0.6827).abs() < 0.005, "{within}");
        }
    }

    #[test]
    fn values_depend_only_on_seed_and_index() {
        let a = rand_attrs("RandomUniform", 10, DataType::Float64);
        let x = run_op("RandomUniform", a.clone(), &[(0, seed(5, 6))])[0].to_f64_vec();
        let y = run_op("RandomUniform", a.clone(), &[(0, seed(5, 6))])[0].to_f64_vec();
        let z = run_op("RandomUniform", a, &[(0, seed(6, 5))])[0].to_f64_vec();
        assert_eq!(x, y);
        assert_ne!(x, z);
        // A longer tensor starts with the same values (element i depends on i only).
        let long = run_op("RandomUniform", rand_attrs("RandomUniform", 100_000, DataType::Float64), &[(0, seed(5, 6))]);
        assert_eq!(&long[0].to_f64_vec()[..10], &x[..]);
        // Normals come in pairs: any split of the range (odd lengths, pieces of a
        // parallel run starting at odd indices) gives the same values.
        let short = run_op("RandomNormal", rand_attrs("RandomNormal", 11, DataType::Float64), &[(0, seed(5, 6))]);
        let long = run_op("RandomNormal", rand_attrs("RandomNormal", 300_001, DataType::Float64), &[(0, seed(5, 6))]);
        assert_eq!(&long[0].to_f64_vec()[..11], &short[0].to_f64_vec()[..]);
    }

    #[test]
    fn dropout_keeps_with_probability_one_minus_p_and_scales() {
        let n = 100_000;
        let x = t(DataType::Float32, &[n], &vec![2.0; n]);
        let p = DropoutAttrs { p: 0.3 }.to_attrs();
        let y = run_op("Dropout", p.clone(), &[(0, x.clone()), (1, seed(9, 9))])[0].to_f64_vec();
        let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / n as f64;
        assert!((kept - 0.7).abs() < 0.01, "{kept}");
        assert!(y.iter().all(|&v| v == 0.0 || (v - 2.0 / 0.7).abs() < 1e-6));
        // The backward pass applies the same op to the gradient: same mask.
        let g: Vec<f64> = (0..n).map(|i| 1.0 + i as f64).collect();
        let dg = run_op("Dropout", p, &[(0, t(DataType::Float32, &[n], &g)), (1, seed(9, 9))])[0].to_f64_vec();
        assert!(y.iter().zip(&dg).all(|(a, b)| (*a == 0.0) == (*b == 0.0)));
        // p = 0 is the identity; half precision goes through f32.
        let h = t(DataType::Float16, &[3], &[1.0, 2.0, 3.0]);
        let zero = DropoutAttrs { p: 0.0 }.to_attrs();
        assert_eq!(run_op("Dropout", zero, &[(0, h), (1, seed(1, 1))])[0].to_f64_vec(), vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn shaped_dropout_broadcasts_one_mask() {
        // x [200, 50] with a mask [200, 1]: whole rows are kept or dropped.
        let (r, c) = (200, 50);
        let x: Vec<f64> = (0..r * c).map(|i| 1.0 + i as f64).collect();
        let a = ShapedDropoutAttrs { ratio: 0.5, shape: vec![r as i64, 1] }.to_attrs();
        let y = run_op("ShapedDropout", a.clone(), &[(0, t(DataType::Float64, &[r, c], &x)), (1, seed(3, 4))])[0]
            .to_f64_vec();
        let mut kept = 0;
        for row in 0..r {
            let ys = &y[row * c..][..c];
            let xs = &x[row * c..][..c];
            if ys[0] == 0.0 {
                assert!(ys.iter().all(|&v| v == 0.0), "row {row} partly dropped");
            } else {
                kept += 1;
                assert!(ys.iter().zip(xs).all(|(&v, &u)| v == 2.0 * u), "row {row} not scaled by 2");
            }
        }
        assert!((70..130).contains(&kept), "{kept} of {r} rows kept");
        // The gradient pass (same op on the gradient) uses the same mask; float32 too.
        let g = run_op("ShapedDropout", a, &[(0, t(DataType::Float32, &[r, c], &vec![1.0; r * c])), (1, seed(3, 4))]);
        assert!(g[0].to_f64_vec().iter().zip(&y).all(|(a, b)| (*a == 0.0) == (*b == 0.0)));
        // A mask of lower rank broadcasts over leading dims.
        let a = ShapedDropoutAttrs { ratio: 0.25, shape: vec![c as i64] }.to_attrs();
        let y = run_op("ShapedDropout", a, &[(0, t(DataType::Float32, &[r, c], &x)), (1, seed(3, 4))])[0].to_f64_vec();
        for row in 1..r {
            assert!((0..c).all(|k| (y[k] == 0.0) == (y[row * c + k] == 0.0)));
        }
    }

    #[test]
    fn modify_random_seed_keeps_the_first_word() {
        let m = |v: u32| t(DataType::Uint32, &[], &[v as f64]);
        let run = |s: (u32, u32), v: u32| {
            run_op("ModifyRandomSeed", Attributes::new(), &[(0, seed(s.0, s.1)), (1, m(v))])[0].to_f64_vec()
        };
        let (a, b, c) = (run((7, 9), 0), run((7, 9), 1), run((7, 10), 0));
        assert_eq!((a[0], b[0], c[0]), (7.0, 7.0, 7.0));
        assert_ne!(a[1], b[1]);
        // Only R + modifier matters: [7, 9] with 1 is [7, 10] with 0.
        assert_eq!(b, c);
        assert_eq!(a, run((7, 9), 0));
    }
}
