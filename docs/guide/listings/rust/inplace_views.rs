// In-place ops and views: a view aliases its input, and an in-place op writes through it,
// so later reads of the variable (in program order) see the write.
use ndarray::{array, Array2};
use popxl::{ops, HostArray, Ir};
use popxl_session::{Inputs, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let x_data: Array2<f32> = array![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let ir = Ir::new();
    let _main = ir.main_graph().enter();
    let _seq = popxl::in_sequence(true);
    let x = popxl::variable(x_data.clone(), "x")?;
    let xt = x.transpose_(&[])?; // a [3, 2] view of x
    ops::add_(&xt, &popxl::constant(array![[10.0f32, 20.0], [30.0, 40.0], [50.0, 60.0]], "d")?)?;
    let col = ops::slice_(&x, &[1], &[2], &[1], &[1])?; // x[:, 1:2], another view
    ops::add_(&col, &popxl::constant(100.0f32, "hundred")?)?;
    let doubled = &x * 2.0; // reads x after both writes
    let out = popxl::d2h_stream(doubled.shape(), doubled.dtype(), "doubled")?;
    ops::host_store(&out, &doubled)?;
    drop((_seq, _main));

    let mut expected = &x_data + &array![[10.0f32, 20.0], [30.0, 40.0], [50.0, 60.0]].t();
    expected.column_mut(1).mapv_inplace(|v| v + 100.0);
    let mut session = Session::new(ir, "cpu")?;
    let outputs = session.enter()?.run(&Inputs::new())?;
    assert_eq!(outputs[&out], HostArray::from(&expected * 2.0));
    assert_eq!(session.get_tensor_data(&x)?, HostArray::from(expected));
    Ok(())
}
