//! The `inline-calls` pass and the `fuse-masked-softmax` pattern on PopXL
//! programs: the rewritten programs compute what the original ones do (against
//! sessions with the pass off and against values computed here in f64), the
//! rewrite happens where it should, and not where it would change the meaning.

use std::collections::HashMap;

use ndarray::{Array2, ArrayD, IxDyn};
use popxl::{ops, transforms, HostArray, Ir, Tensor};
use popxl_session::{Session, SessionOptions};

fn count_ops(session: &Session, op_type: &str) -> usize {
    session.prepared_ir().graphs().flat_map(|g| g.ops()).filter(|o| o.op_type() == op_type).count()
}

fn data(shape: &[usize], seed: u64) -> ArrayD<f32> {
    let n: usize = shape.iter().product();
    let v = (0..n).map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 500.0) - 1.0).collect();
    ArrayD::from_shape_vec(IxDyn(shape), v).unwrap()
}

struct Model {
    ir: Ir,
    x: popxl::HostToDeviceStream,
    loss: popxl::DeviceToHostStream,
    ws: Vec<Tensor>,
}

/// Three layers `x + gelu(x @ W_l) * c` of one traced graph called per layer,
/// differentiated once, with SGD on every W_l.
fn layered_model() -> Model {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let _s = popxl::in_sequence(true);
    let x_s = popxl::h2d_stream([4, 6], popxl::float32, "x").unwrap();
    let loss_s = popxl::d2h_stream([], popxl::float32, "loss").unwrap();
    let mut x = ops::host_load(&x_s, "x").unwrap();
    let layer = ir
        .create_graph(
            |x: Tensor, w: Tensor| -> popxl::Result<Tensor> {
                let c = popxl::constant(0.5f32, "c")?;
                ops::add(&x, &ops::mul(&ops::gelu(&x.matmul(&w)?)?, &c)?)
            },
            (popxl::TensorSpec::new([4, 6], popxl::float32), popxl::TensorSpec::new([6, 6], popxl::float32)),
        )
        .unwrap();
    let grad = transforms::autodiff(&layer, None, None, &HashMap::new(), false).unwrap().grad_info;
    let ws: Vec<Tensor> = (0..3)
        .map(|l| popxl::variable(HostArray::from(data(&[6, 6], l + 1).mapv(|v| v * 0.3)), &format!("w{l}")).unwrap())
        .collect();
    let mut sites = Vec::new();
    for w in &ws {
        let site = ops::call_with_info(&layer, &[&x, w], &[]).unwrap();
        x = site.parent_output(0).unwrap();
        sites.push(site);
    }
    let loss = ops::mean(&ops::mul(&x, &x).unwrap(), &[0, 1], false).unwrap();
    ops::host_store(&loss_s, &loss).unwrap();
    let mut dx = ops::mul(&x, &popxl::constant(2.0f32 / 24.0, "two_over_n").unwrap()).unwrap();
    for (site, w) in sites.iter().zip(&ws).rev() {
        let acts = grad.inputs_dict(site).unwrap();
        let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
        let call = ops::call_with_info(&grad.graph(), &[&dx], &acts).unwrap();
        let g = grad.fwd_parent_ins_to_grad_parent_outs(site, &call).unwrap();
        ops::scaled_add_(w, &g[w], 1.0f32, -0.1f32).unwrap();
        dx = g[&site.parent_input(0).unwrap()].clone();
    }
    Model { ir, x: x_s, loss: loss_s, ws }
}

fn train(inline: bool, steps: usize) -> (Vec<f32>, Vec<HostArray>, Session) {
    let m = layered_model();
    let options = SessionOptions { inline_calls: Some(inline), ..SessionOptions::default() };
    let mut session = Session::with_options(m.ir.clone(), "cpu", options).unwrap();
    let mut losses = Vec::new();
    session
        .scope(|s| -> popxl_session::Result<()> {
            for _ in 0..steps {
                let inputs = HashMap::from([(m.x.clone(), HostArray::from(data(&[4, 6], 10)))]);
                let out = s.run(&inputs)?;
                losses.push(out[&m.loss].to_f64_vec()[0] as f32);
            }
            Ok(())
        })
        .unwrap();
    let ws = session.get_tensors_data(m.ws.iter()).unwrap();
    (losses, ws, session)
}

