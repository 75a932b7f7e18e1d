//! The indexing ops on the `cpu` device against numpy (`tests/fixtures/gen_indexing.py`
//! computed `tests/fixtures/indexing_expected.rs`), their typed build errors, and
//! their run-time index semantics with and without `SessionOptions::check_indices`.

#[allow(dead_code)]
mod expected {
    include!("../../fixtures/indexing_expected.rs");
}

use expected::*;
use ndarray::{ArrayD, IxDyn};
use popart_ir::IrError;
use popxl::ops::{self, GatherOptions, GroupedGatherOptions, InitType, ScatterReduceOptions};
use popxl::{DataType, HostArray, Ir, PopXlError, Tensor};
use popxl_session::{Inputs, Session, SessionError, SessionOptions};

type Case = (&'static [usize], &'static [f64]);

/// An output's shape and values.
type Values = (Vec<usize>, Vec<f64>);

/// A constant of `dtype` holding the case's values.
fn c(case: Case, dtype: DataType, name: &str) -> popxl::Result<Tensor> {
    let a = ArrayD::from_shape_vec(IxDyn(case.0), case.1.to_vec()).expect("fixture shape");
    popxl::constant(HostArray::from(a).cast(dtype), name)
}

/// An integer index constant.
fn ints<T: popxl::HostElement>(v: Vec<T>, shape: &[usize], name: &str) -> popxl::Result<Tensor>
where
    HostArray: From<ArrayD<T>>,
{
    popxl::constant(ArrayD::from_shape_vec(IxDyn(shape), v).expect("index shape"), name)
}

/// Build the outputs `f` returns in a fresh IR, run them once (with `options`)
/// and return their shapes and values.
fn try_run_with(
    options: SessionOptions,
    f: impl FnOnce() -> popxl::Result<Vec<Tensor>>,
) -> Result<Vec<Values>, SessionError> {
    let ir = Ir::new();
    let streams = {
        let _g = ir.main_graph().enter();
        let outs = f().expect("building");
        outs.iter()
            .enumerate()
            .map(|(k, t)| {
                let s = popxl::d2h_stream(t.shape(), t.dtype(), &format!("out{k}")).expect("stream");
                ops::host_store(&s, t).expect("store");
                s
            })
            .collect::<Vec<_>>()
    };
    let mut s = Session::with_options(ir, "cpu", options)?;
    let out = s.scope(|s| s.run(&Inputs::new()))?;
    Ok(streams.iter().map(|s| (out[s].shape().to_vec(), out[s].to_f64_vec())).collect())
}

fn run(f: impl FnOnce() -> popxl::Result<Vec<Tensor>>) -> Vec<Values> {
    try_run_with(SessionOptions::default(), f).expect("run")
}

fn run1(f: impl FnOnce() -> popxl::Result<Tensor>) -> Values {
    run(|| Ok(vec![f()?])).remove(0)
}

fn run_checked(f: impl FnOnce() -> popxl::Result<Tensor>) -> Result<Vec<f64>, SessionError> {
    let options = SessionOptions { check_indices: true, ..Default::default() };
    Ok(try_run_with(options, || Ok(vec![f()?]))?.remove(0).1)
}

/// Assert the output equals the expected case (shape and values).
#[track_caller]
fn assert_case(got: Values, want: Case) {
    assert_eq!(got.0, want.0, "shape");
    assert_eq!(got.1, want.1, "values");
}

/// The inference error of building something, with its message.
#[track_caller]
fn inference_error<T: std::fmt::Debug>(r: popxl::Result<T>, needle: &str) {
    match r {
        Err(PopXlError::Ir(IrError::Inference { message, .. })) => {
            assert!(message.contains(needle), "`{message}` does not mention `{needle}`")
        }
        other => panic!("expected an inference error mentioning `{needle}`, got {other:?}"),
    }
}

