//! Sessions move between threads: an IR built with `popxl` on one thread runs
//! in a session on another with the same results, and sessions of several IRs
//! running on parallel threads (sharing the `cpu` worker team) give the results
//! of running them one after the other. `popxl` handles are `Send + Sync`: a
//! graph started on one thread is extended on another.

use std::sync::{Arc, Barrier};

use ndarray::{Array1, Array2};
use popxl::{ops, HostArray, Ir};
use popxl_session::{Inputs, Session, SessionError};

fn assert_send<T: Send>() {}

#[test]
fn sessions_and_their_errors_are_send() {
    assert_send::<Session>();
    assert_send::<SessionError>();
    assert_send::<popxl_session::SessionOptions>();
    assert_send::<HostArray>();
}

const BATCH: usize = 64;
const IN: usize = 128;
const OUT: usize = 64;
const LR: f64 = 0.05;

/// A deterministic pseudo-random matrix (no RNG crate needed).
fn data(rows: usize, cols: usize, seed: u64) -> Array2<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    Array2::from_shape_simple_fn((rows, cols), || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    })
}

/// One SGD step of linear regression `y = x W + b` with a mean-squared loss and
/// hand-written gradients; `x` and the target stream in, the loss streams out.
/// The matmuls (64x128x64) are large enough to be split over the worker team.
fn training_ir(seed: u64) -> Ir {
    let ir = Ir::new();
    ir.main_graph()
        .with(|| -> popxl::Result<()> {
            let xs = popxl::h2d_stream([BATCH, IN], popxl::float32, "x")?;
            let ts = popxl::h2d_stream([BATCH, OUT], popxl::float32, "target")?;
            let w = popxl::variable(data(IN, OUT, seed), "W")?;
            let b = popxl::variable(Array1::<f32>::zeros(OUT), "b")?;
            let x = ops::host_load(&xs, "x")?;
            let t = ops::host_load(&ts, "target")?;
            let e = &(&x.matmul(&w)? + &b) - &t;
            let loss = ops::mean(&(&e * &e), &[], false)?;
            let scale = 2.0 / (BATCH * OUT) as f64;
            let dw = &x.t()?.matmul(&e)? * scale;
            let db = &ops::sum(&e, &[0], false)? * scale;
            ops::scaled_add_(&w, &dw, 1.0, -LR)?;
            ops::scaled_add_(&b, &db, 1.0, -LR)?;
            let out = popxl::d2h_stream([], popxl::float32, "loss")?;
            ops::host_store(&out, &loss)?;
            Ok(())
        })
        .unwrap();
    ir
}

/// The losses of every step, and the final weights and bias.
#[derive(Debug, PartialEq)]
struct Trained {
    losses: Vec<HostArray>,
    w: HostArray,
    b: HostArray,
}

/// Train `steps` steps with the session's own handles (which work on any
/// thread): the streams by name from `expected_inputs`/the outputs, the
/// variables by name.
fn train(session: &mut Session, seed: u64, steps: usize) -> Trained {
    let streams = session.expected_inputs();
    let by_name = |name: &str| streams.iter().find(|s| s.name() == name).unwrap().clone();
    let (x, target) = (by_name("x"), by_name("target"));
    let mut losses = Vec::with_capacity(steps);
    let (w, b) = (session.get_tensor("W").unwrap(), session.get_tensor("b").unwrap());
    session
        .scope(|s| {
            for step in 0..steps as u64 {
                let inputs: Inputs = [
                    (x.clone(), HostArray::from(data(BATCH, IN, seed * 1000 + step))),
                    (target.clone(), HostArray::from(data(BATCH, OUT, seed * 1000 + step + 500))),
                ]
                .into();
                let outputs = s.run(&inputs)?;
                let (_, loss) = outputs.into_iter().next().unwrap();
                losses.push(loss);
            }
            Ok::<_, SessionError>(())
        })
        .unwrap();
    let w = session.get_tensor_data(&w).unwrap();
    let b = session.get_tensor_data(&b).unwrap();
    Trained { losses, w, b }
}

