//! Session semantics of PopXL (seed 002): attach/detach and nested contexts, the
//! host-cache rules of tensor reads and writes (observed through transfer counts),
//! devices, and the typed errors of popxl-api.md section 5.

use popart_ir::{DataType, IrError};
use popxl::{ops, HostArray, HostToDeviceStream, Ir, Tensor};
use popxl_session::{Inputs, Session, SessionError, SessionOptions, TransferCounts};

fn counts(from: u64, to: u64, runs: u64) -> TransferCounts {
    TransferCounts { weights_from_host: from, weights_to_host: to, runs }
}

/// The model of tensor_get_write_adv.py / nested_session_contexts.py:
/// `o = a + b` stored to `output_stream`, `a` an int32 variable (3), `b` a constant (1).
fn add_model() -> (Ir, Tensor, Tensor, popxl::DeviceToHostStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let a = popxl::variable(3i32, "variable_a").unwrap();
    let b = popxl::constant(1i32, "constant_b").unwrap();
    let o = ops::add(&a, &b).unwrap();
    let o_d2h = popxl::d2h_stream(o.shape(), o.dtype(), "output_stream").unwrap();
    ops::host_store(&o_d2h, &o).unwrap();
    drop(_g);
    (ir, a, b, o_d2h)
}

/// `a += b` in place each run, then `a` is stored: runs change device weights.
fn accumulate_model() -> (Ir, Tensor, popxl::DeviceToHostStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let _s = popxl::in_sequence(true);
    let a = popxl::variable(3i32, "a").unwrap();
    let b = popxl::constant(1i32, "b").unwrap();
    let a2 = ops::add_(&a, &b).unwrap();
    let out = popxl::d2h_stream([], popxl::int32, "out").unwrap();
    ops::host_store(&out, &a2).unwrap();
    drop(_s);
    drop(_g);
    (ir, a, out)
}

#[test]
fn nested_contexts_attach_and_transfer_only_at_the_outermost_level() {
    let (ir, ..) = add_model();
    let mut session = Session::new(ir, "ipu_model").unwrap();
    assert!(!session.is_attached());
    {
        let mut ctx1 = session.enter().unwrap();
        assert!(ctx1.is_attached());
        assert_eq!(ctx1.transfer_counts(), counts(1, 0, 0));
        {
            let ctx2 = ctx1.enter().unwrap();
            assert!(ctx2.is_attached());
            assert_eq!(ctx2.transfer_counts(), counts(1, 0, 0), "no weights_from_host when already attached");
        }
        assert!(ctx1.is_attached(), "the inner exit does not detach");
        assert_eq!(ctx1.transfer_counts(), counts(1, 0, 0), "the inner exit does not weights_to_host");
    }
    assert!(!session.is_attached());
    assert_eq!(session.transfer_counts(), counts(1, 1, 0));
}

#[test]
fn manual_attach_then_context_does_not_detach_on_exit() {
    let (ir, ..) = add_model();
    let mut session = Session::new(ir, "cpu").unwrap();
    assert!(session.attach());
    session.scope(|s| s.run(&Inputs::new()).map(|_| ())).unwrap();
    // Attached before the context: its enter did no weights_from_host, its exit nothing.
    assert!(session.is_attached());
    assert_eq!(session.transfer_counts(), counts(0, 0, 1));
    session.detach();
    assert!(!session.is_attached());
    session.try_attach_until_timeout().unwrap();
    assert!(session.is_attached());
}

