//! Every build-time mistake PopXL rejects returns a typed `PopXlError` naming the culprit.

use ndarray::{Array1, Array2};
use popxl::{float32, int32, ops, Ir, PopXlError, Tensor, TensorSpec};

/// Main graph with a float32[2] variable `x`, a float32[2] variable `value`, and a
/// graph `increment_fn(x)` with an extra graph input `value` returning `x + value`.
struct Fixture {
    ir: Ir,
    x: Tensor,
    value: Tensor,
    graph: popxl::Graph,
    value_input: Tensor,
}

fn fixture() -> Fixture {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(Array1::<f32>::ones(2), "x").unwrap();
    let value = popxl::variable(Array1::<f32>::ones(2), "value").unwrap();
    let mut value_input = None;
    let increment_fn = |x: Tensor| -> popxl::Result<Tensor> {
        let v = popxl::graph_input(x.shape(), x.dtype(), "value")?;
        value_input = Some(v.clone());
        Ok(&x + &v)
    };
    let graph = ir.create_graph_named("increment_fn", increment_fn, &x).unwrap();
    Fixture { ir, x, value, graph, value_input: value_input.unwrap() }
}

#[test]
fn missing_call_input_is_named() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let err = ops::call(&f.graph, &[&f.x], &[]).unwrap_err();
    assert_eq!(err, PopXlError::MissingCallInputs { graph: "increment_fn".into(), missing: vec!["value".into()] });
    assert_eq!(
        err.to_string(),
        "Not enough inputs have been provided for the graph `increment_fn`: call of graph `increment_fn` is missing inputs [value]"
    );
    // Nothing was created.
    assert_eq!(f.ir.main_graph().num_ops().unwrap(), 0);
}

#[test]
fn extra_call_input_is_named() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let err = ops::call(&f.graph, &[&f.x, &f.value, &f.x], &[]).unwrap_err();
    assert_eq!(
        err,
        PopXlError::TooManyCallInputs { graph: "increment_fn".into(), expected: 2, given: 3, extra: vec!["x".into()] }
    );
}

#[test]
fn duplicate_call_input_positional_and_dict() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let err = ops::call(&f.graph, &[&f.x, &f.value], &[(&f.value_input, &f.value)]).unwrap_err();
    assert_eq!(err, PopXlError::DuplicateCallInput { graph: "increment_fn".into(), input: "value".into() });
}

#[test]
fn duplicate_call_input_twice_in_dict() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let err = ops::call(&f.graph, &[&f.x], &[(&f.value_input, &f.value), (&f.value_input, &f.x)]).unwrap_err();
    assert_eq!(err, PopXlError::DuplicateCallInput { graph: "increment_fn".into(), input: "value".into() });
}

#[test]
fn inputs_dict_key_must_be_an_input_of_the_called_graph() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let err = ops::call(&f.graph, &[&f.x], &[(&f.value, &f.value)]).unwrap_err();
    assert_eq!(
        err,
        PopXlError::NotAGraphInput {
            tensor: "value".into(),
            tensor_graph: "main".into(),
            graph: "increment_fn".into()
        }
    );
}

#[test]
fn call_input_of_wrong_shape_is_named() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let big = popxl::variable(Array1::<f32>::ones(3), "big").unwrap();
    let err = ops::call(&f.graph, &[&f.x, &big], &[]).unwrap_err();
    assert_eq!(
        err,
        PopXlError::CallInputMismatch {
            graph: "increment_fn".into(),
            input: "value".into(),
            expected: Box::new(TensorSpec::new([2], float32)),
            parent: "big".into(),
            got: Box::new(TensorSpec::new([3], float32)),
        }
    );
}

#[test]
fn call_input_from_another_graph() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    // `value_input` lives in the subgraph, not in main.
    let err = ops::call(&f.graph, &[&f.x, &f.value_input], &[]).unwrap_err();
    assert_eq!(
        err,
        PopXlError::TensorNotInGraph {
            tensor: "value".into(),
            tensor_graph: "increment_fn".into(),
            graph: "main".into(),
            what: "call".into(),
        }
    );
}

