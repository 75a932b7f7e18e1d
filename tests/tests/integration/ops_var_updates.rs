//! PopXL's `var_updates` run on the `cpu` device against numpy: every accumulation
//! type over three steps, `accumulator_scale_`/`accumulator_zero_`,
//! `sparse_accumulate_` with repeated indices, float16 updates of float32
//! accumulators, three-step Adam / Adam without bias correction / LAMB / AdaMax
//! trajectories, and the typed errors. Expected values are printed by
//! `tests/fixtures/var_updates.py` (PopART's formulas in numpy, float64).

use popart_ir::ops::all::Accumulate;
use popart_ir::AttrValue;
use popxl::ops::{self, AdamUpdaterOptions, OpBuilder, Scalar, SparseAccumulateOptions};
use popxl::{Ir, PopXlError, Tensor};
use popxl_session::{Inputs, Session};

// ---- values printed by tests/fixtures/var_updates.py ----
#[allow(clippy::excessive_precision)]
const ADD: [f64; 4] = [6.5, -4.0, 6.5, 12.25];
#[allow(clippy::excessive_precision)]
const DAMPENED_ADD: [f64; 4] = [2.3, -1.9000000000000001, 3.3499999999999996, 3.8499999999999996];
#[allow(clippy::excessive_precision)]
const DAMPENED_ADD_SQUARE: [f64; 4] = [4.699999999999999, 0.49999999999999994, 4.625, 15.25];
#[allow(clippy::excessive_precision)]
const MOVING_AVERAGE: [f64; 4] = [2.5965, -0.363, 2.1505, 4.53575];
#[allow(clippy::excessive_precision)]
const MOVING_AVERAGE_SQUARE: [f64; 4] = [7.216499999999999, 0.435, 4.91725, 21.43375];
#[allow(clippy::excessive_precision)]
const DECAY_ADD: [f64; 4] = [3.7035, -0.507, 3.049, 6.47675];
#[allow(clippy::excessive_precision)]
const DECAY_ADD_SQUARE: [f64; 4] = [10.3035, 0.6330000000000001, 7.0015, 30.61675];
#[allow(clippy::excessive_precision)]
const INFINITY: [f64; 4] = [3.0, 0.3, 2.5, 5.0];
#[allow(clippy::excessive_precision)]
const MEAN: [f64; 4] = [2.0, -1.0, 1.5, 3.9999999999999996];
#[allow(clippy::excessive_precision)]
const SCALED: [f64; 4] = [0.0625, -0.125, 0.25, 0.03125];
#[allow(clippy::excessive_precision)]
const SPARSE: [f64; 10] = [0.5, -0.75, 0.5, -1.25, 1.0, 4.25, 3.0, 1.75, 5.0, 4.75];
#[allow(clippy::excessive_precision)]
const ADAM_W: [f64; 5] =
    [0.20156572627321706, -1.196481831858118, 1.6947687883325606, 0.2974810866569002, 0.6987046042563472];
#[allow(clippy::excessive_precision)]
const ADAM_M: [f64; 5] =
    [0.08031755358728887, -0.24274662299109462, 0.3375213259066283, -0.09393345100309035, 0.1344283834581531];
#[allow(clippy::excessive_precision)]
const ADAM_V: [f64; 5] =
    [0.0002744656340641098, 0.002428729765707903, 0.004680538083584974, 0.00037225849775271723, 0.0007529571075991836];
#[allow(clippy::excessive_precision)]
const ADAM_NO_BIAS_W: [f64; 5] =
    [-0.5725087712402395, -0.2814770374238173, 0.7713367177326175, 1.1138951031567217, -0.1773748929181393];
#[allow(clippy::excessive_precision)]
const ADAM_NO_BIAS_M: [f64; 5] =
    [0.04467278823957449, -0.20614887606051194, 0.3008544881864539, -0.05801163936303289, 0.09811334556596457];
#[allow(clippy::excessive_precision)]
const ADAM_NO_BIAS_V: [f64; 5] =
    [0.0001590339699014433, 0.0018623300440141122, 0.003849515227753154, 0.00021961173223496798, 0.0004885597268206642];
#[allow(clippy::excessive_precision)]
const LAMB_W: [f64; 5] =
    [0.30018925995528495, -1.2974751212088007, 1.7963933384700799, 0.1989884651981184, 0.7987368592749764];
#[allow(clippy::excessive_precision)]
const LAMB_M: [f64; 5] =
    [0.08517704799697223, -0.2476714848336387, 0.3424721973609813, -0.09877301631775298, 0.13932310579743512];
