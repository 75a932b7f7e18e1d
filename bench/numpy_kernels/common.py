"""Shared inputs: float32 in [-0.5, 0.5), as the Rust benchmark fills them."""
import numpy as np


def f32(*shape, seed=7):
    return (np.random.default_rng(seed).random(shape, dtype=np.float32) - 0.5).astype(np.float32)
