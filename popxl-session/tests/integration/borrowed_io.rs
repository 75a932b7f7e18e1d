//! Borrowed stream data (`InputView`, `OutputView`): what the Python package
//! passes for numpy arrays, read and written in place. Results equal the owned
//! path's and the values computed here; malformed views are typed errors.

use popart_ir::HostDataError;
use popxl::{ops, HostArray, Ir};
use popxl_session::{InputView, OutputView, Session, SessionError};

/// `out = 2 x + 1` for a float32 stream of shape [2, 3].
fn affine() -> Ir {
    let ir = Ir::new();
    ir.main_graph()
        .with(|| {
            let x = popxl::h2d_stream([2usize, 3], popxl::float32, "x")?;
            let out = popxl::d2h_stream([2usize, 3], popxl::float32, "out")?;
            let two = popxl::constant(2.0f32, "two")?;
            let one = popxl::constant(1.0f32, "one")?;
            let y = ops::add(&ops::mul(&ops::host_load(&x, "x")?, &two)?, &one)?;
            ops::host_store(&out, &y)
        })
        .unwrap();
    ir
}

fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn views_give_the_owned_results_in_place() {
    let mut session = Session::new(affine(), "cpu").unwrap();
    let x = session.expected_inputs().remove(0);
    let out = session.expected_outputs().remove(0);
    let data: Vec<f32> = vec![0.5, -1.0, 2.0, 3.0, 4.5, -0.25];
    let want: Vec<f32> = data.iter().map(|v| 2.0 * v + 1.0).collect();
    // Unaligned input bytes: the transfers copy bytes.
    let mut shifted = vec![0u8];
    shifted.extend(le_bytes(&data));
    let mut got = vec![0u8; 24];
    let shape = [2usize, 3];
    session
        .scope(|s| -> Result<(), SessionError> {
            let input = InputView::new(popxl::float32, &shape, &shifted[1..]).unwrap();
            let output = OutputView::new(popxl::float32, &shape, &mut got).unwrap();
            s.run_views_into(&[(&x, input)], &mut [(&out, output)])?;
            let owned = s.run(
                &[(x.clone(), HostArray::from(ndarray::Array2::from_shape_vec((2, 3), data.clone()).unwrap()))].into(),
            )?;
            assert_eq!(owned[&out].to_f64_vec(), want.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
            Ok(())
        })
        .unwrap();
    assert_eq!(got, le_bytes(&want));
}

#[test]
fn malformed_views_are_typed_errors() {
    let f32_ = popxl::float32;
    let four = [0u8; 16];
    assert!(matches!(InputView::new(f32_, &[3], &four), Err(HostDataError::Length { expected: 12, got: 16, .. })));
    assert!(matches!(
        InputView::new(popxl::bool, &[3], &[0, 1, 2]),
        Err(HostDataError::InvalidBool { index: 2, byte: 2 })
    ));
    assert!(matches!(InputView::new(f32_, &[1 << 62, 1 << 62], &four), Err(HostDataError::Size(_))));
    let mut buf = [0u8; 8];
    assert!(matches!(OutputView::new(f32_, &[3], &mut buf), Err(HostDataError::Length { .. })));

    let mut session = Session::new(affine(), "cpu").unwrap();
    let x = session.expected_inputs().remove(0);
    let out = session.expected_outputs().remove(0);
    let good = le_bytes(&[0.0; 6]);
    let ints = [0u8; 24];
    let shape = [2usize, 3];
    let wrong_shape = [3usize, 2];
    assert_ne!(shape, wrong_shape);
    session
        .scope(|s| -> Result<(), SessionError> {
            let mut o = vec![0u8; 24];
            let inp = InputView::new(f32_, &shape, &good).unwrap();
            // The same stream twice.
            let e = s
                .run_views_into(&[(&x, inp), (&x, inp)], &mut [(&out, OutputView::new(f32_, &shape, &mut o).unwrap())])
                .unwrap_err();
            assert!(matches!(e, SessionError::UnexpectedOrMissingStreams { .. }), "{e:?}");
            // An int32 view for a float32 stream.
            let e = s
                .run_views_into(
                    &[(&x, InputView::new(popxl::int32, &shape, &ints).unwrap())],
                    &mut [(&out, OutputView::new(f32_, &shape, &mut o).unwrap())],
                )
                .unwrap_err();
            assert!(matches!(e, SessionError::StreamDTypeMismatch { .. }), "{e:?}");
            // An output of the wrong shape, then a missing output.
            let e = s
                .run_views_into(&[(&x, inp)], &mut [(&out, OutputView::new(f32_, &wrong_shape, &mut o).unwrap())])
                .unwrap_err();
            assert!(matches!(e, SessionError::StreamShapeMismatch { .. }), "{e:?}");
            let e = s.run_views_into(&[(&x, inp)], &mut []).unwrap_err();
            assert!(matches!(e, SessionError::UnexpectedOrMissingStreams { .. }), "{e:?}");
            // Still usable.
            s.run_views_into(&[(&x, inp)], &mut [(&out, OutputView::new(f32_, &shape, &mut o).unwrap())])?;
            assert_eq!(o, le_bytes(&[1.0; 6]));
            Ok(())
        })
        .unwrap();
}
