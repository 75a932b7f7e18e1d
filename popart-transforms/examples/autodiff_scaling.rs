//! Compile-time scaling of a training step: build + autodiff + prepare + lower the
//! gradient of an L-layer MLP, for comparison with JAX's trace + lower + compile of
//! `jit(grad(loss))` (`/work/shared/bench/jax_compile_scaling.py`).
//!
//! Model (as the JAX script): `h = relu(h @ W_i + b_i)` for `L` layers, `W_i` 256x256,
//! `b_i` 256, input `[32, 256]`, scalar loss `mean(h_L²)`. PopXL style: the layers
//! are one subgraph `mlp(x, W.., b..) -> loss`, called from the main graph with the
//! parameters as variables; `autodiff(mlp, grads_required = params)`; the gradient
//! graph is called with a seed of 1 and `inputs_dict` of the forward call, and each
//! gradient feeds an SGD update `W -= 0.01 dW` so that nothing is pruned.
//!
//! ```text
//! cargo run --release -p popart-transforms --example autodiff_scaling [L ...]
//! ```
//! Default depths: 10 100 1000 10000. `--no-lower` skips lowering.
//!
//! `RUST_LOG=debug` (any `tracing` filter, e.g. `RUST_LOG=popart_transforms=debug`)
//! logs the preparation pipeline and each pass's wall time to stderr.
//!
//! The parameters take 257 KiB a layer (25 GiB at L=100,000), allocated zeroed
//! (and, with `--no-lower`, never read). glibc's allocator may commit part of them (a heap chunk is
//! cleared by `calloc`); at L=100,000 run with
//! `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536 ... 100000 --no-lower`, which
//! leaves them as untouched zero pages (6 GB resident; without it 1.5 GB at
//! L=10,000, so some 15 GB at L=100,000).

use std::error::Error;
use std::time::{Duration, Instant};

use popart_ir::{AttrValue, Attributes, DataType, GraphId, HostTensor, Ir, TensorId, TensorInfo, TensorKind};
use popart_transforms::autodiff::{autodiff, CallSite, GradGraphInfos};

const WIDTH: usize = 256;
const BATCH: usize = 32;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

fn out0(ir: &Ir, g: GraphId, op: popart_ir::OpId) -> TensorId {
    ir.graph(g).unwrap().op(op).unwrap().output(0).unwrap()
}

/// The forward subgraph `mlp(x, W0, b0, .., W_{L-1}, b_{L-1}) -> loss`; returns it and its parameter inputs.
fn build_mlp(ir: &mut Ir, layers: usize) -> Result<(GraphId, Vec<TensorId>)> {
    let g = ir.create_graph("mlp")?;
    let f = |s: &[usize]| TensorInfo::new(DataType::Float32, s);
    let mut h = ir.graph_mut(g)?.add_input("x", f(&[BATCH, WIDTH]))?;
    let mut params = Vec::with_capacity(2 * layers);
    for i in 0..layers {
        let w = ir.graph_mut(g)?.add_input(&format!("W{i}"), f(&[WIDTH, WIDTH]))?;
        let b = ir.graph_mut(g)?.add_input(&format!("b{i}"), f(&[WIDTH]))?;
        params.extend([w, b]);
        let mm = ir.create_op(g, "MatMul", Attributes::new(), &[(0, h), (1, w)], "matmul")?;
        let add = ir.create_op(g, "Add", Attributes::new(), &[(0, out0(ir, g, mm)), (1, b)], "add")?;
        let relu = ir.create_op(g, "Relu", Attributes::new(), &[(0, out0(ir, g, add))], "relu")?;
        h = out0(ir, g, relu);
    }
    let sq = ir.create_op(g, "Mul", Attributes::new(), &[(0, h), (1, h)], "square")?;
    let loss = ir.create_op(g, "ReduceMean", Attributes::new(), &[(0, out0(ir, g, sq))], "loss")?;
    let loss = out0(ir, g, loss);
    ir.graph_mut(g)?.add_output(loss)?;
    Ok((g, params))
}

#[derive(Default)]
struct Times {
    build: Duration,
    autodiff: Duration,
    wire: Duration,
    prepare: Duration,
    lower: Duration,
}

