//! The listings of the Graphs chapter of the PopXL user guide (seed 000, 9.1-9.6),
//! rebuilt with `popxl`, snapshotted in the IR text form. Each test also checks
//! the structure directly, verifies the IR and round-trips it through the parser.

use ndarray::{Array2, ArrayD, IxDyn};
use popxl::{ops, Ir, Tensor};
use tests::Linear;

/// The IR's text form, after checking it verifies and parses back to the same text.
fn text(ir: &Ir) -> String {
    ir.with_ir(|core| {
        core.verify().unwrap();
        let text = popart_ir::text::to_text(core);
        let parsed = popart_ir::text::parse(&text).unwrap();
        assert_eq!(popart_ir::text::to_text(&parsed), text);
        text
    })
}

fn names(ts: &[Tensor]) -> Vec<&str> {
    ts.iter().map(Tensor::name).collect()
}

fn ones_like(x: &Tensor) -> popxl::HostArray {
    popxl::HostArray::full(x.info(), 1.0)
}

/// Listing 9.1: create a graph from `increment_fn` and call it.
#[test]
fn listing_9_1_basic_graph() {
    fn increment_fn(x: Tensor) -> popxl::Result<Tensor> {
        Ok(&x + &popxl::constant(ones_like(&x), "ones")?)
    }

    let ir = Ir::new();
    let main = ir.main_graph();
    {
        let _g = main.enter();
        let input = popxl::h2d_stream([2, 2], popxl::float32, "input_stream").unwrap();
        let x = ops::host_load(&input, "x").unwrap();

        let increment_graph = ir.create_graph(increment_fn, &x).unwrap();

        let o = ops::call(&increment_graph, &[&x], &[]).unwrap();
        let o_d2h = popxl::d2h_stream(o[0].shape(), o[0].dtype(), "output_stream").unwrap();
        ops::host_store(&o_d2h, &o[0]).unwrap();

        assert_eq!(increment_graph.name(), "increment_fn");
        assert_eq!(names(&increment_graph.inputs().unwrap()), ["x"]);
        assert_eq!(increment_graph.outputs().unwrap()[0].shape(), &[2, 2]);
        assert_eq!(main.called_graphs().unwrap(), vec![increment_graph]);
    }
    insta::assert_snapshot!(text(&ir));
}

/// Listing 9.2: two graphs from the same function, for differently shaped weights.
#[test]
fn listing_9_2_several_graphs_from_one_function() {
    fn matmul_fn(x: Tensor, w: Tensor) -> popxl::Result<Tensor> {
        x.matmul(&w)
    }

    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let input = popxl::h2d_stream([2, 2], popxl::float32, "input_stream").unwrap();
    let x = ops::host_load(&input, "x").unwrap();

    let w1 = popxl::variable(ArrayD::<f32>::ones(IxDyn(x.shape())), "w1").unwrap();
    let w2 = popxl::variable(ArrayD::<f32>::ones(IxDyn(&x.shape()[x.rank() - 1..])), "w2").unwrap();

    let matmul_graph1 = ir.create_graph(matmul_fn, (&x, &w1)).unwrap();
    let matmul_graph2 = ir.create_graph(matmul_fn, (&x, &w2)).unwrap();

    assert_ne!(matmul_graph1, matmul_graph2);
    assert_eq!((matmul_graph1.name(), matmul_graph2.name()), ("matmul_fn", "matmul_fn_1"));
    assert_eq!(matmul_graph1.outputs().unwrap()[0].shape(), &[2, 2]);
    assert_eq!(matmul_graph2.outputs().unwrap()[0].shape(), &[2]);
    insta::assert_snapshot!(text(&ir));
}

/// Listing 9.3: a graph with an extra `graph_input`, called twice with different values.
#[test]
fn listing_9_3_graph_inputs_called_with_different_values() {
    fn increment_fn(x: Tensor) -> popxl::Result<Tensor> {
        let value = popxl::graph_input(x.shape(), x.dtype(), "value")?;
        Ok(&x + &value)
    }

    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let input = popxl::h2d_stream([2, 2], popxl::float32, "input_stream").unwrap();
    let x = ops::host_load(&input, "x").unwrap();

    let increment_graph = ir.create_graph(increment_fn, &x).unwrap();

    let value1 = popxl::variable(ones_like(&x), "value1").unwrap();
    let two = Array2::<f32>::ones((2, 2)) * 2.0;
    let value2 = popxl::variable(two, "value2").unwrap();

    let o = ops::call(&increment_graph, &[&x, &value1], &[]).unwrap();
    let o = ops::call(&increment_graph, &[&o[0], &value2], &[]).unwrap();

    let o_d2h = popxl::d2h_stream(o[0].shape(), o[0].dtype(), "output_stream").unwrap();
    ops::host_store(&o_d2h, &o[0]).unwrap();

    assert_eq!(names(&increment_graph.inputs().unwrap()), ["x", "value"]);
    insta::assert_snapshot!(text(&ir));
}

