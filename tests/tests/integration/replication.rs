//! Replicated execution on `cpu` and `ipu_model`: `[num_host_transfers,
//! replication_factor, *shape]` host arrays, per-replica variables, grouped
//! and sharded variables moved by `weights_from_host` / `weights_to_host`.

use popxl::{ops, HostArray, Ir, RetrievalMode};
use popxl_session::Session;

/// y = x + w per replica, w += x; x streamed as [nht, rf, 3].
fn add_program(rf: usize, nht: usize) -> (Ir, popxl::HostToDeviceStream, popxl::DeviceToHostStream, popxl::Tensor) {
    let ir = Ir::new();
    ir.set_replication_factor(rf).unwrap();
    ir.set_num_host_transfers(nht).unwrap();
    let (x, y, w) = ir
        .main_graph()
        .with(|| {
            let x = popxl::h2d_stream([3], popxl::float32, "x")?;
            let y = popxl::d2h_stream([3], popxl::float32, "y")?;
            let w = popxl::variable(vec![1.0f32, 2.0, 3.0], "w")?;
            let _s = popxl::in_sequence(true);
            let xv = ops::host_load(&x, "x")?;
            let out = &xv + &w;
            ops::host_store(&y, &out)?;
            ops::scaled_add_(&w, &xv, 1.0, 1.0)?;
            Ok::<_, popxl::PopXlError>((x, y, w))
        })
        .unwrap();
    (ir, x, y, w)
}

#[test]
fn each_replica_reads_and_writes_its_slice_of_the_host_arrays() {
    for device in ["cpu", "ipu_model"] {
        for (rf, nht) in [(1, 1), (2, 1), (2, 3), (4, 2), (8, 1)] {
            let (ir, x, y, w) = add_program(rf, nht);
            let mut session = Session::new(ir, device).unwrap();
            let n = nht * rf * 3;
            let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let shape: Vec<usize> = session.host_shape(&[3]);
            let input = HostArray::from(ndarray::ArrayD::from_shape_vec(shape.clone(), data.clone()).unwrap());
            let out = session.scope(|s| s.run(&[(x.clone(), input)].into())).unwrap();
            let got = out[&y].to_f64_vec();
            // One run executes the host load once: replica r reads element
            // (0, r); later elements are left for later loads (none here).
            let mut expected = vec![0.0; n];
            for r in 0..rf {
                for (j, w) in [1.0, 2.0, 3.0].into_iter().enumerate() {
                    let e = r * 3 + j;
                    expected[e] = data[e] as f64 + w;
                }
            }
            assert_eq!(got, expected, "{device} rf {rf} nht {nht}");
            // Ungrouped variables are read back from replica 0.
            let w0: Vec<f64> = (0..3).map(|j| [1.0, 2.0, 3.0][j] + data[j] as f64).collect();
            assert_eq!(session.get_tensor_data(&w).unwrap().to_f64_vec(), w0, "{device} rf {rf} nht {nht}");
        }
    }
}

#[test]
fn wrong_replica_dim_is_an_error() {
    let (ir, x, _, _) = add_program(2, 1);
    let mut session = Session::new(ir, "cpu").unwrap();
    let bad = HostArray::from(ndarray::ArrayD::<f32>::zeros(vec![3, 3]));
    let err = session.scope(|s| s.run(&[(x.clone(), bad)].into())).unwrap_err();
    assert!(matches!(err, popxl_session::SessionError::WrongReplicaDim { got: 3, replication_factor: 2, .. }), "{err}");
}

