//! Dynamic slices read in place.
//!
//! A `DynamicSlice` whose slice is one contiguous block of its input (one
//! sliced axis, every axis before it of size 1: a row of a stacked tensor, as
//! a `repeat` over stacked weights or stashes slices every iteration) need not
//! copy the block when only kernels read the slice, soon after, while nothing
//! writes the input: its readers' input pointers are set at run time to the
//! block inside the input ([`View::resolve`]). Exactly when:
//!
//! - the output buffer is an activation referenced by nothing but this
//!   kernel's output and inputs of kernels that follow it in the same
//!   sequence, directly or in functions called from it and from nowhere else
//!   (a repeat's body slices its stash rows, then calls the gradient graph);
//! - between the slice and its last reader the sequence holds only kernels
//!   and calls of functions made of kernels, none of which writes the sliced
//!   input's arena bytes;
//! - a step along the sliced axis is a multiple of 64 bytes, so every block
//!   is as aligned as a buffer.
//!
//! An offset whose slice is not that block (out of range, which popops starts
//! at 0 or [`crate::kernel::KernelSpec::check_indices`] refuses, or a slice
//! that would wrap) runs the copy kernel and points the readers at its output,
//! so values and errors are the kernel's in every case.

use popart_ir::ops::indexing::{dynamic_slices, DynamicSliceAttrs};
use popart_ir::{DataType, OpAttrs, OpDefId};
use popart_lower::{BufferKind, Executable, KernelCall, Program, RemoteOffset};

/// How many times each buffer and each function (by index) is named
/// anywhere in `exe`'s programs and functions.
#[derive(Clone, Debug, Default)]
pub(super) struct Refs {
    /// Per buffer.
    pub buffers: Vec<u32>,
    /// Call sites per function.
    pub calls: Vec<u32>,
}

/// [`Refs`] of `exe`.
pub(super) fn count_refs(exe: &Executable) -> Refs {
    let mut refs = vec![0u32; exe.buffers.len()];
    let mut calls = vec![0u32; exe.functions.len()];
    let mut add = |b: popart_lower::BufferId| {
        if let Some(n) = refs.get_mut(b.index()) {
            *n = n.saturating_add(1);
        }
    };
    let p = &exe.programs;
    let roots =
        exe.functions.iter().map(|f| &f.body).chain([&p.init, &p.weights_from_host, &p.weights_to_host, &p.main]);
    for root in roots {
        root.visit(&mut |node| match node {
            Program::Execute(k) => k.inputs.iter().chain(&k.outputs).for_each(|a| add(a.buffer)),
            Program::Copy { src, dst, .. } => {
                add(*src);
                add(*dst);
            }
            Program::If { cond, .. } => add(*cond),
            Program::HostToDevice { dst, .. } => add(*dst),
            Program::DeviceToHost { src, .. } => add(*src),
            Program::RemoteLoad { offset, dst, .. } => {
                add(*dst);
                if let RemoteOffset::Tensor(b) = offset {
                    add(*b);
                }
            }
            Program::RemoteStore { src, offset, .. } => {
                add(*src);
                if let RemoteOffset::Tensor(b) = offset {
                    add(*b);
                }
            }
            Program::WriteConstant { constant } => {
                if let Some(c) = exe.constants.get(*constant) {
                    add(c.buffer);
                }
            }
            Program::Call(f) => {
                if let Some(n) = calls.get_mut(f.index()) {
                    *n = n.saturating_add(1);
                }
            }
            _ => {}
        });
    }
    exe.weights.iter().for_each(|w| add(w.buffer));
    exe.constants.iter().for_each(|c| add(c.buffer));
    Refs { buffers: refs, calls }
}

/// A slice that can be read in place: what [`plan`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ViewPlan {
    /// Size of the sliced axis.
    pub dim: i64,
    /// Slice size along it.
    pub size: i64,
    /// Bytes of one index step along it.
    pub step_bytes: usize,
    /// The offset tensor's type.
    pub index: DataType,
}

/// Whether the kernel call `seq[at]` is a `DynamicSlice` that can be read in
/// place (the module's conditions; `refs` from [`count_refs`]).
pub(super) fn plan(exe: &Executable, refs: &Refs, seq: &[Program], at: usize) -> Option<ViewPlan> {
    let Program::Execute(k) = seq.get(at)? else { return None };
    if k.def.id() != OpDefId::of::<popart_ir::ops::all::DynamicSlice>() {
        return None;
    }
    let (src, idx, out) = (arg(k, 0, true)?, arg(k, 1, true)?, arg(k, 0, false)?);
    let plan = block(k, src, idx, out)?;
    if exe.buffers.get(out.buffer.index())?.kind != BufferKind::Activation || out.buffer == src.buffer {
        return None;
    }
    // Its readers: inputs of the kernels after it, directly or in the
    // functions they call; nothing in between but kernels (and calls of
    // functions of kernels) that write no memory of the input (its buffer, or
    // one sharing its arena bytes once it is dead).
    let span = |b: popart_lower::BufferId| exe.buffers.get(b.index()).map(|x| (x.offset, x.offset + x.size));
    let region = Region { exe, calls: &refs.calls, src: span(src.buffer)?, out: out.buffer };
    let total = *refs.buffers.get(out.buffer.index())?;
    let (mut reads, mut seen) = (0u32, 1u32);
    for node in &seq[at + 1..] {
        if seen == total {
            break;
        }
        let n = region.reads(node, 0)?;
        reads += n;
        seen += n;
    }
    (reads > 0 && seen == total).then_some(plan)
}

