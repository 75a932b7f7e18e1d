//! Session errors (PopXL section 5): devices, attach state, stream sets,
//! shapes and dtypes of inputs and outputs, host transfers, unknown tensors for
//! get/write; and recovery: a failed run leaves the session usable and the
//! weights unchanged.

use ndarray::{Array1, Array2};
use popart_ir::IrError;
use popxl::ops;
use popxl::{HostArray, Ir};
use popxl_session::{Inputs, Outputs, Session, SessionError as S};

use super::fixtures::{inputs, step_model, values, StepModel};
use super::harness::{case, ensure, Case, CaseResult, Category::Session as Cat, Failure};

fn attached(m: &StepModel) -> Result<Session, Failure> {
    let mut s = Session::new(m.ir.clone(), "cpu")?;
    s.try_attach_until_timeout()?;
    // A manual attach transfers no weights (PopXL: only entering a context does).
    s.weights_from_host()?;
    Ok(s)
}

fn good_inputs(m: &StepModel) -> Inputs {
    inputs(&m.x, vec![10.0f32, 20.0])
}

/// Run with `bad` inputs (must fail), then check that `w` is unchanged and a
/// good run still works and computes `x + w`.
fn recovers_after(bad: impl FnOnce(&StepModel) -> Inputs) -> CaseResult {
    let m = step_model()?;
    let mut s = attached(&m)?;
    s.run(&good_inputs(&m))?; // w: [1, 2] -> [11, 22]
    let before = s.get_tensor_data(&m.w)?;
    let r = s.run(&bad(&m));
    ensure(r.is_err(), || "bad inputs accepted".into())?;
    let after = s.get_tensor_data(&m.w)?;
    ensure(before == after, || format!("a failed run changed w from {before:?} to {after:?}"))?;
    let out = s.run(&good_inputs(&m))?;
    let y = values(&out, &m.y);
    ensure(y == [21.0, 42.0], || format!("run after a failed run gave y = {y:?}, want [21, 42]"))
}

