//! Elementwise binary kernels with numpy broadcasting: arithmetic, comparisons
//! and `Where`; plus a generic n-ary broadcasting kernel reused by gradient ops
//! and `Fmod`; the n-ary `Maximum`/`Minimum` are in [`extremum`], `ScaledAdd` in
//! [`scaled_add`].

use popart_ir::DataType;

use super::broadcast::Broadcast;
use super::dispatch::{bound_alias, with_any, with_bits, with_num};
use super::elem::{Bool8, Num, Rem};
use super::float16::{f16_adapter, has_f16};
use super::par::{par_range, par_range_cost, wide_simd, Simd};
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{boxed, BuildResult, Slot, SpecExt, Types};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};
use half::f16;
use popart_ir::ops::all as ir;

pub(super) mod extremum;
pub(super) mod scaled_add;

/// A scalar function of two operands; implemented by zero-sized op types.
pub(crate) trait Map2<T, O>: Send + Sync + 'static {
    /// Cost per element relative to an add (decides when to use threads).
    const COST: usize = 1;
    fn f(a: T, b: T) -> O;
}

/// `y = F(a, b)` with `a`, `b` broadcast to `y`'s shape.
pub(crate) struct Binary<T, O, F> {
    plan: Broadcast<2>,
    pos: [usize; 2],
    /// The SIMD build of the contiguous loop ([`Simd::for_cost`]).
    simd: Simd,
    _t: Types<(T, O, F)>,
}

#[inline(always)]
fn map2_loop<T: Copy, O: Copy, F: Map2<T, O>>(xa: &[T], xb: &[T], ys: &mut [O]) {
    for ((out, &p), &q) in ys.iter_mut().zip(xa).zip(xb) {
        *out = F::f(p, q);
    }
}

wide_simd!(fn map2<T: Copy, O: Copy, F: Map2<T, O>>(xa: &[T], xb: &[T], ys: &mut [O]) => map2_loop);

impl<T, O, F> Binary<T, O, F>
where
    T: Copy + Send + Sync + 'static,
    O: Copy + Send + Sync + 'static,
    F: Map2<T, O>,
{
    /// A kernel reading operands at input positions `pos` with the given shapes.
    pub(crate) fn boxed(spec: &KernelSpec<'_>, out: &[usize], shapes: [&[usize]; 2], pos: [usize; 2]) -> BuildResult {
        let plan = Broadcast::new(out, shapes).ok_or_else(|| {
            spec.error(format!("shapes {:?} and {:?} do not broadcast to {out:?}", shapes[0], shapes[1]))
        })?;
        Ok(Box::new(Binary::<T, O, F> { plan, pos, simd: Simd::for_cost(F::COST), _t: Types::default() }))
    }
}

impl<T, O, F> Kernel for Binary<T, O, F>
where
    T: Copy + Send + Sync + 'static,
    O: Copy + Send + Sync + 'static,
    F: Map2<T, O>,
{
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let a = SendPtr(args.inputs[self.pos[0]] as *mut T);
        let b = SendPtr(args.inputs[self.pos[1]] as *mut T);
        let y = SendPtr(args.outputs[0] as *mut O);
        let inner = self.plan.inner_strides();
        let simd = self.simd;
        par_range_cost(
            self.plan.len(),
            F::COST,
            #[inline(always)]
            move |r| {
                self.plan.for_segments(r, |o, [ia, ib], len| {
                    // SAFETY: the plan only produces offsets inside the operand buffers and
                    // segments inside the output, which overlaps no input.
                    unsafe {
                        let ys = slice_mut(y.get().add(o), len);
                        match inner {
                            [1, 1] => {
                                let (xa, xb) = (slice(a.get().add(ia), len), slice(b.get().add(ib), len));
                                map2::<T, O, F>(simd, xa, xb, ys);
                            }
                            [1, 0] => {
                                let (xa, q) = (slice(a.get().add(ia), len), *b.get().add(ib));
                                for (out, &p) in ys.iter_mut().zip(xa) {
                                    *out = F::f(p, q);
                                }
                            }
                            [0, 1] => {
                                let (p, xb) = (*a.get().add(ia), slice(b.get().add(ib), len));
                                for (out, &q) in ys.iter_mut().zip(xb) {
                                    *out = F::f(p, q);
                                }
                            }
                            _ => ys.fill(F::f(*a.get().add(ia), *b.get().add(ib))),
                        }
                    }
                });
            },
        );
        Ok(())
    }
}