#[test]
fn inlined_calls_train_exactly_as_functions() {
    let (l_fn, w_fn, s_fn) = train(false, 4);
    let (l_in, w_in, s_in) = train(true, 4);
    // Functions: the layer and its gradient graph, called 3 times each.
    assert_eq!(count_ops(&s_fn, "Call"), 6);
    assert!(!s_fn.executable().functions.is_empty());
    // Inlined: no call and no function left.
    assert_eq!(count_ops(&s_in, "Call"), 0);
    // The constant `c` of the layer and the one of its gradient graph are each
    // copied into the main graph once, not once per call (3 calls of each).
    let main = s_in.prepared_ir().main_graph();
    assert_eq!(main.constants().filter(|t| t.name.ends_with("/c")).count(), 2);
    assert!(s_in.executable().functions.is_empty());
    // Every op computes the same elementwise arithmetic: the results agree.
    for (a, b) in l_fn.iter().zip(&l_in) {
        assert!((a - b).abs() <= 1e-6 * a.abs(), "losses {l_fn:?} vs {l_in:?}");
    }
    assert!(l_in[3] < l_in[0], "SGD lowers the loss: {l_in:?}");
    for (a, b) in w_fn.iter().zip(&w_in) {
        for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
            assert!((x - y).abs() <= 1e-6 * x.abs().max(1.0));
        }
    }
    // Inlining reuses activation memory across layers: no larger plan than with copies.
    assert!(s_in.executable().memory.arena_bytes <= s_fn.executable().memory.arena_bytes);
}

#[test]
fn calls_that_modify_their_inputs_stay_functions() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let out_s = popxl::d2h_stream([3], popxl::float32, "out").unwrap();
    let v = popxl::variable(vec![1.0f32, 2.0, 3.0], "v").unwrap();
    // A by-reference input written in place: the caller's variable changes.
    let bump = ir
        .create_graph(
            |x: Tensor| -> popxl::Result<()> {
                ops::add_(&x, &popxl::constant(1.0f32, "one")?)?;
                Ok(())
            },
            popxl::TensorByRef(v.clone()),
        )
        .unwrap();
    // A by-value input written in place inside the callee: the caller's tensor must not change.
    let local = ir
        .create_graph(
            |x: Tensor| -> popxl::Result<Tensor> {
                let x = ops::add_(&x, &popxl::constant(9.0f32, "nine")?)?;
                ops::mul(&x, &popxl::constant(10.0f32, "ten")?)
            },
            popxl::TensorSpec::new([3], popxl::float32),
        )
        .unwrap();
    let _s = popxl::in_sequence(true);
    ops::call(&bump, &[&v], &[]).unwrap();
    let scaled = ops::call(&local, &[&v], &[]).unwrap();
    let sum = ops::add(&scaled[0], &v).unwrap();
    ops::host_store(&out_s, &sum).unwrap();
    let mut session = Session::new(ir.clone(), "cpu").unwrap();
    assert_eq!(count_ops(&session, "Call"), 2, "neither call may be inlined");
    let out = session.scope(|s| s.run(&HashMap::new())).unwrap();
    // v = [2, 3, 4] after the bump; 10 (v + 9) + v, with v itself unchanged by the second call.
    assert_eq!(out[&out_s].to_f64_vec(), vec![112.0, 123.0, 134.0]);
    assert_eq!(session.get_tensor_data(&v).unwrap().to_f64_vec(), vec![2.0, 3.0, 4.0]);
}

