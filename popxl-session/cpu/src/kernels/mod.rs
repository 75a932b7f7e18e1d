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
//!   `CopyVarUpdate`, `AccumulatorScale`, `SparseAccumulate`, `AdamVarUpdate`)
//!   read the updated tensor through output pointer 0, per the aliasing
//!   invariant of [`KernelArgs`](super::kernel::KernelArgs). `AdamUpdater`
//!   increments its time step, a modified input without an output, through
//!   the input's own pointer.
//! - Random ops are counter based: element `i` of a tensor depends only on the
//!   `uint32[2]` seed value and `i`, so `Dropout` on the same seed and shape
//!   draws the same mask in the forward and backward passes.
//! - Kernels cannot fail at run time: integer division by zero gives 0, an
//!   out-of-range `Gather` index gives a zero row, an out-of-range (not ignored)
//!   loss label gives NaN.
//! - `run` allocates nothing: scratch space is sized at build time. The
//!   exceptions are inside the `gemm` crate, which allocates its packing buffer per
//!   call for large products, and `PrintTensor` when it prints (it formats text).
//!
//! Layout: one file or folder per op family of `popart_ir::ops` (`unary`, with
//! `unary/params`; `binary`, with `binary/scaled_add` and `binary/extremum`;
//! `matmul`, `reduce`, with `reduce/groups`; `scan`, `sort`, `nn`, `shape`,
//! `var_update`, with `var_update/accumulate`; `optimizer`, `random`, `grad`,
//! `logical`, `print`, `indexing`, with `indexing/scatter`; `conv` (a folder:
//! geometry, passes, tasks and the picker in `conv/mod.rs`, one file per method
//! and concept), `float8`, `pool`, `norm`, `resize`, `roi_align`, `collectives`,
//! with `collectives/update` and `collectives/matmul_update`), each exporting
//! its `KERNELS` table,
//! over the shared machinery: `spec` (typed spec accessors, build errors),
//! `elem` (element traits), `dispatch` (dtype dispatch macros), `broadcast`
//! (broadcast and stride plans), `par` (threading and SIMD dispatch), `ptr`
//! (raw-pointer helpers) and `float16` (the f16-through-f32 adapter). Axis and
//! slice arithmetic comes from `popart_ir::ops`, shared with shape inference.
//!
//! ```
//! use popart_ir::{ops::all::Add, Attributes, DataType, TensorInfo};
//! use popxl_cpu::kernel::{KernelArgs, KernelSpec};
//! use popxl_cpu::kernels::build_kernel;
//!
//! let info = TensorInfo::new(DataType::Float32, [3]);
//! let attrs = Attributes::new();
//! let spec = KernelSpec::new(&Add, &attrs, vec![(0, info.clone()), (1, info.clone())], vec![(0, info)]);
//! let kernel = build_kernel(&spec).unwrap();
//! let (a, b, mut y) = ([1f32, 2.0, 3.0], [10f32, 20.0, 30.0], [0f32; 3]);
//! let inputs = [a.as_ptr() as *const u8, b.as_ptr() as *const u8];
//! let outputs = [y.as_mut_ptr() as *mut u8];
//! // SAFETY: the buffers match the spec and do not overlap.
//! unsafe { kernel.run(&KernelArgs { inputs: &inputs, outputs: &outputs }) }.unwrap();
//! assert_eq!(y, [11.0, 22.0, 33.0]);
//! ```

mod attention;
mod binary;
mod broadcast;
mod collectives;
mod conv;
mod dispatch;
mod elem;
mod float16;
mod float8;
mod grad;
mod indexing;
mod logical;
mod matmul;
mod nn;
mod norm;
mod optimizer;
pub(crate) mod par;
mod pool;
mod print;
mod ptr;
mod random;
mod reduce;
mod resize;
mod roi_align;
mod scan;
mod scratch;
mod shape;
mod sort;
mod spec;
mod tile;
mod unary;
mod var_update;

#[cfg(test)]
mod testutil;

pub use print::{capture_prints, set_print_sink, PrintSink};

use std::sync::{OnceLock, RwLock};

use popart_ir::{OpDef, OpDefId};

use super::kernel::{Kernel, KernelBuilder, KernelError, KernelSpec};

