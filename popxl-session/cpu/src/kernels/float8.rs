//! The float8 kernels: `Pow2ScaleThenCast`, `CastThenPow2Scale`,
//! `MatMulPow2Scaled`, `ConvPow2Scaled` and `ConvTransposePow2Scaled` (formats and rounding:
//! [`popart_ir::float8`]).
//!
//! Every kernel reads its `log2_scale` (a scalar int32 input) when it runs and
//! stops with [`KernelRunError::Log2ScaleOutOfRange`] outside `[-32, 32)`.
//! - Decoding is a lookup in a 256-entry table of the scaled values, built per
//!   run in the output type (exact in f32; rounded once to f16).
//! - Encoding is the branch-light rounding of [`encode_scaled`]: the scaled
//!   value in f64 (exact), its mantissa rounded to nearest even by an integer add.
//! - The pow2-scaled matmul and (transposed) convolution decode both operands
//!   into f32 scratch buffers (sized at build time), run the float32 `MatMul` /
//!   `Conv` / `ConvTranspose` kernel built for the same shapes and attributes, then scale the f32 sums
//!   and round them once to float16.

use std::sync::Mutex;

use half::f16;
use popart_ir::float8::{encode_scaled, pow2, Float8Format, LOG2_SCALE_RANGE};
use popart_ir::ops::all as ir;
use popart_ir::{DataType, TensorInfo};

use super::par::par_range;
use super::ptr::{slice, slice_mut, SendPtr};
use super::spec::{BuildResult, SpecExt};
use super::KernelEntry;
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelRunError, KernelSpec};

/// Registered kernels.
pub(crate) const KERNELS: &[KernelEntry] = &[
    (&ir::Pow2ScaleThenCast, build_to_fp8),
    (&ir::CastThenPow2Scale, build_from_fp8),
    (&ir::MatMulPow2Scaled, build_scaled_product),
    (&ir::ConvPow2Scaled, build_scaled_product),
    (&ir::ConvTransposePow2Scaled, build_scaled_product),
];

/// The `log2_scale` value at `p` (an int32), checked against `[-32, 32)`.
///
/// # Safety
/// `p` points to one int32.
unsafe fn read_log2_scale(p: *const u8) -> Result<i32, KernelRunError> {
    // SAFETY: `p` points to one int32 (this function's contract).
    let s = unsafe { *(p as *const i32) };
    if LOG2_SCALE_RANGE.contains(&s) {
        Ok(s)
    } else {
        Err(KernelRunError::Log2ScaleOutOfRange { value: s })
    }
}

/// The format of a float8 slot, or a build error.
fn format_of(spec: &KernelSpec<'_>, dtype: DataType) -> Result<Float8Format, KernelError> {
    Float8Format::of(dtype).ok_or_else(|| spec.unsupported_dtype(dtype))
}

/// `Pow2ScaleThenCast`: f16 or f32 to float8, NaN on overflow.
struct ToFp8 {
    n: usize,
    src: DataType,
    fmt: Float8Format,
}

fn build_to_fp8(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    let fmt = format_of(spec, y.dtype())?;
    if !matches!(x.dtype(), DataType::Float16 | DataType::Float32) {
        return Err(spec.unsupported_dtype(x.dtype()));
    }
    Ok(Box::new(ToFp8 { n: x.nelms(), src: x.dtype(), fmt }))
}

impl Kernel for ToFp8 {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: input 1 is the int32 `log2_scale` (checked at build; `KernelArgs`).
        let scale = pow2(unsafe { read_log2_scale(args.inputs[1]) }?);
        let (fmt, out) = (self.fmt, SendPtr(args.outputs[0]));
        let src = args.inputs[0];
        match self.src {
            DataType::Float16 => {
                // SAFETY: input 0 holds `n` values of the source dtype (`KernelArgs`).
                let x = unsafe { slice(src as *const f16, self.n) };
                par_range(self.n, |r| {
                    // SAFETY: the output holds `n` codes and overlaps no input; the pieces
                    // of `0..n` are disjoint.
                    let y = unsafe { slice_mut(out.get().add(r.start), r.len()) };
                    for (o, v) in y.iter_mut().zip(&x[r]) {
                        *o = encode_scaled(fmt, v.to_f64(), scale, true);
                    }
                });
            }
            _ => {
                // SAFETY: as above.
                let x = unsafe { slice(src as *const f32, self.n) };
                par_range(self.n, |r| {
                    // SAFETY: as above.
                    let y = unsafe { slice_mut(out.get().add(r.start), r.len()) };
                    for (o, &v) in y.iter_mut().zip(&x[r]) {
                        *o = encode_scaled(fmt, f64::from(v), scale, true);
                    }
                });
            }
        }
        Ok(())
    }
}

/// `CastThenPow2Scale`: float8 to f16 or f32 through a per-run table of the 256
/// scaled values.
struct FromFp8 {
    n: usize,
    dst: DataType,
    fmt: Float8Format,
}

fn build_from_fp8(spec: &KernelSpec<'_>) -> BuildResult {
    let (x, y) = (spec.input(0)?, spec.output(0)?);
    let fmt = format_of(spec, x.dtype())?;
    if !matches!(y.dtype(), DataType::Float16 | DataType::Float32) {
        return Err(spec.unsupported_dtype(y.dtype()));
    }
    Ok(Box::new(FromFp8 { n: x.nelms(), dst: y.dtype(), fmt }))
}

