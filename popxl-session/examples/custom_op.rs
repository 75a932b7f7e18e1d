//! A custom op end to end, from outside the workspace's library crates: a leaky
//! ReLU with an `alpha` attribute.
//!
//! 1. Its definition ([`OpDef`]: shape rule, grad rule) and its gradient op's;
//! 2. their `cpu` kernels ([`Kernel`], built once per op by a [`KernelBuilder`]);
//! 3. one registration call for each op ([`popxl_session::register_custom_op`]);
//! 4. a `popxl` function for it ([`OpBuilder`]), a graph using it, `autodiff`;
//! 5. a [`Session`] running forward and backward, checked against values computed
//!    here independently;
//! 6. a custom pattern in the preparation pipeline that rewrites `alpha = 0`
//!    leaky ReLUs into the builtin `Relu`;
//! 7. the IR round-tripped through the text format.
//!
//! `cargo run --release --example custom_op` (add `RUST_LOG=debug` to see the pipeline).

use std::collections::HashMap;

use popart_ir::{
    op_attrs, AttrSpec, GradOpSpec, GradRule, GradSource, InferContext, Ir as CoreIr, OpAttrs, OpDef,
    Result as IrResult, TensorInfo,
};
use popxl::ops::{self, OpBuilder};
use popxl::{HostArray, Tensor};
use popxl_session::cpu::kernel::{Kernel, KernelArgs, KernelBuilder, KernelError, KernelResult, KernelSpec};
use popxl_session::{Session, SessionOptions};

// ---------------------------------------------------------------------------
// 1. The op definitions.

op_attrs! {
    /// The attributes of both ops, declared once: the IR checks every op
    /// against them, the kernels and the pattern decode them.
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct LeakyAttrs {
        /// The slope below zero.
        alpha: f64,
    }
}

/// `y = x` where `x > 0`, else `alpha * x`.
struct LeakyRelu;

/// `LeakyReluGrad{alpha}(g, x)`: `g` where `x > 0`, else `alpha * g`.
struct LeakyReluGrad;

impl OpDef for LeakyRelu {
    fn op_type(&self) -> &'static str {
        "example.LeakyRelu"
    }

    fn attributes(&self) -> &'static [AttrSpec] {
        LeakyAttrs::SCHEMA
    }

    fn infer(&self, ctx: &InferContext<'_>) -> IrResult<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        if !x.dtype.is_floating_point() {
            return Err(ctx.error(format!("the input must be floating point, got {}", x.dtype)));
        }
        LeakyAttrs::infer(ctx)?;
        Ok(vec![x.clone()])
    }

    fn grad(&self, cx: &popart_ir::GradContext<'_>) -> GradRule {
        // The gradient op takes the forward op's typed attributes.
        let Ok(attrs) = LeakyAttrs::of(cx.op) else { return GradRule::None };
        GradRule::Ops(vec![GradOpSpec {
            op: &LeakyReluGrad,
            attrs: attrs.to_attrs(),
            inputs: vec![(0, GradSource::GradOfOutput(0)), (1, GradSource::FwdInput(0))],
            outputs: vec![(0, 0)],
        }])
    }
}

impl OpDef for LeakyReluGrad {
    fn op_type(&self) -> &'static str {
        "example.LeakyReluGrad"
    }

    fn attributes(&self) -> &'static [AttrSpec] {
        LeakyAttrs::SCHEMA
    }

    fn infer(&self, ctx: &InferContext<'_>) -> IrResult<Vec<TensorInfo>> {
        let (g, x) = (ctx.input(0)?, ctx.input(1)?);
        if g != x {
            return Err(ctx.error(format!("gradient {g} and forward input {x} differ")));
        }
        LeakyAttrs::infer(ctx)?;
        Ok(vec![g.clone()])
    }
}

// ---------------------------------------------------------------------------
// 2. The cpu kernels (float32; anything else is a build-time error).

/// Shared by both kernels: `out[i] = v[i]` where `x[i] > 0`, else `alpha * v[i]`.
struct LeakyKernel {
    n: usize,
    alpha: f32,
    /// Positions of `v` and `x` among the kernel's inputs.
    v: usize,
    x: usize,
}

