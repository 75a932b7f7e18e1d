// A Module whose weight is a graph input connected at the call site, and a graph that
// updates its caller's variable in place through an input passed by reference.
use ndarray::array;
use popxl::{ops, HostArray, Ir, Module, Tensor};
use popxl_session::{Inputs, Session};

/// `x + step`, where `step` is an input the module adds itself (PopXL's `popxl.graph_input`).
#[derive(Default)]
struct AddStep {
    step: Option<Tensor>,
}

impl Module for AddStep {
    type Inputs = Tensor;
    type Outputs = Tensor;
    fn build(&mut self, x: Tensor) -> popxl::Result<Tensor> {
        let step = popxl::graph_input(x.shape(), x.dtype(), "step")?;
        let y = &x + &step;
        self.step = Some(step);
        Ok(y)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ir = Ir::new();
    let _main = ir.main_graph().enter();
    let _seq = popxl::in_sequence(true); // the in-place calls below write `v`, which the first call reads
    let v = popxl::variable(array![1.0f32, 2.0], "v")?;
    let step = popxl::constant(array![10.0f32, 20.0], "step")?;

    let mut module = AddStep::default();
    let add_graph = ir.create_graph(&mut module, &v)?;
    let module_step = module.step.as_ref().ok_or("build sets the step input")?;
    let info = ops::call_with_info(&add_graph, &[&v], &[(module_step, &step)])?;
    assert_eq!(&info.parent_input(1)?, &step);
    assert_eq!(&info.graph_to_parent(module_step)?, &step);
    let y = info.parent_output(0)?;

    // `x` by reference (`popxl.TensorByRef`): `add_` inside writes the caller's variable.
    let increment = ir.create_graph(
        |x: Tensor| -> popxl::Result<()> {
            ops::add_(&x, &popxl::constant(1.0f32, "one")?)?;
            Ok(())
        },
        popxl::TensorByRef(v.clone()),
    )?;
    ops::call(&increment, &[&v], &[])?;
    ops::call(&increment, &[&v], &[])?;
    let out = popxl::d2h_stream(y.shape(), y.dtype(), "y")?;
    ops::host_store(&out, &y)?;
    drop((_seq, _main));

    let mut session = Session::new(ir, "cpu")?;
    let outputs = session.enter()?.run(&Inputs::new())?;
    assert_eq!(outputs[&out], HostArray::from(array![11.0f32, 22.0]));
    assert_eq!(session.get_tensor_data(&v)?, HostArray::from(array![3.0f32, 4.0]));
    Ok(())
}
