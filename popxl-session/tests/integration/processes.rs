//! Replicas across processes (PopXL's `popdist`), with the processes simulated
//! by threads of this test (`ThreadTransport`: each "process" has its own
//! session, its own replicas and its own share of the host data; they meet
//! only through the transport, as MPI processes do). The same tests run over
//! MPI in CI (`tests/mpi`, under `mpirun -n 2`).
//!
//! The results do not depend on how the replicas are placed: P processes of
//! R/P replicas give the same bytes as one process of R replicas.

use std::sync::Arc;
use std::time::{Duration, Instant};

use popxl::ops::collectives::{self, CollectiveOp};
use popxl::{HostArray, Ir};
use popxl_session::cpu::transport::{SpanError, ThreadTransport, Transport};
use popxl_session::{Session, SessionError, SessionOptions};

use super::resume::mnist::{app, data};

/// Run `f(rank, transport)` on `n` threads, one per simulated process.
fn processes<T: Send>(n: usize, f: impl Fn(usize, Arc<dyn Transport>) -> T + Sync) -> Vec<T> {
    let ends = ThreadTransport::group(n);
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = ends
            .into_iter()
            .enumerate()
            .map(|(r, t)| s.spawn(move || f(r, Arc::new(t) as Arc<dyn Transport>)))
            .collect();
        handles.into_iter().map(|h| h.join().expect("a process thread panicked")).collect()
    })
}

/// The mnist example's weights after `steps` steps with `replicas` replicas
/// split over `procs` processes (every process's copy).
fn mnist_weights(procs: usize, replicas: usize, rts: bool, steps: usize) -> Vec<Vec<(String, Vec<u8>)>> {
    let base = app::Config {
        limit_batches: Some(steps),
        progress: false,
        batch: 16,
        hidden: 24,
        lr: 0.05,
        replicas,
        rts,
        ..app::Config::default()
    };
    let train_set = data::load_split(&base.data, "train").expect("bundled MNIST train split");
    let run = |transport: Option<Arc<dyn Transport>>| {
        let cfg = app::Config { transport, ..base.clone() };
        let report = app::train(&cfg, &train_set).expect("training runs");
        report.params.into_iter().map(|(n, a)| (n, a.to_host_tensor().bytes)).collect::<Vec<_>>()
    };
    if procs == 1 {
        return vec![run(None)];
    }
    processes(procs, |_, t| run(Some(t)))
}

#[test]
fn mnist_weights_do_not_depend_on_the_processes() {
    // 2 processes x 1 replica = 1 process x 2 replicas; 2 x 2 = 1 x 4; with
    // replicated tensor sharding too (all-gather, reduce-scatter).
    for (procs, replicas, rts) in [(2, 2, false), (2, 4, false), (2, 2, true), (4, 4, false)] {
        let one = mnist_weights(1, replicas, rts, 6);
        let split = mnist_weights(procs, replicas, rts, 6);
        assert_eq!(split.len(), procs);
        for (rank, w) in split.iter().enumerate() {
            assert_eq!(w.len(), one[0].len());
            for ((name, a), (_, b)) in w.iter().zip(&one[0]) {
                assert!(
                    a == b,
                    "{procs} processes x {} replicas (rts {rts}), rank {rank}: `{name}` differs",
                    replicas / procs
                );
            }
        }
        // Training moved the weights (the comparison means something).
        let init = mnist_weights(1, replicas, rts, 0);
        assert!(init[0].iter().zip(&one[0]).any(|((_, a), (_, b))| a != b));
    }
}

#[path = "../../examples/support/collectives_program.rs"]
mod collectives_program;

/// [`collectives_program::program`] for process `rank` of `procs` (one process: not split).
fn collectives_ir(procs: usize, rank: usize) -> (Ir, popxl::HostToDeviceStream, Vec<popxl::DeviceToHostStream>) {
    collectives_program::program((procs > 1).then_some((rank, procs))).unwrap()
}

