//! In-place semantics (issue 14 §7): writes through views reach their base and
//! every other view, in program order; ambiguous in-place writes and writes to
//! constants (directly or through a view) are rejected; the check can be
//! turned off. Expected values are computed here with ndarray, independently
//! of the IR.

use ndarray::{Array1, Array2, ArrayD, IxDyn};
use popart_ir::IrError;
use popxl::{ops, DeviceToHostStream, HostArray, Ir, Tensor};
use popxl_session::{Inputs, Session, SessionError, SessionOptions};

fn store(t: &Tensor, name: &str) -> DeviceToHostStream {
    let s = popxl::d2h_stream(t.shape(), t.dtype(), name).unwrap();
    ops::host_store(&s, t).unwrap();
    s
}

fn run(ir: Ir) -> (Session, std::collections::HashMap<DeviceToHostStream, HostArray>) {
    let mut session = Session::new(ir, "cpu").unwrap();
    let out = session.scope(|s| s.run(&Inputs::new())).unwrap();
    (session, out)
}

fn values(h: &HostArray) -> Vec<f64> {
    h.to_f64_vec()
}

fn arange(rows: usize, cols: usize) -> Array2<f32> {
    Array2::from_shape_fn((rows, cols), |(i, j)| (i * cols + j) as f32)
}

#[test]
fn a_write_through_a_transpose_view_is_seen_by_the_base_and_by_another_view() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let seq = popxl::in_sequence(true);
    let x = popxl::variable(arange(2, 3), "x").unwrap();
    let xt = ops::transpose_(&x, &[]).unwrap();
    let flat = ops::reshape_(&x, &[-1]).unwrap();
    let before = store(&ops::identity(&flat, "before").unwrap(), "before");
    let inc = popxl::constant(Array2::from_shape_fn((3, 2), |(i, j)| (10 * (i + 1) + j) as f32), "inc").unwrap();
    ops::add_(&xt, &inc).unwrap();
    let after_flat = store(&ops::identity(&flat, "after").unwrap(), "after");
    let after_x = store(&ops::identity(&x, "x_now").unwrap(), "x_now");
    drop((seq, g));
    let (mut session, out) = run(ir);

    let base = arange(2, 3);
    let inc_t = Array2::from_shape_fn((3, 2), |(i, j)| (10 * (i + 1) + j) as f32).reversed_axes();
    let want = &base + &inc_t;
    let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
    assert_eq!(values(&out[&before]), base.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
    assert_eq!(values(&out[&after_flat]), want, "the flat view sees the write");
    assert_eq!(values(&out[&after_x]), want, "the base sees the write");
    assert_eq!(values(&session.get_tensor_data(&x).unwrap()), want, "and so does the variable on the host");
}

#[test]
fn a_write_to_the_base_is_seen_through_an_earlier_view() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let seq = popxl::in_sequence(true);
    let x = popxl::variable(arange(2, 3), "x").unwrap();
    let xt = ops::transpose_(&x, &[1, 0]).unwrap();
    let col = ops::slice_(&x, &[1], &[3], &[1], &[1]).unwrap();
    let one = popxl::constant(1.0f32, "one").unwrap();
    ops::add_(&x, &one).unwrap();
    let t_out = store(&ops::identity(&xt, "t").unwrap(), "t");
    let c_out = store(&ops::identity(&col, "c").unwrap(), "c");
    drop((seq, g));
    let (_, out) = run(ir);
    let base = arange(2, 3) + 1.0;
    let want_t: Vec<f64> = base.t().iter().map(|&v| f64::from(v)).collect();
    let want_c: Vec<f64> = base.slice(ndarray::s![.., 1..3]).iter().map(|&v| f64::from(v)).collect();
    assert_eq!(values(&out[&t_out]), want_t);
    assert_eq!(values(&out[&c_out]), want_c);
}

