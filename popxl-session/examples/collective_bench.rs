//! `mpirun -n 2 target/release/examples/collective_bench` (built with
//! `--features mpi`): the bandwidth of the replica collectives between
//! processes, next to the MPI library's own collective on buffers of the same
//! size, measured alternately in one run: 7 rounds of a batch of ours then a
//! batch of MPI's, the fastest batch of each kept (the least disturbed on a
//! shared host).
//!
//! Ours is what a program gets: a session whose replicas (one per process)
//! run a program of one collective on a variable, one `Session::run` per
//! collective (the run's own cost included: binding, the end-of-step
//! agreement between processes). The all-gather and reduce-scatter programs
//! also copy one element of their result into a variable (a collective's
//! result must be used or it is pruned).
//!
//! Sizes are the bytes of the full tensor: the all-reduce's operand, the
//! all-gather's result, the reduce-scatter's input. Options: `--min BYTES`
//! (default 4096), `--max BYTES` (default 64 MiB), `--seconds S` per
//! measurement (default 0.2).

use std::sync::Arc;
use std::time::Instant;

use popxl::ops::collectives::{self, AllGatherShape, CollectiveOp};
use popxl::{HostArray, Ir};
use popxl_session::cpu::mpi::{self, MpiTransport};
use popxl_session::cpu::transport::Transport;
use popxl_session::{Session, SessionOptions};

type R<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    AllReduce,
    AllGather,
    ReduceScatter,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all-reduce",
            Kind::AllGather => "all-gather",
            Kind::ReduceScatter => "reduce-scatter",
        }
    }
}

/// A session running one collective over `n` float32 elements (the full tensor).
fn session(kind: Kind, n: usize, world: &Arc<dyn Transport>) -> R<Session> {
    let p = world.size();
    let ir = Ir::new();
    ir.set_replication_factor(p)?;
    ir.set_instances(world.rank(), p)?;
    ir.main_graph().with(|| -> popxl::Result<()> {
        let v = |len: usize, name: &str| {
            popxl::variable(HostArray::from(ndarray::Array1::from_elem(len, 1.0f32).into_dyn()), name)
        };
        match kind {
            Kind::AllReduce => {
                collectives::replicated_all_reduce_(&v(n, "x")?, CollectiveOp::Mean, None)?;
            }
            // A collective's result must be used or it is pruned: one element
            // of it is copied into a variable.
            Kind::AllGather => {
                let (x, y) = (v(n / p, "x")?, v(1, "y")?);
                let g = collectives::replicated_all_gather(&x, 0, None, AllGatherShape::Concat)?;
                popxl::ops::copy_var_update_(&y, &popxl::ops::slice(&g, &[0], &[1], &[1], &[0])?)?;
            }
            Kind::ReduceScatter => {
                let (x, y) = (v(n, "x")?, v(1, "y")?);
                let s = collectives::replicated_reduce_scatter(&x, CollectiveOp::Add, None, false)?;
                popxl::ops::copy_var_update_(&y, &popxl::ops::slice(&s, &[0], &[1], &[1], &[0])?)?;
            }
        }
        Ok(())
    })?;
    let options = SessionOptions { transport: Some(world.clone()), ..SessionOptions::default() };
    Ok(Session::with_options(ir, "cpu", options)?)
}

/// Seconds per call of `f`, the median of 5 batches of `k` calls, every
/// process starting each batch together.
/// Seconds per call of `ours` and of `theirs`: batches of `k` calls,
/// alternated over `ROUNDS` rounds (the processes meet at a barrier before
/// each batch), the fastest batch of each kept. On a shared host, a
/// disturbance slows a batch; the fastest is the least disturbed.
fn alternate(
    t: &MpiTransport,
    k: usize,
    mut ours: impl FnMut() -> R<()>,
    mut theirs: impl FnMut() -> R<()>,
) -> R<(f64, f64)> {
    const ROUNDS: usize = 7;
    let mut best = (f64::INFINITY, f64::INFINITY);
    let batch = |f: &mut dyn FnMut() -> R<()>| -> R<f64> {
        t.barrier();
        let start = Instant::now();
        for _ in 0..k {
            f()?;
        }
        Ok(start.elapsed().as_secs_f64() / k as f64)
    };
    for _ in 0..ROUNDS {
        best.0 = best.0.min(batch(&mut ours)?);
        best.1 = best.1.min(batch(&mut theirs)?);
    }
    Ok(best)
}

fn main() -> R<()> {
    let mut min = 4096usize;
    let mut max = 64 << 20;
    let mut seconds = 0.2f64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--min" => min = value()?.parse()?,
            "--max" => max = value()?.parse()?,
            "--seconds" => seconds = value()?.parse()?,
            other => return Err(format!("unknown option `{other}` (--min BYTES, --max BYTES, --seconds S)").into()),
        }
    }
    let _mpi = mpi::init()?;
    let mpi_world = mpi::world().ok_or("MPI is not initialized")?;
    let world: Arc<dyn Transport> = Arc::new(mpi::world().ok_or("MPI is not initialized")?);
    let (rank, p) = (world.rank(), world.size());
    if rank == 0 {
        println!(
            "collectives between {p} processes (one replica each; {} on this host): ours (a Session::run of the op) vs \
             the MPI library's own call on the same bytes",
            mpi_world.host_size()
        );
        println!(
            "{:>15} {:>10} {:>12} {:>12} {:>10} {:>10} {:>8}",
            "", "bytes", "ours us", "MPI us", "ours GB/s", "MPI GB/s", "ratio"
        );
    }
    for kind in [Kind::AllReduce, Kind::AllGather, Kind::ReduceScatter] {
        let mut bytes = min.max(4 * p);
        while bytes <= max {
            let n = bytes / 4 / p * p;
            let k = ((seconds * 2e9 / bytes as f64) as usize).clamp(3, 5000);
            let mut s = session(kind, n, &world)?;
            let send = vec![1.0f32; n];
            let mut recv = vec![0.0f32; n];
            let send_part: Vec<u8> = send[..n / p].iter().flat_map(|f| f.to_le_bytes()).collect();
            let mut gathered = vec![0u8; 4 * n];
            let mut scattered = vec![0.0f32; n / p];
            let mut theirs = || {
                match kind {
                    Kind::AllReduce => mpi::all_reduce_sum_f32(&mpi_world, &send, &mut recv),
                    Kind::AllGather => mpi::all_gather_bytes(&mpi_world, &send_part, &mut gathered),
                    Kind::ReduceScatter => mpi::reduce_scatter_sum_f32(&mpi_world, &send, &mut scattered),
                }
                Ok(())
            };
            let (ours, theirs) = s.scope(|s| {
                s.run(&Default::default())?; // warm up
                theirs()?;
                alternate(&mpi_world, k, || Ok(s.run(&Default::default()).map(|_| ())?), &mut theirs)
            })?;
            if rank == 0 {
                let gbs = |t: f64| (4 * n) as f64 / t / 1e9;
                println!(
                    "{:>15} {:>10} {:>12.1} {:>12.1} {:>10.2} {:>10.2} {:>7.2}x",
                    kind.name(),
                    4 * n,
                    ours * 1e6,
                    theirs * 1e6,
                    gbs(ours),
                    gbs(theirs),
                    ours / theirs
                );
            }
            bytes *= 4;
        }
    }
    if rank == 0 {
        println!("ratio: our time over MPI's (1.00x = the same; the acceptance is at most 1.10x above 1 MiB)");
    }
    Ok(())
}