/// The facade's typed argument error `is` (a variant), with a message mentioning `needle`.
#[track_caller]
fn invalid_argument<T: std::fmt::Debug>(r: popxl::Result<T>, is: fn(&PopXlError) -> bool, needle: &str) {
    match r {
        Err(e) if is(&e) => assert!(e.to_string().contains(needle), "`{e}` does not mention `{needle}`"),
        other => panic!("expected an argument error mentioning `{needle}`, got {other:?}"),
    }
}

fn in_main<T>(f: impl FnOnce() -> T) -> T {
    let ir = Ir::new();
    let main = ir.main_graph();
    main.with(f)
}

#[test]
fn subsample_matches_numpy_strided_slicing() {
    assert_case(run1(|| ops::subsample(&c(SUB_X, popxl::float32, "x")?, &[2, 3, 1])), SUB_231);
    assert_case(run1(|| ops::subsample(&c(SUB_X, popxl::float64, "x")?, &[4])), SUB_4);
    assert_case(run1(|| ops::subsample(&c(SUB_X, popxl::float16, "x")?, &[4])), SUB_4);
    assert_case(run1(|| ops::subsample(&c(SUB_XI, popxl::int32, "x")?, &[3, 2])), SUB_XI_32);
}

#[test]
fn split_matches_numpy_split() {
    let parts = run(|| ops::split(&c(SPLIT_X, popxl::float32, "x")?, 3, 1));
    let want = [SPLIT_3_0, SPLIT_3_1, SPLIT_3_2];
    assert_eq!(parts.len(), 3);
    for (p, w) in parts.into_iter().zip(want) {
        assert_case(p, w);
    }
    let parts = run(|| ops::split(&c(SPLIT_X, popxl::int64, "x")?, [1, 5], -1));
    for (p, w) in parts.into_iter().zip([SPLIT_15_0, SPLIT_15_1]) {
        assert_case(p, w);
    }
    // Outputs are named after the input.
    in_main(|| {
        let x = c(SPLIT_X, popxl::float32, "x").unwrap();
        let p = ops::split(&x, 2, 0).unwrap();
        assert_eq!(p[1].name(), "x_split_1");
    });
}

#[test]
fn scatter_matches_numpy() {
    let (t, v, i) = (SC_T, SC_V, SC_I);
    let out = run1(|| {
        let idx = ints(vec![1i32, 3, 0, -1, 0, 2], i.0, "i")?;
        ops::scatter(&c(t, popxl::float32, "t")?, &idx, &c(v, popxl::float32, "v")?, 0)
    });
    assert_case(out, SC_OUT);
    // One index per column (a vector along axis 1).
    let out = run1(|| {
        let idx = ints(vec![2i64, 0], &[2], "i")?;
        ops::scatter(&c(t, popxl::float64, "t")?, &idx, &c(SC_V2, popxl::float64, "v")?, 1)
    });
    assert_case(out, SC_OUT2);
    // int32 data; an out-of-range index writes nothing.
    let out = run1(|| {
        let idx = ints(vec![2i32, 3, -3, 1], &[2, 2], "i")?;
        ops::scatter(&c(SCI_T, popxl::int32, "t")?, &idx, &c(SCI_V, popxl::int32, "v")?, 1)
    });
    assert_case(out, SCI_OUT);
}

fn sr(reduction: &str, init: bool, dtype: DataType) -> popxl::Result<Tensor> {
    let data = c(SR_D, dtype, "d")?;
    let idx = ints(vec![3i32, 0, 1, 3, -1, 0], &[6], "i")?;
    let initial = if init { Some(c(SR_INIT, dtype, "init")?) } else { None };
    let opts = ScatterReduceOptions {
        initial_values: initial.as_ref(),
        axis_size: if init { None } else { Some(5) },
        ..Default::default()
    };
    ops::scatter_reduce(&data, &idx, reduction, opts)
}

