// A loop: `ops::repeat` runs a graph `count` times; output k feeds input k of the next iteration,
// and inputs given by `inputs_dict` (here the step) stay the same in every iteration.
use ndarray::array;
use popxl::{ops, HostArray, Ir, Tensor};
use popxl_session::{Inputs, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ir = Ir::new();
    let _main = ir.main_graph().enter();
    let x = popxl::constant(array![[1.0f32, 2.0], [3.0, 4.0]], "x")?;
    let step = popxl::variable(array![[0.5f32, 0.5], [1.0, 1.0]], "step")?;

    let add_step = ir.create_graph(|x: Tensor, step: Tensor| &x + &step, (&x, &step))?;
    let inputs = add_step.inputs()?;
    let y = ops::repeat(&add_step, 4, &[&x], &[(&inputs[1], &step)])?.remove(0);
    let out = popxl::d2h_stream(y.shape(), y.dtype(), "y")?;
    ops::host_store(&out, &y)?;
    drop(_main);

    let mut session = Session::new(ir, "cpu")?;
    let outputs = session.enter()?.run(&Inputs::new())?;
    assert_eq!(outputs[&out], HostArray::from(array![[3.0f32, 4.0], [7.0, 8.0]]));
    Ok(())
}
