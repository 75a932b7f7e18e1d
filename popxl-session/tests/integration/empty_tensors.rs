//! Every registered op on empty tensors (issue 35): each op type runs on inputs
//! with a 0-length dimension wherever its shape rule allows one, kernel by kernel
//! on the `cpu` device, and forward plus autodiff gradient through a `Session`.
//!
//! The op registry drives it: an op type is covered by an explicit case
//! (`cases::explicit`), by a generic attribute-free case its shape rule accepts
//! (`cases::GENERIC`), or listed in `cases::NOT_EMPTY` with the reason it cannot
//! take an empty input. A newly registered op type in none of them fails the test.
//! Outputs that are not empty (a reduction over an empty axis, a product with an
//! empty contraction) are compared with numpy's values, written in the cases.

mod cases;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cases::Case;
use popart_ir::{lookup_op, registered_ops, GradRule, HostTensor, Ir, OpDef, TensorInfo};
use popxl_session::cpu::kernel::{KernelArgs, KernelSpec};
use popxl_session::cpu::kernels::build_kernel;
use popxl_session::Session;

/// 64-byte aligned storage of at least one block.
fn buffer(nbytes: usize, fill: u64) -> Vec<[u64; 8]> {
    vec![[fill; 8]; nbytes.div_ceil(64).max(1)]
}

fn bytes_of(buf: &[[u64; 8]], n: usize) -> Vec<u8> {
    let all: &[u8] = bytemuck::cast_slice(buf);
    all[..n].to_vec()
}

/// Output infos of `def` on `case`, and whether the op has gradient ops.
fn infer(def: &'static dyn OpDef, case: &Case) -> Result<(Vec<TensorInfo>, bool), String> {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let mut ids = Vec::new();
    for (i, info) in &case.inputs {
        let id = ir.main_graph_mut().add_input(&format!("in{i}"), info.clone()).map_err(|e| e.to_string())?;
        ids.push((*i, id));
    }
    let infos = ir.infer_outputs(main, def, &case.attrs, &ids, "op").map_err(|e| e.to_string())?;
    let op = ir.create_op_with_def(main, def, case.attrs.clone(), &ids, "op").map_err(|e| e.to_string())?;
    let op = ir.main_graph().op(op).map_err(|e| e.to_string())?;
    let has_grad = matches!(def.grad(&popart_ir::GradContext::new(op, ir.main_graph())), GradRule::Ops(_));
    Ok((infos, has_grad))
}

/// Build and run the kernel of `def` on `case` (inputs filled from the case's
/// values, outputs starting as garbage; in-place outputs share their input's
/// buffer as the executor arranges). Returns the outputs.
fn run_kernel(def: &'static dyn OpDef, case: &Case, out_infos: &[TensorInfo]) -> Result<Vec<HostTensor>, String> {
    let spec = KernelSpec::new(
        def,
        &case.attrs,
        case.inputs.clone(),
        out_infos.iter().enumerate().map(|(i, t)| (i as u32, t.clone())).collect(),
    );
    let kernel = build_kernel(&spec).map_err(|e| format!("kernel build: {e}"))?;
    let aliases = def.alias_pairs(&case.attrs);
    let mut in_bufs: Vec<Vec<[u64; 8]>> = case
        .inputs
        .iter()
        .enumerate()
        .map(|(k, (_, info))| {
            let mut b = buffer(info.nbytes(), 0);
            let host = case.input_value(k);
            bytemuck::cast_slice_mut::<_, u8>(&mut b)[..host.bytes.len()].copy_from_slice(&host.bytes);
            b
        })
        .collect();
    let mut out_bufs: Vec<Vec<[u64; 8]>> =
        out_infos.iter().map(|t| buffer(t.nbytes(), 0x5A5A_5A5A_5A5A_5A5A)).collect();
    for &(i, o) in &aliases {
        let p = case.inputs.iter().position(|(j, _)| *j == i).ok_or("alias of a missing input")?;
        out_bufs[o as usize] = in_bufs[p].clone();
    }
    let out_ptrs: Vec<*mut u8> = out_bufs.iter_mut().map(|b| b.as_mut_ptr() as *mut u8).collect();
    let in_ptrs: Vec<*const u8> = in_bufs
        .iter_mut()
        .enumerate()
        .map(|(p, b)| match aliases.iter().find(|(i, _)| *i == case.inputs[p].0) {
            Some(&(_, o)) => out_ptrs[o as usize] as *const u8,
            None => b.as_ptr() as *const u8,
        })
        .collect();
    // SAFETY: every buffer holds its info's bytes (at least 64), 64-byte aligned,
    // aliased exactly as the op declares.
    unsafe { kernel.run(&KernelArgs { inputs: &in_ptrs, outputs: &out_ptrs }) }.map_err(|e| format!("run: {e}"))?;
    out_bufs
        .iter()
        .zip(out_infos)
        .map(|(b, t)| HostTensor::from_bytes(t.clone(), bytes_of(b, t.nbytes())).map_err(|e| e.to_string()))
        .collect()
}