impl Kernel for LeakyKernel {
    unsafe fn run(&self, args: &KernelArgs<'_>) -> KernelResult {
        // SAFETY: the executor passes buffers of `n` float32 each (checked at build time).
        let (v, x, out) = unsafe {
            (
                std::slice::from_raw_parts(args.inputs[self.v] as *const f32, self.n),
                std::slice::from_raw_parts(args.inputs[self.x] as *const f32, self.n),
                std::slice::from_raw_parts_mut(args.outputs[0] as *mut f32, self.n),
            )
        };
        for ((o, &v), &x) in out.iter_mut().zip(v).zip(x) {
            *o = if x > 0.0 { v } else { self.alpha * v };
        }
        Ok(())
    }
}

fn leaky_kernel(spec: &KernelSpec<'_>, v: usize, x: usize) -> Result<Box<dyn Kernel>, KernelError> {
    let error = |reason: String| KernelError { op_type: spec.op_type().to_string(), reason };
    let info = &spec.outputs.first().ok_or_else(|| error("no output".into()))?.1;
    if info.dtype != popart_ir::DataType::Float32 || spec.inputs.iter().any(|(_, t)| t != info) {
        return Err(error(format!("only float32 of one shape is supported, got {info}")));
    }
    let alpha = LeakyAttrs::from_attrs(spec.attrs).map_err(|e| error(e.to_string()))?.alpha as f32;
    Ok(Box::new(LeakyKernel { n: info.nelms(), alpha, v, x }))
}

