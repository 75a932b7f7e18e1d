//! The float16 adapter: runs an f32 kernel for ops on float16 tensors, converting
//! through f32 scratch buffers sized at build time.

use std::sync::Mutex;

use half::f16;
use popart_ir::{DataType, TensorInfo};

use super::ptr::{slice, slice_mut};
use super::spec::{BuildResult, SpecExt};
use crate::kernel::{Kernel, KernelArgs, KernelError, KernelResult, KernelSpec};

/// Runs an f32 kernel for an op whose float16 tensors are converted to and from
/// f32 scratch buffers sized at build time.
pub(crate) struct F16Adapter {
    inner: Box<dyn Kernel>,
    /// Per input position: scratch index when float16.
    ins: Vec<Option<usize>>,
    /// Per output position: scratch index when float16.
    outs: Vec<Option<usize>>,
    /// Input 0 is updated in place through output 0.
    in_place: bool,
    state: Mutex<F16State>,
}

struct F16State {
    scratch: Vec<Vec<f32>>,
    in_ptrs: Vec<*const u8>,
    out_ptrs: Vec<*mut u8>,
}
// SAFETY: the pointer vectors are only scratch storage, written and read while the
// mutex is held during one run.
unsafe impl Send for F16State {}

/// True when any tensor of the spec is float16.
pub(crate) fn has_f16(spec: &KernelSpec<'_>) -> bool {
    spec.inputs.iter().chain(&spec.outputs).any(|(_, t)| t.dtype == DataType::Float16)
}

/// Build `build` on a copy of `spec` with float16 replaced by float32 and wrap
/// it in an [`F16Adapter`]. `in_place`: input 0 aliases output 0.
pub(crate) fn f16_adapter(
    spec: &KernelSpec<'_>,
    in_place: bool,
    build: impl FnOnce(&KernelSpec<'_>) -> BuildResult,
) -> BuildResult {
    let promote = |t: &TensorInfo| {
        if t.dtype == DataType::Float16 {
            TensorInfo::new(DataType::Float32, t.shape.clone())
        } else {
            t.clone()
        }
    };
    let f32_spec = KernelSpec {
        def: spec.def,
        attrs: spec.attrs,
        inputs: spec.inputs.iter().map(|(i, t)| (*i, promote(t))).collect(),
        outputs: spec.outputs.iter().map(|(i, t)| (*i, promote(t))).collect(),
        ..spec.clone()
    };
    let inner = build(&f32_spec)?;
    let mut scratch = Vec::new();
    // Scratch is sized from user shapes: allocated fallibly (a refusal is a build error).
    let mut slot = |t: &TensorInfo| -> Result<Option<usize>, KernelError> {
        if t.dtype != DataType::Float16 {
            return Ok(None);
        }
        let buf = popart_ir::size::try_zeroed_vec::<f32>(t.nelms(), "float32 scratch of a float16 kernel")
            .map_err(|e| spec.error(e.to_string()))?;
        scratch.push(buf);
        Ok(Some(scratch.len() - 1))
    };
    let outs: Vec<Option<usize>> = spec.outputs.iter().map(|(_, t)| slot(t)).collect::<Result<_, _>>()?;
    let ins: Vec<Option<usize>> = spec
        .inputs
        .iter()
        .enumerate()
        .map(|(p, (_, t))| if in_place && p == 0 { Ok(outs.first().copied().flatten()) } else { slot(t) })
        .collect::<Result<_, _>>()?;
    let state = F16State {
        scratch,
        in_ptrs: vec![std::ptr::null(); spec.inputs.len()],
        out_ptrs: vec![std::ptr::null_mut(); spec.outputs.len()],
    };
    Ok(Box::new(F16Adapter { inner, ins, outs, in_place, state: Mutex::new(state) }))
}

impl Kernel for F16Adapter {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        use half::slice::HalfFloatSliceExt;
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *guard;
        for (p, s) in self.ins.iter().enumerate() {
            match *s {
                Some(s) => {
                    let buf = &mut st.scratch[s];
                    let src = if self.in_place && p == 0 { args.outputs[0] as *const u8 } else { args.inputs[p] };
                    // SAFETY: the scratch buffer has the input's element count (both built
                    // from the spec), and `args` holds the spec's buffers.
                    unsafe { slice(src as *const f16, buf.len()) }.convert_to_f32_slice(buf);
                    st.in_ptrs[p] = buf.as_ptr() as *const u8;
                }
                None => st.in_ptrs[p] = args.inputs[p],
            }
        }
        for (p, s) in self.outs.iter().enumerate() {
            st.out_ptrs[p] = match *s {
                Some(s) => st.scratch[s].as_mut_ptr() as *mut u8,
                None => args.outputs[p],
            };
        }
        // An error means the inner kernel wrote nothing: neither do we.
        // SAFETY: the inner kernel's spec is this one's with float16 made float32: its
        // float32 buffers are the scratch buffers sized for it, the others `args`'
        // own, and scratch outputs overlap nothing.
        unsafe { self.inner.run(&KernelArgs { inputs: &st.in_ptrs, outputs: &st.out_ptrs }) }?;
        for (p, s) in self.outs.iter().enumerate() {
            if let Some(s) = *s {
                let buf = &st.scratch[s];
                // SAFETY: output `p` holds the scratch buffer's element count (both from the
                // spec) and overlaps no input (`KernelArgs`).
                unsafe { slice_mut(args.outputs[p] as *mut f16, buf.len()) }.convert_from_f32_slice(buf);
            }
        }
        Ok(())
    }
}