/// `softmax(where(causal, x · scale, -1e9))` over the last axis, in f64.
fn masked_softmax_ref(x: &ArrayD<f32>, n: usize, scale: f64) -> Vec<f64> {
    let v: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let mut out = vec![0.0; v.len()];
    for (r, (row, o)) in v.chunks(n).zip(out.chunks_mut(n)).enumerate() {
        let i = r % n;
        let masked: Vec<f64> = row.iter().enumerate().map(|(j, &a)| if j <= i { a * scale } else { -1e9 }).collect();
        let m = masked.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = masked.iter().map(|a| (a - m).exp()).sum();
        for (o, a) in o.iter_mut().zip(&masked) {
            *o = (a - m).exp() / s;
        }
    }
    out
}

#[test]
fn masked_softmax_pattern_fuses_attention_scores() {
    let (b, h, n) = (2, 3, 9);
    let run = |patterns: bool| {
        let ir = Ir::new();
        let _g = ir.main_graph().enter();
        let x_s = popxl::h2d_stream([b, h, n, n], popxl::float32, "x").unwrap();
        let y_s = popxl::d2h_stream([b, h, n, n], popxl::float32, "y").unwrap();
        let x = ops::host_load(&x_s, "x").unwrap();
        let causal = popxl::constant(Array2::from_shape_fn((n, n), |(i, j)| j <= i), "causal").unwrap();
        let scaled = ops::mul(&x, &popxl::constant(0.25f32, "scale").unwrap()).unwrap();
        let masked = ops::select(&causal, &scaled, &popxl::constant(-1e9f32, "fill").unwrap()).unwrap();
        let y = ops::softmax(&masked, -1).unwrap();
        ops::host_store(&y_s, &y).unwrap();
        let options = SessionOptions { patterns, ..SessionOptions::default() };
        let mut session = Session::with_options(ir.clone(), "cpu", options).unwrap();
        let input = data(&[b, h, n, n], 3).mapv(|v| v * 8.0);
        let out = session.scope(|s| s.run(&HashMap::from([(x_s.clone(), HostArray::from(input.clone()))]))).unwrap();
        (out[&y_s].to_f64_vec(), count_ops(&session, "MaskedSoftmax"), count_ops(&session, "Where"), input)
    };
    let (fused, n_fused, n_where, input) = run(true);
    let (plain, n_plain, _, _) = run(false);
    assert_eq!((n_fused, n_where, n_plain), (1, 0, 0));
    let want = masked_softmax_ref(&input, n, 0.25);
    for ((f, p), w) in fused.iter().zip(&plain).zip(&want) {
        assert!((f - w).abs() < 1e-6 && (p - w).abs() < 1e-6, "{f} {p} {w}");
    }
}

/// `y = finish(x @ w, b)` for the stream `x` `[2, m, k]` (`data` seed 7) and the
/// constants `w` `[k, n]` (seed 5) and `b` `[n]` (seed 6), run once with the
/// patterns on or off: `y`, the session (to count its ops) and `x`.
fn linear_layer(
    patterns: bool,
    (m, k, n): (usize, usize, usize),
    finish: impl Fn(Tensor, &Tensor) -> Tensor,
) -> (Vec<f64>, Session, ArrayD<f32>) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x_s = popxl::h2d_stream([2, m, k], popxl::float32, "x").unwrap();
    let y_s = popxl::d2h_stream([2, m, n], popxl::float32, "y").unwrap();
    let x = ops::host_load(&x_s, "x").unwrap();
    let w = popxl::constant(data(&[k, n], 5), "w").unwrap();
    let b = popxl::constant(data(&[n], 6), "b").unwrap();
    let y = finish(x.matmul(&w).unwrap(), &b);
    ops::host_store(&y_s, &y).unwrap();
    let options = SessionOptions { patterns, ..SessionOptions::default() };
    let mut session = Session::with_options(ir.clone(), "cpu", options).unwrap();
    let input = data(&[2, m, k], 7);
    let out = session.scope(|s| s.run(&HashMap::from([(x_s.clone(), HostArray::from(input.clone()))]))).unwrap();
    (out[&y_s].to_f64_vec(), session, input)
}

/// Columns of [`linear_layer`]'s `w` in these tests.
const W_COLS: usize = 70;

