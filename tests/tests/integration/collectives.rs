//! Collectives end to end through `popxl_session::Session` on the `cpu` device:
//! every replica `r` is fed its own data (host arrays `[rf, ...]`), and its
//! outputs and gradients are compared with values computed here by plain loops
//! over the groups of the [`ReplicaGrouping`], and with finite differences of
//! the replicas' losses `L_r = sum(y_r * gy_r)`.
//!
//! The gradients follow PopART's rules, which fix what a finite difference
//! measures:
//! - all-gather: the replica's own chunk of its gradient, i.e. `dL_r/dx_r`
//!   with the other replicas' inputs fixed ([`Perturb::Own`]);
//! - `replica_sharded_slice`, `replicated_slice`: the gathered gradients of the
//!   group, i.e. the derivative of the group's summed losses with respect to an
//!   input shared by the replicas ([`Perturb::Shared`]).
//!
//! Each check runs with 1 replica and with 2, 4 and 8.

// Replicas are indexed by number throughout, as the groupings number them.
#![allow(clippy::needless_range_loop)]

use std::collections::HashMap;

use ndarray::{ArrayD, IxDyn};
use popxl::ops::collectives::{self as coll, AllGatherShape, CollectiveOp};
use popxl::{ops, transforms, DataType, HostArray, Ir, ReplicaGrouping, Tensor};
use popxl_session::{Inputs, Session};

/// A compiled program `y = f(x0, x1, ..)` (a subgraph called from the main
/// graph, as PopXL programs are) with, optionally, the gradients of `y`.
struct Program {
    session: Session,
    rf: usize,
    xs: Vec<popxl::HostToDeviceStream>,
    gy: Option<popxl::HostToDeviceStream>,
    y: popxl::DeviceToHostStream,
    grads: Vec<popxl::DeviceToHostStream>,
}

/// What one run returns: `y` per replica and each input's gradient per replica.
struct Run {
    y: Vec<Vec<f64>>,
    grads: Vec<Vec<Vec<f64>>>,
}

impl Program {
    /// `f` builds `y` from float32 inputs of `shapes`; `grad`: also the gradients.
    fn new(
        ir: Ir,
        shapes: &[&[usize]],
        dtype: DataType,
        grad: bool,
        f: &dyn Fn(&[Tensor]) -> popxl::Result<Tensor>,
    ) -> Self {
        let rf = ir.replication_factor();
        let (xs, gy, y, grads) = {
            let _g = ir.main_graph().enter();
            let mut xs = Vec::new();
            let mut ts = Vec::new();
            for (i, shape) in shapes.iter().enumerate() {
                let s = popxl::h2d_stream(*shape, dtype, &format!("in{i}")).unwrap();
                ts.push(ops::host_load(&s, &format!("x{i}")).unwrap());
                xs.push(s);
            }
            let graph = ir.create_graph(|t: Vec<Tensor>| f(&t), ts.clone()).unwrap();
            let refs: Vec<&Tensor> = ts.iter().collect();
            let fwd = ops::call_with_info(&graph, &refs, &[]).unwrap();
            let yt = fwd.parent_output(0).unwrap();
            let y = popxl::d2h_stream(yt.shape(), yt.dtype(), "y").unwrap();
            ops::host_store(&y, &yt).unwrap();
            let (mut gy, mut grads) = (None, Vec::new());
            if grad {
                let provided = [graph.outputs().unwrap()[0].clone()];
                let info =
                    transforms::autodiff(&graph, Some(&provided), None, &HashMap::new(), false).unwrap().grad_info;
                let gs = popxl::h2d_stream(yt.shape(), yt.dtype(), "gy").unwrap();
                let gt = ops::host_load(&gs, "gy").unwrap();
                let acts = info.inputs_dict(&fwd).unwrap();
                let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
                let outs = ops::call(&info.graph(), &[&gt], &acts).unwrap();
                let expected = info.expected_outputs().unwrap();
                for x in &graph.inputs().unwrap() {
                    let k = expected.iter().position(|e| e.fwd_tensor() == x).expect("a gradient per input");
                    let s = popxl::d2h_stream(outs[k].shape(), outs[k].dtype(), "dx").unwrap();
                    ops::host_store(&s, &outs[k]).unwrap();
                    grads.push(s);
                }
                gy = Some(gs);
            }
            (xs, gy, y, grads)
        };
        let session = Session::new(ir, "cpu").unwrap();
        Program { session, rf, xs, gy, y, grads }
    }

