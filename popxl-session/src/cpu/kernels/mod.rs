//! The `cpu` device's kernel library: one specialised kernel per op of the catalogue.
//!
//! [`build_kernel`] runs once per lowered op at session creation. It reads the op
//! type, attributes and tensor infos, precomputes everything that depends only
//! on them (broadcast strides, reduction plans, GEMM call lists, slice offsets,
//! scratch buffers) and returns a kernel whose [`Kernel::run`] only computes.
//!
//! Conventions shared by every kernel:
//! - Elementwise kernels are one generic loop instantiated per op (a zero-sized
//!   op type with a scalar function); broadcasting collapses contiguous dims so
//!   same-shape and scalar operands run as flat loops.
//! - Work is split over the worker team ([`team`](super::team)) only above a
//!   size threshold: 2^18 elements for simple maps, 16x fewer for
//!   transcendental ones (gelu, exp, tanh...), 2^18 multiply-adds per GEMM
//!   call; tiny ops never pay for threading.
//! - float32 and float64 are computed natively; float16 float math converts to
//!   and from f32 scratch buffers sized at build time (matmul uses the GEMM
//!   crate's native f16 path). Ops that only move elements (copies, shape ops,
//!   `Where`, `Gather`, `Cast`) support every dtype, arithmetic and comparisons
//!   support the integer types too (wrapping; integer division by zero gives 0).
//! - In-place updates (`AddInplace`, `Accumulate`, `ScaledAddInplace`,
//!   `CopyVarUpdate`) read the updated tensor through output pointer 0, per the
//!   aliasing invariant of [`KernelArgs`](super::kernel::KernelArgs).
//! - Random ops are counter based: element `i` of a tensor depends only on the
//!   `uint32[2]` seed value and `i`, so `Dropout` on the same seed and shape
//!   draws the same mask in the forward and backward passes.
//! - Kernels cannot fail at run time: integer division by zero gives 0, an
//!   out-of-range `Gather` index gives a zero row, an out-of-range (not ignored)
//!   loss label gives NaN.
//! - `run` allocates nothing: scratch space is sized at build time. The one
//!   exception is inside the `gemm` crate, which allocates its packing buffer per
//!   call for large products.
//!
//! ```
//! use popart_ir::{Attributes, DataType, TensorInfo};
//! use popxl_session::cpu::kernel::{KernelArgs, KernelSpec};
//! use popxl_session::cpu::kernels::build_kernel;
//!
//! let info = TensorInfo::new(DataType::Float32, [3]);
//! let attrs = Attributes::new();
//! let spec = KernelSpec {
//!     op_type: "Add",
//!     attrs: &attrs,
//!     inputs: vec![(0, info.clone()), (1, info.clone())],
//!     outputs: vec![(0, info)],
//! };
//! let kernel = build_kernel(&spec).unwrap();
//! let (a, b, mut y) = ([1f32, 2.0, 3.0], [10f32, 20.0, 30.0], [0f32; 3]);
//! let inputs = [a.as_ptr() as *const u8, b.as_ptr() as *const u8];
//! let outputs = [y.as_mut_ptr() as *mut u8];
//! // SAFETY: the buffers match the spec and do not overlap.
//! unsafe { kernel.run(&KernelArgs { inputs: &inputs, outputs: &outputs }) };
//! assert_eq!(y, [11.0, 22.0, 33.0]);
//! ```

mod binary;
mod common;
mod grad;
mod matmul;
mod nn;
mod random;
mod reduce;
mod shape;
mod unary;
mod var_update;

#[cfg(test)]
mod testutil;

use super::kernel::{Kernel, KernelError, KernelSpec};

/// Op types the executor implements itself (host transfers and control flow).
pub const EXECUTOR_OPS: &[&str] = &["HostLoad", "HostStore", "Call", "Repeat", "If"];

