//! Small models and helpers the categories share.

use ndarray::ArrayD;
use popxl::{ops, DeviceToHostStream, HostArray, HostToDeviceStream, Ir, Tensor};
use popxl_session::{Inputs, Outputs, Session, SessionError};

/// A float32 constant of `shape`, all ones, in the current graph.
pub fn ones(shape: &[usize], name: &str) -> popxl::Result<Tensor> {
    popxl::constant(ArrayD::<f32>::ones(shape), name)
}

/// A float32 variable of `shape`, all ones, in the current graph.
pub fn var_ones(shape: &[usize], name: &str) -> popxl::Result<Tensor> {
    popxl::variable(ArrayD::<f32>::ones(shape), name)
}

/// The training-step model: `x` (h2d float32[2]) is loaded, `y = x + w` is
/// stored to `y`, then `w += x` in place. `w` starts at `[1, 2]`.
pub struct StepModel {
    /// The IR.
    pub ir: Ir,
    /// Input stream `x`.
    pub x: HostToDeviceStream,
    /// Output stream `y`.
    pub y: DeviceToHostStream,
    /// The variable `w`.
    pub w: Tensor,
}

/// Builds [`StepModel`].
pub fn step_model() -> popxl::Result<StepModel> {
    let ir = Ir::new();
    let main = ir.main_graph();
    let _g = main.enter();
    let _s = popxl::in_sequence(true);
    let w = popxl::variable(vec![1.0f32, 2.0], "w")?;
    let x = popxl::h2d_stream([2], popxl::float32, "x")?;
    let xt = ops::host_load(&x, "x_loaded")?;
    let y_t = ops::add(&xt, &w)?;
    let y = popxl::d2h_stream([2], popxl::float32, "y")?;
    ops::host_store(&y, &y_t)?;
    ops::add_(&w, &xt)?;
    drop(_s);
    drop(_g);
    Ok(StepModel { ir, x, y, w })
}

/// Inputs with one array.
pub fn inputs(stream: &HostToDeviceStream, data: impl Into<HostArray>) -> Inputs {
    let mut i = Inputs::new();
    i.insert(stream.clone(), data.into());
    i
}

/// A model storing `f()` (built in the main graph) to a stream `out`; returns
/// the IR and the stream.
pub fn store_model(f: impl FnOnce() -> popxl::Result<Tensor>) -> popxl::Result<(Ir, DeviceToHostStream)> {
    let ir = Ir::new();
    let _g = ir.main_graph().enter();
    let t = f()?;
    let out = popxl::d2h_stream(t.shape(), t.dtype(), "out")?;
    ops::host_store(&out, &t)?;
    drop(_g);
    Ok((ir, out))
}

/// Run a model without inputs once on the cpu and return its outputs.
pub fn run_once(ir: Ir) -> Result<Outputs, SessionError> {
    let mut s = Session::new(ir, "cpu")?;
    s.scope(|s| s.run(&Inputs::new()))
}

/// The values of `out` in `outputs` as f64.
pub fn values(outputs: &Outputs, out: &DeviceToHostStream) -> Vec<f64> {
    outputs.get(out).map(HostArray::to_f64_vec).unwrap_or_default()
}
