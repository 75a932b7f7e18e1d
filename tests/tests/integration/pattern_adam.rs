//! The `fuse_adam` pattern on PopXL's Adam, written as PopXL programs write it
//! (`accumulate_moving_average_`, `accumulate_moving_average_square_`,
//! `adam_updater`, `scaled_add_`), gradients streamed from the host. Checked
//! against the same steps computed here in f64, against a session with patterns
//! off (bit for bit: weights, both moments and the step), and where the pattern
//! must not apply (a moment read by another op; a hyper-parameter given as a
//! tensor).

use std::collections::HashMap;

use popxl::ops::{self, AdamUpdaterOptions, Scalar};
use popxl::{HostArray, Ir, Tensor};
use popxl_session::{Session, SessionOptions};

const N: usize = 37;
const LR: f64 = 0.05;
const B1: f64 = 0.9;
const B2: f64 = 0.999;
const EPS: f64 = 1e-8;

/// How one weight's Adam is written.
#[derive(Clone, Copy, PartialEq, Debug)]
struct Variant {
    /// `AdamMode::Adam` with a time step (else no bias correction).
    bias: bool,
    /// Weight decay in the updater.
    wd: f64,
    /// The weight's own scale in `scaled_add_` (decoupled decay when below 1).
    a: f64,
    /// float64 tensors (else float32).
    f64: bool,
    /// The first moment is also stored to the host after its update.
    read_m: bool,
    /// beta1 given as a tensor.
    beta1_tensor: bool,
}

const PLAIN: Variant = Variant { bias: true, wd: 0.0, a: 1.0, f64: false, read_m: false, beta1_tensor: false };

struct Program {
    ir: Ir,
    g: popxl::HostToDeviceStream,
    m_seen: popxl::DeviceToHostStream,
    w: Tensor,
    m: Tensor,
    v: Tensor,
    t: Tensor,
}

fn w0(i: usize) -> f64 {
    0.3 * ((i * 7 % 11) as f64 / 11.0 - 0.5)
}

fn grad(step: usize, i: usize) -> f64 {
    (((step * 31 + i * 17) % 23) as f64 / 23.0 - 0.4) * if i.is_multiple_of(3) { 1e-3 } else { 1.0 }
}

fn build(var: Variant) -> Program {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let dt = if var.f64 { popxl::float64 } else { popxl::float32 };
    let g_s = popxl::h2d_stream([N], dt, "g").unwrap();
    let m_seen = popxl::d2h_stream([N], dt, "m_seen").unwrap();
    let g = ops::host_load(&g_s, "g").unwrap();
    let var_of = |v: Vec<f64>, name: &str| {
        let a = HostArray::from(ndarray::ArrayD::from_shape_vec(vec![N], v).unwrap());
        popxl::variable_as(a, dt, name).unwrap()
    };
    let w = var_of((0..N).map(w0).collect(), "w");
    let m = var_of(vec![0.0; N], "w.m");
    let v = var_of(vec![0.0; N], "w.v");
    let t = popxl::variable(0.0f32, "w.t").unwrap();
    let b1_t = popxl::constant(B1 as f32, "beta1").unwrap();
    let m2 = ops::accumulate_moving_average_(&m, &g, B1).unwrap();
    let v2 = ops::accumulate_moving_average_square_(&v, &g, B2).unwrap();
    let opts = AdamUpdaterOptions {
        weight: (var.wd != 0.0).then_some(&w),
        weight_decay: (var.wd != 0.0).then_some(Scalar::Const(var.wd)),
        time_step: var.bias.then_some(&t),
        beta1: var.bias.then_some(if var.beta1_tensor { Scalar::Tensor(&b1_t) } else { Scalar::Const(B1) }),
        beta2: var.bias.then_some(Scalar::Const(B2)),
        epsilon: Scalar::Const(EPS),
    };
    let u = ops::adam_updater(&m2, &v2, opts).unwrap();
    if var.read_m {
        ops::host_store(&m_seen, &m2).unwrap();
    }
    ops::scaled_add_(&w, &u, var.a, -LR).unwrap();
    Program { ir: ir.clone(), g: g_s, m_seen, w, m, v, t }
}

fn values(a: &HostArray) -> Vec<f64> {
    a.to_f64_vec()
}

/// Weights, moments, step after `steps` steps, and whether `AdamStep` ran.
struct Trace {
    w: Vec<f64>,
    m: Vec<f64>,
    v: Vec<f64>,
    t: Vec<f64>,
    fused: usize,
    unfused_updaters: usize,
}

