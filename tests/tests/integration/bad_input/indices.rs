//! Index semantics: gather and nll labels in and out of range, at build time
//! and at run time, with and without `SessionOptions::check_indices`.
//!
//! What we do today (documented by these cases): a gather index out of range
//! yields a zero row (PopXL's `zero_OOR=True` behaviour; negative indices count
//! from the end as in numpy); an nll label out of range that is not
//! `ignore_index` yields NaN for its row. With `check_indices` (helper "sess")
//! both are `SessionError::IndexOutOfRange` naming the op, the index and the bound.

use ndarray::{array, Array1};
use popart_ir::IrError;
use popxl::ops::{self, NllLossOptions, Reduction};
use popxl::{Ir, PopXlError as E, Tensor};

use super::fixtures::{ones, run_once, store_model, values};
use super::harness::{case, ensure, Case, CaseResult, Category::Indices};

/// `table` (3 rows of 2: 0..6) gathered at `idx` along axis 0, stored.
fn gather_model(idx: Vec<i32>) -> popxl::Result<(Ir, popxl::DeviceToHostStream)> {
    store_model(|| {
        let table = popxl::constant(array![[0.0f32, 1.0], [2.0, 3.0], [4.0, 5.0]], "table")?;
        let i = popxl::constant(Array1::from(idx), "idx")?;
        ops::gather(&table, &i, 0)
    })
}

/// Per-row nll loss of fixed probabilities at `labels`.
fn nll_model(labels: Vec<i32>, ignore_index: Option<i64>) -> popxl::Result<(Ir, popxl::DeviceToHostStream)> {
    store_model(|| {
        let n = labels.len();
        let probs = popxl::constant(ndarray::Array2::<f32>::from_elem((n, 3), 0.25), "probs")?;
        let l = popxl::constant(Array1::from(labels), "labels")?;
        ops::nll_loss_with(&probs, &l, NllLossOptions { reduction: Reduction::None, ignore_index, log_prob: false })
    })
}

fn gather_values(idx: Vec<i32>) -> Result<Vec<f64>, super::harness::Failure> {
    let (ir, out) = gather_model(idx)?;
    Ok(values(&run_once(ir)?, &out))
}

fn nll_values(labels: Vec<i32>, ignore_index: Option<i64>) -> Result<Vec<f64>, super::harness::Failure> {
    let (ir, out) = nll_model(labels, ignore_index)?;
    Ok(values(&run_once(ir)?, &out))
}

/// Run `ir` with `check_indices` on.
fn run_checked(ir: Ir) -> Result<popxl_session::Outputs, popxl_session::SessionError> {
    let options = popxl_session::SessionOptions { check_indices: true, ..Default::default() };
    let mut s = popxl_session::Session::with_options(ir, "cpu", options)?;
    s.scope(|s| s.run(&popxl_session::Inputs::new()))
}

fn in_main<T>(f: impl FnOnce() -> T) -> T {
    let ir = Ir::new();
    let main = ir.main_graph();
    main.with(f)
}