#[test]
fn collectives_span_processes_with_every_host_layout() {
    let data: Vec<f32> = (0..24).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let global = || HostArray::from(ndarray::Array2::from_shape_vec((4, 6), data.clone()).unwrap().into_dyn());
    // One process of 4 replicas: the reference.
    let (ir, x, outs) = collectives_ir(1, 0);
    let mut s = Session::new(ir, "cpu").unwrap();
    let reference = s.scope(|s| s.run(&[(x, global())].into())).unwrap();
    let reference: Vec<Vec<u8>> = outs.iter().map(|o| reference[o].to_host_tensor().bytes).collect();
    // Two processes of 2 replicas, given every replica's data (each takes its
    // slice) or only their own replicas'.
    for own_slice in [false, true] {
        let got = processes(2, |rank, t| {
            let (ir, x, outs) = collectives_ir(2, rank);
            let opts = SessionOptions { transport: Some(t), ..SessionOptions::default() };
            let mut s = Session::with_options(ir, "cpu", opts).unwrap();
            assert_eq!((s.replication_factor(), s.instance_replication_factor()), (4, 2));
            assert_eq!(s.local_replicas(), 2 * rank..2 * rank + 2);
            let input = if own_slice {
                let mine = data[12 * rank..12 * rank + 12].to_vec();
                HostArray::from(ndarray::Array2::from_shape_vec((2, 6), mine).unwrap().into_dyn())
            } else {
                global()
            };
            let out = s.scope(|s| s.run(&[(x, input)].into())).unwrap();
            outs.iter().map(|o| out[o].to_host_tensor().bytes).collect::<Vec<_>>()
        });
        for (rank, outs) in got.iter().enumerate() {
            for (o, (mine, all)) in outs.iter().zip(&reference).enumerate() {
                // Each process's outputs are its replicas' rows of the reference.
                let row = all.len() / 4;
                assert_eq!(mine, &all[2 * rank * row..(2 * rank + 2) * row], "output {o}, rank {rank}");
            }
        }
    }
}

#[test]
fn a_failing_process_stops_every_process_with_an_error() {
    // Process 1 gives an input of the wrong shape (a mistake on one rank only):
    // it reports its own error, the other reports rank 1's failure, and
    // neither waits. Then both run again, correctly.
    let start = Instant::now();
    let got = processes(2, |rank, t| {
        let (ir, x, _) = collectives_ir(2, rank);
        let opts = SessionOptions { transport: Some(t), ..SessionOptions::default() };
        let mut s = Session::with_options(ir, "cpu", opts).unwrap();
        let good = HostArray::from(ndarray::Array2::<f32>::zeros((2, 6)).into_dyn());
        let bad = HostArray::from(ndarray::Array2::<f32>::zeros((3, 5)).into_dyn());
        let input = if rank == 1 { bad } else { good.clone() };
        s.scope(|s| {
            let first = s.run(&[(x.clone(), input)].into()).map(|_| ());
            let again = s.run(&[(x, good)].into()).map(|_| ());
            Ok::<_, SessionError>((first, again))
        })
        .unwrap()
    });
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(matches!(got[1].0, Err(SessionError::WrongReplicaDim { got: 3, .. })), "{:?}", got[1].0);
    assert_eq!(got[0].0, Err(SessionError::Processes(SpanError::RankFailed { rank: 1, size: 2 })));
    assert!(got.iter().all(|(_, again)| again.is_ok()), "{got:?}");

    // A Session::new failure on one process: every process's Session::new fails.
    let got = processes(2, |rank, t| {
        let (ir, _, _) = collectives_ir(2, rank);
        let opts = SessionOptions { transport: Some(t), ..SessionOptions::default() };
        Session::with_options(ir, if rank == 0 { "tpu" } else { "cpu" }, opts).map(|_| ())
    });
    assert!(matches!(got[0], Err(SessionError::UnknownDevice(_))), "{:?}", got[0]);
    assert_eq!(got[1], Err(SessionError::Processes(SpanError::RankFailed { rank: 0, size: 2 })));
}

