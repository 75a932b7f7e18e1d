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

/// Times of one run: build, verify, schedule, drop.
fn run(n: usize) -> Result<(usize, [Duration; 4])> {
    let t0 = Instant::now();
    let ir = build(n)?;
    let t1 = Instant::now();
    ir.verify()?;
    let t2 = Instant::now();
    let order = ir.schedule(ir.main_graph_id())?;
    let t3 = Instant::now();
    let ops = ir.main_graph().num_ops();
    assert_eq!(order.len(), ops);
    drop(ir);
    let t4 = Instant::now();
    Ok((ops, [t1 - t0, t2 - t1, t3 - t2, t4 - t3]))
}

fn main() -> Result<()> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if args.is_empty() { vec![10_000, 100_000, 1_000_000] } else { args };
    const REPEATS: usize = 3;
    println!("best of {REPEATS} runs per size (the machine is shared); total = build + verify + schedule");
    println!(
        "{:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>10}",
        "ops", "build ms", "verify ms", "sched ms", "total ms", "ns/op", "(drop ms)"
    );
    for n in sizes {
        let mut best: Option<(usize, [Duration; 4])> = None;
        for _ in 0..REPEATS {
            let (ops, t) = run(n)?;
            let total = |t: &[Duration; 4]| t[0] + t[1] + t[2];
            if best.as_ref().map_or(true, |(_, b)| total(&t) < total(b)) {
                best = Some((ops, t));
            }
        }
        let (ops, t) = best.expect("at least one run");
        let total = t[0] + t[1] + t[2];
        println!(
            "{:>10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>8.0} {:>10.1}",
            ops,
            ms(t[0]),
            ms(t[1]),
            ms(t[2]),
            ms(total),
            total.as_nanos() as f64 / ops as f64,
            ms(t[3])
        );
    }
    Ok(())
}
