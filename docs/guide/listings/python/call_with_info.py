# A Module whose weight is a graph input connected at the call site, and a graph that
# updates its caller's variable in place through an input passed by reference.
import numpy as np
import popxl
import popxl.ops as ops


class AddStep(popxl.Module):
    """``x + step``, where ``step`` is an input the module adds itself."""

    def __init__(self):
        self.step = None

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        self.step = popxl.graph_input(x.shape, x.dtype, "step")
        return x + self.step


def increment(x: popxl.TensorByRef):
    ops.add_(x, popxl.constant(1.0, name="one"))


ir = popxl.Ir()
# In sequence: the in-place calls below write ``v``, which the first call reads.
with ir.main_graph, popxl.in_sequence(True):
    v = popxl.variable(np.array([1.0, 2.0], np.float32), name="v")
    step = popxl.constant(np.array([10.0, 20.0], np.float32), name="step")

    module = AddStep()
    add_graph = ir.create_graph(module, v)
    info = ops.call_with_info(add_graph, v, inputs_dict={module.step: step})
    assert info.parent_input(1) == step
    assert info.graph_to_parent(module.step) == step
    y = info.parent_output(0)

    # ``x`` by reference: ``add_`` inside writes the caller's variable.
    increment_graph = ir.create_graph(increment, popxl.TensorByRef(v))
    ops.call(increment_graph, v)
    ops.call(increment_graph, v)
    out = popxl.d2h_stream(y.shape, y.dtype, name="y")
    ops.host_store(out, y)

session = popxl.Session(ir, "cpu")
with session:
    outputs = session.run()
np.testing.assert_array_equal(outputs[out], np.array([11.0, 22.0]))
np.testing.assert_array_equal(session.get_tensor_data(v), np.array([3.0, 4.0]))