#[test]
fn op_in_subgraph_using_a_captured_main_tensor() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let captured = f.value.clone();
    let err = f.ir.create_graph(move |x: Tensor| ops::add(&x, &captured), &f.x).unwrap_err();
    assert_eq!(
        err,
        PopXlError::TensorNotInGraph {
            tensor: "value".into(),
            tensor_graph: "main".into(),
            graph: "graph".into(),
            what: "add".into()
        }
    );
    // The partial graph was removed.
    assert_eq!(f.ir.graphs().len(), 2);
}

#[test]
fn tensor_from_another_ir() {
    let f = fixture();
    let other = Ir::new();
    let y = other.main_graph().with(|| popxl::variable(Array1::<f32>::ones(2), "y")).unwrap();
    let _g = f.ir.main_graph().enter();
    let err = ops::add(&f.x, &y).unwrap_err();
    assert_eq!(err, PopXlError::ForeignIr { name: "y".into(), what: "add".into() });
    let err = ops::call(&f.graph, &[&f.x, &y], &[]).unwrap_err();
    assert_eq!(err, PopXlError::ForeignIr { name: "y".into(), what: "call".into() });
}

#[test]
fn graph_from_another_ir() {
    let f = fixture();
    let other = Ir::new();
    let _g = other.main_graph().enter();
    let a = popxl::variable(Array1::<f32>::ones(2), "a").unwrap();
    let b = popxl::variable(Array1::<f32>::ones(2), "b").unwrap();
    let err = ops::call(&f.graph, &[&a, &b], &[]).unwrap_err();
    assert_eq!(err, PopXlError::ForeignIr { name: "increment_fn".into(), what: "call".into() });
    // Loading its code in the other IR names it too (its id may well be a
    // graph id of the other IR).
    let err = ops::remote_code_load(&f.graph, "executable").unwrap_err();
    assert_eq!(err, PopXlError::ForeignIr { name: "increment_fn".into(), what: "remote_code_load".into() });
}

#[test]
fn variable_in_a_subgraph() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let err =
        f.ir.create_graph(|x: Tensor| -> popxl::Result<Tensor> { Ok(&x + &popxl::variable(1.0f32, "w")?) }, &f.x)
            .unwrap_err();
    assert_eq!(err, PopXlError::VariableInSubgraph { name: "w".into(), graph: "graph".into() });
    assert_eq!(err.to_string(), "variable `w` cannot be created in subgraph `graph`: variables live in the main graph");
}

#[test]
fn graph_input_in_the_main_graph() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let err = popxl::graph_input([2], float32, "x").unwrap_err();
    assert_eq!(err, PopXlError::GraphInputInMainGraph { name: "x".into() });
}

#[test]
fn repeat_count_zero() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let err = ops::repeat(&f.graph, 0, &[&f.x, &f.value], &[]).unwrap_err();
    assert_eq!(err, PopXlError::RepeatCountZero { graph: "increment_fn".into() });
}

#[test]
fn repeat_with_fewer_inputs_than_outputs() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(Array1::<f32>::ones(2), "x").unwrap();
    let g = ir.create_graph_named("two_outputs", |x: Tensor| (-&x, &x * 2.0), &x).unwrap();
    let err = ops::repeat(&g, 2, &[&x], &[]).unwrap_err();
    assert_eq!(err, PopXlError::RepeatFewerInputsThanOutputs { graph: "two_outputs".into(), inputs: 1, outputs: 2 });
}

#[test]
fn repeat_with_mismatched_loop_carried_value() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(Array2::<f32>::ones((2, 3)), "x").unwrap();
    let g = ir.create_graph_named("sum_rows", |x: Tensor| ops::sum(&x, &[0], false), &x).unwrap();
    let err = ops::repeat(&g, 2, &[&x], &[]).unwrap_err();
    assert_eq!(
        err,
        PopXlError::RepeatCarriedMismatch {
            graph: "sum_rows".into(),
            index: 0,
            input: TensorSpec::new([2, 3], float32),
            output: TensorSpec::new([3], float32),
        }
    );
}

