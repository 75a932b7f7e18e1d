# Autodiff of one graph: the gradient graph is called with the output's gradient and the
# activations ``inputs_dict`` names; the gradients are checked against the formulas
# dx = dy W^T, dW = x^T dy, db = sum over rows of dy.
import numpy as np
import popxl
import popxl.ops as ops
import popxl.transforms as transforms


class Linear(popxl.Module):
    """``x @ W + b``, with ``W`` and ``b`` as graph inputs the caller connects."""

    def __init__(self):
        self.W = None
        self.b = None

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        self.W = popxl.graph_input((x.shape[1], 2), popxl.float32, "W")
        self.b = popxl.graph_input((2,), popxl.float32, "b")
        return x @ self.W + self.b


x_data = np.array([[1.5, -2, 0.5], [0.25, 4, -1]], np.float32)
w_data = np.array([[0.05, -0.12], [0.17, 0.09], [0.3, 0]], np.float32)
dy_data = np.array([[1, 0.5], [-2, 1]], np.float32)

ir = popxl.Ir()
with ir.main_graph:
    x = popxl.constant(x_data, name="x")
    W = popxl.variable(w_data, name="W")
    b = popxl.variable(np.array([0.3, -0.25], np.float32), name="b")
    linear = Linear()
    graph = ir.create_graph(linear, x)
    fwd = ops.call_with_info(graph, x, inputs_dict={linear.W: W, linear.b: b})

    # The gradient graph of every input of ``graph``, given the gradient of its output.
    grad_info = transforms.autodiff(graph)
    activations = grad_info.inputs_dict(fwd)  # forward tensors the gradient graph reads
    dy = popxl.constant(dy_data, name="dy")
    bwd = ops.call_with_info(grad_info.graph, dy, inputs_dict=activations)
    grads = grad_info.fwd_parent_ins_to_grad_parent_outs(fwd, bwd)  # parent input -> gradient

    streams = {}
    for t, name in [(x, "dx"), (W, "dW"), (b, "db")]:
        streams[name] = popxl.d2h_stream(grads[t].shape, grads[t].dtype, name=name)
        ops.host_store(streams[name], grads[t])

with popxl.Session(ir, "cpu") as session:
    out = session.run()
np.testing.assert_allclose(out[streams["dx"]], dy_data @ w_data.T, rtol=1e-5)
np.testing.assert_allclose(out[streams["dW"]], x_data.T @ dy_data, rtol=1e-5)
np.testing.assert_allclose(out[streams["db"]], dy_data.sum(axis=0), rtol=1e-5)
