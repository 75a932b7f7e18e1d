"""Replica groupings, grouped variables and collectives (replicas simulated on cpu)."""

import numpy as np
import pytest
import popxl
import popxl.ops as ops


@pytest.mark.parametrize("stride,group_size,assignment", [(1, 2, [0, 0, 1, 1, 2, 2, 3, 3]), (2, 4, [0, 1] * 4), (4, 2, [0, 1, 2, 3] * 2)])
def test_replica_grouping_assignment(stride, group_size, assignment):
    ir = popxl.Ir(replication=8)
    rg = ir.replica_grouping(stride=stride, group_size=group_size)
    assert rg.assignment == assignment
    assert rg.num_groups * rg.group_size == 8


def test_all_reduce_and_grouped_variable():
    rf = 4
    ir = popxl.Ir()
    ir.replication_factor = rf
    with ir.main_graph:
        x_in = popxl.h2d_stream((2,), popxl.float32, "x")
        x = ops.host_load(x_in)
        s = ops.collectives.replicated_all_reduce(x, op="add")
        out = popxl.d2h_stream(s.shape, s.dtype, "s")
        ops.host_store(out, s)
        rg = ir.replica_grouping(group_size=2)
        v = popxl.variable(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), replica_grouping=rg, name="v")
        assert v.shape == (2,)
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(2, np.float32)))
    x_np = np.arange(rf * 2, dtype=np.float32).reshape(rf, 2)
    with popxl.Session(ir, "cpu") as session:
        res = session.run({x_in: x_np})
    np.testing.assert_allclose(res[out], np.broadcast_to(x_np.sum(0), (rf, 2)))
    np.testing.assert_allclose(session.get_tensor_data(v), [[2, 3], [4, 5]])
    with pytest.raises(ValueError):
        ops.collectives.replicated_all_reduce(x, op="xor")


def test_replica_sharded_variable_gathers_back():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        data = np.array([1, 2, 3, 4], np.int32)
        remote, shard = popxl.replica_sharded_variable(data, popxl.int32, name="x")
        assert shard.shape == (2,)
        full = ops.collectives.replicated_all_gather(shard)
        out = popxl.d2h_stream(full.shape, full.dtype, "full")
        ops.host_store(out, full)
    with popxl.Session(ir, "cpu") as session:
        res = session.run()
    np.testing.assert_equal(res[out], np.stack([data, data]))
    np.testing.assert_equal(session.get_tensor_data(remote), data)
