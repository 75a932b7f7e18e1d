//! Collective kernels run on `rf` threads, one per replica, on hand-built
//! per-replica inputs, against values computed here by plain loops over the
//! groups of an independent [`ReplicaGrouping`].

use half::f16;
use popart_ir::ops::all as ir;
use popart_ir::ops::collectives::CollectiveOperator as Op;
use popart_ir::ops::collectives::{AllReduceAttrs, IpuAllReduceAttrs, ReduceScatterAttrs};
use popart_ir::{Attributes, DataType, HostTensor, Ir, OpAttrs, OpDef, ReplicaGrouping, TensorInfo};

use super::super::build_kernel;
use super::super::testutil::Rng;
use crate::kernel::{KernelArgs, KernelRunError, KernelSpec};
use crate::replicas::{self, Comm};

/// 64-byte aligned storage holding `t`'s bytes (or garbage, for outputs).
fn buffer(t: Option<&HostTensor>, nbytes: usize) -> Vec<[u64; 8]> {
    let mut b = vec![[0x5A5A_5A5A_5A5A_5A5Au64; 8]; nbytes.div_ceil(64).max(1)];
    if let Some(t) = t {
        bytemuck::cast_slice_mut::<_, u8>(&mut b)[..t.bytes.len()].copy_from_slice(&t.bytes);
    }
    b
}

/// Output infos as the IR infers them for an IR of `rf` replicas.
fn infer(rf: usize, def: &'static dyn OpDef, attrs: &Attributes, inputs: &[TensorInfo]) -> Vec<TensorInfo> {
    let mut ir = Ir::new();
    ir.replication_factor = rf;
    let main = ir.main_graph_id();
    let ids: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| (i as u32, ir.graph_mut(main).unwrap().add_input(&format!("x{i}"), t.clone()).unwrap()))
        .collect();
    ir.infer_outputs(main, def, attrs, &ids, "node").unwrap_or_else(|e| panic!("{e}"))
}

/// Run `def` on `rf` replicas, replica `r` on `inputs[r]`, each on its own
/// thread inside `replicas::enter` (or, with `context` false, one replica with
/// no replica context). In-place outputs start as their input. Returns each
/// replica's outputs.
pub(super) fn run_on(
    rf: usize,
    def: &'static dyn OpDef,
    attrs: &Attributes,
    inputs: &[Vec<HostTensor>],
    context: bool,
) -> Result<Vec<Vec<HostTensor>>, KernelRunError> {
    run_spec(rf, def, attrs, inputs, context, false)
}

