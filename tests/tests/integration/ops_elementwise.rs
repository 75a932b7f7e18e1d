//! Values of the elementwise, logical and print ops on the `cpu` device against
//! numpy (expected arrays printed by `tests/fixtures/ops_elementwise.py`), the
//! aliasing of the in-place variants, `print_tensor`'s text and the typed errors.

use ndarray::{arr1, arr2, ArrayD};
use popart_ir::DataType;
use popxl::ops::{self, PrintTensorOptions};
use popxl::{HostArray, Ir, PopXlError, Tensor};
use popxl_session::{Inputs, Session};

/// Build `f` in a fresh IR's main graph, store its result and run once.
fn run(f: impl FnOnce() -> popxl::Result<Tensor>) -> HostArray {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let y = f().expect("build");
    let out = popxl::d2h_stream(y.shape(), y.dtype(), "y").expect("stream");
    ops::host_store(&out, &y).expect("store");
    drop(g);
    let mut session = Session::new(ir, "cpu").expect("session");
    let mut outs = session.scope(|s| s.run(&Inputs::new())).expect("run");
    outs.remove(&out).expect("output")
}

fn f64s(v: &[f64]) -> HostArray {
    HostArray::from(ArrayD::from_shape_vec(vec![v.len()], v.to_vec()).expect("shape"))
}

/// A float64 constant (`popxl::constant` would downcast to float32).
fn c64(v: &[f64], name: &str) -> popxl::Result<Tensor> {
    popxl::constant_as(f64s(v), DataType::Float64, name)
}

fn assert_close(got: &HostArray, want: &[f64], rtol: f64) {
    let got = got.to_f64_vec();
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= rtol * w.abs().max(1e-300) || g == w;
        assert!(ok, "element {i}: got {g}, want {w} (all: {got:?})");
    }
}

fn bools(got: &HostArray, want: &[u8]) {
    assert_eq!(got.dtype(), DataType::Bool);
    let want: Vec<f64> = want.iter().map(|&b| f64::from(b)).collect();
    assert_eq!(got.to_f64_vec(), want);
}

const XS: [f64; 7] = [-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0];

#[test]
fn log2_geluerf_swish_match_numpy() {
    let want = [-1.0, 0.0, 1.584962500721156, std::f64::consts::LOG2_10];
    assert_close(&run(|| ops::log2(&c64(&[0.5, 1.0, 3.0, 10.0], "x")?)), &want, 1e-15);
    assert_close(&run(|| ops::log2(&popxl::constant(arr1(&[0.5f32, 1.0, 3.0, 10.0]), "x")?)), &want, 1e-6);
    let gelu = [
        -0.004049694094890287,
        -0.15865525393145707,
        -0.15426876936299344,
        0.0,
        0.34573123063700656,
        0.8413447460685429,
        2.99595030590511,
    ];
    assert_close(&run(|| ops::geluerf(&c64(&XS, "x")?)), &gelu, 1e-14);
    let x32 = || popxl::constant_as(f64s(&XS), DataType::Float32, "x");
    assert_close(&run(|| ops::geluerf(&x32()?)), &gelu, 1e-6);
    let x16 = || popxl::constant_as(f64s(&XS), DataType::Float16, "x");
    assert_close(&run(|| ops::geluerf(&x16()?)), &gelu, 2e-3);
    let swish = [
        -0.14227761953270035,
        -0.2689414213699951,
        -0.1887703343990727,
        0.0,
        0.3112296656009273,
        0.7310585786300049,
        2.8577223804672998,
    ];
    assert_close(&run(|| ops::swish(&c64(&XS, "x")?)), &swish, 1e-15);
    assert_close(&run(|| ops::swish(&x32()?)), &swish, 1e-6);
}

#[test]
fn predicates_see_nan_and_infinities() {
    let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, 1.5];
    for dt in [DataType::Float64, DataType::Float32, DataType::Float16] {
        let x = || popxl::constant_as(f64s(&special), dt, "x");
        bools(&run(|| ops::isnan(&x()?)), &[1, 0, 0, 0, 0]);
        bools(&run(|| ops::isinf(&x()?)), &[0, 1, 1, 0, 0]);
        bools(&run(|| ops::isfinite(&x()?)), &[0, 0, 0, 1, 1]);
    }
}

