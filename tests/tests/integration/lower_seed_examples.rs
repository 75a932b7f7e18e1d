//! The examples of the Graphs chapter (listings 9.1 to 9.6), built with `popxl` as
//! in their download files: the lowered program of each is snapshot-tested and its
//! numerics are checked against values computed independently here.

use ndarray::{array, Array2, ArrayD, IxDyn};
use popxl::{ops, DeviceToHostStream, HostArray, HostToDeviceStream, Ir, Tensor};
use popxl_session::{Inputs, Session};
use tests::Linear;

fn assert_close(got: &HostArray, want: &ArrayD<f32>) {
    assert_eq!(got.as_f32().expect("float32 output").shape(), want.shape());
    let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
    tests::assert_close(&got.to_f64_vec(), &want, 1e-6, "output");
}

/// Run one `with session:` block with `inputs`; returns the session too.
fn run(ir: Ir, inputs: Inputs) -> (Session, popxl_session::Outputs) {
    let mut session = Session::new(ir, "ipu_model").expect("session");
    let outputs = session.scope(|s| s.run(&inputs)).expect("run");
    (session, outputs)
}

fn input_data() -> Array2<f32> {
    array![[0.25f32, -1.5], [3.0, 0.125]]
}

/// Listing 9.1 (basic_graph.py): `increment_fn` called once.
fn basic_graph() -> (Ir, HostToDeviceStream, DeviceToHostStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let input = popxl::h2d_stream([2, 2], popxl::float32, "input_stream").unwrap();
    let x = ops::host_load(&input, "x").unwrap();
    let increment_fn = |x: Tensor| -> popxl::Result<Tensor> {
        let one = popxl::constant(ArrayD::<f32>::ones(IxDyn(x.shape())), "one")?;
        ops::add(&x, &one)
    };
    let increment_graph = ir.create_graph(increment_fn, &x).unwrap();
    let o = ops::call(&increment_graph, &[&x], &[]).unwrap().remove(0);
    let o_d2h = popxl::d2h_stream(o.shape(), o.dtype(), "output_stream").unwrap();
    ops::host_store(&o_d2h, &o).unwrap();
    drop(_g);
    (ir, input, o_d2h)
}

/// Listing 9.2 (create_multi_graphs_from_same_func.py): two graphs from `matmul_fn`.
fn multi_graphs_from_same_func() -> (Ir, HostToDeviceStream, DeviceToHostStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let input = popxl::h2d_stream([2, 2], popxl::float32, "input_stream").unwrap();
    let x = ops::host_load(&input, "x").unwrap();
    let w1 = popxl::variable(Array2::<f32>::ones((2, 2)), "w1").unwrap();
    let w2 = popxl::variable(vec![1.0f32; 2], "w2").unwrap();
    let matmul_fn = |x: Tensor, w: Tensor| x.matmul(&w);
    let matmul_graph1 = ir.create_graph(matmul_fn, (&x, &w1)).unwrap();
    let matmul_graph2 = ir.create_graph(matmul_fn, (&x, &w2)).unwrap();
    let o = ops::call(&matmul_graph1, &[&x, &w1], &[]).unwrap().remove(0);
    let o = ops::call(&matmul_graph2, &[&o, &w2], &[]).unwrap().remove(0);
    let o_d2h = popxl::d2h_stream(o.shape(), o.dtype(), "output_stream").unwrap();
    ops::host_store(&o_d2h, &o).unwrap();
    drop(_g);
    (ir, input, o_d2h)
}

/// Listing 9.3 (multi_call_graph_input.py): one graph with a `graph_input`, called twice.
fn multi_call_graph_input() -> (Ir, HostToDeviceStream, DeviceToHostStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let input = popxl::h2d_stream([2, 2], popxl::float32, "input_stream").unwrap();
    let x = ops::host_load(&input, "x").unwrap();
    let increment_fn = |x: Tensor| -> popxl::Result<Tensor> {
        let value = popxl::graph_input(x.shape(), x.dtype(), "value")?;
        ops::add(&x, &value)
    };
    let increment_graph = ir.create_graph(increment_fn, &x).unwrap();
    let value1 = popxl::variable(Array2::<f32>::ones((2, 2)), "value1").unwrap();
    let value2 = popxl::variable(Array2::<f32>::ones((2, 2)) * 2.0, "value2").unwrap();
    let o = ops::call(&increment_graph, &[&x, &value1], &[]).unwrap().remove(0);
    let o = ops::call(&increment_graph, &[&o, &value2], &[]).unwrap().remove(0);
    let o_d2h = popxl::d2h_stream(o.shape(), o.dtype(), "output_stream").unwrap();
    ops::host_store(&o_d2h, &o).unwrap();
    drop(_g);
    (ir, input, o_d2h)
}

/// Listing 9.4 (call_with_info.py): the called graph updates its input in place and
/// the call site marks it modified. Returns the variable too.
fn call_with_info() -> (Ir, Tensor, DeviceToHostStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let _s = popxl::in_sequence(true);
    let x = popxl::variable(1i32, "x").unwrap();
    let value1 = popxl::constant(1i32, "value1").unwrap();
    let increment_fn = |x: Tensor| -> popxl::Result<()> {
        let value = popxl::graph_input(x.shape(), x.dtype(), "value")?;
        ops::copy_var_update_(&x, &ops::add(&x, &value)?)?;
        Ok(())
    };
    let increment_graph = ir.create_graph(increment_fn, &x).unwrap();
    let info = ops::call_with_info(&increment_graph, &[&x, &value1], &[]).unwrap();
    info.set_parent_input_modified(&x).unwrap();
    let o_d2h = popxl::d2h_stream(x.shape(), x.dtype(), "output_stream").unwrap();
    ops::host_store(&o_d2h, &x).unwrap();
    drop(_s);
    drop(_g);
    (ir, x, o_d2h)
}