/// [`run_on`] with the lowered call's `weight_invariant` flag.
pub(super) fn run_spec(
    rf: usize,
    def: &'static dyn OpDef,
    attrs: &Attributes,
    inputs: &[Vec<HostTensor>],
    context: bool,
    weight_invariant: bool,
) -> Result<Vec<Vec<HostTensor>>, KernelRunError> {
    assert_eq!(inputs.len(), rf);
    let in_infos: Vec<TensorInfo> = inputs[0].iter().map(|t| t.info.clone()).collect();
    let declared = declared(def, attrs);
    let out_infos = infer(rf, def, &declared, &in_infos);
    let spec = KernelSpec {
        weight_invariant,
        ..KernelSpec::new(
            def,
            &declared,
            in_infos.iter().cloned().enumerate().map(|(i, t)| (i as u32, t)).collect(),
            out_infos.iter().cloned().enumerate().map(|(i, t)| (i as u32, t)).collect(),
        )
    };
    let kernel = build_kernel(&spec).unwrap_or_else(|e| panic!("{e}"));
    let aliases = def.alias_pairs(attrs);
    let mut in_bufs: Vec<Vec<Vec<[u64; 8]>>> =
        inputs.iter().map(|ins| ins.iter().map(|t| buffer(Some(t), t.bytes.len())).collect()).collect();
    let mut out_bufs: Vec<Vec<Vec<[u64; 8]>>> = (0..rf)
        .map(|r| {
            out_infos
                .iter()
                .enumerate()
                .map(|(o, info)| match aliases.iter().find(|&&(_, out)| out as usize == o) {
                    Some(&(i, _)) => buffer(Some(&inputs[r][i as usize]), info.nbytes()),
                    None => buffer(None, info.nbytes()),
                })
                .collect()
        })
        .collect();
    // Pointers as integers, to move them to the replica threads.
    let ptrs: Vec<(Vec<usize>, Vec<usize>)> = (0..rf)
        .map(|r| {
            let outs: Vec<usize> = out_bufs[r].iter_mut().map(|b| b.as_mut_ptr() as usize).collect();
            let ins: Vec<usize> = in_bufs[r]
                .iter_mut()
                .enumerate()
                .map(|(i, b)| match aliases.iter().find(|&&(inp, _)| inp as usize == i) {
                    Some(&(_, o)) => outs[o as usize],
                    None => b.as_mut_ptr() as usize,
                })
                .collect();
            (ins, outs)
        })
        .collect();
    let comm = Comm::new(rf);
    let results: Vec<Result<(), KernelRunError>> = std::thread::scope(|s| {
        let handles: Vec<_> = ptrs
            .iter()
            .enumerate()
            .map(|(r, (ins, outs))| {
                let (kernel, comm) = (&kernel, &comm);
                s.spawn(move || {
                    let ins: Vec<*const u8> = ins.iter().map(|&p| p as *const u8).collect();
                    let outs: Vec<*mut u8> = outs.iter().map(|&p| p as *mut u8).collect();
                    let args = KernelArgs { inputs: &ins, outputs: &outs };
                    // SAFETY: the buffers are sized from the infos, 64-byte
                    // aligned, aliased exactly as the op declares, and live
                    // until the scope ends.
                    let run = || unsafe { kernel.run(&args) };
                    if context {
                        replicas::enter(r, comm, run)
                    } else {
                        run()
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("replica thread")).collect()
    });
    for r in results {
        r?;
    }
    Ok(out_bufs
        .iter()
        .map(|outs| {
            outs.iter()
                .zip(&out_infos)
                .map(|(b, t)| {
                    let bytes = bytemuck::cast_slice::<_, u8>(b)[..t.nbytes()].to_vec();
                    HostTensor::from_bytes(t.clone(), bytes).unwrap()
                })
                .collect()
        })
        .collect())
}

pub(super) fn run(
    rf: usize,
    def: &'static dyn OpDef,
    attrs: &Attributes,
    inputs: &[Vec<HostTensor>],
) -> Vec<Vec<HostTensor>> {
    run_on(rf, def, attrs, inputs, true).unwrap_or_else(|e| panic!("{}: {e}", def.op_type()))
}

/// The tests share one attribute set across collectives: the op sees the keys
/// it declares.
fn declared(def: &dyn OpDef, attrs: &Attributes) -> Attributes {
    let mut declared = Attributes::new();
    for (k, v) in attrs.iter().filter(|(k, _)| def.attributes().iter().any(|s| s.name == *k)) {
        declared.set(k, v.clone());
    }
    declared
}

/// Operator `op` over the grouping `(s, g)`.
pub(super) fn attrs(op: Op, s: usize, g: usize) -> Attributes {
    AllReduceAttrs { op, stride: s as i64, group_size: g as i64 }.to_attrs()
}

/// [`attrs`] with attribute `shape`.
pub(super) fn shaped(op: Op, s: usize, g: usize, shape: Option<Vec<i64>>) -> Attributes {
    ReduceScatterAttrs { op, stride: s as i64, group_size: g as i64, shape, rts: false }.to_attrs()
}

/// Every constant grouping of `rf` replicas.
pub(super) fn groupings(rf: usize) -> Vec<ReplicaGrouping> {
    let mut v: Vec<ReplicaGrouping> = Vec::new();
    for s in 1..=rf {
        for g in 1..=rf {
            if let Ok(rg) = ReplicaGrouping::new(rf, s, g) {
                if !v.contains(&rg) {
                    v.push(rg);
                }
            }
        }
    }
    v
}

/// `op` folded over `vals` in order, in `dtype`'s arithmetic as the kernels do
/// it (float16 through float32, rounded once; integers wrapping).
fn reference(op: Op, dtype: DataType, vals: &[f64]) -> f64 {
    let count = vals.len();
    match dtype {
        DataType::Float32 | DataType::Float16 => {
            let v: Vec<f32> = vals.iter().map(|&x| x as f32).collect();
            let r = match op {
                Op::Add => v.iter().skip(1).fold(v[0], |a, &x| a + x),
                Op::Mean => v.iter().skip(1).fold(v[0], |a, &x| a + x) / count as f32,
                Op::Mul => v.iter().skip(1).fold(v[0], |a, &x| a * x),
                Op::Min => v.iter().copied().fold(f32::INFINITY, f32::min),
                Op::Max => v.iter().copied().fold(f32::NEG_INFINITY, f32::max),
                Op::SquareAdd => v.iter().skip(1).fold(v[0] * v[0], |a, &x| a + x * x),
                _ => unreachable!(),
            };
            if dtype == DataType::Float16 {
                f16::from_f32(r).to_f64()
            } else {
                f64::from(r)
            }
        }
        DataType::Int32 => {
            let v: Vec<i32> = vals.iter().map(|&x| x as i32).collect();
            f64::from(match op {
                Op::Add => v.iter().fold(0i32, |a, &x| a.wrapping_add(x)),
                Op::Mean => v.iter().fold(0i32, |a, &x| a.wrapping_add(x)) / count as i32,
                Op::Mul => v.iter().fold(1i32, |a, &x| a.wrapping_mul(x)),
                Op::Min => *v.iter().min().unwrap(),
                Op::Max => *v.iter().max().unwrap(),
                _ => unreachable!(),
            })
        }
        DataType::Uint32 => {
            let v: Vec<u32> = vals.iter().map(|&x| x as u32).collect();
            f64::from(match op {
                Op::Add => v.iter().fold(0u32, |a, &x| a.wrapping_add(x)),
                Op::Mean => v.iter().fold(0u32, |a, &x| a.wrapping_add(x)) / count as u32,
                Op::Mul => v.iter().fold(1u32, |a, &x| a.wrapping_mul(x)),
                Op::Min => *v.iter().min().unwrap(),
                Op::Max => *v.iter().max().unwrap(),
                _ => unreachable!(),
            })
        }
        DataType::Bool => {
            let v = vals.iter().map(|&x| x != 0.0);
            let r = match op {
                Op::LogicalAnd => v.reduce(|a, x| a && x).unwrap_or(true),
                Op::LogicalOr => v.reduce(|a, x| a || x).unwrap_or(false),
                _ => unreachable!(),
            };
            f64::from(u8::from(r))
        }
        _ => unreachable!(),
    }
}

/// Every (operator, dtype) pair PopART supports, but `local`.
fn op_dtypes() -> Vec<(Op, DataType)> {
    let mut v = Vec::new();
    for op in Op::ALL {
        for dt in [DataType::Float32, DataType::Float16, DataType::Int32, DataType::Uint32, DataType::Bool] {
            if op != Op::Local && op.supports(dt) {
                v.push((op, dt));
            }
        }
    }
    v
}

/// Per-replica data of `n` elements: small values so products of 8 stay exact.
fn data(rng: &mut Rng, dtype: DataType, n: usize) -> Vec<f64> {
    match dtype {
        DataType::Bool => (0..n).map(|_| f64::from(u8::from(!rng.next_u64().is_multiple_of(4)))).collect(),
        DataType::Int32 => rng.vec(n, -5.0, 5.0).into_iter().map(f64::round).collect(),
        DataType::Uint32 => rng.vec(n, 0.0, 5.0).into_iter().map(f64::floor).collect(),
        DataType::Float16 => rng.vec(n, -2.0, 2.0).into_iter().map(|x| f16::from_f64(x).to_f64()).collect(),
        _ => rng.vec(n, -2.0, 2.0).into_iter().map(|x| f64::from(x as f32)).collect(),
    }
}

pub(super) const RFS: [usize; 4] = [1, 2, 4, 8];

#[test]
fn all_reduce_every_op_dtype_and_grouping_in_and_out_of_place() {
    let mut rng = Rng::new(7);
    let shape = [3, 5];
    let n = 15;
    for rf in RFS {
        for rg in groupings(rf) {
            let (s, g) = (rg.stride().unwrap(), rg.group_size());
            for (op, dt) in op_dtypes() {
                let vals: Vec<Vec<f64>> = (0..rf).map(|_| data(&mut rng, dt, n)).collect();
                let inputs: Vec<Vec<HostTensor>> =
                    vals.iter().map(|v| vec![HostTensor::from_f64_values(dt, &shape, v)]).collect();
                for def in [&ir::ReplicatedAllReduce as &'static dyn OpDef, &ir::ReplicatedAllReduceInplace] {
                    let outs = run(rf, def, &attrs(op, s, g), &inputs);
                    for (r, out) in outs.iter().enumerate() {
                        let members = rg.members(rg.group_at(r));
                        let want: Vec<f64> = (0..n)
                            .map(|e| reference(op, dt, &members.iter().map(|&m| vals[m][e]).collect::<Vec<_>>()))
                            .collect();
                        assert_eq!(out[0].info, inputs[r][0].info);
                        assert_eq!(
                            out[0].to_f64_vec(),
                            want,
                            "{} {op} {dt} rf {rf} ({s},{g}) replica {r}",
                            def.op_type()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn large_all_reduce_splits_blocks_and_is_deterministic() {
    // More elements than one accumulation block per member, an uneven split,
    // and the same bits on every run whatever the thread timing.
    let (rf, n) = (8, 3 * super::BLOCK + 7);
    let mut rng = Rng::new(11);
    let vals: Vec<Vec<f64>> = (0..rf).map(|_| data(&mut rng, DataType::Float32, n)).collect();
    let inputs: Vec<Vec<HostTensor>> =
        vals.iter().map(|v| vec![HostTensor::from_f64_values(DataType::Float32, &[n], v)]).collect();
    let first = run(rf, &ir::ReplicatedAllReduce, &attrs(Op::Add, 1, rf), &inputs);
    let want: Vec<f64> = (0..n)
        .map(|e| reference(Op::Add, DataType::Float32, &(0..rf).map(|m| vals[m][e]).collect::<Vec<_>>()))
        .collect();
    for out in &first {
        assert_eq!(out[0].to_f64_vec(), want);
    }
    for _ in 0..10 {
        let again = run(rf, &ir::ReplicatedAllReduce, &attrs(Op::Add, 1, rf), &inputs);
        assert_eq!(again, first);
    }
}

#[test]
fn reduce_scatter_gives_each_member_its_shard_of_the_padded_reduction() {
    let mut rng = Rng::new(3);
    for rf in RFS {
        for rg in groupings(rf) {
            let (s, g) = (rg.stride().unwrap(), rg.group_size());
            for n in [7usize, 16] {
                let c = n.div_ceil(g);
                for (op, dt) in
                    op_dtypes().into_iter().chain([(Op::Local, DataType::Float32), (Op::Local, DataType::Bool)])
                {
                    let vals: Vec<Vec<f64>> = (0..rf).map(|_| data(&mut rng, dt, n)).collect();
                    let inputs: Vec<Vec<HostTensor>> =
                        vals.iter().map(|v| vec![HostTensor::from_f64_values(dt, &[n], v)]).collect();
                    let outs = run(rf, &ir::ReplicatedReduceScatter, &attrs(op, s, g), &inputs);
                    for (r, out) in outs.iter().enumerate() {
                        let members = rg.members(rg.group_at(r));
                        let j = rg.index_in_group(r);
                        let want: Vec<f64> = (j * c..j * c + c)
                            .map(|e| match (e < n, op) {
                                (false, _) => 0.0,
                                (true, Op::Local) => vals[r][e],
                                (true, _) => {
                                    reference(op, dt, &members.iter().map(|&m| vals[m][e]).collect::<Vec<_>>())
                                }
                            })
                            .collect();
                        assert_eq!(out[0].info.shape, vec![c]);
                        assert_eq!(out[0].to_f64_vec(), want, "{op} {dt} rf {rf} ({s},{g}) n {n} replica {r}");
                    }
                }
            }
        }
    }
}

#[test]
fn all_gather_concatenates_the_members_in_order() {
    let mut rng = Rng::new(5);
    for rf in RFS {
        for rg in groupings(rf) {
            let (s, g) = (rg.stride().unwrap(), rg.group_size());
            let group = attrs(Op::Add, s, g);
            for dt in [DataType::Float32, DataType::Float16, DataType::Int32, DataType::Bool] {
                let n = 5;
                let vals: Vec<Vec<f64>> = (0..rf).map(|_| data(&mut rng, dt, n)).collect();
                let inputs: Vec<Vec<HostTensor>> =
                    vals.iter().map(|v| vec![HostTensor::from_f64_values(dt, &[n], v)]).collect();
                // Flat, and into a meta shape that drops the padding of the last shard.
                let meta = vec![g * (n - 1) + 1];
                for (shape_attr, total) in [(None, g * n), (Some(meta.clone()), meta[0])] {
                    let a = match &shape_attr {
                        Some(sh) => shaped(Op::Add, s, g, Some(sh.iter().map(|&d| d as i64).collect())),
                        None => group.clone(),
                    };
                    let outs = run(rf, &ir::ReplicatedAllGather, &a, &inputs);
                    for (r, out) in outs.iter().enumerate() {
                        let members = rg.members(rg.group_at(r));
                        let want: Vec<f64> = members.iter().flat_map(|&m| vals[m].clone()).take(total).collect();
                        assert_eq!(out[0].to_f64_vec(), want, "{dt} rf {rf} ({s},{g}) shape {shape_attr:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn gathers_and_shards_into_attribute_shape() {
    // Autodiff's gradient ops: a gather into the forward input's shape
    // (dropping padding) and a shard shaped like a 2-D forward input, both
    // shapes given by attribute `shape`.
    let rf = 4;
    let mut rng = Rng::new(9);
    let vals: Vec<Vec<f64>> = (0..rf).map(|_| data(&mut rng, DataType::Float32, 4)).collect();
    let inputs: Vec<Vec<HostTensor>> =
        vals.iter().map(|v| vec![HostTensor::from_f64_values(DataType::Float32, &[4], v)]).collect();
    let outs = run(rf, &ir::ReplicatedAllGather, &shaped(Op::Add, 1, 4, Some(vec![3, 5])), &inputs);
    let want: Vec<f64> = vals.iter().flatten().copied().take(15).collect();
    for out in &outs {
        assert_eq!(out[0].info.shape, vec![3, 5]);
        assert_eq!(out[0].to_f64_vec(), want);
    }
    let big: Vec<Vec<f64>> = (0..rf).map(|_| data(&mut rng, DataType::Float32, 15)).collect();
    let inputs: Vec<Vec<HostTensor>> =
        big.iter().map(|v| vec![HostTensor::from_f64_values(DataType::Float32, &[3, 5], v)]).collect();
    let local = shaped(Op::Local, 1, 4, Some(vec![2, 2]));
    let outs = run(rf, &ir::ReplicatedReduceScatter, &local, &inputs);
    for (r, out) in outs.iter().enumerate() {
        let want: Vec<f64> = (4 * r..4 * r + 4).map(|e| if e < 15 { big[r][e] } else { 0.0 }).collect();
        assert_eq!(out[0].info.shape, vec![2, 2]);
        assert_eq!(out[0].to_f64_vec(), want);
    }
}

#[test]
fn multi_ipu_all_reduce_reduces_its_inputs() {
    let mut rng = Rng::new(13);
    for k in [1, 2, 4] {
        for (op, dt) in op_dtypes() {
            let vals: Vec<Vec<f64>> = (0..k).map(|_| data(&mut rng, dt, 6)).collect();
            let inputs: Vec<HostTensor> = vals.iter().map(|v| HostTensor::from_f64_values(dt, &[2, 3], v)).collect();
            let ipus = IpuAllReduceAttrs {
                op,
                ipus: (0..k as i64).collect(),
                identical_inputs: false,
                identical_grad_inputs: false,
            };
            let outs = run(1, &ir::AllReduce, &ipus.to_attrs(), std::slice::from_ref(&inputs));
            let want: Vec<f64> =
                (0..6).map(|e| reference(op, dt, &vals.iter().map(|v| v[e]).collect::<Vec<_>>())).collect();
            assert_eq!(outs[0].len(), k);
            for out in &outs[0] {
                assert_eq!(out.to_f64_vec(), want, "{op} {dt} k {k}");
            }
            let identity = IpuAllReduceAttrs { identical_inputs: true, ..ipus }.to_attrs();
            let outs = run(1, &ir::AllReduce, &identity, std::slice::from_ref(&inputs));
            assert_eq!(outs[0], inputs);
        }
    }
}

#[test]
fn without_a_replica_context_a_group_is_its_replica_alone() {
    let x = HostTensor::from_f64_values(DataType::Float32, &[4], &[1.0, -2.0, 3.0, 4.0]);
    let sq = run_on(1, &ir::ReplicatedAllReduce, &attrs(Op::SquareAdd, 1, 1), &[vec![x.clone()]], false).unwrap();
    assert_eq!(sq[0][0].to_f64_vec(), vec![1.0, 4.0, 9.0, 16.0]);
    let mean = run_on(1, &ir::ReplicatedAllReduceInplace, &attrs(Op::Mean, 1, 1), &[vec![x.clone()]], false).unwrap();
    assert_eq!(mean[0][0], x);
    let shard = run_on(1, &ir::ReplicatedReduceScatter, &attrs(Op::Local, 1, 1), &[vec![x.clone()]], false).unwrap();
    assert_eq!(shard[0][0], x);
    let gathered = run_on(1, &ir::ReplicatedAllGather, &attrs(Op::Add, 1, 1), &[vec![x.clone()]], false).unwrap();
    assert_eq!(gathered[0][0], x);
}

#[test]
fn unsupported_specs_are_build_errors() {
    let f = |s: &[usize]| TensorInfo::new(DataType::Float32, s);
    let b = TensorInfo::new(DataType::Bool, [4]);
    type Case = (&'static dyn OpDef, Attributes, Vec<TensorInfo>, Vec<TensorInfo>);
    let cases: Vec<Case> = vec![
        (&ir::ReplicatedAllReduce, attrs(Op::Add, 1, 2), vec![b.clone()], vec![b.clone()]),
        (&ir::ReplicatedAllReduce, attrs(Op::Add, 1, 2), vec![f(&[4])], vec![f(&[5])]),
        (&ir::ReplicatedAllReduce, Attributes::new(), vec![f(&[4])], vec![f(&[4])]),
        (&ir::ReplicatedAllGather, attrs(Op::Add, 1, 2), vec![f(&[4])], vec![f(&[4])]),
        (&ir::ReplicatedReduceScatter, attrs(Op::Add, 1, 2), vec![f(&[4])], vec![f(&[3])]),
        (&ir::ReplicatedReduceScatter, attrs(Op::SquareAdd, 1, 2), vec![b.clone()], vec![b]),
    ];
    for (def, a, ins, outs) in cases {
        let a = declared(def, &a);
        let spec = KernelSpec::new(
            def,
            &a,
            ins.into_iter().enumerate().map(|(i, t)| (i as u32, t)).collect(),
            outs.into_iter().enumerate().map(|(i, t)| (i as u32, t)).collect(),
        );
        let err = build_kernel(&spec).err().unwrap_or_else(|| panic!("{} must fail", def.op_type()));
        assert_eq!(err.op_type, def.op_type());
    }
}

#[test]
fn an_aborted_exchange_is_a_replica_aborted_error() {
    // Replica 1 never arrives: replica 0 waits until the communicator is aborted.
    let comm = Comm::new(2);
    let info = TensorInfo::new(DataType::Float32, [2]);
    let a = attrs(Op::Add, 1, 2);
    let spec = KernelSpec::new(&ir::ReplicatedAllReduce, &a, vec![(0, info.clone())], vec![(0, info)]);
    let kernel = build_kernel(&spec).unwrap();
    let x = [1f32, 2.0];
    let mut out = [0f32; 2];
    let (x_ptr, out_ptr) = (x.as_ptr() as usize, out.as_mut_ptr() as usize);
    let res = std::thread::scope(|s| {
        let (kernel, comm) = (&kernel, &comm);
        let h = s.spawn(move || {
            let ins = [x_ptr as *const u8];
            let outs = [out_ptr as *mut u8];
            // SAFETY: both buffers hold two f32s and outlive the scope.
            replicas::enter(0, comm, || unsafe { kernel.run(&KernelArgs { inputs: &ins, outputs: &outs }) })
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
        comm.abort();
        h.join().unwrap()
    });
    assert_eq!(res, Err(KernelRunError::ReplicaAborted));
}
