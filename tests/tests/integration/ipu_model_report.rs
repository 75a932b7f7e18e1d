//! The `ipu_model` device's model of an IPU (issue 17, parts 3 and 4): tile
//! memory per program point with a typed out-of-memory error at
//! `Session::new`, code loading lowering the live code, the estimated timeline
//! with merged exchanges and IO-tile overlap, and `merge_exchange`.

use popart_lower::ipu_model::StepKind;
use popxl::{ops, HostArray, Ir, Tensor};
use popxl_session::{IpuModelConfig, Session, SessionError, SessionOptions};

/// A small IPU: 4 tiles of 16 KiB, otherwise Mk2 figures.
fn tiny_ipu() -> IpuModelConfig {
    IpuModelConfig { name: "tiny".to_string(), tiles: 4, tile_memory_bytes: 16 * 1024, ..IpuModelConfig::mk2() }
}

fn options(config: IpuModelConfig) -> SessionOptions {
    SessionOptions { ipu_model: config, ..SessionOptions::default() }
}

/// `y = w * 2 + x`, `w` a [128, 128] float32 variable (64 KiB), `x` streamed.
fn big_weight() -> (Ir, popxl::HostToDeviceStream, popxl::DeviceToHostStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let w = popxl::variable(ndarray::Array2::<f32>::from_elem((128, 128), 0.5), "big_w").unwrap();
    let xs = popxl::h2d_stream([128, 128], popxl::float32, "x").unwrap();
    let ys = popxl::d2h_stream([128, 128], popxl::float32, "y").unwrap();
    let x = ops::host_load(&xs, "x").unwrap();
    let two = popxl::constant(2.0f32, "two").unwrap();
    let y = &ops::mul(&w, &two).unwrap() + &x;
    ops::host_store(&ys, &y).unwrap();
    drop(_g);
    (ir, xs, ys)
}

#[test]
fn a_program_over_the_limit_fails_on_ipu_model_and_runs_on_cpu() {
    let (ir, _, _) = big_weight();
    let err = Session::with_options(ir, "ipu_model", options(tiny_ipu())).unwrap_err();
    let SessionError::TileMemoryExceeded(oom) = &err else { panic!("expected TileMemoryExceeded, got {err}") };
    // Four live [128, 128] float32 tensors (w, x, w * 2, y) over 4 tiles: 64 KiB
    // each; the peak tile holds 16 KiB of each at the peak, over its 16 KiB.
    assert_eq!(oom.tile_memory_bytes, 16 * 1024);
    assert!(oom.tile_bytes > 3 * 16 * 1024, "{oom}");
    assert_eq!(oom.excess_bytes, oom.tile_bytes - oom.tile_memory_bytes);
    assert_eq!(oom.compute_tiles, 4);
    assert!(oom.tensors.iter().any(|t| t.name == "main/big_w" && t.peak_tile_bytes == 16 * 1024), "{oom}");
    assert!(oom.code.iter().any(|c| c.name == "main"), "{oom}");
    let message = err.to_string();
    for needle in ["out of memory on ipu_model (tiny)", "exceeds by", "timeline step", "main/big_w", "code"] {
        assert!(message.contains(needle), "`{needle}` not in:\n{message}");
    }
    println!("{message}");

    // The same program and options on cpu: the limit does not apply.
    let (ir, xs, ys) = big_weight();
    let mut session = Session::with_options(ir, "cpu", options(tiny_ipu())).unwrap();
    let x = ndarray::Array2::<f32>::from_elem((128, 128), 1.0);
    let out = session.scope(|s| s.run(&[(xs, HostArray::from(x))].into())).unwrap();
    assert!(out[&ys].to_f64_vec().iter().all(|&v| v == 2.0));
    // cpu sessions still give the estimate, which says it would not fit.
    assert!(!session.ipu_model_report().unwrap().memory.fits());

    // And on a Mk2 it fits.
    let (ir, _, _) = big_weight();
    let session = Session::new(ir, "ipu_model").unwrap();
    let report = session.ipu_model_report().unwrap();
    assert!(report.memory.fits());
    assert_eq!(report.memory.compute_tiles, 1472);
}

