"""The ops, var_updates, collectives and IR features added for PopXL parity, against numpy formulas."""

import os

import numpy as np
import pytest
import popxl
import popxl.ops as ops

from conftest import run

RNG = np.random.default_rng(11)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run_main(build):
    """Build the main graph with ``build(ir)`` returning {name: tensor}; run; return {name: array}
    and the session (closed) for reading variables."""
    ir = popxl.Ir()
    with ir.main_graph:
        outs = build(ir)
        streams = {}
        for k, t in outs.items():
            s = popxl.d2h_stream(t.shape, t.dtype, f"out_{k}")
            ops.host_store(s, t)
            streams[k] = s
    session = popxl.Session(ir, "cpu")
    with session:
        res = session.run()
        got = {k: res[s] for k, s in streams.items()}
        return got, session


# ---- conv_transpose ----------------------------------------------------------------------------

def conv_transpose_ref(x, w, stride, pads, dilation, groups, output_padding):
    n, cin, h, wd = x.shape
    _, cout_g, kh, kw = w.shape
    cin_g = cin // groups
    out_h = stride[0] * (h - 1) + output_padding[0] + (kh - 1) * dilation[0] + 1 - pads[0] - pads[2]
    out_w = stride[1] * (wd - 1) + output_padding[1] + (kw - 1) * dilation[1] + 1 - pads[1] - pads[3]
    y = np.zeros((n, cout_g * groups, out_h, out_w))
    for b in range(n):
        for ci in range(cin):
            g = ci // cin_g
            for i in range(h):
                for j in range(wd):
                    for co in range(cout_g):
                        for a in range(kh):
                            for c in range(kw):
                                oi = i * stride[0] + a * dilation[0] - pads[0]
                                oj = j * stride[1] + c * dilation[1] - pads[1]
                                if 0 <= oi < out_h and 0 <= oj < out_w:
                                    y[b, g * cout_g + co, oi, oj] += x[b, ci, i, j] * w[ci, co, a, c]
    return y


@pytest.mark.parametrize("groups,stride,pads,output_padding", [
    (1, (1, 1), (0, 0, 0, 0), (0, 0)),
    (1, (2, 2), (1, 1, 1, 1), (1, 1)),
    (2, (2, 1), (0, 1, 1, 0), (1, 0)),
])
def test_conv_transpose(groups, stride, pads, output_padding):
    x = randn(2, 4, 3, 4)
    w = randn(4, 3, 3, 2)
    got = run(lambda x, w: ops.conv_transpose(x, w, stride=stride, padding=pads, groups=groups,
                                              output_padding=output_padding), x, w)
    ref = conv_transpose_ref(x, w, stride, pads, (1, 1), groups, output_padding)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_conv_transpose_checks_planning_options():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(randn(1, 2, 3, 3))
        w = popxl.variable(randn(2, 2, 2, 2))
        assert ops.conv_transpose(x, w, available_memory_proportions=[0.5], partials_types=["half"],
                                  enable_conv_dithering=[1]).shape == (1, 2, 4, 4)
        with pytest.raises(ValueError, match="available_memory_proportions"):
            ops.conv_transpose(x, w, available_memory_proportions=[1.5])
        with pytest.raises(ValueError, match="partials_types"):
            ops.conv_transpose(x, w, partials_types=["double"])
        with pytest.raises(ValueError, match="pad_type"):
            ops.conv_transpose(x, w, pad_type="sideways")


# ---- interpolate, roi_align --------------------------------------------------------------------

def linear_1d(x, axis, scale):
    n = x.shape[axis]
    out_n = int(np.floor(n * scale))
    o = np.arange(out_n)
    src = np.clip((o + 0.5) / scale - 0.5, 0, n - 1)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, n - 1)
    frac = (src - lo).reshape([-1 if d == axis else 1 for d in range(x.ndim)])
    return np.take(x, lo, axis=axis) * (1 - frac) + np.take(x, hi, axis=axis) * frac