/// Values equal as numpy compares them for these tests: NaN equals NaN.
fn same(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(a, b)| (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-6 * b.abs())
}

/// Check one op on its case: inference accepts it, the kernel builds and runs,
/// empty outputs are empty and the others hold the case's expected values.
/// What [`check_op`] found.
enum Check {
    /// The kernel ran; whether the op has gradient ops.
    Kernel { has_grad: bool },
    /// The op has no kernel of its own (a strided view): run it in a session.
    SessionOnly { has_grad: bool },
}

fn check_op(def: &'static dyn OpDef, case: &Case) -> Result<Check, String> {
    if let Some(why) = case.refused {
        return match infer(def, case) {
            Err(e) if e.contains(why) => Ok(Check::Kernel { has_grad: false }),
            Err(e) => Err(format!("refused, but not for `{why}`: {e}")),
            Ok(_) => Err(format!("the shape rule accepts a case numpy refuses ({why})")),
        };
    }
    let (infos, has_grad) = infer(def, case).map_err(|e| format!("shape rule refuses the empty case: {e}"))?;
    if !case
        .inputs
        .iter()
        .chain(infos.iter().map(|t| (0, t.clone())).collect::<Vec<_>>().iter())
        .any(|(_, t)| t.nelms() == 0)
    {
        return Err("the case has no empty input or output".into());
    }
    let outs = match catch_unwind(AssertUnwindSafe(|| run_kernel(def, case, &infos)))
        .map_err(|p| format!("kernel panicked: {}", panic_message(&p)))?
    {
        // Strided in-place views have no kernel: they run as copies the session's
        // pipeline makes, checked by the session run.
        Err(e) if e.contains("materialize-views") => return Ok(Check::SessionOnly { has_grad }),
        r => r?,
    };
    for (k, out) in outs.iter().enumerate() {
        let got = out.to_f64_vec();
        match case.expected.get(&(k as u32)) {
            Some(want) if !same(&got, want) => return Err(format!("output {k}: got {got:?}, numpy gives {want:?}")),
            Some(_) => {}
            None if !got.is_empty() => {
                return Err(format!("output {k} {} is not empty and the case states no expected value", out.info))
            }
            None => {}
        }
    }
    Ok(Check::Kernel { has_grad })
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

/// Forward and autodiff gradient of `def` on `case` through a `Session` on the
/// `cpu` device: the op is a subgraph called from the main graph on host data,
/// its gradient graph called with a seed of ones. The forward output must match
/// the kernel check's, every gradient must have its input's shape and, since
/// every path from an input to the loss goes through an empty tensor or an
/// empty sum, be zeros (empty when the input is).
fn check_session(def: &'static dyn OpDef, case: &Case, with_grad: bool) -> Result<Vec<&'static str>, String> {
    use popxl::ops;
    use popxl::{HostArray, Tensor};
    let e = |e: popxl::PopXlError| e.to_string();
    let ir = popxl::Ir::new();
    let g = ir.main_graph().enter();
    let mut streams = Vec::new();
    let mut main_ts = Vec::new();
    for (k, (_, info)) in case.inputs.iter().enumerate() {
        let s = popxl::h2d_stream(info.shape.clone(), info.dtype, &format!("in{k}")).map_err(e)?;
        main_ts.push(ops::host_load(&s, &format!("x{k}")).map_err(e)?);
        streams.push(s);
    }
    let ports: Vec<u32> = case.inputs.iter().map(|(i, _)| *i).collect();
    let attrs = case.attrs.clone();
    let graph = ir
        .create_graph(
            move |ts: Vec<Tensor>| -> popxl::Result<Vec<Tensor>> {
                let mut b = ops::OpBuilder::new("empty_case", def);
                for (key, value) in attrs.iter() {
                    b = b.attr(key, value.clone());
                }
                for (p, t) in ports.iter().zip(&ts) {
                    b = b.input(*p, t);
                }
                Ok(b.create_all()?.into_iter().take(1).collect())
            },
            main_ts.clone(),
        )
        .map_err(e)?;
    let refs: Vec<&Tensor> = main_ts.iter().collect();
    let fwd = ops::call_with_info(&graph, &refs, &[]).map_err(e)?;
    let y = fwd.parent_output(0).map_err(e)?;
    let y_stream = popxl::d2h_stream(y.shape(), y.dtype(), "y").map_err(e)?;
    ops::host_store(&y_stream, &y).map_err(e)?;
    // Integer results carry no gradient.
    let with_grad = with_grad && y.dtype().is_floating_point();
    let mut grad_streams = Vec::new();
    let mut seed_stream = None;
    if with_grad {
        let ss = popxl::h2d_stream(y.shape(), y.dtype(), "seed").map_err(e)?;
        let seed = ops::host_load(&ss, "seed").map_err(e)?;
        seed_stream = Some(ss);
        let provided = [graph.outputs().map_err(e)?[0].clone()];
        let info =
            popxl::transforms::autodiff(&graph, Some(&provided), None, &HashMap::new(), false).map_err(e)?.grad_info;
        let acts = info.inputs_dict(&fwd).map_err(e)?;
        let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
        let grads = ops::call(&info.graph(), &[&seed], &acts).map_err(e)?;
        let graph_inputs = graph.inputs().map_err(e)?;
        for (k, x) in info.expected_outputs().map_err(e)?.iter().enumerate() {
            let i = graph_inputs.iter().position(|t| t == x.fwd_tensor()).ok_or("a gradient of no input")?;
            let s = popxl::d2h_stream(grads[k].shape(), grads[k].dtype(), &format!("grad{i}")).map_err(e)?;
            ops::host_store(&s, &grads[k]).map_err(e)?;
            grad_streams.push((i, s));
        }
    }
    drop(g);
    let ran: Vec<&'static str> =
        ir.with_ir(|core| core.graphs().flat_map(|g| g.ops().map(|op| op.op_type())).collect());
    let mut session = Session::new(ir, "cpu").map_err(|e| format!("session: {e}"))?;
    let mut inputs: popxl_session::Inputs = HashMap::new();
    for (k, s) in streams.iter().enumerate() {
        inputs.insert(s.clone(), HostArray::from_host_tensor(&case.input_value(k)).map_err(e)?);
    }
    if let Some(ss) = seed_stream {
        inputs.insert(ss, HostArray::full(&popart_ir::TensorInfo::new(y.dtype(), y.shape()), 1.0));
    }
    let out = session.scope(|s| s.run(&inputs)).map_err(|e| format!("run: {e}"))?;
    let got = out[&y_stream].to_f64_vec();
    match case.expected.get(&0) {
        Some(want) if !same(&got, want) => return Err(format!("session output: got {got:?}, numpy gives {want:?}")),
        None if !got.is_empty() => return Err(format!("session output {got:?} is not empty")),
        _ => {}
    }
    for (i, s) in grad_streams {
        let gi = &out[&s];
        if gi.shape() != case.inputs[i].1.shape.as_slice() {
            return Err(format!("gradient of input {i} has shape {:?}, not {:?}", gi.shape(), case.inputs[i].1.shape));
        }
        let want = case.grads.get(&i).cloned().unwrap_or_else(|| vec![0.0; gi.nelms()]);
        if !same(&gi.to_f64_vec(), &want) {
            return Err(format!("gradient of input {i}: got {:?}, want {want:?}", gi.to_f64_vec()));
        }
    }
    Ok(ran)
}

/// Every registered op type runs on empty tensors: its case through its kernel
/// and, if it has gradient ops, forward and gradient through a session; a
/// gradient op type without a case of its own is covered when the gradient of
/// a forward case created and ran it. Else it is listed with a reason.
#[test]
fn every_registered_op_is_correct_on_empty_tensors() {
    let explicit = cases::explicit();
    let mut failures = Vec::new();
    let (mut kernels, mut grads) = (0, 0);
    let mut uncovered = Vec::new();
    let mut in_sessions: std::collections::HashSet<&'static str> = Default::default();
    for def in registered_ops() {
        let name = def.op_type();
        // Custom ops registered by other tests, and the listed exceptions.
        if name.contains('.') || cases::NOT_EMPTY.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let cases = match explicit.get(name) {
            Some(c) => c.clone(),
            None => match cases::generic().into_iter().find(|c| infer(def, c).is_ok()) {
                Some(c) => vec![c],
                None => {
                    uncovered.push(def);
                    continue;
                }
            },
        };
        for (k, case) in cases.iter().enumerate() {
            let (has_grad, kernel) = match check_op(def, case) {
                Ok(Check::Kernel { has_grad }) => (has_grad, true),
                Ok(Check::SessionOnly { has_grad }) => (has_grad, false),
                Err(e) => {
                    failures.push(format!("{name} case {k}: {e}"));
                    continue;
                }
            };
            kernels += usize::from(kernel);
            if has_grad || !kernel {
                let r = catch_unwind(AssertUnwindSafe(|| check_session(def, case, has_grad)))
                    .map_err(|p| format!("panicked: {}", panic_message(&p)))
                    .and_then(|r| r);
                match r {
                    Ok(ran) => {
                        grads += usize::from(has_grad);
                        in_sessions.extend(ran);
                    }
                    Err(e) => failures.push(format!("{name} case {k} (gradient): {e}")),
                }
            }
        }
    }
    for def in uncovered {
        if !in_sessions.contains(def.op_type()) {
            failures.push(format!(
                "{}: no empty case (add one to cases::explicit, or list it in cases::NOT_EMPTY with the reason)",
                def.op_type()
            ));
        }
    }
    for (n, _) in cases::NOT_EMPTY {
        assert!(lookup_op(n).is_ok(), "NOT_EMPTY lists {n}, which is not registered");
    }
    for n in explicit.keys() {
        assert!(lookup_op(n).is_ok(), "cases::explicit has {n}, which is not registered");
    }
    eprintln!("empty tensors: {kernels} kernel cases run, {grads} gradients through a session");
    assert!(failures.is_empty(), "{} op types fail on empty tensors:\n{}", failures.len(), failures.join("\n"));
}