pub fn cases() -> Vec<Case> {
    vec![
        case(Indices, "gather_in_range", || {
            let got = gather_values(vec![2, 0])?;
            ensure(got == [4.0, 5.0, 0.0, 1.0], || format!("gather rows [2, 0] = {got:?}"))
        }),
        case(Indices, "gather_negative_index_counts_from_the_end", || {
            let got = gather_values(vec![-1, -3])?;
            ensure(got == [4.0, 5.0, 0.0, 1.0], || format!("gather rows [-1, -3] = {got:?}"))
        }),
        case(Indices, "gather_out_of_range_gives_zero_rows", || {
            let got = gather_values(vec![3, -4, 1])?;
            ensure(got == [0.0, 0.0, 0.0, 0.0, 2.0, 3.0], || format!("gather rows [3, -4, 1] = {got:?}"))
        }),
        case(Indices, "gather_i32_extremes_give_zero_rows", || {
            let got = gather_values(vec![i32::MAX, i32::MIN])?;
            ensure(got == [0.0; 4], || format!("gather rows [i32::MAX, i32::MIN] = {got:?}"))
        }),
        case(Indices, "gather_axis_out_of_range", || {
            in_main(|| {
                let t = ones(&[3, 2], "t")?;
                let i = popxl::constant(vec![0i32], "i")?;
                expect_err!(ops::gather(&t, &i, 2), E::Ir(IrError::Inference { .. }), ["Gather"])
            })
        }),
        case(Indices, "gather_axis_i64_min", || {
            in_main(|| {
                let t = ones(&[3, 2], "t")?;
                let i = popxl::constant(vec![0i32], "i")?;
                expect_err!(ops::gather(&t, &i, i64::MIN), E::Ir(IrError::Inference { .. }), ["Gather"])
            })
        }),
        case(Indices, "gather_float_indices", || {
            in_main(|| {
                let t = ones(&[3, 2], "t")?;
                let i = ones(&[1], "i")?;
                expect_err!(ops::gather(&t, &i, 0), E::Ir(IrError::Inference { .. }), ["Gather"])
            })
        }),
        case(Indices, "nll_labels_in_range", || {
            let got = nll_values(vec![0, 2], None)?;
            let want = -(0.25f64.ln());
            ensure(got.iter().all(|v| (v - want).abs() < 1e-6), || format!("losses {got:?}, want {want}"))
        }),
        // Out-of-range labels count as ignored (ARCHITECTURE.md, "Index semantics").
        case(Indices, "nll_label_out_of_range_is_ignored", || {
            let got = nll_values(vec![0, 3], None)?;
            ensure(got.len() == 2 && got[0].is_finite() && got[0] > 0.0 && got[1] == 0.0, || {
                format!("losses {got:?}, want [positive, 0]")
            })
        }),
        case(Indices, "nll_negative_label_is_ignored", || {
            let got = nll_values(vec![-1, 1], None)?;
            ensure(got.len() == 2 && got[0] == 0.0 && got[1].is_finite() && got[1] > 0.0, || {
                format!("losses {got:?}, want [0, positive]")
            })
        }),
        case(Indices, "nll_ignored_label_out_of_range_contributes_zero", || {
            let got = nll_values(vec![-100, 1], Some(-100))?;
            ensure(got.len() == 2 && got[0] == 0.0 && got[1].is_finite(), || {
                format!("losses {got:?}, want [0, finite]")
            })
        }),
        case(Indices, "nll_float_labels", || {
            in_main(|| {
                let p = ones(&[2, 3], "p")?;
                let l = ones(&[2], "l")?;
                expect_err!(ops::nll_loss(&p, &l), E::Ir(IrError::Inference { .. }), ["NllLoss"])
            })
        }),
        case(Indices, "nll_labels_shape_mismatch", || {
            in_main(|| {
                let p = ones(&[2, 3], "p")?;
                let l = popxl::constant(vec![0i32, 1, 2], "l")?;
                expect_err!(ops::nll_loss(&p, &l), E::Ir(IrError::Inference { .. }), ["NllLoss"])
            })
        }),
        case(Indices, "index_out_of_range_at_build_time", || {
            in_main(|| -> CaseResult {
                let t: Tensor = ones(&[3, 2], "t")?;
                expect_err!(t.index(&popxl::s![1, 2]), E::IndexOutOfRange { index: 2, len: 2, .. }, ["axis 1", "`t`"])
            })
        }),
        case(Indices, "gather_out_of_range_with_check_indices", || {
            let (ir, _) = gather_model(vec![0, 7])?;
            expect_err!(
                run_checked(ir),
                popxl_session::SessionError::IndexOutOfRange { index: 7, bound: 3, .. },
                ["Gather", "7", "3"]
            )
        }),
        case(Indices, "gather_in_range_with_check_indices", || {
            let (ir, out) = gather_model(vec![-1, 0])?;
            let got = values(&run_checked(ir)?, &out);
            ensure(got == [4.0, 5.0, 0.0, 1.0], || format!("gather rows [-1, 0] = {got:?}"))
        }),
        case(Indices, "gather_zero_oor_with_check_indices", || {
            let (ir, out) = store_model(|| {
                let table = popxl::constant(array![[0.0f32, 1.0], [2.0, 3.0], [4.0, 5.0]], "table")?;
                let i = popxl::constant(vec![5i32, 1], "idx")?;
                ops::OpBuilder::new("gather", &popart_ir::ops::all::Gather)
                    .input(0, &table)
                    .input(1, &i)
                    .attr("axis", popart_ir::AttrValue::Int(0))
                    .attr("zero_OOR", popart_ir::AttrValue::Bool(true))
                    .create1()
            })?;
            let got = values(&run_checked(ir)?, &out);
            ensure(got == [0.0, 0.0, 2.0, 3.0], || format!("zero_OOR gather rows [5, 1] = {got:?}"))
        }),
        case(Indices, "nll_label_out_of_range_with_check_indices", || {
            let (ir, _) = nll_model(vec![0, 3], None)?;
            expect_err!(
                run_checked(ir),
                popxl_session::SessionError::IndexOutOfRange { index: 3, bound: 3, .. },
                ["NllLoss", "3"]
            )
        }),
        case(Indices, "nll_ignored_label_with_check_indices", || {
            let (ir, out) = nll_model(vec![-100, 1], Some(-100))?;
            let got = values(&run_checked(ir)?, &out);
            ensure(got.len() == 2 && got[0] == 0.0, || format!("losses {got:?}"))
        }),
        case(Indices, "session_usable_after_index_error", || {
            let (ir, _) = gather_model(vec![9])?;
            let options = popxl_session::SessionOptions { check_indices: true, ..Default::default() };
            let mut s = popxl_session::Session::with_options(ir, "cpu", options)?;
            let first = s.scope(|s| s.run(&popxl_session::Inputs::new()));
            ensure(first.is_err(), || "out-of-range gather accepted under check_indices".into())?;
            let second = s.scope(|s| s.run(&popxl_session::Inputs::new()));
            ensure(matches!(second, Err(popxl_session::SessionError::IndexOutOfRange { .. })), || {
                format!("second run: {second:?}")
            })
        }),
    ]
}
