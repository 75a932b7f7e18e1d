# Reading and writing tensors' data through a session: variables and constants
# (``get_tensor_data``), variables (``write_variable_data``), and when the host copy is refreshed.
import numpy as np
import popxl
import popxl.ops as ops

ir = popxl.Ir()
with ir.main_graph, popxl.in_sequence(True):
    a = popxl.variable(3, name="a")
    b = popxl.constant(1, name="b")
    ops.add_(a, b)  # each run: a += b, on the device
    out = popxl.d2h_stream((), popxl.int32, name="a_after")
    ops.host_store(out, a)

session = popxl.Session(ir, "cpu")
# Detached: reads and writes touch only the host copy.
session.write_variable_data(a, np.array(10, np.int32))
with session:  # weights_from_host: the device gets 10
    assert session.run()[out] == 11
    assert session.run()[out] == 12
    # Attached: the read fetches the device's value first (weights_to_host).
    assert session.get_tensor_data(a) == 12
    # Attached: the write goes to the host and the device.
    session.write_variable_data(a, np.array(100, np.int32))
    assert session.run()[out] == 101
# Leaving: weights_to_host, detach.
data = session.get_tensors_data([a, b])
assert data[a] == 101 and data[b] == 1
