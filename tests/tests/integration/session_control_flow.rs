//! Execution of calls (with and without modified inputs, elided or copied),
//! repeats (loop-carried values, parallel loop copies) and conditionals.

use ndarray::array;
use popxl::{ops, DeviceToHostStream, HostArray, HostToDeviceStream, Ir, Tensor};
use popxl_session::{Inputs, Session};

fn f32s(v: &[f32]) -> HostArray {
    HostArray::from(v.to_vec())
}

/// main: x = load(in); y = x * 10; then `sites` calls of `inc(t) { t += 1 }`
/// (in place) on the tensors chosen by `args` (0: x, 1: y), marking the input
/// modified when `mark`; stores x and y afterwards.
fn inc_calls(args: &[usize], mark: bool) -> (Ir, HostToDeviceStream, DeviceToHostStream, DeviceToHostStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let _s = popxl::in_sequence(true);
    let input = popxl::h2d_stream([2], popxl::float32, "in").unwrap();
    let x = ops::host_load(&input, "x").unwrap();
    let ten = popxl::constant(vec![10.0f32, 10.0], "ten").unwrap();
    let y = ops::mul(&x, &ten).unwrap();
    let inc = ir
        .create_graph(
            |t: Tensor| -> popxl::Result<()> {
                let one = popxl::constant(vec![1.0f32, 1.0], "one")?;
                ops::add_(&t, &one)?;
                Ok(())
            },
            &x,
        )
        .unwrap();
    for &a in args {
        let t = if a == 0 { &x } else { &y };
        let info = ops::call_with_info(&inc, &[t], &[]).unwrap();
        if mark {
            info.set_parent_input_modified(t).unwrap();
        }
    }
    let ox = popxl::d2h_stream([2], popxl::float32, "ox").unwrap();
    let oy = popxl::d2h_stream([2], popxl::float32, "oy").unwrap();
    ops::host_store(&ox, &x).unwrap();
    ops::host_store(&oy, &y).unwrap();
    drop(_s);
    drop(_g);
    (ir, input, ox, oy)
}

fn run_inc(args: &[usize], mark: bool) -> (HostArray, HostArray, Session) {
    let (ir, input, ox, oy) = inc_calls(args, mark);
    let mut session = Session::new(ir, "cpu").unwrap();
    let out = session.scope(|s| s.run(&[(input, f32s(&[1.0, 2.0]))].into())).unwrap();
    (out[&ox].clone(), out[&oy].clone(), session)
}

#[test]
fn modified_inputs_with_one_caller_buffer_are_updated_in_place() {
    // Both sites pass x: the callee reads and writes x's buffer directly.
    let (x, y, session) = run_inc(&[0, 0], true);
    assert_eq!(x, f32s(&[3.0, 4.0]));
    assert_eq!(y, f32s(&[10.0, 20.0]));
    let dump = session.executable().dump();
    assert!(!dump.contains("copy "), "no copies expected:\n{dump}");
}

#[test]
fn modified_inputs_with_different_caller_buffers_are_copied_back() {
    let (x, y, session) = run_inc(&[0, 1, 1], true);
    assert_eq!(x, f32s(&[2.0, 3.0]));
    assert_eq!(y, f32s(&[12.0, 22.0]));
    let copies = session.executable().dump().matches("copy ").count();
    assert_eq!(copies, 6, "copy in + copy back at each of the three sites");
}

#[test]
fn unmarked_inputs_are_passed_by_value() {
    let (x, y, _) = run_inc(&[0, 1], false);
    assert_eq!(x, f32s(&[1.0, 2.0]));
    assert_eq!(y, f32s(&[10.0, 20.0]));
}

#[test]
fn nested_functions_are_emitted_once_and_called_from_every_site() {
    let ir = Ir::new();
    let (input, out) = {
        let _g = ir.main_graph().enter();
        let input = popxl::h2d_stream([2], popxl::float32, "in").unwrap();
        let x = ops::host_load(&input, "x").unwrap();
        let inner = ir.create_graph_named("inner", |t: Tensor| &t * 3.0, &x).unwrap();
        let inner2 = inner.clone();
        let outer = ir
            .create_graph_named(
                "outer",
                move |t: Tensor| -> popxl::Result<Tensor> {
                    let a = ops::call(&inner2, &[&t], &[])?.remove(0);
                    let b = ops::call(&inner2, &[&a], &[])?.remove(0);
                    ops::sub(&b, &t)
                },
                &x,
            )
            .unwrap();
        let a = ops::call(&outer, &[&x], &[]).unwrap().remove(0);
        let b = ops::call(&outer, &[&a], &[]).unwrap().remove(0);
        let c = ops::call(&inner, &[&b], &[]).unwrap().remove(0);
        let out = popxl::d2h_stream([2], popxl::float32, "out").unwrap();
        ops::host_store(&out, &c).unwrap();
        (input, out)
    };
    let options = popxl_session::SessionOptions { inline_calls: Some(false), ..Default::default() };
    let mut session = Session::with_options(ir, "cpu", options).unwrap();
    let exe = session.executable();
    assert_eq!(exe.functions.len(), 2);
    assert_eq!(exe.kernel_calls().len(), 2, "one Mul in inner, one Sub in outer");
    let result = session.scope(|s| s.run(&[(input, f32s(&[1.0, -0.5]))].into())).unwrap();
    // outer(t) = 9t - t = 8t; then outer again (64t) and inner (192t).
    assert_eq!(result[&out], f32s(&[192.0, -96.0]));
    assert_eq!(session.exec_counters().kernels, 2 * 3 + 1);
}

