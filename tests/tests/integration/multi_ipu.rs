//! Multiple IPUs per replica (issue 18, item 5): `ipu(n)` placement and
//! `ipu_copy` between IPUs run correctly (on `cpu` and `ipu_model` as copies),
//! gradients flow back through `ipu_copy`, the number of IPUs is PopXL's
//! `2^ceil(log2((max ipu + 1) * replication_factor))`, and the `ipu_model`
//! reports memory per IPU. Expected values are computed here in plain Rust.

use crate::support::forward_backward;

use forward_backward::run_with_grads;
use ndarray::{Array1, Array2};
use popart_ir::ops::all::{ExpGrad, IpuCopy, TanhGrad};
use popart_ir::IrError;
use popxl::{ops, HostArray, Ir, PopXlError, Tensor};
use popxl_session::{Inputs, IpuModelConfig, Session, SessionError, SessionOptions};
use tests::assert_close;

const X: [[f32; 3]; 2] = [[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]];
const W0: [[f32; 4]; 3] = [[0.5, -0.25, 1.0, 0.75], [-0.5, 0.5, 0.25, -1.0], [0.25, 0.75, -0.5, 0.5]];
const W1: [[f32; 2]; 4] = [[1.0, -0.5], [0.5, 0.25], [-0.75, 1.0], [0.25, 0.5]];

fn array<const R: usize, const C: usize>(m: &[[f32; C]; R]) -> Array2<f32> {
    Array2::from_shape_fn((R, C), |(i, j)| m[i][j])
}

/// `relu(x @ w0) @ w1` in f64, row-major `[2, 2]`.
fn reference(x: &[f64], w0: &[f64], w1: &[f64]) -> Vec<f64> {
    let mut y = vec![0.0; 4];
    for r in 0..2 {
        let h: Vec<f64> = (0..4).map(|k| (0..3).map(|i| x[r * 3 + i] * w0[i * 4 + k]).sum::<f64>().max(0.0)).collect();
        for c in 0..2 {
            y[r * 2 + c] = (0..4).map(|k| h[k] * w1[k * 2 + c]).sum();
        }
    }
    y
}

fn flat<const R: usize, const C: usize>(m: &[[f32; C]; R]) -> Vec<f64> {
    m.iter().flatten().map(|&v| f64::from(v)).collect()
}

/// The two-layer model: `relu(x @ w0)` then `@ w1`. Split: the first layer on
/// IPU 0, its output copied to IPU 1, the second layer on IPU 1.
fn two_layers(t: &[Tensor], split: bool) -> popxl::Result<Tensor> {
    let h = {
        let _p = split.then(|| popxl::ipu(0));
        ops::relu(&t[0].matmul(&t[1])?)?
    };
    let h = if split { ops::ipu_copy(&h, 1, None)? } else { h };
    let _p = split.then(|| popxl::ipu(1));
    h.matmul(&t[2])
}

/// The two-layer model in the main graph with variables, and its output stream.
fn pipeline(split: bool) -> (Ir, popxl::DeviceToHostStream) {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let x = popxl::variable(array(&X), "x").unwrap();
    let w0 = popxl::variable(array(&W0), "w0").unwrap();
    let w1 = popxl::variable(array(&W1), "w1").unwrap();
    let y = two_layers(&[x, w0, w1], split).unwrap();
    let out = popxl::d2h_stream(y.shape(), y.dtype(), "y").unwrap();
    ops::host_store(&out, &y).unwrap();
    drop(g);
    (ir, out)
}

fn run_on(ir: Ir, device: &str, out: &popxl::DeviceToHostStream) -> Vec<f64> {
    let mut session = Session::new(ir, device).unwrap();
    let result = session.scope(|s| s.run(&Inputs::new())).unwrap();
    result[out].to_f64_vec()
}

#[test]
fn a_two_ipu_pipeline_gives_the_one_ipu_and_hand_computed_outputs() {
    let want = reference(&flat(&X), &flat(&W0), &flat(&W1));
    let (one, out_one) = pipeline(false);
    let single = run_on(one, "cpu", &out_one);
    assert_close(&single, &want, 1e-6, "one IPU");
    for device in ["cpu", "ipu_model"] {
        let (two, out_two) = pipeline(true);
        assert_eq!(two.num_ipus().unwrap(), 2);
        let text = two.to_text();
        assert!(text.contains("IpuCopy {destination=1, source=0}"), "{text}");
        assert_eq!(run_on(two, device, &out_two), single, "split on {device}");
    }
}