#[test]
fn handles_are_shared_between_building_threads() {
    let ir = Ir::new();
    let main = ir.main_graph();
    let x = main.with(|| popxl::constant(ndarray::arr1(&[1.0f32, -2.0, 3.0]), "x")).unwrap();
    // Another thread enters the same graph (its own building context) and adds ops
    // reading the tensor made here, while this thread reads the IR.
    let (y, d2h) = std::thread::scope(|s| {
        let t = s.spawn(|| {
            let _g = main.enter();
            let y = ops::relu(&x).unwrap();
            let d2h = popxl::d2h_stream(y.shape(), y.dtype(), "y").unwrap();
            ops::host_store(&d2h, &y).unwrap();
            (y, d2h)
        });
        assert_eq!(x.shape(), &[3]);
        t.join().unwrap()
    });
    assert!(main.contains(&y));
    let mut session = Session::new(ir, "cpu").unwrap();
    let outs = session.scope(|s| s.run(&Inputs::default())).unwrap();
    assert_eq!(outs[&d2h].to_f64_vec(), vec![1.0, 0.0, 3.0]);
}

#[test]
fn build_on_one_thread_run_on_another() {
    let steps = 20;
    let on_this_thread = train(&mut Session::new(training_ir(1), "cpu").unwrap(), 1, steps);
    assert!(on_this_thread.losses.last().unwrap().to_f64_vec()[0] < on_this_thread.losses[0].to_f64_vec()[0]);

    // Build and prepare here, keep the IR's handles here, run there.
    let ir = training_ir(1);
    let w_here = ir.main_graph().get_tensor("W").unwrap();
    let session = Session::new(ir.clone(), "cpu").unwrap();
    assert_eq!(session.ir_id(), ir.id());
    let (session, on_another_thread) = std::thread::spawn(move || {
        let mut session = session;
        let trained = train(&mut session, 1, steps);
        (session, trained)
    })
    .join()
    .unwrap();
    assert_eq!(on_another_thread, on_this_thread);

    // Back here: the IR's own handles work with the session, and it stays frozen.
    let mut session = session;
    assert_eq!(session.get_tensor("W").unwrap(), w_here);
    assert_eq!(session.get_tensor_data(&w_here).unwrap(), on_this_thread.w);
    assert!(ir.is_frozen());
    let err = ir.main_graph().with(|| popxl::constant(1.0f32, "late")).unwrap_err();
    assert!(matches!(err, popxl::PopXlError::IrFrozen { .. }), "{err}");
    // A handle of another IR is still refused.
    let other = training_ir(2);
    let foreign = other.main_graph().get_tensor("W").unwrap();
    assert!(matches!(session.get_tensor_data(&foreign), Err(SessionError::ForeignTensor { .. })));
}

#[test]
fn the_session_outlives_the_ir_handles() {
    let (session, expected) = {
        let ir = training_ir(3);
        let w = ir.main_graph().get_tensor("W").unwrap();
        let expected = w.kind().unwrap();
        (Session::new(ir, "cpu").unwrap(), expected)
    };
    // No `popxl::Ir` handle is left: the session works on its own copy.
    let mut session = session;
    let w = session.get_tensor("W").unwrap();
    let popart_ir::TensorKind::Variable(init) = expected else { panic!("W is a variable") };
    assert_eq!(session.get_tensor_data(&w).unwrap(), HostArray::from_host_tensor(&init).unwrap());
    let trained = train(&mut session, 3, 2);
    assert_eq!(trained.losses.len(), 2);
}

#[test]
fn parallel_sessions_match_sequential_runs() {
    const SESSIONS: u64 = 4;
    const STEPS: usize = 200;
    let sequential: Vec<Trained> =
        (0..SESSIONS).map(|i| train(&mut Session::new(training_ir(10 + i), "cpu").unwrap(), 10 + i, STEPS)).collect();

    // Build every IR and session here, then run them all at once.
    let sessions: Vec<Session> = (0..SESSIONS).map(|i| Session::new(training_ir(10 + i), "cpu").unwrap()).collect();
    let start = Arc::new(Barrier::new(SESSIONS as usize));
    let threads: Vec<_> = sessions
        .into_iter()
        .zip(10..)
        .map(|(mut session, seed)| {
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                train(&mut session, seed, STEPS)
            })
        })
        .collect();
    let parallel: Vec<Trained> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(parallel, sequential);
}
