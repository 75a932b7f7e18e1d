"""Reduction rows (labels of kernel_bench/reduce.rs)."""
import numpy as np

from .common import f32


def cases(n):
    rows = max(n // 1024, 1)
    x = f32(rows, 1024)
    return {
        "sum last axis": (lambda: (x,), lambda a: np.sum(a, axis=-1)),
    }
