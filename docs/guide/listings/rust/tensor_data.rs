// Reading and writing tensors' data through a session: variables and constants
// (`get_tensor_data`), variables (`write_variable_data`), and when the host copy is refreshed.
use popxl::{ops, HostArray, Ir};
use popxl_session::{Inputs, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ir = Ir::new();
    let _main = ir.main_graph().enter();
    let _seq = popxl::in_sequence(true);
    let a = popxl::variable(3i32, "a")?;
    let b = popxl::constant(1i32, "b")?;
    ops::add_(&a, &b)?; // each run: a += b, on the device
    let out = popxl::d2h_stream([], popxl::int32, "a_after")?;
    ops::host_store(&out, &a)?;
    drop((_seq, _main));

    let mut session = Session::new(ir, "cpu")?;
    // Detached: reads and writes touch only the host copy.
    session.write_variable_data(&a, &HostArray::from(10i32))?;
    {
        let mut attached = session.enter()?; // weights_from_host: the device gets 10
        assert_eq!(attached.run(&Inputs::new())?[&out], HostArray::from(11i32));
        assert_eq!(attached.run(&Inputs::new())?[&out], HostArray::from(12i32));
        // Attached: the read fetches the device's value first (weights_to_host).
        assert_eq!(attached.get_tensor_data(&a)?, HostArray::from(12i32));
        // Attached: the write goes to the host and the device.
        attached.write_variable_data(&a, &HostArray::from(100i32))?;
        assert_eq!(attached.run(&Inputs::new())?[&out], HostArray::from(101i32));
    } // leaving: weights_to_host, detach
    assert_eq!(session.get_tensors_data([&a, &b])?, vec![HostArray::from(101i32), HostArray::from(1i32)]);
    Ok(())
}