#[test]
fn host_store_of_wrong_shape() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let out = popxl::d2h_stream([3], float32, "out").unwrap();
    let err = ops::host_store(&out, &f.x).unwrap_err();
    assert_eq!(
        err,
        PopXlError::HostStoreShapeMismatch {
            stream: "out".into(),
            stream_shape: vec![3],
            tensor: "x".into(),
            tensor_shape: vec![2],
        }
    );
}

#[test]
fn host_store_of_wrong_dtype() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let out = popxl::d2h_stream([2], int32, "out").unwrap();
    let err = ops::host_store(&out, &f.x).unwrap_err();
    assert_eq!(
        err,
        PopXlError::HostStoreDtypeMismatch {
            stream: "out".into(),
            stream_dtype: int32,
            tensor: "x".into(),
            tensor_dtype: float32,
        }
    );
    assert_eq!(err.to_string(), "host_store: tensor `x` is float32 but stream `out` is int32");
}

#[test]
fn graph_context_used_after_its_ir_is_gone() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let sub = ir.create_empty_graph("sub").unwrap();
    drop(ir);
    let _g = main.enter();
    assert_eq!(popxl::constant(1.0f32, "c").unwrap_err(), PopXlError::IrDropped { graph: "main".into() });
    assert_eq!(popxl::h2d_stream([1], float32, "s").unwrap_err(), PopXlError::IrDropped { graph: "main".into() });
    assert_eq!(sub.inputs().unwrap_err(), PopXlError::IrDropped { graph: "sub".into() });
    assert_eq!(
        PopXlError::IrDropped { graph: "main".into() }.to_string(),
        "graph `main` is no longer usable: its IR has been dropped"
    );
}

#[test]
fn tensor_ops_after_its_ir_is_gone() {
    let ir = Ir::new();
    let x = ir.main_graph().with(|| popxl::variable(1.0f32, "x")).unwrap();
    drop(ir);
    // Metadata is still readable; building is not.
    assert_eq!(x.shape(), &[] as &[usize]);
    assert_eq!(ops::relu(&x).unwrap_err(), PopXlError::IrDropped { graph: "main".into() });
}

#[test]
fn building_a_frozen_ir() {
    let f = fixture();
    f.ir.freeze();
    let _g = f.ir.main_graph().enter();
    assert!(matches!(ops::call(&f.graph, &[&f.x, &f.value], &[]), Err(PopXlError::IrFrozen { .. })));
    assert!(matches!(popxl::variable(1.0f32, "w"), Err(PopXlError::IrFrozen { .. })));
    assert!(matches!(f.ir.create_empty_graph("g"), Err(PopXlError::IrFrozen { .. })));
    assert!(matches!(f.ir.with_ir_mut(|_| ()), Err(PopXlError::IrFrozen { .. })));
    assert!(matches!(f.ir.set_num_host_transfers(2), Err(PopXlError::IrFrozen { .. })));
}

#[test]
fn ops_without_a_graph_context() {
    let err = popxl::constant(1.0f32, "c").unwrap_err();
    assert_eq!(err, PopXlError::NoGraphContext { what: "constant".into() });
    assert!(popxl::current_graph().is_err());
}

#[test]
fn graph_function_with_wrong_argument_count() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let err = f.ir.create_graph_named("add2", |a: Tensor, b: Tensor| &a + &b, &f.x).unwrap_err();
    assert_eq!(err, PopXlError::ArgumentCountMismatch { graph: "add2".into(), expected: 2, given: 1 });
    assert!(f.ir.graph_by_name("add2").is_err());
}

#[test]
fn graph_function_returning_a_parent_tensor() {
    let f = fixture();
    let _g = f.ir.main_graph().enter();
    let captured = f.value.clone();
    let err = f.ir.create_graph_named("leak", move |_x: Tensor| captured.clone(), &f.x).unwrap_err();
    assert_eq!(
        err,
        PopXlError::OutputNotInGraph { graph: "leak".into(), tensor: "value".into(), tensor_graph: "main".into() }
    );
}

