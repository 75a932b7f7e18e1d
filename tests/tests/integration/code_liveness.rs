//! Code loading (seed §9.7): every rule of the code-liveness analysis (§9.7.2),
//! checked on the lowered program's timeline. Steps are counted by hand from the
//! timeline rules of `popart-lower` (a plain op takes one step; a call takes
//! copy-in, the callee's steps, copy-out; an `If` takes then copy-in, then
//! body, then copy-out, else copy-in, else body, else copy-out; a repeat
//! takes copy-in, body, loop copies, copy-out), with every main-graph op in
//! creation order (`in_sequence`).

use popxl::{ops, Graph, Ir, Tensor};
use popxl_session::{Session, SessionOptions};

/// Lower on `device` keeping functions (no inlining), returning the session.
fn session(ir: Ir, device: &str) -> Session {
    let options = SessionOptions { inline_calls: Some(false), ..Default::default() };
    Session::with_options(ir, device, options).expect("session")
}

/// (loaded, load steps, live intervals) of the function of graph `name`.
fn liveness(s: &Session, name: &str) -> (bool, Vec<u64>, Vec<(u64, u64)>) {
    let c = s.executable().code.iter().find(|c| c.graph == name).unwrap_or_else(|| panic!("no function `{name}`"));
    (c.loaded, c.loads.clone(), c.live.clone())
}

/// `x -> -x` as a graph named `name` (one op: one step).
fn neg_graph(ir: &Ir, x: &Tensor, name: &str) -> Graph {
    ir.create_graph_named(name, |x: Tensor| ops::negate(&x), x).unwrap()
}

fn call(g: &Graph, x: &Tensor) -> Tensor {
    ops::call(g, &[x], &[]).unwrap().remove(0)
}

/// Send `t` to the host (one step).
fn store(t: &Tensor) {
    store_as(t, "out");
}

fn store_as(t: &Tensor, name: &str) {
    let out = popxl::d2h_stream(t.shape(), t.dtype(), name).unwrap();
    ops::host_store(&out, t).unwrap();
}

/// §9.7.1: one load, then three calls: live from the load to the end of the last call.
fn minimal(load: bool) -> Session {
    session(minimal_ir(load), "ipu_model")
}

fn minimal_ir(load: bool) -> Ir {
    let ir = Ir::new();
    let _m = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    let g = neg_graph(&ir, &x, "g");
    let _s = popxl::in_sequence(true);
    let y0 = ops::negate(&x).unwrap(); // 0
    if load {
        ops::remote_code_load(&g, "executable").unwrap(); // 1
    } else {
        store_as(&x, "extra"); // 1 (keeps the step numbers)
    }
    let y1 = call(&g, &y0); // 2..4, body at 3
    let y2 = ops::negate(&y1).unwrap(); // 5
    let y3 = call(&g, &y2); // 6..8
    let y4 = call(&g, &y3); // 9..11, body at 10
    let y5 = ops::negate(&y4).unwrap(); // 12
    store(&y5); // 13
    drop((_s, _m));
    ir
}

#[test]
fn code_is_live_from_the_load_to_the_last_call() {
    let s = minimal(true);
    assert_eq!(s.executable().timeline_steps, 14);
    assert_eq!(liveness(&s, "g"), (true, vec![1], vec![(1, 10)]));
    assert!(s.executable().dump().contains("code_load f0 g"), "{}", s.executable().dump());
}

#[test]
fn a_graph_never_loaded_is_always_live() {
    let s = minimal(false);
    assert_eq!(liveness(&s, "g"), (false, vec![], vec![(0, 13)]));
}

/// §9.7.2: a load before every call makes the code dead between calls.
#[test]
fn a_load_before_each_call_kills_the_code_between_calls() {
    let ir = Ir::new();
    let _m = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    let g = neg_graph(&ir, &x, "g");
    let _s = popxl::in_sequence(true);
    let mut y = ops::negate(&x).unwrap(); // 0
    for _ in 0..3 {
        ops::remote_code_load(&g, "executable").unwrap(); // 1, 5, 9
        y = call(&g, &y); // 2..4, 6..8, 10..12
    }
    store(&y); // 13
    drop((_s, _m));
    let s = session(ir, "ipu_model");
    assert_eq!(liveness(&s, "g"), (true, vec![1, 5, 9], vec![(1, 3), (5, 7), (9, 11)]));
    insta::assert_snapshot!("load_before_each_call", s.executable().dump());
}

/// A call before any load needs the code from the program start; a load
/// after the last call is live only at its own step.
#[test]
fn calls_before_the_first_load_are_live_from_the_start() {
    let ir = Ir::new();
    let _m = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    let g = neg_graph(&ir, &x, "g");
    let _s = popxl::in_sequence(true);
    let y0 = ops::negate(&x).unwrap(); // 0
    let y1 = call(&g, &y0); // 1..3, body at 2
    ops::remote_code_load(&g, "executable").unwrap(); // 4
    let y2 = call(&g, &y1); // 5..7, body at 6
    ops::remote_code_load(&g, "executable").unwrap(); // 8
    store(&y2); // 9
    drop((_s, _m));
    let s = session(ir, "ipu_model");
    assert_eq!(liveness(&s, "g"), (true, vec![4, 8], vec![(0, 2), (4, 6), (8, 8)]));
}