/// Main calls `g1` then `g2` (each a chain of `ops` ops), optionally loading each
/// graph's code just before its call.
fn two_graphs(load: bool, ops_per_graph: usize) -> Ir {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let x = popxl::variable(ndarray::Array1::<f32>::linspace(-1.0, 1.0, 4096), "x").unwrap();
    let body = move |x: Tensor| -> popxl::Result<Tensor> {
        let mut y = x;
        for _ in 0..ops_per_graph {
            y = ops::relu(&ops::negate(&y)?)?;
        }
        Ok(y)
    };
    let g1 = ir.create_graph(body, &x).unwrap();
    let g2 = ir.create_graph(body, &x).unwrap();
    let out = popxl::d2h_stream([4096], popxl::float32, "out").unwrap();
    let _s = popxl::in_sequence(true);
    if load {
        ops::remote_code_load(&g1, "executable").unwrap();
    }
    let y = ops::call(&g1, &[&x], &[]).unwrap().remove(0);
    if load {
        ops::remote_code_load(&g2, "executable").unwrap();
    }
    let z = ops::call(&g2, &[&y], &[]).unwrap().remove(0);
    ops::host_store(&out, &z).unwrap();
    drop(_s);
    drop(_g);
    ir
}

#[test]
fn code_loading_lowers_the_peak_code_bytes() {
    let peak_code = |load: bool| {
        let session = Session::new(two_graphs(load, 8), "ipu_model").unwrap();
        let report = session.ipu_model_report().unwrap();
        let m = &report.memory;
        let blocks: Vec<_> = m.code_blocks.iter().filter(|b| b.function.is_some()).collect();
        assert_eq!(blocks.len(), 2);
        assert!(blocks.iter().all(|b| b.loaded == load && b.bytes > 0));
        let peak = m.points.iter().map(|p| p.code_bytes).max().unwrap();
        (peak, blocks[0].bytes, report)
    };
    let (without, g1_bytes, _) = peak_code(false);
    let (with, _, report) = peak_code(true);
    // Loaded, the two graphs' code is never live at once.
    assert!(with < without, "peak code {with} B with loads, {without} B without");
    assert!(without - with >= g1_bytes / 2, "{with} vs {without}");
    // The timeline has one code load per graph, each moving the graph's code.
    let loads: Vec<_> = report.timeline.rows.iter().filter(|r| r.kind == StepKind::CodeLoad).collect();
    assert_eq!(loads.len(), 2);
    assert!(loads.iter().all(|r| r.bytes > 0 && r.exchange_cycles > 0));
    println!("{report}");

    // The same on cpu with calls kept as functions (loaded graphs are never
    // inlined); results are unchanged by the loads.
    let mut results = Vec::new();
    for load in [false, true] {
        let options = SessionOptions { inline_calls: Some(false), ..SessionOptions::default() };
        let mut session = Session::with_options(two_graphs(load, 8), "cpu", options).unwrap();
        let code = session.ipu_model_report().unwrap().memory.points.iter().map(|p| p.code_bytes).max().unwrap();
        let out = session.scope(|s| s.run(&Default::default())).unwrap();
        results.push((code, out.into_values().next().unwrap().to_f64_vec()));
    }
    assert!(results[1].0 < results[0].0);
    assert_eq!(results[0].1, results[1].1);
}

/// Loads from host and streaming memory, compute, and stores, in an order the
/// scheduler interleaves; `merge` applies `merge_exchange` to the main graph.
fn exchanges(merge: bool) -> (Ir, Vec<popxl::HostToDeviceStream>, Vec<popxl::DeviceToHostStream>) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let n = 256;
    let buf = popxl::remote_buffer([n], popxl::float32, 2).unwrap();
    let w = popxl::variable(ndarray::Array1::<f32>::linspace(0.0, 1.0, n), "w").unwrap();
    let ins: Vec<_> = (0..2).map(|i| popxl::h2d_stream([n], popxl::float32, &format!("in{i}")).unwrap()).collect();
    let outs: Vec<_> = (0..2).map(|i| popxl::d2h_stream([n], popxl::float32, &format!("out{i}")).unwrap()).collect();
    // Store w twice, then load both entries back (in sequence: a store and a
    // load of one buffer must be ordered).
    let (r0, r1) = {
        let _s = popxl::in_sequence(true);
        ops::remote_store(&buf, 0, &w).unwrap();
        let w3 = ops::mul(&w, &popxl::constant(3.0f32, "three").unwrap()).unwrap();
        ops::remote_store(&buf, 1, &w3).unwrap();
        (ops::remote_load(&buf, 0, "r0").unwrap(), ops::remote_load(&buf, 1, "r1").unwrap())
    };
    let a = ops::host_load(&ins[0], "a").unwrap();
    let a2 = ops::relu(&ops::negate(&a).unwrap()).unwrap();
    let b = ops::host_load(&ins[1], "b").unwrap();
    let b2 = ops::relu(&b).unwrap();
    let y0 = &(&a2 + &r0) * &b2;
    let y1 = &ops::exp(&r1).unwrap() - &b2;
    ops::host_store(&outs[0], &y0).unwrap();
    ops::host_store(&outs[1], &y1).unwrap();
    if merge {
        assert!(popxl::transforms::merge_exchange().unwrap() >= 1);
    }
    drop(_g);
    (ir, ins, outs)
}

