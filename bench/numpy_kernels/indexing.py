"""indexing rows (labels of kernel_bench/indexing.rs)."""
import numpy as np

from .common import f32


def lcg(n, modulo):
    return ((np.arange(n, dtype=np.int64) * 7919 + 13) % modulo).astype(np.int32)


def cases(n):
    rows = max(n // 1024, 4)
    half, quarter = rows // 2, rows // 4
    x = f32(rows, 1024)
    parts = [np.empty((rows, 256), np.float32) for _ in range(4)]

    def split(a, ps):
        for k, p in enumerate(ps):
            np.copyto(p, a[:, k * 256:(k + 1) * 256])

    sub = np.empty((half, 512), np.float32)
    out = np.empty_like(x)
    sidx, vals = lcg(half, rows), f32(half, 1024, seed=8)

    def scatter(t, i, v, o):
        np.copyto(o, t)
        o[i] = v

    ridx, red = lcg(rows, quarter), np.empty((quarter, 1024), np.float32)

    def scatter_sum(d, i, o):
        o.fill(0)
        np.add.at(o, i, d)

    big = f32(2 * rows, 1024, seed=9)
    oidx, onehot = lcg(rows, 1024), np.empty((rows, 1024), np.float32)
    arange = np.arange(rows)

    def encode(i, o):
        o.fill(0.0)
        o[arange, i] = 1.0

    return {
        "subsample 2x2": (lambda: (x, sub), lambda a, o: np.copyto(o, a[::2, ::2])),
        "split 4 parts axis 1": (lambda: (x, parts), split),
        "scatter rows": (lambda: (x, sidx, vals, out), scatter),
        "scatter_reduce sum rows": (lambda: (x, ridx, red), scatter_sum),
        "dynamic_slice rows": (lambda: (big, out), lambda t, o: np.copyto(o, t[half:half + rows])),
        "dynamic_update_ rows": (lambda: (big, x), lambda t, u: t.__setitem__(slice(half, half + rows), u)),
        "onehot 1024 classes": (lambda: (oidx, onehot), encode),
    }
