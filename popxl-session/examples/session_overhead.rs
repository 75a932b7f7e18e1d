//! Session overheads of the `cpu` device.
//!
//! (a) Per-op dispatch: time per op of one `run` over a chain of 10,000 tiny
//!     elementwise ops (float32[4]), minus nothing: the whole run divided by the
//!     op count (the fixed cost is negligible at this length).
//! (b) Fixed cost of one `run` of a one-op IR (load -> relu -> store) with one
//!     input and one output stream, through `run` (allocates the output arrays)
//!     and through `run_with_outputs` (reuses them).
//!
//! Run with `cargo run --release -p popxl-session --example session_overhead`.

use std::time::{Duration, Instant};

use popxl::{ops, HostArray, Ir};
use popxl_session::{Inputs, Session};

const CHAIN: usize = 10_000;

/// Best-of-`rounds` mean time per call of `f` over `iters` calls.
fn time(rounds: usize, iters: usize, mut f: impl FnMut()) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        best = best.min(t.elapsed() / iters as u32);
    }
    best
}

fn chain_ir(len: usize) -> (Ir, popxl::HostToDeviceStream) {
    let ir = Ir::new();
    let input = {
        let _g = ir.main_graph().enter();
        let input = popxl::h2d_stream([4], popxl::float32, "x").unwrap();
        let mut t = ops::host_load(&input, "x").unwrap();
        for i in 0..len {
            t = match i % 3 {
                0 => ops::relu(&t).unwrap(),
                1 => ops::negate(&t).unwrap(),
                _ => ops::add(&t, &t).unwrap(),
            };
        }
        let out = popxl::d2h_stream([4], popxl::float32, "y").unwrap();
        ops::host_store(&out, &t).unwrap();
        input
    };
    (ir, input)
}

fn main() {
    // (a) Per-op dispatch over a long chain.
    let t0 = Instant::now();
    let (ir, input) = chain_ir(CHAIN);
    let built = t0.elapsed();
    let t1 = Instant::now();
    let mut session = Session::new(ir, "cpu").unwrap();
    let compiled = t1.elapsed();
    assert_eq!(session.executable().kernel_calls().len(), CHAIN);
    let inputs: Inputs = [(input, HostArray::from(vec![0.5f32, -1.0, 2.0, 1e-3]))].into();
    let mut s = session.enter().unwrap();
    let mut outputs = s.create_host_outputs().unwrap();
    let per_run = time(5, 20, || s.run_with_outputs(&inputs, &mut outputs).unwrap());
    let mem = s.executable().memory;
    println!("(a) chain of {CHAIN} elementwise ops on float32[4]");
    println!("    build IR {:.1} ms, Session::new (prepare + lower + compile) {:.1} ms", ms(built), ms(compiled));
    println!("    arena {} B planned peak ({} B without reuse)", mem.arena_bytes, mem.no_reuse_bytes);
    println!(
        "    run: {:.1} us  ->  {:.1} ns per op (target < 1000 ns)",
        per_run.as_secs_f64() * 1e6,
        per_run.as_secs_f64() * 1e9 / CHAIN as f64
    );
    drop(s);

    // (b) Fixed cost of a one-op IR.
    let (ir, input) = chain_ir(1);
    let mut session = Session::new(ir, "cpu").unwrap();
    let inputs: Inputs = [(input, HostArray::from(vec![0.5f32, -1.0, 2.0, 1e-3]))].into();
    let mut s = session.enter().unwrap();
    let run = time(5, 20_000, || {
        std::hint::black_box(s.run(&inputs).unwrap());
    });
    let mut outputs = s.create_host_outputs().unwrap();
    let run_with_outputs = time(5, 20_000, || s.run_with_outputs(&inputs, &mut outputs).unwrap());
    println!("(b) one-op IR (host_load -> relu -> host_store), one input and one output stream");
    println!("    run              {:.2} us (target < 10 us)", run.as_secs_f64() * 1e6);
    println!("    run_with_outputs {:.2} us", run_with_outputs.as_secs_f64() * 1e6);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
