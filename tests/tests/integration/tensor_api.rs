//! The rest of the Tensor API (issue 14 §8): the `% & | !` operators, indexing
//! by an integer or bool tensor and with steps, `conditional_with_info`,
//! `in_sequence(SequenceMode::Pass)`, and the `ipu(n)` / `io_tiles()`
//! placement annotations. Expected values are computed here in plain Rust
//! (`f32::rem` is C's `fmod`), independently of the IR.

use ndarray::Array2;
use popxl::{ops, DeviceToHostStream, HostArray, Ir, PopXlError, SequenceMode, Tensor, TileSet};
use popxl_session::{Inputs, Session};

fn store(t: &Tensor, name: &str) -> DeviceToHostStream {
    let s = popxl::d2h_stream(t.shape(), t.dtype(), name).unwrap();
    ops::host_store(&s, t).unwrap();
    s
}

fn run(ir: Ir) -> std::collections::HashMap<DeviceToHostStream, HostArray> {
    let mut session = Session::new(ir, "cpu").unwrap();
    session.scope(|s| s.run(&Inputs::new())).unwrap()
}

fn values(h: &HostArray) -> Vec<f64> {
    h.to_f64_vec()
}

fn bools(v: &[bool]) -> Vec<f64> {
    v.iter().map(|&b| f64::from(u8::from(b))).collect()
}

#[test]
fn remainder_and_logical_operators_compute_fmod_and_boolean_logic() {
    let a_vals = [-7.5f32, 7.5, -3.0, 5.25, 0.0];
    let b_vals = [2.0f32, -2.0, 3.0, 1.5, 4.0];
    let p_vals = [true, true, false, false, true];
    let q_vals = [true, false, true, false, false];
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let a = popxl::variable(a_vals.to_vec(), "a").unwrap();
    let b = popxl::variable(b_vals.to_vec(), "b").unwrap();
    let p = popxl::variable(p_vals.to_vec(), "p").unwrap();
    let q = popxl::variable(q_vals.to_vec(), "q").unwrap();
    let rem = store(&(&a % &b), "rem");
    let rem_scalar = store(&(&a % 2.0), "rem_scalar");
    let and = store(&(&p & &q), "and");
    let or = store(&(&p | &q), "or");
    let not = store(&!&p, "not");
    let and_true = store(&(&q & true), "and_true");
    // Non-bool operands are cast to bool: `a` is true where non-zero.
    let a_or_false = store(&(&a | false), "a_or_false");
    drop(g);
    let out = run(ir);

    let want_rem: Vec<f64> = a_vals.iter().zip(&b_vals).map(|(x, y)| f64::from(x % y)).collect();
    assert_eq!(values(&out[&rem]), want_rem);
    assert_eq!(values(&out[&rem_scalar]), a_vals.iter().map(|x| f64::from(x % 2.0)).collect::<Vec<_>>());
    let zip = |f: fn(bool, bool) -> bool| p_vals.iter().zip(&q_vals).map(|(&x, &y)| f(x, y)).collect::<Vec<_>>();
    assert_eq!(values(&out[&and]), bools(&zip(|x, y| x && y)));
    assert_eq!(values(&out[&or]), bools(&zip(|x, y| x || y)));
    assert_eq!(values(&out[&not]), bools(&p_vals.map(|x| !x)));
    assert_eq!(values(&out[&and_true]), bools(&q_vals));
    assert_eq!(values(&out[&a_or_false]), bools(&a_vals.map(|x| x != 0.0)));
}

#[test]
fn comparison_helpers_and_pow_match_plain_rust() {
    let a_vals = [1.0f32, 2.0, 3.0];
    let b_vals = [2.0f32, 2.0, 1.0];
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let a = popxl::variable(a_vals.to_vec(), "a").unwrap();
    let b = popxl::variable(b_vals.to_vec(), "b").unwrap();
    let gt = store(&a.greater(&b).unwrap(), "gt");
    let lt = store(&a.less(&b).unwrap(), "lt");
    let eq = store(&a.equal(&b).unwrap(), "eq");
    let pw = store(&a.pow(&b).unwrap(), "pw");
    drop(g);
    let out = run(ir);
    let cmp = |f: fn(f32, f32) -> bool| a_vals.iter().zip(&b_vals).map(|(&x, &y)| f(x, y)).collect::<Vec<_>>();
    assert_eq!(values(&out[&gt]), bools(&cmp(|x, y| x > y)));
    assert_eq!(values(&out[&lt]), bools(&cmp(|x, y| x < y)));
    assert_eq!(values(&out[&eq]), bools(&cmp(|x, y| x == y)));
    let want: Vec<f64> = a_vals.iter().zip(&b_vals).map(|(&x, &y)| f64::from(x.powf(y))).collect();
    assert_eq!(values(&out[&pw]), want);
}

