//! Allocation: tensors whose byte size overflows, host buffers sized by user
//! numbers, sessions whose buffers cannot be allocated. A typed size or
//! out-of-memory error, never an abort.

use popart_ir::size::{try_zeroed_bytes, MAX_TENSOR_BYTES};
use popart_ir::{DataType, HostTensor, IrError, SizeError, TensorInfo};
use popxl::ops;
use popxl::{HostArray, Ir, PopXlError as E, Tensor};
use popxl_session::{Inputs, Session, SessionError};

use super::harness::{case, Case, CaseResult, Category::Allocation};

/// Run `f` inside a fresh subgraph `sub` (graph inputs need one).
fn in_sub<T>(f: impl FnOnce() -> T) -> T {
    let ir = Ir::new();
    let sub = ir.create_empty_graph("sub").map_err(|e| e.to_string());
    match sub {
        Ok(sub) => sub.with(f),
        Err(_) => unreachable!("creating an empty graph of a fresh IR cannot fail"),
    }
}

fn input(shape: &[usize], dtype: DataType, name: &str) -> popxl::Result<Tensor> {
    popxl::graph_input(shape.to_vec(), dtype, name)
}

/// A session run of `ir` (no inputs): whichever of construction or run fails.
fn session_result(ir: Ir) -> Result<(), SessionError> {
    let mut s = Session::new(ir, "cpu")?;
    s.scope(|s| s.run(&Inputs::new()).map(|_| ()))
}