def test_interpolate_nearest_and_linear():
    x = randn(1, 2, 3, 4)
    got = run(lambda t: ops.interpolate(t, scale_factor=(1.0, 1.0, 2.0, 2.0)), x)
    np.testing.assert_array_equal(got, np.repeat(np.repeat(x, 2, axis=2), 2, axis=3))
    got = run(lambda t: ops.interpolate(t, scale_factor=(1.0, 1.0, 2.0, 1.5), mode="linear"), x)
    ref = linear_1d(linear_1d(x.astype(np.float64), 2, 2.0), 3, 1.5)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(x)
        with pytest.raises(ValueError, match="scale_factor"):
            ops.interpolate(t, scale_factor=(2.0, 2.0))
        with pytest.raises(ValueError):
            ops.interpolate(t, mode="bogus")


def bilinear_tv(img, y, x):
    """torchvision's roi_align bilinear sample of img [H, W] at (y, x) (aligned=False)."""
    h, w = img.shape
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= h - 1:
        y0 = y1 = h - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= w - 1:
        x0 = x1 = w - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return ((1 - ly) * (1 - lx) * img[y0, x0] + (1 - ly) * lx * img[y0, x1]
            + ly * (1 - lx) * img[y1, x0] + ly * lx * img[y1, x1])


def roi_align_ref(x, rois, idx, out_size, scale, sr):
    r, c = rois.shape[0], x.shape[1]
    ph, pw = out_size
    y = np.zeros((r, c, ph, pw))
    for k in range(r):
        x1, y1, x2, y2 = rois[k] * scale
        rw, rh = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
        bh, bw = rh / ph, rw / pw
        for ch in range(c):
            img = x[idx[k], ch].astype(np.float64)
            for i in range(ph):
                for j in range(pw):
                    acc = 0.0
                    for a in range(sr):
                        for b in range(sr):
                            yy = y1 + i * bh + (a + 0.5) * bh / sr
                            xx = x1 + j * bw + (b + 0.5) * bw / sr
                            acc += bilinear_tv(img, yy, xx)
                    y[k, ch, i, j] = acc / (sr * sr)
    return y


def test_roi_align():
    x = randn(2, 3, 8, 8)
    rois = np.array([[0.0, 0.0, 4.0, 4.0], [1.5, 2.0, 7.0, 6.5], [3.0, 1.0, 3.5, 1.2]], np.float32)
    idx = np.array([0, 1, 1], np.int32)
    got = run(lambda t, r, i: ops.roi_align(t, r, i, (2, 3), 0.5, 2), x, rois, idx)
    np.testing.assert_allclose(got, roi_align_ref(x, rois, idx, (2, 3), 0.5, 2), rtol=1e-4, atol=1e-5)
    ir = popxl.Ir()
    with ir.main_graph:
        t, r, i = popxl.variable(x), popxl.variable(rois), popxl.variable(idx)
        with pytest.raises(ValueError, match="output_size"):
            ops.roi_align(t, r, i, (2, 2, 2), 1.0, 2)
        with pytest.raises(TypeError):
            ops.roi_align(t, r, i, "big", 1.0, 2)


# ---- gather variants, scatter_reduce -----------------------------------------------------------

def test_groupedgather_and_tied_gather():
    t = randn(2, 5, 3)
    idx = np.array([[0, 4, 1], [3, 3, 2]], np.int32)
    got = run(lambda t, i: ops.groupedgather(t, i, axis=1, group_size=2), t, idx)
    np.testing.assert_array_equal(got, np.stack([np.take(t[g], idx[g], axis=0) for g in range(2)]))
    w = randn(6, 4)
    ti = np.array([[5, 0], [2, 2]], np.int32)
    np.testing.assert_array_equal(run(lambda w, i: ops.tied_gather(w, i), w, ti), np.take(w, ti, axis=0))
    np.testing.assert_array_equal(run(lambda w, i: ops.groupedgather(w, i), w, ti[0]), np.take(w, ti[0], axis=0))
    ir = popxl.Ir()
    with ir.main_graph:
        tv, iv = popxl.variable(w), popxl.variable(ti)
        with pytest.raises(ValueError, match="available_memory_proportion"):
            ops.tied_gather(tv, iv, available_memory_proportion=0.0)
        with pytest.raises(ValueError, match="group_size"):
            ops.groupedgather(tv, iv, group_size=0)