/// Forward: `v` and `x` are both input 0.
fn build_leaky_relu(spec: &KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError> {
    leaky_kernel(spec, 0, 0)
}

/// Gradient: `v` is `g` (input 0), `x` is input 1.
fn build_leaky_relu_grad(spec: &KernelSpec<'_>) -> Result<Box<dyn Kernel>, KernelError> {
    leaky_kernel(spec, 0, 1)
}

// ---------------------------------------------------------------------------
// 3. Registration, once per op.

fn register() -> popxl_session::Result<()> {
    static OPS: [(&dyn OpDef, KernelBuilder); 2] =
        [(&LeakyRelu, build_leaky_relu), (&LeakyReluGrad, build_leaky_relu_grad)];
    for (def, kernel) in OPS {
        popxl_session::register_custom_op(def, kernel)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 4. The popxl function.

/// `leaky_relu(x, alpha)` as a `popxl` op function.
fn leaky_relu(x: &Tensor, alpha: f64) -> popxl::Result<Tensor> {
    OpBuilder::new("leaky_relu", &LeakyRelu).input(0, x).typed(&LeakyAttrs { alpha }).create1()
}

/// The reference values, computed here without the op.
fn reference(x: &[f32], w: &[f32], alpha: f32) -> (Vec<f32>, Vec<f32>) {
    let y = x.iter().map(|&x| if x > 0.0 { x } else { alpha * x }).collect();
    let dx = x.iter().zip(w).map(|(&x, &w)| if x > 0.0 { w } else { alpha * w }).collect();
    (y, dx)
}

/// Runs the example (public so that the `tests` crate runs it too).
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `RUST_LOG=debug` shows the preparation pipeline's passes and their times.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    register()?;
    let (alpha, shape) = (0.1, [2usize, 4]);
    let xs: Vec<f32> = vec![-2.0, -0.5, 0.0, 0.25, 1.0, 3.0, -7.5, 0.75];
    let ws: Vec<f32> = (0..8).map(|i| 0.5 + i as f32 * 0.25).collect();

    let ir = popxl::Ir::new();
    let main = ir.main_graph();
    let (x_in, y_out, dx_out, z_out) = {
        let _g = main.enter();
        let x_in = popxl::h2d_stream(shape, popxl::float32, "x")?;
        let x = ops::host_load(&x_in, "x")?;
        // A subgraph using the custom op, differentiated by autodiff.
        let fwd = ir.create_graph(|x: Tensor| leaky_relu(&x, alpha), &x)?;
        let fwd_call = ops::call_with_info(&fwd, &[&x], &[])?;
        let y = fwd_call.parent_output(0)?;
        let bwd = popxl::transforms::autodiff(&fwd, None, None, &HashMap::new(), false)?.grad_info;
        let acts = bwd.inputs_dict(&fwd_call)?;
        let acts: Vec<(&Tensor, &Tensor)> = acts.iter().map(|(k, v)| (k, v)).collect();
        // Gradient of sum(w * y): dy = w.
        let dy = popxl::constant(ndarray::Array2::from_shape_vec(shape, ws.clone())?, "dy")?;
        let bwd_call = ops::call_with_info(&bwd.graph(), &[&dy], &acts)?;
        let dx = bwd_call.parent_output(0)?;
        // alpha = 0: the custom pattern below turns this one into a builtin Relu.
        let z = leaky_relu(&x, 0.0)?;
        let mut outs = Vec::new();
        for (t, name) in [(&y, "y"), (&dx, "dx"), (&z, "z")] {
            let s = popxl::d2h_stream(t.shape(), t.dtype(), name)?;
            ops::host_store(&s, t)?;
            outs.push(s);
        }
        let [y_out, dx_out, z_out]: [_; 3] = outs.try_into().expect("three streams");
        (x_in, y_out, dx_out, z_out)
    };

    // 7. The IR through the text format: print, parse, print again.
    let text = ir.to_text();
    let parsed = popart_ir::text::parse(&text)?;
    let round_trip = popart_ir::text::to_text(&parsed) == text;
    println!(
        "IR text round trip ({} lines): {}",
        text.lines().count(),
        if round_trip { "identical" } else { "DIFFERS" }
    );

    // 6. A custom pattern, run by the session's preparation pipeline.
    let pipeline = popart_transforms::Pipeline::default_for(Default::default()).with_pattern(LeakyReluZeroToRelu);
    println!("preparation pipeline: {pipeline}");
    let options = SessionOptions { pipeline: Some(pipeline), ..SessionOptions::default() };

    // 5. Forward and backward in a session, checked against the reference.
    let mut session = Session::with_options(ir.clone(), "cpu", options)?;
    let relus =
        session.prepared_ir().graphs().flat_map(|g| g.ops()).filter(|op| op.is::<popart_ir::ops::all::Relu>()).count();
    let out = {
        let mut ctx = session.enter()?;
        ctx.run(&HashMap::from([(x_in.clone(), HostArray::from(ndarray::Array2::from_shape_vec(shape, xs.clone())?))]))?
    };
    let (want_y, want_dx) = reference(&xs, &ws, alpha as f32);
    let want_z: Vec<f32> = xs.iter().map(|&x| x.max(0.0)).collect();
    let get = |s| -> Vec<f32> { out[s].as_f32().expect("float32").iter().copied().collect() };
    let mut ok = round_trip && relus == 1;
    for (name, got, want) in [("y", get(&y_out), want_y), ("dx", get(&dx_out), want_dx), ("z", get(&z_out), want_z)] {
        let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        println!("{name:>2} = {got:?}\n     reference {want:?}  (max abs error {err:e})");
        ok &= got.len() == want.len() && err <= 1e-6;
    }
    println!("pattern rewrote the alpha = 0 leaky ReLU into {relus} builtin Relu");
    if !ok {
        return Err("custom op results differ from the reference".into());
    }
    println!("custom op: forward, gradient, pattern and text round trip all check out");
    Ok(())
}

// ---------------------------------------------------------------------------
// 6. The pattern.

/// Rewrites `example.LeakyRelu{alpha = 0}` into the builtin `Relu`.
struct LeakyReluZeroToRelu;

impl popart_transforms::Pass for LeakyReluZeroToRelu {
    fn name(&self) -> &str {
        "leaky-relu-zero-to-relu"
    }

    fn run(&self, ir: &mut CoreIr) -> popart_transforms::Result<popart_transforms::PassOutcome> {
        let mut changed = 0;
        for g in ir.graph_ids() {
            let targets: Vec<_> = ir
                .graph(g)?
                .ops()
                .filter(|op| op.is::<LeakyRelu>() && LeakyAttrs::of(op).is_ok_and(|a| a.alpha == 0.0))
                .map(|op| op.id)
                .collect();
            let graph = ir.graph_mut(g)?;
            for op in targets {
                let name = format!("{}_as_relu", graph.op(op)?.name);
                let relu = graph.add_op(&popart_ir::ops::all::Relu, popart_ir::Attributes::new(), &name);
                graph.replace_op(op, relu)?;
                changed += 1;
            }
        }
        Ok(popart_transforms::PassOutcome::changed(changed > 0))
    }
}