/// Listing 9.4: `call_with_info` with an input modified in place, in sequence.
#[test]
fn listing_9_4_call_with_info_modified_input() {
    fn increment_fn(x: Tensor) -> popxl::Result<()> {
        let value = popxl::graph_input(x.shape(), x.dtype(), "value")?;
        // in-place increment of the input tensor
        ops::copy_var_update_(&x, &(&x + &value))?;
        Ok(())
    }

    let ir = Ir::new();
    let main = ir.main_graph();
    {
        let _g = main.enter();
        let _s = popxl::in_sequence(true);
        let x = popxl::variable(1, "x").unwrap();
        let value1 = popxl::constant(1, "value1").unwrap();

        let increment_graph = ir.create_graph(increment_fn, &x).unwrap();
        let info = ops::call_with_info(&increment_graph, &[&x, &value1], &[]).unwrap();
        info.set_parent_input_modified(&x).unwrap();

        let o_d2h = popxl::d2h_stream(x.shape(), x.dtype(), "output_stream").unwrap();
        ops::host_store(&o_d2h, &x).unwrap();

        assert_eq!(x.dtype(), popxl::int32);
        assert!(increment_graph.outputs().unwrap().is_empty());
        assert_eq!(info.called_graph(), increment_graph);
        assert_eq!(info.inputs().unwrap(), vec![x.clone(), value1]);
        assert_eq!(info.modified_inputs().unwrap(), vec![0]);
        // in_sequence: the store of `x` is ordered after the call that modifies it.
        ir.with_ir(|core| {
            let g = core.main_graph();
            let ops = g.ops_in_creation_order();
            assert!(g.topo_cons().contains(ops[0], ops[1]));
        });
    }
    insta::assert_snapshot!(text(&ir));
}

/// Listing 9.5: `repeat` a graph twice; `x + value` and `value` are loop-carried.
#[test]
fn listing_9_5_repeat() {
    fn increment_fn(x: Tensor, value: Tensor) -> Tensor {
        &x + &value
    }

    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(Array2::<f32>::ones((2, 2)), "x").unwrap();
    let value = popxl::variable(ones_like(&x), "value").unwrap();

    let increment_graph = ir.create_graph(increment_fn, (&x, &value)).unwrap();
    let o = ops::repeat(&increment_graph, 2, &[&x, &value], &[]).unwrap();

    let o_d2h = popxl::d2h_stream(o[0].shape(), o[0].dtype(), "output_stream").unwrap();
    ops::host_store(&o_d2h, &o[0]).unwrap();

    assert_eq!(o.len(), 1);
    assert_eq!(o[0].spec(), x.spec());
    insta::assert_snapshot!(text(&ir));
}

/// Listing 9.6: `repeat` with `inputs_dict`, on a graph built from the `Linear` module
/// (shared with the cross-crate tests: `tests::Linear`).
#[test]
fn listing_9_6_repeat_with_inputs_dict_and_linear_module() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(Array2::<f32>::ones((2, 2)), "x").unwrap();
    let w = popxl::variable(Array2::<f32>::ones((2, 2)), "W").unwrap();
    let b = popxl::variable(vec![1.0f32; 2], "b").unwrap();

    let mut linear = Linear::new(2);
    let linear_graph = ir.create_graph(&mut linear, &x).unwrap();

    // x, W and b are copied into the graph inputs before the first iteration; the
    // output of each iteration feeds `x` of the next.
    let (lw, lb) = (linear.w().clone(), linear.b().clone());
    let o = ops::repeat(&linear_graph, 2, &[&x], &[(&lw, &w), (&lb, &b)]).unwrap();

    let o_d2h = popxl::d2h_stream(o[0].shape(), o[0].dtype(), "output_stream").unwrap();
    ops::host_store(&o_d2h, &o[0]).unwrap();

    assert_eq!(linear_graph.name(), "Linear");
    assert_eq!(names(&linear_graph.inputs().unwrap()), ["x", "W", "b"]);
    assert_eq!(o[0].shape(), &[2, 2]);
    insta::assert_snapshot!(text(&ir));
}
