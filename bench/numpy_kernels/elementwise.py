"""Elementwise rows (labels of kernel_bench/elementwise.rs)."""
import numpy as np

from .common import f32


def cases(n):
    x, y = f32(n), f32(n, seed=8)
    out = np.empty_like(x)
    return {
        "exp": (lambda: (x, out), lambda a, o: np.exp(a, out=o)),
        "add": (lambda: (x, y, out), lambda a, b, o: np.add(a, b, out=o)),
    }