#[test]
fn indexing_by_an_int_tensor_gathers_and_by_a_bool_tensor_masks() {
    let data = Array2::from_shape_fn((4, 3), |(i, j)| (10 * i + j) as f32);
    let rows = [3i32, 0, 3];
    let mask = [true, false, true];
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let x = popxl::variable(data.clone(), "x").unwrap();
    let r = popxl::constant(rows.to_vec(), "rows").unwrap();
    let m = popxl::constant(mask.to_vec(), "mask").unwrap();
    let gathered = x.index(&r).unwrap();
    let masked = x.index(&m).unwrap();
    let stepped = x.index(&popxl::s![popxl::SliceIndex::from(..).step(-2), 1..]).unwrap();
    assert_eq!(gathered.shape(), &[3, 3]);
    assert_eq!(masked.shape(), &[4, 3]);
    assert_eq!(stepped.shape(), &[2, 2]);
    let (gathered, masked, stepped) = (store(&gathered, "g"), store(&masked, "m"), store(&stepped, "s"));
    let f = popxl::constant(1.0f32, "f").unwrap();
    let err = x.index(&f).unwrap_err();
    assert!(matches!(err, PopXlError::DTypeMismatch { ref tensor, .. } if tensor == "f"), "{err}");
    drop(g);
    let out = run(ir);

    let want_g: Vec<f64> = rows.iter().flat_map(|&r| data.row(r as usize).to_vec()).map(f64::from).collect();
    assert_eq!(values(&out[&gathered]), want_g);
    let want_m: Vec<f64> = data.indexed_iter().map(|((_, j), &v)| if mask[j] { f64::from(v) } else { 0.0 }).collect();
    assert_eq!(values(&out[&masked]), want_m);
    // Rows 3 and 1 (step -2 from the end), columns 1.. .
    let want_s: Vec<f64> = [3usize, 1].iter().flat_map(|&i| [data[[i, 1]], data[[i, 2]]]).map(f64::from).collect();
    assert_eq!(values(&out[&stepped]), want_s);
}

#[test]
fn conditional_with_info_maps_both_branches_and_runs_the_selected_one() {
    for cond in [true, false] {
        let ir = Ir::new();
        let g = ir.main_graph().enter();
        let x = popxl::variable(vec![1.0f32, -2.0], "x").unwrap();
        let y = popxl::variable(vec![10.0f32, 20.0], "y").unwrap();
        let c = popxl::variable(cond, "c").unwrap();
        let then_g = ir.create_graph(|x: Tensor| -x, &x).unwrap();
        let else_g = ir.create_graph(|a: Tensor, b: Tensor| &a + &b, (&x, &y)).unwrap();
        let info =
            ops::conditional_with_info(&c, ops::Branch::new(&then_g, &[&x]), ops::Branch::new(&else_g, &[&x, &y]))
                .unwrap();
        assert_eq!(info.called_graphs(), (then_g.clone(), else_g.clone()));
        assert_eq!(info.inputs().unwrap(), vec![c.clone(), x.clone(), y.clone()], "distinct parent inputs");
        // x goes to both branches: the then branch's input is reported first.
        assert_eq!(info.parent_to_graph(&x).unwrap(), then_g.inputs().unwrap()[0]);
        assert_eq!(info.parent_to_graph(&y).unwrap(), else_g.inputs().unwrap()[1]);
        assert_eq!(info.graph_to_parent(&else_g.inputs().unwrap()[1]).unwrap(), y);
        let out_t = info.parent_output(0).unwrap();
        assert_eq!(info.graph_to_parent(&else_g.outputs().unwrap()[0]).unwrap(), out_t);
        assert!(matches!(info.parent_to_graph(&c), Err(PopXlError::NotACallSiteTensor { .. })));
        assert!(matches!(info.parent_output(1), Err(PopXlError::IndexOutOfRange { .. })));
        let s = store(&out_t, "out");
        drop(g);
        let out = run(ir);
        let want = if cond { vec![-1.0, 2.0] } else { vec![11.0, 18.0] };
        assert_eq!(values(&out[&s]), want, "cond = {cond}");
    }
}

fn topo_con_count(ir: &Ir) -> usize {
    ir.with_ir(|core| core.main_graph().topo_cons().edges().count())
}

