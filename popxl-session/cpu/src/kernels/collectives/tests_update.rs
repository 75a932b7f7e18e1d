//! The fused data-parallel update kernels on `rf` replica threads, against
//! the all-reduce and update computed here in float64 over the groups of an
//! independent [`ReplicaGrouping`](popart_ir::ReplicaGrouping).

use popart_ir::ops::all as ir;
use popart_ir::ops::collectives::AllReduceUpdateAttrs;
use popart_ir::ops::collectives::CollectiveOperator as Op;
use popart_ir::{Attributes, DataType, HostTensor, OpAttrs};

use super::super::testutil::{assert_close, Rng};
use super::tests::{groupings, run, run_on, run_spec, RFS};

/// `xᵀ @ g` of one replica, `x` as `[m, k]` and `g` as `[m, n]` (rows folded), in float64.
fn rhs_grad(x: &[f64], g: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; k * n];
    for r in 0..m {
        for i in 0..k {
            for j in 0..n {
                out[i * n + j] += x[r * k + i] * g[r * n + j];
            }
        }
    }
    out
}

/// `(x shape, w shape)` pairs: batch dims folded, a vector weight, an uneven
/// row split, and a product large enough to be split into blocks and over
/// the worker team.
const SHAPES: [(&[usize], &[usize]); 4] =
    [(&[3, 5, 7], &[7, 6]), (&[4, 7], &[7]), (&[9, 13], &[13, 5]), (&[24, 700], &[700, 600])];

#[test]
fn matmul_update_adds_the_groups_reduced_product_to_every_members_weight() {
    let mut rng = Rng::new(5);
    for (xs, ws) in SHAPES {
        let big = ws[0] >= 700;
        let (k, n) = (ws[0], ws.get(1).copied().unwrap_or(1));
        let m = xs.iter().product::<usize>() / k;
        let gs: Vec<usize> = match ws.len() {
            1 => xs[..xs.len() - 1].to_vec(),
            _ => xs[..xs.len() - 1].iter().copied().chain([n]).collect(),
        };
        for rf in RFS {
            for rg in groupings(rf) {
                // The large shape on a few groupings only (it is slow in debug builds).
                if big && !(rf == 2 || (rf == 4 && rg.group_size() == 2)) {
                    continue;
                }
                let (s, size) = (rg.stride().unwrap(), rg.group_size());
                for op in [Op::Add, Op::Mean] {
                    let b = -0.375;
                    let x: Vec<Vec<f64>> = (0..rf).map(|_| rng.vec(m * k, -1.0, 1.0)).collect();
                    let g: Vec<Vec<f64>> = (0..rf).map(|_| rng.vec(m * n, -1.0, 1.0)).collect();
                    let w: Vec<Vec<f64>> = (0..rf).map(|_| rng.vec(k * n, -1.0, 1.0)).collect();
                    let t = |shape: &[usize], v: &[f64]| HostTensor::from_f64_values(DataType::Float32, shape, v);
                    let inputs: Vec<Vec<HostTensor>> =
                        (0..rf).map(|r| vec![t(&gs, &g[r]), t(xs, &x[r]), t(ws, &w[r])]).collect();
                    // The kernel computes in float32 from the float32 values.
                    let as32 = |v: &[f64]| v.iter().map(|&e| f64::from(e as f32)).collect::<Vec<_>>();
                    let a = update_attrs(op, s, size, b);
                    let outs = run(rf, &ir::ReplicatedScaledAddMatMulRhsGradInplace, &a, &inputs);
                    for (r, out) in outs.iter().enumerate() {
                        let members = rg.members(rg.group_at(r));
                        let mut sum = vec![0.0; k * n];
                        for &j in &members {
                            let p = rhs_grad(&as32(&x[j]), &as32(&g[j]), m, k, n);
                            sum.iter_mut().zip(p).for_each(|(a, p)| *a += p);
                        }
                        let div = if op == Op::Mean { members.len() as f64 } else { 1.0 };
                        let want: Vec<f64> = as32(&w[r]).iter().zip(&sum).map(|(w, s)| w + b * s / div).collect();
                        assert_eq!(out[0].info, inputs[r][2].info);
                        assert_close(&out[0].to_f64_vec(), &want, 1e-5);
                    }
                }
            }
        }
    }
}

