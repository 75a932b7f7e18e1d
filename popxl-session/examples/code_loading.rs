//! The three code-loading programs of seed §9.7 (PopXL's `code_loading.py`),
//! built with `popxl` and lowered for the `ipu_model` device:
//!
//! 1. minimal: one `remote_code_load` of `g`, then three calls;
//! 2. a load before every call (code dead between calls);
//! 3. nested: calling `g2` loads `g1`, which is then called;
//! 4. (beyond the seed) two graphs used in two phases, where loading each
//!    before its phase keeps one code live at a time.
//!
//! For each program, with and without the loads, it prints the code-liveness
//! intervals of every function (timeline steps of the lowered program) and
//! the `ipu_model` memory estimate (`Session::ipu_model_report`): the most
//! loaded tile at the peak, with the tensor and code bytes live there, and
//! the most code bytes live at any step.
//!
//! Run with `cargo run --release -p popxl-session --example code_loading`.

use popxl::{ops, Graph, Ir, Tensor};
use popxl_session::{Session, SessionOptions};

/// Ops of the graph `expensive_id` (the seed's `x.T.T`, made longer so its code matters).
const LAYERS: usize = 8;

fn expensive(ir: &Ir, x: &Tensor, name: &str) -> Graph {
    ir.create_graph_named(
        name,
        |x: Tensor| {
            let mut y = x;
            for _ in 0..LAYERS {
                y = ops::gelu(&y.matmul(&y)?)?;
            }
            Ok(y)
        },
        x,
    )
    .unwrap()
}

fn call(g: &Graph, x: &Tensor) -> Tensor {
    ops::call(g, &[x], &[]).unwrap().remove(0)
}

fn finish(x: &Tensor) {
    let out = popxl::d2h_stream(x.shape(), x.dtype(), "out").unwrap();
    ops::host_store(&out, x).unwrap();
}

/// Program 1 (§9.7.1).
fn minimal(load: bool) -> Ir {
    let ir = Ir::new();
    let _m = ir.main_graph().enter();
    let x = popxl::variable(ndarray::Array2::<f32>::eye(64) * 0.5, "x").unwrap();
    let g = expensive(&ir, &x, "g");
    let _s = popxl::in_sequence(true);
    let mut y = ops::relu(&x).unwrap();
    if load {
        ops::remote_code_load(&g, "executable").unwrap();
    }
    y = call(&g, &y);
    y = ops::relu(&y).unwrap();
    y = call(&g, &y);
    y = call(&g, &y);
    finish(&y);
    drop((_s, _m));
    ir
}

/// Program 2 (§9.7.2): a load before each call.
fn load_per_call(load: bool) -> Ir {
    let ir = Ir::new();
    let _m = ir.main_graph().enter();
    let x = popxl::variable(ndarray::Array2::<f32>::eye(64) * 0.5, "x").unwrap();
    let g = expensive(&ir, &x, "g");
    let _s = popxl::in_sequence(true);
    let mut y = ops::relu(&x).unwrap();
    for _ in 0..3 {
        if load {
            ops::remote_code_load(&g, "executable").unwrap();
        }
        y = call(&g, &y);
        y = ops::relu(&y).unwrap();
    }
    finish(&y);
    drop((_s, _m));
    ir
}

/// Program 3 (§9.7.3, nested): `g2` loads `g1`.
fn nested(load: bool) -> Ir {
    let ir = Ir::new();
    let _m = ir.main_graph().enter();
    let x = popxl::variable(ndarray::Array2::<f32>::eye(64) * 0.5, "x").unwrap();
    let g1 = expensive(&ir, &x, "g1");
    let g2 = ir
        .create_graph_named(
            "load_g1",
            |a: Tensor| {
                if load {
                    ops::remote_code_load(&g1, "executable")?;
                }
                ops::relu(&a)
            },
            &x,
        )
        .unwrap();
    let _s = popxl::in_sequence(true);
    if load {
        ops::remote_code_load(&g2, "executable").unwrap();
    }
    let y = call(&g2, &x);
    let y = call(&g1, &y);
    finish(&y);
    drop((_s, _m));
    ir
}

/// Program 4 (beyond the seed): two large graphs used one after the other.
/// Without loads both codes are always live; with a load before each phase,
/// only one is live at a time, which lowers the peak.
fn two_phases(load: bool) -> Ir {
    let ir = Ir::new();
    let _m = ir.main_graph().enter();
    let x = popxl::variable(ndarray::Array2::<f32>::eye(64) * 0.5, "x").unwrap();
    let a = expensive(&ir, &x, "phase_a");
    let b = expensive(&ir, &x, "phase_b");
    let _s = popxl::in_sequence(true);
    let mut y = ops::relu(&x).unwrap();
    for g in [&a, &b] {
        if load {
            ops::remote_code_load(g, "executable").unwrap();
        }
        for _ in 0..2 {
            y = call(g, &y);
        }
    }
    finish(&y);
    drop((_s, _m));
    ir
}

fn report(name: &str, build: fn(bool) -> Ir) {
    println!("== {name}");
    for load in [false, true] {
        let options = SessionOptions { inline_calls: Some(false), ..Default::default() };
        let session = Session::with_options(build(load), "ipu_model", options).expect("session");
        let exe = session.executable();
        println!(
            "  {} ({} timeline steps):",
            if load { "with remote_code_load" } else { "without loads" },
            exe.timeline_steps
        );
        for c in &exe.code {
            let live: Vec<String> = c.live.iter().map(|(a, b)| format!("{a}-{b}")).collect();
            let how = if c.loaded { format!("loaded at {:?}", c.loads) } else { "always live".to_string() };
            println!("    f{} {:<8} {how:<22} live [{}]", c.function.0, c.graph, live.join(" "));
        }
        print_memory(&session);
    }
}

fn main() {
    report("1. minimal: one load, three calls", minimal);
    report("2. a load before every call", load_per_call);
    report("3. nested: calling load_g1 loads g1", nested);
    report("4. two graphs in two phases", two_phases);
}

fn print_memory(session: &Session) {
    let r = session.ipu_model_report().expect("ipu_model report");
    let m = &r.memory;
    let peak_code = m.points.iter().map(|p| p.code_bytes).max().unwrap_or(0);
    println!(
        "    ipu_model: peak tile {} B ({} B tensors + {} B code live at step {}); most code live at once {} B",
        m.peak.max_tile_bytes, m.peak.tensor_bytes, m.peak.code_bytes, m.peak.step, peak_code
    );
}