/// One builtin kernel table entry: the op's definition and its builder.
pub(crate) type KernelEntry = (&'static dyn OpDef, KernelBuilder);

/// Builder of each op type, and whether it is a builtin one (from the tables
/// below, not replaced by [`register_kernel`]).
type Registry = RwLock<std::collections::HashMap<OpDefId, (KernelBuilder, bool)>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let tables: &[&[KernelEntry]] = &[
            unary::TABLE,
            unary::GRAD_KERNELS,
            unary::KERNELS,
            binary::TABLE,
            binary::KERNELS,
            matmul::KERNELS,
            reduce::KERNELS,
            reduce::groups::KERNELS,
            scan::KERNELS,
            sort::KERNELS,
            nn::KERNELS,
            attention::KERNELS,
            shape::KERNELS,
            var_update::KERNELS,
            var_update::accumulate::KERNELS,
            optimizer::KERNELS,
            random::KERNELS,
            grad::KERNELS,
            unary::params::KERNELS,
            binary::scaled_add::KERNELS,
            binary::extremum::KERNELS,
            logical::KERNELS,
            print::KERNELS,
            indexing::KERNELS,
            indexing::scatter::KERNELS,
            conv::KERNELS,
            float8::KERNELS,
            pool::KERNELS,
            norm::KERNELS,
            resize::KERNELS,
            roi_align::KERNELS,
            collectives::KERNELS,
            collectives::update::KERNELS,
            collectives::matmul_update::KERNELS,
        ];
        let map = tables.iter().flat_map(|t| t.iter()).map(|(def, b)| (def.id(), (*b, true))).collect();
        RwLock::new(map)
    })
}

/// Register the `cpu` kernel builder of an op type, by its definition (custom ops
/// call this once, next to `popart_ir::register_op`). Replaces an earlier builder
/// of the same op type.
pub fn register_kernel(def: &'static dyn OpDef, builder: KernelBuilder) {
    registry().write().unwrap_or_else(|e| e.into_inner()).insert(def.id(), (builder, false));
}

/// The builder registered for an op type, if any.
pub fn kernel_builder(def: &'static dyn OpDef) -> Option<KernelBuilder> {
    registry().read().unwrap_or_else(|e| e.into_inner()).get(&def.id()).map(|e| e.0)
}

/// Whether the kernel [`build_kernel`] makes from `spec` may fail at run time
/// (the executor's [`MayFail`](crate::executor::MayFail) for this library):
/// with run-time index checks, for the float8 ops (their `log2_scale` is
/// checked: [`KernelRunError::Log2ScaleOutOfRange`](crate::kernel::KernelRunError)),
/// and for kernels registered by [`register_kernel`] (custom kernels, whose
/// failures cannot be known). Builtin collectives fail only after another
/// replica failed, whose program is the same one.
pub fn kernel_may_fail(spec: &KernelSpec<'_>) -> bool {
    let builtin = registry().read().unwrap_or_else(|e| e.into_inner()).get(&spec.def.id()).is_some_and(|e| e.1);
    spec.check_indices || !builtin || float8::KERNELS.iter().any(|(def, _)| def.id() == spec.def.id())
}

/// Build the kernel of one op, specialised for its attributes and tensor infos,
/// with the builder registered for its definition.
///
/// Errors name the op type and what is unsupported: no kernel registered (host
/// transfers and control flow are run by the executor itself, not by kernels), an
/// unsupported dtype, or inconsistent infos/attributes.
pub fn build_kernel(spec: &KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError> {
    match kernel_builder(spec.def) {
        Some(build) => build(spec),
        None => Err(spec::SpecExt::error(spec, "no cpu kernel is registered for this op type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use popart_ir::{lookup_op, Attributes, OpFlags};

    fn spec<'a>(op: &str, attrs: &'a Attributes, inputs: Io, outputs: Io) -> KernelSpec<'a> {
        KernelSpec::new(lookup_op(op).unwrap(), attrs, inputs, outputs)
    }
    type Io = Vec<(u32, popart_ir::TensorInfo)>;

    #[test]
    fn executor_ops_have_no_kernel() {
        let attrs = Attributes::new();
        for op in ["HostLoad", "HostStore", "Call", "Repeat", "If"] {
            let err = build_kernel(&spec(op, &attrs, vec![], vec![])).err().expect("must fail");
            assert_eq!(err.op_type, op);
            assert!(err.reason.contains("no cpu kernel is registered"), "{err}");
        }
    }

    #[test]
    fn inconsistent_specs_are_typed_errors() {
        use popart_ir::{DataType, TensorInfo};
        let attrs = Attributes::new();
        let f = |s: &[usize]| TensorInfo::new(DataType::Float32, s);
        let i = |s: &[usize]| TensorInfo::new(DataType::Int32, s);
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
            let err =
                build_kernel(&spec(op, &attrs, inputs, outputs)).err().unwrap_or_else(|| panic!("{op} must fail"));
            assert_eq!(err.op_type, op);
            assert!(!err.reason.is_empty());
        }
    }

    #[test]
    fn every_computing_builtin_op_has_a_kernel() {
        // Every builtin op type other than those the executor runs itself (host
        // transfers, subgraph calls) has a registered kernel builder.
        for def in popart_ir::registered_ops() {
            let flags = def.flags(&Attributes::new());
            if flags.intersects(OpFlags::HOST_IO | OpFlags::SUBGRAPH) || def.op_type().contains('.') {
                continue;
            }
            assert!(kernel_builder(def).is_some(), "{} has no kernel", def.op_type());
        }
    }
}