    /// A host array of the per-replica values `v[r]` for a stream of `shape`.
    fn feed(&self, shape: &[usize], dtype: DataType, v: &[Vec<f64>]) -> HostArray {
        let mut host = shape.to_vec();
        if self.rf > 1 {
            host.insert(0, self.rf);
        }
        let flat: Vec<f64> = v.iter().flatten().copied().collect();
        HostArray::from(ArrayD::from_shape_vec(IxDyn(&host), flat).unwrap()).cast(dtype)
    }

    /// Run on `xs[input][replica]` (and `gy[replica]`).
    fn run(&mut self, xs: &[Vec<Vec<f64>>], gy: Option<&[Vec<f64>]>) -> Run {
        let mut feeds = Inputs::new();
        for (s, v) in self.xs.iter().zip(xs) {
            feeds.insert(s.clone(), self.feed(s.shape(), s.dtype(), v));
        }
        if let (Some(s), Some(g)) = (&self.gy, gy) {
            feeds.insert(s.clone(), self.feed(s.shape(), s.dtype(), g));
        }
        let out = self.session.scope(|s| s.run(&feeds)).unwrap();
        let split = |v: Vec<f64>| -> Vec<Vec<f64>> {
            let n = v.len() / self.rf;
            v.chunks(n.max(1)).map(<[f64]>::to_vec).collect()
        };
        Run {
            y: split(out[&self.y].to_f64_vec()),
            grads: self.grads.iter().map(|s| split(out[s].to_f64_vec())).collect(),
        }
    }
}

/// How a finite difference perturbs input element `e` for replica `r`'s gradient.
#[derive(Clone, Copy)]
enum Perturb {
    /// Only replica `r`'s input; measures `L_r`.
    Own,
    /// Every replica's input; measures the sum of the losses of `r`'s group.
    Shared,
}

/// Finite differences of `L_r = sum(y_r * gy_r)` for input 0 of `p` at `x`.
fn finite_differences(
    p: &mut Program,
    rg: &ReplicaGrouping,
    x: &[Vec<f64>],
    gy: &[Vec<f64>],
    mode: Perturb,
) -> Vec<Vec<f64>> {
    let eps = 0.5; // every function tested is linear: differences are exact in float32
    let loss = |y: &[Vec<f64>], r: usize| -> f64 { y[r].iter().zip(&gy[r]).map(|(a, b)| a * b).sum() };
    let n = x[0].len();
    let rf = x.len();
    let mut out = vec![vec![0.0; n]; rf];
    for e in 0..n {
        for (r, row) in out.iter_mut().enumerate() {
            let members = rg.members(rg.group_at(r));
            let mut diff = 0.0;
            for sign in [1.0, -1.0] {
                let mut xp = x.to_vec();
                match mode {
                    Perturb::Own => xp[r][e] += sign * eps,
                    Perturb::Shared => xp.iter_mut().for_each(|v| v[e] += sign * eps),
                }
                let y = p.run(&[xp], Some(gy)).y;
                let l = match mode {
                    Perturb::Own => loss(&y, r),
                    Perturb::Shared => members.iter().map(|&m| loss(&y, m)).sum(),
                };
                diff += sign * l;
            }
            row[e] = diff / (2.0 * eps);
        }
    }
    out
}

/// Distinct small integers, exact in float32 and float16: input `x_r[e]`.
fn xs(rf: usize, n: usize) -> Vec<Vec<f64>> {
    (0..rf).map(|r| (0..n).map(|e| (r * 16 + e) as f64 - 20.0).collect()).collect()
}

/// Output gradients `gy_r[e]`.
fn gys(rf: usize, n: usize) -> Vec<Vec<f64>> {
    (0..rf).map(|r| (0..n).map(|e| 1.0 + ((r * 7 + e * 3) % 11) as f64).collect()).collect()
}

