//! `mpirun -n 2 target/release/examples/mpi_check` (built with `--features
//! mpi`): the checks CI runs over MPI, beside the examples' bit-for-bit
//! comparisons (`.ci/mpi-tests`).
//!
//! 1. Every collective (all-reduce, all-gather, reduce-scatter) over 4
//!    replicas split between the processes gives each process its replicas'
//!    rows of what one process running all 4 computes (each rank computes
//!    that reference itself), with host arrays of every replica or only its own.
//! 2. A bad input on the last rank only: that rank reports its own error,
//!    every other rank reports the last rank's failure, all within 10 s; then
//!    every rank runs again, correctly.
//! 3. A `Session::new` failure on rank 0 only: every rank's `Session::new` fails.
//!
//! Prints one line per check on rank 0 and exits non-zero on any failure.

use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support/collectives_program.rs"]
mod collectives_program;

use collectives_program::{program, REPLICAS};
use popxl::HostArray;
use popxl_session::cpu::transport::{SpanError, Transport};
use popxl_session::{Session, SessionError, SessionOptions};

type R<T> = Result<T, Box<dyn std::error::Error>>;

fn array(rows: usize, data: Vec<f32>) -> HostArray {
    HostArray::from(ndarray::Array2::from_shape_vec((rows, 6), data).expect("rows x 6").into_dyn())
}

fn main() -> R<()> {
    let _mpi = popxl_session::cpu::mpi::init()?;
    let world: Arc<dyn Transport> = Arc::new(popxl_session::cpu::mpi::world().ok_or("MPI is not initialized")?);
    let (rank, size) = (world.rank(), world.size());
    if size < 2 || !REPLICAS.is_multiple_of(size) {
        return Err(format!("run with 2 or 4 processes (got {size})").into());
    }
    let local = REPLICAS / size;
    let say = |line: &str| {
        if rank == 0 {
            println!("{line}");
        }
    };
    let options = || SessionOptions { transport: Some(world.clone()), ..SessionOptions::default() };
    let data: Vec<f32> = (0..REPLICAS * 6).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();

    // 1. Collectives against one process's results.
    let (ir, x, outs) = program(None)?;
    let mut one = Session::new(ir, "cpu")?;
    let reference = one.scope(|s| s.run(&[(x, array(REPLICAS, data.clone()))].into()))?;
    for own_slice in [false, true] {
        let (ir, x, outs_here) = program(Some((rank, size)))?;
        let mut s = Session::with_options(ir, "cpu", options())?;
        let input = if own_slice {
            array(local, data[rank * local * 6..(rank + 1) * local * 6].to_vec())
        } else {
            array(REPLICAS, data.clone())
        };
        let got = s.scope(|s| s.run(&[(x, input)].into()))?;
        for (o, (mine, all)) in outs_here.iter().zip(&outs).enumerate() {
            let (mine, all) = (got[mine].to_host_tensor().bytes, reference[all].to_host_tensor().bytes);
            let row = all.len() / REPLICAS;
            if mine[..] != all[rank * local * row..(rank + 1) * local * row] {
                return Err(
                    format!("rank {rank}: output {o} differs from one process's (own slice {own_slice})").into()
                );
            }
        }
    }
    say(&format!("ok: collectives over {REPLICAS} replicas in {size} processes equal one process's, bit for bit"));

    // 2. A bad input on the last rank only.
    let (ir, x, _) = program(Some((rank, size)))?;
    let mut s = Session::with_options(ir, "cpu", options())?;
    let good = array(local, vec![0.0; local * 6]);
    let bad = HostArray::from(ndarray::Array2::<f32>::zeros((local + 1, 5)).into_dyn());
    let last = size - 1;
    let start = Instant::now();
    let (first, again) = s.scope(|s| {
        let first = s.run(&[(x.clone(), if rank == last { bad } else { good.clone() })].into()).map(|_| ());
        let again = s.run(&[(x, good)].into()).map(|_| ());
        Ok::<_, SessionError>((first, again))
    })?;
    let took = start.elapsed();
    match (&first, rank == last) {
        (Err(SessionError::WrongReplicaDim { .. } | SessionError::StreamShapeMismatch { .. }), true) => {}
        (Err(SessionError::Processes(SpanError::RankFailed { rank: r, .. })), false) if *r == last => {}
        _ => return Err(format!("rank {rank}: unexpected result of the bad run: {first:?}").into()),
    }
    if took > Duration::from_secs(10) || again.is_err() {
        return Err(format!("rank {rank}: the failure took {took:?}; the next run gave {again:?}").into());
    }
    say(&format!(
        "ok: a bad input on rank {last} stopped every rank with an error in {:.1} ms",
        took.as_secs_f64() * 1e3
    ));

    // 3. A Session::new failure on rank 0 only.
    let (ir, _, _) = program(Some((rank, size)))?;
    let made = Session::with_options(ir, if rank == 0 { "tpu" } else { "cpu" }, options()).map(|_| ());
    match (&made, rank) {
        (Err(SessionError::UnknownDevice(_)), 0) => {}
        (Err(SessionError::Processes(SpanError::RankFailed { rank: 0, .. })), r) if r > 0 => {}
        _ => return Err(format!("rank {rank}: unexpected Session::new result: {made:?}").into()),
    }
    say("ok: a Session::new failure on rank 0 failed every rank's Session::new");
    Ok(())
}