#[test]
fn matmul_update_without_a_replica_context_is_the_local_update() {
    let mut rng = Rng::new(9);
    let (m, k, n) = (6, 40, 30);
    let (x, g, w) = (rng.vec(m * k, -1.0, 1.0), rng.vec(m * n, -1.0, 1.0), rng.vec(k * n, -1.0, 1.0));
    let t = |shape: &[usize], v: &[f64]| HostTensor::from_f64_values(DataType::Float32, shape, v);
    let inputs = vec![vec![t(&[m, n], &g), t(&[m, k], &x), t(&[k, n], &w)]];
    let a = update_attrs(Op::Mean, 1, 1, 0.5);
    let out = run_on(1, &ir::ReplicatedScaledAddMatMulRhsGradInplace, &a, &inputs, false).unwrap();
    let as32 = |v: &[f64]| v.iter().map(|&e| f64::from(e as f32)).collect::<Vec<_>>();
    let p = rhs_grad(&as32(&x), &as32(&g), m, k, n);
    let want: Vec<f64> = as32(&w).iter().zip(&p).map(|(w, p)| w + 0.5 * p).collect();
    assert_close(&out[0][0].to_f64_vec(), &want, 1e-5);
}

#[test]
fn matmul_update_is_deterministic() {
    let (rf, m, k, n) = (4, 16, 300, 200);
    let mut rng = Rng::new(13);
    let t = |shape: &[usize], v: &[f64]| HostTensor::from_f64_values(DataType::Float32, shape, v);
    let inputs: Vec<Vec<HostTensor>> = (0..rf)
        .map(|_| {
            vec![
                t(&[m, n], &rng.vec(m * n, -1.0, 1.0)),
                t(&[m, k], &rng.vec(m * k, -1.0, 1.0)),
                t(&[k, n], &rng.vec(k * n, -1.0, 1.0)),
            ]
        })
        .collect();
    let a = update_attrs(Op::Add, 1, rf, -0.25);
    let first = run(rf, &ir::ReplicatedScaledAddMatMulRhsGradInplace, &a, &inputs);
    for _ in 0..5 {
        assert_eq!(run(rf, &ir::ReplicatedScaledAddMatMulRhsGradInplace, &a, &inputs), first);
    }
}

/// With `weight_invariant` (every member's weight equal, as lowering
/// guarantees when it sets the flag), each member accumulates its rows
/// into its own weight and copies them: every replica ends with the same bytes,
/// the reduced update of the common weight.
#[test]
fn matmul_update_of_an_invariant_weight_gives_every_member_the_same_update() {
    let mut rng = Rng::new(17);
    for (xs, ws) in SHAPES {
        let (k, n) = (ws[0], ws.get(1).copied().unwrap_or(1));
        let m = xs.iter().product::<usize>() / k;
        let gs: Vec<usize> = match ws.len() {
            1 => xs[..xs.len() - 1].to_vec(),
            _ => xs[..xs.len() - 1].iter().copied().chain([n]).collect(),
        };
        // Groups of two take the invariant path; four take the scratch path.
        for rf in [2, 4] {
            if k >= 700 && rf == 4 {
                continue;
            }
            for op in [Op::Add, Op::Mean] {
                let b = 0.625;
                let x: Vec<Vec<f64>> = (0..rf).map(|_| rng.vec(m * k, -1.0, 1.0)).collect();
                let g: Vec<Vec<f64>> = (0..rf).map(|_| rng.vec(m * n, -1.0, 1.0)).collect();
                let w = rng.vec(k * n, -1.0, 1.0);
                let t = |shape: &[usize], v: &[f64]| HostTensor::from_f64_values(DataType::Float32, shape, v);
                let inputs: Vec<Vec<HostTensor>> =
                    (0..rf).map(|r| vec![t(&gs, &g[r]), t(xs, &x[r]), t(ws, &w)]).collect();
                let as32 = |v: &[f64]| v.iter().map(|&e| f64::from(e as f32)).collect::<Vec<_>>();
                let a = update_attrs(op, 1, rf, b);
                let outs = run_spec(rf, &ir::ReplicatedScaledAddMatMulRhsGradInplace, &a, &inputs, true, true)
                    .unwrap_or_else(|e| panic!("{e}"));
                let mut sum = vec![0.0; k * n];
                for j in 0..rf {
                    let p = rhs_grad(&as32(&x[j]), &as32(&g[j]), m, k, n);
                    sum.iter_mut().zip(p).for_each(|(a, p)| *a += p);
                }
                let div = if op == Op::Mean { rf as f64 } else { 1.0 };
                let want: Vec<f64> = as32(&w).iter().zip(&sum).map(|(w, s)| w + b * s / div).collect();
                assert_close(&outs[0][0].to_f64_vec(), &want, 1e-5);
                for out in &outs[1..] {
                    assert_eq!(out[0], outs[0][0], "every replica holds the same bytes");
                }
            }
        }
    }
}

/// Operator `op` over the grouping `(s, g)`, scale `b`.
fn update_attrs(op: Op, s: usize, g: usize, b: f64) -> Attributes {
    AllReduceUpdateAttrs { op, stride: s as i64, group_size: g as i64, b }.to_attrs()
}