#[test]
fn ipu_copy_places_its_output_on_the_destination_whatever_the_context() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    let y = {
        let _p = popxl::ipu(2);
        ops::exp(&x).unwrap()
    };
    let (y3, x1) = {
        let _p = popxl::ipu(0);
        (y.copy_to_ipu(3, None).unwrap(), ops::ipu_copy(&x, 1, Some(2)).unwrap())
    };
    assert_eq!((y.ipu().unwrap(), y3.ipu().unwrap(), x1.ipu().unwrap()), (2, 3, 1));
    assert_eq!(y3.name(), "Exp:0_c3");
    assert_eq!((y3.shape(), y3.dtype()), (y.shape(), y.dtype()));
    // Both copies run on their destinations, not in the `ipu(0)` context.
    ir.with_ir(|core| {
        let copies: Vec<_> = core.main_graph().ops().filter(|o| o.is::<IpuCopy>()).collect();
        assert_eq!(copies.len(), 2);
        for op in copies {
            assert_eq!(op.placement.ipu, op.output_ipu());
        }
    });
    // IPUs 0..=3 are used: four per replica.
    assert_eq!(ir.with_ir(|core| core.ipus_per_replica()), 4);
}

#[test]
fn gradients_flow_back_through_ipu_copy() {
    let inputs = || vec![HostArray::from(array(&X)), HostArray::from(array(&W0)), HostArray::from(array(&W1))];
    let gy = [[1.0f32, -2.0], [0.5, 3.0]];
    let split = run_with_grads(&|t| two_layers(t, true), inputs(), Some(HostArray::from(array(&gy))));
    let unsplit = run_with_grads(&|t| two_layers(t, false), inputs(), Some(HostArray::from(array(&gy))));
    assert_eq!(split, unsplit, "the split program's output and gradients");

    // Central finite differences of sum(gy · y) in f64.
    let gy = flat(&gy);
    let loss = |v: &[Vec<f64>]| -> f64 { reference(&v[0], &v[1], &v[2]).iter().zip(&gy).map(|(y, g)| y * g).sum() };
    let base = vec![flat(&X), flat(&W0), flat(&W1)];
    let eps = 1e-6;
    for (input, got) in split[1..].iter().enumerate() {
        let fd: Vec<f64> = (0..base[input].len())
            .map(|i| {
                let (mut plus, mut minus) = (base.clone(), base.clone());
                plus[input][i] += eps;
                minus[input][i] -= eps;
                (loss(&plus) - loss(&minus)) / (2.0 * eps)
            })
            .collect();
        assert_close(got, &fd, 1e-4, &format!("gradient of input {input}"));
    }
}

#[test]
fn the_gradient_of_an_ipu_copy_copies_back_to_the_source() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    let graph = ir
        .create_graph(
            |x: Tensor| -> popxl::Result<Tensor> {
                let h = {
                    let _p = popxl::ipu(0);
                    ops::exp(&x)?
                };
                let _p = popxl::ipu(1);
                ops::tanh(&ops::ipu_copy(&h, 1, None)?)
            },
            &x,
        )
        .unwrap();
    let grad = popxl::transforms::autodiff(&graph, None, None, &Default::default(), false).unwrap().grad_info;
    let name = grad.graph().name().to_string();
    ir.with_ir(|core| {
        let g = core.graph_by_name(&name).unwrap();
        let back: Vec<_> = g.ops().filter(|o| o.is::<IpuCopy>()).collect();
        assert_eq!(back.len(), 1, "one copy back");
        assert_eq!((back[0].input_ipu(), back[0].output_ipu(), back[0].placement.ipu), (Some(1), Some(0), Some(0)));
        // The other gradient ops run where their forward ops ran.
        let grad_ipus: Vec<Option<u32>> =
            g.ops().filter(|o| o.is::<ExpGrad>() || o.is::<TanhGrad>()).map(|o| o.placement.ipu).collect();
        assert_eq!(grad_ipus.len(), 2);
        assert!(grad_ipus.contains(&Some(0)) && grad_ipus.contains(&Some(1)), "{grad_ipus:?}");
        core.verify().unwrap();
    });
}

