//! Bad input at the session boundary (issue 13): huge sizes are typed errors,
//! not aborts; out-of-range indices have defined results, or with
//! `check_indices` an error; a failed run leaves the session usable and the
//! variables as they were.

use ndarray::{array, Array1};
use popxl::{ops, DeviceToHostStream, HostArray, HostToDeviceStream, Ir, Tensor};
use popxl_session::{Session, SessionError, SessionOptions};

/// `out = x` through the device, for a stream of `shape`.
fn passthrough(shape: &[usize]) -> Ir {
    let ir = Ir::new();
    ir.main_graph()
        .with(|| {
            let x = popxl::h2d_stream(shape.to_vec(), popxl::float32, "x")?;
            let out = popxl::d2h_stream(shape.to_vec(), popxl::float32, "out")?;
            ops::host_store(&out, &ops::host_load(&x, "x")?)
        })
        .unwrap();
    ir
}

#[test]
fn a_four_terabyte_stream_is_out_of_memory_not_an_abort() {
    let err = Session::new(passthrough(&[1 << 40]), "cpu").unwrap_err();
    assert!(matches!(err, SessionError::OutOfMemory { requested, .. } if requested >= 4 << 40), "{err:?}");
}

#[test]
fn a_memory_plan_larger_than_the_address_space_is_a_size_overflow() {
    // Two live buffers of 2^62 bytes each (x and x + x): every tensor is
    // admissible, their sum is not.
    let ir = Ir::new();
    ir.main_graph()
        .with(|| {
            let x = popxl::h2d_stream([1usize << 60], popxl::float32, "x")?;
            let out = popxl::d2h_stream([1usize << 60], popxl::float32, "out")?;
            let x = ops::host_load(&x, "x")?;
            ops::host_store(&out, &(&x + &x))
        })
        .unwrap();
    let err = Session::new(ir, "cpu").unwrap_err();
    assert!(matches!(err, SessionError::SizeOverflow { .. }), "{err:?}");
}

#[test]
fn huge_num_host_transfers_are_typed_errors_at_run() {
    for (nht, overflow) in [(1usize << 40, false), (1 << 62, true)] {
        let ir = passthrough(&[1024]);
        ir.set_num_host_transfers(nht).unwrap();
        let mut session = Session::new(ir, "cpu").unwrap();
        assert!(matches!(
            session.create_host_outputs(),
            Err(SessionError::SizeOverflow { .. } | SessionError::OutOfMemory { .. })
        ));
        let x = session.expected_inputs().remove(0);
        let err = session.scope(|s| s.run(&[(x.clone(), HostArray::from(vec![0f32; 1024]))].into())).unwrap_err();
        if overflow {
            assert!(matches!(err, SessionError::SizeOverflow { .. }), "{err:?}");
        } else {
            assert!(matches!(err, SessionError::OutOfMemory { .. }), "{err:?}");
        }
    }
}

/// `w += 1` then `out = gather(w, idx)`, in that order: a failing gather comes
/// after a variable update, so restoring the variables is observable.
struct GatherModel {
    ir: Ir,
    w: Tensor,
    idx: HostToDeviceStream,
    out: DeviceToHostStream,
}

fn gather_model(zero_oor: bool) -> GatherModel {
    let ir = Ir::new();
    let (w, idx, out) = ir
        .main_graph()
        .with(|| {
            let _seq = popxl::in_sequence(true);
            let w = popxl::variable(array![[0.0f32, 1.0], [2.0, 3.0], [4.0, 5.0]], "w")?;
            let one = popxl::constant(1.0f32, "one")?;
            ops::scaled_add_(&w, &one, 1.0, 1.0)?;
            let idx = popxl::h2d_stream([2], popxl::int32, "idx")?;
            let i = ops::host_load(&idx, "idx")?;
            let y = ops::gather_with(&w, &i, 0, zero_oor)?;
            let out = popxl::d2h_stream([2, 2], popxl::float32, "out")?;
            ops::host_store(&out, &y)?;
            Ok::<_, popxl::PopXlError>((w, idx, out))
        })
        .unwrap();
    GatherModel { ir, w, idx, out }
}

fn checked() -> SessionOptions {
    SessionOptions { check_indices: true, ..SessionOptions::default() }
}

fn run_gather(s: &mut Session, m: &GatherModel, idx: Vec<i32>) -> Result<HostArray, SessionError> {
    s.scope(|s| s.run(&[(m.idx.clone(), HostArray::from(Array1::from(idx)))].into()))
        .map(|mut o| o.remove(&m.out).expect("an output"))
}

#[test]
fn out_of_range_gather_indices_give_zero_rows_without_checks() {
    let m = gather_model(false);
    let mut s = Session::new(m.ir.clone(), "cpu").unwrap();
    let out = run_gather(&mut s, &m, vec![2, 3]).unwrap();
    assert_eq!(out, HostArray::from(array![[5.0f32, 6.0], [0.0, 0.0]]));
}