#[test]
fn slice_views_with_steps_write_only_their_elements() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let seq = popxl::in_sequence(true);
    let x = popxl::variable(arange(4, 6), "x").unwrap();
    // Rows 3, 1 (step -2), columns 0, 2, 4.
    let v = ops::slice_(&x, &[3, 0], &[0, 6], &[-2, 2], &[0, 1]).unwrap();
    assert_eq!(v.shape(), &[2, 3]);
    let hundred = popxl::constant(100.0f32, "h").unwrap();
    ops::add_(&v, &hundred).unwrap();
    let x_out = store(&ops::identity(&x, "x_now").unwrap(), "x_now");
    drop((seq, g));
    let (_, out) = run(ir);
    let mut want = arange(4, 6);
    for r in [3, 1] {
        for c in [0, 2, 4] {
            want[[r, c]] += 100.0;
        }
    }
    assert_eq!(values(&out[&x_out]), want.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
}

#[test]
fn concat_views_write_every_input_and_see_their_writes() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let seq = popxl::in_sequence(true);
    let a = popxl::variable(arange(2, 3), "a").unwrap();
    let b = popxl::variable(Array2::<f32>::from_elem((1, 3), -1.0), "b").unwrap();
    let c = ops::concat_(&[&a, &b], 0).unwrap();
    let inc = popxl::constant(Array1::from(vec![1.0f32, 2.0, 3.0]), "inc").unwrap();
    ops::add_(&c, &inc).unwrap();
    let five = popxl::constant(5.0f32, "five").unwrap();
    ops::add_(&b, &five).unwrap();
    let c_out = store(&ops::identity(&c, "c_now").unwrap(), "c_now");
    drop((seq, g));
    let (mut session, out) = run(ir);
    let inc = Array1::from(vec![1.0f32, 2.0, 3.0]);
    let want_a = arange(2, 3) + &inc;
    let want_b = Array2::<f32>::from_elem((1, 3), -1.0) + &inc + 5.0;
    let f = |a: &Array2<f32>| a.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>();
    assert_eq!(values(&session.get_tensor_data(&a).unwrap()), f(&want_a));
    assert_eq!(values(&session.get_tensor_data(&b).unwrap()), f(&want_b));
    let mut want_c = f(&want_a);
    want_c.extend(f(&want_b));
    assert_eq!(values(&out[&c_out]), want_c, "the concat view sees the later write to b");
}

#[test]
fn views_of_views_and_writes_inside_subgraphs_by_value() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let seq = popxl::in_sequence(true);
    let x = popxl::variable(ArrayD::from_shape_fn(IxDyn(&[2, 3, 2]), |i| (i[0] * 6 + i[1] * 2 + i[2]) as f32), "x")
        .unwrap();
    // A slice of a transpose of a reshape.
    let r = ops::reshape_(&x, &[6, 2]).unwrap();
    let t = ops::transpose_(&r, &[]).unwrap(); // [2, 6]
    let s = ops::slice_(&t, &[1], &[2], &[1], &[0]).unwrap(); // second row of t = column 1 of r
    let ten = popxl::constant(10.0f32, "ten").unwrap();
    ops::add_(&s, &ten).unwrap();
    let x_out = store(&ops::identity(&x, "x_now").unwrap(), "x_now");
    drop((seq, g));
    let (_, out) = run(ir);
    let want: Vec<f64> = (0..12).map(|k| f64::from(k as f32 + if k % 2 == 1 { 10.0 } else { 0.0 })).collect();
    assert_eq!(values(&out[&x_out]), want);
}

fn ambiguous_ir() -> (Ir, DeviceToHostStream) {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let x = popxl::variable(Array1::from(vec![1.0f32, 2.0]), "x").unwrap();
    let view = ops::reshape_(&x, &[2, 1]).unwrap();
    let one = popxl::constant(1.0f32, "one").unwrap();
    // No order between the write and the read of the other alias.
    ops::add_(&x, &one).unwrap();
    let doubled = ops::mul(&view, &popxl::constant(2.0f32, "two").unwrap()).unwrap();
    let s = store(&doubled, "y");
    drop(g);
    (ir, s)
}

