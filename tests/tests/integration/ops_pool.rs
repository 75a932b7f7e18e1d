//! `max_pool` and `average_pool` against numpy (`tests/fixtures/ops_pool_gen.py`
//! writes `ops_pool.npz`): outputs and the gradients autodiff produces
//! (`MaxPoolGrad`, `AveragePoolGrad`) for a given output gradient, covering
//! stride, asymmetric padding, dilation, ceil_mode and 1-d; the last case is
//! the CNN example's first pool, large enough to be split over threads.
//! 3-d pools against PyTorch's `max_pool3d` and `avg_pool3d`
//! (`tests/fixtures/ops_conv3d_gen.py` writes `ops_conv3d.npz`).

use std::fs::File;

use crate::support::forward_backward;
use forward_backward::run_with_grads;

use ndarray::ArrayD;
use ndarray_npy::NpzReader;
use popxl::ops::{self, PoolOptions, StorageOrder};
use popxl::{DataType, HostArray, Ir};

/// (kernel, strides, pads, dilations, ceil_mode) of case `p{i}`, as in the generator.
fn cases() -> Vec<(Vec<i64>, PoolOptions)> {
    let o = |k: &[i64], s: &[i64], p: &[i64], d: &[i64], c: bool| {
        (k.to_vec(), PoolOptions::default().stride(s).padding(p).dilation(d).ceil_mode(c))
    };
    vec![
        o(&[2, 2], &[2, 2], &[0, 0, 0, 0], &[1, 1], false),
        o(&[3, 3], &[2, 1], &[1, 1, 1, 0], &[1, 1], false),
        o(&[3, 2], &[2, 2], &[0, 0, 0, 0], &[1, 1], true),
        o(&[2, 2], &[1, 1], &[1, 0, 0, 1], &[2, 3], false),
        o(&[3], &[2], &[1, 1], &[1], true),
        o(&[3, 3], &[1, 1], &[0, 0, 0, 0], &[1, 1], false),
        o(&[2, 2], &[2, 2], &[0, 0, 0, 0], &[1, 1], false),
    ]
}

fn read(npz: &mut NpzReader<File>, key: &str, dtype: DataType) -> HostArray {
    let a: ArrayD<f64> = npz.by_name(key).expect(key);
    HostArray::from(a).cast(dtype)
}

#[test]
fn pools_and_their_gradients_match_numpy() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ops_pool.npz");
    let mut npz = NpzReader::new(File::open(path).expect("fixture ops_pool.npz")).expect("npz");
    for (i, (k, o)) in cases().into_iter().enumerate() {
        for dt in [DataType::Float64, DataType::Float32] {
            let tol = if dt == DataType::Float64 { 1e-12 } else { 1e-6 };
            let [x, gy] = ["x", "gy"].map(|n| read(&mut npz, &format!("p{i}_{n}"), dt));
            let k2 = k.clone();
            let o2 = o.clone();
            let max = run_with_grads(
                &|t| ops::max_pool_with(&t[0], &k2, &o2, StorageOrder::Row),
                vec![x.clone()],
                Some(gy.clone()),
            );
            let avg = run_with_grads(&|t| ops::average_pool_with(&t[0], &k, &o), vec![x], Some(gy));
            for (got, name) in [(&max[0], "max"), (&max[1], "dmax"), (&avg[0], "avg"), (&avg[1], "davg")] {
                let want = read(&mut npz, &format!("p{i}_{name}"), DataType::Float64).to_f64_vec();
                assert_eq!(got.len(), want.len(), "case {i} {name}");
                for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!((g - w).abs() <= tol * w.abs().max(1.0), "case {i} {name} {dt}[{j}]: got {g}, numpy {w}");
                }
            }
        }
    }
}

#[test]
fn pools3d_and_their_gradients_match_pytorch() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/ops_conv3d.npz");
    let mut npz = NpzReader::new(File::open(path).expect("fixture ops_conv3d.npz")).expect("npz");
    // (kernel, strides, pads, dilations, ceil_mode) as the generator's POOLS
    // (PyTorch's average pool takes no dilation: case 1 checks max only).
    type Case<'a> = (&'a [i64], &'a [i64], &'a [i64], &'a [i64], bool);
    let cases: [Case; 2] = [
        (&[3, 3, 3], &[2, 2, 2], &[1, 1, 1], &[1, 1, 1], false),
        (&[2, 3, 2], &[1, 2, 2], &[1, 1, 0], &[2, 1, 1], true),
    ];
    for (i, (k, s, p, d, c)) in cases.into_iter().enumerate() {
        let o = PoolOptions::default().stride(s).padding([p, p].concat()).dilation(d).ceil_mode(c);
        for dt in [DataType::Float64, DataType::Float32] {
            let tol = if dt == DataType::Float64 { 1e-12 } else { 1e-6 };
            let [x, gy] = ["x", "gy"].map(|n| read(&mut npz, &format!("p{i}_{n}"), dt));
            let max = run_with_grads(
                &|t| ops::max_pool_with(&t[0], k, &o, StorageOrder::Row),
                vec![x.clone()],
                Some(gy.clone()),
            );
            let mut got = vec![(max[0].clone(), "max"), (max[1].clone(), "dmax")];
            if i == 0 {
                let avg = run_with_grads(&|t| ops::average_pool_with(&t[0], k, &o), vec![x], Some(gy));
                got.extend([(avg[0].clone(), "avg"), (avg[1].clone(), "davg")]);
            }
            for (got, name) in got {
                let want = read(&mut npz, &format!("p{i}_{name}"), DataType::Float64).to_f64_vec();
                assert_eq!(got.len(), want.len(), "3-d case {i} {name}");
                for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= tol * w.abs().max(1.0),
                        "3-d case {i} {name} {dt}[{j}]: got {g}, torch {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn bad_pools_are_typed_errors() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(ArrayD::<f32>::zeros(vec![1, 2, 4, 4]), "x").unwrap();
    let msg = |r: popxl::Result<popxl::Tensor>| r.unwrap_err().to_string();
    assert!(msg(ops::max_pool(&x, &[5, 5])).contains("larger than the padded input"));
    assert!(msg(ops::max_pool(&x, &[2])).contains("kernel_size"));
    assert!(msg(ops::average_pool_with(&x, &[2, 2], &PoolOptions::default().stride([0, 1]))).contains("strides"));
    let o = PoolOptions { in_dilations: vec![2, 2], ..PoolOptions::default() };
    assert!(msg(ops::max_pool_with(&x, &[2, 2], &o, StorageOrder::Row)).contains("in_dilations"));
    let i = popxl::variable(ArrayD::<i32>::zeros(vec![1, 2, 4, 4]), "i").unwrap();
    assert!(msg(ops::max_pool(&i, &[2, 2])).contains("floating point"));
}