#[test]
fn scatter_reduce_matches_numpy_ufunc_at_with_repeated_indices() {
    for dtype in [popxl::float32, popxl::float64, popxl::float16] {
        assert_case(run1(|| sr("sum", false, dtype)), SR_SUM);
        assert_case(run1(|| sr("max", false, dtype)), SR_MAX);
        assert_case(run1(|| sr("min", false, dtype)), SR_MIN);
        assert_case(run1(|| sr("none", false, dtype)), SR_NONE);
        // The initial values are not exact in float16.
        if dtype != popxl::float16 {
            assert_case(run1(|| sr("sum", true, dtype)), SR_SUM_INIT);
            assert_case(run1(|| sr("max", true, dtype)), SR_MAX_INIT);
        }
    }
    // One index per element along axis 1 (int64 indices).
    let out = run1(|| {
        let idx = ints(vec![0i64, 2, 2, 1, 1, 1, 0, -1, 2, 0, 0, 0], &[3, 4], "i")?;
        let opts = ScatterReduceOptions { axis: 1, axis_size: Some(3), ..Default::default() };
        ops::scatter_reduce(&c(SRE_D, popxl::float32, "d")?, &idx, "sum", opts)
    });
    assert_case(out, SRE_SUM);
    // int32 data.
    let out = run1(|| {
        let idx = ints(vec![1u32, 1, 0], &[3], "i")?;
        let opts = ScatterReduceOptions { axis_size: Some(2), ..Default::default() };
        ops::scatter_reduce(&c(SRI_D, popxl::int32, "d")?, &idx, "sum", opts)
    });
    assert_case(out, SRI_SUM);
}

fn ds(index: Vec<i32>, sizes: &[i64]) -> popxl::Result<Tensor> {
    let t = c(DS_T, popxl::float32, "t")?;
    let i = ints(index, &[2], "i")?;
    ops::dynamic_slice(&t, &i, &[0, 2], sizes, false)
}

#[test]
fn dynamic_slice_matches_numpy_and_wraps_like_popops() {
    assert_case(run1(|| ds(vec![1, 2], &[2, 4])), DS_12);
    // Past the end: the slice wraps around to the start of the axis.
    assert_case(run1(|| ds(vec![2, 5], &[2, 4])), DS_WRAP);
    // Offsets outside [0, dim) (7 >= 3, and -1 read as unsigned) start at 0.
    assert_case(run1(|| ds(vec![7, -1], &[2, 4])), DS_OOR);
    // With check_indices each of them is an error naming the last element out of range.
    assert!(run_checked(|| ds(vec![1, 3], &[2, 4])).is_ok());
    let err = run_checked(|| ds(vec![2, 5], &[2, 4])).unwrap_err();
    assert!(matches!(err, SessionError::IndexOutOfRange { index: 3, bound: 3, .. }), "{err}");
    let err = run_checked(|| ds(vec![0, -1], &[2, 4])).unwrap_err();
    assert!(matches!(err, SessionError::IndexOutOfRange { index: -1, bound: 7, .. }), "{err}");
}

fn du(index: u32, inplace: bool) -> popxl::Result<Tensor> {
    let t = if inplace { popxl::variable(c_host(DU_T), "t")? } else { c(DU_T, popxl::float32, "t")? };
    let u = c(DU_U, popxl::float32, "u")?;
    let i = ints(vec![index], &[1], "i")?;
    if inplace {
        ops::dynamic_update_(&t, &i, &u, &[1], &[2], true)
    } else {
        ops::dynamic_update(&t, &i, &u, &[1], &[2], true)
    }
}

fn c_host(case: Case) -> HostArray {
    HostArray::from(ArrayD::from_shape_vec(IxDyn(case.0), case.1.to_vec()).expect("shape")).cast(popxl::float32)
}

#[test]
fn dynamic_update_matches_numpy_in_and_out_of_place() {
    for inplace in [false, true] {
        assert_case(run1(|| du(1, inplace)), DU_1);
        assert_case(run1(|| du(2, inplace)), DU_WRAP);
    }
    let err = run_checked(|| du(2, false)).unwrap_err();
    assert!(matches!(err, SessionError::IndexOutOfRange { index: 3, bound: 3, .. }), "{err}");
}

