//! Remote buffers and remote variables (streaming memory) on every device that
//! runs programs: round trips through stores and loads at constant and run-time
//! offsets, out-of-range offsets, remote variables moved by the weight
//! programs, and the lowered text of a remote program.

use popxl::{ops, HostArray, Ir};
use popxl_session::{Session, SessionError, SessionOptions};

const DEVICES: [&str; 2] = ["cpu", "ipu_model"];

/// x -> store at entry 2 -> load entry `i` (run-time) and entry 2 (constant);
/// returns (ir, i stream, loaded-by-i stream, loaded-by-2 stream).
fn round_trip() -> (Ir, popxl::HostToDeviceStream, popxl::DeviceToHostStream, popxl::DeviceToHostStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let buf = popxl::remote_buffer([2, 3], popxl::float32, 4).unwrap();
    let x = popxl::variable(ndarray::array![[1.0f32, -2.0, 3.5], [0.25, 5.0, -6.0]], "x").unwrap();
    let i_stream = popxl::h2d_stream([], popxl::int32, "i").unwrap();
    let out_i = popxl::d2h_stream([2, 3], popxl::float32, "out_i").unwrap();
    let out_2 = popxl::d2h_stream([2, 3], popxl::float32, "out_2").unwrap();
    let _s = popxl::in_sequence(true);
    let doubled = ops::mul(&x, &popxl::constant(2.0f32, "two").unwrap()).unwrap();
    ops::remote_store(&buf, 2, &x).unwrap();
    ops::remote_store(&buf, 3, &doubled).unwrap();
    let i = ops::host_load(&i_stream, "i").unwrap();
    let by_i = ops::remote_load(&buf, &i, "by_i").unwrap();
    let by_2 = ops::remote_load(&buf, 2, "by_2").unwrap();
    ops::host_store(&out_i, &by_i).unwrap();
    ops::host_store(&out_2, &by_2).unwrap();
    drop(_s);
    drop(_g);
    (ir, i_stream, out_i, out_2)
}

#[test]
fn store_then_load_round_trips_at_constant_and_runtime_offsets() {
    let x = [1.0f32, -2.0, 3.5, 0.25, 5.0, -6.0];
    for device in DEVICES {
        let (ir, i, out_i, out_2) = round_trip();
        let mut session = Session::new(ir, device).unwrap();
        session
            .scope(|s| {
                for (entry, want) in [(2i32, x.to_vec()), (3, x.iter().map(|v| v * 2.0).collect()), (0, vec![0.0; 6])] {
                    let outs = s.run(&[(i.clone(), HostArray::from(entry))].into())?;
                    assert_eq!(outs[&out_i].to_f64_vec(), want.iter().map(|&v| v as f64).collect::<Vec<_>>());
                    assert_eq!(outs[&out_2].to_f64_vec(), x.iter().map(|&v| v as f64).collect::<Vec<_>>());
                }
                Ok::<_, SessionError>(())
            })
            .unwrap();
        assert_eq!(session.exec_counters().remote_transfers, 12, "{device}: 4 transfers per run");
    }
}

#[test]
fn an_out_of_range_runtime_offset_is_an_error_naming_the_buffer() {
    for device in DEVICES {
        let (ir, i, _, _) = round_trip();
        let mut session = Session::new(ir, device).unwrap();
        for bad in [4, -1, i32::MAX] {
            let err = session.scope(|s| s.run(&[(i.clone(), HostArray::from(bad))].into())).unwrap_err();
            assert_eq!(err, SessionError::RemoteOffsetOutOfRange { buffer: 1, offset: bad as i64, entries: 4 });
            assert!(err.to_string().contains("remote buffer 1"), "{err}");
        }
        // The session stays usable.
        session.scope(|s| s.run(&[(i.clone(), HostArray::from(1))].into())).unwrap();
    }
}

#[test]
fn constant_offsets_and_types_are_checked_when_ops_are_created() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let buf = popxl::remote_buffer([2], popxl::float32, 2).unwrap();
    let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    assert!(ops::remote_store(&buf, 2, &x).is_err());
    assert!(ops::remote_load(&buf, 5, "y").is_err());
    let wrong_type = popxl::variable(vec![1i32, 2], "w").unwrap();
    assert!(ops::remote_store(&buf, 0, &wrong_type).is_err());
    let f_offset = popxl::constant(1.0f32, "f").unwrap();
    assert!(ops::remote_load(&buf, &f_offset, "y").is_err(), "offsets are int32 or uint32 scalars");
    let u_offset = popxl::constant_as(1u32, popxl::uint32, "u").unwrap();
    ops::remote_load(&buf, &u_offset, "from_u").unwrap();
    assert!(popxl::remote_buffer([2], popxl::float32, 0).is_err());
    // Entries in use cannot be removed.
    ops::remote_store(&buf, 1, &x).unwrap();
    assert!(buf.set_entries(1).is_err());
    buf.set_entries(3).unwrap();
    ops::remote_store(&buf, 2, &x).unwrap();
}