#[test]
fn logical_ops_cast_to_bool_and_broadcast() {
    bools(&run(|| ops::logical_not(&c64(&[0.0, 2.5, -0.0, f64::NAN], "x")?)), &[1, 0, 1, 0]);
    let a = || popxl::constant(arr2(&[[true, false, true]]), "a");
    let b = || popxl::constant(arr2(&[[true], [false]]), "b");
    bools(&run(|| ops::logical_and(&a()?, &b()?)), &[1, 0, 1, 0, 0, 0]);
    bools(&run(|| ops::logical_or(&a()?, &b()?)), &[1, 1, 1, 1, 0, 1]);
    let i = || popxl::constant(arr1(&[0i32, 3, -2]), "i");
    let f = || popxl::constant(arr1(&[1.5f32, 0.0, 2.0]), "f");
    bools(&run(|| ops::logical_and(&i()?, &f()?)), &[0, 0, 1]);
}

#[test]
fn clip_with_both_one_or_integer_bounds() {
    let c = [-2.0, -0.5, 0.25, 1.0, 4.0];
    assert_close(&run(|| ops::clip(&c64(&c, "x")?, Some(-1.0), Some(1.0))), &[-1.0, -0.5, 0.25, 1.0, 1.0], 0.0);
    assert_close(&run(|| ops::clip(&c64(&c, "x")?, Some(0.0), None)), &[0.0, 0.0, 0.25, 1.0, 4.0], 0.0);
    assert_close(&run(|| ops::clamp(&c64(&c, "x")?, None, Some(0.5))), &[-2.0, -0.5, 0.25, 0.5, 0.5], 0.0);
    let i = || popxl::constant(arr1(&[-7i32, 0, 9]), "i");
    let got = run(|| ops::clip(&i()?, Some(-3.0), Some(5.0)));
    assert_eq!(got.dtype(), DataType::Int32);
    assert_eq!(got.to_f64_vec(), vec![-3.0, 0.0, 5.0]);
}

#[test]
fn increment_mod_and_fmod_keep_the_dividend_sign() {
    let m = || popxl::constant(arr1(&[0.0f32, 1.5, 2.5, -3.0]), "m");
    assert_close(&run(|| ops::increment_mod(&m()?, 1.5, 2.0)), &[1.5, 1.0, 0.0, -1.5], 0.0);
    let mi = || popxl::constant(arr1(&[0i32, 1, 2, 3, -5]), "mi");
    assert_eq!(run(|| ops::increment_mod(&mi()?, 1.0, 3.0)).to_f64_vec(), vec![1.0, 2.0, 0.0, 1.0, -1.0]);
    let fa = || popxl::constant_as(arr2(&[[-7.5, 7.5, 5.0], [-1.0, 0.25, -6.0]]), DataType::Float64, "fa");
    let got = run(|| ops::fmod(&fa()?, &c64(&[2.0, -2.0, 3.0], "fb")?));
    assert_close(&got, &[-1.5, 1.5, 2.0, -1.0, 0.25, -0.0], 0.0);
    assert!(got.to_f64_vec()[5].is_sign_negative(), "fmod(-6, 3) is -0.0");
    let ia = || popxl::constant(arr1(&[-7i32, 7, -8, 9]), "ia");
    let ib = || popxl::constant(arr1(&[3i32, -3, 3, -4]), "ib");
    assert_eq!(run(|| ops::fmod(&ia()?, &ib()?)).to_f64_vec(), vec![-1.0, 1.0, -2.0, 1.0]);
}

#[test]
fn scaled_add_and_n_ary_extrema() {
    let x = || popxl::constant_as(arr2(&[[1.0, 2.0], [3.0, 4.0]]), DataType::Float64, "x");
    assert_close(
        &run(|| ops::scaled_add(&x()?, &c64(&[10.0, 20.0], "y")?, 0.5, -2.0)),
        &[-19.5, -39.0, -18.5, -38.0],
        0.0,
    );
    let got = run(|| {
        let b = popxl::constant_as(HostArray::from(ndarray::arr0(-2.0)), DataType::Float64, "b")?;
        ops::scaled_add(&x()?, &c64(&[10.0, 20.0], "y")?, 0.5, &b)
    });
    assert_close(&got, &[-19.5, -39.0, -18.5, -38.0], 0.0);
    let p = || popxl::constant(arr2(&[[1.0f32, 5.0, -2.0], [0.0, 3.0, 8.0]]), "p");
    let q = || popxl::constant(arr1(&[2.0f32, 2.0, 2.0]), "q");
    let r = || popxl::constant(arr2(&[[4.0f32], [-1.0]]), "r");
    let got = run(|| ops::maximum(&[&p()?, &q()?, &r()?]));
    assert_eq!(got.shape(), &[2, 3]);
    assert_close(&got, &[4.0, 5.0, 4.0, 2.0, 3.0, 8.0], 0.0);
    assert_close(&run(|| ops::minimum(&[&p()?, &q()?, &r()?])), &[1.0, 2.0, -2.0, -1.0, -1.0, -1.0], 0.0);
    assert_close(&run(|| ops::maximum(&[&p()?])), &[1.0, 5.0, -2.0, 0.0, 3.0, 8.0], 0.0);
}