#[test]
fn an_unordered_read_of_an_alias_is_an_ambiguity_error_unless_the_check_is_off() {
    let (ir, _) = ambiguous_ir();
    match Session::new(ir, "cpu") {
        Err(SessionError::InvalidIr(IrError::InplaceAmbiguity(a))) => {
            assert!(a.op.contains("AddInplace"), "{}", a.op);
            assert_eq!(a.tensor, "x");
            assert!(a.other.contains("Mul"), "{}", a.other);
            assert!(a.through.contains("ReshapeInplace"), "{}", a.through);
        }
        Err(e) => panic!("expected an ambiguity error, got {e}"),
        Ok(_) => panic!("expected an ambiguity error"),
    }
    let (ir, _) = ambiguous_ir();
    let options = SessionOptions { check_inplace_ambiguity: false, ..SessionOptions::default() };
    assert!(Session::with_options(ir, "cpu", options).is_ok());
}

#[test]
fn ordering_the_write_removes_the_ambiguity() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let seq = popxl::in_sequence(true);
    let x = popxl::variable(Array1::from(vec![1.0f32, 2.0]), "x").unwrap();
    let view = ops::reshape_(&x, &[2, 1]).unwrap();
    let one = popxl::constant(1.0f32, "one").unwrap();
    ops::add_(&x, &one).unwrap();
    let doubled = ops::mul(&view, &popxl::constant(2.0f32, "two").unwrap()).unwrap();
    let s = store(&doubled, "y");
    drop((seq, g));
    let (_, out) = run(ir);
    assert_eq!(values(&out[&s]), vec![4.0, 6.0], "the read after the write sees it");
}

#[test]
fn writing_a_constant_through_a_view_is_refused_when_the_op_is_created() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let c = popxl::constant(arange(2, 3), "c").unwrap();
    let one = popxl::constant(1.0f32, "one").unwrap();
    for view in [
        ops::transpose_(&c, &[]).unwrap(),
        ops::reshape_(&c, &[-1]).unwrap(),
        ops::slice_(&c, &[0], &[1], &[], &[]).unwrap(),
        ops::concat_(&[&c], 0).unwrap(),
    ] {
        let err = ops::add_(&view, &one).unwrap_err().to_string();
        assert!(err.contains("would modify constant `c`"), "{err}");
    }
}

#[test]
fn concat_view_has_the_concat_gradient() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(arange(2, 3), "x").unwrap();
    let graph = ir
        .create_graph(
            |a: Tensor, b: Tensor| -> popxl::Result<Tensor> {
                ops::mul(&ops::concat_(&[&a, &b], 0)?, &ops::concat(&[&a, &b], 0)?)
            },
            (&x, &x),
        )
        .unwrap();
    let info = popxl::transforms::autodiff(&graph, None, None, &Default::default(), false).unwrap();
    assert_eq!(info.grad_info.expected_outputs().unwrap().len(), 2);
    // Transposing in place has no gradient (PopXL: in-place ops are ✗).
    let t_graph = ir.create_graph(|a: Tensor| ops::transpose_(&a, &[]), &x).unwrap();
    assert!(popxl::transforms::autodiff(&t_graph, None, None, &Default::default(), false).is_err());
}

/// Runs `x += 1` inside a called graph and returns x afterwards; `by_ref`
/// passes x by reference.
fn call_increment(by_ref: bool) -> Vec<f64> {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let seq = popxl::in_sequence(true);
    let x = popxl::variable(Array1::from(vec![1.0f32, 2.0]), "x").unwrap();
    let body = |t: Tensor| -> popxl::Result<()> {
        ops::add_(&t, &popxl::constant(1.0f32, "one")?)?;
        Ok(())
    };
    let graph = if by_ref {
        ir.create_graph(body, popxl::TensorByRef(x.clone())).unwrap()
    } else {
        ir.create_graph(body, &x).unwrap()
    };
    ops::call(&graph, &[&x], &[]).unwrap();
    let s = store(&ops::identity(&x, "x_now").unwrap(), "x_now");
    drop((seq, g));
    let (_, out) = run(ir);
    values(&out[&s])
}

#[test]
fn by_ref_graph_inputs_write_the_callers_tensor_and_by_value_inputs_do_not() {
    assert_eq!(call_increment(true), vec![2.0, 3.0]);
    assert_eq!(call_increment(false), vec![1.0, 2.0]);
}