#[allow(clippy::excessive_precision)]
const LAMB_V: [f64; 5] =
    [0.00030266978100778973, 0.002518345879344684, 0.004806432157473912, 0.00040538252766570874, 0.0008015683560294476];
#[allow(clippy::excessive_precision)]
const ADAMAX_W: [f64; 5] =
    [0.22105317412576828, -1.2039893285023233, 1.7002477125386481, 0.28032198783750056, 0.7115182419521284];
#[allow(clippy::excessive_precision)]
const ADAMAX_M: [f64; 5] =
    [0.08065575702756894, -0.24287330740909063, 0.3376134482037869, -0.0942293062553069, 0.13464693915501671];
#[allow(clippy::excessive_precision)]
const ADAMAX_V: [f64; 5] = [0.34930035, 0.9481009499999999, 1.2974013, 0.3992004, 0.54890055];

const T0: [f32; 4] = [0.5, -1.0, 2.0, 0.25];
const X0: [f32; 4] = [1.0, -2.0, 0.5, 3.0];
const F: f64 = 0.3;

/// Build a program in the main graph (ops in creation order), run it `steps`
/// times on the `cpu` device and return the values of `read` (as f64).
fn run_steps(steps: usize, build: impl FnOnce() -> popxl::Result<Vec<Tensor>>) -> Vec<Vec<f64>> {
    let ir = Ir::new();
    let read = {
        let _g = ir.main_graph().enter();
        let _s = popxl::in_sequence(true);
        build().unwrap()
    };
    let mut session = Session::new(ir, "cpu").unwrap();
    session
        .scope(|s| {
            for _ in 0..steps {
                s.run(&Inputs::new())?;
            }
            read.iter().map(|t| s.get_tensor_data(t).map(|a| a.to_f64_vec())).collect::<Result<Vec<_>, _>>()
        })
        .unwrap()
}

fn assert_close(got: &[f64], want: &[f64], rtol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= rtol * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w}");
    }
}

/// `t` updated three times by `update(t, x_k)` with `x_k = X0 + k` (`k` a step
/// counter variable incremented after the update).
fn three_steps(update: impl Fn(&Tensor, &Tensor, &Tensor) -> popxl::Result<Tensor>) -> Vec<f64> {
    let out = run_steps(3, || {
        let t = popxl::variable(T0.to_vec(), "t")?;
        let k = popxl::variable(0.0f32, "k")?;
        let x0 = popxl::constant(X0.to_vec(), "x0")?;
        let x = ops::add(&x0, &k)?;
        update(&t, &x, &k)?;
        ops::add_(&k, &popxl::constant(1.0f32, "one")?)?;
        Ok(vec![t])
    });
    out[0].clone()
}

type Update = fn(&Tensor, &Tensor, &Tensor) -> popxl::Result<Tensor>;

#[test]
fn accumulation_types_match_numpy_over_three_steps() {
    let cases: [(&str, Update, &[f64]); 9] = [
        ("accumulate_ (f = 1)", |t, x, _| ops::accumulate_(t, x, 1.0), &ADD),
        ("accumulate_", |t, x, _| ops::accumulate_(t, x, F), &DAMPENED_ADD),
        ("accumulate_square_", |t, x, _| ops::accumulate_square_(t, x, F), &DAMPENED_ADD_SQUARE),
        ("accumulate_moving_average_", |t, x, _| ops::accumulate_moving_average_(t, x, F), &MOVING_AVERAGE),
        (
            "accumulate_moving_average_square_",
            |t, x, _| ops::accumulate_moving_average_square_(t, x, F),
            &MOVING_AVERAGE_SQUARE,
        ),
        ("accumulate_mean_ (step tensor)", |t, x, k| ops::accumulate_mean_(t, x, k), &MEAN),
        // The types PopXL has no function for, through the op itself.
        ("decay_add", |t, x, _| typed(t, x, "decay_add"), &DECAY_ADD),
        ("decay_add_square", |t, x, _| typed(t, x, "decay_add_square"), &DECAY_ADD_SQUARE),
        ("infinity", |t, x, _| typed(t, x, "infinity"), &INFINITY),
    ];
    for (what, update, want) in cases {
        assert_close(&three_steps(update), want, 1e-6, what);
    }
    // The factor as a (float32) tensor.
    let got = three_steps(|t, x, _| {
        let f = popxl::constant(F as f32, "f")?;
        ops::accumulate_moving_average_(t, x, &f)
    });
    assert_close(&got, &MOVING_AVERAGE, 1e-6, "moving average, factor tensor");
}

