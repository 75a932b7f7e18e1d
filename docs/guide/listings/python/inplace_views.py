# In-place ops and views: a view aliases its input, and an in-place op writes through it,
# so later reads of the variable (in program order) see the write.
import numpy as np
import popxl
import popxl.ops as ops

x_data = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
d_data = np.array([[10, 20], [30, 40], [50, 60]], np.float32)

ir = popxl.Ir()
with ir.main_graph, popxl.in_sequence(True):
    x = popxl.variable(x_data, name="x")
    xt = ops.transpose_(x)  # a (3, 2) view of x
    ops.add_(xt, popxl.constant(d_data, name="d"))
    col = ops.slice_(x, start=1, stop=2, step=1, axis=1)  # x[:, 1:2], another view
    ops.add_(col, popxl.constant(100.0, name="hundred"))
    doubled = x * 2  # reads x after both writes
    out = popxl.d2h_stream(doubled.shape, doubled.dtype, name="doubled")
    ops.host_store(out, doubled)

expected = x_data + d_data.T
expected[:, 1] += 100
session = popxl.Session(ir, "cpu")
with session:
    outputs = session.run()
np.testing.assert_array_equal(outputs[out], expected * 2)
np.testing.assert_array_equal(session.get_tensor_data(x), expected)
