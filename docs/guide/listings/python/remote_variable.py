# Streaming memory: two variables in the entries of a remote buffer, loaded and stored by
# offset, one offset coming from the host at run time. PopXL runs this only on IPU
# hardware; here it runs on every device.
import numpy as np
import popxl
import popxl.ops as ops

ir = popxl.Ir()
with ir.main_graph, popxl.in_sequence(True):  # transfers are ordered like any other op
    buf = popxl.remote_buffer((3,), popxl.float32, entries=2)
    m0 = popxl.remote_variable(np.array([1, 2, 3], np.float32), buf, 0, name="m0")
    m1 = popxl.remote_variable(np.array([10, 20, 30], np.float32), buf, 1, name="m1")

    a = ops.remote_load(buf, 0, "a")
    b = ops.remote_load(buf, 1, "b")
    ops.remote_store(buf, 1, a + b)  # m1 += m0, in streaming memory
    which_in = popxl.h2d_stream((), popxl.int32, name="which")
    which = ops.host_load(which_in, "which")
    chosen = ops.remote_load(buf, which, "chosen")  # the entry the host names
    out = popxl.d2h_stream((3,), popxl.float32, name="chosen")
    ops.host_store(out, chosen)

session = popxl.Session(ir, "cpu")
with session:  # weights_from_host fills the entries
    np.testing.assert_array_equal(session.run({which_in: np.int32(1)})[out], [11, 22, 33])
    np.testing.assert_array_equal(session.run({which_in: np.int32(0)})[out], [1, 2, 3])
# Leaving the context reads the entries back.
np.testing.assert_array_equal(session.get_tensor_data(m1), [12, 24, 36])
np.testing.assert_array_equal(session.get_tensor_data(m0), [1, 2, 3])
