// A variable plus a constant, stored to the host: the smallest complete program.
use popxl::{ops, HostArray, Ir};
use popxl_session::{Inputs, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ir = Ir::new();
    let out = {
        let _main = ir.main_graph().enter(); // `with ir.main_graph:`
        let p = popxl::variable(3i32, "p")?;
        let q = popxl::constant(5i32, "q")?;
        let total = &p + &q;
        let out = popxl::d2h_stream(total.shape(), total.dtype(), "total")?;
        ops::host_store(&out, &total)?;
        out
    }; // the guard leaves the graph here

    let mut session = Session::new(ir, "cpu")?; // or "ipu_model"
    let outputs = session.enter()?.run(&Inputs::new())?; // `with session: session.run()`
    assert_eq!(outputs[&out], HostArray::from(8i32));
    Ok(())
}
