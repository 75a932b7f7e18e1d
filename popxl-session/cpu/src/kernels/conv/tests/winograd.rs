//! The Winograd plan (forward, data and weight gradients) against the f64
//! loop, through the kernel builder.

use popart_ir::ops::conv::conv_geometry;
use popart_ir::DataType;

use super::super::layout::Geo2;
use super::super::{ConvKernel, Pass};
use super::{check, check_tol, conv_attrs, inputs, Case};

/// Shapes the plan takes: odd planes (partial tiles on both edges), no
/// padding, asymmetric padding (a data gradient padded by more than 2 − p on
/// one side), channel counts that leave partial vectors, several images per
/// task, a padding of 3 (the data gradient's padding 2 − 3 is negative).
const CASES: [Case; 5] = [
    (2, 1, 128, 128, 23, 21, 3, 3, [1, 1, 1, 1], [1, 1]),
    (1, 1, 128, 136, 34, 33, 3, 3, [0, 0, 0, 0], [1, 1]),
    (1, 1, 144, 128, 33, 34, 3, 3, [2, 1, 0, 2], [1, 1]),
    (16, 1, 128, 128, 7, 7, 3, 3, [1, 1, 1, 1], [1, 1]),
    (1, 1, 128, 128, 32, 31, 3, 3, [3, 0, 1, 3], [1, 1]),
];

/// `Some` where Winograd takes case `c` at stride `s` for `pass`.
fn plan(c: Case, s: usize, pass: Pass) -> Option<()> {
    let (n, groups, ci_g, co_g, h, wd, kh, kw, ..) = c;
    let geo = conv_geometry(&[n, groups * ci_g, h, wd], &[groups * co_g, ci_g, kh, kw], &conv_attrs(c, s)).unwrap();
    ConvKernel::<f32>::winograd_takes(&Geo2::new(&geo).unwrap(), pass).then_some(())
}

#[test]
fn winograd_takes_its_shapes_only() {
    for c in CASES {
        for pass in [Pass::Forward, Pass::Data, Pass::Weights] {
            assert!(plan(c, 1, pass).is_some(), "{pass:?} {c:?}");
        }
        assert!(plan(c, 2, Pass::Forward).is_none(), "stride 2: {c:?}");
        let f64_plan = {
            let (n, groups, ci_g, co_g, h, wd, kh, kw, ..) = c;
            let attrs = conv_attrs(c, 1);
            let geo = conv_geometry(&[n, groups * ci_g, h, wd], &[groups * co_g, ci_g, kh, kw], &attrs).unwrap();
            ConvKernel::<f64>::winograd_takes(&Geo2::new(&geo).unwrap(), Pass::Forward).then_some(())
        };
        assert!(f64_plan.is_none());
    }
    // 64 to 127 channels: the weight gradient only (its alternative is im2col);
    // fewer: none.
    let (w64, w32) = ((1, 1, 64, 72, 33, 32, 3, 3, [1, 1, 1, 1], [1, 1]), (1, 1, 32, 64, 33, 32, 3, 3, [1; 4], [1, 1]));
    assert!(plan(w64, 1, Pass::Weights).is_some() && plan(w64, 1, Pass::Data).is_none());
    assert!(plan(w32, 1, Pass::Weights).is_none());
    // Too few channels, too few tiles, two groups, dilation 2, a 5x5 filter.
    for c in [
        (1, 1, 64, 128, 32, 32, 3, 3, [1, 1, 1, 1], [1, 1]),
        (1, 1, 128, 128, 14, 14, 3, 3, [1, 1, 1, 1], [1, 1]),
        (1, 2, 128, 128, 32, 32, 3, 3, [1, 1, 1, 1], [1, 1]),
        (1, 1, 128, 128, 32, 32, 3, 3, [1, 1, 1, 1], [2, 2]),
        (1, 1, 128, 128, 32, 32, 5, 5, [1, 1, 1, 1], [1, 1]),
    ] {
        assert!(plan(c, 1, Pass::Forward).is_none(), "{c:?}");
    }
}

#[test]
fn winograd_matches_a_naive_loop() {
    // F(4×4, 3×3) forward passes and data gradients: errors up to about 6e-4
    // on outputs of RMS 11 (1152 products of values in -1..1), which the
    // elementwise `1e-4 · (1 + |want|)` does not allow near 0.
    for (i, c) in CASES.into_iter().enumerate() {
        check_tol(c, 1, DataType::Float32, 800 + i as u64, [2e-3, 2e-3, 1e-3]);
    }
    // A weight gradient of 64 and 72 channels (the other passes by their own
    // methods) on planes of fewer than 256 positions (larger ones run
    // `lanes_wgrad` first on AVX-512).
    check((8, 1, 64, 72, 15, 14, 3, 3, [1, 1, 1, 1], [1, 1]), 1, DataType::Float32, 810);
    // And of asymmetric padding, 128 channels, 13x16 outputs.
    check_tol((5, 1, 128, 128, 13, 15, 3, 3, [2, 1, 0, 2], [1, 1]), 1, DataType::Float32, 811, [2e-3, 2e-3, 1e-3]);
}

#[test]
fn forward_passes_and_data_gradients_run_f4x4_weight_gradients_f2x2() {
    for c in CASES {
        let (n, groups, ci_g, co_g, h, wd, kh, kw, ..) = c;
        let geo = conv_geometry(&[n, groups * ci_g, h, wd], &[groups * co_g, ci_g, kh, kw], &conv_attrs(c, 1)).unwrap();
        let g = Geo2::new(&geo).unwrap();
        let outputs = [Pass::Forward, Pass::Data, Pass::Weights].map(|p| ConvKernel::<f32>::winograd_tile(&g, p));
        assert_eq!(outputs, [Some(4), Some(4), Some(2)], "{c:?}");
    }
}

#[test]
fn f4x4_errors_stay_within_1e_4_of_the_outputs_rms() {
    // The bound the module doc states, on every case's forward pass and data
    // gradient (measured: 4e-5 to 6e-5 of the RMS at most; F(2×2, 3×3) 2e-6).
    use super::super::super::testutil::{infer, run_with_outputs, t};
    for (i, c) in CASES.into_iter().enumerate() {
        let inp = inputs(c, 1, 900 + i as u64);
        let (n, groups, ci_g, co_g, h, wd, kh, kw, ..) = c;
        let attrs = popart_ir::OpAttrs::to_attrs(&conv_attrs(c, 1));
        let f64s = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<_>>();
        let x = t(DataType::Float32, &[n, groups * ci_g, h, wd], &f64s(&inp.x));
        let w = t(DataType::Float32, &[groups * co_g, ci_g, kh, kw], &f64s(&inp.w));
        let y_info = infer("Conv", &attrs, &[(0, x.info.clone()), (1, w.info.clone())]).remove(0);
        let dy = t(DataType::Float32, &y_info.shape, &f64s(&inp.dy));
        let y = run_with_outputs("Conv", &attrs, &[(0, x.clone()), (1, w.clone())], std::slice::from_ref(&y_info));
        let dx =
            run_with_outputs("ConvDataGrad", &attrs, &[(0, dy), (1, w), (2, x.clone())], std::slice::from_ref(&x.info));
        for (got, want) in [(&y[0], &inp.want[0]), (&dx[0], &inp.want[1])] {
            let rms = (want.iter().map(|v| v * v).sum::<f64>() / want.len() as f64).sqrt();
            let worst = got.to_f64_vec().iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(worst <= 1e-4 * rms, "case {i}: error {worst:e} against RMS {rms}");
        }
    }
}
