//! The `fuse_weight_update` pattern on a PopXL training step: a Linear layer's
//! gradient graph from `autodiff`, called with a provided output gradient, and an
//! SGD-like `scaled_add_` of each parameter. Checked against the same update
//! computed here in f64, against a session with patterns off, and in the cases
//! where the pattern must not apply (the weight read between the gradient call
//! and the update; a gradient graph with two call sites).

use std::collections::HashMap;

use ndarray::{Array2, ArrayD, IxDyn};
use popxl::{ops, transforms, HostArray, Ir, Tensor};
use popxl_session::{Session, SessionOptions};
use tests::Linear;

const M: usize = 4;
const K: usize = 3;
const N: usize = 2;
const LR: f64 = 0.1;

/// Where an extra read of W goes, if any.
#[derive(Clone, Copy, PartialEq)]
enum Reader {
    None,
    /// Between the gradient call and W's update: the pattern must not apply.
    BetweenCallAndUpdate,
    /// After the update: sees the updated value.
    AfterUpdate,
}

struct Step {
    ir: Ir,
    x: popxl::HostToDeviceStream,
    dy: popxl::HostToDeviceStream,
    w_seen: popxl::DeviceToHostStream,
    w: Tensor,
    b: Tensor,
}

fn w0() -> Vec<f32> {
    (0..K * N).map(|i| 0.1 * i as f32 - 0.2).collect()
}

/// One step: y = x @ W + b; (dW, db) from the gradient graph given dy; W = a·W - lr·dW.
fn build(a: f64, reader: Reader, grad_calls: usize, sequenced: bool) -> Step {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let _s = popxl::in_sequence(sequenced);
    let x_s = popxl::h2d_stream([M, K], popxl::float32, "x").unwrap();
    let dy_s = popxl::h2d_stream([M, N], popxl::float32, "dy").unwrap();
    let w_seen = popxl::d2h_stream([K, N], popxl::float32, "w_seen").unwrap();
    let x = ops::host_load(&x_s, "x").unwrap();
    let dy = ops::host_load(&dy_s, "dy").unwrap();
    let w = popxl::variable(Array2::from_shape_vec((K, N), w0()).unwrap(), "W").unwrap();
    let b = popxl::variable(vec![0.5f32, -0.5], "b").unwrap();
    let mut linear = Linear::new(N).with_inputs_first();
    let graph = ir.create_graph(&mut linear, &x).unwrap();
    let fwd = ops::call_with_info(&graph, &[&x], &[(linear.w(), &w), (linear.b(), &b)]).unwrap();
    let bwd = transforms::autodiff(&graph, None, None, &HashMap::new(), false).unwrap().grad_info;
    let acts = bwd.inputs_dict(&fwd).unwrap();
    let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
    let call = ops::call_with_info(&bwd.graph(), &[&dy], &acts).unwrap();
    let grads = bwd.fwd_parent_ins_to_grad_parent_outs(&fwd, &call).unwrap();
    // With a second call site of the same gradient graph, b's gradient comes from it
    // (so both calls stay live after pruning).
    let b_grads = if grad_calls == 2 {
        let second = ops::call_with_info(&bwd.graph(), &[&dy], &acts).unwrap();
        bwd.fwd_parent_ins_to_grad_parent_outs(&fwd, &second).unwrap()
    } else {
        grads.clone()
    };
    if reader == Reader::BetweenCallAndUpdate {
        ops::host_store(&w_seen, &(&w + 0.0)).unwrap();
    }
    ops::scaled_add_(&w, &grads[&w], a as f32, -LR as f32).unwrap();
    ops::scaled_add_(&b, &b_grads[&b], 1.0f32, -LR as f32).unwrap();
    if reader == Reader::AfterUpdate {
        ops::host_store(&w_seen, &(&w + 0.0)).unwrap();
    }
    Step { ir: ir.clone(), x: x_s, dy: dy_s, w_seen, w, b }
}

fn batch(step: usize, rows: usize, cols: usize, scale: f32) -> HostArray {
    let v: Vec<f32> = (0..rows * cols).map(|i| scale * (((i * 7 + step * 3) % 11) as f32 - 5.0) / 5.0).collect();
    ArrayD::from_shape_vec(IxDyn(&[rows, cols]), v).unwrap().into()
}

fn f32s(a: &HostArray) -> Vec<f64> {
    a.as_f32().expect("float32").iter().map(|&v| v as f64).collect()
}

struct Trace {
    w: Vec<f64>,
    b: Vec<f64>,
    seen: Vec<Vec<f64>>,
    fused: bool,
}

