//! Issue 16's `--scan-layers`: the `gpt` example's model (its own `model.rs` and
//! `scan.rs`) with its blocks as one `repeat` over stacked weights, trained
//! through autodiff of `repeat`, gives the losses of the unrolled model (one call
//! per layer) to 1e-5 relative, and both give JAX's six losses to 1e-4 relative
//! (fixture in `tests/fixtures/gpt-reference`).

#[path = "../../../popxl-session/examples/gpt/model.rs"]
#[allow(dead_code)]
mod model;
#[path = "../../../popxl-session/examples/gpt/scan.rs"]
mod scan;

use std::collections::HashMap;
use std::fs::File;

use ndarray::{Array2, ArrayD};
use ndarray_npy::NpzReader;
use popxl::{ops, HostArray, Ir, Tensor};
use popxl_session::{Inputs, Session};

/// The generator `model::init_params` expects of its crate (unused here: the
/// weights come from the fixture).
#[allow(dead_code)]
pub struct Rng(u64);

#[allow(dead_code)]
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn normal(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let u = ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        (-2.0 * u.ln()).sqrt()
    }
}
use model::Shape;

const SHAPE: Shape = Shape { layers: 2, heads: 2, width: 64, seq: 32, batch: 4, vocab: 65, fused_attention: true };

/// Six Adam steps from `init` on `batches` on `cpu`; returns the losses and the kernel calls of the step.
fn train(init: &[(String, HostArray)], batches: &[(Array2<i32>, Array2<i32>)], scan_layers: bool) -> (Vec<f64>, usize) {
    train_on(init, batches, scan_layers, model::Adam { lr: 1e-3, offload: false }, "cpu")
}

/// [`train`] with optimizer `opt`, on `device`.
fn train_on(
    init: &[(String, HostArray)],
    batches: &[(Array2<i32>, Array2<i32>)],
    scan_layers: bool,
    opt: model::Adam,
    device: &str,
) -> (Vec<f64>, usize) {
    let s = SHAPE;
    let ir = Ir::new();
    let (x_in, y_in, loss_out) = {
        let _g = ir.main_graph().enter();
        let _sq = popxl::in_sequence(true);
        let x_in = popxl::h2d_stream([s.batch, s.seq], popxl::int32, "tokens").unwrap();
        let y_in = popxl::h2d_stream([s.batch, s.seq], popxl::int32, "targets").unwrap();
        let weights = if scan_layers { scan::stack(&s, init).unwrap() } else { init.to_vec() };
        let p: HashMap<String, Tensor> =
            weights.iter().map(|(n, a)| (n.clone(), popxl::variable(a.clone(), n).unwrap())).collect();
        let graphs = model::trace(&ir, &s).unwrap();
        let tok = ops::host_load(&x_in, "x").unwrap();
        let tgt = ops::host_load(&y_in, "y").unwrap();
        let loss = if scan_layers {
            let layers = scan::trace_layers(&ir, &s).unwrap();
            scan::train_step(&graphs, &layers, &tok, &tgt, &p, opt).unwrap()
        } else {
            model::train_step(&graphs, &s, &tok, &tgt, &p, opt).unwrap()
        };
        let loss_out = popxl::d2h_stream([], popxl::float32, "loss").unwrap();
        ops::host_store(&loss_out, &loss).unwrap();
        (x_in, y_in, loss_out)
    };
    let mut session = Session::new(ir, device).unwrap();
    let kernels = session.executable().kernel_calls().len();
    let mut losses = Vec::new();
    session
        .scope(|sess| -> popxl_session::Result<()> {
            for (x, y) in batches {
                let mut inputs = Inputs::new();
                inputs.insert(x_in.clone(), HostArray::from(x.clone()));
                inputs.insert(y_in.clone(), HostArray::from(y.clone()));
                losses.push(sess.run(&inputs)?[&loss_out].to_f64_vec()[0]);
            }
            Ok(())
        })
        .unwrap();
    (losses, kernels)
}

/// The fixture's initial weights, six batches and JAX's losses.
#[allow(clippy::type_complexity)]
fn fixture() -> (Vec<(String, HostArray)>, Vec<(Array2<i32>, Array2<i32>)>, ndarray::Array1<f32>) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/gpt-reference/gpt_l2_h2_w64_t32_b4.npz");
    let mut npz = NpzReader::new(File::open(path).expect("fixture")).expect("npz");
    let init: Vec<(String, HostArray)> = model::param_names(SHAPE.layers)
        .into_iter()
        .map(|n| {
            let a: ArrayD<f32> = npz.by_name(&format!("p.{n}")).expect("weight");
            (n, HostArray::from(a))
        })
        .collect();
    let batches: Vec<(Array2<i32>, Array2<i32>)> = (0..6)
        .map(|s| (npz.by_name(&format!("x{s}")).expect("x"), npz.by_name(&format!("y{s}")).expect("y")))
        .collect();
    let want: ndarray::Array1<f32> = npz.by_name("losses").expect("losses");
    (init, batches, want)
}