/// Build the kernel of one op, specialised for its attributes and tensor infos.
///
/// Covers every computing op type of the `popart_ir::ops` catalogue. Errors name
/// the op type and what is unsupported: an unknown op type, an executor op
/// ([`EXECUTOR_OPS`]), an unsupported dtype or inconsistent infos/attributes.
pub fn build_kernel(spec: &KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError> {
    use common::SpecExt;
    match spec.op_type {
        "Neg" | "Abs" | "Exp" | "Log" | "Sqrt" | "Relu" | "Gelu" | "Tanh" | "Sigmoid" | "Sin" | "Cos" | "Sign"
        | "Floor" | "Ceil" | "Identity" | "Detach" | "Cast" | "Reshape" | "Squeeze" | "ReshapeGrad" => {
            unary::build(spec)
        }
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Maximum" | "Minimum" | "Greater" | "Less" | "Equal" | "Where" => {
            binary::build(spec)
        }
        "MatMul" | "MatMulLhsGrad" | "MatMulRhsGrad" | "ScaledAddMatMulRhsGradInplace" => matmul::build(spec),
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceToShape" => reduce::build(spec),
        "Softmax" | "NllLoss" | "NllLossWithSoftmaxGrad" | "SoftmaxGrad" | "NllLossGrad" => nn::build(spec),
        "Transpose" | "Slice" | "Concat" | "Gather" | "SliceGrad" | "GatherGrad" | "ConcatGrad" => shape::build(spec),
        "AddInplace" | "Accumulate" | "ScaledAddInplace" | "CopyVarUpdate" => var_update::build(spec),
        "RandomUniform" | "RandomNormal" | "Dropout" => random::build(spec),
        "UnaryGrad" | "BinaryGrad" | "WhereGrad" | "ReduceGrad" | "Sum" | "Init" => grad::build(spec),
        op if EXECUTOR_OPS.contains(&op) => {
            Err(spec.error("handled by the executor (host transfer or control flow), not by a kernel"))
        }
        _ => Err(spec.error("unknown op type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use popart_ir::Attributes;

    #[test]
    fn executor_and_unknown_ops_are_errors() {
        let attrs = Attributes::new();
        for op in EXECUTOR_OPS.iter().copied().chain(["NoSuchOp"]) {
            let spec = KernelSpec { op_type: op, attrs: &attrs, inputs: vec![], outputs: vec![] };
            let err = build_kernel(&spec).err().expect("must fail");
            assert_eq!(err.op_type, op);
        }
    }

    #[test]
    fn inconsistent_specs_are_typed_errors() {
        use popart_ir::{DataType, TensorInfo};
        let attrs = Attributes::new();
        let f = |s: &[usize]| TensorInfo::new(DataType::Float32, s);
        let i = |s: &[usize]| TensorInfo::new(DataType::Int32, s);
        type Io = Vec<(u32, TensorInfo)>;
        let cases: Vec<(&str, Io, Io)> = vec![
            ("Add", vec![(0, f(&[2])), (1, i(&[2]))], vec![(0, f(&[2]))]),
            ("Add", vec![(0, f(&[2])), (1, f(&[3]))], vec![(0, f(&[3]))]),
            ("Exp", vec![(0, i(&[2]))], vec![(0, i(&[2]))]),
            ("MatMul", vec![(0, f(&[2, 3])), (1, f(&[4, 5]))], vec![(0, f(&[2, 5]))]),
            ("Softmax", vec![(0, f(&[2, 3]))], vec![(0, f(&[3, 2]))]),
            ("Dropout", vec![(0, f(&[2])), (1, i(&[2]))], vec![(0, f(&[2]))]),
            ("Add", vec![(0, f(&[2]))], vec![(0, f(&[2]))]),
        ];
        for (op, inputs, outputs) in cases {
            let spec = KernelSpec { op_type: op, attrs: &attrs, inputs, outputs };
            let err = build_kernel(&spec).err().unwrap_or_else(|| panic!("{op} must fail"));
            assert_eq!(err.op_type, op);
            assert!(!err.reason.is_empty());
        }
    }

    #[test]
    fn every_computing_catalogue_op_has_a_kernel_path() {
        // Build-time coverage: every registered builtin op type other than the
        // executor's must be routed to a family (errors here would say "unknown").
        let attrs = Attributes::new();
        for op in popart_ir::registered_op_types() {
            if EXECUTOR_OPS.contains(&op) || op.contains('.') {
                continue;
            }
            let spec = KernelSpec { op_type: op, attrs: &attrs, inputs: vec![], outputs: vec![] };
            if let Err(e) = build_kernel(&spec) {
                assert_ne!(e.reason, "unknown op type", "{op} has no kernel");
            }
        }
    }
}