def test_scatter_reduce():
    data = randn(5, 3)
    idx = np.array([3, 0, 3, 1, 0], np.int32)
    ref = np.zeros((4, 3))
    np.add.at(ref, idx, data)
    got = run(lambda d, i: ops.scatter_reduce(d, i, "sum", axis_size=4), data, idx)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    init = randn(4, 3)
    ref = init.copy()
    np.maximum.at(ref, idx, data)
    got = run(lambda d, i, v: ops.scatter_reduce(d, i, "max", initial_values=v), data, idx, init)
    np.testing.assert_array_equal(got, ref)
    uniq = np.array([2, 0, 3], np.int32)
    ref = init.copy()
    ref[uniq] = data[:3]
    got = run(lambda d, i, v: ops.scatter_reduce(d, i, "none", initial_values=v), data[:3], uniq, init)
    np.testing.assert_array_equal(got, ref)
    ir = popxl.Ir()
    with ir.main_graph:
        d, i = popxl.variable(data), popxl.variable(idx)
        with pytest.raises(ValueError, match="reduction"):
            ops.scatter_reduce(d, i, "mul", axis_size=4)
        with pytest.raises(ValueError, match="initial_values and axis_size"):
            ops.scatter_reduce(d, i, "sum")
        with pytest.raises(ValueError, match="enable_index_broadcast"):
            ops.scatter_reduce(d, i, "sum", axis_size=4, enable_index_broadcast=False)


# ---- matmul options ----------------------------------------------------------------------------

def test_matmul_output_type_and_options():
    a = randn(3, 8).astype(np.float16)
    b = randn(8, 2).astype(np.float16)
    got = run(lambda a, b: ops.matmul(a, b, output_type=popxl.float32, partials_type=popxl.float32,
                                      available_memory_proportion=0.6), a, b)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-6, atol=1e-6)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    got = run(lambda a, b: ops.matmul(a, b, output_type=popxl.float16), a32, b32)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, (a32 @ b32).astype(np.float16), rtol=2e-3, atol=2e-3)
    ir = popxl.Ir()
    with ir.main_graph:
        x, y = popxl.variable(a32), popxl.variable(b32)
        with pytest.raises(ValueError, match="float16 or float32"):
            ops.matmul(x, y, partials_type=popxl.int32)
        with pytest.raises(ValueError, match="available_memory_proportion"):
            ops.matmul(x, y, available_memory_proportion=2.0)
        with pytest.raises(TypeError):
            ops.matmul(x, y, output_type=popxl.int32)
        assert ops.matmul(x, y).dtype == popxl.float32


# ---- batch_norm (training) ---------------------------------------------------------------------

@pytest.mark.parametrize("unbiased", [False, True])
def test_batch_norm_training(unbiased):
    x = randn(4, 3, 2, 5)
    scale, bias = randn(3), randn(3)
    mean0, var0 = randn(3), np.abs(randn(3)) + 0.5
    eps, momentum = 1e-3, 0.8
    y, m, v = run(lambda x, s, b, m, v: ops.batch_norm(x, s, b, m, v, epsilon=eps, momentum=momentum,
                                                       unbiased_variance=unbiased),
                  x, scale, bias, mean0, var0)
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=(0, 2, 3))
    var = x64.var(axis=(0, 2, 3))
    c = (slice(None), None, None)
    ref = (x64 - mu[c]) / np.sqrt(var[c] + eps) * scale[c] + bias[c]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    count = x.size // 3
    var_run = var * count / (count - 1) if unbiased else var
    np.testing.assert_allclose(m, momentum * mean0 + (1 - momentum) * mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v, momentum * var0 + (1 - momentum) * var_run, rtol=1e-5, atol=1e-6)


# ---- ipu_copy, io_tile_copy, Tensor placement --------------------------------------------------

def test_ipu_copy_io_tile_copy_and_tensor_placement():
    x_np = randn(3)

    def build(ir):
        x = popxl.variable(x_np, name="x")
        with popxl.ipu(0):
            y = ops.relu(x)
        z = ops.ipu_copy(y, 1)
        assert (y.ipu, z.ipu) == (0, 1)
        back = z.copy_to_ipu(0)
        assert back.ipu == 0
        with popxl.ipu(1):
            with popxl.io_tiles():
                io = ops.io_tile_copy(z)
            assert io.tile_set == "io"
            comp = ops.io_tile_copy(io)
        assert (z.tile_set, comp.tile_set) == ("compute", "compute")
        assert y.meta_shape == ()
        with pytest.raises(popxl.errors.UndefinedValue):
            popxl.variable(x_np, name="unused").tile_set
        with pytest.raises(ValueError, match="destination"):
            ops.ipu_copy(y, -1)
        with pytest.raises(ValueError):
            ops.ipu_copy(popxl.variable(x_np, name="nowhere"), 1)
        return {"z": z, "back": back, "comp": comp}

    got, _ = run_main(build)
    for k in ("z", "back", "comp"):
        np.testing.assert_array_equal(got[k], np.maximum(x_np, 0))