/// Issue 17's `--offload-optimizer`: Adam's moments in remote buffers give the
/// same losses as resident moments (to 1e-6 relative), on `cpu` and `ipu_model`.
#[test]
fn offloaded_optimizer_state_trains_like_resident_state() {
    let (init, batches, _) = fixture();
    let resident = train(&init, &batches, false).0;
    for device in ["cpu", "ipu_model"] {
        let offloaded = train_on(&init, &batches, false, model::Adam { lr: 1e-3, offload: true }, device).0;
        eprintln!("{device}: resident {resident:?}\n{device}: offloaded {offloaded:?}");
        for (step, (r, o)) in resident.iter().zip(&offloaded).enumerate() {
            assert!((r - o).abs() <= 1e-6 * r.abs(), "{device} step {step}: resident {r}, offloaded {o}");
        }
    }
}

#[test]
fn scanned_layers_train_like_the_unrolled_model_and_jax() {
    let (init, batches, want) = fixture();
    let (unrolled, k_unrolled) = train(&init, &batches, false);
    let (scanned, k_scanned) = train(&init, &batches, true);
    eprintln!("unrolled {unrolled:?} ({k_unrolled} kernel calls)\nscanned  {scanned:?} ({k_scanned} kernel calls)");
    for (step, ((u, sc), &w)) in unrolled.iter().zip(&scanned).zip(want.iter()).enumerate() {
        let w = f64::from(w);
        assert!((u - sc).abs() <= 1e-5 * u.abs(), "step {step}: unrolled {u}, scanned {sc}");
        assert!((u - w).abs() <= 1e-4 * w.abs(), "step {step}: unrolled {u}, JAX {w}");
        assert!((sc - w).abs() <= 1e-4 * w.abs(), "step {step}: scanned {sc}, JAX {w}");
    }
    // The stacked weights round-trip to the per-layer ones.
    let back = scan::unstack(&SHAPE, &scan::stack(&SHAPE, &init).unwrap()).unwrap();
    assert_eq!(back, init);
}

/// Issue 18: the example's model on 2 data-parallel replicas of 2 sequences
/// (gradients averaged with `replicated_all_reduce` inside Adam) trains as one
/// replica of 4 sequences: the same losses (to 1e-5 relative) and weights.
#[test]
fn two_replicas_train_like_one_replica_of_the_global_batch() {
    let (init, batches, _) = fixture();
    let (one, _) = train(&init, &batches, false);
    let s = SHAPE;
    let replicas = 2;
    let per = Shape { batch: s.batch / replicas, ..s };
    let ir = Ir::new();
    ir.set_replication_factor(replicas).unwrap();
    let (x_in, y_in, loss_out) = {
        let _g = ir.main_graph().enter();
        let _sq = popxl::in_sequence(true);
        let x_in = popxl::h2d_stream([per.batch, per.seq], popxl::int32, "tokens").unwrap();
        let y_in = popxl::h2d_stream([per.batch, per.seq], popxl::int32, "targets").unwrap();
        let p: HashMap<String, Tensor> =
            init.iter().map(|(n, a)| (n.clone(), popxl::variable(a.clone(), n).unwrap())).collect();
        let graphs = model::trace(&ir, &per).unwrap();
        let tok = ops::host_load(&x_in, "x").unwrap();
        let tgt = ops::host_load(&y_in, "y").unwrap();
        let loss = model::train_step(&graphs, &per, &tok, &tgt, &p, model::Adam { lr: 1e-3, offload: false }).unwrap();
        let loss_out = popxl::d2h_stream([], popxl::float32, "loss").unwrap();
        ops::host_store(&loss_out, &loss).unwrap();
        (x_in, y_in, loss_out)
    };
    let mut session = Session::new(ir, "cpu").unwrap();
    let split = |a: &Array2<i32>| {
        HostArray::from(a.clone().into_shape_with_order((replicas, per.batch, per.seq)).unwrap().into_dyn())
    };
    let mut losses = Vec::new();
    session
        .scope(|sess| -> popxl_session::Result<()> {
            for (x, y) in &batches {
                let mut inputs = Inputs::new();
                inputs.insert(x_in.clone(), split(x));
                inputs.insert(y_in.clone(), split(y));
                let per_replica = sess.run(&inputs)?[&loss_out].to_f64_vec();
                assert_eq!(per_replica.len(), replicas);
                losses.push(per_replica.iter().sum::<f64>() / replicas as f64);
            }
            Ok(())
        })
        .unwrap();
    for (step, (a, b)) in losses.iter().zip(&one).enumerate() {
        assert!((a - b).abs() <= 1e-5 * b.abs(), "step {step}: 2 replicas {a}, 1 replica {b}");
    }
}