/// The branches of a conditional: `then` loads g and negates, `else` negates
/// (loading g too when `else_loads`).
fn branches(else_loads: bool) -> Session {
    let ir = Ir::new();
    let _m = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    let cond = popxl::variable(true, "cond").unwrap();
    let g = neg_graph(&ir, &x, "g");
    let then_g = ir
        .create_graph_named(
            "then",
            |a: Tensor| {
                ops::remote_code_load(&g, "executable")?;
                ops::negate(&a)
            },
            &x,
        )
        .unwrap();
    let else_g = ir
        .create_graph_named(
            "else",
            |a: Tensor| {
                if else_loads {
                    ops::remote_code_load(&g, "executable")?;
                }
                ops::negate(&a)
            },
            &x,
        )
        .unwrap();
    let _s = popxl::in_sequence(true);
    let y0 = ops::negate(&x).unwrap(); // 0
                                       // then: copy-in 1, body 2..3 (load at 2), copy-out 4; else: copy-in 5,
                                       // body 6 (or 6..7, load at 6), copy-out 7 (or 8).
    let y1 = ops::conditional(&cond, &then_g, &else_g, &[&y0], &[]).unwrap().remove(0);
    let y2 = call(&g, &y1);
    store(&y2);
    drop((_s, _m));
    session(ir, "ipu_model")
}

#[test]
fn a_load_in_one_branch_only_is_pessimistic() {
    let s = branches(false);
    // The call takes 8..10 (body at 9): the code may have been live since the start.
    assert_eq!(liveness(&s, "g"), (true, vec![2], vec![(0, 9)]));
}

#[test]
fn loads_in_every_branch_make_the_code_dead_before_them() {
    let s = branches(true);
    // then loads at 2 (live to its copy-out 4), else loads at 6; the call takes 9..11 (body at 10).
    assert_eq!(liveness(&s, "g"), (true, vec![2, 6], vec![(2, 4), (6, 10)]));
}

/// §9.7.3's nested example: calling g2 loads g1.
#[test]
fn a_loaded_graph_can_load_another() {
    let ir = Ir::new();
    let _m = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    let g1 = neg_graph(&ir, &x, "g1");
    let g2 = ir.create_graph_named("g2", || ops::remote_code_load(&g1, "executable"), ()).unwrap();
    let _s = popxl::in_sequence(true);
    ops::remote_code_load(&g2, "executable").unwrap(); // 0
    ops::call(&g2, &[], &[]).unwrap(); // 1..3, loads g1 at 2
    let y = call(&g1, &x); // 4..6, body at 5
    store(&y); // 7
    drop((_s, _m));
    let s = session(ir, "ipu_model");
    assert_eq!(liveness(&s, "g2"), (true, vec![0], vec![(0, 2)]));
    assert_eq!(liveness(&s, "g1"), (true, vec![2], vec![(2, 5)]));
}

/// A load at the end of a loop body serves the next iteration's call.
#[test]
fn a_load_late_in_a_loop_body_reaches_the_next_iteration() {
    let ir = Ir::new();
    let _m = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    let g = neg_graph(&ir, &x, "g");
    // body: call g (steps 0..2 of the body, g at 1), then load g (3).
    let body = ir
        .create_graph_named(
            "body",
            |a: Tensor| {
                let _s = popxl::in_sequence(true);
                let b = ops::call(&g, &[&a], &[])?.remove(0);
                ops::remote_code_load(&g, "executable")?;
                Ok(b)
            },
            &x,
        )
        .unwrap();
    let _s = popxl::in_sequence(true);
    let y0 = ops::negate(&x).unwrap(); // 0
                                       // copy-in 1, body 2..5 (call 2..4 with g at 3, load at 5), loop copies 6, copy-out 7.
    let y1 = ops::repeat(&body, 3, &[&y0], &[]).unwrap().remove(0);
    store(&y1); // 8
    drop((_s, _m));
    let s = session(ir, "ipu_model");
    // First iteration: live since the start; later ones: from the load (5) to
    // the body's end and from the body's start to the call (2..3).
    assert_eq!(liveness(&s, "g"), (true, vec![5], vec![(0, 3), (5, 5)]));
}

/// Loading changes no value: y5 = -(g(g(-(g(-x))))) = x on both devices, and
/// the cpu device (which inlines other calls) keeps the loaded graph a function.
#[test]
fn code_loading_runs_and_changes_no_value() {
    for device in ["cpu", "ipu_model"] {
        let ir = minimal_ir(true);
        let mut s = Session::new(ir, device).unwrap();
        let out = s.scope(|s| s.run(&Default::default())).unwrap();
        let values: Vec<Vec<f64>> = out.values().map(|a| a.to_f64_vec()).collect();
        assert_eq!(values, vec![vec![1.0, 2.0]], "{device}");
        assert_eq!(s.exec_counters().code_loads, 1, "{device}");
        assert_eq!(s.executable().functions.len(), 1, "{device}: g stays a function");
    }
}