#[test]
fn grouped_variables_hold_one_value_per_group() {
    let ir = Ir::new();
    ir.set_replication_factor(4).unwrap();
    let rg = ir.replica_grouping(2, Some(2)).unwrap(); // [0, 1, 0, 1]
    let (w, y) = ir
        .main_graph()
        .with(|| {
            let w = popxl::variable_grouped(
                ndarray::array![[1.0f32, 2.0], [10.0, 20.0]],
                "w",
                &rg,
                RetrievalMode::OnePerGroup,
            )?;
            let a =
                popxl::variable_grouped(ndarray::Array2::<f32>::zeros((2, 2)), "a", &rg, RetrievalMode::AllReplicas)?;
            let y = popxl::d2h_stream([2], popxl::float32, "y")?;
            let _s = popxl::in_sequence(true);
            ops::host_store(&y, &w)?;
            ops::scaled_add_(&w, &w, 1.0, 1.0)?;
            ops::scaled_add_(&a, &w, 1.0, 1.0)?;
            Ok::<_, popxl::PopXlError>(((w, a), y))
        })
        .unwrap();
    let (w, a) = w;
    let mut session = Session::new(ir, "cpu").unwrap();
    let out = session.scope(|s| s.run(&Default::default())).unwrap();
    assert_eq!(out[&y].shape(), &[4, 2]);
    assert_eq!(out[&y].to_f64_vec(), [1.0, 2.0, 10.0, 20.0, 1.0, 2.0, 10.0, 20.0]);
    let wd = session.get_tensor_data(&w).unwrap();
    assert_eq!((wd.shape(), wd.to_f64_vec()), (&[2usize, 2][..], vec![2.0, 4.0, 20.0, 40.0]));
    let ad = session.get_tensor_data(&a).unwrap();
    assert_eq!((ad.shape(), ad.to_f64_vec()), (&[4usize, 2][..], vec![2.0, 4.0, 20.0, 40.0, 2.0, 4.0, 20.0, 40.0]));
    assert!(matches!(
        session.write_variable_data(&a, &HostArray::from(ndarray::Array2::<f32>::zeros((2, 2)))),
        Err(popxl_session::SessionError::WriteAllReplicas { .. })
    ));
    // Writing per group reaches every replica of the group.
    session.write_variable_data(&w, &HostArray::from(ndarray::array![[5.0f32, 6.0], [7.0, 8.0]])).unwrap();
    let out = session.scope(|s| s.run(&Default::default())).unwrap();
    assert_eq!(out[&y].to_f64_vec(), [5.0, 6.0, 7.0, 8.0, 5.0, 6.0, 7.0, 8.0]);
}

#[test]
fn sharded_variables_scatter_and_gather_their_shards() {
    let ir = Ir::new();
    ir.set_replication_factor(2).unwrap();
    let (full, y) = ir
        .main_graph()
        .with(|| {
            let (full, shard) =
                popxl::replica_sharded_variable(vec![1.0f32, 2.0, 3.0], "w", None, None, RetrievalMode::OnePerGroup)?;
            let y = popxl::d2h_stream([2], popxl::float32, "y")?;
            let _s = popxl::in_sequence(true);
            ops::host_store(&y, &shard)?;
            ops::scaled_add_(&shard, &shard, 2.0, 0.0)?;
            Ok::<_, popxl::PopXlError>((full, y))
        })
        .unwrap();
    let mut session = Session::new(ir, "cpu").unwrap();
    let out = session.scope(|s| s.run(&Default::default())).unwrap();
    // Shards of [1, 2, 3] padded to 4: [1, 2] and [3, 0].
    assert_eq!(out[&y].to_f64_vec(), [1.0, 2.0, 3.0, 0.0]);
    assert_eq!(session.get_tensor_data(&full).unwrap().to_f64_vec(), [2.0, 4.0, 6.0]);
}

