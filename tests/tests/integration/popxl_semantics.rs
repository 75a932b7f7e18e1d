//! PopXL semantics where PopXL's own tests disagreed with us (issue 32): two
//! written views of one variable, `where` with a non-bool condition, `+=`
//! keeping the handle, `accumulate_` of another dtype, and the phrases of
//! PopXL's error messages. Each case is written as the PopXL program that
//! showed it; expected values are computed here with ndarray or plain Rust.

use ndarray::Array2;
use popart_ir::IrError;
use popxl::{ops, DeviceToHostStream, HostArray, Ir, PopXlError, Tensor};
use popxl_session::{Inputs, Session, SessionError};

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

fn arange(rows: usize, cols: usize) -> Array2<f32> {
    Array2::from_shape_fn((rows, cols), |(i, j)| (i * cols + j) as f32)
}

fn f64s(a: &Array2<f32>) -> Vec<f64> {
    a.iter().map(|&v| f64::from(v)).collect()
}

/// PopXL: `xt = ops.transpose_(x); xr = ops.reshape_(x, (3, 2)); ops.add_(xt, a); ops.add_(xr, b)`
/// (in either order): both writes reach `x` and each view.
#[test]
fn a_transpose_view_and_a_reshape_view_of_one_variable_are_both_written() {
    for transpose_first in [true, false] {
        let ir = Ir::new();
        let g = ir.main_graph().enter();
        let seq = popxl::in_sequence(true);
        let x = popxl::variable(arange(2, 3), "x").unwrap();
        let xt = ops::transpose_(&x, &[]).unwrap();
        let xr = ops::reshape_(&x, &[3, 2]).unwrap();
        let a = Array2::from_shape_fn((3, 2), |(i, j)| (10 * (i + 1) + j) as f32);
        let b = Array2::from_shape_fn((3, 2), |(i, j)| (100 * (i + 1) + 7 * j) as f32);
        let ca = popxl::constant(a.clone(), "a").unwrap();
        let cb = popxl::constant(b.clone(), "b").unwrap();
        if transpose_first {
            ops::add_(&xt, &ca).unwrap();
            ops::add_(&xr, &cb).unwrap();
        } else {
            ops::add_(&xr, &cb).unwrap();
            ops::add_(&xt, &ca).unwrap();
        }
        let x_out = store(&ops::identity(&x, "x_now").unwrap(), "x_now");
        let t_out = store(&ops::identity(&xt, "t_now").unwrap(), "t_now");
        let r_out = store(&ops::identity(&xr, "r_now").unwrap(), "r_now");
        drop((seq, g));
        let (mut session, out) = run(ir);

        // Additions commute: x + aᵀ + reshape(b, (2, 3)).
        let b_as_x = b.clone().into_shape_with_order((2, 3)).unwrap();
        let want = arange(2, 3) + a.t() + &b_as_x;
        assert_eq!(out[&x_out].to_f64_vec(), f64s(&want), "x (transpose first: {transpose_first})");
        assert_eq!(out[&t_out].to_f64_vec(), f64s(&want.t().to_owned()), "the transpose view");
        let want_r = want.clone().into_shape_with_order((3, 2)).unwrap();
        assert_eq!(out[&r_out].to_f64_vec(), f64s(&want_r), "the reshape view");
        assert_eq!(session.get_tensor_data(&x).unwrap().to_f64_vec(), f64s(&want), "the variable on the host");
    }
}

/// PopXL's `where` casts its condition to bool (`cast_if_needed`): non-zero is true.
#[test]
fn where_casts_a_non_bool_condition() {
    let cond = [0i32, 3, -1, 0];
    let (l, r) = ([1.0f32, 2.0, 3.0, 4.0], [-1.0f32, -2.0, -3.0, -4.0]);
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let c = popxl::constant(cond.to_vec(), "c").unwrap();
    let fc = popxl::constant(vec![0.0f32, 0.5, 0.0, -2.0], "fc").unwrap();
    let lhs = popxl::constant(l.to_vec(), "l").unwrap();
    let rhs = popxl::constant(r.to_vec(), "r").unwrap();
    let y = store(&ops::select(&c, &lhs, &rhs).unwrap(), "y");
    let fy = store(&ops::select(&fc, &lhs, &rhs).unwrap(), "fy");
    drop(g);
    let (_, out) = run(ir);
    let want: Vec<f64> = (0..4).map(|i| f64::from(if cond[i] != 0 { l[i] } else { r[i] })).collect();
    assert_eq!(out[&y].to_f64_vec(), want);
    assert_eq!(out[&fy].to_f64_vec(), vec![-1.0, 2.0, -3.0, 4.0]);
}

/// PopXL's `Tensor.__iadd__` returns `self`: after `v += 1`, `v` still names the
/// variable, and reading it gives the sum.
#[test]
fn add_assign_keeps_the_handle_of_the_variable() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let seq = popxl::in_sequence(true);
    let mut v = popxl::variable(vec![1.0f32, 2.0, 3.0], "v").unwrap();
    let original = v.clone();
    let w = popxl::constant(vec![10.0f32, 20.0, 30.0], "w").unwrap();
    v += 1.0;
    v += &w;
    v += 2;
    assert_eq!(v, original, "`+=` does not rebind the handle");
    let read = store(&ops::identity(&v, "read").unwrap(), "read");
    drop((seq, g));
    let (mut session, out) = run(ir);
    let want = vec![14.0, 25.0, 36.0];
    assert_eq!(out[&read].to_f64_vec(), want, "a later read sees the sum");
    assert_eq!(session.get_tensor_data(&v).unwrap().to_f64_vec(), want, "get_tensor_data finds the variable");
}

