// Streaming memory: two variables in the entries of a remote buffer, loaded and stored by
// offset, one offset coming from the host at run time. PopXL runs this only on IPU
// hardware; here it runs on every device.
use popxl::{ops, HostArray, Ir};
use popxl_session::{Inputs, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ir = Ir::new();
    let _main = ir.main_graph().enter();
    let _seq = popxl::in_sequence(true); // transfers are ordered like any other op
    let buf = popxl::remote_buffer([3], popxl::float32, 2)?; // 2 entries of shape [3]
    let m0 = popxl::remote_variable(vec![1.0f32, 2.0, 3.0], &buf, 0, "m0")?;
    let m1 = popxl::remote_variable(vec![10.0f32, 20.0, 30.0], &buf, 1, "m1")?;

    let a = ops::remote_load(&buf, 0, "a")?;
    let b = ops::remote_load(&buf, 1, "b")?;
    ops::remote_store(&buf, 1, &(&a + &b))?; // m1 += m0, in streaming memory
    let which_in = popxl::h2d_stream([], popxl::int32, "which")?;
    let which = ops::host_load(&which_in, "which")?;
    let chosen = ops::remote_load(&buf, &which, "chosen")?; // the entry the host names
    let out = popxl::d2h_stream([3], popxl::float32, "chosen")?;
    ops::host_store(&out, &chosen)?;
    drop((_seq, _main));

    let mut session = Session::new(ir, "cpu")?;
    {
        let mut attached = session.enter()?; // weights_from_host fills the entries
        let run = |s: &mut popxl_session::SessionContext<'_>, entry: i32| {
            s.run(&Inputs::from([(which_in.clone(), HostArray::from(entry))]))
        };
        assert_eq!(run(&mut attached, 1)?[&out], HostArray::from(vec![11.0f32, 22.0, 33.0]));
        assert_eq!(run(&mut attached, 0)?[&out], HostArray::from(vec![1.0f32, 2.0, 3.0]));
    } // weights_to_host reads the entries back
    assert_eq!(session.get_tensor_data(&m1)?, HostArray::from(vec![12.0f32, 24.0, 36.0]));
    assert_eq!(session.get_tensor_data(&m0)?, HostArray::from(vec![1.0f32, 2.0, 3.0]));
    Ok(())
}
