# Code loading: ``remote_code_load`` says when a graph's code must be in tile memory; the
# lowering keeps it there from the load to the graph's last call before the next load.
# Run on ``ipu_model``, which also models an IPU's memory and time.
import numpy as np
import popxl
import popxl.ops as ops

x_data = np.array([1, 2, 3], np.float32)
ir = popxl.Ir()
with ir.main_graph, popxl.in_sequence(True):
    x = popxl.variable(x_data, name="x")
    square = ir.create_graph(lambda t: t * t, x)
    double = ir.create_graph(lambda t: t + t, x)

    ops.remote_code_load(square, destination="executable")  # square's code is live from here...
    (y,) = ops.call(square, x)
    (y,) = ops.call(square, y)  # ...to its last call
    ops.remote_code_load(double, destination="executable")  # then double's
    (z,) = ops.call(double, y)
    out = popxl.d2h_stream(z.shape, z.dtype, name="z")
    ops.host_store(out, z)

with popxl.Session(ir, "ipu_model") as session:
    outputs = session.run()
np.testing.assert_array_equal(outputs[out], 2 * x_data**4)
