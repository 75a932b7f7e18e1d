"""The user guide's example programs, written afresh in PopXL's style, checked against numpy."""

import numpy as np
import pytest
import popxl
import popxl.ops as ops
import popxl.transforms as transforms

DEVICES = ["cpu", "ipu_model"]


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_addition(device):
    ir = popxl.Ir()
    with ir.main_graph:
        p = popxl.variable(3, name="p")
        q = popxl.constant(5, name="q")
        total = p + q
        out = popxl.d2h_stream(total.shape, total.dtype)
        ops.host_store(out, total)
    assert p.dtype == popxl.int32 and total.shape == ()
    with popxl.Session(ir, device) as session:
        res = session.run()
    assert res[out] == 8 and res[out].dtype == np.int32


@pytest.mark.parametrize("device", DEVICES)
def test_graph_called_twice_with_different_weights(device):
    """A function traced twice into two graphs (same name made unique), each called."""

    def scale_then_shift(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
        return x @ w + 1.0

    rng = np.random.default_rng(0)
    x_np = rng.random((2, 3), dtype=np.float32)
    w1_np = rng.random((3, 4), dtype=np.float32)
    w2_np = rng.random((3,), dtype=np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        x_in = popxl.h2d_stream(x_np.shape, popxl.float32, "x")
        x = ops.host_load(x_in)
        w1 = popxl.variable(w1_np, name="w1")
        w2 = popxl.variable(w2_np, name="w2")
        g1 = ir.create_graph(scale_then_shift, x, w1)
        g2 = ir.create_graph(scale_then_shift, x, w2)
        (o1,) = ops.call(g1, x, w1)
        (o2,) = ops.call(g2, x, w2)
        s1 = popxl.d2h_stream(o1.shape, o1.dtype, "o1")
        s2 = popxl.d2h_stream(o2.shape, o2.dtype, "o2")
        ops.host_store(s1, o1)
        ops.host_store(s2, o2)
    assert g1.name == "scale_then_shift" and g2.name != g1.name
    assert [t.shape for t in g2.inputs] == [(2, 3), (3,)]
    with popxl.Session(ir, device) as session:
        res = session.run({x_in: x_np})
    np.testing.assert_allclose(res[s1], x_np @ w1_np + 1, rtol=1e-5)
    np.testing.assert_allclose(res[s2], x_np @ w2_np + 1, rtol=1e-5)


class Increment(popxl.Module):
    def __init__(self):
        self.step = None

    def build(self, x):
        self.step = popxl.graph_input(x.shape, x.dtype, "step")
        return x + self.step


@pytest.mark.parametrize("device", DEVICES)
def test_call_with_info_and_modified_input(device):
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(1, name="v")
        one = popxl.constant(1, name="one")
        inc = Increment()
        g = ir.create_graph(inc, v)
        info = ops.call_with_info(g, v, inputs_dict={inc.step: one})
        assert info.called_graph == g
        assert info.parent_input(0) == v
        assert info.graph_to_parent(g.inputs[0]) == v
        (o,) = info.outputs
        assert o == info.parent_output(0)
    with popxl.Session(ir, device) as session:
        session.run()
    # passed by value: the variable is unchanged
    assert session.get_tensor_data(v) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_repeat_adds_n_times(device):
    def add_value(x, value):
        return x + value

    x_np = np.arange(6, dtype=np.float32).reshape(2, 3)
    ir = popxl.Ir()
    with ir.main_graph:
        x_in = popxl.h2d_stream(x_np.shape, popxl.float32)
        x = ops.host_load(x_in)
        value = popxl.constant(np.full((2, 3), 0.5, np.float32), name="value")
        g = ir.create_graph(add_value, x, value)
        (o,) = ops.repeat(g, 3, x, value)
        out = popxl.d2h_stream(o.shape, o.dtype)
        ops.host_store(out, o)
    with popxl.Session(ir, device) as session:
        res = session.run({x_in: x_np})
    np.testing.assert_allclose(res[out], x_np + 1.5)


def test_tensor_get_write_and_nested_sessions():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.array([1.0, 2.0], np.float32), name="a")
        c = popxl.constant(np.array([10.0, 20.0], np.float32), name="c")
        ops.var_updates.accumulate_(a, c)
    session = popxl.Session(ir, "ipu_model")
    assert not session.is_attached
    np.testing.assert_equal(session.get_tensor_data(c), [10, 20])
    session.write_variable_data(a, np.array([5.0, 6.0], np.float32))
    with session:
        assert session.is_attached
        session.run()
        with session:  # nested: does not detach nor copy weights back
            session.run()
        assert session.is_attached
        # attached: data fetched from the device
        np.testing.assert_equal(session.get_tensor_data(a), [25, 46])
    assert not session.is_attached
    np.testing.assert_equal(session.get_tensors_data([a, c])[a], [25, 46])
    with session:
        session.run()
    np.testing.assert_equal(session.get_tensor_data(a), [35, 66])


def test_autodiff_of_linear_layer_against_numpy():
    class Linear(popxl.Module):
        def __init__(self):
            self.W = None
            self.b = None

        def build(self, x, out_features):
            self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
            self.b = popxl.graph_input((out_features,), popxl.float32, "b")
            return ops.gelu(x @ self.W + self.b)

    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((2, 3)).astype(np.float32)
    w_np = rng.standard_normal((3, 2)).astype(np.float32)
    b_np = rng.standard_normal((2,)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x = popxl.variable(x_np, name="x")
        W = popxl.variable(w_np, name="W")
        b = popxl.variable(b_np, name="b")
        linear = Linear()
        g = ir.create_graph(linear, x, out_features=2)
        fwd = ops.call_with_info(g, x, inputs_dict={linear.W: W, linear.b: b})
        y = fwd.parent_output(0)
        grad_info = transforms.autodiff(g)
        assert isinstance(grad_info, transforms.GradGraphInfo)
        assert grad_info.forward_graph == g
        assert [c.connection_type for c in grad_info.expected_inputs][0] == "FwdGrad"
        seed = popxl.constant(np.ones((2, 2), np.float32), name="seed")
        acts = grad_info.inputs_dict(fwd)
        bwd = ops.call_with_info(grad_info.graph, seed, inputs_dict=acts)
        grads = grad_info.fwd_parent_ins_to_grad_parent_outs(fwd, bwd)
        outs = {}
        for name, t in [("y", y), ("dx", grads[x]), ("dW", grads[W]), ("db", grads[b])]:
            outs[name] = popxl.d2h_stream(t.shape, t.dtype, name)
            ops.host_store(outs[name], t)
    with popxl.Session(ir, "cpu") as session:
        res = session.run()

    z = x_np @ w_np + b_np
    c = np.sqrt(2 / np.pi)
    inner = c * (z + 0.044715 * z**3)
    gelu = 0.5 * z * (1 + np.tanh(inner))
    dgelu = 0.5 * (1 + np.tanh(inner)) + 0.5 * z * (1 - np.tanh(inner) ** 2) * c * (1 + 3 * 0.044715 * z**2)
    np.testing.assert_allclose(res[outs["y"]], gelu, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res[outs["dx"]], dgelu @ w_np.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res[outs["dW"]], x_np.T @ dgelu, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res[outs["db"]], dgelu.sum(0), rtol=1e-4, atol=1e-5)


def test_sgd_step_with_nll_loss_with_softmax_grad():
    rng = np.random.default_rng(2)
    logits_np = rng.standard_normal((4, 5)).astype(np.float32)
    labels_np = np.array([0, 3, 1, 4], np.int32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(logits_np, name="w")
        lab_in = popxl.h2d_stream((4,), popxl.int32, "labels")
        labels = ops.host_load(lab_in)
        probs = ops.softmax(w, axis=-1)
        loss, dlogits = ops.nll_loss_with_softmax_grad(probs, labels)
        out = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(out, loss)
        ops.scaled_add_(w, dlogits, b=-0.5)
    with popxl.Session(ir, "cpu") as session:
        res = session.run({lab_in: labels_np})
    e = np.exp(logits_np - logits_np.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(res[out], -np.log(p[np.arange(4), labels_np]).mean(), rtol=1e-5)
    onehot = np.eye(5, dtype=np.float32)[labels_np]
    np.testing.assert_allclose(session.get_tensor_data(w), logits_np - 0.5 * (p - onehot) / 4, rtol=1e-5, atol=1e-6)


def test_num_host_transfers_and_name_scope():
    """Three batches per run: a repeated graph loads, doubles and stores each."""
    ir = popxl.Ir()
    ir.num_host_transfers = 3
    with ir.main_graph:
        x_in = popxl.h2d_stream((2,), popxl.float32, "x")
        out = popxl.d2h_stream((2,), popxl.float32, "y")

        def step():
            with popxl.name_scope("layer0"):
                x = ops.host_load(x_in, "x")
                y = x * 2
            assert y.id.startswith("layer0/")
            ops.host_store(out, y)

        body = ir.create_graph(step)
        ops.repeat(body, 3)
    x_np = np.arange(6, dtype=np.float32).reshape(3, 2)
    with popxl.Session(ir, "cpu") as session:
        assert session.expected_inputs() == [x_in]
        res = session.run({x_in: x_np})
    np.testing.assert_equal(res[out], x_np * 2)


def test_create_graph_traces_args_lists_varargs_kwargs_and_specs():
    def fn(a, pair, *rest, scale=1.0, extra=None):
        total = a + pair[0] + pair[1]
        for r in rest:
            total = total + r
        if extra is not None:
            total = total + extra
        return total * scale

    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.constant(np.array([1.0, 2.0], np.float32), name="a")
        spec = popxl.TensorSpec((2,), popxl.float32)
        g = ir.create_graph(fn, a, [a, spec], a, spec, scale=3.0, extra=spec)
        # inputs in signature order: a, pair[0], pair[1], rest..., extra
        assert len(g.inputs) == 6
        assert all(t.shape == (2,) for t in g.inputs)
        (o,) = ops.call(g, a, a, a, a, a, a)
        out = popxl.d2h_stream(o.shape, o.dtype)
        ops.host_store(out, o)
    with popxl.Session(ir, "cpu") as s:
        res = s.run()
    np.testing.assert_allclose(res[out], 3.0 * 6 * np.array([1.0, 2.0]))


def test_create_graph_with_no_output_and_by_ref_input():
    def add_one_in_place(x):
        x += 1.0

    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros(2, np.float32), name="v")
        g = ir.create_graph(add_one_in_place, popxl.TensorByRef(v))
        assert g.outputs == []
        ops.call(g, v)
    with popxl.Session(ir, "cpu") as s:
        s.run()
    np.testing.assert_equal(s.get_tensor_data(v), [1, 1])
