//! `group_norm`, `layer_norm` and `batch_norm_inference` against PyTorch
//! (`tests/fixtures/ops_norm_gen.py` writes `ops_norm.npz`): outputs, and the
//! gradients autodiff produces (`GroupNormGrad`) for a given output gradient.
//! The last cases run in float32 on shapes split over threads. Training-mode
//! `batch_norm` likewise against `batch_norm(training=True)`
//! (`tests/fixtures/ops_batch_norm_gen.py` writes `ops_batch_norm.npz`): the
//! output, the running statistics, `BatchNormGrad`'s gradients, and two
//! training steps that write the running statistics back into variables.

use std::fs::File;

use crate::support::forward_backward;
use forward_backward::{read_npz as read, run_with_grads};

use ndarray::ArrayD;
use ndarray_npy::NpzReader;
use popxl::ops;
use popxl::{DataType, Ir};

const GROUPS: [i64; 7] = [1, 2, 4, 1, 3, 1, 8];
const FIRST_F32: usize = 5;

fn fixture() -> NpzReader<File> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ops_norm.npz");
    NpzReader::new(File::open(path).expect("fixture ops_norm.npz")).expect("npz")
}

#[test]
fn group_norm_and_its_gradients_match_pytorch() {
    let mut npz = fixture();
    for (i, groups) in GROUPS.into_iter().enumerate() {
        let (dt, tol) = if i >= FIRST_F32 { (DataType::Float32, 2e-4) } else { (DataType::Float64, 1e-10) };
        let [x, w, b, gy] = ["x", "w", "b", "gy"].map(|k| read(&mut npz, &format!("g{i}_{k}"), dt));
        let f = |t: &[popxl::Tensor]| {
            if groups == 1 {
                ops::layer_norm(&t[0], &t[1], &t[2], 1e-5)
            } else {
                ops::group_norm(&t[0], &t[1], &t[2], groups, 1e-5)
            }
        };
        let got = run_with_grads(&f, vec![x, w, b], Some(gy));
        for (k, name) in ["y", "dx", "dw", "db"].iter().enumerate() {
            let want = read(&mut npz, &format!("g{i}_{name}"), dt).to_f64_vec();
            let scale = want.iter().fold(1f64, |m, v| m.max(v.abs()));
            for (j, (g, w)) in got[k].iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= tol * scale, "case {i} {name}[{j}]: got {g}, torch {w}");
            }
        }
    }
}

#[test]
fn batch_norm_inference_matches_pytorch() {
    let mut npz = fixture();
    let ins = ["x", "scale", "bias", "mean", "var"].map(|k| read(&mut npz, &format!("bn_{k}"), DataType::Float64));
    let f = |t: &[popxl::Tensor]| ops::batch_norm_inference(&t[0], &t[1], &t[2], &t[3], &t[4], 1e-5, 0.9);
    let got = run_with_grads(&f, ins.to_vec(), None);
    let want = read(&mut npz, "bn_y", DataType::Float64).to_f64_vec();
    for (g, w) in got[0].iter().zip(&want) {
        assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "got {g}, torch {w}");
    }
}

fn bn_fixture() -> NpzReader<File> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ops_batch_norm.npz");
    NpzReader::new(File::open(path).expect("fixture ops_batch_norm.npz")).expect("npz")
}

/// Cases of `ops_batch_norm.npz`; float32 from `BN_FIRST_F32` on.
const BN_CASES: usize = 7;
const BN_FIRST_F32: usize = 4;

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(1f64, |m, v| m.max(v.abs()));
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * scale, "{what}[{j}]: got {g}, torch {w}");
    }
}

#[test]
fn batch_norm_training_and_its_gradients_match_pytorch() {
    let mut npz = bn_fixture();
    for i in 0..BN_CASES {
        let (dt, tol) = if i >= BN_FIRST_F32 { (DataType::Float32, 2e-4) } else { (DataType::Float64, 1e-10) };
        let key = |k: &str| format!("bn{i}_{k}");
        let [x, scale, bias, mean, var, gy] =
            ["x", "scale", "bias", "mean", "var", "gy"].map(|k| read(&mut npz, &key(k), dt));
        let cfg = read(&mut npz, &key("cfg"), DataType::Float64).to_f64_vec();
        let opts = ops::BatchNormOptions { epsilon: 1e-5, momentum: cfg[0], unbiased_variance: cfg[1] != 0.0 };
        // The running statistics are constants of the subgraph: only x, scale
        // and bias are differentiated. `which` picks the output returned.
        let f = |which: usize| {
            let (mean, var) = (mean.clone(), var.clone());
            move |t: &[popxl::Tensor]| {
                let m = popxl::constant_as(&mean, dt, "running_mean")?;
                let v = popxl::constant_as(&var, dt, "running_var")?;
                let out = ops::batch_norm_with(&t[0], &t[1], &t[2], &m, &v, opts)?;
                Ok([out.y, out.mean, out.var][which].clone())
            }
        };
        let ins = vec![x, scale, bias];
        let got = run_with_grads(&f(0), ins.clone(), Some(gy));
        let stats = [1, 2].map(|w| run_with_grads(&f(w), ins.clone(), None).remove(0));
        let got = [&got[0], &stats[0], &stats[1], &got[1], &got[2], &got[3]];
        for (g, name) in got.into_iter().zip(["y", "new_mean", "new_var", "dx", "dscale", "dbias"]) {
            let want = read(&mut npz, &key(name), dt).to_f64_vec();
            assert_close(g, &want, tol, &format!("case {i} {name}"));
        }
    }
}