#[test]
fn remote_sharded_variables_live_as_shards_in_each_replicas_streaming_memory() {
    let ir = Ir::new();
    ir.set_replication_factor(2).unwrap();
    let (w, y) = ir
        .main_graph()
        .with(|| {
            let buf = popxl::replica_sharded_buffer(&[5], popxl::float32, None, None, 1)?;
            assert_eq!(buf.tensor_shape(), &[3]);
            let data = vec![1.0f32, 2.0, 3.0, 4.0, 5.0];
            let w = popxl::remote_replica_sharded_variable(data, &buf, 0, "w", None, RetrievalMode::OnePerGroup)?;
            let y = popxl::d2h_stream([3], popxl::float32, "y")?;
            let _s = popxl::in_sequence(true);
            let shard = ops::remote_load(&buf, 0, "shard")?;
            ops::host_store(&y, &shard)?;
            let doubled = &shard + &shard;
            ops::remote_store(&buf, 0, &doubled)?;
            Ok::<_, popxl::PopXlError>((w, y))
        })
        .unwrap();
    assert_eq!(w.shape_on_host().unwrap(), vec![5]);
    for device in ["cpu", "ipu_model"] {
        let mut session = Session::new(ir.clone(), device).unwrap();
        let out = session.scope(|s| s.run(&Default::default())).unwrap();
        assert_eq!(out[&y].to_f64_vec(), [1.0, 2.0, 3.0, 4.0, 5.0, 0.0], "{device}");
        assert_eq!(session.get_tensor_data(&w).unwrap().to_f64_vec(), [2.0, 4.0, 6.0, 8.0, 10.0], "{device}");
    }
}

/// PopXL's `remote_variable(data, buffer, 0, replica_grouping=rg, retrieval_mode=...)`:
/// each replica's entry holds its group's value; stores reach each group's host value.
#[test]
fn grouped_remote_variables_hold_one_value_per_group_in_streaming_memory() {
    let ir = Ir::new();
    ir.set_replication_factor(4).unwrap();
    let rg = ir.replica_grouping(2, Some(2)).unwrap(); // [0, 1, 0, 1]
    let values = ndarray::array![[1.0f32, 2.0], [10.0, 20.0]];
    let ((w, a), y) = ir
        .main_graph()
        .with(|| {
            let buf = popxl::remote_buffer([2], popxl::float32, 2)?;
            let w = popxl::remote_variable_grouped(values.clone(), &buf, 0, "w", &rg, RetrievalMode::OnePerGroup)?;
            let a = popxl::remote_variable_grouped(values.clone(), &buf, 1, "a", &rg, RetrievalMode::AllReplicas)?;
            let y = popxl::d2h_stream([2], popxl::float32, "y")?;
            let _s = popxl::in_sequence(true);
            let loaded = ops::remote_load(&buf, 0, "w_loaded")?;
            ops::host_store(&y, &loaded)?;
            let tripled = &loaded * 3.0;
            ops::remote_store(&buf, 0, &tripled)?;
            let la = ops::remote_load(&buf, 1, "a_loaded")?;
            let plus = &la + &loaded;
            ops::remote_store(&buf, 1, &plus)?;
            Ok::<_, popxl::PopXlError>(((w, a), y))
        })
        .unwrap();
    assert_eq!(w.shape_on_host().unwrap(), vec![2, 2]);
    // Data of the wrong shape for the buffer is refused, naming the variable.
    let e = ir
        .main_graph()
        .with(|| {
            let buf = popxl::remote_buffer([2], popxl::float32, 1)?;
            popxl::remote_variable_grouped(vec![1.0f32, 2.0, 3.0], &buf, 0, "bad", &rg, RetrievalMode::OnePerGroup)
        })
        .unwrap_err();
    assert!(e.to_string().contains("bad"), "{e}");
    for device in ["cpu", "ipu_model"] {
        let mut session = Session::new(ir.clone(), device).unwrap();
        let out = session.scope(|s| s.run(&Default::default())).unwrap();
        assert_eq!(out[&y].to_f64_vec(), [1.0, 2.0, 10.0, 20.0, 1.0, 2.0, 10.0, 20.0], "{device}");
        let wd = session.get_tensor_data(&w).unwrap();
        assert_eq!((wd.shape(), wd.to_f64_vec()), (&[2usize, 2][..], vec![3.0, 6.0, 30.0, 60.0]), "{device}");
        let ad = session.get_tensor_data(&a).unwrap();
        let want = vec![2.0, 4.0, 20.0, 40.0, 2.0, 4.0, 20.0, 40.0];
        assert_eq!((ad.shape(), ad.to_f64_vec()), (&[4usize, 2][..], want), "{device}");
        // Written per group, read back by each group's replicas on the next run.
        session.write_variable_data(&w, &HostArray::from(ndarray::array![[5.0f32, 6.0], [7.0, 8.0]])).unwrap();
        let out = session.scope(|s| s.run(&Default::default())).unwrap();
        assert_eq!(out[&y].to_f64_vec(), [5.0, 6.0, 7.0, 8.0, 5.0, 6.0, 7.0, 8.0], "{device}");
    }
}