/// A scalar function of `N` operands (gradient formulas).
pub(crate) trait MapN<T, const N: usize>: Send + Sync + 'static {
    fn f(x: [T; N]) -> T;
}

/// `y = F(x0, .., xN-1)` with broadcasting; contiguous fast path when no operand broadcasts.
pub(crate) struct NAry<T, F, const N: usize> {
    plan: Broadcast<N>,
    pos: [usize; N],
    _t: Types<(T, F)>,
}

impl<T: Copy + Send + Sync + 'static, F: MapN<T, N>, const N: usize> NAry<T, F, N> {
    /// A kernel reading operands at input positions `pos` with the given shapes.
    pub(crate) fn boxed(spec: &KernelSpec<'_>, out: &[usize], shapes: [&[usize]; N], pos: [usize; N]) -> BuildResult {
        let plan = Broadcast::new(out, shapes)
            .ok_or_else(|| spec.error(format!("operand shapes {shapes:?} do not broadcast to {out:?}")))?;
        Ok(Box::new(NAry::<T, F, N> { plan, pos, _t: Types::default() }))
    }
}

impl<T: Copy + Send + Sync + 'static, F: MapN<T, N>, const N: usize> Kernel for NAry<T, F, N> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let ins: [SendPtr<T>; N] = std::array::from_fn(|k| SendPtr(args.inputs[self.pos[k]] as *mut T));
        let y = SendPtr(args.outputs[0] as *mut T);
        let inner = self.plan.inner_strides();
        let contiguous = inner.iter().all(|&s| s == 1);
        par_range(
            self.plan.len(),
            #[inline(always)]
            move |r| {
                self.plan.for_segments(r, |o, offs, len| {
                    // SAFETY: offsets come from the plan; the output overlaps no input.
                    unsafe {
                        let ys = slice_mut(y.get().add(o), len);
                        let base: [*const T; N] = std::array::from_fn(|k| ins[k].get().add(offs[k]) as *const T);
                        if contiguous {
                            for (i, out) in ys.iter_mut().enumerate() {
                                *out = F::f(std::array::from_fn(|k| *base[k].add(i)));
                            }
                        } else {
                            for (i, out) in ys.iter_mut().enumerate() {
                                *out = F::f(std::array::from_fn(|k| *base[k].add(i * inner[k])));
                            }
                        }
                    }
                });
            },
        );
        Ok(())
    }
}

/// The elementwise binary op table (numpy broadcasting). Each line:
/// `Op: arith|cmp |a, b| value;` where `Op` is the op type of
/// `popart_ir::ops::binary`; `arith` ops run on every numeric type and return it,
/// `cmp` ops run on every type and return bool. Defines [`TABLE`].
macro_rules! binary_ops {
    ($($op:ident: $kind:ident |$a:ident, $b:ident| $e:expr;)*) => {
        /// Scalar maps, one per op type.
        mod maps {
            use super::*;
            $(
                pub(crate) struct $op;
                binary_ops!(@impl $kind $op |$a, $b| $e);
            )*
        }
        /// Kernels of the elementwise binary ops.
        pub(crate) const TABLE: &[KernelEntry] = &[$((&ir::$op, binary_ops!(@build $kind $op)),)*];
    };
    (@impl arith $op:ident |$a:ident, $b:ident| $e:expr) => {
        impl<T: Num> Map2<T, T> for $op {
            #[inline(always)]
            fn f($a: T, $b: T) -> T { $e }
        }
    };
    (@impl cmp $op:ident |$a:ident, $b:ident| $e:expr) => {
        impl<T: PartialOrd> Map2<T, Bool8> for $op {
            #[inline(always)]
            fn f($a: T, $b: T) -> Bool8 { Bool8(($e) as u8) }
        }
    };
    (@build arith $op:ident) => { build_arith::<maps::$op> };
    (@build cmp $op:ident) => { build_cmp::<maps::$op> };
}

binary_ops! {
    Add: arith |a, b| a.add(b);
    Sub: arith |a, b| a.sub(b);
    Mul: arith |a, b| a.mul(b);
    Div: arith |a, b| a.div(b);
    Pow: arith |a, b| a.pow(b);
    Greater: cmp |a, b| a > b;
    Less: cmp |a, b| a < b;
    Equal: cmp |a, b| a == b;
}