#[test]
fn merge_exchange_keeps_results_and_merges_exchanges() {
    let n = 256;
    let data: Vec<HostArray> =
        (0..2).map(|i| HostArray::from(ndarray::Array1::<f32>::linspace(-1.0 - i as f32, 1.0, n))).collect();
    for device in ["cpu", "ipu_model"] {
        let mut results = Vec::new();
        let mut counts = Vec::new();
        for merge in [false, true] {
            let (ir, ins, outs) = exchanges(merge);
            let mut session = Session::new(ir, device).unwrap();
            let report = session.ipu_model_report().unwrap();
            counts.push((report.timeline.totals.exchanges, report.timeline.totals.total_cycles));
            let inputs = ins.iter().cloned().zip(data.iter().cloned()).collect();
            let out = session.scope(|s| s.run(&inputs)).unwrap();
            results.push(outs.iter().map(|o| out[o].to_f64_vec()).collect::<Vec<_>>());
        }
        assert_eq!(results[0], results[1], "{device}: merge_exchange changed the results");
        let ((before, cycles_before), (after, cycles_after)) = (counts[0], counts[1]);
        println!(
            "{device}: {before} exchanges, {cycles_before} cycles -> merged: {after} exchanges, {cycles_after} cycles"
        );
        assert!(after < before, "{device}: {before} exchanges before merge_exchange, {after} after");
        assert!(cycles_after < cycles_before, "{device}: {cycles_before} -> {cycles_after} cycles");
    }
}

/// A remote load, then a matmul that does not read it, then a use of the load;
/// the load on IO tiles or compute tiles.
fn overlapped(io: bool) -> Ir {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let buf = popxl::remote_buffer([64, 64], popxl::float32, 1).unwrap();
    let a = popxl::variable(ndarray::Array2::<f32>::ones((512, 512)), "a").unwrap();
    let out = popxl::d2h_stream([64, 64], popxl::float32, "out").unwrap();
    let out2 = popxl::d2h_stream([512, 512], popxl::float32, "out2").unwrap();
    let _s = popxl::in_sequence(true);
    let r = {
        let _io = io.then(popxl::io_tiles);
        ops::remote_load(&buf, 0, "r").unwrap()
    };
    let m = ops::matmul(&a, &a).unwrap();
    let m = ops::matmul(&m, &a).unwrap();
    let y = ops::relu(&r).unwrap();
    ops::host_store(&out, &y).unwrap();
    ops::host_store(&out2, &m).unwrap();
    drop(_s);
    drop(_g);
    ir
}

#[test]
fn transfers_on_io_tiles_overlap_independent_compute() {
    let report = |io: bool| Session::new(overlapped(io), "ipu_model").unwrap().ipu_model_report().unwrap();
    let (compute, io) = (report(false), report(true));
    assert!(!compute.uses_io_tiles && io.uses_io_tiles);
    assert_eq!(io.memory.compute_tiles, 1472 - 32);
    let load = |r: &popxl_session::IpuModelReport| {
        r.timeline.rows.iter().find(|r| r.kind == StepKind::RemoteLoad).cloned().unwrap()
    };
    assert_eq!(load(&compute).hidden_cycles, 0);
    let l = load(&io);
    assert_eq!(l.tiles, popxl::TileSet::Io);
    // Two 512^3 matmuls take longer than a 16 KiB load: the load is hidden.
    assert_eq!(l.hidden_cycles, l.exchange_cycles, "{io}");
    assert!(io.timeline.totals.total_cycles < compute.timeline.totals.total_cycles);
    // The relu reads the load: nothing after it hides anything.
    assert_eq!(io.timeline.totals.hidden_cycles, l.exchange_cycles);
    // The lowered program says where the load runs.
    let session = Session::new(overlapped(true), "ipu_model").unwrap();
    assert!(session.executable().dump().contains("remote_load r1[0] -> b"));
    assert!(session.executable().dump().contains(" on io tiles\n"));
}