/// The groupings tested for `rf` replicas: all, pairs, strided pairs, (rf/2, 2), singles.
fn groupings(ir: &Ir) -> Vec<ReplicaGrouping> {
    let rf = ir.replication_factor();
    let mut v: Vec<ReplicaGrouping> = Vec::new();
    for (s, g) in [(1, rf), (1, 2), (2, 2), (rf / 2, 2), (1, 1)] {
        if let Ok(rg) = ir.replica_grouping(s.max(1), Some(g)) {
            if !v.contains(&rg) {
                v.push(rg);
            }
        }
    }
    v
}

fn ir_with(rf: usize) -> Ir {
    let ir = Ir::new();
    ir.set_replication_factor(rf).unwrap();
    ir
}

/// `x` of shape `[a, b]` per member, concatenated along `axis` (0 or 1).
fn concat(parts: &[&Vec<f64>], a: usize, b: usize, axis: usize) -> Vec<f64> {
    if axis == 0 {
        return parts.iter().flat_map(|p| p.iter().copied()).collect();
    }
    (0..a).flat_map(|i| parts.iter().flat_map(move |p| p[i * b..(i + 1) * b].iter().copied())).collect()
}

fn check_all_gather(rf: usize) {
    let (a, b) = (2, 3);
    for (mode, axis) in [
        (AllGatherShape::Concat, 0),
        (AllGatherShape::Concat, 1),
        (AllGatherShape::Concat, -1),
        (AllGatherShape::NewAxis, 0),
    ] {
        for rg in groupings(&ir_with(rf)) {
            let ir = ir_with(rf);
            let group = ir.replica_grouping(rg.stride().unwrap(), Some(rg.group_size())).unwrap();
            let g = rg.group_size();
            let mut p = Program::new(ir, &[&[a, b]], DataType::Float32, true, &|t| {
                coll::replicated_all_gather(&t[0], axis, Some(&group), mode)
            });
            let (x, gy) = (xs(rf, a * b), gys(rf, g * a * b));
            let run = p.run(std::slice::from_ref(&x), Some(&gy));
            let ax = if mode == AllGatherShape::Concat && axis != 0 { 1 } else { 0 };
            for r in 0..rf {
                let members = rg.members(rg.group_at(r));
                let parts: Vec<&Vec<f64>> = members.iter().map(|&m| &x[m]).collect();
                assert_eq!(run.y[r], concat(&parts, a, b, ax), "{mode:?} axis {axis} rf {rf} {rg} replica {r}");
                // The gradient is the replica's own part of its output gradient.
                let j = rg.index_in_group(r);
                let own: Vec<f64> = if ax == 0 {
                    gy[r][j * a * b..(j + 1) * a * b].to_vec()
                } else {
                    (0..a).flat_map(|i| gy[r][i * g * b + j * b..i * g * b + (j + 1) * b].to_vec()).collect()
                };
                assert_eq!(run.grads[0][r], own, "gradient {mode:?} axis {axis} rf {rf} {rg} replica {r}");
            }
            if axis == 1 {
                assert_eq!(finite_differences(&mut p, &rg, &x, &gy, Perturb::Own), run.grads[0]);
            }
        }
    }
}

/// The shard of member `j`: `x` padded to a multiple of `g`, chunk `j`.
fn shard(x: &[f64], g: usize, j: usize) -> Vec<f64> {
    let c = x.len().div_ceil(g);
    (j * c..(j + 1) * c).map(|e| x.get(e).copied().unwrap_or(0.0)).collect()
}

