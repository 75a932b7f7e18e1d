"""Elementwise rows (labels of kernel_bench/elementwise.rs)."""
import numpy as np

from .common import f32


def _geluerf(a, o):
    # numpy has no erf: Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), the usual
    # vectorised numpy stand-in, in place in `o`.
    z = np.abs(a) * np.float32(0.70710677)
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.3275911) * z)
    poly = t * (0.2548296 + t * (-0.28449672 + t * (1.4214138 + t * (-1.4531521 + t * 1.0614054))))
    erf = np.float32(1.0) - poly * np.exp(-z * z)
    np.multiply(np.float32(0.5) * a, np.float32(1.0) + np.copysign(erf, a), out=o)


def cases(n):
    x, y, z = f32(n), f32(n, seed=8), f32(n, seed=9)
    out = np.empty_like(x)
    bool_out = np.empty(n, dtype=np.bool_)
    i = np.arange(n)
    b0, b1 = (i // 3) % 2 == 0, (i // 5) % 2 == 0
    return {
        "exp": (lambda: (x, out), lambda a, o: np.exp(a, out=o)),
        "add": (lambda: (x, y, out), lambda a, b, o: np.add(a, b, out=o)),
        "log2": (lambda: (x, out), lambda a, o: np.log2(a, out=o)),
        "geluerf": (lambda: (x, out), _geluerf),
        "swish": (lambda: (x, out), lambda a, o: np.divide(a, 1.0 + np.exp(-a), out=o)),
        "isnan": (lambda: (x, bool_out), lambda a, o: np.isnan(a, out=o)),
        "clip": (lambda: (x, out), lambda a, o: np.clip(a, -0.25, 0.25, out=o)),
        "fmod": (lambda: (x, y, out), lambda a, b, o: np.fmod(a, b, out=o)),
        "logical_and": (lambda: (b0, b1, bool_out), lambda a, b, o: np.logical_and(a, b, out=o)),
        "maximum of 3": (lambda: (x, y, z, out), lambda a, b, c, o: np.maximum(np.maximum(a, b, out=o), c, out=o)),
    }