fn train(p: &Program, var: Variant, patterns: bool, steps: usize) -> Trace {
    let options = SessionOptions { patterns, ..SessionOptions::default() };
    let mut session = Session::with_options(p.ir.clone(), "cpu", options).unwrap();
    let count = |ty: &str| session.prepared_ir().graphs().flat_map(|g| g.ops()).filter(|o| o.op_type() == ty).count();
    let (fused, unfused_updaters) = (count("AdamStep"), count("AdamUpdater"));
    session
        .scope(|s| -> popxl_session::Result<()> {
            for step in 0..steps {
                let g: Vec<f64> = (0..N).map(|i| grad(step, i)).collect();
                let mut g = HostArray::from(ndarray::ArrayD::from_shape_vec(vec![N], g).unwrap());
                if !var.f64 {
                    g = g.cast(popxl::float32);
                }
                s.run(&HashMap::from([(p.g.clone(), g)]))?;
            }
            Ok(())
        })
        .unwrap();
    let mut get = |t: &Tensor| values(&session.get_tensor_data(t).unwrap());
    Trace { w: get(&p.w), m: get(&p.m), v: get(&p.v), t: get(&p.t), fused, unfused_updaters }
}

/// The same steps in f64, from the formulas of PopART's Adam.
fn reference(var: Variant, steps: usize) -> Vec<f64> {
    let mut w: Vec<f64> = (0..N).map(w0).collect();
    let (mut m, mut v) = (vec![0.0; N], vec![0.0; N]);
    for step in 0..steps {
        let t = (step + 1) as f64;
        let (c1, c2) = if var.bias { (1.0 - B1.powf(t), 1.0 - B2.powf(t)) } else { (1.0, 1.0) };
        for i in 0..N {
            let g = grad(step, i);
            m[i] = B1 * m[i] + (1.0 - B1) * g;
            v[i] = B2 * v[i] + (1.0 - B2) * g * g;
            let u = (m[i] / c1) / ((v[i] / c2).sqrt() + EPS) + var.wd * w[i];
            w[i] = var.a * w[i] - LR * u;
        }
    }
    w
}

fn check(var: Variant, expect_fused: bool) {
    let steps = 4;
    let p = build(var);
    let fused = train(&p, var, true, steps);
    let plain = train(&p, var, false, steps);
    let want = (usize::from(expect_fused), usize::from(!expect_fused));
    assert_eq!((fused.fused, fused.unfused_updaters), want, "{var:?}");
    assert_eq!((plain.fused, plain.unfused_updaters), (0, 1), "{var:?}");
    // Bit for bit the values of the four ops.
    assert_eq!(fused.w, plain.w, "{var:?}: weights");
    assert_eq!(fused.m, plain.m, "{var:?}: first moments");
    assert_eq!(fused.v, plain.v, "{var:?}: second moments");
    assert_eq!(fused.t, plain.t, "{var:?}: step");
    assert_eq!(fused.t, vec![if var.bias { steps as f64 } else { 0.0 }]);
    let tol = if var.f64 { 1e-12 } else { 2e-6 };
    for (i, (got, want)) in fused.w.iter().zip(reference(var, steps)).enumerate() {
        assert!((got - want).abs() <= tol * (1.0 + want.abs()), "{var:?}: w[{i}] {got} against {want}");
    }
}

#[test]
fn adam_with_bias_correction_is_one_op() {
    check(PLAIN, true);
}

#[test]
fn adam_variants_are_one_op() {
    check(Variant { bias: false, ..PLAIN }, true);
    check(Variant { wd: 0.01, ..PLAIN }, true);
    check(Variant { a: 0.999, ..PLAIN }, true);
    check(Variant { f64: true, wd: 0.01, ..PLAIN }, true);
}

#[test]
fn adam_is_left_alone_where_the_fusion_would_show() {
    // The updated first moment is read by another op.
    check(Variant { read_m: true, ..PLAIN }, false);
    // A hyper-parameter given as a tensor.
    check(Variant { beta1_tensor: true, ..PLAIN }, false);
}

#[test]
fn the_moment_read_by_another_op_is_the_updated_one() {
    let var = Variant { read_m: true, ..PLAIN };
    let p = build(var);
    let mut session = Session::with_options(p.ir.clone(), "cpu", SessionOptions::default()).unwrap();
    let g: Vec<f64> = (0..N).map(|i| grad(0, i)).collect();
    let g = HostArray::from(ndarray::ArrayD::from_shape_vec(vec![N], g.clone()).unwrap());
    let out = session.scope(|s| s.run(&HashMap::from([(p.g.clone(), g.cast(popxl::float32))]))).unwrap();
    let seen = values(&out[&p.m_seen]);
    for (i, s) in seen.iter().enumerate() {
        let want = (1.0 - B1) * grad(0, i);
        assert!((s - want).abs() < 1e-7, "m[{i}] {s} against {want}");
    }
}
