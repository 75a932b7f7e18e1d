"""var_random rows (labels of kernel_bench/var_random.rs): PopART's formulas in numpy."""
import numpy as np

from .common import f32


def cases(n):
    rows = max(n // 1024, 1)
    rng = np.random.default_rng(1)
    b1, b2, eps, wd = 0.9, 0.999, 1e-7, 0.01

    def adam_updater(w, m, v, step):
        step += 1
        return m / (1 - b1**step[0]) / (np.sqrt(v / (1 - b2**step[0])) + eps) + wd * w

    def adam_var_update(w, x):
        w -= 1e-3 * x

    def moving_average(t, x):
        t *= 0.9
        t += 0.1 * x

    def shaped_dropout(x):
        mask = (rng.random((rows, 1), dtype=np.float32) >= 0.1) * np.float32(1 / 0.9)
        return x * mask

    v = (0.01 + (np.arange(n) % 97) * 1e-3).astype(np.float32)
    return {
        "adam_updater": (lambda: (f32(n), f32(n, seed=8), v, np.zeros(1, np.float32)), adam_updater),
        "adam_var_update": (lambda: (f32(n), f32(n, seed=8)), adam_var_update),
        "accumulate_moving_average_": (lambda: (f32(n), f32(n, seed=8)), moving_average),
        "shaped_dropout [n/1024,1024] mask [n/1024,1]": (lambda: (f32(rows, 1024),), shaped_dropout),
        "random_normal": (lambda: (), lambda: rng.standard_normal(n, dtype=np.float32)),
    }