#[test]
fn host_cache_rules_of_tensor_get_write_adv() {
    let (ir, a, b, out) = add_model();
    let mut session = Session::new(ir, "ipu_model").unwrap();
    // Allowed when detached: host only.
    session.write_variable_data(&a, &HostArray::from(5i32)).unwrap();
    assert_eq!(session.transfer_counts(), counts(0, 0, 0));
    {
        let mut s = session.enter().unwrap();
        assert_eq!(s.transfer_counts(), counts(1, 0, 0));
        // No weights_to_host: nothing has invalidated the host weights yet.
        assert_eq!(s.get_tensor_data(&a).unwrap(), HostArray::from(5i32));
        assert_eq!(s.transfer_counts(), counts(1, 0, 0));
        let outputs = s.run(&Inputs::new()).unwrap();
        assert_eq!(outputs[&out], HostArray::from(6i32));
        // Constants never need a transfer.
        assert_eq!(s.get_tensor_data(&b).unwrap(), HostArray::from(1i32));
        assert_eq!(s.transfer_counts(), counts(1, 0, 1));
        // A variable after a run: one weights_to_host.
        let datas = s.get_tensors_data([&a, &b]).unwrap();
        assert_eq!(datas, vec![HostArray::from(5i32), HostArray::from(1i32)]);
        assert_eq!(s.transfer_counts(), counts(1, 1, 1));
        // Attached write: host and device.
        s.write_variable_data(&a, &HostArray::from(7i32)).unwrap();
        assert_eq!(s.transfer_counts(), counts(2, 1, 1));
        // The write did not invalidate the host weights.
        assert_eq!(s.get_tensor_data(&a).unwrap(), HostArray::from(7i32));
        assert_eq!(s.transfer_counts(), counts(2, 1, 1));
        assert_eq!(s.run(&Inputs::new()).unwrap()[&out], HostArray::from(8i32));
    }
    // Leaving the context: weights_to_host and detach.
    assert_eq!(session.transfer_counts(), counts(2, 2, 2));
    // Detached: no transfer, the latest weights were fetched on exit.
    assert_eq!(session.get_tensors_data([&a, &b]).unwrap(), vec![HostArray::from(7i32), HostArray::from(1i32)]);
    assert_eq!(session.transfer_counts(), counts(2, 2, 2));
}

#[test]
fn device_updates_are_fetched_only_when_stale_and_attached() {
    let (ir, a, out) = accumulate_model();
    let mut session = Session::new(ir, "cpu").unwrap();
    {
        let mut s = session.enter().unwrap();
        assert_eq!(s.run(&Inputs::new()).unwrap()[&out], HostArray::from(4i32));
        assert!(!s.host_weights_in_sync());
        assert_eq!(s.get_tensor_data(&a).unwrap(), HostArray::from(4i32));
        assert!(s.host_weights_in_sync());
        assert_eq!(s.get_tensor_data(&a).unwrap(), HostArray::from(4i32));
        assert_eq!(s.transfer_counts(), counts(1, 1, 1));
        s.run(&Inputs::new()).unwrap();
        // A manual detach skips the fetch: the host copy is returned as it is (stale).
        s.detach();
        assert_eq!(s.get_tensor_data(&a).unwrap(), HostArray::from(4i32));
        assert_eq!(s.transfer_counts(), counts(1, 1, 2));
    }
    // The context attached, but the session was detached inside it: exit's
    // weights_to_host fails (ignored by the drop) and nothing else happens.
    assert_eq!(session.transfer_counts(), counts(1, 1, 2));
    // Detached write, then a new context uploads it.
    session.write_variable_data(&a, &HostArray::from(10i32)).unwrap();
    let out_value = session.scope(|s| s.run(&Inputs::new())).unwrap()[&out].clone();
    assert_eq!(out_value, HostArray::from(11i32));
    assert_eq!(session.get_tensor_data(&a).unwrap(), HostArray::from(11i32));
}

#[test]
fn device_memory_does_not_survive_detach() {
    let (ir, a, out) = accumulate_model();
    let mut session = Session::new(ir, "cpu").unwrap();
    assert!(session.attach());
    // Manual attach loads the program but not the weights: `a` is zero on device.
    assert_eq!(session.run(&Inputs::new()).unwrap()[&out], HostArray::from(1i32));
    session.weights_from_host().unwrap();
    assert_eq!(session.run(&Inputs::new()).unwrap()[&out], HostArray::from(4i32));
    session.detach();
    assert!(session.attach());
    session.weights_from_host().unwrap();
    // The device update of the previous attach was never fetched: back to 3 + 1.
    assert_eq!(session.run(&Inputs::new()).unwrap()[&out], HostArray::from(4i32));
    assert_eq!(session.get_tensor_data(&a).unwrap(), HostArray::from(4i32));
}