#[test]
fn loop_carried_values_that_swap_are_staged_through_temporaries() {
    for (count, want_a, want_b) in [(3usize, [5.0f32, 6.0], [1.0f32, 2.0]), (4, [1.0, 2.0], [5.0, 6.0])] {
        let ir = Ir::new();
        let (oa, ob) = {
            let _g = ir.main_graph().enter();
            let a = popxl::variable(vec![1.0f32, 2.0], "a").unwrap();
            let b = popxl::variable(vec![5.0f32, 6.0], "b").unwrap();
            let swap = ir.create_graph(|a: Tensor, b: Tensor| (b, a), (&a, &b)).unwrap();
            let outs = ops::repeat(&swap, count, &[&a, &b], &[]).unwrap();
            let oa = popxl::d2h_stream([2], popxl::float32, "oa").unwrap();
            let ob = popxl::d2h_stream([2], popxl::float32, "ob").unwrap();
            ops::host_store(&oa, &outs[0]).unwrap();
            ops::host_store(&ob, &outs[1]).unwrap();
            (oa, ob)
        };
        let mut session = Session::new(ir, "cpu").unwrap();
        assert!(session.executable().dump().contains("(copy temporary)"));
        let out = session.scope(|s| s.run(&Inputs::new())).unwrap();
        assert_eq!((out[&oa].clone(), out[&ob].clone()), (f32s(&want_a), f32s(&want_b)), "count {count}");
    }
}

#[test]
fn repeat_body_updating_its_input_in_place() {
    // body(acc, step) = (acc += step; acc, step) carried: acc + count * step.
    let ir = Ir::new();
    let out = {
        let _g = ir.main_graph().enter();
        let acc = popxl::variable(vec![1.0f32, 1.0], "acc").unwrap();
        let step = popxl::constant(vec![0.5f32, -2.0], "step").unwrap();
        let body = ir
            .create_graph(
                |acc: Tensor, step: Tensor| -> popxl::Result<Tensor> { ops::add_(&acc, &step) },
                (&acc, &step),
            )
            .unwrap();
        let r = ops::repeat(&body, 5, &[&acc, &step], &[]).unwrap().remove(0);
        let out = popxl::d2h_stream([2], popxl::float32, "out").unwrap();
        ops::host_store(&out, &r).unwrap();
        out
    };
    let mut session = Session::new(ir, "cpu").unwrap();
    let f = &session.executable().functions[0];
    assert_eq!(f.outputs[0], f.inputs[0], "the in-place output is the input's buffer: no loop copy");
    let result = session.scope(|s| s.run(&Inputs::new())).unwrap();
    assert_eq!(result[&out], f32s(&[3.5, -9.0]));
}

#[test]
fn conditional_runs_the_branch_selected_at_run_time() {
    let ir = Ir::new();
    let (cond, xin, out) = {
        let _g = ir.main_graph().enter();
        let cond = popxl::h2d_stream([], popxl::bool, "cond").unwrap();
        let xin = popxl::h2d_stream([2], popxl::float32, "x").unwrap();
        let c = ops::host_load(&cond, "c").unwrap();
        let x = ops::host_load(&xin, "x").unwrap();
        let w = popxl::variable(array![2.0f32, 3.0], "w").unwrap();
        let then_g = ir.create_graph(|x: Tensor, w: Tensor| ops::mul(&x, &w), (&x, &w)).unwrap();
        let else_g = ir.create_graph(|x: Tensor, _w: Tensor| -x, (&x, &w)).unwrap();
        let y = ops::conditional(&c, &then_g, &else_g, &[&x, &w], &[]).unwrap().remove(0);
        let out = popxl::d2h_stream([2], popxl::float32, "y").unwrap();
        ops::host_store(&out, &y).unwrap();
        (cond, xin, out)
    };
    let mut session = Session::new(ir, "cpu").unwrap();
    assert!(session.executable().dump().contains("if b"));
    let mut s = session.enter().unwrap();
    for (c, want) in [(true, [3.0f32, -6.0]), (false, [-1.5, 2.0]), (true, [3.0, -6.0])] {
        let inputs: Inputs = [(cond.clone(), HostArray::from(c)), (xin.clone(), f32s(&[1.5, -2.0]))].into();
        assert_eq!(s.run(&inputs).unwrap()[&out], f32s(&want), "cond {c}");
    }
}

