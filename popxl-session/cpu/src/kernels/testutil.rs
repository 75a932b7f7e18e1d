//! Test helpers: run one kernel on host tensors, with outputs inferred by the IR.

use popart_ir::{lookup_op, Attributes, DataType, HostTensor, Ir, TensorInfo};

use super::build_kernel;
use crate::kernel::{KernelArgs, KernelRunError, KernelSpec};

/// A tensor info.
pub(crate) fn ti(dtype: DataType, shape: &[usize]) -> TensorInfo {
    TensorInfo::new(dtype, shape)
}

/// A host tensor of `dtype` from f64 values.
pub(crate) fn t(dtype: DataType, shape: &[usize], values: &[f64]) -> HostTensor {
    assert_eq!(shape.iter().product::<usize>(), values.len(), "test tensor size");
    HostTensor::from_f64_values(dtype, shape, values)
}

/// Output infos of an op as the IR infers them.
pub(crate) fn infer(op_type: &str, attrs: &Attributes, inputs: &[(u32, TensorInfo)]) -> Vec<TensorInfo> {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let mut ids = Vec::new();
    for (i, info) in inputs {
        let id = ir.graph_mut(main).unwrap().add_input(&format!("in{i}"), info.clone()).unwrap();
        ids.push((*i, id));
    }
    let def = lookup_op(op_type).unwrap();
    ir.infer_outputs(main, def, attrs, &ids, "node").unwrap_or_else(|e| panic!("inference failed: {e}"))
}

/// 64-byte aligned zeroed storage for `nbytes`.
fn buffer(nbytes: usize) -> Vec<[u64; 8]> {
    vec![[0u64; 8]; nbytes.div_ceil(64).max(1)]
}

fn bytes_of(buf: &[[u64; 8]], n: usize) -> Vec<u8> {
    let all: &[u8] = bytemuck::cast_slice(buf);
    all[..n].to_vec()
}

/// Build and run op `op_type` on `inputs`; in-place ops get input 0's data in
/// output 0's buffer as the executor arranges it. Returns the outputs.
pub(crate) fn run_op(op_type: &str, attrs: Attributes, inputs: &[(u32, HostTensor)]) -> Vec<HostTensor> {
    let mut inputs: Vec<(u32, HostTensor)> = inputs.to_vec();
    inputs.sort_by_key(|(i, _)| *i);
    let in_infos: Vec<(u32, TensorInfo)> = inputs.iter().map(|(i, t)| (*i, t.info.clone())).collect();
    let out_infos = infer(op_type, &attrs, &in_infos);
    run_with_outputs(op_type, &attrs, &inputs, &out_infos)
}

/// [`run_op`] with explicit output infos.
pub(crate) fn run_with_outputs(
    op_type: &str,
    attrs: &Attributes,
    inputs: &[(u32, HostTensor)],
    out_infos: &[TensorInfo],
) -> Vec<HostTensor> {
    try_run_with_outputs(op_type, attrs, inputs, out_infos, false).unwrap_or_else(|e| panic!("{op_type}: {e}"))
}

/// [`run_op`] with run-time index checks on: the kernel's error, if any.
pub(crate) fn try_run_op_checked(
    op_type: &str,
    attrs: Attributes,
    inputs: &[(u32, HostTensor)],
) -> Result<Vec<HostTensor>, KernelRunError> {
    let mut inputs: Vec<(u32, HostTensor)> = inputs.to_vec();
    inputs.sort_by_key(|(i, _)| *i);
    let in_infos: Vec<(u32, TensorInfo)> = inputs.iter().map(|(i, t)| (*i, t.info.clone())).collect();
    let out_infos = infer(op_type, &attrs, &in_infos);
    try_run_with_outputs(op_type, &attrs, &inputs, &out_infos, true)
}