#[test]
fn weights_to_host_on_exit_can_be_disabled_and_errors_skip_it() {
    let (ir, a, _) = accumulate_model();
    let options = SessionOptions { weights_to_host_on_exit: false, ..SessionOptions::default() };
    let mut session = Session::with_options(ir, "cpu", options).unwrap();
    session.scope(|s| s.run(&Inputs::new()).map(|_| ())).unwrap();
    assert_eq!(session.transfer_counts(), counts(1, 0, 1));
    assert_eq!(session.get_tensor_data(&a).unwrap(), HostArray::from(3i32), "device value never fetched");

    let (ir, a, _) = accumulate_model();
    let mut session = Session::new(ir, "cpu").unwrap();
    let r: Result<(), SessionError> = session.scope(|s| {
        s.run(&Inputs::new())?;
        Err(SessionError::NoOpenContext)
    });
    assert_eq!(r, Err(SessionError::NoOpenContext));
    assert!(!session.is_attached(), "the context still detaches");
    assert_eq!(session.transfer_counts(), counts(1, 0, 1), "an error skips weights_to_host");
    assert_eq!(session.get_tensor_data(&a).unwrap(), HostArray::from(3i32));
}

#[test]
fn explicit_exit_reports_the_exit_transfer() {
    let (ir, ..) = add_model();
    let mut session = Session::new(ir, "cpu").unwrap();
    let mut ctx = session.enter().unwrap();
    ctx.detach();
    assert_eq!(ctx.exit(), Err(SessionError::NotAttached { function: "weights_to_host" }));
}

#[test]
fn runtime_functions_need_attachment_but_data_access_does_not() {
    let (ir, a, b, _) = add_model();
    let mut session = Session::new(ir, "cpu").unwrap();
    assert_eq!(session.run(&Inputs::new()).unwrap_err(), SessionError::NotAttached { function: "run" });
    let mut outputs = session.create_host_outputs().unwrap();
    assert_eq!(
        session.run_with_outputs(&Inputs::new(), &mut outputs).unwrap_err(),
        SessionError::NotAttached { function: "run_with_outputs" }
    );
    assert_eq!(session.weights_from_host().unwrap_err(), SessionError::NotAttached { function: "weights_from_host" });
    assert_eq!(session.weights_to_host().unwrap_err(), SessionError::NotAttached { function: "weights_to_host" });
    assert_eq!(session.get_tensor_data(&b).unwrap(), HostArray::from(1i32));
    session.write_variable_data(&a, &HostArray::from(2i32)).unwrap();
    assert_eq!(session.get_tensor_data(&a).unwrap(), HostArray::from(2i32));
    let message = SessionError::NotAttached { function: "run" }.to_string();
    assert!(message.starts_with("must be attached to device before calling a runtime function"), "{message}");
}

#[test]
fn devices() {
    let (ir, ..) = add_model();
    assert_eq!(Session::new(ir, "gpu").unwrap_err(), SessionError::UnknownDevice("gpu".into()));
    // ipu_hw compiles but cannot attach.
    let (ir, ..) = add_model();
    let mut session = Session::new(ir, "ipu_hw").unwrap();
    assert!(!session.attach());
    assert!(matches!(session.try_attach_until_timeout(), Err(SessionError::AttachFailed { device: "ipu_hw", .. })));
    let err = session.enter().err().expect("attach fails");
    assert_eq!(err.to_string(), "could not attach to device `ipu_hw`: no IPU hardware is available");
    assert!(!session.is_attached());
    // A failed enter leaves no context open.
    let (ir, ..) = add_model();
    let mut cpu = Session::new(ir, "cpu").unwrap();
    cpu.scope(|s| s.run(&Inputs::new()).map(|_| ())).unwrap();
}

#[test]
fn replication_runs_on_cpu_and_ipu_model_and_shapes_host_arrays() {
    let build = || {
        let ir = Ir::new();
        ir.set_replication_factor(2).unwrap();
        ir.set_num_host_transfers(3).unwrap();
        let _g = ir.main_graph().enter();
        let x = popxl::h2d_stream([4], popxl::float32, "x").unwrap();
        let y = ops::relu(&ops::host_load(&x, "x").unwrap()).unwrap();
        let out = popxl::d2h_stream([4], popxl::float32, "y").unwrap();
        ops::host_store(&out, &y).unwrap();
        drop(_g);
        (ir, out)
    };
    for device in ["cpu", "ipu_model"] {
        let (ir, out) = build();
        let session = Session::new(ir, device).unwrap();
        assert_eq!(session.replication_factor(), 2);
        assert_eq!(session.create_host_outputs().unwrap()[&out].shape(), &[3, 2, 4]);
    }
    let (ir, out) = build();
    let session = Session::new(ir, "ipu_hw").unwrap();
    assert_eq!(session.create_host_outputs().unwrap()[&out].shape(), &[3, 2, 4]);
}