fn typed(t: &Tensor, x: &Tensor, ty: &str) -> popxl::Result<Tensor> {
    OpBuilder::new("accumulate", &Accumulate)
        .input(0, t)
        .input(1, x)
        .attr("type", AttrValue::Str(ty.to_string()))
        .attr("factor", AttrValue::Float(F))
        .create1()
}

#[test]
fn accumulator_scale_and_zero() {
    let out = run_steps(3, || {
        let a = popxl::variable(T0.to_vec(), "a")?;
        let b = popxl::variable(vec![f32::NAN, 1.0], "b")?;
        let c = popxl::variable(vec![3i32, -4], "c")?;
        let half = popxl::constant(0.5f32, "half")?;
        ops::accumulator_scale_(&a, &half)?;
        ops::accumulator_zero_(&b)?;
        ops::accumulator_zero_(&c)?;
        Ok(vec![a, b, c])
    });
    assert_close(&out[0], &SCALED, 1e-7, "scaled");
    assert_eq!(out[1], vec![0.0, 0.0], "zero overwrites NaN");
    assert_eq!(out[2], vec![0.0, 0.0], "zero of an integer tensor");
}

#[test]
fn sparse_accumulate_with_repeated_and_negative_indices() {
    let out = run_steps(1, || {
        let t = popxl::variable(ndarray::Array2::from_shape_fn((2, 5), |(i, j)| (i * 5 + j) as f32 / 4.0), "t")?;
        let x = popxl::constant(ndarray::Array2::from_shape_fn((2, 5), |(i, j)| (i * 5 + j) as f32 - 3.0), "x")?;
        let idx = popxl::constant(vec![3i32, 1, 3, -1, 0], "idx")?;
        let opts = SparseAccumulateOptions { axis: 1, f: Some(0.5.into()), w: Some(&t) };
        ops::sparse_accumulate_(&t, &x, &idx, opts)?;
        Ok(vec![t])
    });
    assert_close(&out[0], &SPARSE, 1e-7, "sparse_accumulate_");
}

#[test]
fn float32_accumulators_take_float16_updates() {
    let out = run_steps(3, || {
        let a = popxl::variable(T0.to_vec(), "a")?;
        let m = popxl::variable(T0.to_vec(), "m")?;
        let x0 = popxl::constant(X0.to_vec(), "x0")?;
        let k = popxl::variable(0.0f32, "k")?;
        let x = ops::cast(&ops::add(&x0, &k)?, popxl::float16)?;
        ops::accumulate_(&a, &x, F)?;
        let f = popxl::constant_as(F, popxl::float16, "f16")?;
        ops::accumulate_moving_average_(&m, &x, &f)?;
        ops::add_(&k, &popxl::constant(1.0f32, "one")?)?;
        assert_eq!(a.dtype(), popxl::float32);
        Ok(vec![a, m])
    });
    // X0 + k is exact in float16; the float16 factor 0.3 is 0.300048828125.
    assert_close(&out[0], &DAMPENED_ADD, 1e-6, "f32 += f16");
    let f16 = 0.300048828125;
    let mut want = T0.map(f64::from).to_vec();
    for k in 0..3 {
        for (t, x) in want.iter_mut().zip(X0) {
            *t = f16 * *t + (1.0 - f16) * (f64::from(x) + k as f64);
        }
    }
    assert_close(&out[1], &want, 1e-6, "f32 moving average of f16");
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Adam,
    AdamNoBias,
    Lamb,
    AdaMax,
}

const B1: f64 = 0.9;
const B2: f64 = 0.999;

