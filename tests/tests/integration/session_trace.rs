//! `Session::set_tracing` / `write_trace` (issue 37, part 4): the kernel
//! timeline of a run in the Chrome trace-event format, parsed back with
//! serde_json: every event's fields, every kernel of the program once per
//! run on the executor's track, and no overlap on any track.

use std::collections::HashMap;

use popxl::{ops, HostArray, Ir};
use popxl_session::{Session, SessionError};
use serde_json::Value;

/// `y = relu(x @ w) * 2 + x`, 256 x 256: kernels large enough to be split over
/// the worker team.
fn program() -> (Ir, popxl::HostToDeviceStream) {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let n = 256;
    let w =
        popxl::variable(ndarray::Array2::<f32>::from_shape_fn((n, n), |(i, j)| ((i * 7 + j) % 13) as f32 * 0.01), "w")
            .unwrap();
    let xs = popxl::h2d_stream([n, n], popxl::float32, "x").unwrap();
    let ys = popxl::d2h_stream([n, n], popxl::float32, "y").unwrap();
    let x = ops::host_load(&xs, "x").unwrap();
    let h = ops::relu(&ops::matmul(&x, &w).unwrap()).unwrap();
    let two = popxl::constant(2.0f32, "two").unwrap();
    let y = &ops::mul(&h, &two).unwrap() + &x;
    ops::host_store(&ys, &y).unwrap();
    drop(_g);
    (ir, xs)
}

fn num(e: &Value, key: &str) -> f64 {
    e.get(key).and_then(Value::as_f64).unwrap_or_else(|| panic!("`{key}` is not a number in {e}"))
}

fn string<'a>(e: &'a Value, key: &str) -> &'a str {
    e.get(key).and_then(Value::as_str).unwrap_or_else(|| panic!("`{key}` is not a string in {e}"))
}

#[test]
fn a_traced_run_is_a_valid_chrome_trace_of_every_kernel() {
    let (ir, xs) = program();
    let mut session = Session::new(ir, "cpu").unwrap();
    let mut inputs = popxl_session::Inputs::new();
    inputs.insert(xs, HostArray::from(ndarray::Array2::<f32>::from_elem((256, 256), 0.5).into_dyn()));
    // Nothing is recorded before tracing is on.
    session.scope(|s| s.run(&inputs)).unwrap();
    let quiet: Value = serde_json::from_str(&session.trace_json()).unwrap();
    assert!(quiet["traceEvents"].as_array().unwrap().iter().all(|e| e["ph"] != "X"), "{quiet}");

    let runs = 5;
    session.set_tracing(true);
    session.scope(|s| (0..runs).try_for_each(|_| s.run(&inputs).map(drop))).unwrap();
    let dir = std::env::temp_dir().join(format!("popxl-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    session.write_trace(&path).unwrap();
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    let events = trace["traceEvents"].as_array().expect("a traceEvents array");
    let complete: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(!complete.is_empty());
    // Every complete event has the trace-event fields, with sane values.
    for e in &complete {
        assert!(!string(e, "name").is_empty() && !string(e, "cat").is_empty(), "{e}");
        assert!(num(e, "ts") >= 0.0 && num(e, "dur") >= 0.0, "{e}");
        assert_eq!(num(e, "pid"), 1.0, "{e}");
        assert!(num(e, "tid") >= 0.0, "{e}");
        assert!(e["args"]["kernel"].is_u64(), "{e}");
    }
    // Each track is named, and each event's track has a name.
    let named: Vec<f64> = events.iter().filter(|e| e["ph"] == "M").map(|e| num(e, "tid")).collect();
    assert!(named.contains(&0.0));
    assert!(complete.iter().all(|e| named.contains(&num(e, "tid"))));

    // The executor's track: each kernel of the program once per run, with its op type.
    let exe = session.executable();
    let calls = exe.programs.main.kernel_calls();
    assert!(calls.len() >= 4, "{}", calls.len());
    let mut seen: HashMap<&str, (usize, &str)> = HashMap::new();
    for e in complete.iter().filter(|e| num(e, "tid") == 0.0) {
        let s = seen.entry(string(e, "name")).or_insert((0, string(e, "cat")));
        s.0 += 1;
    }
    for c in &calls {
        let (n, cat) = seen.get(c.name.as_str()).unwrap_or_else(|| panic!("kernel `{}` not in the trace", c.name));
        assert_eq!(*n, runs, "{}", c.name);
        assert_eq!(*cat, c.def.op_type(), "{}", c.name);
    }
    assert_eq!(seen.len(), calls.len());

    check_tracks(&complete);

    // The 256^3 matmul is split over the team: run until a worker took part
    // (other tests running at the same time may hold the team or the cores).
    if popxl_session::cpu::team::num_threads() > 1 {
        session.set_tracing(true);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let trace = loop {
            session.scope(|s| s.run(&inputs).map(drop)).unwrap();
            let trace: Value = serde_json::from_str(&session.trace_json()).unwrap();
            let events = trace["traceEvents"].as_array().unwrap();
            if events.iter().any(|e| e["ph"] == "X" && num(e, "tid") > 0.0) {
                break trace;
            }
            assert!(std::time::Instant::now() < deadline, "no worker events in 60 s of runs");
        };
        let complete: Vec<&Value> =
            trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").collect();
        check_tracks(&complete);
    }

    // Off: the timeline is dropped.
    session.set_tracing(false);
    let off: Value = serde_json::from_str(&session.trace_json()).unwrap();
    assert!(off["traceEvents"].as_array().unwrap().iter().all(|e| e["ph"] != "X"));
}

/// Per track: start times in order and no two events overlapping (3-decimal
/// microseconds, rounded separately: 2 ns of slack); a worker's job lies within
/// the kernel it is named after.
fn check_tracks(complete: &[&Value]) {
    let mut tracks: HashMap<u64, Vec<(f64, f64)>> = HashMap::new();
    for e in complete {
        tracks.entry(num(e, "tid") as u64).or_default().push((num(e, "ts"), num(e, "dur")));
    }
    for (tid, spans) in &tracks {
        for w in spans.windows(2) {
            let ((t0, d0), (t1, _)) = (w[0], w[1]);
            assert!(t1 >= t0, "track {tid}: ts {t1} after {t0}");
            assert!(t0 + d0 <= t1 + 0.002, "track {tid}: [{t0}, +{d0}] overlaps {t1}");
        }
    }
    let kernels: Vec<(f64, f64, &str)> = complete
        .iter()
        .filter(|e| num(e, "tid") == 0.0)
        .map(|e| (num(e, "ts"), num(e, "ts") + num(e, "dur"), string(e, "name")))
        .collect();
    for e in complete.iter().filter(|e| num(e, "tid") > 0.0) {
        let (ts, end) = (num(e, "ts"), num(e, "ts") + num(e, "dur"));
        assert!(
            kernels.iter().any(|&(a, b, n)| a <= ts + 0.002 && end <= b + 0.002 && n == string(e, "name")),
            "worker event {e} is inside no kernel of its name"
        );
    }
}

#[test]
fn writing_a_trace_where_it_cannot_go_is_a_typed_error() {
    let (ir, _) = program();
    let session = Session::new(ir, "cpu").unwrap();
    let path = std::env::temp_dir().join("popxl-no-such-dir-37").join("sub").join("t.json");
    let err = session.write_trace(&path).unwrap_err();
    let SessionError::WriteFile { what, path: p, .. } = &err else { panic!("expected WriteFile, got {err}") };
    assert_eq!((*what, p.as_str()), ("the trace", path.display().to_string().as_str()));
}
