//! Scaling benchmark: build, verify and schedule a chain-and-diamond graph of
//! 10k, 100k and 1M ops, printing the time of each phase and the time per op.
//!
//! The repeating unit is a diamond `a = Relu(x); b = Neg(x); x' = Add(a, b)` on
//! small float tensors, chained `N / 3` times.
//!
//! ```text
//! cargo run --release -p popart-ir --example ir_scaling [N ...]
//! ```

use std::time::{Duration, Instant};

use popart_ir::{Attributes, DataType, Ir, Result, TensorInfo};

/// Build the chain of diamonds with (at least) `n_ops` ops.
fn build(n_ops: usize) -> Result<Ir> {
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let mut x = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float32, [4]))?;
    for _ in 0..n_ops.div_ceil(3) {
        let a = ir.create_op(main, "Relu", Attributes::new(), &[(0, x)], "relu")?;
        let b = ir.create_op(main, "Neg", Attributes::new(), &[(0, x)], "neg")?;
        let g = ir.main_graph();
        let (a, b) = (g.op(a)?.outputs().get(0).unwrap(), g.op(b)?.outputs().get(0).unwrap());
        let c = ir.create_op(main, "Add", Attributes::new(), &[(0, a), (1, b)], "add")?;
        x = ir.main_graph().op(c)?.outputs().get(0).unwrap();
    }
    ir.main_graph_mut().add_output(x)?;
    Ok(ir)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// CPU time of this thread (Linux: `/proc/thread-self/schedstat`, in ns), which
/// excludes time spent waiting for a core on a shared machine.
fn cpu_time() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok().map(Duration::from_nanos)
}

/// Wall and CPU time of one phase.
#[derive(Clone, Copy, Default)]
struct Times {
    wall: Duration,
    cpu: Option<Duration>,
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Times) {
    let (w0, c0) = (Instant::now(), cpu_time());
    let r = f();
    let (w1, c1) = (Instant::now(), cpu_time());
    let cpu = match (c0, c1) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    (r, Times { wall: w1 - w0, cpu })
}

/// Times of one run: build, verify, schedule, drop.
fn run(n: usize) -> Result<(usize, [Times; 4])> {
    let (ir, build_t) = timed(|| build(n));
    let ir = ir?;
    let (v, verify_t) = timed(|| ir.verify());
    v?;
    let (order, sched_t) = timed(|| ir.schedule(ir.main_graph_id()));
    let ops = ir.main_graph().num_ops();
    assert_eq!(order?.len(), ops);
    let ((), drop_t) = timed(move || drop(ir));
    Ok((ops, [build_t, verify_t, sched_t, drop_t]))
}

fn main() -> Result<()> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if args.is_empty() { vec![10_000, 100_000, 1_000_000] } else { args };
    const REPEATS: usize = 3;
    println!("best of {REPEATS} runs per size; total = build + verify + schedule (dropping the IR is not counted)");
    println!("wall-clock ms, then thread CPU ms in parentheses (the machine may be shared)");
    println!(
        "{:>9} {:>17} {:>17} {:>17} {:>17} {:>6} {:>7}",
        "ops", "build", "verify", "schedule", "total", "ns/op", "drop"
    );
    for n in sizes {
        let mut best: Option<(usize, [Times; 4])> = None;
        let total = |t: &[Times; 4]| t[0].wall + t[1].wall + t[2].wall;
        for _ in 0..REPEATS {
            let (ops, t) = run(n)?;
            if best.as_ref().is_none_or(|(_, b)| total(&t) < total(b)) {
                best = Some((ops, t));
            }
        }
        let (ops, t) = best.expect("at least one run");
        let cell = |x: Times| match x.cpu {
            Some(c) => format!("{:.1} ({:.1})", ms(x.wall), ms(c)),
            None => format!("{:.1}", ms(x.wall)),
        };
        let sum = Times { wall: total(&t), cpu: t[..3].iter().map(|x| x.cpu).sum::<Option<Duration>>() };
        println!(
            "{:>9} {:>17} {:>17} {:>17} {:>17} {:>6.0} {:>7.1}",
            ops,
            cell(t[0]),
            cell(t[1]),
            cell(t[2]),
            cell(sum),
            sum.wall.as_nanos() as f64 / ops as f64,
            ms(t[3].wall)
        );
    }
    Ok(())
}
