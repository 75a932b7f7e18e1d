# Several host transfers per run: ``num_host_transfers`` is how many times each stream is
# loaded or stored in one ``run``, so the host arrays gain a leading dimension of that size.
# The variable persists between runs.
import numpy as np
import popxl
import popxl.ops as ops

ir = popxl.Ir()
ir.num_host_transfers = 3
with ir.main_graph:
    x_in = popxl.h2d_stream((2,), popxl.float32, name="x")
    sums = popxl.d2h_stream((2,), popxl.float32, name="running_sum")
    total = popxl.variable(np.zeros(2, np.float32), name="total")

    def body(acc: popxl.TensorByRef):
        """Each iteration loads the next x, adds it to ``total`` in place and stores the sum."""
        with popxl.in_sequence(True):
            x = ops.host_load(x_in, "x")
            ops.add_(acc, x)
            ops.host_store(sums, acc)

    body_graph = ir.create_graph(body, popxl.TensorByRef(total))
    ops.repeat(body_graph, 3, total)

xs = np.array([[1, 10], [2, 20], [3, 30]], np.float32)  # (num_host_transfers, *shape)
with popxl.Session(ir, "cpu") as session:
    first = session.run({x_in: xs})
    second = session.run({x_in: xs})
np.testing.assert_array_equal(first[sums], np.cumsum(xs, axis=0))
np.testing.assert_array_equal(second[sums], xs.sum(axis=0) + np.cumsum(xs, axis=0))