/// The other kernels of this file.
pub(crate) const KERNELS: &[KernelEntry] = &[(&ir::Where, build_where), (&ir::Fmod, build_arith::<FmodMap>)];

/// `Fmod`: the remainder of a truncated division ([`Rem`]).
struct FmodMap;
impl<T: Rem> Map2<T, T> for FmodMap {
    const COST: usize = 8;
    #[inline(always)]
    fn f(a: T, b: T) -> T {
        a.rem(b)
    }
}

/// Two operands of one dtype and the output: (a, b, y, dtype).
fn operands<'s>(spec: &'s KernelSpec<'_>) -> Result<(Slot<'s>, Slot<'s>, Slot<'s>, DataType), KernelError> {
    let (a, b, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    if a.dtype() != b.dtype() {
        return Err(spec.error(format!("operand dtypes differ: {} and {}", a.dtype(), b.dtype())));
    }
    Ok((a, b, y, a.dtype()))
}

/// A comparison: any operand type, bool output.
fn build_cmp<F: CmpMap>(spec: &KernelSpec<'_>) -> BuildResult {
    let (a, b, y, dt) = operands(spec)?;
    if dt.is_float8() {
        // `with_any!` lists the computing types only.
        return Err(spec.unsupported_dtype(dt));
    }
    let (out, shapes, pos) = (y.shape(), [a.shape(), b.shape()], [a.pos, b.pos]);
    with_any!(dt, T => Binary::<T, Bool8, F>::boxed(spec, out, shapes, pos))
}

/// Arithmetic: numeric operands, output of their type.
fn build_arith<F: ArithMap>(spec: &KernelSpec<'_>) -> BuildResult {
    if has_f16(spec) {
        return f16_adapter(spec, false, build_arith::<F>);
    }
    let (a, b, y, dt) = operands(spec)?;
    if y.dtype() != dt {
        return Err(spec.error(format!("output dtype {} differs from operand dtype {dt}", y.dtype())));
    }
    let (out, shapes, pos) = (y.shape(), [a.shape(), b.shape()], [a.pos, b.pos]);
    with_num!(dt, T => Binary::<T, T, F>::boxed(spec, out, shapes, pos), _ => Err(spec.unsupported_dtype(dt)))
}

bound_alias!(
    /// An arithmetic map for every numeric type (see `with_num!`).
    ArithMap: Map2<i8, i8> + Map2<i16, i16> + Map2<i32, i32> + Map2<i64, i64> + Map2<u8, u8> + Map2<u16, u16>
        + Map2<u32, u32> + Map2<u64, u64> + Map2<f32, f32> + Map2<f64, f64>
);

bound_alias!(
    /// A comparison for every type (see `with_any!`).
    CmpMap: Map2<Bool8, Bool8> + Map2<i8, Bool8> + Map2<i16, Bool8> + Map2<i32, Bool8> + Map2<i64, Bool8>
        + Map2<u8, Bool8> + Map2<u16, Bool8> + Map2<u32, Bool8> + Map2<u64, Bool8> + Map2<f16, Bool8>
        + Map2<f32, Bool8> + Map2<f64, Bool8>
);

/// `Where(cond, lhs, rhs)`: moves elements, so one kernel per element size.
struct WhereKernel<E> {
    plan: Broadcast<3>,
    pos: [usize; 3],
    _t: Types<E>,
}

impl<E: Copy + Send + Sync + 'static> Kernel for WhereKernel<E> {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        let c = SendPtr(args.inputs[self.pos[0]] as *mut u8);
        let a = SendPtr(args.inputs[self.pos[1]] as *mut E);
        let b = SendPtr(args.inputs[self.pos[2]] as *mut E);
        let y = SendPtr(args.outputs[0] as *mut E);
        let [sc, sa, sb] = self.plan.inner_strides();
        par_range(
            self.plan.len(),
            #[inline(always)]
            move |r| {
                self.plan.for_segments(r, |o, [ic, ia, ib], len| {
                    // SAFETY: offsets come from the plan; the output overlaps no input.
                    unsafe {
                        let ys = slice_mut(y.get().add(o), len);
                        let (c, a, b) = (c.get().add(ic), a.get().add(ia), b.get().add(ib));
                        if sc == 1 && sa == 1 && sb == 1 {
                            let (cs, xa, xb) = (slice(c, len), slice(a, len), slice(b, len));
                            for (i, out) in ys.iter_mut().enumerate() {
                                *out = if cs[i] != 0 { xa[i] } else { xb[i] };
                            }
                        } else {
                            for (i, out) in ys.iter_mut().enumerate() {
                                *out = if *c.add(i * sc) != 0 { *a.add(i * sa) } else { *b.add(i * sb) };
                            }
                        }
                    }
                });
            },
        );
        Ok(())
    }
}