#[test]
fn spanning_needs_a_matching_transport() {
    let (ir, _, _) = collectives_ir(2, 0);
    assert_eq!(Session::new(ir, "cpu").unwrap_err(), SessionError::NoTransport { processes: 2 });
    let (ir, _, _) = collectives_ir(2, 1);
    let t: Arc<dyn Transport> = Arc::new(ThreadTransport::group(2).remove(0));
    let opts = SessionOptions { transport: Some(t), ..SessionOptions::default() };
    assert!(matches!(Session::with_options(ir, "cpu", opts), Err(SessionError::Instances { .. })));
    let ir = Ir::new();
    ir.set_replication_factor(3).unwrap();
    ir.set_instances(0, 2).unwrap();
    assert!(matches!(Session::new(ir, "cpu"), Err(SessionError::Instances { .. })));
}

#[test]
fn a_run_failing_on_one_process_restores_every_process() {
    // With checked indices the program may fail while running, so the
    // processes agree before every collective: process 1 gathers an
    // out-of-range row after both have updated `w`. Its error is its own, the
    // other's is process 1's failure, and both keep `w` as before the run; the
    // next run, with good indices, completes on both.
    let got = processes(2, |rank, t| {
        let ir = Ir::new();
        ir.set_replication_factor(2).unwrap();
        ir.set_instances(rank, 2).unwrap();
        let (w, idx) = ir
            .main_graph()
            .with(|| -> popxl::Result<_> {
                let _s = popxl::in_sequence(true);
                let w = popxl::variable(HostArray::from(ndarray::Array1::from_elem(4, 1.0f32).into_dyn()), "w")?;
                let table: Vec<f32> = (0..12).map(|i| i as f32).collect();
                let table = HostArray::from(ndarray::Array2::from_shape_vec((3, 4), table).unwrap().into_dyn());
                let table = popxl::variable(table, "table")?;
                let idx = popxl::h2d_stream([1], popxl::int32, "idx")?;
                let i = popxl::ops::host_load(&idx, "i")?;
                popxl::ops::add_(&w, &popxl::constant(1.0f32, "one")?)?;
                let row = popxl::ops::gather(&table, &i, 0)?;
                let sum = collectives::replicated_all_reduce(&row, CollectiveOp::Add, None)?;
                popxl::ops::add_(&w, &popxl::ops::reshape(&sum, &[4])?)?;
                Ok((w, idx))
            })
            .unwrap();
        let opts = SessionOptions { transport: Some(t), check_indices: true, ..SessionOptions::default() };
        let mut s = Session::with_options(ir, "cpu", opts).unwrap();
        let index = |i: i32| HostArray::from(ndarray::Array1::from_elem(1, i).into_dyn());
        s.scope(|s| {
            let bad = s.run(&[(idx.clone(), index(if rank == 1 { 7 } else { 0 }))].into()).map(|_| ());
            let kept = s.get_tensor_data(&w)?.to_host_tensor().bytes;
            let good = s.run(&[(idx, index(rank as i32))].into()).map(|_| ());
            let after = s.get_tensor_data(&w)?.as_f32().unwrap().iter().copied().collect::<Vec<f32>>();
            Ok::<_, SessionError>((bad, kept, good, after))
        })
        .unwrap()
    });
    let ones: Vec<u8> = (0..4).flat_map(|_| 1.0f32.to_le_bytes()).collect();
    assert!(matches!(got[1].0, Err(SessionError::IndexOutOfRange { .. })), "{:?}", got[1].0);
    assert_eq!(got[0].0, Err(SessionError::Processes(SpanError::RankFailed { rank: 1, size: 2 })));
    for (rank, (_, kept, good, after)) in got.iter().enumerate() {
        assert_eq!(kept, &ones, "rank {rank}: w changed by the failed run");
        assert!(good.is_ok(), "rank {rank}: {good:?}");
        // w = 1 + 1 + (row 0 + row 1) = 2 + [4, 6, 8, 10].
        assert_eq!(after, &[6.0, 8.0, 10.0, 12.0], "rank {rank}");
    }
}
