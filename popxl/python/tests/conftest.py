import numpy as np
import popxl
import popxl.ops as ops


def run(build, *arrays, device="cpu"):
    """Build a main graph from ``build(*loaded inputs)`` (returning a tensor or a tuple), run it once,
    and return the outputs as numpy arrays."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        streams = [popxl.h2d_stream(a.shape, popxl.dtype.as_dtype(a.dtype), f"in{i}") for i, a in enumerate(arrays)]
        xs = [ops.host_load(s, f"x{i}") for i, s in enumerate(streams)]
        outs = build(*xs)
        single = isinstance(outs, popxl.Tensor)
        outs = [outs] if single else list(outs)
        d2h = []
        for i, o in enumerate(outs):
            s = popxl.d2h_stream(o.shape, o.dtype, f"out{i}")
            ops.host_store(s, o)
            d2h.append(s)
    session = popxl.Session(ir, device)
    with session:
        res = session.run(dict(zip(streams, arrays)))
    got = [res[s] for s in d2h]
    return got[0] if single else got