pub fn cases() -> Vec<Case> {
    vec![
        case(Allocation, "h2d_stream_shape_overflows", || {
            let ir = Ir::new();
            let _g = ir.main_graph().enter();
            expect_err!(
                popxl::h2d_stream([usize::MAX, 2], popxl::float32, "huge"),
                E::Ir(IrError::TensorTooLarge { .. }),
                ["huge"]
            )
        }),
        case(Allocation, "d2h_stream_bytes_overflow", || {
            let ir = Ir::new();
            let _g = ir.main_graph().enter();
            expect_err!(
                popxl::d2h_stream([1 << 40, 1 << 40], popxl::float32, "huge_out"),
                E::Ir(IrError::TensorTooLarge { .. }),
                ["huge_out"]
            )
        }),
        case(Allocation, "graph_input_bytes_above_isize_max", || {
            // 2^61 float32 elements: 2^63 bytes, more than isize::MAX.
            in_sub(|| {
                expect_err!(input(&[1 << 61], DataType::Float32, "x"), E::Ir(IrError::TensorTooLarge { .. }), ["`x`"])
            })
        }),
        case(Allocation, "graph_input_just_under_the_limit_is_accepted", || {
            // No memory is allocated to build an IR: the largest legal tensor is fine.
            in_sub(|| -> CaseResult {
                input(&[MAX_TENSOR_BYTES], DataType::Uint8, "x")?;
                Ok(())
            })
        }),
        case(Allocation, "matmul_output_overflows", || {
            in_sub(|| -> CaseResult {
                let a = input(&[1 << 32, 1], DataType::Float32, "a")?;
                let b = input(&[1, 1 << 32], DataType::Float32, "b")?;
                expect_err!(
                    ops::matmul(&a, &b),
                    E::Ir(IrError::TensorTooLarge { .. } | IrError::Inference { .. }),
                    ["MatMul"]
                )
            })
        }),
        case(Allocation, "broadcast_output_overflows", || {
            in_sub(|| -> CaseResult {
                let a = input(&[1 << 31, 1], DataType::Float32, "a")?;
                let b = input(&[1, 1 << 31], DataType::Float32, "b")?;
                expect_err!(
                    ops::add(&a, &b),
                    E::Ir(IrError::TensorTooLarge { .. } | IrError::Inference { .. }),
                    ["Add"]
                )
            })
        }),
        case(Allocation, "concat_output_overflows", || {
            in_sub(|| -> CaseResult {
                let a = input(&[1 << 62], DataType::Bool, "a")?;
                let b = input(&[1 << 62], DataType::Bool, "b")?;
                expect_err!(
                    ops::concat(&[&a, &b], 0),
                    E::Ir(IrError::TensorTooLarge { .. } | IrError::Inference { .. }),
                    ["Concat"]
                )
            })
        }),
        case(Allocation, "host_array_full_overflows", || {
            let info = TensorInfo::new(DataType::Float32, [1 << 40, 1 << 40]);
            expect_err!(
                HostArray::try_full(&info, 0.0),
                E::Size(SizeError::Overflow { .. }),
                ["float32[1099511627776,1099511627776]"]
            )
        }),
        case(Allocation, "host_array_full_out_of_memory", || {
            // Below the overflow limit but far above any machine's memory.
            let info = TensorInfo::new(DataType::Uint8, [1 << 62]);
            expect_err!(
                HostArray::try_full(&info, 0.0),
                E::Size(SizeError::OutOfMemory { .. }),
                ["uint8[4611686018427387904]"]
            )
        }),
        case(Allocation, "host_array_full_zero_sized_huge_dim", || {
            // No bytes, but ndarray cannot represent a dimension above isize::MAX.
            let info = TensorInfo::new(DataType::Float32, [0, usize::MAX]);
            expect_err!(HostArray::try_full(&info, 0.0), E::Size(_), ["[0, 18446744073709551615]"])
        }),
        case(Allocation, "host_tensor_try_zeros_overflows", || {
            let info = TensorInfo::new(DataType::Float64, [usize::MAX]);
            expect_err!(HostTensor::try_zeros(info), SizeError::Overflow { .. }, ["float64[18446744073709551615]"])
        }),
        case(Allocation, "try_zeroed_bytes_out_of_memory", || {
            expect_err!(
                try_zeroed_bytes(1 << 62, "the demo buffer"),
                SizeError::OutOfMemory { .. },
                ["the demo buffer"]
            )
        }),
        case(Allocation, "replication_factor_usize_max_on_cpu", || {
            let ir = super::fixtures::step_model()?.ir;
            ir.set_replication_factor(usize::MAX)?;
            expect_err!(
                Session::new(ir, "cpu"),
                SessionError::SizeOverflow { .. } | SessionError::TooManyReplicas { .. },
                [usize::MAX]
            )
        }),
        case(Allocation, "session_huge_activation_is_out_of_memory", || {
            let ir = Ir::new();
            let g = ir.main_graph();
            let _c = g.enter();
            let s = popxl::h2d_stream([1usize << 40], popxl::float32, "big_in")?;
            let t = ops::host_load(&s, "big")?;
            let out = popxl::d2h_stream([1usize << 40], popxl::float32, "big_out")?;
            ops::host_store(&out, &ops::negate(&t)?)?;
            drop(_c);
            // The arena may be allocated when the session is created or when it attaches.
            let r = Session::new(ir, "cpu").and_then(|mut s| {
                s.try_attach_until_timeout()?;
                s.weights_from_host()
            });
            expect_err!(r, SessionError::OutOfMemory { .. }, [])
        }),
        case(Allocation, "session_huge_num_host_transfers_outputs", || {
            let m = super::fixtures::step_model()?;
            m.ir.set_num_host_transfers(1 << 40)?;
            expect_err!(session_result(m.ir), SessionError::OutOfMemory { .. }, [])
        }),
        case(Allocation, "session_num_host_transfers_usize_max", || {
            let m = super::fixtures::step_model()?;
            m.ir.set_num_host_transfers(usize::MAX)?;
            expect_err!(session_result(m.ir), SessionError::SizeOverflow { .. }, ["`y`"])
        }),
        case(Allocation, "session_huge_variable_via_text", || {
            // A zero-filled stream whose buffer cannot be allocated.
            let text = "ir num_host_transfers=1 replication_factor=1\ngraph main\n  tensor s h2d uint8[4611686018427387904]\n  tensor t act uint8[4611686018427387904]\n  op load HostLoad {stream=\"s\"} in[] out[0=t]\n";
            match popart_ir::text::parse(text) {
                Err(e) => expect_err!(Err::<(), _>(e), IrError::Parse { .. } | IrError::Invalid(_), []),
                Ok(core) => expect_err!(session_result(Ir::from_ir(core)), SessionError::OutOfMemory { .. }, []),
            }
        }),
    ]
}
