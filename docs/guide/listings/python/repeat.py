# A loop: ``ops.repeat`` runs a graph ``repeat_count`` times; output k feeds input k of the next
# iteration, and inputs given by ``inputs_dict`` (here the step) stay the same in every iteration.
import numpy as np
import popxl
import popxl.ops as ops

x_data = np.array([[1, 2], [3, 4]], np.float32)
step_data = np.array([[0.5, 0.5], [1, 1]], np.float32)

ir = popxl.Ir()
with ir.main_graph:
    x = popxl.constant(x_data, name="x")
    step = popxl.variable(step_data, name="step")

    add_step = ir.create_graph(lambda x, step: x + step, x, step)
    (y,) = ops.repeat(add_step, 4, x, inputs_dict={add_step.inputs[1]: step})
    out = popxl.d2h_stream(y.shape, y.dtype, name="y")
    ops.host_store(out, y)

with popxl.Session(ir, "cpu") as session:
    outputs = session.run()
np.testing.assert_array_equal(outputs[out], x_data + 4 * step_data)