/// The channel sums run in chunks fixed by the shape alone: one thread and the
/// whole team give bit-identical outputs and gradients (cases split over threads).
#[test]
fn batch_norm_results_do_not_depend_on_the_thread_count() {
    let mut npz = bn_fixture();
    for i in [5, 6] {
        let dt = DataType::Float32;
        let [x, scale, bias, mean, var, gy] =
            ["x", "scale", "bias", "mean", "var", "gy"].map(|k| read(&mut npz, &format!("bn{i}_{k}"), dt));
        let f = |t: &[popxl::Tensor]| {
            let m = popxl::constant_as(&mean, dt, "running_mean")?;
            let v = popxl::constant_as(&var, dt, "running_var")?;
            Ok(ops::batch_norm(&t[0], &t[1], &t[2], &m, &v, 1e-5, 0.9)?.y)
        };
        let ins = vec![x, scale, bias];
        let one = popxl_session::cpu::team::with_max_threads(1, || run_with_grads(&f, ins.clone(), Some(gy.clone())));
        let many = run_with_grads(&f, ins, Some(gy));
        assert_eq!(one, many, "case {i}");
    }
}

/// Two training steps on streamed batches, each writing the new running
/// statistics back into their variables (`copy_var_update_`), as PopART does
/// for a `BatchNormalization` whose statistics are variables.
#[test]
fn batch_norm_running_statistics_over_two_training_steps() {
    let mut npz = bn_fixture();
    let dt = DataType::Float64;
    let [x0, x1, scale, bias, mean, var] =
        ["x0", "x1", "scale", "bias", "mean", "var"].map(|k| read(&mut npz, &format!("loop_{k}"), dt));
    let ir = Ir::new();
    let (stream, rm, rv) = {
        let _g = ir.main_graph().enter();
        let _s = popxl::in_sequence(true);
        let stream = popxl::h2d_stream(x0.shape(), dt, "x").unwrap();
        let x = ops::host_load(&stream, "x").unwrap();
        let (scale, bias) =
            (popxl::variable_as(&scale, dt, "scale").unwrap(), popxl::variable_as(&bias, dt, "bias").unwrap());
        let rm = popxl::variable_as(&mean, dt, "running_mean").unwrap();
        let rv = popxl::variable_as(&var, dt, "running_var").unwrap();
        // PyTorch's momentum 0.1 is ONNX's 0.9; PyTorch's running variance is unbiased.
        let opts = ops::BatchNormOptions { momentum: 0.9, unbiased_variance: true, ..Default::default() };
        let out = ops::batch_norm_with(&x, &scale, &bias, &rm, &rv, opts).unwrap();
        ops::copy_var_update_(&rm, &out.mean).unwrap();
        ops::copy_var_update_(&rv, &out.var).unwrap();
        (stream, rm, rv)
    };
    let mut session = popxl_session::Session::new(ir, "cpu").unwrap();
    let got = session
        .scope(|s| {
            for x in [&x0, &x1] {
                let mut feeds = popxl_session::Inputs::new();
                feeds.insert(stream.clone(), x.clone());
                s.run(&feeds)?;
            }
            Ok::<_, popxl_session::SessionError>([&rm, &rv].map(|t| s.get_tensor_data(t).map(|a| a.to_f64_vec())))
        })
        .unwrap();
    for (g, name) in got.into_iter().zip(["new_mean", "new_var"]) {
        let want = read(&mut npz, &format!("loop_{name}"), dt).to_f64_vec();
        assert_close(&g.unwrap(), &want, 1e-12, name);
    }
}

