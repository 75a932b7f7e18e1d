"""Reduction rows (labels of kernel_bench/reduce.rs)."""
import numpy as np

from .common import f32


def logsumexp(a, axis):
    m = np.max(a, axis=axis, keepdims=True)
    return np.log(np.sum(np.exp(a - m), axis=axis)) + np.squeeze(m, axis)


def topk(a, k):
    idx = np.argpartition(-a, k - 1, axis=-1)[:, :k]
    vals = np.take_along_axis(a, idx, axis=-1)
    order = np.argsort(-vals, axis=-1, kind="stable")
    return np.take_along_axis(vals, order, axis=-1), np.take_along_axis(idx, order, axis=-1).astype(np.int32)


def cases(n):
    rows = max(n // 1024, 1)
    x = f32(rows, 1024)
    reductions = {
        "prod": lambda a, ax: np.prod(a, axis=ax),
        "l1": lambda a, ax: np.sum(np.abs(a), axis=ax),
        "l2": lambda a, ax: np.linalg.norm(a, axis=ax),
        "logsum": lambda a, ax: np.log(np.sum(a, axis=ax)),
        "logsumexp": logsumexp,
        "sumsquare": lambda a, ax: np.sum(np.square(a), axis=ax),
        "median": lambda a, ax: np.median(a, axis=ax),
    }
    out = {"sum last axis": (lambda: (x,), lambda a: np.sum(a, axis=-1))}
    for name, f in reductions.items():
        for ax, where in ((-1, "last axis"), (0, "axis 0")):
            out[f"{name} {where}"] = (lambda: (x,), lambda a, f=f, ax=ax: f(a, ax))
    for ax, where in ((-1, "last axis"), (0, "axis 0")):
        out[f"cumsum {where}"] = (lambda: (x,), lambda a, ax=ax: np.cumsum(a, axis=ax))
        out[f"argmax {where}"] = (lambda: (x,), lambda a, ax=ax: np.argmax(a, axis=ax))
    out["topk k=8 last axis"] = (lambda: (x,), lambda a: topk(a, 8))
    return out