#[test]
fn dynamic_update_in_place_writes_the_variable() {
    let ir = Ir::new();
    let (t, out) = {
        let _g = ir.main_graph().enter();
        let t = popxl::variable(c_host(DU_T), "t").unwrap();
        let u = c(DU_U, popxl::float32, "u").unwrap();
        let i = ints(vec![1u32], &[1], "i").unwrap();
        let y = ops::dynamic_update_(&t, &i, &u, &[1], &[2], false).unwrap();
        let s = popxl::d2h_stream(y.shape(), y.dtype(), "y").unwrap();
        ops::host_store(&s, &y).unwrap();
        (t, s)
    };
    let mut s = Session::new(ir, "cpu").unwrap();
    let outs = s.scope(|s| s.run(&Inputs::new())).unwrap();
    assert_eq!(outs[&out].to_f64_vec(), DU_1.1);
    let w = s.scope(|s| s.get_tensor_data(&t)).unwrap();
    assert_eq!(w.to_f64_vec(), DU_1.1);
}

fn oh(axis: i64) -> popxl::Result<Tensor> {
    let i = ints(vec![1i32, 5, 0, -1, 7, 2], &[3, 2], "i")?;
    let n = popxl::constant(6i64, "n")?;
    let v = popxl::constant(vec![0.5f32, 2.0], "v")?;
    ops::onehot(&i, &n, &v, axis)
}

#[test]
fn onehot_matches_numpy_on_every_axis() {
    assert_case(run1(|| oh(-1)), OH_LAST);
    assert_case(run1(|| oh(2)), OH_LAST);
    assert_case(run1(|| oh(0)), OH_0);
    assert_case(run1(|| oh(-2)), OH_1);
    // Index 7 is outside [-6, 6): an all-off row, or an error when checked.
    let err = run_checked(|| oh(-1)).unwrap_err();
    assert!(matches!(err, SessionError::IndexOutOfRange { index: 7, bound: 6, .. }), "{err}");
}

#[test]
fn grouped_and_tied_gathers_match_numpy_take() {
    let out = run1(|| {
        let o = GroupedGatherOptions { axis: 1, group_size: 2, ..Default::default() };
        ops::groupedgather(&c(GG_D, popxl::float32, "d")?, &ints(vec![0i32, 2, 1, -1], &[2, 2], "i")?, o)
    });
    assert_case(out, GG_1);
    let out = run1(|| {
        let o = GroupedGatherOptions { axis: -1, group_size: 2, ..Default::default() };
        ops::groupedgather(&c(GG_D, popxl::int32, "d")?, &ints(vec![3i64, 0, 1, 2, 2, 0], &[2, 3], "i")?, o)
    });
    assert_case(out, GG_2);
    let out = run1(|| {
        ops::tied_gather(&c(TG_D, popxl::float32, "d")?, &ints(vec![4i32, 0, -2, 1], &[2, 2], "i")?, Default::default())
    });
    assert_case(out, TG_OUT);
    // Out of range: zero rows; checked: an error unless zero_OOR.
    let tg = |zero: bool| {
        let o = GatherOptions { zero_OOR: zero, ..Default::default() };
        ops::tied_gather(&c(TG_D, popxl::float32, "d")?, &ints(vec![5i32, 0], &[2], "i")?, o)
    };
    assert_eq!(run1(|| tg(false)).1, [0.0, 0.0, 0.0, 0.0, 1.0, 2.0]);
    let err = run_checked(|| tg(false)).unwrap_err();
    assert!(matches!(err, SessionError::IndexOutOfRange { index: 5, bound: 5, .. }), "{err}");
    assert_eq!(run_checked(|| tg(true)).unwrap(), [0.0, 0.0, 0.0, 0.0, 1.0, 2.0]);
    // group_size 1 is plain gather, with the PopXL options.
    let out = run1(|| {
        let o = GroupedGatherOptions::default();
        ops::groupedgather(&c(TG_D, popxl::float32, "d")?, &ints(vec![4i32, 0, -2, 1], &[2, 2], "i")?, o)
    });
    assert_case(out, TG_OUT);
    let out = run1(|| {
        let o = GatherOptions { axis: 0, ..Default::default() };
        ops::gather_with_options(&c(TG_D, popxl::float32, "d")?, &ints(vec![4i32, 0, -2, 1], &[2, 2], "i")?, o)
    });
    assert_case(out, TG_OUT);
}

