// One Rust function traced into two graphs (one per weight shape), each called from the main graph.
use ndarray::{array, Array2};
use popxl::{ops, HostArray, Ir, Tensor};
use popxl_session::{Inputs, Session};

/// The graph's body: its arguments become the graph's inputs, in order.
fn scale_then_shift(x: Tensor, w: Tensor) -> popxl::Result<Tensor> {
    Ok(&x.matmul(&w)? + 1.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let x_data: Array2<f32> = array![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let w1_data: Array2<f32> = array![[1.0, 0.0, 2.0, 0.5], [0.0, 1.0, 0.0, 0.5], [1.0, 1.0, 1.0, 0.5]];
    let w2_data: Array2<f32> = array![[0.5, -1.0], [0.25, 0.0], [0.0, 2.0]];

    let ir = Ir::new();
    let main = ir.main_graph();
    let _main = main.enter();
    let x_in = popxl::h2d_stream([2, 3], popxl::float32, "x")?;
    let x = ops::host_load(&x_in, "x")?;
    let w1 = popxl::variable(w1_data.clone(), "w1")?;
    let w2 = popxl::variable(w2_data.clone(), "w2")?;

    // `ir.create_graph(scale_then_shift, x, w1)`: the arguments give the inputs' shapes and types.
    let g1 = ir.create_graph(scale_then_shift, (&x, &w1))?;
    let g2 = ir.create_graph(scale_then_shift, (&x, &w2))?;
    assert_ne!(g1.name(), g2.name(), "each graph gets a unique name");

    let y1 = ops::call(&g1, &[&x, &w1], &[])?.remove(0);
    let y2 = ops::call(&g2, &[&x, &w2], &[])?.remove(0);
    let s1 = popxl::d2h_stream(y1.shape(), y1.dtype(), "y1")?;
    let s2 = popxl::d2h_stream(y2.shape(), y2.dtype(), "y2")?;
    ops::host_store(&s1, &y1)?;
    ops::host_store(&s2, &y2)?;
    drop(_main);

    let mut session = Session::new(ir, "cpu")?;
    let inputs = Inputs::from([(x_in, HostArray::from(x_data.clone()))]);
    let outputs = session.enter()?.run(&inputs)?;
    assert_eq!(outputs[&s1], HostArray::from(x_data.dot(&w1_data) + 1.0));
    assert_eq!(outputs[&s2], HostArray::from(x_data.dot(&w2_data) + 1.0));
    Ok(())
}