#[test]
fn graph_calling_itself() {
    let ir = Ir::new();
    let g = ir.create_empty_graph("g").unwrap();
    let _c = g.enter();
    let err = ops::call(&g, &[], &[]).unwrap_err();
    assert_eq!(err, PopXlError::RecursiveCall { graph: "g".into() });
}

#[test]
fn conditional_branches_with_different_outputs() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(Array1::<f32>::ones(2), "x").unwrap();
    let c = popxl::variable(true, "c").unwrap();
    let then_g = ir.create_graph_named("then", |x: Tensor| -x, &x).unwrap();
    let else_g = ir.create_graph_named("else", |x: Tensor| ops::sum(&x, &[], false), &x).unwrap();
    let err = ops::conditional(&c, &then_g, &else_g, &[&x], &[]).unwrap_err();
    assert_eq!(
        err,
        PopXlError::BranchOutputsMismatch {
            then_graph: "then".into(),
            else_graph: "else".into(),
            then_outputs: "float32[2]".into(),
            else_outputs: "float32[]".into(),
        }
    );
}

#[test]
fn shape_errors_from_inference_name_the_op() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let a = popxl::constant(Array2::<f32>::ones((2, 3)), "a").unwrap();
    let err = ops::matmul(&a, &a).unwrap_err();
    let PopXlError::Ir(popart_ir::IrError::Inference { op, op_type, .. }) = err else { panic!("got {err:?}") };
    assert_eq!((op.as_str(), op_type.as_str()), ("MatMul", "MatMul"));
}

#[test]
#[should_panic(expected = "popxl: `a + b` failed")]
fn operators_panic_with_a_clear_message() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let a = popxl::constant(Array1::<f32>::ones(2), "a").unwrap();
    let b = popxl::constant(Array1::<f32>::ones(3), "b").unwrap();
    let _ = &a + &b;
}

#[test]
fn index_out_of_range() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let a = popxl::constant(Array2::<f32>::ones((2, 3)), "a").unwrap();
    let err = a.index(&popxl::s![0, 3]).unwrap_err();
    assert_eq!(err, PopXlError::IndexOutOfRange { what: "axis 1 of tensor `a`".into(), index: 3, len: 3 });
}

#[test]
fn in_place_ops_on_constants_and_streams_as_inputs_are_build_errors() {
    let ir = popxl::Ir::new();
    let _g = ir.main_graph().enter();
    let c = popxl::constant(vec![1.0f32, 2.0], "c").unwrap();
    let v = popxl::variable(vec![1.0f32, 2.0], "v").unwrap();
    // PopXL refuses to modify a constant; adding into a variable is fine.
    let err = popxl::ops::add_(&c, &v).unwrap_err().to_string();
    assert!(err.contains("constant `c`") && err.contains("in place"), "{err}");
    popxl::ops::add_(&v, &c).unwrap();
    // A stream must be loaded before an op can read it.
    let s = popxl::h2d_stream([2], popxl::float32, "s").unwrap();
    let err = popxl::ops::relu(s.tensor()).unwrap_err().to_string();
    assert!(err.contains("stream `s`") && err.contains("host_load"), "{err}");
}

#[test]
fn duplicate_reduce_axes_and_empty_max_are_build_errors() {
    let ir = popxl::Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::constant(ndarray::Array2::<f32>::zeros((2, 3)), "x").unwrap();
    // numpy: "duplicate value in 'axis'".
    let err = popxl::ops::sum(&x, &[1, -1], false).unwrap_err().to_string();
    assert!(err.contains("axis 1 is listed more than once"), "{err}");
    popxl::ops::sum(&x, &[0, 1], false).unwrap();
    // numpy: max of a zero-size array has no identity; sum of one is 0.
    let e = popxl::constant(ndarray::Array2::<f32>::zeros((2, 0)), "e").unwrap();
    let err = popxl::ops::max(&e, &[1], false).unwrap_err().to_string();
    assert!(err.contains("cannot reduce axis 1") && err.contains("ReduceMax"), "{err}");
    assert!(popxl::ops::min(&e, &[], false).is_err());
    assert_eq!(popxl::ops::max(&e, &[0], false).unwrap().shape(), vec![0]);
    assert_eq!(popxl::ops::sum(&e, &[1], false).unwrap().shape(), vec![2]);
}