/// `y[i] = table[x[i]]` over the team.
///
/// # Safety
/// `x` holds `n` codes, `out` room for `n` values.
unsafe fn lookup<T: Copy + Send + Sync>(table: &[T; 256], x: *const u8, out: *mut T, n: usize) {
    // SAFETY: `x` holds `n` codes (this function's contract).
    let x = unsafe { slice(x, n) };
    let out = SendPtr(out);
    par_range(n, |r| {
        // SAFETY: `out` has room for `n` values (this function's contract); the pieces
        // of `0..n` are disjoint.
        let y = unsafe { slice_mut(out.get().add(r.start), r.len()) };
        for (o, &c) in y.iter_mut().zip(&x[r]) {
            *o = table[usize::from(c)];
        }
    });
}

impl Kernel for FromFp8 {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: input 1 is the int32 `log2_scale` (checked at build; `KernelArgs`).
        let scale = pow2(unsafe { read_log2_scale(args.inputs[1]) }?);
        let base = self.fmt.decode_table();
        // Every code times 2^s with |s| <= 32 is an f32 (normal): exact.
        let scaled: [f32; 256] = std::array::from_fn(|c| (f64::from(base[c]) * scale) as f32);
        match self.dst {
            DataType::Float16 => {
                let table: [f16; 256] = std::array::from_fn(|c| f16::from_f32(scaled[c]));
                // SAFETY: input 0 holds `n` codes and output 0 `n` values (`KernelArgs`).
                unsafe { lookup(&table, args.inputs[0], args.outputs[0] as *mut f16, self.n) };
            }
            // SAFETY: as above.
            _ => unsafe { lookup(&scaled, args.inputs[0], args.outputs[0] as *mut f32, self.n) },
        }
        Ok(())
    }
}

/// `MatMulPow2Scaled` / `ConvPow2Scaled` / `ConvTransposePow2Scaled`: the f32 kernel of the same op on the
/// decoded operands, scaled and rounded to f16.
struct ScaledProduct {
    inner: Box<dyn Kernel>,
    fmts: [Float8Format; 2],
    state: Mutex<Scratch>,
}

struct Scratch {
    a: Vec<f32>,
    b: Vec<f32>,
    y: Vec<f32>,
}

fn build_scaled_product(spec: &KernelSpec<'_>) -> BuildResult {
    let (a, b, y) = (spec.input(0)?, spec.input(1)?, spec.output(0)?);
    let fmts = [format_of(spec, a.dtype())?, format_of(spec, b.dtype())?];
    if y.dtype() != DataType::Float16 {
        return Err(spec.unsupported_dtype(y.dtype()));
    }
    let def: &'static dyn popart_ir::OpDef = if spec.is::<ir::MatMulPow2Scaled>() {
        &ir::MatMul
    } else if spec.is::<ir::ConvTransposePow2Scaled>() {
        &ir::ConvTranspose
    } else {
        &ir::Conv
    };
    let f32_info = |s: &[usize]| TensorInfo::new(DataType::Float32, s.to_vec());
    let inner_spec = KernelSpec {
        def,
        attrs: spec.attrs,
        inputs: vec![(0, f32_info(a.shape())), (1, f32_info(b.shape()))],
        outputs: vec![(0, f32_info(y.shape()))],
        check_indices: spec.check_indices,
        weight_invariant: false,
    };
    let inner = super::build_kernel(&inner_spec)?;
    let zeros = |n: usize| {
        popart_ir::size::try_zeroed_vec::<f32>(n, "float32 scratch of a float8 kernel")
            .map_err(|e| spec.error(e.to_string()))
    };
    let state = Scratch { a: zeros(a.nelms())?, b: zeros(b.nelms())?, y: zeros(y.nelms())? };
    Ok(Box::new(ScaledProduct { inner, fmts, state: Mutex::new(state) }))
}

/// Decode `dst.len()` codes at `src` into `dst`, unscaled.
///
/// # Safety
/// `src` holds `dst.len()` codes.
unsafe fn decode_into(fmt: Float8Format, src: *const u8, dst: &mut [f32]) {
    let table = fmt.decode_table();
    // SAFETY: `src` holds `dst.len()` codes (this function's contract), `dst` room
    // for as many values.
    unsafe { lookup(table, src, dst.as_mut_ptr(), dst.len()) };
}

impl Kernel for ScaledProduct {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: input 2 is the int32 `log2_scale` (checked at build; `KernelArgs`).
        let scale = pow2(unsafe { read_log2_scale(args.inputs[2]) }?);
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *guard;
        // SAFETY: the scratch buffers have the element counts of inputs 0 and 1 (sized
        // from the spec at build), which `args` holds.
        unsafe {
            decode_into(self.fmts[0], args.inputs[0], &mut st.a);
            decode_into(self.fmts[1], args.inputs[1], &mut st.b);
        }
        let ins = [st.a.as_ptr() as *const u8, st.b.as_ptr() as *const u8];
        let outs = [st.y.as_mut_ptr() as *mut u8];
        // SAFETY: the inner f32 kernel was built for the scratch buffers' infos; the
        // output scratch overlaps neither input scratch.
        unsafe { self.inner.run(&KernelArgs { inputs: &ins, outputs: &outs }) }?;
        let n = st.y.len();
        let (acc, out) = (&st.y, SendPtr(args.outputs[0] as *mut f16));
        par_range(n, |r| {
            // SAFETY: the f16 output has the f32 scratch's `n` elements (`KernelArgs`);
            // the pieces of `0..n` are disjoint.
            let y = unsafe { slice_mut(out.get().add(r.start), r.len()) };
            for (o, &a) in y.iter_mut().zip(&acc[r]) {
                // The f32 sum times 2^s is exact in f64: one rounding, to f16.
                *o = f16::from_f64(f64::from(a) * scale);
            }
        });
        Ok(())
    }
}
