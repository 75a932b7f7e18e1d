//! `group_norm`, `layer_norm` and `batch_norm_inference` against PyTorch
//! (`tests/fixtures/ops_norm_gen.py` writes `ops_norm.npz`): outputs, and the
//! gradients autodiff produces (`GroupNormGrad`) for a given output gradient.
//! The last cases run in float32 on shapes split over threads.

use std::fs::File;

#[path = "support/forward_backward.rs"]
mod forward_backward;
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