#[test]
fn user_numbers_that_do_not_fit_the_ir_are_typed_errors() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(Array1::<f32>::ones(2), "x").unwrap();
    let g = ir.create_graph_named("body", |x: Tensor| -x, &x).unwrap();
    // A trip count above i64::MAX is named, never wrapped to -1 or clamped.
    let err = ops::repeat(&g, usize::MAX, &[&x], &[]).unwrap_err();
    assert_eq!(err, PopXlError::RepeatCountTooLarge { graph: "body".into(), count: usize::MAX });
    assert!(err.to_string().contains("18446744073709551615"), "{err}");
    // A random shape dimension above i64::MAX.
    let seed = popxl::variable(vec![0u32, 1], "seed").unwrap();
    let err = ops::random_normal(&seed, &[2, usize::MAX], 0.0, 1.0, float32).unwrap_err();
    assert!(matches!(err, PopXlError::IntegerOutOfRange { .. }) && err.to_string().contains("dimension 1"), "{err}");
}

#[test]
fn host_data_that_the_tensor_type_cannot_hold_is_named() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    // PopXL's downcast wraps silently; ours names the element.
    let err = popxl::variable(vec![0i64, 1 << 40], "big").unwrap_err();
    assert!(matches!(err, PopXlError::HostCast { index: 1, dtype: popxl::DataType::Int32, .. }), "{err:?}");
    assert_eq!(err.to_string(), "data of variable `big`: element 1 (1099511627776) cannot be represented as int32");
    assert!(popxl::constant_as(-1i32, popxl::uint8, "c").is_err());
    assert!(popxl::constant_as(f32::NAN, int32, "n").is_err());
}

/// Argument mistakes are variants a caller can match, carrying the values involved.
#[test]
fn argument_errors_are_typed() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let a = popxl::variable(Array2::<f32>::ones((2, 3)), "a").unwrap();
    assert_eq!(
        ops::split(&a, 4, 1).unwrap_err(),
        PopXlError::NotDivisible {
            what: "split 4 does not equally divide axis 1 of tensor `a`: its length".into(),
            len: 3,
            divisor: 4
        }
    );
    assert!(matches!(
        ops::split(&a, 1, 2).unwrap_err(),
        PopXlError::AxisOutOfRange { source: popart_ir::ops::AxisError::OutOfRange { axis: 2, rank: 2 }, .. }
    ));
    assert_eq!(
        ops::subsample(&a, &[1, 1, 1]).unwrap_err(),
        PopXlError::TooManyAxes { what: "subsample strides", count: 3, tensor: "a".into(), rank: 2 }
    );
    let err = ops::scatter_reduce(&a, &a, "mul", Default::default()).unwrap_err();
    assert!(matches!(&err, PopXlError::UnknownName { got, .. } if got == "mul"), "{err}");
    assert_eq!(err.to_string(), "scatter_reduce reduction `mul` is not one of sum, max, min, none");
    let err = ops::index_with(&a, &a).unwrap_err();
    assert!(matches!(err, PopXlError::DTypeMismatch { got: popxl::DataType::Float32, .. }), "{err}");
    assert_eq!(
        ops::max_pool_with(&a, &[1], &Default::default(), ops::StorageOrder::Column).unwrap_err(),
        PopXlError::Unsupported { what: "max_pool", feature: "storage_order column" }
    );
    assert_eq!(
        ir.set_num_host_transfers(0).unwrap_err(),
        PopXlError::ValueOutOfRange { what: "num_host_transfers".into(), expected: "at least 1", got: "0".into() }
    );
    assert_eq!(ir.main_graph().remove_op_created_hook(12345).unwrap_err(), PopXlError::UnknownHook { handle: 12345 });
    let i = popxl::variable(vec![0i32], "i").unwrap();
    assert_eq!(
        ops::scatter_reduce(&a, &i, "sum", Default::default()).unwrap_err(),
        PopXlError::MissingArgument { what: "scatter_reduce", needs: "one of initial_values and axis_size" }
    );
}