/// Listing 9.5 (repeat_graph_0.py): `x + value` repeated twice.
fn repeat_graph_0() -> (Ir, DeviceToHostStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(Array2::<f32>::ones((2, 2)), "x").unwrap();
    let value = popxl::variable(Array2::<f32>::ones((2, 2)), "value").unwrap();
    let increment_graph = ir.create_graph(|x: Tensor, value: Tensor| ops::add(&x, &value), (&x, &value)).unwrap();
    let o = ops::repeat(&increment_graph, 2, &[&x, &value], &[]).unwrap().remove(0);
    let o_d2h = popxl::d2h_stream(o.shape(), o.dtype(), "output_stream").unwrap();
    ops::host_store(&o_d2h, &o).unwrap();
    drop(_g);
    (ir, o_d2h)
}

/// Listing 9.6 (repeat_graph_1.py): repeat with `inputs_dict`.
fn repeat_graph_1() -> (Ir, DeviceToHostStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(Array2::<f32>::ones((2, 2)), "x").unwrap();
    let w = popxl::variable(Array2::<f32>::ones((2, 2)), "W").unwrap();
    let b = popxl::variable(vec![1.0f32; 2], "b").unwrap();
    let mut linear = Linear::new(2);
    let linear_graph = ir.create_graph(&mut linear, &x).unwrap();
    let (gw, gb) = (linear.w().clone(), linear.b().clone());
    let o = ops::repeat(&linear_graph, 2, &[&x], &[(&gw, &w), (&gb, &b)]).unwrap().remove(0);
    let o_d2h = popxl::d2h_stream(o.shape(), o.dtype(), "output_stream").unwrap();
    ops::host_store(&o_d2h, &o).unwrap();
    drop(_g);
    (ir, o_d2h)
}

fn dump(ir: Ir) -> String {
    // Calls lowered as PopART does, one function per subgraph (the cpu device
    // would inline them: `SessionOptions::inline_calls`).
    let options = popxl_session::SessionOptions { inline_calls: Some(false), ..Default::default() };
    Session::with_options(ir, "cpu", options).expect("session").executable().dump()
}

#[test]
fn snapshot_9_1_basic_graph() {
    insta::assert_snapshot!(dump(basic_graph().0));
}

#[test]
fn snapshot_9_2_multi_graphs_from_same_func() {
    insta::assert_snapshot!(dump(multi_graphs_from_same_func().0));
}

#[test]
fn snapshot_9_3_multi_call_graph_input() {
    insta::assert_snapshot!(dump(multi_call_graph_input().0));
}

#[test]
fn snapshot_9_4_call_with_info() {
    insta::assert_snapshot!(dump(call_with_info().0));
}

#[test]
fn snapshot_9_5_repeat_graph_0() {
    insta::assert_snapshot!(dump(repeat_graph_0().0));
}

#[test]
fn snapshot_9_6_repeat_graph_1() {
    insta::assert_snapshot!(dump(repeat_graph_1().0));
}

#[test]
fn numerics_9_1_basic_graph() {
    let (ir, input, out) = basic_graph();
    let x = input_data();
    let (_, outputs) = run(ir, [(input, HostArray::from(x.clone()))].into());
    let want = x.mapv(|v| v + 1.0).into_dyn();
    assert_close(&outputs[&out], &want);
}

#[test]
fn numerics_9_2_two_graphs_from_one_function() {
    let (ir, input, out) = multi_graphs_from_same_func();
    let x = input_data();
    let (_, outputs) = run(ir, [(input, HostArray::from(x.clone()))].into());
    // (x @ ones(2,2)) @ ones(2): every entry of row i of x @ ones is the row sum;
    // the matrix-vector product then adds the two equal entries.
    let want: Vec<f32> = (0..2).map(|i| 2.0 * (x[[i, 0]] + x[[i, 1]])).collect();
    assert_close(&outputs[&out], &ArrayD::from_shape_vec(IxDyn(&[2]), want).unwrap());
}

#[test]
fn numerics_9_3_graph_called_with_different_values() {
    let (ir, input, out) = multi_call_graph_input();
    let x = input_data();
    let (_, outputs) = run(ir, [(input, HostArray::from(x.clone()))].into());
    let want = x.mapv(|v| v + 1.0 + 2.0).into_dyn();
    assert_close(&outputs[&out], &want);
}

#[test]
fn numerics_9_4_modified_input_is_visible_to_the_caller() {
    let (ir, x, out) = call_with_info();
    let (mut session, outputs) = run(ir, Inputs::new());
    assert_eq!(outputs[&out], HostArray::from(2i32));
    // The variable itself was updated in place (and fetched on exit).
    assert_eq!(session.get_tensor_data(&x).unwrap(), HostArray::from(2i32));
    // A second run increments again: the update is persistent device state.
    let outputs = session.scope(|s| s.run(&Inputs::new())).unwrap();
    assert_eq!(outputs[&out], HostArray::from(3i32));
}

#[test]
fn numerics_9_5_repeat_increments_twice() {
    let (ir, out) = repeat_graph_0();
    let (_, outputs) = run(ir, Inputs::new());
    assert_close(&outputs[&out], &ArrayD::from_elem(IxDyn(&[2, 2]), 3.0));
}

#[test]
fn numerics_9_6_repeat_linear_with_inputs_dict() {
    let (ir, out) = repeat_graph_1();
    let (_, outputs) = run(ir, Inputs::new());
    // Iteration 1: ones @ ones + 1 = 3; iteration 2: 3s @ ones + 1 = 7 (W and b are not carried).
    assert_close(&outputs[&out], &ArrayD::from_elem(IxDyn(&[2, 2]), 7.0));
}