def test_meta_shape_of_sharded_tensor():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(np.arange(6, dtype=np.float32))
        s = ops.collectives.replica_sharded_slice(x)
        assert s.shape == (3,)
        assert s.meta_shape == (6,)


# ---- conditional_with_info ---------------------------------------------------------------------

@pytest.mark.parametrize("flag", [True, False])
def test_conditional_with_info(flag):
    a_np, b_np = randn(2), randn(2)

    def build(ir):
        a, b = popxl.variable(a_np, name="a"), popxl.variable(b_np, name="b")
        c = popxl.constant(flag)
        then_g = ir.create_graph(lambda x: x + 1.0, a)
        else_g = ir.create_graph(lambda x, y: x * y, a, b)
        info = ops.conditional_with_info(c, then_g, else_g, then_inputs=[a], else_inputs=[b, a])
        assert isinstance(info, ops.ConditionalSiteInfo)
        assert info.called_graph == (then_g, else_g)
        assert info.inputs[0] == c and info.parent_input(0) == c
        assert info.parent_to_graph(a) == then_g.inputs[0]
        assert info.parent_to_graph(b) == else_g.inputs[0]
        assert info.graph_to_parent(else_g.inputs[1]) == a
        ka, kb = info.inputs.index(a), info.inputs.index(b)
        assert info.is_parent_index_in_then_branch(ka) and not info.is_parent_index_in_then_branch(kb)
        assert info.parent_to_graph_input_index(kb) == 0
        assert info.graph_to_parent_input_index(1, then_branch=False) == ka
        assert info.graph_to_parent_output_index(0) == 0
        with pytest.raises(IndexError):
            info.graph_to_parent_input_index(5)
        with pytest.raises(IndexError):
            info.parent_to_graph_output_index(1)
        return {"o": info.parent_output(0)}

    got, _ = run_main(build)
    np.testing.assert_allclose(got["o"], a_np + 1 if flag else b_np * a_np, rtol=1e-6)


# ---- var_updates -------------------------------------------------------------------------------

