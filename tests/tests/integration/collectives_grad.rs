//! Collectives: the gradient graphs autodiff builds from PopART's rules (which
//! op, over which group), the ops PopART cannot differentiate, and the facade's
//! typed errors.

use std::collections::HashMap;

use popart_ir::AttrValue;
use popxl::ops::collectives::{self as coll, AllGatherShape, CollectiveOp};
use popxl::{transforms, Graph, Ir, PopXlError, ReplicaGroupingError, Tensor};

/// A function of one tensor, boxed to put several in a table.
type Unary<'a> = Box<dyn Fn(&Tensor) -> popxl::Result<Tensor> + 'a>;

fn ir_with(rf: usize) -> Ir {
    let ir = Ir::new();
    ir.set_replication_factor(rf).unwrap();
    ir
}

/// A graph of `f` on a float32 input of `shape`, and autodiff's result.
fn differentiate(
    ir: &Ir,
    shape: &[usize],
    f: impl Fn(&Tensor) -> popxl::Result<Tensor>,
) -> (Graph, popxl::Result<transforms::AutodiffOutput>) {
    let graph = ir.create_graph(|x: Tensor| f(&x), popxl::TensorSpec::new(shape.to_vec(), popxl::float32)).unwrap();
    let out = transforms::autodiff(&graph, None, None, &HashMap::new(), false);
    (graph, out)
}

/// `(op type, attributes)` of the ops of `g` whose type starts with `Replicated` or is `AllReduce`.
fn collectives_of(ir: &Ir, g: &Graph) -> Vec<(String, popart_ir::Attributes)> {
    ir.with_ir(|core| {
        core.graph(g.id())
            .unwrap()
            .ops()
            .filter(|op| op.op_type().starts_with("Replicated") || op.op_type() == "AllReduce")
            .map(|op| (op.op_type().to_string(), op.attrs.clone()))
            .collect()
    })
}

fn group_attrs(a: &popart_ir::Attributes) -> (Option<i64>, Option<i64>) {
    (a.int("stride"), a.int("group_size"))
}

#[test]
fn all_gather_gradient_is_a_local_reduce_scatter_over_the_same_group() {
    let ir = ir_with(8);
    let rg = ir.replica_grouping(2, Some(2)).unwrap();
    for mode in [AllGatherShape::Concat, AllGatherShape::NewAxis] {
        let (_, out) = differentiate(&ir, &[2, 3], |x| coll::replicated_all_gather(x, 1, Some(&rg), mode));
        let grad = out.unwrap().grad_info.graph();
        let ops = collectives_of(&ir, &grad);
        assert_eq!(ops.len(), 1, "{ops:?}");
        let (ty, attrs) = &ops[0];
        assert_eq!(ty, "ReplicatedReduceScatter");
        assert_eq!(attrs.str("op"), Some("local"));
        assert_eq!(group_attrs(attrs), (Some(2), Some(2)));
    }
}