/// The smallest power of two at least `n`, by doubling.
fn power_of_two_at_least(n: u64) -> u64 {
    let mut p = 1;
    while p < n {
        p *= 2;
    }
    p
}

#[test]
fn num_ipus_is_popxls_power_of_two() {
    for (max_ipu, rf, want) in
        [(2, 1, 4), (1, 2, 4), (0, 3, 4), (0, 1, 1), (1, 1, 2), (3, 1, 4), (3, 3, 16), (2, 8, 32)]
    {
        let ir = Ir::new();
        {
            let _g = ir.main_graph().enter();
            let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
            let _p = popxl::ipu(max_ipu);
            ops::relu(&x).unwrap();
        }
        ir.set_replication_factor(rf).unwrap();
        assert_eq!(ir.num_ipus().unwrap(), want, "max ipu {max_ipu}, replication factor {rf}");
    }
    for max_ipu in 0..=3u32 {
        for rf in 1..=8usize {
            let ir = Ir::new();
            {
                let _g = ir.main_graph().enter();
                let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
                // An unplaced op counts as IPU 0; a copy counts both ends.
                let y = ops::exp(&x).unwrap();
                if max_ipu > 0 {
                    ops::ipu_copy(&y, max_ipu, Some(0)).unwrap();
                }
            }
            ir.set_replication_factor(rf).unwrap();
            let want = power_of_two_at_least(u64::from(max_ipu + 1) * rf as u64);
            assert_eq!(ir.num_ipus().unwrap(), want, "max ipu {max_ipu}, replication factor {rf}");
        }
    }
    // An empty IR: one IPU per replica.
    let ir = Ir::new();
    ir.set_replication_factor(5).unwrap();
    assert_eq!(ir.num_ipus().unwrap(), 8);
}

#[test]
fn num_ipus_overflow_is_a_typed_error() {
    let mut core = popart_ir::Ir::new();
    core.replication_factor = 1 << 40;
    assert_eq!(core.num_ipus().unwrap(), 1 << 40);
    // One IPU per replica, 2^64 - 1 replicas: the power of two overflows.
    core.replication_factor = usize::MAX;
    let too_many = IrError::TooManyIpus { ipus_per_replica: 1, replication_factor: usize::MAX };
    assert_eq!(core.num_ipus().unwrap_err(), too_many);
    core.replication_factor = 0;
    assert_eq!(core.num_ipus().unwrap_err(), IrError::ZeroSetting { setting: "replication_factor" });

    // Through popxl: two IPUs per replica times 2^63 replicas overflows the product.
    let ir = Ir::new();
    {
        let _g = ir.main_graph().enter();
        let x = popxl::variable(vec![1.0f32], "x").unwrap();
        let _p = popxl::ipu(1);
        ops::relu(&x).unwrap();
    }
    ir.set_replication_factor(1 << 63).unwrap();
    let err = ir.num_ipus().unwrap_err();
    assert!(
        matches!(err, PopXlError::Ir(IrError::TooManyIpus { ipus_per_replica: 2, replication_factor }) if replication_factor == 1 << 63),
        "{err}"
    );
    assert!(err.to_string().contains("2 IPUs per replica"), "{err}");
}

#[test]
fn ipu_copy_with_an_uninferable_source_is_a_typed_error() {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(vec![1.0f32, 2.0], "x").unwrap();
    // No op uses `x`.
    let err = ops::ipu_copy(&x, 1, None).unwrap_err();
    assert_eq!(err, PopXlError::IpuCopySourceUnknown { tensor: "x".to_string() });
    let message = err.to_string();
    assert!(message.contains("`x`") && message.contains("specify `source`"), "{message}");
    // Produced outside any `ipu(n)` context: still unknown.
    let y = ops::relu(&x).unwrap();
    assert!(
        matches!(y.copy_to_ipu(1, None), Err(PopXlError::IpuCopySourceUnknown { ref tensor }) if tensor == "Relu:0")
    );
    // Nothing was created by the refused calls; a given source works.
    ir.with_ir(|core| assert_eq!(core.main_graph().ops().count(), 1));
    assert_eq!(ops::ipu_copy(&x, 1, Some(0)).unwrap().ipu().unwrap(), 1);
}