/// `op_(w)` on a variable: the returned tensor and the variable hold the result.
fn in_place(op: fn(&Tensor) -> popxl::Result<Tensor>, xs: &[f64], want: &[f64], rtol: f64) {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let w = popxl::variable_as(f64s(xs), DataType::Float32, "w").expect("variable");
    let y = op(&w).expect("op");
    assert_eq!(y.spec(), w.spec());
    let out = popxl::d2h_stream(y.shape(), y.dtype(), "y").expect("stream");
    ops::host_store(&out, &y).expect("store");
    drop(g);
    let mut session = Session::new(ir, "cpu").expect("session");
    let outs = session.scope(|s| s.run(&Inputs::new())).expect("run");
    assert_close(&outs[&out], want, rtol);
    assert_close(&session.get_tensor_data(&w).expect("read"), want, rtol);
}

#[test]
fn in_place_variants_write_their_input() {
    in_place(ops::exp_, &[0.0, 1.0, -2.0], &[1.0, std::f64::consts::E, 0.1353352832366127], 1e-6);
    in_place(ops::relu_, &[-1.0, 0.0, 2.0], &[0.0, 0.0, 2.0], 0.0);
    in_place(ops::gelu_, &[0.0], &[0.0], 0.0);
    in_place(ops::geluerf_, &[1.0, -1.0], &[0.8413447460685429, -0.15865525393145707], 1e-6);
    in_place(ops::swish_, &[1.0, -1.0], &[0.7310585786300049, -0.2689414213699951], 1e-6);
    in_place(|t| ops::increment_mod_(t, 1.5, 2.0), &[0.0, 1.5, -3.0], &[1.5, 1.0, -1.5], 0.0);
    in_place(ops::detach_, &[3.0, -4.0], &[3.0, -4.0], 0.0);
}

#[test]
fn a_step_counter_wraps_across_runs() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let step = popxl::variable(0i32, "step").expect("variable");
    ops::increment_mod_(&step, 1.0, 3.0).expect("op");
    drop(g);
    let mut session = Session::new(ir, "cpu").expect("session");
    let mut seen = Vec::new();
    for _ in 0..4 {
        session.scope(|s| s.run(&Inputs::new())).expect("run");
        seen.push(session.get_tensor_data(&step).expect("read").to_f64_vec()[0]);
    }
    assert_eq!(seen, vec![1.0, 2.0, 0.0, 1.0]);
}

#[test]
fn print_tensor_prints_numpy_style_in_schedule_order_and_is_never_pruned() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let _seq = popxl::in_sequence(true);
    let a = popxl::constant(arr1(&[1i32, 2, 3]), "a").expect("a");
    let b = popxl::constant(arr1(&[4i32, 5, 6]), "b").expect("b");
    let s = ops::add(&a, &b).expect("add");
    // Output unused: the op has a side effect and stays.
    ops::print_tensor(&s, &PrintTensorOptions::default()).expect("print");
    let t = ops::add(&a, &s).expect("add");
    let opts = PrintTensorOptions {
        title: "second".into(),
        separator: ',',
        open_bracket: '(',
        close_bracket: ')',
        ..Default::default()
    };
    let t2 = ops::print_tensor(&t, &opts).expect("print");
    let m = popxl::constant_as(arr2(&[[0.5, 1.0], [2.0, -4.25]]), DataType::Float32, "m").expect("m");
    ops::print_tensor(&m, &PrintTensorOptions { title: "m".into(), ..Default::default() }).expect("print");
    let out = popxl::d2h_stream(t2.shape(), t2.dtype(), "out").expect("stream");
    ops::host_store(&out, &t2).expect("store");
    let name = s.name();
    drop(_seq);
    drop(g);
    let mut session = Session::new(ir, "cpu").expect("session");
    let (outs, text) = popxl_session::capture_prints(|| session.scope(|s| s.run(&Inputs::new())));
    assert_eq!(outs.expect("run")[&out].to_f64_vec(), vec![6.0, 9.0, 12.0]);
    assert_eq!(text, format!("print_{name}: [5 7 9]\nsecond: ( 6,  9, 12)\nm: [[ 0.5   1.  ]\n [ 2.   -4.25]]\n"));
}