/// The block of `tensor` a dynamic slice or update `k` (offset `idx`, slice
/// or update `part`) addresses, when it is one contiguous block: one sliced
/// axis, every axis before it of size 1, a scalar integer offset, `part` of
/// `tensor`'s type, and a step along the axis a multiple of 64 bytes (every
/// block keeps the alignment kernels are promised).
pub(super) fn block(
    k: &KernelCall,
    tensor: &popart_lower::Arg,
    idx: &popart_lower::Arg,
    part: &popart_lower::Arg,
) -> Option<ViewPlan> {
    let a = DynamicSliceAttrs::from_attrs(&k.attrs).ok()?;
    let dims = &tensor.info.shape;
    let slices = dynamic_slices(dims, &a.axes, &a.sizes).ok()?;
    let &[(axis, size)] = slices.as_slice() else { return None };
    if dims[..axis].iter().any(|&d| d != 1) || idx.info.nelms() != 1 || tensor.info.dtype != part.info.dtype {
        return None;
    }
    let index = idx.info.dtype;
    if !matches!(
        index,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Uint8
            | DataType::Uint16
            | DataType::Uint32
            | DataType::Uint64
    ) {
        return None;
    }
    let inner: usize = dims[axis + 1..].iter().product();
    let step_bytes = inner.checked_mul(tensor.info.dtype.size_bytes())?;
    if step_bytes % 64 != 0 {
        return None;
    }
    Some(ViewPlan { dim: i64::try_from(dims[axis]).ok()?, size: i64::try_from(size).ok()?, step_bytes, index })
}

/// What may come between a view and its last reader.
struct Region<'e> {
    exe: &'e Executable,
    /// Call sites per function: a function called from the region must have
    /// no other (elsewhere its readers would see the block this view chose).
    calls: &'e [u32],
    /// The sliced input's arena bytes.
    src: (usize, usize),
    /// The slice's buffer.
    out: popart_lower::BufferId,
}

impl Region<'_> {
    /// The reads of the slice in `node` (a kernel, a sequence of them or a
    /// call of a function of them), or `None` if it may write the input or
    /// the slice, or is anything else.
    fn reads(&self, node: &Program, depth: usize) -> Option<u32> {
        match node {
            Program::Execute(k) => {
                for o in &k.outputs {
                    let b = self.exe.buffers.get(o.buffer.index())?;
                    if o.buffer == self.out || (b.offset < self.src.1 && self.src.0 < b.offset + b.size) {
                        return None;
                    }
                }
                Some(k.inputs.iter().filter(|i| i.buffer == self.out).count() as u32)
            }
            Program::Sequence(v) if depth < 16 => v.iter().try_fold(0u32, |n, c| Some(n + self.reads(c, depth + 1)?)),
            Program::Call(f) if depth < 16 && self.calls.get(f.index()) == Some(&1) => {
                self.reads(&self.exe.functions.get(f.index())?.body, depth + 1)
            }
            _ => None,
        }
    }
}

/// Argument `index` of `k` (an input if `input`).
pub(super) fn arg(k: &KernelCall, index: u32, input: bool) -> Option<&popart_lower::Arg> {
    (if input { &k.inputs } else { &k.outputs }).iter().find(|a| a.index == index)
}

/// A compiled in-place slice: see the module.
pub(super) struct View {
    /// The copy kernel (the fallback; its position in the executor's kernels).
    pub kernel: u32,
    /// Its input and output pointer positions (as [`super::Instr::Kernel`]'s).
    pub inputs: u32,
    pub n_inputs: u32,
    pub outputs: u32,
    pub n_outputs: u32,
    /// The sliced input, the offset and the copy's output.
    pub src: *const u8,
    pub index: *const u8,
    pub out: *const u8,
    /// The copy's output buffer, whose readers these are.
    pub buffer: popart_lower::BufferId,
    /// As [`ViewPlan`].
    pub plan: ViewPlan,
    /// Positions in the executor's input pointers of the readers' arguments.
    pub slots: Vec<u32>,
}

impl View {
    /// The block of the input the slice is at this run, or `None` when the
    /// copy kernel must run (see the module).
    ///
    /// # Safety
    /// `index` points to one element of `plan.index`'s type and `src` to the
    /// input, `plan.dim` steps of `plan.step_bytes` (as compiled).
    pub unsafe fn resolve(&self) -> Option<*const u8> {
        // SAFETY: this function's contract.
        let v = unsafe { read_index(self.index, self.plan.index) }?;
        let fits = v >= 0 && v <= self.plan.dim - self.plan.size;
        // SAFETY: `v + size <= dim`: the block lies within the input.
        fits.then(|| unsafe { self.src.add(v as usize * self.plan.step_bytes) })
    }
}

/// The offset element at `index`, of type `dtype` (an integer type; `None`
/// for any other, or a `u64` past `i64::MAX`).
///
/// # Safety
/// `index` points to one element of `dtype`.
pub(super) unsafe fn read_index(index: *const u8, dtype: DataType) -> Option<i64> {
    // SAFETY: one offset element (this function's contract); unaligned reads,
    // whatever the arena offset.
    unsafe {
        Some(match dtype {
            DataType::Int8 => i64::from(index.cast::<i8>().read_unaligned()),
            DataType::Int16 => i64::from(index.cast::<i16>().read_unaligned()),
            DataType::Int32 => i64::from(index.cast::<i32>().read_unaligned()),
            DataType::Int64 => index.cast::<i64>().read_unaligned(),
            DataType::Uint8 => i64::from(index.cast::<u8>().read_unaligned()),
            DataType::Uint16 => i64::from(index.cast::<u16>().read_unaligned()),
            DataType::Uint32 => i64::from(index.cast::<u32>().read_unaligned()),
            DataType::Uint64 => i64::try_from(index.cast::<u64>().read_unaligned()).unwrap_or(-1),
            _ => return None,
        })
    }
}