fn check_sharding(rf: usize) {
    let shape = [3, 3];
    let n: usize = 9;
    for rg in groupings(&ir_with(rf)) {
        let g = rg.group_size();
        let c = n.div_ceil(g);
        // replica_sharded_slice alone: the shard, and the gathered gradients.
        let ir = ir_with(rf);
        let group = ir.replica_grouping(rg.stride().unwrap(), Some(g)).unwrap();
        let mut p =
            Program::new(ir, &[&shape], DataType::Float32, true, &|t| coll::replica_sharded_slice(&t[0], Some(&group)));
        let (x, gy) = (xs(rf, n), gys(rf, c));
        let run = p.run(std::slice::from_ref(&x), Some(&gy));
        for r in 0..rf {
            let members = rg.members(rg.group_at(r));
            assert_eq!(run.y[r], shard(&x[r], g, rg.index_in_group(r)), "rf {rf} {rg} replica {r}");
            let gathered: Vec<f64> = members.iter().flat_map(|&m| gy[m].clone()).take(n).collect();
            assert_eq!(run.grads[0][r], gathered, "gradient rf {rf} {rg} replica {r}");
        }
        assert_eq!(finite_differences(&mut p, &rg, &x, &gy, Perturb::Shared), run.grads[0]);

        // Shard then gather into the meta shape: the members' shards, padding dropped.
        let ir = ir_with(rf);
        let group = ir.replica_grouping(rg.stride().unwrap(), Some(g)).unwrap();
        let mut p = Program::new(ir, &[&shape], DataType::Float32, true, &|t| {
            let s = coll::replica_sharded_slice(&t[0], Some(&group))?;
            coll::replicated_all_gather(&s, 0, Some(&group), AllGatherShape::Auto)
        });
        let gy = gys(rf, n);
        let run = p.run(std::slice::from_ref(&x), Some(&gy));
        for r in 0..rf {
            let members = rg.members(rg.group_at(r));
            let want: Vec<f64> = members.iter().enumerate().flat_map(|(i, &m)| shard(&x[m], g, i)).take(n).collect();
            assert_eq!(run.y[r], want, "roundtrip rf {rf} {rg} replica {r}");
            // PopART's rules: own chunk of gy_m on each member m, gathered.
            let want: Vec<f64> = members.iter().enumerate().flat_map(|(i, &m)| shard(&gy[m], g, i)).take(n).collect();
            assert_eq!(run.grads[0][r], want, "roundtrip gradient rf {rf} {rg} replica {r}");
        }
    }
}

fn check_replicated_slice(rf: usize) {
    // [8, 2] sliced along axis 0 and [2, 8] along axis 1: 8 divides by every group size.
    for (shape, axis) in [([8usize, 2usize], 0i64), ([2, 8], 1), ([2, 8], -1)] {
        for rg in groupings(&ir_with(rf)) {
            let g = rg.group_size();
            let ir = ir_with(rf);
            let group = ir.replica_grouping(rg.stride().unwrap(), Some(g)).unwrap();
            let mut p = Program::new(ir, &[&shape], DataType::Float32, true, &|t| {
                coll::replicated_slice(&t[0], axis, Some(&group))
            });
            let ax = usize::from(axis != 0);
            let k = 8 / g;
            let (x, gy) = (xs(rf, 16), gys(rf, 16 / g));
            let run = p.run(std::slice::from_ref(&x), Some(&gy));
            for r in 0..rf {
                let j = rg.index_in_group(r);
                let want: Vec<f64> = if ax == 0 {
                    x[r][j * k * 2..(j + 1) * k * 2].to_vec()
                } else {
                    (0..2).flat_map(|i| x[r][i * 8 + j * k..i * 8 + (j + 1) * k].to_vec()).collect()
                };
                assert_eq!(run.y[r], want, "{shape:?} axis {axis} rf {rf} {rg} replica {r}");
                let members = rg.members(rg.group_at(r));
                let parts: Vec<&Vec<f64>> = members.iter().map(|&m| &gy[m]).collect();
                let (a, b) = if ax == 0 { (k, 2) } else { (2, k) };
                assert_eq!(run.grads[0][r], concat(&parts, a, b, ax), "gradient {shape:?} axis {axis} rf {rf} {rg}");
            }
            assert_eq!(finite_differences(&mut p, &rg, &x, &gy, Perturb::Shared), run.grads[0]);
        }
    }
}