def test_sparse_accumulate_():
    acc0 = randn(3, 2)
    rows = randn(4, 2)
    idx = np.array([0, 2, 2, 1], np.int32)
    state = {}

    def build(ir):
        acc = popxl.variable(acc0, name="acc")
        w = popxl.variable(acc0, name="w")
        state["acc"] = acc
        out = ops.var_updates.sparse_accumulate_(acc, popxl.constant(rows), popxl.constant(idx), f=0.5, W=w)
        with pytest.raises(ValueError, match="W"):
            ops.var_updates.sparse_accumulate_(acc, popxl.constant(rows), popxl.constant(idx),
                                               W=popxl.variable(rows, name="w_bad"))
        return {"out": out}

    got, session = run_main(build)
    ref = acc0.astype(np.float64).copy()
    np.add.at(ref, idx, 0.5 * rows)
    np.testing.assert_allclose(got["out"], ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(session.get_tensor_data(state["acc"]), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("which", ["adam", "lamb"])
def test_adam_and_lamb_updater(which):
    m_np, v_np, w_np = randn(4), np.abs(randn(4)), randn(4)
    b1, b2, eps, wd = 0.9, 0.99, 1e-5, 0.1
    updater = getattr(ops.var_updates, f"{which}_updater")
    state = {}

    def build(ir):
        m, v = popxl.variable(m_np, name="m"), popxl.variable(v_np, name="v")
        w = popxl.variable(w_np, name="w")
        step = popxl.variable(np.float32(2.0), name="step")
        state["step"] = step
        x = updater(m, v, weight=w, time_step=step, weight_decay=wd, beta1=b1, beta2=b2, epsilon=eps)
        plain = updater(m, v, epsilon=eps)
        with pytest.raises(ValueError, match="Weight decay"):
            updater(m, v, weight_decay=0.1)
        with pytest.raises(ValueError, match="beta"):
            updater(m, v, time_step=step, beta1=b1)
        return {"x": x, "plain": plain}

    got, session = run_main(build)
    t = 3.0  # incremented in place before use
    mc, vc = m_np / (1 - b1**t), v_np / (1 - b2**t)
    np.testing.assert_allclose(got["x"], mc / (np.sqrt(vc) + eps) + wd * w_np, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["plain"], m_np / (np.sqrt(v_np) + eps), rtol=1e-5, atol=1e-6)
    assert session.get_tensor_data(state["step"]) == 3.0


def test_adamax_updater():
    m_np, u_np, w_np = randn(4), np.abs(randn(4)) + 0.1, randn(4)

    def build(ir):
        m, u, w = popxl.variable(m_np, name="m"), popxl.variable(u_np, name="u"), popxl.variable(w_np, name="w")
        step = popxl.variable(np.int32(0), name="step")
        x = ops.var_updates.adamax_updater(m, u, weight=w, time_step=step, weight_decay=0.01)
        with pytest.raises(ValueError, match="time_step"):
            ops.var_updates.adamax_updater(m, u)
        return {"x": x}

    got, _ = run_main(build)
    mc = m_np / (1 - 0.9**1)
    np.testing.assert_allclose(got["x"], mc / (u_np + 1e-7) + 0.01 * w_np, rtol=1e-5, atol=1e-6)


def test_adam_var_update():
    w_np, x_np = randn(5), randn(5)
    lr, mwn = 0.1, 0.5
    state = {}

    def build(ir):
        w = popxl.variable(w_np, name="w")
        w2 = popxl.variable(w_np, name="w2")
        state.update(w=w, w2=w2)
        x = popxl.constant(x_np)
        r1 = popxl.constant(np.float32((w_np.astype(np.float64) ** 2).sum()))
        r2 = popxl.constant(np.float32((x_np.astype(np.float64) ** 2).sum()))
        ops.var_updates.adam_var_update(w, x, r1, r2, learning_rate=lr, max_weight_norm=mwn)
        ops.var_updates.adam_var_update(w2, x, None, None, learning_rate=lr)
        with pytest.raises(ValueError, match="learning_rate"):
            ops.var_updates.adam_var_update(w, x, r1, r2)
        with pytest.raises(ValueError, match="r1 and r2"):
            ops.var_updates.adam_var_update(w, x, r1, None, learning_rate=lr)
        return {"r1": r1}

    _, session = run_main(build)
    ratio = min(np.linalg.norm(w_np), mwn) / np.linalg.norm(x_np)
    np.testing.assert_allclose(session.get_tensor_data(state["w"]), w_np - lr * ratio * x_np, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(session.get_tensor_data(state["w2"]), w_np - lr * x_np, rtol=1e-5, atol=1e-6)


# ---- collectives -------------------------------------------------------------------------------

def test_all_reduce_across_ipus():
    a_np, b_np = randn(3), randn(3)

    def build(ir):
        a, b = popxl.variable(a_np, name="a"), popxl.variable(b_np, name="b")
        ya, yb = ops.collectives.all_reduce([a, b], ipus=[0, 1])
        ia, ib = ops.collectives.all_reduce_identical_inputs([a, a], ipus=[0, 1])
        ga, gb = ops.collectives.all_reduce_identical_grad_inputs([a, b], ipus=[0, 1], op="max")
        with pytest.raises(ValueError):
            ops.collectives.all_reduce([a, b], ipus=[0])
        with pytest.raises(ValueError):
            ops.collectives.all_reduce([a, b], ipus=[0, 1], op="xor")
        with pytest.raises(TypeError):
            ops.collectives.all_reduce(a)
        return {"ya": ya, "yb": yb, "ia": ia, "ib": ib, "ga": ga, "gb": gb}

    got, _ = run_main(build)
    for k in ("ya", "yb"):
        np.testing.assert_allclose(got[k], a_np + b_np, rtol=1e-6)
    for k in ("ia", "ib"):
        np.testing.assert_array_equal(got[k], a_np)
    for k in ("ga", "gb"):
        np.testing.assert_array_equal(got[k], np.maximum(a_np, b_np))


def test_comm_group():
    from popxl.ops.collectives import CommGroup, CommGroupType

    ir = popxl.Ir(replication=8)
    assert CommGroup(CommGroupType.Consecutive, 2).to_replica_grouping(ir).assignment == [0, 0, 1, 1, 2, 2, 3, 3]
    assert CommGroup(CommGroupType.Orthogonal, 2).to_replica_grouping(ir).assignment == [0, 1] * 4
    assert CommGroup().to_replica_grouping(ir).assignment == [0] * 8
    with pytest.raises(ValueError):
        CommGroup(CommGroupType.Consecutive, 3).to_replica_grouping(ir)
    with pytest.raises(TypeError):
        CommGroup("All", 2)


# ---- IR features -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed,offset,bps,ga,rep", [(0, 0, 1, 1, 1), (42, 3, 3, 1, 2), (7, 0, 2, 2, 2)])
def test_create_seeds_as_numpy(seed, offset, bps, ga, rep):
    n = bps * ga * rep
    draws = np.random.default_rng(seed + offset).integers(0, 2**64 - 1, endpoint=True, dtype=np.uint64, size=n)
    ref = np.stack([np.array([int(d) >> 32, int(d) & 0xFFFFFFFF], np.uint32) for d in draws])
    ref = np.squeeze(ref.reshape(bps, ga, rep, 2))
    got = popxl.create_seeds(seed, offset=offset, batches_per_step=bps, gradient_accumulation_factor=ga,
                             replicas=rep)
    assert got.dtype == np.uint32
    np.testing.assert_array_equal(got, ref)


def test_create_seeds_rejects_negative_counts():
    with pytest.raises(ValueError):
        popxl.create_seeds(1, replicas=-1)


def test_ir_replication_options(monkeypatch):
    ir = popxl.Ir(replication=4)
    assert ir.instance_replication_factor == 4 == ir.replication_factor
    # popdist outside a launch: one process of POPDIST_NUM_LOCAL_REPLICAS replicas.
    for var in ["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("POPDIST_NUM_LOCAL_REPLICAS", "2")
    ir = popxl.Ir(replication="popdist")
    assert (ir.replication_factor, ir.instance_replication_factor) == (2, 2)
    # Process 1 of 2 (as mpirun sets it): 4 replicas, 2 of them here.
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    ir = popxl.Ir(replication="popdist")
    assert (ir.replication_factor, ir.instance_replication_factor) == (4, 2)
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32), name="v")
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(2, np.float32)))
    # This package has no transport between processes (the Rust `mpi` feature).
    with pytest.raises(Exception, match="transport"):
        popxl.Session(ir, "cpu")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "x")
    with pytest.raises(ValueError, match="OMPI_COMM_WORLD_RANK"):
        popxl.Ir(replication="popdist")


