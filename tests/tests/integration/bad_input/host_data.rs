//! Host data: `HostTensor::from_bytes` (length, bool bytes), conversions of
//! host arrays (checked casts and downcasts), variable writes, bool values.

use ndarray::ArrayD;
use popart_ir::{DataType, HostDataError, HostTensor, IrError, TensorInfo, TensorKind};
use popxl::{HostArray, Ir, PopXlError as E};
use popxl_session::{Session, SessionError};

use super::fixtures::step_model;
use super::harness::{case, ensure, Case, Category::HostData};

fn info(dtype: DataType, shape: &[usize]) -> TensorInfo {
    TensorInfo::new(dtype, shape)
}

/// Run `f` with a fresh IR's main graph as the current graph.
fn in_main<T>(f: impl FnOnce() -> T) -> T {
    let ir = Ir::new();
    let main = ir.main_graph();
    main.with(f)
}

/// An attached session of the step model and its variable `w`.
fn session() -> Result<(Session, popxl::Tensor), super::harness::Failure> {
    let m = step_model()?;
    Ok((Session::new(m.ir, "cpu")?, m.w))
}

pub fn cases() -> Vec<Case> {
    vec![
        case(HostData, "from_bytes_too_short", || {
            expect_err!(
                HostTensor::from_bytes(info(DataType::Float32, &[2]), vec![0; 7]),
                HostDataError::Length { expected: 8, got: 7, .. },
                ["float32[2]", "8", "7"]
            )
        }),
        case(HostData, "from_bytes_too_long", || {
            expect_err!(
                HostTensor::from_bytes(info(DataType::Int16, &[3]), vec![0; 8]),
                HostDataError::Length { .. },
                ["int16[3]"]
            )
        }),
        case(HostData, "from_bytes_bool_byte_2", || {
            expect_err!(
                HostTensor::from_bytes(info(DataType::Bool, &[3]), vec![0, 1, 2]),
                HostDataError::InvalidBool { index: 2, byte: 2 },
                ["element 2", "byte 2"]
            )
        }),
        case(HostData, "from_bytes_bool_byte_255", || {
            expect_err!(
                HostTensor::from_bytes(info(DataType::Bool, &[1]), vec![255]),
                HostDataError::InvalidBool { index: 0, byte: 255 },
                ["255"]
            )
        }),
        case(HostData, "from_bytes_overflowing_info", || {
            expect_err!(
                HostTensor::from_bytes(info(DataType::Float32, &[usize::MAX, 2]), vec![]),
                HostDataError::Size(_),
                ["float32[18446744073709551615,2]"]
            )
        }),
        case(HostData, "host_array_from_hand_built_bool_bytes", || {
            let t = HostTensor { info: info(DataType::Bool, &[2]), bytes: vec![1, 3] };
            expect_err!(
                HostArray::from_host_tensor(&t),
                E::HostData { source: HostDataError::InvalidBool { index: 1, byte: 3 }, .. },
                ["byte 3"]
            )
        }),
        case(HostData, "host_array_from_hand_built_short_bytes", || {
            let t = HostTensor { info: info(DataType::Float64, &[2]), bytes: vec![0; 9] };
            expect_err!(
                HostArray::from_host_tensor(&t),
                E::HostData { source: HostDataError::Length { .. }, .. },
                ["float64[2]"]
            )
        }),
        case(HostData, "ir_variable_with_bool_byte_2", || {
            let mut ir = popart_ir::Ir::new();
            let g = ir.main_graph_id();
            let data = HostTensor { info: info(DataType::Bool, &[2]), bytes: vec![0, 2] };
            let r = ir.graph_mut(g)?.add_tensor("flags", data.info.clone(), TensorKind::Variable(data));
            expect_err!(r, IrError::HostData { source: HostDataError::InvalidBool { .. }, .. }, ["`flags`", "main"])
        }),
        case(HostData, "ir_constant_with_wrong_byte_count", || {
            let mut ir = popart_ir::Ir::new();
            let g = ir.main_graph_id();
            let data = HostTensor { info: info(DataType::Int32, &[2]), bytes: vec![0; 5] };
            let r = ir.graph_mut(g)?.add_tensor("c", data.info.clone(), TensorKind::Constant(data));
            expect_err!(r, IrError::HostData { source: HostDataError::Length { .. }, .. }, ["`c`"])
        }),
        case(HostData, "variable_i64_out_of_i32_range", || {
            in_main(|| {
                expect_err!(
                    popxl::variable(vec![1i64, 1 << 40], "big"),
                    E::HostCast { index: 1, dtype: DataType::Int32, .. },
                    ["variable `big`", "1099511627776", "int32"]
                )
            })
        }),
        case(HostData, "variable_u64_max", || {
            in_main(|| {
                expect_err!(
                    popxl::variable(u64::MAX, "u"),
                    E::HostCast { .. },
                    ["variable `u`", "18446744073709551615"]
                )
            })
        }),
        case(HostData, "variable_f64_overflows_f32", || {
            in_main(|| {
                expect_err!(
                    popxl::variable(vec![0.5f64, 1e300], "f"),
                    E::HostCast { index: 1, .. },
                    ["variable `f`", "1e300"]
                )
            })
        }),
        case(HostData, "variable_f64_infinity_is_kept", || {
            in_main(|| {
                let v = popxl::variable(f64::INFINITY, "inf")?;
                ensure(v.dtype() == DataType::Float32, || format!("dtype {}", v.dtype()))
            })
        }),
        case(HostData, "constant_as_negative_to_uint8", || {
            in_main(|| {
                expect_err!(
                    popxl::constant_as(vec![1i32, -1], DataType::Uint8, "c"),
                    E::HostCast { index: 1, .. },
                    ["constant `c`", "-1", "uint8"]
                )
            })
        }),
        case(HostData, "constant_as_nan_to_int32", || {
            in_main(|| {
                expect_err!(
                    popxl::constant_as(f32::NAN, DataType::Int32, "n"),
                    E::HostCast { .. },
                    ["constant `n`", "NaN"]
                )
            })
        }),
        case(HostData, "constant_as_to_float16_overflow", || {
            in_main(|| {
                expect_err!(
                    popxl::constant_as(70000.0f32, DataType::Float16, "h"),
                    E::HostCast { .. },
                    ["constant `h`", "70000"]
                )
            })
        }),
        case(HostData, "variable_as_truncates_fractions_like_numpy", || {
            in_main(|| {
                let v = popxl::variable_as(vec![1.9f64, -1.9], DataType::Int32, "t")?;
                ensure(v.dtype() == DataType::Int32, || format!("dtype {}", v.dtype()))
            })
        }),
        case(HostData, "try_cast_i64_to_u64_is_exact", || {
            let big = (1i64 << 62) + 1;
            let a = HostArray::from(vec![big]).try_cast(DataType::Uint64)?;
            ensure(a == HostArray::from(vec![big as u64]), || format!("{a:?}"))
        }),
        case(HostData, "try_downcast_u64_above_u32", || {
            expect_err!(
                HostArray::from(vec![1u64 << 32]).try_downcast_64bit(),
                E::HostCast { .. },
                ["4294967296", "uint32"]
            )
        }),
        case(HostData, "write_variable_wrong_dtype", || {
            let (mut s, w) = session()?;
            expect_err!(
                s.write_variable_data(&w, &HostArray::from(vec![1i32, 2])),
                SessionError::WriteDTypeMismatch { .. },
                ["`w`", "int32", "float32"]
            )
        }),
        case(HostData, "write_variable_wrong_shape", || {
            let (mut s, w) = session()?;
            expect_err!(
                s.write_variable_data(&w, &HostArray::from(ArrayD::<f32>::zeros(&[2, 1][..]))),
                SessionError::WriteShapeMismatch { .. },
                ["`w`", "[2, 1]"]
            )
        }),
        case(HostData, "write_variable_failure_writes_nothing", || {
            let (mut s, w) = session()?;
            let before = s.get_tensor_data(&w)?;
            let bad = HostArray::from(vec![9i32, 9]);
            let good = HostArray::from(vec![5.0f32, 5.0]);
            let r = s.write_variables_data([(&w, &good), (&w, &bad)]);
            ensure(r.is_err(), || "a batch with a wrong dtype was accepted".into())?;
            let after = s.get_tensor_data(&w)?;
            ensure(before == after, || format!("w changed from {before:?} to {after:?}"))
        }),
        case(HostData, "write_scalar_variable_out_of_range", || {
            let ir = Ir::new();
            let g = ir.main_graph();
            let _c = g.enter();
            let v = popxl::variable(1u8, "small")?;
            let out = popxl::d2h_stream([], DataType::Uint8, "out")?;
            popxl::ops::host_store(&out, &v)?;
            drop(_c);
            let mut s = Session::new(ir, "cpu")?;
            expect_err!(
                s.write_variable_data(&v, &HostArray::from(300i64)),
                SessionError::InvalidHostData { .. },
                ["`small`"]
            )
        }),
    ]
}