/// `op` over `vals` in order, in float32 (or int32 / bool) as the kernels compute.
fn reduce(op: CollectiveOp, dtype: DataType, vals: &[f64]) -> f64 {
    match dtype {
        DataType::Bool => {
            let b = vals.iter().map(|&v| v != 0.0);
            f64::from(u8::from(if op == CollectiveOp::And {
                b.reduce(|a, x| a && x).unwrap_or(true)
            } else {
                b.reduce(|a, x| a || x).unwrap_or(false)
            }))
        }
        DataType::Int32 => {
            let v: Vec<i32> = vals.iter().map(|&x| x as i32).collect();
            f64::from(match op {
                CollectiveOp::Add => v.iter().sum(),
                CollectiveOp::Mean => v.iter().sum::<i32>() / v.len() as i32,
                CollectiveOp::Mul => v.iter().product(),
                CollectiveOp::Min => *v.iter().min().unwrap(),
                _ => *v.iter().max().unwrap(),
            })
        }
        _ => {
            let v: Vec<f32> = vals.iter().map(|&x| x as f32).collect();
            let fold = |f: fn(f32, f32) -> f32, first: f32| v[1..].iter().fold(first, |a, &x| f(a, x));
            f64::from(match op {
                CollectiveOp::Add => fold(|a, x| a + x, v[0]),
                CollectiveOp::Mean => fold(|a, x| a + x, v[0]) / v.len() as f32,
                CollectiveOp::Mul => fold(|a, x| a * x, v[0]),
                CollectiveOp::Min => fold(f32::min, v[0]),
                CollectiveOp::Max => fold(f32::max, v[0]),
                _ => fold(|a, x| a + x * x, v[0] * v[0]),
            })
        }
    }
}

fn check_reductions(rf: usize) {
    let n = 6;
    let cases: Vec<(CollectiveOp, DataType)> = CollectiveOp::ALL
        .iter()
        .flat_map(|&op| match op {
            CollectiveOp::And | CollectiveOp::Or => vec![(op, DataType::Bool)],
            CollectiveOp::SquareAdd => vec![(op, DataType::Float32)],
            _ => vec![(op, DataType::Float32), (op, DataType::Int32)],
        })
        .collect();
    for rg in groupings(&ir_with(rf)) {
        let g = rg.group_size();
        for &(op, dt) in &cases {
            let x: Vec<Vec<f64>> = (0..rf)
                .map(|r| {
                    (0..n)
                        .map(|e| {
                            if dt == DataType::Bool {
                                ((r + e) % 3 != 0) as u8 as f64
                            } else {
                                ((r * 5 + e * 3) % 7) as f64 - 3.0
                            }
                        })
                        .collect()
                })
                .collect();
            for in_place in [false, true] {
                let ir = ir_with(rf);
                let group = ir.replica_grouping(rg.stride().unwrap(), Some(g)).unwrap();
                let mut p = Program::new(ir, &[&[n]], dt, false, &|t| {
                    if in_place {
                        coll::replicated_all_reduce_(&t[0], op, Some(&group))
                    } else {
                        coll::replicated_all_reduce(&t[0], op, Some(&group))
                    }
                });
                let run = p.run(std::slice::from_ref(&x), None);
                for r in 0..rf {
                    let members = rg.members(rg.group_at(r));
                    let want: Vec<f64> =
                        (0..n).map(|e| reduce(op, dt, &members.iter().map(|&m| x[m][e]).collect::<Vec<_>>())).collect();
                    assert_eq!(run.y[r], want, "all_reduce {op} {dt} in place {in_place} rf {rf} {rg} replica {r}");
                }
            }
            // Reduce-scatter: the member's shard of the padded reduction.
            let ir = ir_with(rf);
            let group = ir.replica_grouping(rg.stride().unwrap(), Some(g)).unwrap();
            let mut p = Program::new(ir, &[&[n]], dt, false, &|t| {
                coll::replicated_reduce_scatter(&t[0], op, Some(&group), false)
            });
            let run = p.run(std::slice::from_ref(&x), None);
            for r in 0..rf {
                let members = rg.members(rg.group_at(r));
                let full: Vec<f64> =
                    (0..n).map(|e| reduce(op, dt, &members.iter().map(|&m| x[m][e]).collect::<Vec<_>>())).collect();
                assert_eq!(
                    run.y[r],
                    shard(&full, g, rg.index_in_group(r)),
                    "reduce_scatter {op} {dt} rf {rf} {rg} replica {r}"
                );
            }
        }
    }
}

#[test]
fn all_gather_single_replica() {
    check_all_gather(1);
}