/// `x @ w` of [`linear_layer`] in f64 at `(batch, row, column)`.
fn linear_ref(input: &ArrayD<f32>, (bi, i, j): (usize, usize, usize)) -> f64 {
    let k = input.shape()[2];
    let w = data(&[k, W_COLS], 5);
    (0..k).map(|p| f64::from(input[[bi, i, p]]) * f64::from(w[[p, j]])).sum()
}

#[test]
fn matmul_bias_pattern_adds_the_bias_in_the_gemm() {
    // Large enough for the GEMM to be split over the worker team.
    let (m, k, n) = (300, 40, W_COLS);
    // Bias on either side of the add.
    let run = |patterns| linear_layer(patterns, (m, k, n), |t, b| ops::add(b, &t).unwrap());
    let ((fused, s_fused, input), (plain, s_plain, _)) = (run(true), run(false));
    assert_eq!((count_ops(&s_fused, "MatMulAdd"), count_ops(&s_plain, "MatMulAdd")), (1, 0));
    let b = data(&[n], 6);
    for bi in 0..2 {
        for i in 0..m {
            for j in 0..n {
                let want = f64::from(b[[j]]) + linear_ref(&input, (bi, i, j));
                let at = (bi * m + i) * n + j;
                assert!((fused[at] - want).abs() < 1e-5 && (plain[at] - want).abs() < 1e-5, "{bi} {i} {j}");
            }
        }
    }
}

#[test]
fn matmul_bias_pattern_adds_the_residual_after_the_bias() {
    // A transformer layer's `x + (h @ w + b)`, residual on either side of the add,
    // large enough for the GEMM to be split over the worker team.
    let (m, k, n) = (300, 40, W_COLS);
    for residual_first in [false, true] {
        let run = |patterns| {
            linear_layer(patterns, (m, k, n), |t, b| {
                let r = popxl::constant(data(&[2, m, n], 8), "r").unwrap();
                let t = ops::add(&t, b).unwrap();
                if residual_first { ops::add(&r, &t) } else { ops::add(&t, &r) }.unwrap()
            })
        };
        let ((fused, s_fused, input), (plain, s_plain, _)) = (run(true), run(false));
        let counts = |s: &Session| (count_ops(s, "MatMulAdd"), count_ops(s, "Add"));
        assert_eq!((counts(&s_fused), counts(&s_plain)), ((1, 0), (0, 2)));
        let (b, r) = (data(&[n], 6), data(&[2, m, n], 8));
        for bi in 0..2 {
            for i in 0..m {
                for j in 0..n {
                    let want = linear_ref(&input, (bi, i, j)) + f64::from(b[[j]]) + f64::from(r[[bi, i, j]]);
                    let at = (bi * m + i) * n + j;
                    assert!((fused[at] - want).abs() < 1e-5, "{bi} {i} {j}");
                }
            }
        }
        // The same f32 additions in the same order as the two `Add`s.
        assert_eq!(fused, plain, "residual first: {residual_first}");
    }
}