fn run(layers: usize, lower: bool) -> Result<(Times, usize, usize)> {
    let mut t = Times::default();
    // Parameter data exists before tracing starts, as in the JAX script.
    let f = |s: &[usize]| TensorInfo::new(DataType::Float32, s);
    let mut data: Vec<HostTensor> = (0..layers)
        .flat_map(|_| [HostTensor::zeros(f(&[WIDTH, WIDTH])), HostTensor::zeros(f(&[WIDTH]))])
        .rev()
        .collect();
    let start = Instant::now();
    let mut ir = Ir::new();
    let main = ir.main_graph_id();
    let (mlp, params) = build_mlp(&mut ir, layers)?;
    // Main graph: the input as a constant, parameters as (zero) variables, the forward call.
    let x_info = TensorInfo::new(DataType::Float32, [BATCH, WIDTH]);
    let x = ir.main_graph_mut().add_tensor("x", x_info.clone(), TensorKind::Constant(HostTensor::zeros(x_info)))?;
    let mut call_ins = vec![(0u32, x)];
    let mut vars = Vec::with_capacity(params.len());
    for (k, &p) in params.iter().enumerate() {
        let (name, info) = {
            let t = ir.graph(mlp)?.tensor(p)?;
            (t.name.clone(), t.info.clone())
        };
        let v = ir.main_graph_mut().add_tensor(
            &name,
            info,
            TensorKind::Variable(data.pop().expect("one per parameter")),
        )?;
        vars.push(v);
        call_ins.push((k as u32 + 1, v));
    }
    let fwd_call =
        ir.create_op(main, "Call", Attributes::new().with("graph", AttrValue::Graph(mlp)), &call_ins, "mlp")?;
    t.build = start.elapsed();

    let start = Instant::now();
    let info = autodiff(&mut ir, mlp, None, Some(&params), &GradGraphInfos::new(), false)?.grad_info;
    t.autodiff = start.elapsed();

    let start = Instant::now();
    let seed_info = TensorInfo::new(DataType::Float32, []);
    let seed = ir.main_graph_mut().add_tensor(
        "seed",
        seed_info.clone(),
        TensorKind::Constant(HostTensor::from_f64_values(DataType::Float32, &[], &[1.0])),
    )?;
    let mut grad_ins = vec![(0u32, seed)];
    for (k, (_, parent)) in info.inputs_dict(&ir, CallSite { graph: main, op: fwd_call })?.into_iter().enumerate() {
        grad_ins.push((k as u32 + 1, parent));
    }
    let grad_call = ir.create_op(
        main,
        "Call",
        Attributes::new().with("graph", AttrValue::Graph(info.graph)),
        &grad_ins,
        "mlp_grad",
    )?;
    let sgd = Attributes::new().with("b", AttrValue::Float(-0.01));
    let grads: Vec<TensorId> = ir.graph(main)?.op(grad_call)?.outputs().tensors().collect();
    for (&v, &dv) in vars.iter().zip(&grads) {
        ir.create_op(main, "ScaledAddInplace", sgd.clone(), &[(0, v), (1, dv)], "sgd")?;
    }
    t.wire = start.elapsed();

    let start = Instant::now();
    popart_transforms::prepare::prepare(&mut ir)?;
    t.prepare = start.elapsed();

    if lower {
        let start = Instant::now();
        let exe = popart_lower::lower(&ir)?;
        t.lower = start.elapsed();
        std::hint::black_box(&exe);
    }
    let fwd_ops = ir.graph(mlp)?.num_ops();
    let grad_ops = ir.graph(info.graph)?.num_ops();
    Ok((t, fwd_ops, grad_ops))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> Result<()> {
    // Silent unless RUST_LOG asks (e.g. RUST_LOG=debug: the pipeline's passes and times).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let lower = !std::env::args().any(|a| a == "--no-lower");
    let depths: Vec<usize> = {
        let args: Vec<usize> = std::env::args()
            .skip(1)
            .filter(|a| a != "--no-lower")
            .map(|a| a.parse())
            .collect::<std::result::Result<_, _>>()?;
        if args.is_empty() {
            vec![10, 100, 1000, 10000]
        } else {
            args
        }
    };
    // JAX trace + lower + compile of jit(grad(loss)) on this machine (issue 5).
    let jax = |l: usize| match l {
        10 => Some(0.13),
        100 => Some(0.43),
        1000 => Some(6.75),
        _ => None,
    };
    println!(
        "{:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "L",
        "fwd ops",
        "grad ops",
        "build ms",
        "autodiff",
        "wire ms",
        "prepare",
        "lower ms",
        "total ms",
        "us/layer",
        "vs JAX"
    );
    run(10, lower)?; // warm-up (registry, allocator)
    for l in depths {
        let (t, fwd_ops, grad_ops) = run(l, lower)?;
        let total = t.build + t.autodiff + t.wire + t.prepare + t.lower;
        let ratio = jax(l).map_or_else(|| "-".to_string(), |j| format!("{:.0}x", j / total.as_secs_f64()));
        println!(
            "{:>6} {:>9} {:>9} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.1} {:>9}",
            l,
            fwd_ops,
            grad_ops,
            ms(t.build),
            ms(t.autodiff),
            ms(t.wire),
            ms(t.prepare),
            ms(t.lower),
            ms(total),
            total.as_secs_f64() * 1e6 / l as f64,
            ratio
        );
    }
    Ok(())
}