#[test]
fn ipu_copy_attributes_are_checked_and_round_trip_through_the_text_form() {
    let (ir, _) = pipeline(true);
    let text = ir.to_text();
    let parsed = popart_ir::text::parse(&text).unwrap();
    assert_eq!(popart_ir::text::to_text(&parsed), text, "round trip");
    let original = ir.with_ir(|core| core.clone());
    assert_eq!(popart_ir::text::structural_diff(&original, &parsed), None);
    let copy = parsed.main_graph().ops().find(|o| o.is::<IpuCopy>()).unwrap();
    assert_eq!((copy.input_ipu(), copy.output_ipu(), copy.placement.ipu), (Some(0), Some(1), Some(1)));
    parsed.verify().unwrap();

    // A negative IPU, a missing attribute, and a copy placed off its destination.
    let negative = text.replace("destination=1", "destination=-1");
    assert!(matches!(popart_ir::text::parse(&negative), Err(IrError::Parse { .. } | IrError::Inference { .. })));
    let missing = text.replace("destination=1, ", "");
    let err = popart_ir::text::parse(&missing).unwrap_err();
    assert!(err.to_string().contains("destination"), "{err}");
    let misplaced = popart_ir::text::parse(&text.replace("place[ipu=1]", "place[ipu=0]"));
    let err = misplaced.and_then(|ir| ir.verify()).unwrap_err();
    assert!(err.to_string().contains("copies to IPU 1 but is placed on IPU 0"), "{err}");
}

/// A small IPU: `tiles` tiles of `kib` KiB, otherwise Mk2 figures.
fn small_ipu(tiles: u32, kib: u64) -> IpuModelConfig {
    IpuModelConfig { name: "small".to_string(), tiles, tile_memory_bytes: kib * 1024, ..IpuModelConfig::mk2() }
}

/// Two equal halves, each a [rows, rows] float32 weight and a matmul of the
/// activation `x [1, rows]`; split puts each half (weight included) on its own
/// IPU with an `ipu_copy` between them.
fn halves(rows: usize, split: bool) -> Ir {
    let ir = Ir::new();
    let g = ir.main_graph().enter();
    let x = popxl::variable(Array2::<f32>::from_elem((1, rows), 0.5), "x").unwrap();
    let w0 = popxl::variable(Array2::<f32>::from_elem((rows, rows), 0.25), "w0").unwrap();
    let w1 = popxl::variable(Array2::<f32>::from_elem((rows, rows), 0.25), "w1").unwrap();
    let h = {
        let _p = split.then(|| popxl::ipu(0));
        ops::relu(&x.matmul(&w0).unwrap()).unwrap()
    };
    let h = if split { ops::ipu_copy(&h, 1, None).unwrap() } else { h };
    let y = {
        let _p = split.then(|| popxl::ipu(1));
        ops::relu(&h.matmul(&w1).unwrap()).unwrap()
    };
    let out = popxl::d2h_stream(y.shape(), y.dtype(), "y").unwrap();
    ops::host_store(&out, &y).unwrap();
    drop(g);
    ir
}

