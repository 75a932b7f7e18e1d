//! `ops::attention` (the `Attention` extension op) against an f64 reference
//! written here from the definition (`softmax(q kᵀ / sqrt(dh)) v` per head,
//! causal or not): the output, and the gradient autodiff builds
//! (`AttentionGrad`) against central differences of that reference. The same
//! values again against the attention a PopXL program writes from `matmul`,
//! `where` and `softmax`, forward and backward through the session.

use crate::support::forward_backward::run_with_grads;
use ndarray::{Array2, ArrayD, IxDyn};
use popxl::ops;
use popxl::{HostArray, Tensor};

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// The reference forward, f64: `qkv` [b, t, 3d] → y [b, t, d].
fn reference(qkv: &[f64], b: usize, t: usize, d: usize, heads: usize, causal: bool) -> Vec<f64> {
    let dh = d / heads;
    let scale = 1.0 / (dh as f64).sqrt();
    let at = |bi: usize, i: usize, c: usize| qkv[(bi * t + i) * 3 * d + c];
    let mut y = vec![0.0; b * t * d];
    for bi in 0..b {
        for h in 0..heads {
            for i in 0..t {
                let keys = if causal { i + 1 } else { t };
                let s: Vec<f64> = (0..keys)
                    .map(|j| (0..dh).map(|c| at(bi, i, h * dh + c) * at(bi, j, d + h * dh + c)).sum::<f64>() * scale)
                    .collect();
                let m = s.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..dh {
                    y[(bi * t + i) * d + h * dh + c] =
                        (0..keys).map(|j| e[j] / z * at(bi, j, 2 * d + h * dh + c)).sum();
                }
            }
        }
    }
    y
}

fn f32_array(v: &[f64], shape: &[usize]) -> HostArray {
    HostArray::from(ArrayD::from_shape_vec(IxDyn(shape), v.iter().map(|&x| x as f32).collect()).unwrap())
}

/// The attention a PopXL program writes: heads split and transposed, masked scores, softmax.
fn composite(qkv: &Tensor, t: usize, d: usize, heads: usize, causal: bool) -> popxl::Result<Tensor> {
    let (ti, di, hi) = (t as i64, d as i64, heads as i64);
    let dh = di / hi;
    let b = qkv.shape()[0] as i64;
    let parts = ops::split(qkv, vec![d; 3], -1)?;
    let split = |u: &Tensor| ops::transpose(&u.reshape(&[b, ti, hi, dh])?, &[0, 2, 1, 3]);
    let (q, k, v) = (split(&parts[0])?, split(&parts[1])?, split(&parts[2])?);
    let scale = popxl::constant(1.0 / (dh as f32).sqrt(), "scale")?;
    let s = ops::mul(&q.matmul(&ops::transpose(&k, &[0, 1, 3, 2])?)?, &scale)?;
    let s = if causal {
        let mask = popxl::constant(Array2::from_shape_fn((t, t), |(i, j)| j <= i), "mask")?;
        ops::select(&mask, &s, &popxl::constant(-1e9f32, "masked")?)?
    } else {
        s
    };
    let y = ops::softmax(&s, -1)?.matmul(&v)?;
    ops::transpose(&y, &[0, 2, 1, 3])?.reshape(&[b, ti, di])
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(1f64, |m, v| m.max(v.abs()));
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * scale, "{what}[{j}]: got {g}, want {w}");
    }
}

/// (batch, context, width, heads): one row block, and a context of three
/// row blocks, the last one partial.
const CASES: [(usize, usize, usize, usize); 3] = [(2, 7, 8, 2), (1, 70, 12, 3), (2, 33, 16, 1)];

#[test]
fn attention_and_its_gradient_match_the_definition() {
    for (case, &(b, t, d, heads)) in CASES.iter().enumerate() {
        for causal in [true, false] {
            let what = format!("case {case} causal={causal}");
            let qkv = values(b * t * 3 * d, 11 + case as u64);
            let gy = values(b * t * d, 97 + case as u64);
            let f = |x: &[Tensor]| ops::attention(&x[0], heads, causal);
            let got = run_with_grads(&f, vec![f32_array(&qkv, &[b, t, 3 * d])], Some(f32_array(&gy, &[b, t, d])));
            assert_close(&got[0], &reference(&qkv, b, t, d, heads, causal), 1e-5, &format!("{what} y"));
            // dL/dqkv of L = Σ y · gy by central differences of the f64 reference.
            let loss =
                |x: &[f64]| reference(x, b, t, d, heads, causal).iter().zip(&gy).map(|(y, g)| y * g).sum::<f64>();
            let step = if qkv.len() > 2000 { 7 } else { 1 };
            let (mut fd, mut kernel) = (Vec::new(), Vec::new());
            for i in (0..qkv.len()).step_by(step) {
                let (mut up, mut down) = (qkv.clone(), qkv.clone());
                up[i] += 1e-5;
                down[i] -= 1e-5;
                fd.push((loss(&up) - loss(&down)) / 2e-5);
                kernel.push(got[1][i]);
            }
            assert_close(&kernel, &fd, 2e-5, &format!("{what} dqkv"));
        }
    }
}

#[test]
fn attention_equals_the_composite_a_popxl_program_writes() {
    let (b, t, d, heads) = (2, 40, 16, 4);
    for causal in [true, false] {
        let qkv = f32_array(&values(b * t * 3 * d, 5), &[b, t, 3 * d]);
        let gy = f32_array(&values(b * t * d, 6), &[b, t, d]);
        let fused = run_with_grads(&|x| ops::attention(&x[0], heads, causal), vec![qkv.clone()], Some(gy.clone()));
        let unfused = run_with_grads(&|x| composite(&x[0], t, d, heads, causal), vec![qkv], Some(gy));
        assert_close(&fused[0], &unfused[0], 1e-5, "y");
        assert_close(&fused[1], &unfused[1], 1e-5, "dqkv");
    }
}

#[test]
fn attention_rejects_what_it_cannot_run() {
    let ir = popxl::Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::constant(ndarray::Array3::<f32>::zeros((1, 4, 6)), "x").unwrap();
    let half = ops::cast(&x, popxl::DataType::Float16).unwrap();
    let err = ops::attention(&half, 1, true).unwrap_err().to_string();
    assert!(err.contains("float32"), "{err}");
    let x = popxl::constant(ndarray::Array3::<f32>::zeros((1, 4, 12)), "x").unwrap();
    let err = ops::attention(&x, 3, true).unwrap_err().to_string();
    assert!(err.contains("heads (3)"), "{err}");
    let x = popxl::constant(ndarray::Array3::<f32>::zeros((1, 4, 10)), "x").unwrap();
    let err = ops::attention(&x, 1, true).unwrap_err().to_string();
    assert!(err.contains("multiple of 3"), "{err}");
    let x = popxl::constant(ndarray::Array2::<f32>::zeros((4, 12)), "x").unwrap();
    let err = ops::attention(&x, 1, true).unwrap_err().to_string();
    assert!(err.contains("[B, T, 3·D]"), "{err}");
    assert!(ops::attention(&x, 0, true).is_err());
}