/// `d loss / d x` of `loss = Σ (x + layer_norm(x) · w)²` per row block, through
/// autodiff's gradient graph called with the loss gradient; `x` of shape `shape`,
/// `[6, 32]` or `[2, 3, 32]` (the norm then runs on a reshape to `[6, 32]`, as a
/// transformer's layer norm does).
fn residual_norm_grad(patterns: bool, x0: &ArrayD<f32>, shape: &'static [usize]) -> (Vec<f64>, usize, usize) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x_s = popxl::h2d_stream(shape.to_vec(), popxl::float32, "x").unwrap();
    let dx_s = popxl::d2h_stream(shape.to_vec(), popxl::float32, "dx").unwrap();
    let x = ops::host_load(&x_s, "x").unwrap();
    let block = ir
        .create_graph(
            |x: Tensor, w: Tensor, b: Tensor| -> popxl::Result<Tensor> {
                let rows = ops::reshape(&x, &[6, 32])?;
                let normed = ops::reshape(
                    &ops::layer_norm(&rows, &w, &b, 1e-5)?,
                    &x.shape().iter().map(|&d| d as i64).collect::<Vec<_>>(),
                )?;
                ops::add(&x, &ops::mul(&normed, &w)?)
            },
            (
                popxl::TensorSpec::new(shape.to_vec(), popxl::float32),
                popxl::TensorSpec::new([32], popxl::float32),
                popxl::TensorSpec::new([32], popxl::float32),
            ),
        )
        .unwrap();
    let grad = transforms::autodiff(&block, None, None, &HashMap::new(), false).unwrap().grad_info;
    let w = popxl::constant(data(&[32], 3).mapv(|v| 1.0 + 0.5 * v), "w").unwrap();
    let b = popxl::constant(data(&[32], 4), "b").unwrap();
    let site = ops::call_with_info(&block, &[&x, &w, &b], &[]).unwrap();
    let y = site.parent_output(0).unwrap();
    let dy = ops::mul(&y, &popxl::constant(2.0f32, "two").unwrap()).unwrap();
    let acts = grad.inputs_dict(&site).unwrap();
    let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
    let call = ops::call_with_info(&grad.graph(), &[&dy], &acts).unwrap();
    let g = grad.fwd_parent_ins_to_grad_parent_outs(&site, &call).unwrap();
    ops::host_store(&dx_s, &g[&x]).unwrap();
    let options = SessionOptions { patterns, ..SessionOptions::default() };
    let mut session = Session::with_options(ir.clone(), "cpu", options).unwrap();
    let out = session.scope(|s| s.run(&HashMap::from([(x_s.clone(), HostArray::from(x0.clone()))]))).unwrap();
    let with_addend = session
        .prepared_ir()
        .graphs()
        .flat_map(|g| g.ops())
        .filter(|o| o.op_type() == "GroupNormGrad" && o.input(5).is_some())
        .count();
    (out[&dx_s].to_f64_vec(), with_addend, count_ops(&session, "Sum"))
}

#[test]
fn residual_grad_pattern_adds_the_residual_in_the_norm_gradient() {
    for shape in [&[6, 32][..], &[2, 3, 32]] {
        residual_grad_case(shape);
    }
}

fn residual_grad_case(shape: &'static [usize]) {
    let x0 = data(shape, 9).mapv(|v| 2.0 * v);
    let (fused, n_fused, sums_fused) = residual_norm_grad(true, &x0, shape);
    let (plain, n_plain, sums_plain) = residual_norm_grad(false, &x0, shape);
    // (The gradient graph's own copy and its inlined one.)
    assert!(n_fused >= 1 && n_plain == 0, "{n_fused} {n_plain}");
    assert!(sums_fused < sums_plain, "{sums_fused} Sums fused against {sums_plain}");
    // One addition of the same two numbers.
    assert_eq!(fused, plain);
    // Against central differences of the loss in f64.
    let (w, b) = (data(&[32], 3).mapv(|v| 1.0 + 0.5 * v), data(&[32], 4));
    let loss = |x: &[f64]| -> f64 {
        x.chunks(32)
            .map(|row| {
                let m = row.iter().sum::<f64>() / 32.0;
                let var = row.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / 32.0;
                let is = 1.0 / (var + 1e-5).sqrt();
                row.iter()
                    .enumerate()
                    .map(|(j, &v)| {
                        let (wj, bj) = (f64::from(w[[j]]), f64::from(b[[j]]));
                        let y = v + ((v - m) * is * wj + bj) * wj;
                        y * y
                    })
                    .sum::<f64>()
            })
            .sum()
    };
    let x: Vec<f64> = x0.iter().map(|&v| f64::from(v)).collect();
    for i in (0..x.len()).step_by(13) {
        let h = 1e-5;
        let (mut up, mut down) = (x.clone(), x.clone());
        up[i] += h;
        down[i] -= h;
        let want = (loss(&up) - loss(&down)) / (2.0 * h);
        assert!((fused[i] - want).abs() <= 1e-3 * want.abs().max(1.0), "dx[{i}] {} against {want}", fused[i]);
    }
}