#[test]
fn typed_errors() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let i = popxl::constant(arr1(&[1i32, 2]), "i").expect("i");
    let f = popxl::constant(arr1(&[1.0f32, 2.0]), "f").expect("f");
    // Inference errors, or attribute errors (issue 34: bad attribute values are
    // refused by the op type's typed attributes, naming the attribute).
    let is_inference = |r: popxl::Result<Tensor>| {
        matches!(r, Err(PopXlError::Ir(popart_ir::IrError::Inference { .. } | popart_ir::IrError::Attribute { .. })))
    };
    assert!(is_inference(ops::isnan(&i)), "isnan of int32");
    assert!(is_inference(ops::log2(&i)));
    assert!(is_inference(ops::geluerf(&i)));
    assert!(is_inference(ops::fmod(&f, &i)), "fmod of mixed dtypes");
    assert!(is_inference(ops::clip(&f, Some(2.0), Some(1.0))));
    assert!(is_inference(ops::clip(&f, Some(f64::NAN), None)));
    assert!(is_inference(ops::increment_mod(&i, 1.0, 0.9)), "modulus 0 as int32");
    assert!(is_inference(ops::increment_mod(&f, f64::INFINITY, 2.0)));
    assert!(is_inference(ops::maximum(&[])));
    assert!(is_inference(ops::maximum(&[&f, &i])));
    let g3 = popxl::constant(arr1(&[1.0f32, 2.0, 3.0]), "g3").expect("g3");
    assert!(is_inference(ops::minimum(&[&f, &g3])), "shapes [2] and [3]");
    assert!(is_inference(ops::scaled_add(&f, &g3, 1.0, 1.0)));
    assert!(is_inference(ops::scaled_add(&f, &f, &g3, 1.0)), "`a` must be a scalar");
    // In-place ops refuse constants.
    assert!(ops::relu_(&f).is_err());
    // Logical ops cast: floats are fine.
    assert!(ops::logical_and(&f, &i).is_ok());
}

#[test]
fn print_tensor_prints_the_gradient_under_its_own_title() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let x = c64(&[1.0, 2.0], "x").expect("x");
    let opts = PrintTensorOptions { title: "p".into(), print_self: false, print_gradient: true, ..Default::default() };
    let graph = ir
        .create_graph(
            |ts: Vec<Tensor>| {
                let y = ops::print_tensor(&ts[0], &opts)?;
                ops::mul(&y, &y)
            },
            vec![x.clone()],
        )
        .expect("graph");
    let fwd = ops::call_with_info(&graph, &[&x], &[]).expect("call");
    let provided = [graph.outputs().expect("outputs")[0].clone()];
    let info = popxl::transforms::autodiff(&graph, Some(&provided), None, &std::collections::HashMap::new(), false)
        .expect("autodiff")
        .grad_info;
    let seed = c64(&[1.0, 1.0], "seed").expect("seed");
    let acts = info.inputs_dict(&fwd).expect("acts");
    let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
    let grads = ops::call(&info.graph(), &[&seed], &acts).expect("grad call");
    let out = popxl::d2h_stream(grads[0].shape(), grads[0].dtype(), "dx").expect("stream");
    ops::host_store(&out, &grads[0]).expect("store");
    drop(g);
    let mut session = Session::new(ir, "cpu").expect("session");
    let (outs, text) = popxl_session::capture_prints(|| session.scope(|s| s.run(&Inputs::new())));
    // d(y²)/dy = 2y reaches the print op; it passes through unchanged.
    assert_eq!(outs.expect("run")[&out].to_f64_vec(), vec![2.0, 4.0]);
    assert_eq!(text, "p_gradient: [2. 4.]\n");
}
