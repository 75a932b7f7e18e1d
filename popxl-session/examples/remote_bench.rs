//! Remote load/store throughput on the `cpu` device against `memcpy`.
//!
//! One run stores a 1 MiB variable into each of the 64 entries of a remote
//! buffer (64 MiB, so entries are not in cache) and loads each entry back into
//! the variable in place (`remote_store`, `remote_load_`): 128 transfers of
//! 1 MiB. The baseline does the same 128 copies with `copy_from_slice`
//! between a 1 MiB vector and a 64 MiB one, on one thread (what `memcpy` does)
//! and split over the worker team's threads (what the executor does for large
//! copies). The best of several runs is reported for each.
//!
//! Run with `cargo run --release -p popxl-session --example remote_bench`.

use std::time::{Duration, Instant};

use popxl::{ops, Ir};
use popxl_session::Session;

const ELEMS: usize = 1 << 18; // 1 MiB of float32
const ENTRIES: usize = 64;
const ROUNDS: usize = 20;

fn best_of(rounds: usize, mut f: impl FnMut()) -> Duration {
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let ir = Ir::new();
    {
        let _g = ir.main_graph().enter();
        let buf = popxl::remote_buffer([ELEMS], popxl::float32, ENTRIES).unwrap();
        let mut x = popxl::variable(vec![1.0f32; ELEMS], "x").unwrap();
        let _s = popxl::in_sequence(true);
        for k in 0..ENTRIES {
            ops::remote_store(&buf, k, &x).unwrap();
            x = ops::remote_load_(&buf, k, &x).unwrap();
        }
    }
    let mut session = Session::new(ir, "cpu").unwrap();
    let transfers = 2 * ENTRIES;
    let ours = session
        .scope(|s| {
            s.run(&Default::default())?; // warm up: touch the streaming memory
            let mut err = Ok(());
            let d = best_of(ROUNDS, || {
                if let Err(e) = s.run(&Default::default()) {
                    err = Err(e);
                }
            });
            err.map(|_| d)
        })
        .unwrap();
    assert_eq!(session.exec_counters().remote_transfers as usize, transfers * (ROUNDS + 1));

    let mut small = vec![1.0f32; ELEMS];
    let mut big = vec![0.0f32; ELEMS * ENTRIES];
    let one_thread = best_of(ROUNDS, || {
        for k in 0..ENTRIES {
            big[k * ELEMS..(k + 1) * ELEMS].copy_from_slice(&small);
            small.copy_from_slice(&big[k * ELEMS..(k + 1) * ELEMS]);
        }
    });
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = ELEMS.div_ceil(threads);
    let parallel = best_of(ROUNDS, || {
        for k in 0..ENTRIES {
            let dst = &mut big[k * ELEMS..(k + 1) * ELEMS];
            std::thread::scope(|sc| {
                for (d, s) in dst.chunks_mut(chunk).zip(small.chunks(chunk)) {
                    sc.spawn(move || d.copy_from_slice(s));
                }
            });
            let src = &big[k * ELEMS..(k + 1) * ELEMS];
            std::thread::scope(|sc| {
                for (d, s) in small.chunks_mut(chunk).zip(src.chunks(chunk)) {
                    sc.spawn(move || d.copy_from_slice(s));
                }
            });
        }
    });
    let per = |d: Duration| d.as_secs_f64() * 1e6 / transfers as f64;
    let gbs = |d: Duration| (transfers * ELEMS * 4) as f64 / d.as_secs_f64() / 1e9;
    println!("remote load/store of 1 MiB tensors, {transfers} transfers per run, best of {ROUNDS} runs:");
    println!("  remote transfers (cpu device): {:8.1} us each, {:6.2} GB/s", per(ours), gbs(ours));
    println!("  memcpy, one thread:            {:8.1} us each, {:6.2} GB/s", per(one_thread), gbs(one_thread));
    println!("  memcpy, {threads} threads (scoped):    {:8.1} us each, {:6.2} GB/s", per(parallel), gbs(parallel));
    println!(
        "remote transfer time / one-thread memcpy time = {:.2} (acceptance: at most 1.5)",
        ours.as_secs_f64() / one_thread.as_secs_f64()
    );
}
