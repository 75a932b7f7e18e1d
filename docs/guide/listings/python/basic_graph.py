# One Python function traced into two graphs (one per weight shape), each called from the main graph.
import numpy as np
import popxl
import popxl.ops as ops


def scale_then_shift(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
    """The graph's body: its arguments become the graph's inputs, in order."""
    return x @ w + 1.0


x_data = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
w1_data = np.array([[1, 0, 2, 0.5], [0, 1, 0, 0.5], [1, 1, 1, 0.5]], np.float32)
w2_data = np.array([[0.5, -1], [0.25, 0], [0, 2]], np.float32)

ir = popxl.Ir()
with ir.main_graph:
    x_in = popxl.h2d_stream((2, 3), popxl.float32, name="x")
    x = ops.host_load(x_in, "x")
    w1 = popxl.variable(w1_data, name="w1")
    w2 = popxl.variable(w2_data, name="w2")

    # The arguments give the inputs' shapes and types.
    g1 = ir.create_graph(scale_then_shift, x, w1)
    g2 = ir.create_graph(scale_then_shift, x, w2)
    assert g1.name != g2.name, "each graph gets a unique name"

    (y1,) = ops.call(g1, x, w1)
    (y2,) = ops.call(g2, x, w2)
    s1 = popxl.d2h_stream(y1.shape, y1.dtype, name="y1")
    s2 = popxl.d2h_stream(y2.shape, y2.dtype, name="y2")
    ops.host_store(s1, y1)
    ops.host_store(s2, y2)

with popxl.Session(ir, "cpu") as session:
    outputs = session.run({x_in: x_data})
np.testing.assert_allclose(outputs[s1], x_data @ w1_data + 1)
np.testing.assert_allclose(outputs[s2], x_data @ w2_data + 1)