def test_dot_checkpoint(tmp_path, monkeypatch):
    monkeypatch.delenv("POPART_DOT_CHECKS", raising=False)
    ir = popxl.Ir()
    with ir.main_graph:
        ops.relu(popxl.variable(randn(2), name="x"))
    ir.dot_checkpoint("first", save_dir=tmp_path / "dots")
    text = (tmp_path / "dots" / "first_all.dot").read_text()
    assert text.startswith("digraph") and "Relu" in text
    ir.dot_checkpoint("second")  # the save_dir stays
    assert (tmp_path / "dots" / "second_all.dot").exists()
    monkeypatch.setenv("POPART_DOT_CHECKS", "other:third")
    ir.dot_checkpoint("skipped")
    ir.dot_checkpoint("third")
    assert not (tmp_path / "dots" / "skipped_all.dot").exists()
    assert (tmp_path / "dots" / "third_all.dot").exists()


def test_op_created_hooks():
    ir = popxl.Ir()
    seen = []
    with ir.main_graph as g:
        x = popxl.variable(randn(2), name="x")
        handle = g.register_op_created_hook(lambda op: seen.append((op.op_type, op.graph)))
        ops.relu(x)
        sub = ir.create_empty_graph("sub")
        with sub:
            ops.exp(popxl.graph_input((2,), popxl.float32, "i"))
        y = ops.exp(x)
        g.remove_op_created_hook(handle)
        ops.relu(y)
        with pytest.raises(KeyError):
            g.remove_op_created_hook(handle)

        def bad(op):
            raise ZeroDivisionError("from the hook")

        h = g.register_op_created_hook(bad)
        with pytest.raises(ZeroDivisionError, match="from the hook"):
            ops.relu(x)
        g.remove_op_created_hook(h)
        ops.relu(x)
    assert seen == [("Relu", g), ("Exp", g)]


