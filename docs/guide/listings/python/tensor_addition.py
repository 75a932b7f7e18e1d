# A variable plus a constant, stored to the host: the smallest complete program.
import numpy as np
import popxl
import popxl.ops as ops

ir = popxl.Ir()
with ir.main_graph:
    p = popxl.variable(3, name="p")
    q = popxl.constant(5, name="q")
    total = p + q
    out = popxl.d2h_stream(total.shape, total.dtype, name="total")
    ops.host_store(out, total)

session = popxl.Session(ir, "cpu")  # or "ipu_model"
with session:
    outputs = session.run()
assert outputs[out] == 8 and outputs[out].dtype == np.int32