#[test]
fn scatter_indices_out_of_range_are_skipped_or_checked() {
    let f = |i: i32| {
        let idx = ints(vec![i, 0], &[2], "i")?;
        let opts = ScatterReduceOptions { axis_size: Some(3), ..Default::default() };
        ops::scatter_reduce(&popxl::constant(vec![1.0f32, 2.0], "d")?, &idx, "sum", opts)
    };
    assert_eq!(run1(|| f(-3)).1, [3.0, 0.0, 0.0]);
    assert_eq!(run1(|| f(3)).1, [2.0, 0.0, 0.0]);
    assert_eq!(run1(|| f(-4)).1, [2.0, 0.0, 0.0]);
    assert_eq!(run_checked(|| f(-1)).unwrap(), [2.0, 0.0, 1.0]);
    let err = run_checked(|| f(3)).unwrap_err();
    assert!(matches!(err, SessionError::IndexOutOfRange { index: 3, bound: 3, .. }), "{err}");
}

#[test]
fn init_gives_zeros_of_any_dtype() {
    for (dt, kind) in
        [(popxl::float32, InitType::Zero), (popxl::int16, InitType::Undef), (popxl::dtypes::bool, InitType::Zero)]
    {
        let (shape, v) = run1(|| ops::init(&[2, 3], dt, "z", kind));
        assert_eq!((shape, v), (vec![2, 3], vec![0.0; 6]));
    }
    // Init needs a graph context (it has no inputs).
    assert!(matches!(ops::init(&[1], popxl::float32, "z", InitType::Zero), Err(PopXlError::NoGraphContext { .. })));
}