#[test]
fn bad_batch_norms_are_typed_errors() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let t = |s: &[usize]| popxl::variable(ArrayD::<f32>::zeros(s.to_vec()), "t").unwrap();
    let (x, p) = (t(&[2, 6, 3]), t(&[6]));
    let err = |r: popxl::Result<ops::BatchNormOutputs>| match r {
        Err(popxl::PopXlError::Ir(popart_ir::IrError::Inference { op_type, message, .. })) => {
            assert_eq!(op_type, "BatchNorm");
            message
        }
        Err(e) => panic!("not an inference error: {e}"),
        Ok(_) => panic!("accepted"),
    };
    // Channel count mismatch, per parameter.
    assert!(err(ops::batch_norm(&x, &t(&[5]), &p, &p, &p, 1e-5, 0.9)).contains("scale"));
    assert!(err(ops::batch_norm(&x, &p, &p, &p, &t(&[6, 1]), 1e-5, 0.9)).contains("running var"));
    // Rank below 2.
    assert!(err(ops::batch_norm(&p, &p, &p, &p, &p, 1e-5, 0.9)).contains("[N, C"));
    // Not a float input; a parameter of another dtype.
    let xi = popxl::variable(ArrayD::<i32>::zeros(vec![2, 6]), "xi").unwrap();
    assert!(err(ops::batch_norm(&xi, &p, &p, &p, &p, 1e-5, 0.9)).contains("floating point"));
    let p64 = popxl::variable_as(ArrayD::<f64>::zeros(vec![6]), DataType::Float64, "p64").unwrap();
    assert!(err(ops::batch_norm(&x, &p, &p64, &p, &p, 1e-5, 0.9)).contains("bias"));
    // Attributes; one value per channel cannot give an unbiased variance.
    assert!(err(ops::batch_norm(&x, &p, &p, &p, &p, 1e-5, 1.5)).contains("momentum"));
    assert!(err(ops::batch_norm(&x, &p, &p, &p, &p, -1.0, 0.9)).contains("epsilon"));
    let opts = ops::BatchNormOptions { unbiased_variance: true, ..Default::default() };
    assert!(err(ops::batch_norm_with(&t(&[1, 6]), &p, &p, &p, &p, opts)).contains("at least 2"));
    assert!(ops::batch_norm(&t(&[1, 6]), &p, &p, &p, &p, 1e-5, 0.9).is_ok());
}

#[test]
fn bad_norms_are_typed_errors() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let t = |s: &[usize]| popxl::variable(ArrayD::<f32>::zeros(s.to_vec()), "t").unwrap();
    let (x, w) = (t(&[2, 6, 3]), t(&[6]));
    let msg = |r: popxl::Result<popxl::Tensor>| r.unwrap_err().to_string();
    assert!(msg(ops::group_norm(&x, &w, &w, 4, 1e-5)).contains("num_groups"));
    assert!(msg(ops::layer_norm(&x, &t(&[5]), &w, 1e-5)).contains("weight"));
    assert!(msg(ops::layer_norm(&t(&[6]), &w, &w, 1e-5)).contains("[N, C"));
    assert!(msg(ops::layer_norm(&x, &w, &w, -1.0)).contains("epsilon"));
    assert!(msg(ops::batch_norm_inference(&x, &w, &w, &w, &t(&[3]), 1e-5, 0.9)).contains("var"));
}

/// `nll_loss(log_prob=True)` on log-probabilities equals `nll_loss` on the
/// probabilities (values from numpy: -mean(log p[label])).
#[test]
fn nll_loss_of_log_probabilities() {
    let ir = Ir::new();
    let (loss, loss_lp) = {
        let _g = ir.main_graph().enter();
        let p = ndarray::arr2(&[[0.2f64, 0.5, 0.3], [0.1, 0.1, 0.8]]);
        let probs = popxl::constant_as(p.clone(), DataType::Float64, "p").unwrap();
        let logp = popxl::constant_as(p.mapv(f64::ln), DataType::Float64, "logp").unwrap();
        let labels = popxl::constant(ndarray::arr1(&[1i32, 2]), "l").unwrap();
        let lp = ops::NllLossOptions { log_prob: true, ..Default::default() };
        (ops::nll_loss(&probs, &labels).unwrap(), ops::nll_loss_with(&logp, &labels, lp).unwrap())
    };
    let streams: Vec<_> = [&loss, &loss_lp]
        .iter()
        .map(|t| {
            let _g = ir.main_graph().enter();
            let s = popxl::d2h_stream(t.shape(), t.dtype(), "out").unwrap();
            ops::host_store(&s, t).unwrap();
            s
        })
        .collect();
    let mut session = popxl_session::Session::new(ir, "cpu").unwrap();
    let out = session.scope(|s| s.run(&popxl_session::Inputs::new())).unwrap();
    // -(ln 0.5 + ln 0.8) / 2
    let want = 0.458_145_365_937_077_5;
    for s in &streams {
        assert!((out[s].to_f64_vec()[0] - want).abs() < 1e-15);
    }
}
