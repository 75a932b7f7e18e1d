// Replication: the same program on `replication_factor` replicas (here threads of this
// process), each with its own slice of the host data and its own variables, meeting at
// collectives. PopXL runs this only on IPU hardware; here it runs on every device.
use ndarray::{array, Array2, Axis};
use popxl::ops::collectives::{replicated_all_reduce, CollectiveOp};
use popxl::{ops, HostArray, Ir, RetrievalMode};
use popxl_session::{Inputs, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ir = Ir::new();
    ir.set_replication_factor(2)?;
    let _main = ir.main_graph().enter();
    let x_in = popxl::h2d_stream([3], popxl::float32, "x")?;
    let x = ops::host_load(&x_in, "x")?; // replica r gets row r of the host array
    let mean = replicated_all_reduce(&x, CollectiveOp::Mean, None)?;
    // One value per replica: groups of size 1, host data [num_groups, *shape].
    let each = ir.replica_grouping(1, Some(1))?;
    let w_data: Array2<f32> = array![[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]];
    let w = popxl::variable_grouped(w_data.clone(), "w", &each, RetrievalMode::OnePerGroup)?;
    let y = &mean * &w;
    let out = popxl::d2h_stream([3], popxl::float32, "y")?;
    ops::host_store(&out, &y)?;
    drop(_main);

    let x_data: Array2<f32> = array![[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]]; // [replication_factor, *shape]
    let mut session = Session::new(ir, "cpu")?;
    let outputs = session.enter()?.run(&Inputs::from([(x_in, HostArray::from(x_data.clone()))]))?;
    let mean_data = x_data.mean_axis(Axis(0)).ok_or("two rows")?;
    assert_eq!(outputs[&out], HostArray::from(&w_data * &mean_data)); // [replication_factor, *shape]
    Ok(())
}