def test_io_tile_exchange():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.h2d_stream((2,), popxl.float32, "a")
        b = popxl.h2d_stream((2,), popxl.float32, "b")
        with popxl.transforms.io_tile_exchange():
            xa = ops.host_load(a, "xa")
            xb = ops.host_load(b, "xb")
        assert (xa.tile_set, xb.tile_set) == ("io", "io")
        y = ops.io_tile_copy(xa) + ops.io_tile_copy(xb)
        out = popxl.d2h_stream((2,), popxl.float32, "out")
        ops.host_store(out, y)
        with pytest.raises(RuntimeError, match="More than one Op remained"):
            with popxl.transforms.io_tile_exchange():
                ops.host_load(a, "again") * 2.0
    a_np, b_np = randn(2), randn(2)
    with popxl.Session(ir, "cpu") as s:
        res = s.run({a: a_np, b: b_np})
    np.testing.assert_allclose(res[out], a_np + b_np, rtol=1e-6)


def test_tensor_location_classes():
    from popxl import ExecutionContext, ReplicatedTensorSharding, TensorLocation, TensorStorage, TileSet

    loc = TensorLocation(TensorStorage.OffChip, ReplicatedTensorSharding.On)
    assert loc.storage is TensorStorage.OffChip and loc.replicated_tensor_sharding is ReplicatedTensorSharding.On
    assert TensorLocation() == TensorLocation(TensorStorage.OnChip, ReplicatedTensorSharding.Off)
    assert {TileSet.Compute, TileSet.IO} and ExecutionContext.Normal != ExecutionContext.Subgraph
    with pytest.raises(TypeError):
        TensorLocation("OnChip")


def test_stubs_are_installed():
    import popxl._native as native

    pkg = os.path.dirname(popxl.__file__)
    assert os.path.exists(os.path.join(pkg, "py.typed"))
    stub = open(os.path.join(pkg, "_native.pyi")).read()
    public = [n for n in dir(native) if not n.startswith("_")]
    missing = [n for n in public if f"def {n}(" not in stub and f"class {n}" not in stub and f"{n} =" not in stub
               and f"{n}:" not in stub]
    assert not missing, f"names of popxl._native without a stub: {missing}"


def test_decompose_sum(tmp_path, monkeypatch):
    monkeypatch.delenv("POPART_DOT_CHECKS", raising=False)
    x_np = randn(3)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x_np, name="x")
        # x is read four times: its gradient sums four contributions.
        g = ir.create_graph(lambda t: t * t * t + t, x)
        fwd = ops.call_with_info(g, x)
        grad_info = popxl.transforms.autodiff(g)
        ir.dot_checkpoint("before", save_dir=tmp_path)
        assert popxl.transforms.decompose_sum(grad_info.graph) == grad_info.graph
        ir.dot_checkpoint("after")
        seed = popxl.constant(np.ones(3, np.float32), name="seed")
        bwd = ops.call_with_info(grad_info.graph, seed, inputs_dict=grad_info.inputs_dict(fwd))
        dx = grad_info.fwd_parent_ins_to_grad_parent_outs(fwd, bwd)[x]
        out = popxl.d2h_stream(dx.shape, dx.dtype, "dx")
        ops.host_store(out, dx)
    before = (tmp_path / "before_all.dot").read_text()
    after = (tmp_path / "after_all.dot").read_text()
    assert "Sum" in before and "Sum" not in after
    assert after.count("Add") > before.count("Add")
    with popxl.Session(ir, "cpu") as s:
        res = s.run()
    np.testing.assert_allclose(res[out], 3 * x_np.astype(np.float64) ** 2 + 1, rtol=1e-5)
    with pytest.raises(TypeError):
        popxl.transforms.decompose_sum("graph")


def test_create_seeds_rejects_negative_seed():
    with pytest.raises(ValueError, match="seed"):
        popxl.create_seeds(-1)
    with pytest.raises(ValueError, match="offset"):
        popxl.create_seeds(1, offset=2**64)