/// A remote variable updated on device: load, add `step`, store back.
fn remote_counter() -> (Ir, popxl::Tensor, popxl::Tensor) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let buf = popxl::remote_buffer([3], popxl::float32, 2).unwrap();
    let w = popxl::remote_variable(vec![1.0f32, 2.0, 3.0], &buf, 1, "w").unwrap();
    let other = popxl::remote_variable(vec![10.0f32, 20.0, 30.0], &buf, 0, "other").unwrap();
    let _s = popxl::in_sequence(true);
    let loaded = ops::remote_load(&buf, 1, "w_loaded").unwrap();
    let step = popxl::constant(vec![0.5f32, 0.5, 0.5], "step").unwrap();
    let updated = ops::add(&loaded, &step).unwrap();
    ops::remote_store(&buf, 1, &updated).unwrap();
    drop(_s);
    drop(_g);
    (ir, w, other)
}

#[test]
fn remote_variables_move_with_the_weight_programs() {
    for device in DEVICES {
        let (ir, w, other) = remote_counter();
        assert!(ops::relu(&w).is_err(), "a remote variable is not readable by ops");
        let mut session = Session::new(ir, device).unwrap();
        session
            .scope(|s| {
                s.run(&Default::default())?;
                s.run(&Default::default())?;
                Ok::<_, SessionError>(())
            })
            .unwrap();
        assert_eq!(session.get_tensor_data(&w).unwrap().to_f64_vec(), vec![2.0, 3.0, 4.0], "{device}");
        assert_eq!(session.get_tensor_data(&other).unwrap().to_f64_vec(), vec![10.0, 20.0, 30.0], "{device}");
        // Written while detached: the next attach loads it.
        session.write_variable_data(&w, &HostArray::from(vec![0.0f32, 0.0, 1.0])).unwrap();
        session.scope(|s| s.run(&Default::default()).map(|_| ())).unwrap();
        assert_eq!(session.get_tensor_data(&w).unwrap().to_f64_vec(), vec![0.5, 0.5, 1.5], "{device}");
        // Written while attached: the device copy changes at once.
        session
            .scope(|s| {
                s.write_variable_data(&w, &HostArray::from(vec![4.0f32, 4.0, 4.0]))?;
                s.run(&Default::default())?;
                assert_eq!(s.get_tensor_data(&w)?.to_f64_vec(), vec![4.5, 4.5, 4.5]);
                Ok::<_, SessionError>(())
            })
            .unwrap();
    }
}

#[test]
fn the_lowered_program_shows_remote_buffers_and_transfers() {
    let (ir, _, _) = remote_counter();
    let options = SessionOptions { inline_calls: Some(false), ..Default::default() };
    let session = Session::with_options(ir, "cpu", options).unwrap();
    let text = session.executable().dump();
    assert!(text.contains("remote_load r1[1] -> b"), "{text}");
    insta::assert_snapshot!("remote_counter", text);
}

#[test]
fn remote_buffers_round_trip_through_the_ir_text_form() {
    let (ir, _, _) = remote_counter();
    let text = ir.to_text();
    assert!(text.contains("remote_buffer 1 float32[3] entries=2"), "{text}");
    assert!(text.contains("remote_variable w buffer=1 entry=1"), "{text}");
    let parsed = popart_ir::text::parse(&text).unwrap();
    assert_eq!(popart_ir::text::to_text(&parsed), text);
    parsed.verify().unwrap();
}