#[test]
fn repeat_inside_a_called_graph_with_a_host_load() {
    // main calls f; f repeats g 3 times; g loads from the stream each iteration.
    let ir = Ir::new();
    let (xin, out) = {
        let _g = ir.main_graph().enter();
        let xin = popxl::h2d_stream([2], popxl::float32, "x").unwrap();
        let zero = popxl::constant(vec![0.0f32, 0.0], "zero").unwrap();
        let s1 = xin.clone();
        let g = ir
            .create_graph_named(
                "g",
                move |acc: Tensor| -> popxl::Result<Tensor> { ops::add(&acc, &ops::host_load(&s1, "x")?) },
                &zero,
            )
            .unwrap();
        let f = ir
            .create_graph_named(
                "f",
                move |acc: Tensor| -> popxl::Result<Tensor> { Ok(ops::repeat(&g, 3, &[&acc], &[])?.remove(0)) },
                &zero,
            )
            .unwrap();
        let r = ops::call(&f, &[&zero], &[]).unwrap().remove(0);
        let out = popxl::d2h_stream([2], popxl::float32, "out").unwrap();
        ops::host_store(&out, &r).unwrap();
        (xin, out)
    };
    ir.set_num_host_transfers(3).unwrap();
    let mut session = Session::new(ir, "cpu").unwrap();
    let data = array![[1.0f32, 2.0], [10.0, 20.0], [100.0, 200.0]];
    let result = session.scope(|s| s.run(&[(xin, HostArray::from(data))].into())).unwrap();
    assert_eq!(result[&out], HostArray::from(array![[111.0f32, 222.0], [0.0, 0.0], [0.0, 0.0]]));
}

/// PopXL's `repeat` of a graph with a by-reference input that is not loop-carried:
/// body(c, acc&) { acc += c; return c * 2 }. Each iteration writes the caller's
/// `acc`, reading the carried `c` of that iteration: after 3 iterations from c = 1,
/// acc gained 1 + 2 + 4 and the output is 8. Also with a variable read again after
/// the loop, and the same through a second repeat of the same graph.
#[test]
fn repeat_writes_by_reference_inputs_in_every_iteration() {
    for device in ["cpu", "ipu_model"] {
        let ir = Ir::new();
        let _g = ir.main_graph().enter();
        let _s = popxl::in_sequence(true);
        let c = popxl::constant(vec![1.0f32, -1.0], "c").unwrap();
        let acc = popxl::variable(vec![100.0f32, 200.0], "acc").unwrap();
        let body = ir
            .create_graph(
                |c: Tensor, acc: Tensor| -> popxl::Result<Tensor> {
                    ops::add_(&acc, &c)?;
                    Ok(&c * 2.0)
                },
                (&c, popxl::TensorByRef(acc.clone())),
            )
            .unwrap();
        let y = ops::repeat(&body, 3, &[&c, &acc], &[]).unwrap().remove(0);
        let z = ops::repeat(&body, 2, &[&y, &acc], &[]).unwrap().remove(0);
        let after = &acc * 1.0;
        let streams: Vec<_> = [("y", &y), ("z", &z), ("after", &after)]
            .into_iter()
            .map(|(name, t)| {
                let s = popxl::d2h_stream(t.shape(), t.dtype(), name).unwrap();
                ops::host_store(&s, t).unwrap();
                s
            })
            .collect();
        drop((_s, _g));
        let mut session = Session::new(ir, device).unwrap();
        let out = session.enter().unwrap().run(&Inputs::new()).unwrap();
        // First loop: acc += 1 + 2 + 4 (times c); second loop from c = 8: acc += 8 + 16.
        let gained = 1.0 + 2.0 + 4.0 + 8.0 + 16.0;
        assert_eq!(out[&streams[0]], f32s(&[8.0, -8.0]), "{device}");
        assert_eq!(out[&streams[1]], f32s(&[32.0, -32.0]), "{device}");
        assert_eq!(out[&streams[2]], f32s(&[100.0 + gained, 200.0 - gained]), "{device}");
        assert_eq!(session.get_tensor_data(&acc).unwrap(), f32s(&[100.0 + gained, 200.0 - gained]), "{device}");
    }
}

/// A loop-carried input (it takes the previous iteration's output) cannot be passed by
/// reference: a typed error naming the graph and the input.
#[test]
fn repeat_refuses_a_loop_carried_input_by_reference() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32], "x").unwrap();
    let body = ir.create_graph(|x: Tensor| &x + 1.0, popxl::TensorByRef(x.clone())).unwrap();
    let err = ops::repeat(&body, 2, &[&x], &[]).unwrap_err();
    assert!(matches!(err, popxl::PopXlError::ByRefInRepeat { input: 0, .. }), "{err}");
    assert!(err.to_string().contains("loop-carried"), "{err}");
}
