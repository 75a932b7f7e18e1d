// Several host transfers per run: `num_host_transfers` is how many times each stream is
// loaded or stored in one `run`, so the host arrays gain a leading dimension of that size.
// The variable persists between runs.
use ndarray::array;
use popxl::{ops, HostArray, Ir, Tensor};
use popxl_session::{Inputs, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ir = Ir::new();
    ir.set_num_host_transfers(3)?;
    let _main = ir.main_graph().enter();
    let x_in = popxl::h2d_stream([2], popxl::float32, "x")?;
    let sums = popxl::d2h_stream([2], popxl::float32, "running_sum")?;
    let total = popxl::variable(vec![0.0f32; 2], "total")?;

    // Each iteration loads the next x, adds it to `total` in place and stores the sum.
    let body = ir.create_graph(
        |acc: Tensor| -> popxl::Result<()> {
            let _seq = popxl::in_sequence(true);
            let x = ops::host_load(&x_in, "x")?;
            ops::add_(&acc, &x)?;
            ops::host_store(&sums, &acc)
        },
        popxl::TensorByRef(total.clone()),
    )?;
    ops::repeat(&body, 3, &[&total], &[])?; // `total` is written in every iteration
    drop(_main);

    let mut session = Session::new(ir, "cpu")?;
    let xs = array![[1.0f32, 10.0], [2.0, 20.0], [3.0, 30.0]]; // [num_host_transfers, *shape]
    let mut attached = session.enter()?;
    let first = attached.run(&Inputs::from([(x_in.clone(), HostArray::from(xs.clone()))]))?;
    assert_eq!(first[&sums], HostArray::from(array![[1.0f32, 10.0], [3.0, 30.0], [6.0, 60.0]]));
    let second = attached.run(&Inputs::from([(x_in, HostArray::from(xs))]))?;
    assert_eq!(second[&sums], HostArray::from(array![[7.0f32, 70.0], [9.0, 90.0], [12.0, 120.0]]));
    Ok(())
}