/// Three optimizer steps on `w` with `g = 0.5 * w + C`; returns `[w, m, v, step]`.
fn optimizer_steps(kind: Kind) -> Vec<Vec<f64>> {
    run_steps(3, || {
        let w = popxl::variable(vec![0.5f32, -1.5, 2.0, 0.0, 1.0], "w")?;
        let m = popxl::variable(vec![0.0f32; 5], "m")?;
        let v = popxl::variable(vec![0.0f32; 5], "v")?;
        let step = popxl::variable(0.0f32, "step")?;
        let c = popxl::constant(vec![0.1f32, -0.2, 0.3, -0.4, 0.05], "c")?;
        let g = ops::add(&ops::mul(&w, &popxl::constant(0.5f32, "half")?)?, &c)?;
        ops::accumulate_moving_average_(&m, &g, B1)?;
        if kind == Kind::AdaMax {
            OpBuilder::new("accumulate", &Accumulate)
                .input(0, &v)
                .input(1, &g)
                .attr("type", AttrValue::Str("infinity".into()))
                .attr("factor", AttrValue::Float(B2))
                .create1()?;
        } else {
            ops::accumulate_moving_average_square_(&v, &g, B2)?;
        }
        let wd = popxl::constant(0.01f32, "wd")?;
        let bias = kind != Kind::AdamNoBias;
        let opts = AdamUpdaterOptions {
            weight: Some(&w),
            time_step: bias.then_some(&step),
            weight_decay: Some(Scalar::Tensor(&wd)),
            beta1: Some(B1.into()),
            beta2: (kind != Kind::AdaMax).then_some(B2.into()),
            epsilon: 1e-6.into(),
        };
        let x = match kind {
            Kind::Adam | Kind::AdamNoBias => ops::adam_updater(&m, &v, opts)?,
            Kind::Lamb => ops::lamb_updater(&m, &v, opts)?,
            Kind::AdaMax => ops::adamax_updater(&m, &v, opts)?,
        };
        if kind == Kind::Lamb {
            let r1 = ops::sum(&ops::mul(&w, &w)?, &[], false)?;
            let r2 = ops::sum(&ops::mul(&x, &x)?, &[], false)?;
            let lr = popxl::constant(0.1f32, "lr")?;
            ops::adam_var_update(&w, &x, Some(&r1), Some(&r2), &lr, Some(1.5.into()))?;
        } else {
            ops::adam_var_update(&w, &x, None, None, 0.1, None)?;
        }
        Ok(vec![w, m, v, step])
    })
}

#[test]
fn adam_lamb_and_adamax_trajectories_match_numpy() {
    let cases: [(Kind, &str, [&[f64]; 3]); 4] = [
        (Kind::Adam, "adam", [&ADAM_W, &ADAM_M, &ADAM_V]),
        (Kind::AdamNoBias, "adam without bias correction", [&ADAM_NO_BIAS_W, &ADAM_NO_BIAS_M, &ADAM_NO_BIAS_V]),
        (Kind::Lamb, "lamb", [&LAMB_W, &LAMB_M, &LAMB_V]),
        (Kind::AdaMax, "adamax", [&ADAMAX_W, &ADAMAX_M, &ADAMAX_V]),
    ];
    for (kind, what, want) in cases {
        let got = optimizer_steps(kind);
        for (k, name) in ["w", "m", "v"].iter().enumerate() {
            assert_close(&got[k], want[k], 2e-5, &format!("{what} {name}"));
        }
        // The time step is incremented in place by the updater (bias correction only).
        let steps = if kind == Kind::AdamNoBias { 0.0 } else { 3.0 };
        assert_eq!(got[3], vec![steps], "{what} time step");
    }
}

#[test]
fn integer_time_step_and_float64() {
    // An int32 step, float64 tensors: one Adam step from m = 0.1, v = 0.01.
    let out = run_steps(2, || {
        let m = popxl::variable_as(vec![0.1, -0.2], popxl::float64, "m")?;
        let v = popxl::variable_as(vec![0.01, 0.04], popxl::float64, "v")?;
        let t = popxl::variable(0i32, "t")?;
        let opts = AdamUpdaterOptions {
            time_step: Some(&t),
            beta1: Some(B1.into()),
            beta2: Some(B2.into()),
            ..Default::default()
        };
        let x = ops::adam_updater(&m, &v, opts)?;
        let out = popxl::variable_as(vec![0.0, 0.0], popxl::float64, "out")?;
        ops::copy_var_update_(&out, &x)?;
        Ok(vec![out, t])
    });
    // Second run: t = 2.
    let want: Vec<f64> = [(0.1, 0.01), (-0.2, 0.04)]
        .iter()
        .map(|&(m, v): &(f64, f64)| (m / (1.0 - B1.powi(2))) / ((v / (1.0 - B2.powi(2))).sqrt() + 1e-7))
        .collect();
    assert_close(&out[0], &want, 1e-12, "float64 adam updater");
    assert_eq!(out[1], vec![2.0]);
}

fn main_graph_error(build: impl FnOnce() -> popxl::Result<Tensor>) -> PopXlError {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    build().expect_err("must fail")
}

fn is_inference_error(e: &PopXlError) -> bool {
    matches!(e, PopXlError::Ir(popart_ir::IrError::Inference { .. }))
}