#[test]
fn typed_build_errors() {
    in_main(|| {
        let x = c(SUB_X, popxl::float32, "x").unwrap();
        let i32v = |v: Vec<i32>, s: &[usize]| ints(v, s, "i").unwrap();
        // subsample
        inference_error(ops::subsample(&x, &[0]), "at least 1");
        inference_error(ops::subsample(&x, &[-2]), "at least 1");
        invalid_argument(ops::subsample(&x, &[1, 1, 1, 1]), |e| matches!(e, PopXlError::TooManyAxes { .. }), "rank 3");
        // split
        invalid_argument(
            ops::split(&x, 2, 0),
            |e| matches!(e, PopXlError::NotDivisible { .. }),
            "does not equally divide",
        );
        invalid_argument(
            ops::split(&x, 0, 0),
            |e| matches!(e, PopXlError::NotDivisible { .. }),
            "does not equally divide",
        );
        inference_error(ops::split(&x, vec![2, 2], 0), "do not sum");
        invalid_argument(ops::split(&x, 5, 3), |e| matches!(e, PopXlError::AxisOutOfRange { .. }), "out of range");
        // scatter
        let v = c(SC_V, popxl::float32, "v").unwrap();
        let t = c(SC_T, popxl::float32, "t").unwrap();
        inference_error(ops::scatter(&t, &i32v(vec![0; 6], &[2, 3]), &v, 2), "out of range");
        inference_error(ops::scatter(&t, &i32v(vec![0; 4], &[2, 2]), &v, 0), "cannot address");
        let fidx = popxl::constant(ndarray::Array2::<f32>::zeros((2, 3)), "f").unwrap();
        inference_error(ops::scatter(&t, &fidx, &v, 0), "integer");
        let vi = c(SC_V, popxl::int32, "vi").unwrap();
        inference_error(ops::scatter(&t, &i32v(vec![0; 6], &[2, 3]), &vi, 0), "int32");
        let wide = popxl::constant(ndarray::Array2::<f32>::zeros((2, 4)), "w").unwrap();
        inference_error(ops::scatter(&t, &i32v(vec![0; 8], &[2, 4]), &wide, 0), "does not fit");
        // scatter_reduce
        let d = c(SR_D, popxl::float32, "d").unwrap();
        let si = i32v(vec![0; 6], &[6]);
        invalid_argument(
            ops::scatter_reduce(&d, &si, "mul", ScatterReduceOptions::default()),
            |e| matches!(e, PopXlError::UnknownName { .. }),
            "mul",
        );
        invalid_argument(
            ops::scatter_reduce(&d, &si, "sum", ScatterReduceOptions::default()),
            |e| matches!(e, PopXlError::MissingArgument { .. }),
            "axis_size",
        );
        let o = ScatterReduceOptions { axis_size: Some(0), ..Default::default() };
        inference_error(ops::scatter_reduce(&d, &si, "sum", o), "at least 1");
        let init = c(SR_INIT, popxl::float32, "init").unwrap();
        let o = ScatterReduceOptions { initial_values: Some(&init), axis_size: Some(4), ..Default::default() };
        inference_error(ops::scatter_reduce(&d, &si, "sum", o), "differs");
        let b = popxl::constant(ndarray::Array1::<bool>::from(vec![true; 6]), "b").unwrap();
        let o = ScatterReduceOptions { axis_size: Some(2), ..Default::default() };
        inference_error(ops::scatter_reduce(&b, &si, "max", o), "numeric");
        // dynamic slices
        let t = c(DS_T, popxl::float32, "t").unwrap();
        let i2 = ints(vec![0u32, 0], &[2], "i2").unwrap();
        inference_error(ops::dynamic_slice(&t, &i2, &[0, 2], &[4, 1], false), "does not fit");
        inference_error(ops::dynamic_slice(&t, &i2, &[0, 3], &[1, 1], false), "out of range");
        inference_error(ops::dynamic_slice(&t, &i2, &[0, -3], &[1, 1], false), "more than once");
        inference_error(ops::dynamic_slice(&t, &i2, &[0], &[1], false), "one offset per sliced axis");
        inference_error(ops::dynamic_slice(&t, &i2, &[0, 1], &[1], false), "2 axes but 1 sizes");
        let fi = popxl::constant(vec![0.0f32, 0.0], "fi").unwrap();
        inference_error(ops::dynamic_slice(&t, &fi, &[0, 2], &[1, 1], false), "integer");
        let u = popxl::constant(ndarray::Array3::<f32>::zeros((1, 5, 2)), "u").unwrap();
        inference_error(ops::dynamic_update(&t, &i2, &u, &[0, 2], &[1, 3], false), "does not fit");
        // onehot
        let oi = i32v(vec![0, 1], &[2]);
        let n = popxl::constant(3i32, "n").unwrap();
        let vals = popxl::constant(vec![0.0f32, 1.0], "vals").unwrap();
        inference_error(ops::onehot(&oi, &n, &vals, 2), "out of range");
        let v3 = popxl::constant(vec![0.0f32, 1.0, 2.0], "v3").unwrap();
        inference_error(ops::onehot(&oi, &n, &v3, -1), "shape [2]");
        invalid_argument(
            ops::onehot(&oi, &popxl::variable(3i32, "nv").unwrap(), &vals, -1),
            |e| matches!(e, PopXlError::NotConstant { .. }),
            "constant",
        );
        invalid_argument(
            ops::onehot(&oi, &popxl::constant(3.0f32, "nf").unwrap(), &vals, -1),
            |e| matches!(e, PopXlError::NotConstant { .. }),
            "constant",
        );
        // grouped gather
        let gd = c(GG_D, popxl::float32, "gd").unwrap();
        let gi = i32v(vec![0; 4], &[2, 2]);
        let o = |axis, group_size| GroupedGatherOptions { axis, group_size, ..Default::default() };
        inference_error(ops::groupedgather(&gd, &gi, o(0, 2)), "group dimension");
        inference_error(ops::groupedgather(&gd, &gi, o(1, 3)), "3 groups");
        inference_error(ops::groupedgather(&gd, &gi, o(3, 2)), "out of range");
        inference_error(ops::tied_gather(&gd, &fidx, GatherOptions::default()), "integer");
    });
}
