//! Counter-based random kernels: `RandomUniform`, `RandomNormal`, `Dropout`.
//!
//! Element `i` of an op's output is a pure function of the `uint32[2]` seed
//! value, the op kind and `i`: a SplitMix64 stream whose start is a hash of the
//! seed, evaluated at position `i`. Results are therefore independent of thread
//! count and of run order, and two `Dropout`s with the same seed and shape (the
//! forward op and the one applied to the incoming gradient) use the same mask.

use super::dispatch::with_float;
use super::elem::Float;
use super::float16::{f16_adapter, has_f16};
use super::par::par_range;
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{boxed, BuildResult, SpecExt, Types};
use super::KernelEntry;
use crate::cpu::kernel::{Kernel, KernelArgs, KernelResult, KernelSpec};
use popart_ir::ops::all as ir;
use popart_ir::DataType;

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
}

/// Start of the stream of `seed` for `stream`.
#[inline(always)]
fn stream_state(seed: [u32; 2], stream: Stream) -> u64 {
    let key = ((seed[1] as u64) << 32) | seed[0] as u64;
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

/// Standard normal by Box–Muller from the two 32-bit halves of `b`.
#[inline(always)]
fn normal(b: u64) -> f64 {
    let u1 = ((b >> 32) as f64 + 1.0) * (1.0 / 4_294_967_296.0); // (0, 1]
    let u2 = (b & 0xFFFF_FFFF) as f64 * (1.0 / 4_294_967_296.0); // [0, 1)
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[inline(always)]
unsafe fn read_seed(p: *const u8) -> [u32; 2] {
    let s = slice(p as *const u32, 2);
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
        let seed = read_seed(args.inputs[self.seed]);
        let y = SendPtr(args.outputs[0] as *mut T);
        let dist = self.dist;
        let f64_bits = std::mem::size_of::<T>() == 8;
        par_range(self.n, move |r| {
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
                    for (i, o) in (r.start as u64..).zip(ys) {
                        *o = T::from_f64(mean + std * normal(bits(st, i)));
                    }
                }
            }
        });
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
        let seed = read_seed(args.inputs[self.pos[1]]);
        let x = SendPtr(args.inputs[self.pos[0]] as *mut T);
        let y = SendPtr(args.outputs[0] as *mut T);
        let (p, scale) = (self.p, T::from_f64(1.0 / (1.0 - self.p)));
        let st = stream_state(seed, Stream::Dropout);
        par_range(self.n, move |r| {
            // SAFETY: buffers hold `n` elements and do not overlap; pieces are disjoint.
            let (xs, ys) = unsafe { (slice(x.get().add(r.start), r.len()), slice_mut(y.get().add(r.start), r.len())) };
            for ((i, o), &v) in (r.start as u64..).zip(ys).zip(xs) {
                *o = if unit24(bits(st, i)) >= p { v * scale } else { T::ZERO };
            }
        });
        Ok(())
    }
}

/// Build the random kernels.
pub(crate) fn build(spec: &KernelSpec<'_>) -> BuildResult {
    let seed_index = if spec.is::<ir::Dropout>() { 1 } else { 0 };
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
                Dist::Uniform { low: spec.attr_float_or("low", 0.0), high: spec.attr_float_or("high", 1.0) }
            } else {
                Dist::Normal { mean: spec.attr_float_or("mean", 0.0), std: spec.attr_float_or("std", 1.0) }
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
            let p = spec.attrs.float("p").ok_or_else(|| spec.error("missing float attribute `p`"))?;
            if !(0.0..1.0).contains(&p) {
                return Err(spec.error(format!("dropout probability must be in [0, 1), got {p}")));
            }
            let pos = [x.pos, seed.pos];
            with_float!(dt, T => boxed(DropoutKernel::<T> { n, p, pos, _t: Types::default() }),
                _ => Err(spec.unsupported_dtype(dt)))
        }
        _ => Err(spec.error(format!("`{}` is not a random op", spec.op_type()))),
    }
}

/// Every kernel of this file.
pub(crate) const KERNELS: &[KernelEntry] =
    &[(&ir::RandomUniform, build), (&ir::RandomNormal, build), (&ir::Dropout, build)];

#[cfg(test)]
mod tests {
    use super::super::testutil::{run_op, t};
    use popart_ir::{AttrValue, Attributes, DataType, HostTensor};

    fn seed(a: u32, b: u32) -> HostTensor {
        t(DataType::Uint32, &[2], &[a as f64, b as f64])
    }

    fn rand_attrs(op: &str, n: usize, dtype: DataType) -> Attributes {
        let a = Attributes::new().with("shape", AttrValue::Ints(vec![n as i64])).with("dtype", AttrValue::DType(dtype));
        if op.ends_with("Uniform") {
            a.with("low", AttrValue::Float(-2.0)).with("high", AttrValue::Float(3.0))
        } else {
            a.with("mean", AttrValue::Float(1.5)).with("std", AttrValue::Float(0.5))
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
    }

    #[test]
    fn dropout_keeps_with_probability_one_minus_p_and_scales() {
        let n = 100_000;
        let x = t(DataType::Float32, &[n], &vec![2.0; n]);
        let p = Attributes::new().with("p", AttrValue::Float(0.3));
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
        let zero = Attributes::new().with("p", AttrValue::Float(0.0));
        assert_eq!(run_op("Dropout", zero, &[(0, h), (1, seed(1, 1))])[0].to_f64_vec(), vec![1.0, 2.0, 3.0]);
    }
}