#[test]
fn sharded_and_replicated_slices_have_all_gather_gradients() {
    let ir = ir_with(4);
    let rg = ir.replica_grouping(1, Some(4)).unwrap();
    let slicers: [(&str, Unary<'_>); 2] = [
        ("replica_sharded_slice", Box::new(|x| coll::replica_sharded_slice(x, Some(&rg)))),
        ("replicated_slice", Box::new(|x| coll::replicated_slice(x, 1, Some(&rg)))),
    ];
    for (what, f) in slicers {
        let (graph, out) = differentiate(&ir, &[3, 4], f);
        let info = out.unwrap().grad_info;
        let ops = collectives_of(&ir, &info.graph());
        assert_eq!(ops.len(), 1, "{what}: {ops:?}");
        assert_eq!(ops[0].0, "ReplicatedAllGather", "{what}");
        assert_eq!(group_attrs(&ops[0].1), (Some(1), Some(4)), "{what}");
        // The gradient has the forward input's shape (the gather drops padding).
        let dx = info.graph().outputs().unwrap();
        assert_eq!(dx[0].shape(), graph.inputs().unwrap()[0].shape(), "{what}");
    }
}

#[test]
fn padded_shard_gradient_drops_the_padding() {
    // 10 elements over 4 replicas: shards of 3, the last one padded.
    let ir = ir_with(4);
    let (graph, out) = differentiate(&ir, &[2, 5], |x| coll::replica_sharded_slice(x, None));
    let info = out.unwrap().grad_info;
    assert_eq!(graph.outputs().unwrap()[0].shape(), &[3]);
    assert_eq!(info.graph().outputs().unwrap()[0].shape(), &[2, 5]);
}

#[test]
fn all_reduce_gradient_swaps_the_identical_flags() {
    let ir = ir_with(1);
    type AllReduceFn = fn(&[&Tensor], Option<&[u32]>, CollectiveOp) -> popxl::Result<Vec<Tensor>>;
    let cases: [(AllReduceFn, bool, bool); 3] = [
        (coll::all_reduce, false, false),
        (coll::all_reduce_identical_inputs, true, false),
        (coll::all_reduce_identical_grad_inputs, false, true),
    ];
    for (f, identical_in, identical_grad) in cases {
        let graph = ir
            .create_graph(
                |a: Tensor, b: Tensor| -> popxl::Result<Vec<Tensor>> { f(&[&a, &b], Some(&[0, 1]), CollectiveOp::Add) },
                (popxl::TensorSpec::new(vec![2], popxl::float32), popxl::TensorSpec::new(vec![2], popxl::float32)),
            )
            .unwrap();
        let info = transforms::autodiff(&graph, None, None, &HashMap::new(), false).unwrap().grad_info;
        let ops = collectives_of(&ir, &info.graph());
        assert_eq!(ops.len(), 1);
        let (ty, attrs) = &ops[0];
        assert_eq!(ty, "AllReduce");
        assert_eq!(attrs.bool("identical_inputs"), Some(identical_grad));
        assert_eq!(attrs.bool("identical_grad_inputs"), Some(identical_in));
        assert_eq!(attrs.get("ipus"), Some(&AttrValue::Ints(vec![0, 1])));
    }
}

#[test]
fn collectives_without_a_popart_gradient_are_autodiff_errors() {
    let ir = ir_with(2);
    let cases: [(&str, Unary<'static>); 3] = [
        ("replicated_all_reduce", Box::new(|x| coll::replicated_all_reduce(x, CollectiveOp::Add, None))),
        ("replicated_reduce_scatter", Box::new(|x| coll::replicated_reduce_scatter(x, CollectiveOp::Add, None, false))),
        ("all_reduce(mean)", Box::new(|x| Ok(coll::all_reduce(&[x], Some(&[0]), CollectiveOp::Mean)?.remove(0)))),
    ];
    for (what, f) in cases {
        let (_, out) = differentiate(&ir, &[4], f);
        match out {
            Err(PopXlError::Autodiff(e)) => assert!(!e.to_string().is_empty(), "{what}"),
            other => panic!("{what}: expected an autodiff error, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn facade_errors_are_typed() {
    let ir = ir_with(4);
    let _g = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32; 6], "x").unwrap();
    let m = popxl::variable(ndarray::Array2::<f32>::zeros((3, 2)), "m").unwrap();
    let b = popxl::variable(vec![true; 4], "b").unwrap();

    // A grouping without a constant stride.
    let odd = ir.replica_grouping_from_assignments(&[0, 1, 1, 0]).unwrap();
    let e = coll::replicated_all_reduce(&x, CollectiveOp::Add, Some(&odd)).unwrap_err();
    assert!(matches!(e, PopXlError::ReplicaGrouping(ReplicaGroupingError::NotConst { .. })), "{e}");
    // A grouping made for another replication factor.
    let other = ir_with(8).replica_grouping(1, Some(2)).unwrap();
    let e = coll::replicated_all_gather(&x, 0, Some(&other), AllGatherShape::Auto).unwrap_err();
    assert!(
        matches!(
            e,
            PopXlError::ReplicaGrouping(ReplicaGroupingError::WrongReplicationFactor { grouping: 8, num_replicas: 4 })
        ),
        "{e}"
    );
    // Types the operator does not take.
    assert!(matches!(coll::replicated_all_reduce(&b, CollectiveOp::Add, None), Err(PopXlError::Ir(_))));
    assert!(matches!(coll::replicated_reduce_scatter(&x, CollectiveOp::Or, None, false), Err(PopXlError::Ir(_))));
    assert!(coll::replicated_all_reduce(&b, CollectiveOp::And, None).is_ok());
    // Axes.
    assert!(matches!(
        coll::replicated_all_gather(&m, 2, None, AllGatherShape::Concat),
        Err(PopXlError::AxisOutOfRange { .. })
    ));
    assert!(matches!(coll::replicated_slice(&m, -3, None), Err(PopXlError::AxisOutOfRange { .. })));
    let e = coll::replicated_slice(&m, 0, None).unwrap_err();
    assert!(matches!(e, PopXlError::NotDivisible { .. }), "{e}");
    assert!(e.to_string().contains("must equally divide axis"), "{e}");
    // No meta shape to gather into.
    let e = coll::replicated_all_gather(&x, 0, None, AllGatherShape::MetaShape).unwrap_err();
    assert!(matches!(e, PopXlError::NoMetaShape { .. }), "{e}");
    assert!(e.to_string().contains("no meta shape"), "{e}");
    // all_reduce lists.
    assert!(matches!(coll::all_reduce(&[], None, CollectiveOp::Add), Err(PopXlError::EmptyArgument { .. })));
    let e = coll::all_reduce(&[&x, &x], Some(&[0]), CollectiveOp::Add).unwrap_err();
    assert!(matches!(e, PopXlError::LengthMismatch { left: 2, right: 1, .. }), "{e}");
    assert!(e.to_string().contains("2 tensors but 1 IPUs"), "{e}");
    assert!(matches!(coll::all_reduce(&[&x], None, CollectiveOp::Add), Err(PopXlError::UndefinedValue { .. })));
    assert!(matches!(coll::all_reduce(&[&x, &m], Some(&[0, 1]), CollectiveOp::Add), Err(PopXlError::Ir(_))));
    // Strings.
    assert!("mul".parse::<CollectiveOp>().is_ok());
    assert!(matches!("local".parse::<CollectiveOp>(), Err(PopXlError::UnknownName { .. })));
    assert!(matches!("stack".parse::<AllGatherShape>(), Err(PopXlError::UnknownName { .. })));
}

#[test]
fn meta_shapes_follow_shards_through_updates_and_all_reduces() {
    let ir = ir_with(4);
    let _g = ir.main_graph().enter();
    let x = popxl::variable(ndarray::Array2::<f32>::zeros((3, 3)), "x").unwrap();
    let s = coll::replica_sharded_slice(&x, None).unwrap();
    assert_eq!(s.meta_shape().unwrap(), Some(vec![3, 3]));
    let outer = ir.replica_grouping(1, Some(1)).unwrap();
    let r = coll::replicated_all_reduce_(&s, CollectiveOp::Mean, Some(&outer)).unwrap();
    assert_eq!(r.meta_shape().unwrap(), Some(vec![3, 3]));
    let y = coll::replicated_all_gather(&r, 0, None, AllGatherShape::Auto).unwrap();
    assert_eq!(y.shape(), &[3, 3]);
    // Not a sharded output: no meta shape.
    let plain = coll::replicated_reduce_scatter(&x, CollectiveOp::Add, None, false).unwrap();
    assert_eq!(plain.meta_shape().unwrap(), None);
    assert_eq!(coll::replicated_all_gather(&plain, 0, None, AllGatherShape::Auto).unwrap().shape(), &[12]);
    // A remote replica-sharded variable loaded from its buffer.
    let buf = popxl::replica_sharded_buffer(&[2, 5], popxl::float32, None, None, 1).unwrap();
    let _v = popxl::remote_replica_sharded_variable(
        ndarray::Array2::<f32>::zeros((2, 5)),
        &buf,
        0,
        "rv",
        None,
        popxl::RetrievalMode::OnePerGroup,
    )
    .unwrap();
    let loaded = popxl::ops::remote_load(&buf, 0, "loaded").unwrap();
    assert_eq!(loaded.meta_shape().unwrap(), Some(vec![2, 5]));
}

// ----- PopXL's integration tests (tests/integration/popxl/test_replicated_all_gather.py,
// test_replicated_slice.py): differentiate the collective in a subgraph, call the
// gradient graph with the output gradient alone (`ops.call(dgraph.graph, y)`) and
// run the replicated program on `cpu`. -----

/// Uniform values in [0, 1) from a fixed linear congruential sequence.
fn rand_vals(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

/// Build in the main graph: `y = call(graph(f), x)`, `dx = call(autodiff(graph), y)`
/// (the gradient graph given nothing but the output gradient), both stored to
/// the host. `x` is made by `make_x` in the main graph. Runs once on `cpu` and
/// returns the host arrays of `y` and `dx` (leading replica dimension) and `dx`'s
/// shape per replica.
fn run_grad_with_dy_only(
    rf: usize,
    make_x: impl FnOnce(&Ir) -> popxl::Result<Tensor>,
    f: impl Fn(&Tensor) -> popxl::Result<Tensor>,
) -> (Vec<f64>, Vec<usize>, Vec<f64>, Vec<usize>) {
    let ir = ir_with(rf);
    let (ys, dxs, y_shape, dx_shape) = ir
        .main_graph()
        .with(|| {
            let x = make_x(&ir)?;
            let graph = ir.create_graph(|t: Tensor| f(&t), &x)?;
            let grad = transforms::autodiff(&graph, None, None, &HashMap::new(), false)?.grad_info.graph();
            let y = popxl::ops::call(&graph, &[&x], &[])?.remove(0);
            let dx = popxl::ops::call(&grad, &[&y], &[])?.remove(0);
            let ys = popxl::d2h_stream(y.shape().to_vec(), popxl::float32, "y_stream")?;
            popxl::ops::host_store(&ys, &y)?;
            let dxs = popxl::d2h_stream(dx.shape().to_vec(), popxl::float32, "dx_stream")?;
            popxl::ops::host_store(&dxs, &dx)?;
            Ok::<_, PopXlError>((ys, dxs, y.shape().to_vec(), dx.shape().to_vec()))
        })
        .unwrap();
    let mut session = popxl_session::Session::new(ir, "cpu").unwrap();
    let out = session.scope(|s| s.run(&Default::default())).unwrap();
    assert_eq!(out[&ys].shape()[0], rf);
    (out[&ys].to_f64_vec(), y_shape, out[&dxs].to_f64_vec(), dx_shape)
}

/// A variable holding `x_np[r]` (of shape `shape`) on replica `r`
/// (PopXL's `variable(x_np, replica_grouping=rg.transpose())`).
fn per_replica_variable(ir: &Ir, x_np: &[f32], shape: &[usize]) -> popxl::Result<Tensor> {
    let rf = ir.replication_factor();
    let rg = ir.replica_grouping(1, Some(rf))?.transpose();
    let mut host = vec![rf];
    host.extend_from_slice(shape);
    let data = ndarray::ArrayD::from_shape_vec(host, x_np.to_vec()).unwrap();
    popxl::variable_grouped(data, "x", &rg, popxl::RetrievalMode::OnePerGroup)
}

#[test]
fn all_gather_gradient_graph_takes_only_the_output_gradient() {
    // x_np: [replication, 4, 3]; replica r holds x_np[r].
    let rf = 4;
    let x_np = rand_vals(rf * 12, 1);
    let x64: Vec<f64> = x_np.iter().map(|&v| v as f64).collect();
    for (mode, axis) in [(AllGatherShape::NewAxis, 0), (AllGatherShape::Concat, 1), (AllGatherShape::Auto, 1)] {
        let (y, y_shape, dx, dx_shape) = run_grad_with_dy_only(
            rf,
            |ir| per_replica_variable(ir, &x_np, &[4, 3]),
            |x| {
                let rg = x.ir()?.replica_grouping(1, Some(rf))?;
                coll::replicated_all_gather(x, axis, Some(&rg), mode)
            },
        );
        // y: new axis -> x_np; concat on axis 1 -> concatenate(split(x_np), axis=1).
        let want_y: Vec<f64> = match mode {
            AllGatherShape::NewAxis => {
                assert_eq!(y_shape, [rf, 4, 3]);
                x64.clone()
            }
            _ => {
                assert_eq!(y_shape, [4, rf * 3], "{mode:?}");
                let x = &x64;
                (0..4).flat_map(|i| (0..rf).flat_map(move |r| (0..3).map(move |j| x[r * 12 + i * 3 + j]))).collect()
            }
        };
        let per = want_y.len();
        for r in 0..rf {
            assert_eq!(&y[r * per..(r + 1) * per], &want_y[..], "{mode:?}: y on replica {r}");
        }
        // dx = the replica's own part of dy = y: x_np[r] on replica r.
        assert_eq!(dx_shape, [4, 3], "{mode:?}");
        assert_eq!(dx, x64, "{mode:?}: dx");
    }
}

#[test]
fn meta_shape_all_gather_of_a_shard_gradient_takes_only_the_output_gradient() {
    // x_np: [replication, 3, 2] sharded over the replicas: each holds 6 elements.
    let rf = 4;
    let x_np = rand_vals(rf * 6, 2);
    let x64: Vec<f64> = x_np.iter().map(|&v| v as f64).collect();
    let (y, y_shape, dx, dx_shape) = run_grad_with_dy_only(
        rf,
        |_| {
            let data = ndarray::ArrayD::from_shape_vec(vec![rf, 3, 2], x_np.clone()).unwrap();
            Ok(popxl::replica_sharded_variable(data, "x", None, None, popxl::RetrievalMode::OnePerGroup)?.1)
        },
        // A graph input carries no meta shape: gather into the sharded variable's.
        |x| {
            let full = coll::replicated_all_gather(x, 0, None, AllGatherShape::Concat)?;
            full.reshape(&[rf as i64, 3, 2])
        },
    );
    assert_eq!(y_shape, [rf, 3, 2]);
    for r in 0..rf {
        assert_eq!(&y[r * 24..(r + 1) * 24], &x64[..], "y on replica {r}");
    }
    // dx on replica r: its shard of y = x_np, i.e. x_np.flatten()[6r..6r + 6].
    assert_eq!(dx_shape, [6]);
    assert_eq!(dx, x64);
}

#[test]
fn replicated_slice_gradient_graph_takes_only_the_output_gradient() {
    // x_np: [replication, 4, 3], the same on every replica; replica r's slice is x_np[r].
    let rf = 4;
    let x_np = rand_vals(rf * 12, 3);
    let x64: Vec<f64> = x_np.iter().map(|&v| v as f64).collect();
    let slicers: [(&str, Unary<'static>); 2] = [
        (
            "replicated_slice",
            Box::new(move |x| {
                let rg = x.ir()?.replica_grouping(1, Some(rf))?;
                coll::replicated_slice(x, 0, Some(&rg))
            }),
        ),
        ("replica_sharded_slice", Box::new(|x| coll::replica_sharded_slice(x, None))),
    ];
    for (what, f) in slicers {
        let (y, y_shape, dx, dx_shape) = run_grad_with_dy_only(
            rf,
            |_| popxl::variable(ndarray::ArrayD::from_shape_vec(vec![rf, 4, 3], x_np.clone()).unwrap(), "x"),
            f,
        );
        // y on replica r: x_np[r] (shape [1, 4, 3] or the 1-D shard of 12).
        assert_eq!(y_shape.iter().product::<usize>(), 12, "{what}");
        assert_eq!(y, x64, "{what}: y");
        // dx: the gather of every replica's dy = y, i.e. x_np, on every replica.
        assert_eq!(dx_shape, [rf, 4, 3], "{what}");
        for r in 0..rf {
            assert_eq!(&dx[r * 48..(r + 1) * 48], &x64[..], "{what}: dx on replica {r}");
        }
    }
}

#[test]
fn padded_shard_gradient_graph_takes_only_the_output_gradient() {
    // 10 elements over 4 replicas: shards of 3, the last one padded with zeros.
    let rf = 4;
    let x_np = rand_vals(10, 4);
    let x64: Vec<f64> = x_np.iter().map(|&v| v as f64).collect();
    let (y, _, dx, dx_shape) = run_grad_with_dy_only(
        rf,
        |_| popxl::variable(ndarray::ArrayD::from_shape_vec(vec![2, 5], x_np.clone()).unwrap(), "x"),
        |x| coll::replica_sharded_slice(x, None),
    );
    let padded: Vec<f64> = (0..12).map(|e| x64.get(e).copied().unwrap_or(0.0)).collect();
    assert_eq!(y, padded);
    assert_eq!(dx_shape, [2, 5]);
    for r in 0..rf {
        assert_eq!(&dx[r * 10..(r + 1) * 10], &x64[..], "dx on replica {r}");
    }
}