#[test]
fn session_freezes_the_ir() {
    let (ir, ..) = add_model();
    let handle = ir.clone();
    let _session = Session::new(ir, "cpu").unwrap();
    assert!(handle.is_frozen());
    let _g = handle.main_graph().enter();
    assert!(popxl::constant(1.0f32, "late").is_err());
}

#[test]
fn ir_without_ops_is_an_error() {
    let ir = Ir::new();
    let id = ir.id();
    assert_eq!(Session::new(ir, "cpu").unwrap_err(), SessionError::NoOps { ir_id: id });
    // Only ops without effect: pruned away, the main graph is empty; PopXL
    // allows that session, and running it does nothing.
    let ir = Ir::new();
    {
        let _g = ir.main_graph().enter();
        let c = popxl::constant(vec![1.0f32, 2.0], "c").unwrap();
        ops::relu(&c).unwrap();
    }
    let mut session = Session::new(ir, "cpu").unwrap();
    assert_eq!(session.prepared_ir().main_graph().num_ops(), 0);
    let out = session.scope(|s| s.run(&Inputs::new())).unwrap();
    assert!(out.is_empty());
    // Ops in a graph nobody calls do not count.
    let ir = Ir::new();
    let x = ir.main_graph().with(|| popxl::variable(1.0f32, "x")).unwrap();
    let out = ir.main_graph().with(|| popxl::d2h_stream([], popxl::float32, "out")).unwrap();
    ir.create_graph(move |t: Tensor| -> popxl::Result<()> { ops::host_store(&out, &t) }, &x).unwrap();
    assert!(matches!(Session::new(ir, "cpu"), Err(SessionError::NoOps { .. })));
}

#[test]
fn topocon_cycle_is_refused_when_added() {
    let ir = Ir::new();
    {
        let _g = ir.main_graph().enter();
        let c = popxl::constant(1.0f32, "c").unwrap();
        let out1 = popxl::d2h_stream([], popxl::float32, "o1").unwrap();
        let out2 = popxl::d2h_stream([], popxl::float32, "o2").unwrap();
        ops::host_store(&out1, &c).unwrap();
        ops::host_store(&out2, &c).unwrap();
    }
    let (first, second) = ir.with_ir(|core| {
        let ops = core.main_graph().ops_in_creation_order();
        (ops[0], ops[1])
    });
    ir.main_graph().add_topo_con(first, second).unwrap();
    // The cycle is refused when the closing constraint is added (issue 13: early errors).
    match ir.main_graph().add_topo_con(second, first) {
        Err(popxl::PopXlError::Ir(IrError::Cycle { graph, ops })) => {
            assert_eq!(graph, "main");
            assert_eq!(ops.len(), 2, "{ops:?}");
        }
        other => panic!("expected a cycle, got {other:?}"),
    }
    // The IR is unchanged and still runs.
    assert!(Session::new(ir, "cpu").is_ok());
}

#[test]
fn tensor_data_errors_name_the_tensor() {
    let (ir, a, b, _) = add_model();
    let sum = ir
        .main_graph()
        .tensors()
        .unwrap()
        .into_iter()
        .find(|t| ir.with_ir(|c| c.main_graph().tensor(t.tensor_id()).unwrap().producer().is_some()));
    let sum = sum.expect("a + b is an op output");
    let mut session = Session::new(ir, "cpu").unwrap();
    assert_eq!(
        session.get_tensor_data(&sum).unwrap_err(),
        SessionError::NotVariableOrConstant { tensor: sum.id().into() }
    );
    assert_eq!(
        session.write_variable_data(&b, &HostArray::from(1i32)).unwrap_err(),
        SessionError::NotAVariable { tensor: "constant_b".into() }
    );
    assert_eq!(
        session.write_variable_data(&a, &HostArray::from(vec![1i32, 2])).unwrap_err(),
        SessionError::WriteShapeMismatch { tensor: "variable_a".into(), expected: vec![], got: vec![2] }
    );
    assert_eq!(
        session.write_variable_data(&a, &HostArray::from(vec![1.5f32])).unwrap_err(),
        SessionError::WriteDTypeMismatch {
            tensor: "variable_a".into(),
            expected: DataType::Int32,
            got: DataType::Float32
        }
    );
    // Scalars are cast to the variable's dtype.
    session.write_variable_data(&a, &HostArray::from(9.0f64)).unwrap();
    assert_eq!(session.get_tensor_data(&a).unwrap(), HostArray::from(9i32));
    // Nothing is written when one pair of a batch is invalid.
    let bad = session.write_variables_data([(&a, &HostArray::from(1i32)), (&b, &HostArray::from(1i32))]);
    assert!(bad.is_err());
    assert_eq!(session.get_tensor_data(&a).unwrap(), HostArray::from(9i32));
    // Tensors of another IR.
    let (_, other_a, ..) = add_model();
    assert!(matches!(session.get_tensor_data(&other_a), Err(SessionError::ForeignTensor { .. })));
}

