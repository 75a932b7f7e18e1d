# Replication: the same program on ``replication_factor`` replicas (here threads of this
# process), each with its own slice of the host data and its own variables, meeting at
# collectives. PopXL runs this only on IPU hardware; here it runs on every device.
import numpy as np
import popxl
import popxl.ops as ops

ir = popxl.Ir()
ir.replication_factor = 2
with ir.main_graph:
    x_in = popxl.h2d_stream((3,), popxl.float32, name="x")
    x = ops.host_load(x_in, "x")  # replica r gets row r of the host array
    mean = ops.collectives.replicated_all_reduce(x, op="mean")
    # One value per replica: groups of size 1, host data (num_groups, *shape).
    each = ir.replica_grouping(group_size=1)
    w_data = np.array([[1, 2, 3], [-1, 0.5, 0]], np.float32)
    w = popxl.variable(w_data, name="w", replica_grouping=each)
    y = mean * w
    out = popxl.d2h_stream((3,), popxl.float32, name="y")
    ops.host_store(out, y)

x_data = np.array([[1, 2, 3], [3, 4, 5]], np.float32)  # (replication_factor, *shape)
with popxl.Session(ir, "cpu") as session:
    outputs = session.run({x_in: x_data})
np.testing.assert_allclose(outputs[out], w_data * x_data.mean(axis=0))  # (replication_factor, *shape)