/// The layer-streaming pattern: a `repeat` whose body loads entry `i` (a
/// loop-carried int32 counter), adds it to an accumulator, scales the entry
/// by 2 and stores it back at `i`. After one run: acc = sum of entries,
/// every entry doubled; checked against values computed here.
#[test]
fn a_loop_streams_entries_at_a_runtime_counter() {
    let entries = 5usize;
    let data: Vec<Vec<f32>> = (0..entries).map(|k| vec![k as f32 + 1.0, -(k as f32) * 0.5]).collect();
    for device in DEVICES {
        let ir = Ir::new();
        let (vars, acc_out) = {
            let _g = ir.main_graph().enter();
            let buf = popxl::remote_buffer([2], popxl::float32, entries).unwrap();
            let vars: Vec<popxl::Tensor> = data
                .iter()
                .enumerate()
                .map(|(k, d)| popxl::remote_variable(d.clone(), &buf, k, &format!("layer{k}")).unwrap())
                .collect();
            let i0 = popxl::constant(0i32, "i0").unwrap();
            let acc0 = popxl::constant(vec![0.0f32, 0.0], "acc0").unwrap();
            let body = ir
                .create_graph(
                    |i: popxl::Tensor, acc: popxl::Tensor| -> popxl::Result<Vec<popxl::Tensor>> {
                        let _s = popxl::in_sequence(true);
                        let w = ops::remote_load(&buf, &i, "w")?;
                        let acc = ops::add(&acc, &w)?;
                        let two = popxl::constant(2.0f32, "two")?;
                        ops::remote_store(&buf, &i, &ops::mul(&w, &two)?)?;
                        let next = ops::increment_mod(&i, 1.0, entries as f64)?;
                        Ok(vec![next, acc])
                    },
                    (&i0, &acc0),
                )
                .unwrap();
            let outs = ops::repeat(&body, entries, &[&i0, &acc0], &[]).unwrap();
            let acc_out = popxl::d2h_stream([2], popxl::float32, "acc").unwrap();
            ops::host_store(&acc_out, &outs[1]).unwrap();
            (vars, acc_out)
        };
        let mut session = Session::new(ir, device).unwrap();
        let out = session.scope(|s| s.run(&Default::default())).unwrap();
        let want: Vec<f64> = (0..2).map(|j| data.iter().map(|d| d[j] as f64).sum()).collect();
        assert_eq!(out[&acc_out].to_f64_vec(), want, "{device}");
        for (v, d) in vars.iter().zip(&data) {
            let doubled: Vec<f64> = d.iter().map(|&x| 2.0 * x as f64).collect();
            assert_eq!(session.get_tensor_data(v).unwrap().to_f64_vec(), doubled, "{device}: {}", v.name());
        }
    }
}

/// A store and a load of the same buffer with no order between them would read
/// either value depending on the schedule: refused at `Session::new`, as an
/// in-place write with an unordered reader is.
#[test]
fn unordered_accesses_to_a_stored_buffer_are_refused() {
    let build = |ordered: bool| {
        let ir = Ir::new();
        let _g = ir.main_graph().enter();
        let buf = popxl::remote_buffer([2], popxl::float32, 1).unwrap();
        let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
        let _s = popxl::in_sequence(ordered);
        ops::remote_store(&buf, 0, &x).unwrap();
        let y = ops::remote_load(&buf, 0, "y").unwrap();
        let out = popxl::d2h_stream([2], popxl::float32, "out").unwrap();
        ops::host_store(&out, &y).unwrap();
        drop(_s);
        drop(_g);
        ir
    };
    let err = Session::new(build(false), "cpu").unwrap_err();
    assert!(err.to_string().contains("remote buffer 1"), "{err}");
    let mut s = Session::new(build(true), "cpu").unwrap();
    let out = s.scope(|s| s.run(&Default::default())).unwrap();
    assert_eq!(out.values().next().unwrap().to_f64_vec(), vec![1.0, 2.0]);
}

/// PopXL makes uint32 offsets: a uint32 offset tensor computed at run time
/// addresses the entry it holds, and a value past the last entry is refused.
#[test]
fn uint32_offsets_work_and_are_checked() {
    for device in DEVICES {
        let ir = Ir::new();
        let (i_stream, out) = {
            let _g = ir.main_graph().enter();
            let buf = popxl::remote_buffer([2], popxl::float32, 3).unwrap();
            popxl::remote_variable(vec![5.0f32, 6.0], &buf, 2, "v").unwrap();
            let i_stream = popxl::h2d_stream([], popxl::uint32, "i").unwrap();
            let i = ops::host_load(&i_stream, "i").unwrap();
            let y = ops::remote_load(&buf, &i, "y").unwrap();
            let out = popxl::d2h_stream([2], popxl::float32, "out").unwrap();
            ops::host_store(&out, &y).unwrap();
            (i_stream, out)
        };
        let mut s = Session::new(ir, device).unwrap();
        let got = s.scope(|s| s.run(&[(i_stream.clone(), HostArray::from(2u32))].into())).unwrap();
        assert_eq!(got[&out].to_f64_vec(), vec![5.0, 6.0], "{device}");
        let err = s.scope(|s| s.run(&[(i_stream.clone(), HostArray::from(u32::MAX))].into())).unwrap_err();
        assert_eq!(err, SessionError::RemoteOffsetOutOfRange { buffer: 1, offset: u32::MAX as i64, entries: 3 });
    }
}