fn build_where(spec: &KernelSpec<'_>) -> BuildResult {
    let (c, a, b, y) = (spec.input(0)?, spec.input(1)?, spec.input(2)?, spec.output(0)?);
    if c.dtype() != DataType::Bool {
        return Err(spec.error(format!("the condition must be bool, got {}", c.dtype())));
    }
    if a.dtype() != b.dtype() || y.dtype() != a.dtype() {
        return Err(spec.error(format!("value dtypes differ: {}, {} -> {}", a.dtype(), b.dtype(), y.dtype())));
    }
    let plan = Broadcast::new(y.shape(), [c.shape(), a.shape(), b.shape()])
        .ok_or_else(|| spec.error("operands do not broadcast to the output"))?;
    let pos = [c.pos, a.pos, b.pos];
    with_bits!(a.dtype(), E => boxed(WhereKernel::<E> { plan, pos, _t: Types::default() }))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, run_op, t, Rng};
    use popart_ir::{Attributes, DataType};

    /// Naive numpy broadcasting: output index -> operand index.
    fn bidx(out_shape: &[usize], in_shape: &[usize], flat: usize) -> usize {
        let mut idx = vec![0; out_shape.len()];
        let mut rem = flat;
        for d in (0..out_shape.len()).rev() {
            idx[d] = rem % out_shape[d];
            rem /= out_shape[d];
        }
        let off = out_shape.len() - in_shape.len();
        let mut r = 0;
        for (d, &n) in in_shape.iter().enumerate() {
            r = r * n + if n == 1 { 0 } else { idx[d + off] };
        }
        r
    }

    fn check(op: &str, f: fn(f64, f64) -> f64, sa: &[usize], sb: &[usize], so: &[usize], dtype: DataType) {
        let mut rng = Rng::new(7);
        let na: usize = sa.iter().product();
        let nb: usize = sb.iter().product();
        let xa: Vec<f64> = (0..na).map(|_| rng.uniform(0.5, 2.0)).collect();
        let xb: Vec<f64> = (0..nb).map(|_| rng.uniform(0.5, 2.0)).collect();
        let ta = t(dtype, sa, &xa);
        let tb = t(dtype, sb, &xb);
        let (xa, xb) = (ta.to_f64_vec(), tb.to_f64_vec());
        let out = &run_op(op, Attributes::new(), &[(0, ta), (1, tb)])[0];
        assert_eq!(out.info.shape, so);
        let n: usize = so.iter().product();
        let want: Vec<f64> = (0..n).map(|i| f(xa[bidx(so, sa, i)], xb[bidx(so, sb, i)])).collect();
        let tol = if dtype == DataType::Float64 { 1e-15 } else { 1e-6 };
        assert_close(&out.to_f64_vec(), &want, tol);
    }

    #[test]
    fn arithmetic_with_broadcasting_matches_naive_loops() {
        type Op = (&'static str, fn(f64, f64) -> f64);
        let ops: &[Op] = &[
            ("Add", |a, b| a + b),
            ("Sub", |a, b| a - b),
            ("Mul", |a, b| a * b),
            ("Div", |a, b| a / b),
            ("Pow", f64::powf),
            ("Maximum", f64::max),
            ("Minimum", f64::min),
        ];
        let shapes: &[(&[usize], &[usize], &[usize])] = &[
            (&[2, 3], &[2, 3], &[2, 3]),
            (&[4, 5], &[], &[4, 5]),
            (&[], &[4, 5], &[4, 5]),
            (&[3, 1, 5], &[4, 1], &[3, 4, 5]),
            (&[1, 6], &[7, 1], &[7, 6]),
            (&[2, 1, 3, 1], &[1, 4, 1, 2], &[2, 4, 3, 2]),
            (&[300, 257], &[257], &[300, 257]),
        ];
        for &(op, f) in ops {
            for &(sa, sb, so) in shapes {
                check(op, f, sa, sb, so, DataType::Float64);
                check(op, f, sa, sb, so, DataType::Float32);
            }
        }
    }

    #[test]
    fn integer_arithmetic_truncates_and_guards_division_by_zero() {
        let a = t(DataType::Int32, &[4], &[7.0, -7.0, 5.0, 2.0]);
        let b = t(DataType::Int32, &[4], &[2.0, 2.0, 0.0, 10.0]);
        let run = |op| run_op(op, Attributes::new(), &[(0, a.clone()), (1, b.clone())])[0].to_f64_vec();
        assert_eq!(run("Div"), vec![3.0, -3.0, 0.0, 0.0]);
        assert_eq!(run("Add"), vec![9.0, -5.0, 5.0, 12.0]);
        assert_eq!(run("Pow"), vec![49.0, 49.0, 1.0, 1024.0]);
        assert_eq!(run("Maximum"), vec![7.0, 2.0, 5.0, 10.0]);
    }

    #[test]
    fn comparisons_give_bool() {
        let a = t(DataType::Float32, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = t(DataType::Float32, &[3], &[2.0, 2.0, 7.0]);
        let run = |op| {
            let out = &run_op(op, Attributes::new(), &[(0, a.clone()), (1, b.clone())])[0];
            assert_eq!(out.info.dtype, DataType::Bool);
            out.to_f64_vec()
        };
        assert_eq!(run("Greater"), vec![0.0, 0.0, 0.0, 1.0, 1.0, 0.0]);
        assert_eq!(run("Less"), vec![1.0, 0.0, 1.0, 0.0, 0.0, 1.0]);
        assert_eq!(run("Equal"), vec![0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        let i = t(DataType::Int64, &[2], &[3.0, -1.0]);
        let j = t(DataType::Int64, &[1], &[3.0]);
        assert_eq!(run_op("Equal", Attributes::new(), &[(0, i), (1, j)])[0].to_f64_vec(), vec![1.0, 0.0]);
        let h = t(DataType::Float16, &[2], &[0.5, 2.0]);
        let k = t(DataType::Float16, &[2], &[1.0, 1.0]);
        assert_eq!(run_op("Greater", Attributes::new(), &[(0, h), (1, k)])[0].to_f64_vec(), vec![0.0, 1.0]);
    }

    #[test]
    fn float16_arithmetic_goes_through_f32() {
        let a = t(DataType::Float16, &[3], &[1.5, 2.0, -3.0]);
        let b = t(DataType::Float16, &[1], &[0.25]);
        let out = &run_op("Mul", Attributes::new(), &[(0, a), (1, b)])[0];
        assert_eq!(out.info.dtype, DataType::Float16);
        assert_eq!(out.to_f64_vec(), vec![0.375, 0.5, -0.75]);
    }

    #[test]
    fn where_selects_with_three_way_broadcasting() {
        let c = t(DataType::Bool, &[2, 1], &[1.0, 0.0]);
        let a = t(DataType::Int32, &[3], &[1.0, 2.0, 3.0]);
        let b = t(DataType::Int32, &[2, 3], &[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
        let out = &run_op("Where", Attributes::new(), &[(0, c), (1, a), (2, b)])[0];
        assert_eq!(out.info.shape, vec![2, 3]);
        assert_eq!(out.to_f64_vec(), vec![1.0, 2.0, 3.0, 40.0, 50.0, 60.0]);
        let c = t(DataType::Bool, &[4], &[1.0, 0.0, 0.0, 1.0]);
        let a = t(DataType::Float64, &[4], &[1.0, 2.0, 3.0, 4.0]);
        let b = t(DataType::Float64, &[4], &[-1.0, -2.0, -3.0, -4.0]);
        let out = &run_op("Where", Attributes::new(), &[(0, c), (1, a), (2, b)])[0];
        assert_eq!(out.to_f64_vec(), vec![1.0, -2.0, -3.0, 4.0]);
    }

    #[test]
    fn large_broadcast_add_is_correct_in_parallel() {
        check("Add", |a, b| a + b, &[513, 300], &[300], &[513, 300], DataType::Float32);
        check("Mul", |a, b| a * b, &[513, 1], &[1, 300], &[513, 300], DataType::Float32);
    }
}
