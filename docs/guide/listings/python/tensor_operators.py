# Tensor operators with tensors, scalars and numpy arrays (numpy broadcasting), numpy-style
# indexing, and the ops behind them, checked against the same arithmetic done with numpy.
import numpy as np
import popxl
import popxl.ops as ops

a_data = np.array([[1, -2, 3], [4, 5, -6]], np.float32)
b_data = np.array([0.5, 2, -1], np.float32)

ir = popxl.Ir()
with ir.main_graph:
    a = popxl.constant(a_data, name="a")
    b = popxl.constant(b_data, name="b")
    results = {
        "mixed": (a * b - 1) / 2,  # b broadcast over rows
        "rows": a[1],
        "reversed": a[:, ::-1],
        "picked": a[np.array([1, 0, 1], np.int32)],
        "positive": ops.relu(a) @ a.T,
        "is_big": ops.greater(a, popxl.constant(2.0)),  # PopXL has no `>` operator
        "with_array": a + np.ones((2, 3), np.float32),  # a numpy operand becomes a constant
    }
    streams = {}
    for name, t in results.items():
        streams[name] = popxl.d2h_stream(t.shape, t.dtype, name=name)
        ops.host_store(streams[name], t)

with popxl.Session(ir, "cpu") as session:
    out = session.run()
expected = {
    "mixed": (a_data * b_data - 1) / 2,
    "rows": a_data[1],
    "reversed": a_data[:, ::-1],
    "picked": a_data[[1, 0, 1]],
    "positive": np.maximum(a_data, 0) @ a_data.T,
    "is_big": a_data > 2,
    "with_array": a_data + 1,
}
for name, want in expected.items():
    np.testing.assert_allclose(out[streams[name]], want, rtol=1e-6, err_msg=name)