#[test]
fn checked_out_of_range_index_is_an_error_and_the_variables_are_restored() {
    let m = gather_model(false);
    let mut s = Session::with_options(m.ir.clone(), "cpu", checked()).unwrap();
    let good = run_gather(&mut s, &m, vec![0, -1]).unwrap();
    assert_eq!(good, HostArray::from(array![[1.0f32, 2.0], [5.0, 6.0]]));
    let before = s.get_tensor_data(&m.w).unwrap();

    let err = run_gather(&mut s, &m, vec![1, 7]).unwrap_err();
    let SessionError::IndexOutOfRange { op, op_type, index, bound } = &err else { panic!("{err:?}") };
    assert_eq!((op_type.as_str(), *index, *bound), ("Gather", 7, 3));
    assert!(op.contains("Gather"), "the op is named: {op}");
    assert_eq!(s.get_tensor_data(&m.w).unwrap(), before, "the update before the gather is undone");

    // The session is still usable: the next good run continues from `before`.
    let next = run_gather(&mut s, &m, vec![0, 2]).unwrap();
    assert_eq!(next, HostArray::from(array![[2.0f32, 3.0], [6.0, 7.0]]));
    assert_eq!(s.transfer_counts().runs, 2, "the failed run does not count");
}

#[test]
fn checked_zero_oor_gather_is_not_an_error() {
    let m = gather_model(true);
    let mut s = Session::with_options(m.ir.clone(), "cpu", checked()).unwrap();
    let out = run_gather(&mut s, &m, vec![-4, 1]).unwrap();
    assert_eq!(out, HostArray::from(array![[0.0f32, 0.0], [3.0, 4.0]]));
}

#[test]
fn checked_out_of_range_label_is_an_error() {
    let ir = Ir::new();
    let (labels, loss) = ir
        .main_graph()
        .with(|| {
            let probs = popxl::constant(array![[0.25f32, 0.75], [0.5, 0.5]], "probs")?;
            let labels = popxl::h2d_stream([2], popxl::int32, "labels")?;
            let l = ops::nll_loss(&probs, &ops::host_load(&labels, "labels")?)?;
            let loss = popxl::d2h_stream([], popxl::float32, "loss")?;
            ops::host_store(&loss, &l)?;
            Ok::<_, popxl::PopXlError>((labels, loss))
        })
        .unwrap();
    let run =
        |s: &mut Session, v: Vec<i32>| s.scope(|s| s.run(&[(labels.clone(), HostArray::from(Array1::from(v)))].into()));
    let mut plain = Session::new(ir.clone(), "cpu").unwrap();
    let out = run(&mut plain, vec![1, 2]).unwrap();
    // Label 2 of 2 classes counts as ignored: the mean is over the one valid row.
    assert_eq!(out[&loss], HostArray::from(ndarray::arr0(-(0.75f32).ln()).into_dyn()));
    let mut checked = Session::with_options(ir, "cpu", checked()).unwrap();
    let err = run(&mut checked, vec![1, 2]).unwrap_err();
    assert!(
        matches!(err, SessionError::IndexOutOfRange { index: 2, bound: 2, ref op_type, .. } if op_type == "NllLoss"),
        "{err:?}"
    );
}

#[test]
fn a_run_with_bad_inputs_changes_nothing() {
    let m = gather_model(false);
    let fresh = {
        let mut s = Session::new(m.ir.clone(), "cpu").unwrap();
        run_gather(&mut s, &m, vec![0, 1]).unwrap()
    };
    let mut s = Session::new(m.ir.clone(), "cpu").unwrap();
    let before = s.get_tensor_data(&m.w).unwrap();
    let bad_inputs = [
        HostArray::from(vec![0f32, 1.0]),     // wrong dtype
        HostArray::from(vec![0i32, 1, 2]),    // wrong shape
        HostArray::from(array![[0i32], [1]]), // wrong rank
    ];
    for bad in bad_inputs {
        let err = s.scope(|s| s.run(&[(m.idx.clone(), bad.clone())].into())).unwrap_err();
        assert!(
            matches!(err, SessionError::StreamDTypeMismatch { .. } | SessionError::StreamShapeMismatch { .. }),
            "{bad:?}: {err:?}"
        );
    }
    let err = s.scope(|s| s.run(&Default::default())).unwrap_err();
    assert!(matches!(err, SessionError::UnexpectedOrMissingStreams { .. }), "{err:?}");
    assert_eq!(s.get_tensor_data(&m.w).unwrap(), before);
    assert_eq!(run_gather(&mut s, &m, vec![0, 1]).unwrap(), fresh, "same as a fresh session");
}
