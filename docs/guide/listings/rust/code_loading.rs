// Code loading: `remote_code_load` says when a graph's code must be in tile memory; the
// lowering keeps it there from the load to the graph's last call before the next load.
// Run on `ipu_model`, which also models an IPU's memory and time.
use ndarray::array;
use popxl::{ops, HostArray, Ir, Tensor};
use popxl_session::{Inputs, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ir = Ir::new();
    let _main = ir.main_graph().enter();
    let _seq = popxl::in_sequence(true);
    let x = popxl::variable(array![1.0f32, 2.0, 3.0], "x")?;
    let square = ir.create_graph(|t: Tensor| &t * &t, &x)?;
    let double = ir.create_graph(|t: Tensor| &t + &t, &x)?;

    ops::remote_code_load(&square, "executable")?; // square's code is live from here...
    let y = ops::call(&square, &[&x], &[])?.remove(0);
    let y = ops::call(&square, &[&y], &[])?.remove(0); // ...to its last call
    ops::remote_code_load(&double, "executable")?; // then double's
    let z = ops::call(&double, &[&y], &[])?.remove(0);
    let out = popxl::d2h_stream(z.shape(), z.dtype(), "z")?;
    ops::host_store(&out, &z)?;
    drop((_seq, _main));

    let mut session = Session::new(ir, "ipu_model")?;
    let outputs = session.enter()?.run(&Inputs::new())?;
    assert_eq!(outputs[&out], HostArray::from(array![2.0f32, 32.0, 162.0])); // 2 x^4
    // The lowered program knows when each graph's code is resident.
    let code = &session.executable().code;
    assert!(!code.is_empty(), "code liveness intervals of the loaded graphs");
    Ok(())
}