#[test]
fn typed_errors() {
    let f2 = || popxl::variable(vec![0.0f32; 2], "t");
    let f3 = || popxl::constant(vec![0.0f32; 3], "x");
    // Shape mismatch.
    let e = main_graph_error(|| ops::accumulate_moving_average_(&f2()?, &f3()?, 0.9));
    assert!(is_inference_error(&e), "{e}");
    // Non-float accumulator for a float rule.
    let e = main_graph_error(|| {
        let t = popxl::variable(vec![1i32, 2], "t")?;
        ops::accumulate_square_(&t, &popxl::constant(vec![1i32, 2], "x")?, 1.0)
    });
    assert!(is_inference_error(&e) && e.to_string().contains("dampened_add_square"), "{e}");
    // An update of another type is cast to the accumulator's, as PopART's
    // `AccumulateOpx` does (float64 += float16 builds a `Cast` first).
    {
        let ir = Ir::new();
        let _g = ir.main_graph().enter();
        let t = popxl::variable_as(vec![1.0, 2.0], popxl::float64, "t").unwrap();
        let x = popxl::constant_as(vec![1.0, 2.0], popxl::float16, "x").unwrap();
        ops::accumulate_(&t, &x, 1.0).unwrap();
        assert_eq!(ir.main_graph().num_ops().unwrap(), 2, "Cast and Accumulate");
    }
    // The IR op itself still refuses mixed types other than float16 with float32.
    let e = main_graph_error(|| {
        let t = popxl::variable_as(vec![1.0, 2.0], popxl::float64, "t")?;
        let x = popxl::constant_as(vec![1.0, 2.0], popxl::float16, "x")?;
        OpBuilder::new("accumulate", &Accumulate).input(0, &t).input(1, &x).create1()
    });
    assert!(is_inference_error(&e), "{e}");
    // A non-scalar factor; an integer accumulator scaled by a non-zero factor.
    let e = main_graph_error(|| ops::accumulate_(&f2()?, &f2()?, &f2()?));
    assert!(is_inference_error(&e), "{e}");
    let e = main_graph_error(|| ops::accumulator_scale_(&popxl::variable(vec![1i32], "t")?, 2.0));
    assert!(is_inference_error(&e), "{e}");
    // Sparse: update of the wrong shape, float indices.
    let e = main_graph_error(|| {
        let idx = popxl::constant(vec![0i32, 1, 1], "i")?;
        ops::sparse_accumulate_(&f2()?, &f2()?, &idx, Default::default())
    });
    assert!(is_inference_error(&e), "{e}");
    let e = main_graph_error(|| {
        let idx = popxl::constant(vec![0.0f32, 1.0], "i")?;
        ops::sparse_accumulate_(&f2()?, &f2()?, &idx, Default::default())
    });
    assert!(is_inference_error(&e), "{e}");
    // PopXL's ValueErrors.
    let invalid = |e: PopXlError, msg: &str| {
        assert!(matches!(&e, PopXlError::IncompatibleOptions { reason, .. } if reason.contains(msg)), "{e}");
    };
    let e = main_graph_error(|| {
        let opts = AdamUpdaterOptions { weight_decay: Some(0.1.into()), ..Default::default() };
        ops::adam_updater(&f2()?, &f2()?, opts)
    });
    invalid(e, "Weight decay requires weight");
    let e = main_graph_error(|| {
        let t = popxl::variable(0.0f32, "step")?;
        let opts = AdamUpdaterOptions { time_step: Some(&t), beta1: Some(0.9.into()), ..Default::default() };
        ops::lamb_updater(&f2()?, &f2()?, opts)
    });
    invalid(e, "Bias correction requires both beta1 and beta2");
    let e = main_graph_error(|| ops::adamax_updater(&f2()?, &f2()?, Default::default()));
    invalid(e, "AdaMax requires time_step");
    let e = main_graph_error(|| {
        let r = popxl::constant(1.0f32, "r")?;
        ops::adam_var_update(&f2()?, &f2()?, Some(&r), None, 0.1, None)
    });
    invalid(e, "r1 and r2");
    // Moments of different shapes; a float16 time step; an updater of the wrong shape.
    let e = main_graph_error(|| ops::adam_updater(&f2()?, &f3()?, Default::default()));
    assert!(is_inference_error(&e), "{e}");
    let e = main_graph_error(|| {
        let t = popxl::variable_as(0.0, popxl::float16, "step")?;
        let opts = AdamUpdaterOptions {
            time_step: Some(&t),
            beta1: Some(0.9.into()),
            beta2: Some(0.99.into()),
            ..Default::default()
        };
        ops::adam_updater(&f2()?, &f2()?, opts)
    });
    assert!(is_inference_error(&e), "{e}");
    let e = main_graph_error(|| ops::adam_var_update(&f2()?, &f3()?, None, None, 0.1, None));
    assert!(is_inference_error(&e), "{e}");
    // Updates of constants are refused.
    let e = main_graph_error(|| ops::accumulator_zero_(&popxl::constant(vec![1.0f32], "c")?));
    assert!(matches!(e, PopXlError::Ir(_)), "{e}");
}