#[test]
fn the_report_is_data_and_a_table() {
    let (ir, _, _) = big_weight();
    let session = Session::new(ir, "ipu_model").unwrap();
    let report = session.ipu_model_report().unwrap();
    let m = &report.memory;
    // Every point: the most loaded tile holds at most the total; the peak is a point.
    assert!(m.points.iter().all(|p| p.max_tile_bytes <= p.total_bytes()));
    assert!(m.points.contains(&m.peak) && m.points.contains(&m.peak_total));
    assert!(m.points.iter().all(|p| p.max_tile_bytes <= m.peak.max_tile_bytes));
    // The tensors live at the peak add up to the peak's tensor bytes.
    assert_eq!(m.tensors_at_peak.iter().map(|t| t.bytes).sum::<u64>(), m.peak.tensor_bytes);
    assert_eq!(m.code_at_peak.iter().map(|c| c.bytes).sum::<u64>(), m.peak.code_bytes);
    // 64 KiB over 1472 tiles in 64-byte grains: 1024 grains, one tile each.
    let w = m.tensors_at_peak.iter().find(|t| t.name == "main/big_w").unwrap();
    assert_eq!((w.bytes, w.tiles), (65536, 1024));
    // Timeline: the host load, mul, add and host store; FLOP one per element.
    let t = &report.timeline;
    let kinds: Vec<_> = t.rows.iter().map(|r| r.kind).collect();
    use StepKind::*;
    assert_eq!(kinds.iter().filter(|&&k| k == Compute).count(), 2);
    assert_eq!(kinds.iter().filter(|&&k| k == HostLoad || k == HostStore).count(), 2);
    assert_eq!(t.totals.flops, 2 * 128 * 128);
    assert_eq!(t.totals.exchange_bytes, 2 * 65536);
    assert_eq!(t.totals.total_cycles, t.rows.iter().map(|r| r.cycles() * r.repeats).sum::<u64>());
    let text = report.to_string();
    for needle in ["ipu_model Mk2 GC200", "memory: fits", "<- peak", "code blocks", "timeline", "host_load", "total:"] {
        assert!(text.contains(needle), "`{needle}` not in:\n{text}");
    }
    println!("{text}");
}

#[test]
fn repeats_multiply_and_an_invalid_config_is_an_error() {
    let ir = Ir::new();
    {
        let _g = ir.main_graph().enter();
        let x = popxl::variable(ndarray::Array1::<f32>::ones(1024), "x").unwrap();
        let g = ir.create_graph(|x: Tensor| ops::relu(&x), &x).unwrap();
        let y = ops::repeat(&g, 5, &[&x], &[]).unwrap().remove(0);
        let out = popxl::d2h_stream([1024], popxl::float32, "out").unwrap();
        ops::host_store(&out, &y).unwrap();
    }
    let session = Session::new(ir.clone(), "ipu_model").unwrap();
    let report = session.ipu_model_report().unwrap();
    let relu = report.timeline.rows.iter().find(|r| r.name.starts_with("Relu")).unwrap();
    assert_eq!(relu.repeats, 5);
    assert_eq!(report.timeline.totals.flops, 5 * 1024);

    let bad = IpuModelConfig { grain_bytes: 0, ..IpuModelConfig::mk2() };
    let err = Session::with_options(two_graphs(false, 1), "ipu_model", options(bad)).unwrap_err();
    assert!(matches!(err, SessionError::IpuModel(_)), "{err}");
    assert!(err.to_string().contains("grain_bytes"), "{err}");
    // IO tiles must leave compute tiles, when the program uses them.
    let bad = IpuModelConfig { io_tiles: 1472, ..IpuModelConfig::mk2() };
    assert!(Session::with_options(two_graphs(false, 1), "ipu_model", options(bad.clone())).is_ok());
    let err = Session::with_options(overlapped(true), "ipu_model", options(bad)).unwrap_err();
    assert!(err.to_string().contains("io_tiles"), "{err}");
}