#[test]
fn groupings_and_sharding_mistakes_are_typed_errors() {
    let ir = Ir::new();
    ir.set_replication_factor(4).unwrap();
    assert!(matches!(ir.replica_grouping(3, None), Err(popxl::PopXlError::ReplicaGrouping(_))));
    assert!(ir.replica_grouping_from_assignments(&[0, 1, 1]).is_err());
    let other = Ir::new();
    other.set_replication_factor(2).unwrap();
    let rg2 = other.replica_grouping(1, Some(1)).unwrap();
    let rg = ir.replica_grouping(1, Some(2)).unwrap();
    let _g = ir.main_graph().enter();
    // A grouping of another replication factor, data without the group dim, a bad shard count.
    assert!(matches!(
        popxl::variable_grouped(ndarray::Array2::<f32>::zeros((2, 3)), "a", &rg2, RetrievalMode::OnePerGroup),
        Err(popxl::PopXlError::ReplicaGrouping(popxl::ReplicaGroupingError::WrongReplicationFactor { .. }))
    ));
    assert!(matches!(
        popxl::variable_grouped(vec![1.0f32, 2.0, 3.0], "b", &rg, RetrievalMode::OnePerGroup),
        Err(e @ popxl::PopXlError::ShapeMismatch { .. }) if e.to_string().contains("leading dim of 2")
    ));
    assert!(
        popxl::replica_sharded_variable(vec![1.0f32; 4], "c", Some(&rg), Some(3), RetrievalMode::OnePerGroup).is_err()
    );
    let single = Ir::new();
    let _s = single.main_graph().enter();
    let buf = popxl::remote_buffer([2], popxl::float32, 1).unwrap();
    assert!(popxl::remote_replica_sharded_variable(vec![1.0f32; 4], &buf, 0, "d", None, RetrievalMode::OnePerGroup)
        .is_err());
}

#[test]
fn gradient_all_reduce_and_sgd_update_fuse_into_one_collective() {
    use popxl::ops::collectives::{replicated_all_reduce, CollectiveOp};
    let build = || {
        let ir = Ir::new();
        ir.set_replication_factor(2).unwrap();
        let (x, w) = ir
            .main_graph()
            .with(|| {
                let x = popxl::h2d_stream([3], popxl::float32, "g")?;
                let w = popxl::variable(vec![1.0f32, 2.0, 3.0], "w")?;
                let _s = popxl::in_sequence(true);
                let g = ops::host_load(&x, "g")?;
                let r = replicated_all_reduce(&g, CollectiveOp::Mean, None)?;
                ops::scaled_add_(&w, &r, 1.0, -0.5)?;
                Ok::<_, popxl::PopXlError>((x, w))
            })
            .unwrap();
        (ir, x, w)
    };
    let grads = HostArray::from(ndarray::array![[1.0f32, 2.0, 3.0], [3.0, 4.0, 7.0]]);
    let mut results = Vec::new();
    for patterns in [true, false] {
        let (ir, x, w) = build();
        let options = popxl_session::SessionOptions { patterns, ..Default::default() };
        let mut session = Session::with_options(ir, "cpu", options).unwrap();
        let fused = session
            .prepared_ir()
            .graphs()
            .flat_map(|g| g.ops().map(|o| o.op_type()))
            .filter(|t| *t == "ReplicatedAllReduceScaledAddInplace")
            .count();
        assert_eq!(fused, usize::from(patterns));
        session.scope(|s| s.run(&[(x.clone(), grads.clone())].into())).unwrap();
        results.push(session.get_tensor_data(&w).unwrap().to_f64_vec());
    }
    // w - 0.5 * mean(g): [1 - 1, 2 - 1.5, 3 - 2.5].
    assert_eq!(results[0], [0.0, 0.5, 0.5]);
    assert_eq!(results[0], results[1]);
}