#[test]
fn ipu_model_reports_memory_per_ipu() {
    let (rows, tiles) = (512, 16);
    let config = small_ipu(tiles, 624);
    let options = || SessionOptions { ipu_model: config.clone(), ..SessionOptions::default() };
    let one = Session::with_options(halves(rows, false), "ipu_model", options()).unwrap();
    let two = Session::with_options(halves(rows, true), "ipu_model", options()).unwrap();
    let (r1, r2) = (one.ipu_model_report().unwrap(), two.ipu_model_report().unwrap());
    assert_eq!(r1.memory.ipu_peaks, vec![r1.memory.peak], "one IPU: its peak is the peak");
    assert_eq!(r2.memory.ipu_peaks.len(), 2);

    // Each weight is rows² float32s spread over the tiles of its IPU.
    let weight_per_tile = (rows * rows * 4) as u64 / u64::from(tiles);
    assert!(r1.memory.peak.max_tile_bytes >= 2 * weight_per_tile, "{r1}");
    for (ipu, p) in r2.memory.ipu_peaks.iter().enumerate() {
        assert_eq!(p.ipu as usize, ipu);
        assert!(p.max_tile_bytes >= weight_per_tile, "{r2}");
        assert!(p.max_tile_bytes < 2 * weight_per_tile, "{r2}");
        assert!(p.tensor_bytes >= (rows * rows * 4) as u64 && p.tensor_bytes < (2 * rows * rows * 4) as u64, "{r2}");
        // About half of the one-IPU peak (code is on both IPUs).
        let ratio = p.max_tile_bytes as f64 / r1.memory.peak.max_tile_bytes as f64;
        assert!((0.45..0.6).contains(&ratio), "IPU {ipu}: ratio {ratio}\n{r1}\n{r2}");
    }
    let peak_of_peaks = r2.memory.ipu_peaks.iter().map(|p| p.max_tile_bytes).max().unwrap();
    assert_eq!(r2.memory.peak.max_tile_bytes, peak_of_peaks);

    // Buffers lie on the IPU of their producer, variables on their consumer's.
    let exe = two.executable();
    let ipu_of = |name: &str| exe.buffers.iter().find(|b| b.tensors.iter().any(|t| t.name == name)).unwrap().ipu;
    assert_eq!((ipu_of("main/w0"), ipu_of("main/w1"), ipu_of("main/x")), (0, 1, 0));
    assert_eq!(ipu_of("main/Relu:0_c1"), 1);
    assert!(exe.to_string().contains(" ipu1: main/w1"), "{exe}");

    // The table has one line per IPU when there are several.
    let (t1, t2) = (r1.to_string(), r2.to_string());
    assert!(!t1.contains("  ipu 0:"), "{t1}");
    assert!(t2.contains("  ipu 0: peak tile") && t2.contains("  ipu 1: peak tile"), "{t2}");
    println!("{t2}");
}

#[test]
fn a_model_too_big_for_one_ipu_fits_on_two() {
    // 4 tiles of 16 KiB per IPU; each weight is 32 KiB (8 KiB per tile).
    let (rows, config) = (90, small_ipu(4, 16));
    let options = || SessionOptions { ipu_model: config.clone(), ..SessionOptions::default() };
    let err = Session::with_options(halves(rows, false), "ipu_model", options()).unwrap_err();
    let SessionError::TileMemoryExceeded(oom) = &err else { panic!("expected TileMemoryExceeded, got {err}") };
    assert_eq!((oom.ipus, oom.ipu), (1, 0));
    assert!(!err.to_string().contains("IPU 0 tile"), "{err}");

    let two = Session::with_options(halves(rows, true), "ipu_model", options()).unwrap();
    let report = two.ipu_model_report().unwrap();
    assert!(report.memory.fits(), "{report}");
    assert!(report.memory.ipu_peaks.iter().all(|p| p.max_tile_bytes <= config.tile_memory_bytes));

    // With four times the weights the split program fails too, naming the IPU.
    let err = Session::with_options(halves(2 * rows, true), "ipu_model", options()).unwrap_err();
    let SessionError::TileMemoryExceeded(oom) = &err else { panic!("expected TileMemoryExceeded, got {err}") };
    assert_eq!(oom.ipus, 2);
    assert!(err.to_string().contains(&format!("IPU {} tile", oom.ipu)), "{err}");
    assert!(oom.tensors.iter().any(|t| t.ipu == oom.ipu && t.peak_tile_bytes > 0), "{err}");
}

#[test]
fn the_ipu_model_refuses_absurd_ipu_numbers() {
    let ir = Ir::new();
    {
        let _g = ir.main_graph().enter();
        let x = popxl::variable(Array1::<f32>::zeros(4), "x").unwrap();
        let _p = popxl::ipu(1 << 20);
        let y = ops::relu(&x).unwrap();
        let out = popxl::d2h_stream([4], popxl::float32, "y").unwrap();
        ops::host_store(&out, &y).unwrap();
    }
    let err = Session::new(ir, "ipu_model").unwrap_err();
    assert!(err.to_string().contains("at most 1024 IPUs"), "{err}");
}