#[test]
fn in_sequence_pass_adds_no_constraints_and_is_not_a_unit_of_the_outer_sequence() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let x = popxl::variable(1.0f32, "x").unwrap();
    let on = popxl::in_sequence(true);
    let _a = ops::exp(&x).unwrap();
    {
        let _pass = popxl::in_sequence(SequenceMode::Pass);
        let _b = ops::relu(&x).unwrap();
        let _c = ops::negate(&x).unwrap();
        {
            // A block nested in `pass` starts a fresh sequence.
            let _inner = popxl::in_sequence(true);
            let _d = ops::sin(&x).unwrap();
            let _e = ops::cos(&x).unwrap();
        }
    }
    let _f = ops::abs(&x).unwrap();
    drop((on, g));
    ir.with_ir(|core| {
        let g = core.main_graph();
        let id = |name: &str| g.op_by_name(name).unwrap().id;
        let tc = g.topo_cons();
        assert!(tc.contains(id("Sin"), id("Cos")), "inner sequence orders its ops");
        assert!(tc.contains(id("Exp"), id("Abs")), "the outer sequence continues around the pass block");
        for op in ["Relu", "Neg", "Sin"] {
            assert!(!tc.contains(id("Exp"), id(op)), "{op} is not ordered after Exp");
            assert!(!tc.contains(id(op), id("Abs")), "Abs is not ordered after {op}");
        }
    });
    assert_eq!(topo_con_count(&ir), 2);
}

#[test]
fn placement_is_stored_printed_parsed_and_ignored_by_the_cpu_device() {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32, -2.0, 3.0], "x").unwrap();
    assert!(matches!(x.ipu(), Err(PopXlError::UndefinedValue { .. })));
    assert!(matches!(x.tile_set(), Err(PopXlError::UndefinedValue { .. })));
    let on_io = {
        let _p = popxl::ipu(1);
        let _t = popxl::io_tiles();
        ops::io_tile_copy(&x).unwrap()
    };
    let y = {
        let _p = popxl::ipu(1);
        ops::relu(&on_io).unwrap()
    };
    let z = ops::exp(&y).unwrap();
    assert_eq!((on_io.ipu().unwrap(), on_io.tile_set().unwrap()), (1, TileSet::Io));
    assert_eq!((y.ipu().unwrap(), y.tile_set().unwrap()), (1, TileSet::Compute));
    assert_eq!(x.ipu().unwrap(), 1, "a variable takes its consumer's placement");
    assert!(matches!(z.ipu(), Err(PopXlError::UndefinedValue { ref what, .. }) if what == "IPU"));
    assert_eq!(z.tile_set().unwrap(), TileSet::Compute);
    let s = store(&z, "z");
    drop(g);

    let text = ir.to_text();
    assert!(text.contains("place[ipu=1, tiles=io]"), "{text}");
    assert!(text.contains("place[ipu=1]\n"), "{text}");
    let parsed = popart_ir::text::parse(&text).unwrap();
    assert_eq!(popart_ir::text::to_text(&parsed), text, "placement round-trips through the text form");
    let bad = text.replace("tiles=io", "tiles=fast");
    let err = popart_ir::text::parse(&bad).unwrap_err();
    assert!(err.to_string().contains("`compute` or `io`"), "{err}");

    let out = run(ir);
    let want: Vec<f64> = [1.0f32, -2.0, 3.0].iter().map(|&v| f64::from(v.max(0.0).exp())).collect();
    assert_eq!(values(&out[&s]), want);
}

#[test]
fn io_tile_copy_passes_the_gradient_through() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let _g = main.enter();
    let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    let f = ir
        .create_graph(
            |x: Tensor| {
                let _t = popxl::io_tiles();
                ops::io_tile_copy(&x).unwrap() * 3.0
            },
            &x,
        )
        .unwrap();
    let fwd = ops::call_with_info(&f, &[&x], &[]).unwrap();
    let grad = popxl::transforms::autodiff(&f, None, None, &Default::default(), false).unwrap().grad_info;
    let seed = popxl::constant(vec![1.0f32, 1.0], "seed").unwrap();
    let acts = grad.inputs_dict(&fwd).unwrap();
    let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
    let outs = ops::call(&grad.graph(), &[&seed], &acts).unwrap();
    let s = store(&outs[0], "dx");
    drop(_g);
    let out = run(ir);
    assert_eq!(values(&out[&s]), vec![3.0, 3.0]);
}