fn relu_model() -> (Ir, HostToDeviceStream, popxl::DeviceToHostStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::h2d_stream([2, 3], popxl::float32, "x").unwrap();
    let y = ops::relu(&ops::host_load(&x, "x").unwrap()).unwrap();
    let out = popxl::d2h_stream([2, 3], popxl::float32, "y").unwrap();
    ops::host_store(&out, &y).unwrap();
    drop(_g);
    (ir, x, out)
}

#[test]
fn stream_errors() {
    let (ir, x, out) = relu_model();
    let mut session = Session::new(ir, "cpu").unwrap();
    let mut s = session.enter().unwrap();
    let good = HostArray::from(ndarray::Array2::<f32>::zeros((2, 3)));
    // Missing input.
    assert_eq!(
        s.run(&Inputs::new()).unwrap_err(),
        SessionError::UnexpectedOrMissingStreams { role: "input", unexpected: vec![], missing: vec!["x".into()] }
    );
    // A stream of another IR is unexpected (and x is then missing).
    let (_, other_x, _) = relu_model();
    let err = s.run(&[(other_x, good.clone())].into()).unwrap_err();
    assert_eq!(
        err,
        SessionError::UnexpectedOrMissingStreams {
            role: "input",
            unexpected: vec!["x".into()],
            missing: vec!["x".into()]
        }
    );
    // Wrong shape.
    let err = s.run(&[(x.clone(), HostArray::from(ndarray::Array2::<f32>::zeros((3, 2))))].into()).unwrap_err();
    assert_eq!(
        err,
        SessionError::StreamShapeMismatch {
            role: "input",
            stream: "x".into(),
            stream_shape: vec![2, 3],
            expected: vec![2, 3],
            got: vec![3, 2]
        }
    );
    // Wrong dtype.
    let err = s.run(&[(x.clone(), HostArray::from(ndarray::Array2::<i32>::zeros((2, 3))))].into()).unwrap_err();
    assert_eq!(
        err,
        SessionError::StreamDTypeMismatch {
            role: "input",
            stream: "x".into(),
            expected: DataType::Float32,
            got: DataType::Int32
        }
    );
    // float64 input arrays are downcast by default.
    let x64 = ndarray::array![[-1.0f64, 2.0, -3.0], [4.0, -5.0, 6.0]];
    let y = s.run(&[(x.clone(), HostArray::from(x64))].into()).unwrap();
    assert_eq!(y[&out], HostArray::from(ndarray::array![[0.0f32, 2.0, 0.0], [4.0, 0.0, 6.0]]));
    // Output arrays are validated too.
    let mut outputs = s.create_host_outputs().unwrap();
    outputs.insert(out.clone(), HostArray::from(ndarray::Array2::<f32>::zeros((2, 2))));
    assert!(matches!(
        s.run_with_outputs(&[(x.clone(), good.clone())].into(), &mut outputs),
        Err(SessionError::StreamShapeMismatch { role: "output", .. })
    ));
    let mut none = popxl_session::Outputs::new();
    assert_eq!(
        s.run_with_outputs(&[(x, good)].into(), &mut none).unwrap_err(),
        SessionError::UnexpectedOrMissingStreams { role: "output", unexpected: vec![], missing: vec!["y".into()] }
    );
}

#[test]
fn downcast_can_be_disabled() {
    let (ir, x, _) = relu_model();
    let options = SessionOptions { downcast_inputs: false, ..SessionOptions::default() };
    let mut session = Session::with_options(ir, "cpu", options).unwrap();
    let err = session.scope(|s| s.run(&[(x.clone(), HostArray::from(ndarray::Array2::<f64>::zeros((2, 3))))].into()));
    assert_eq!(
        err.unwrap_err(),
        SessionError::StreamDTypeMismatch {
            role: "input",
            stream: "x".into(),
            expected: DataType::Float32,
            got: DataType::Float64
        }
    );
    assert_eq!(session.expected_inputs(), vec![x]);
}