/// [`run_with_outputs`], with or without run-time index checks, returning the
/// kernel's run error.
pub(crate) fn try_run_with_outputs(
    op_type: &str,
    attrs: &Attributes,
    inputs: &[(u32, HostTensor)],
    out_infos: &[TensorInfo],
    check_indices: bool,
) -> Result<Vec<HostTensor>, KernelRunError> {
    let spec = KernelSpec {
        def: lookup_op(op_type).unwrap(),
        attrs,
        inputs: inputs.iter().map(|(i, t)| (*i, t.info.clone())).collect(),
        outputs: out_infos.iter().enumerate().map(|(i, t)| (i as u32, t.clone())).collect(),
        check_indices,
        weight_invariant: false,
    };
    let kernel = build_kernel(&spec).unwrap_or_else(|e| panic!("{e}"));
    let aliases = lookup_op(op_type).map(|d| d.alias_pairs(attrs)).unwrap_or_default();
    let mut in_bufs: Vec<Vec<[u64; 8]>> = inputs
        .iter()
        .map(|(_, t)| {
            let mut b = buffer(t.bytes.len());
            bytemuck::cast_slice_mut::<_, u8>(&mut b)[..t.bytes.len()].copy_from_slice(&t.bytes);
            b
        })
        .collect();
    // Outputs start as garbage so kernels that must zero-fill are checked.
    let mut out_bufs: Vec<Vec<[u64; 8]>> =
        out_infos.iter().map(|t| vec![[0x5A5A_5A5A_5A5A_5A5Au64; 8]; t.nbytes().div_ceil(64).max(1)]).collect();
    for &(i, o) in &aliases {
        let p = inputs.iter().position(|(j, _)| *j == i).unwrap();
        out_bufs[o as usize] = in_bufs[p].clone();
    }
    let mut out_ptrs: Vec<*mut u8> = out_bufs.iter_mut().map(|b| b.as_mut_ptr() as *mut u8).collect();
    let in_ptrs: Vec<*const u8> = in_bufs
        .iter_mut()
        .enumerate()
        .map(|(p, b)| match aliases.iter().find(|(i, _)| *i == inputs[p].0) {
            Some(&(_, o)) => out_ptrs[o as usize] as *const u8,
            None => b.as_ptr() as *const u8,
        })
        .collect();
    // SAFETY: buffers are sized from the infos, 64-byte aligned, and aliased exactly
    // as the op declares.
    unsafe { kernel.run(&KernelArgs { inputs: &in_ptrs, outputs: &out_ptrs }) }?;
    // A second run must give the same result for non-in-place ops (no hidden state).
    if aliases.is_empty() {
        let first: Vec<Vec<u8>> = out_bufs.iter().zip(out_infos).map(|(b, t)| bytes_of(b, t.nbytes())).collect();
        // SAFETY: as above.
        unsafe { kernel.run(&KernelArgs { inputs: &in_ptrs, outputs: &out_ptrs }) }?;
        for (k, (b, t)) in out_bufs.iter().zip(out_infos).enumerate() {
            assert_eq!(bytes_of(b, t.nbytes()), first[k], "second run of {op_type} differs at output {k}");
        }
    }
    out_ptrs.clear();
    Ok(out_bufs
        .iter()
        .zip(out_infos)
        .map(|(b, t)| HostTensor::from_bytes(t.clone(), bytes_of(b, t.nbytes())).unwrap())
        .collect())
}

/// Assert `|got - want| <= tol * (1 + |want|)` elementwise.
pub(crate) fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan());
        assert!(ok, "element {i}: got {g}, want {w} (tol {tol})");
    }
}

/// A small deterministic generator for test data (SplitMix64).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[lo, hi)`.
    pub(crate) fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
    /// `n` uniform values in `[lo, hi)`.
    pub(crate) fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

/// Central finite difference of `f` (scalar loss) at `x`, for every element.
pub(crate) fn numeric_grad(x: &[f64], eps: f64, mut f: impl FnMut(&[f64]) -> f64) -> Vec<f64> {
    let mut xp = x.to_vec();
    (0..x.len())
        .map(|i| {
            let orig = xp[i];
            xp[i] = orig + eps;
            let up = f(&xp);
            xp[i] = orig - eps;
            let down = f(&xp);
            xp[i] = orig;
            (up - down) / (2.0 * eps)
        })
        .collect()
}