pub fn cases() -> Vec<Case> {
    vec![
        case(Cat, "unknown_device", || {
            let m = step_model()?;
            expect_err!(Session::new(m.ir, "tpu"), S::UnknownDevice(_), ["`tpu`"])
        }),
        case(Cat, "ipu_hw_cannot_attach", || {
            let m = step_model()?;
            let mut s = Session::new(m.ir, "ipu_hw")?;
            expect_err!(s.enter().map(|_| ()), S::AttachFailed { .. }, ["ipu_hw"])
        }),
        case(Cat, "ipu_hw_try_attach", || {
            let m = step_model()?;
            let mut s = Session::new(m.ir, "ipu_hw")?;
            expect_err!(s.try_attach_until_timeout(), S::AttachFailed { .. }, ["could not attach"])
        }),
        case(Cat, "run_not_attached", || {
            let m = step_model()?;
            let mut s = Session::new(m.ir.clone(), "cpu")?;
            expect_err!(s.run(&good_inputs(&m)), S::NotAttached { .. }, ["run", "attached"])
        }),
        case(Cat, "weights_from_host_not_attached", || {
            let m = step_model()?;
            let mut s = Session::new(m.ir, "cpu")?;
            expect_err!(s.weights_from_host(), S::NotAttached { .. }, ["weights_from_host"])
        }),
        case(Cat, "weights_to_host_not_attached", || {
            let m = step_model()?;
            let mut s = Session::new(m.ir, "cpu")?;
            expect_err!(s.weights_to_host(), S::NotAttached { .. }, ["weights_to_host"])
        }),
        case(Cat, "missing_input_stream", || {
            let m = step_model()?;
            let mut s = attached(&m)?;
            expect_err!(s.run(&Inputs::new()), S::UnexpectedOrMissingStreams { .. }, ["missing", "x"])
        }),
        case(Cat, "input_stream_of_another_ir", || {
            let m = step_model()?;
            let other = step_model()?;
            let mut s = attached(&m)?;
            let mut i = good_inputs(&m);
            i.insert(other.x.clone(), HostArray::from(vec![1.0f32, 1.0]));
            expect_err!(s.run(&i), S::UnexpectedOrMissingStreams { .. } | S::ForeignTensor { .. }, ["x"])
        }),
        case(Cat, "input_wrong_shape", || {
            let m = step_model()?;
            let mut s = attached(&m)?;
            expect_err!(s.run(&inputs(&m.x, vec![1.0f32, 2.0, 3.0])), S::StreamShapeMismatch { .. }, ["`x`", "[3]"])
        }),
        case(Cat, "input_wrong_rank", || {
            let m = step_model()?;
            let mut s = attached(&m)?;
            expect_err!(s.run(&inputs(&m.x, Array2::<f32>::zeros((1, 2)))), S::StreamShapeMismatch { .. }, ["`x`"])
        }),
        case(Cat, "input_wrong_dtype", || {
            let m = step_model()?;
            let mut s = attached(&m)?;
            expect_err!(s.run(&inputs(&m.x, vec![1i32, 2])), S::StreamDTypeMismatch { .. }, ["`x`", "int32", "float32"])
        }),
        case(Cat, "input_f64_downcast_is_accepted", || {
            let m = step_model()?;
            let mut s = attached(&m)?;
            let out = s.run(&inputs(&m.x, vec![10.0f64, 20.0]))?;
            let y = values(&out, &m.y);
            ensure(y == [11.0, 22.0], || format!("y = {y:?}"))
        }),
        case(Cat, "input_f64_downcast_overflow", || {
            let m = step_model()?;
            let mut s = attached(&m)?;
            expect_err!(
                s.run(&inputs(&m.x, vec![1e300f64, 0.0])),
                S::InvalidHostData { .. } | S::StreamDTypeMismatch { .. },
                ["`x`"]
            )
        }),
        case(Cat, "too_few_host_transfers", || {
            let m = step_model()?;
            m.ir.set_num_host_transfers(3)?;
            let mut s = attached(&m)?;
            expect_err!(s.run(&inputs(&m.x, Array2::<f32>::zeros((2, 2)))), S::TooFewHostTransfers { .. }, ["`x`", "3"])
        }),
        case(Cat, "run_with_outputs_wrong_shape", || {
            let m = step_model()?;
            let mut s = attached(&m)?;
            let mut outs = Outputs::new();
            outs.insert(m.y.clone(), HostArray::from(vec![0.0f32; 3]));
            expect_err!(s.run_with_outputs(&good_inputs(&m), &mut outs), S::StreamShapeMismatch { .. }, ["`y`"])
        }),
        case(Cat, "run_with_outputs_wrong_dtype", || {
            let m = step_model()?;
            let mut s = attached(&m)?;
            let mut outs = Outputs::new();
            outs.insert(m.y.clone(), HostArray::from(vec![0i32; 2]));
            expect_err!(s.run_with_outputs(&good_inputs(&m), &mut outs), S::StreamDTypeMismatch { .. }, ["`y`"])
        }),
        case(Cat, "run_with_outputs_missing", || {
            let m = step_model()?;
            let mut s = attached(&m)?;
            let mut outs = Outputs::new();
            expect_err!(s.run_with_outputs(&good_inputs(&m), &mut outs), S::UnexpectedOrMissingStreams { .. }, ["y"])
        }),
        case(Cat, "get_tensor_unknown_name", || {
            let m = step_model()?;
            let s = Session::new(m.ir, "cpu")?;
            expect_err!(s.get_tensor("nope"), S::UnknownTensor { .. }, ["`nope`"])
        }),
        case(Cat, "get_tensor_data_of_activation", || {
            let m = step_model()?;
            let mut s = Session::new(m.ir, "cpu")?;
            let t = s.get_tensor("x_loaded")?;
            expect_err!(s.get_tensor_data(&t), S::NotVariableOrConstant { .. }, ["x_loaded"])
        }),
        case(Cat, "get_tensor_data_of_another_ir", || {
            let m = step_model()?;
            let other = step_model()?;
            let mut s = Session::new(m.ir, "cpu")?;
            expect_err!(s.get_tensor_data(&other.w), S::ForeignTensor { .. }, ["w"])
        }),
        case(Cat, "write_stream_tensor", || {
            let m = step_model()?;
            let mut s = Session::new(m.ir, "cpu")?;
            let t = s.get_tensor("x")?;
            expect_err!(s.write_variable_data(&t, &HostArray::from(vec![1.0f32, 1.0])), S::NotAVariable { .. }, ["`x`"])
        }),
        case(Cat, "ir_without_ops", || {
            let ir = Ir::new();
            expect_err!(Session::new(ir, "cpu"), S::NoOps { .. }, ["no ops"])
        }),
        case(Cat, "replication_factor_too_large", || {
            let m = step_model()?;
            m.ir.set_replication_factor(1 << 20)?;
            expect_err!(Session::new(m.ir, "cpu"), S::TooManyReplicas { .. }, ["1048576"])
        }),
        case(Cat, "zero_num_host_transfers", || {
            let m = step_model()?;
            expect_err!(
                m.ir.set_num_host_transfers(0),
                popxl::PopXlError::ValueOutOfRange { .. },
                ["num_host_transfers"]
            )
        }),
        case(Cat, "exit_without_context", || {
            let m = step_model()?;
            let mut s = Session::new(m.ir, "cpu")?;
            let ctx = s.enter()?;
            ctx.exit()?;
            ensure(!s.is_attached(), || "still attached after exit".into())
        }),
        case(Cat, "recovers_after_missing_input", || recovers_after(|_| Inputs::new())),
        case(Cat, "recovers_after_wrong_shape", || recovers_after(|m| inputs(&m.x, vec![1.0f32; 5]))),
        case(Cat, "recovers_after_wrong_dtype", || recovers_after(|m| inputs(&m.x, vec![1u8, 2]))),
        case(Cat, "recovers_after_foreign_stream", || {
            recovers_after(|m| {
                let mut i = good_inputs(m);
                if let Ok(other) = step_model() {
                    i.insert(other.x, HostArray::from(Array1::<f32>::zeros(2)));
                }
                i
            })
        }),
        case(Cat, "invalid_ir_is_reported_at_session_creation", || {
            let mut core = popart_ir::Ir::new();
            let main = core.main_graph_id();
            let info = popart_ir::TensorInfo::new(popart_ir::DataType::Float32, [2]);
            let g = core.graph_mut(main)?;
            let a =
                g.add_tensor("a", info.clone(), popart_ir::TensorKind::Constant(popart_ir::HostTensor::zeros(info)))?;
            let _ = a;
            let ir = Ir::from_ir(core);
            expect_err!(Session::new(ir, "cpu"), S::NoOps { .. } | S::InvalidIr(IrError::Invalid(_)), [])
        }),
        case(Cat, "recovers_after_index_error_weights_unchanged", || {
            let ir = Ir::new();
            let main = ir.main_graph();
            let _g = main.enter();
            let _s = popxl::in_sequence(true);
            let w = popxl::variable(vec![1.0f32, 2.0], "w")?;
            let one = popxl::constant(vec![1.0f32, 1.0], "one")?;
            ops::add_(&w, &one)?;
            let idx_s = popxl::h2d_stream([1], popxl::int32, "idx")?;
            let idx = ops::host_load(&idx_s, "idx_t")?;
            let g = ops::gather(&w, &idx, 0)?;
            let out = popxl::d2h_stream([1], popxl::float32, "out")?;
            ops::host_store(&out, &g)?;
            drop(_s);
            drop(_g);
            let options = popxl_session::SessionOptions { check_indices: true, ..Default::default() };
            let mut s = Session::with_options(ir, "cpu", options)?;
            s.try_attach_until_timeout()?;
            s.weights_from_host()?;
            let before = s.get_tensor_data(&w)?;
            let r = s.run(&inputs(&idx_s, vec![5i32]));
            ensure(matches!(r, Err(S::IndexOutOfRange { .. })), || format!("out-of-range run: {r:?}"))?;
            s.weights_to_host()?;
            let after = s.get_tensor_data(&w)?;
            ensure(before == after, || format!("a failed run changed w from {before:?} to {after:?}"))
        }),
    ]
}