/// PopXL's `accumulate_` takes an `X` of another type (PopART's `AccumulateOpx`
/// casts it to the accumulator's type).
#[test]
fn accumulate_takes_an_integer_update_into_a_float_accumulator() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let seq = popxl::in_sequence(true);
    let acc = popxl::variable(vec![0.5f32, 1.0, -2.0], "acc").unwrap();
    let moving = popxl::variable(vec![1.0f32, 1.0, 1.0], "moving").unwrap();
    let x = popxl::constant(vec![1i32, -2, 7], "x").unwrap();
    ops::accumulate_(&acc, &x, 0.5).unwrap();
    ops::accumulate_moving_average_(&moving, &x, 0.25).unwrap();
    drop((seq, g));
    let (mut session, _) = run(ir);
    let want: Vec<f64> =
        [0.5f32, 1.0, -2.0].iter().zip([1.0f32, -2.0, 7.0]).map(|(&t, x)| f64::from(t + 0.5 * x)).collect();
    assert_eq!(session.get_tensor_data(&acc).unwrap().to_f64_vec(), want);
    let want: Vec<f64> = [1.0f32, -2.0, 7.0].iter().map(|&x| f64::from(0.25f32 * 1.0 + 0.75 * x)).collect();
    assert_eq!(session.get_tensor_data(&moving).unwrap().to_f64_vec(), want);
}

/// The fixed phrases of PopXL's messages that its users and tests match.
#[test]
fn error_messages_carry_popxl_phrases() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let v = popxl::variable(vec![1.0f32, 2.0], "v").unwrap();
    let e = v.diag().unwrap_err();
    assert!(matches!(e, PopXlError::NotAMatrix { .. }));
    assert!(e.to_string().starts_with("Diag expected a 2d tensor."), "{e}");

    let e = ops::reshape(&v, &[-1, -1, 1]).unwrap_err().to_string();
    assert!(e.contains("Reshape shape can contain at most one '-1' value"), "{e}");
    assert!(e.contains("[-1, -1, 1]"), "{e}");
    let e = ops::reshape(&v, &[-2, 1]).unwrap_err().to_string();
    assert!(e.contains("Invalid shape value in reshape"), "{e}");
    assert!(e.contains("[-2, 1]"), "{e}");

    let i = popxl::constant(vec![1i32, 2], "i").unwrap();
    let e = ops::concat(&[&v, &i], 0).unwrap_err().to_string();
    assert!(e.contains("All inputs to a concat operation must have the same type:"), "{e}");

    let e = v.copy_to_ipu(1, None).unwrap_err().to_string();
    assert!(e.contains("Could not infer the ipu") && e.contains("Please specify `source`"), "{e}");

    // Inputs on different IPUs or tile sets (PopXL's `check_tensor_ipu_and_tile_set`).
    let t1 = {
        let _p = popxl::ipu(0);
        ops::negate(&v).unwrap()
    };
    let t2 = {
        let _p = popxl::ipu(1);
        ops::negate(&v).unwrap()
    };
    let e = ops::add(&t1, &t2).unwrap_err();
    assert!(matches!(e, PopXlError::PlacementMismatch { kind: "IPUs", .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("IPUs") && msg.contains(t1.name()) && msg.contains(t2.name()), "{msg}");
    let t3 = {
        let _p = popxl::ipu(0);
        let _t = popxl::io_tiles();
        ops::negate(&v).unwrap()
    };
    let msg = ops::add(&t1, &t3).unwrap_err().to_string();
    assert!(msg.contains("tile sets") && msg.contains(t3.name()), "{msg}");
    // A copy between them is how PopXL moves data, and then the op is accepted.
    let t2_on_0 = ops::ipu_copy(&t2, 0, None).unwrap();
    {
        let _p = popxl::ipu(0);
        ops::add(&t1, &t2_on_0).unwrap();
    }
    drop(g);

    // Calls (PopXL's `call` / `repeat` messages).
    let sub = ir.create_graph(|x: Tensor, y: Tensor| Ok((&x + 1.0, &y + 2.0)), (&v, &v)).unwrap();
    let g = ir.main_graph().enter();
    let e = ops::call(&sub, &[&v], &[]).unwrap_err().to_string();
    assert!(e.starts_with("Not enough inputs have been provided"), "{e}");
    let e = ops::repeat(&sub, 8, &[&v], &[(&v, &v)]).unwrap_err().to_string();
    assert!(e.contains("not in the called graph"), "{e}");
    let e = ops::call(&sub, &[&v, &v, &v], &[]).unwrap_err().to_string();
    assert!(e.starts_with("Too many inputs have been provided"), "{e}");
    drop(g);
}

/// An in-place write that nothing orders against another use of an alias
/// (PopART's "Inplacing ambiguity detected.").
#[test]
fn an_inplace_ambiguity_says_so_as_popart_does() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    let one = popxl::constant(1.0f32, "one").unwrap();
    let y = ops::mul(&x, &one).unwrap();
    ops::add_(&x, &one).unwrap();
    store(&y, "y");
    drop(g);
    let e = Session::new(ir, "cpu").unwrap_err();
    assert!(matches!(e, SessionError::InvalidIr(IrError::InplaceAmbiguity(_))), "{e}");
    assert!(e.to_string().contains("Inplacing ambiguity detected"), "{e}");
}
