//! Axes and reductions: duplicate and out-of-range axes, and reductions over
//! empty axes, where we follow numpy: `max`/`min` over an empty axis is an
//! error (numpy raises "zero-size array to reduction operation maximum which
//! has no identity"), `sum` gives 0, `mean` gives NaN (numpy warns "Mean of
//! empty slice" and returns nan; we return NaN without a warning).

use popart_ir::IrError;
use popxl::{ops, Ir, PopXlError as E};

use super::fixtures::{ones, run_once, store_model, values};
use super::harness::{case, ensure, Case, Category::AxesReductions};

fn in_main<T>(f: impl FnOnce() -> T) -> T {
    let ir = Ir::new();
    let main = ir.main_graph();
    main.with(f)
}

/// The stored result of `reduce` over axis 1 of a float32[2, 0] constant.
fn reduce_empty(
    reduce: fn(&popxl::Tensor, &[i64], bool) -> popxl::Result<popxl::Tensor>,
) -> Result<Vec<f64>, super::harness::Failure> {
    let (ir, out) = store_model(|| reduce(&ones(&[2, 0], "empty")?, &[1], false))?;
    Ok(values(&run_once(ir)?, &out))
}

pub fn cases() -> Vec<Case> {
    vec![
        case(AxesReductions, "sum_duplicate_axes", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::sum(&a, &[1, 1], false), E::Ir(IrError::Inference { .. }), ["ReduceSum", "1"])
            })
        }),
        case(AxesReductions, "sum_duplicate_axes_negative_alias", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::sum(&a, &[1, -1], true), E::Ir(IrError::Inference { .. }), ["ReduceSum"])
            })
        }),
        case(AxesReductions, "mean_axis_out_of_range", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::mean(&a, &[2], false), E::Ir(IrError::Inference { .. }), ["ReduceMean", "2"])
            })
        }),
        case(AxesReductions, "max_negative_axis_out_of_range", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::max(&a, &[-3], false), E::Ir(IrError::Inference { .. }), ["ReduceMax", "-3"])
            })
        }),
        case(AxesReductions, "sum_axis_i64_min", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::sum(&a, &[i64::MIN], false), E::Ir(IrError::Inference { .. }), ["ReduceSum"])
            })
        }),
        case(AxesReductions, "sum_axis_i64_max", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::sum(&a, &[i64::MAX], false), E::Ir(IrError::Inference { .. }), ["ReduceSum"])
            })
        }),
        case(AxesReductions, "softmax_axis_out_of_range", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::softmax(&a, 2), E::Ir(IrError::Inference { .. }), ["Softmax"])
            })
        }),
        case(AxesReductions, "softmax_axis_i64_min", || {
            in_main(|| {
                let a = ones(&[2, 3], "a")?;
                expect_err!(ops::softmax(&a, i64::MIN), E::Ir(IrError::Inference { .. }), ["Softmax"])
            })
        }),
        case(AxesReductions, "max_over_empty_axis_raises", || {
            in_main(|| {
                let a = ones(&[2, 0], "a")?;
                expect_err!(ops::max(&a, &[1], false), E::Ir(IrError::Inference { .. }), ["ReduceMax"])
            })
        }),
        case(AxesReductions, "min_over_all_axes_of_empty_raises", || {
            in_main(|| {
                let a = ones(&[0], "a")?;
                expect_err!(ops::min(&a, &[], false), E::Ir(IrError::Inference { .. }), ["ReduceMin"])
            })
        }),
        case(AxesReductions, "max_over_non_empty_axis_of_empty_tensor", || {
            // numpy: np.zeros((0, 3)).max(axis=1) has shape (0,): nothing to reduce, no error.
            in_main(|| {
                let a = ones(&[0, 3], "a")?;
                let m = ops::max(&a, &[1], false)?;
                ensure(m.shape() == [0], || format!("shape {:?}", m.shape()))
            })
        }),
        case(AxesReductions, "sum_over_empty_axis_is_zero", || {
            let got = reduce_empty(ops::sum)?;
            ensure(got == [0.0, 0.0], || format!("sum over an empty axis = {got:?}, numpy gives [0, 0]"))
        }),
        case(AxesReductions, "mean_over_empty_axis_is_nan", || {
            let got = reduce_empty(ops::mean)?;
            ensure(got.len() == 2 && got.iter().all(|v| v.is_nan()), || {
                format!("mean over an empty axis = {got:?}, numpy gives [nan, nan]")
            })
        }),
        case(AxesReductions, "transpose_duplicate_perm", || {
            in_main(|| {
                let a = ones(&[2, 3, 4], "a")?;
                expect_err!(ops::transpose(&a, &[0, 0, 1]), E::Ir(IrError::Inference { .. }), ["Transpose"])
            })
        }),
        case(AxesReductions, "squeeze_axis_not_size_one", || {
            in_main(|| {
                let a = ones(&[1, 3], "a")?;
                expect_err!(ops::squeeze(&a, &[1]), E::Ir(IrError::Inference { .. }), ["Squeeze"])
            })
        }),
        case(AxesReductions, "squeeze_axis_out_of_range", || {
            in_main(|| {
                let a = ones(&[1, 3], "a")?;
                expect_err!(ops::squeeze(&a, &[i64::MAX]), E::Ir(IrError::Inference { .. }), ["Squeeze"])
            })
        }),
        case(AxesReductions, "squeeze_duplicate_axes", || {
            in_main(|| {
                let a = ones(&[1, 3], "a")?;
                expect_err!(ops::squeeze(&a, &[0, 0]), E::Ir(IrError::Inference { .. }), ["Squeeze"])
            })
        }),
        case(AxesReductions, "concat_axis_out_of_range", || {
            in_main(|| {
                let a = ones(&[2], "a")?;
                expect_err!(ops::concat(&[&a, &a], -2), E::Ir(IrError::Inference { .. }), ["Concat"])
            })
        }),
        case(AxesReductions, "slice_duplicate_axes", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                expect_err!(ops::slice(&a, &[0, 1], &[2, 3], &[], &[0, 0]), E::Ir(IrError::Inference { .. }), ["Slice"])
            })
        }),
        case(AxesReductions, "slice_axis_out_of_range", || {
            in_main(|| {
                let a = ones(&[4], "a")?;
                expect_err!(ops::slice(&a, &[0], &[2], &[], &[3]), E::Ir(IrError::Inference { .. }), ["Slice"])
            })
        }),
    ]
}