#[test]
fn all_gather_replicated() {
    for rf in [2, 4, 8] {
        check_all_gather(rf);
    }
}

#[test]
fn sharded_slice_and_meta_shape_gather_single_replica() {
    check_sharding(1);
}

#[test]
fn sharded_slice_and_meta_shape_gather_replicated() {
    for rf in [2, 4, 8] {
        check_sharding(rf);
    }
}

#[test]
fn replicated_slice_single_replica() {
    check_replicated_slice(1);
}

#[test]
fn replicated_slice_replicated() {
    for rf in [2, 4, 8] {
        check_replicated_slice(rf);
    }
}

#[test]
fn all_reduce_and_reduce_scatter_every_op_single_replica() {
    check_reductions(1);
}

#[test]
fn all_reduce_and_reduce_scatter_every_op_replicated() {
    for rf in [2, 4, 8] {
        check_reductions(rf);
    }
}

#[test]
fn multi_ipu_all_reduce_values_and_gradients() {
    let (k, n) = (3, 4);
    let x: Vec<Vec<f64>> = (0..k).map(|i| (0..n).map(|e| (i * 10 + e) as f64).collect()).collect();
    let gy: Vec<Vec<f64>> = (0..k).map(|i| (0..n).map(|e| 1.0 + ((i * 5 + e) % 4) as f64).collect()).collect();
    let sum = |v: &[Vec<f64>]| -> Vec<f64> { (0..n).map(|e| v.iter().map(|r| r[e]).sum()).collect() };
    for (which, identical_in, identical_grad) in
        [("plain", false, false), ("identical inputs", true, false), ("identical grads", false, true)]
    {
        // y = the outputs concatenated, so one program returns all of them.
        let f = move |t: &[Tensor]| {
            let refs: Vec<&Tensor> = t.iter().collect();
            let ipus: Vec<u32> = (0..t.len() as u32).collect();
            let ys = match (identical_in, identical_grad) {
                (true, _) => coll::all_reduce_identical_inputs(&refs, Some(&ipus), CollectiveOp::Add)?,
                (_, true) => coll::all_reduce_identical_grad_inputs(&refs, Some(&ipus), CollectiveOp::Add)?,
                _ => coll::all_reduce(&refs, Some(&ipus), CollectiveOp::Add)?,
            };
            let refs: Vec<&Tensor> = ys.iter().collect();
            ops::concat(&refs, 0)
        };
        let mut p = Program::new(ir_with(1), &[&[n], &[n], &[n]], DataType::Float32, true, &f);
        let inputs: Vec<Vec<Vec<f64>>> = x.iter().map(|v| vec![v.clone()]).collect();
        let gflat = vec![gy.iter().flatten().copied().collect::<Vec<f64>>()];
        let run = p.run(&inputs, Some(&gflat));
        let y_want: Vec<f64> = if identical_in { x.iter().flatten().copied().collect() } else { sum(&x).repeat(k) };
        assert_eq!(run.y[0], y_want, "{which}");
        for (i, g) in run.grads.iter().enumerate() {
            let want = if identical_grad { gy[i].clone() } else { sum(&gy) };
            assert_eq!(g[0], want, "{which} gradient of input {i}");
        }
        // Finite differences of sum(y * gy): each input alone for the plain
        // all-reduce; the identical-input variant differentiates a shared input.
        if !identical_grad {
            let loss = |p: &mut Program, xs: &[Vec<Vec<f64>>]| -> f64 {
                p.run(xs, Some(&gflat)).y[0].iter().zip(&gflat[0]).map(|(a, b)| a * b).sum()
            };
            for i in 0..k {
                for e in 0..n {
                    let mut d = 0.0;
                    for sign in [1.0, -1.0] {
                        let mut xp = inputs.clone();
                        for (j, xj) in xp.iter_mut().enumerate() {
                            if j == i || identical_in {
                                xj[0][e] += sign * 0.5;
                            }
                        }
                        d += sign * loss(&mut p, &xp);
                    }
                    assert_eq!(d, run.grads[i][0][e], "{which} finite difference of input {i} element {e}");
                }
            }
        }
    }
}