fn train(step: &Step, patterns: bool, steps: usize, read: bool) -> Trace {
    // Some steps read W without ordering the read against its update: the
    // scheduler's order defines what they see, so the ambiguity check is off.
    let options = SessionOptions { patterns, check_inplace_ambiguity: false, ..SessionOptions::default() };
    let mut session = Session::with_options(step.ir.clone(), "cpu", options).unwrap();
    let fused = session.executable().dump().contains("ScaledAddMatMulRhsGradInplace");
    let mut seen = Vec::new();
    session
        .scope(|s| -> popxl_session::Result<()> {
            for i in 0..steps {
                let inputs = [(step.x.clone(), batch(i, M, K, 1.0)), (step.dy.clone(), batch(i + 1, M, N, 0.5))];
                let out = s.run(&inputs.into_iter().collect())?;
                if read {
                    seen.push(f32s(&out[&step.w_seen]));
                }
            }
            Ok(())
        })
        .unwrap();
    let w = f32s(&session.get_tensor_data(&step.w).unwrap());
    let b = f32s(&session.get_tensor_data(&step.b).unwrap());
    Trace { w, b, seen, fused }
}

/// The same training in f64 on the host: W ← a·W − lr·xᵀ dy, b ← b − lr·Σ dy; the W
/// value each step's reader sees (before or after the update).
fn reference(a: f64, reader: Reader, steps: usize) -> (Vec<f64>, Vec<f64>, Vec<Vec<f64>>) {
    let mut w: Vec<f64> = w0().iter().map(|&v| v as f64).collect();
    let mut b = vec![0.5, -0.5];
    let mut seen = Vec::new();
    for i in 0..steps {
        let (x, dy) = (f32s(&batch(i, M, K, 1.0)), f32s(&batch(i + 1, M, N, 0.5)));
        if reader == Reader::BetweenCallAndUpdate {
            seen.push(w.clone());
        }
        for p in 0..K {
            for j in 0..N {
                let dw: f64 = (0..M).map(|r| x[r * K + p] * dy[r * N + j]).sum();
                w[p * N + j] = a * w[p * N + j] - LR * dw;
            }
        }
        for j in 0..N {
            b[j] -= LR * (0..M).map(|r| dy[r * N + j]).sum::<f64>();
        }
        if reader == Reader::AfterUpdate {
            seen.push(w.clone());
        }
    }
    (w, b, seen)
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    tests::assert_close(got, want, 1e-5, what);
}

fn check(a: f64, reader: Reader, grad_calls: usize, expect_fused: bool) {
    let steps = 3;
    let step = build(a, reader, grad_calls, true);
    let (w, b, seen) = reference(a, reader, steps);
    for patterns in [true, false] {
        let t = train(&step, patterns, steps, reader != Reader::None);
        assert_eq!(t.fused, patterns && expect_fused, "fused with patterns = {patterns}");
        assert_close(&t.w, &w, "W");
        assert_close(&t.b, &b, "b");
        assert_eq!(t.seen.len(), seen.len());
        for (s, r) in t.seen.iter().zip(&seen) {
            assert_close(s, r, "W as read by the extra op");
        }
    }
}

#[test]
fn sgd_update_is_fused_into_the_weight_gradient() {
    check(1.0, Reader::None, 1, true);
}

#[test]
fn scaled_update_with_decay_is_fused() {
    check(0.9, Reader::None, 1, true);
}

#[test]
fn a_later_reader_sees_the_updated_weight() {
    check(1.0, Reader::AfterUpdate, 1, true);
}

#[test]
fn a_reader_between_call_and_update_blocks_the_fusion() {
    check(1.0, Reader::BetweenCallAndUpdate, 1, false);
}

#[test]
fn a_gradient_graph_with_two_call_sites_is_left_alone() {
    check(1.0, Reader::None, 2, false);
}

/// The prepare report names the folded update, and the prepared IR verifies.
#[test]
fn prepare_reports_the_fused_update() {
    let step = build(1.0, Reader::None, 1, true);
    let mut core = step.ir.with_ir(|core| core.clone());
    let report = popart_transforms::prepare::prepare(&mut core).unwrap();
    assert_eq!(report.fused_weight_updates.len(), 1, "{:?}", report.fused_weight_updates);
    assert!(report.fused_weight_updates[0].starts_with("main/"));
    core.verify().unwrap();
}

/// What reviewers see: the lowered step with the update inside the gradient
/// function (no gradient buffer for W, no separate update kernel in main).
#[test]
fn lowered_step_snapshot() {
    let step = build(1.0, Reader::None, 1, true);
    let session = Session::new(step.ir.clone(), "cpu").unwrap();
    insta::assert_snapshot!(session.executable().dump());
}

/// Without `in_sequence` the scheduler places the extra reader; whatever it picks,
/// the fused program must compute what the unfused one computes, and W's final
/// value is the reference's.
#[test]
fn unsequenced_readers_see_what_they_saw_without_the_pattern() {
    for reader in [Reader::BetweenCallAndUpdate, Reader::AfterUpdate] {
        let step = build(1.0, reader, 1, false);
        let (w, b, _) = reference(1.0, reader, 3);
        let on = train(&step, true, 3, true);
        let off = train(&step, false, 3, true);
        assert!(!off.fused);
        assert_close(&on.w, &w, "W");
        assert_close(&on.b, &b, "b");
        assert_eq!(on.seen.len(), off.seen.len());
        for (x, y) in on.seen.iter().zip(&off.seen) {
            assert_close(x, y, "W as read by the extra op, with and without the pattern");
        }
    }
}
