"""PyTorch (oneDNN) side of `cargo run --release --example conv_bench`.

Times, for each shape of the table (the same list as the Rust example), the
float32 NCHW convolution forward, its data gradient and its weight gradient
(`torch.ops.aten.convolution_backward` with one output mask each), median of
`--reps` measurements each lasting at least `--min-time` seconds. Prints one
line per shape: `label fwd_ms data_ms weight_ms`.

    python3 bench/torch_conv_bench.py --threads 2 [--only TEXT] [--batches 1,32] [--suite 3d]

`--suite 3d` times the 3-d list instead (default batches 1,2).

With `--serve` it reads requests `label pass` (pass: fwd, data or wgt) from
standard input, one per line, and answers each with the milliseconds of one
call, from one measurement of at least `--min-time` seconds (a warm-up call
first, the first time). `conv_bench` uses it to alternate its measurements
with PyTorch's, so that both see the same state of a shared machine.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import timed  # noqa: E402


def shapes(batches):
    """(label, N, C_in, [H, W], C_out, kernel, strides, pads, groups), as conv_bench.rs."""
    base = [
        ("stem7x7s2", 3, 224, 64, 7, 2, 3, 1),
        ("3x3s1_c64_56", 64, 56, 64, 3, 1, 1, 1),
        ("3x3s1_c128_28", 128, 28, 128, 3, 1, 1, 1),
        ("3x3s1_c256_14", 256, 14, 256, 3, 1, 1, 1),
        ("3x3s1_c512_7", 512, 7, 512, 3, 1, 1, 1),
        ("3x3s2_c64_56", 64, 56, 128, 3, 2, 1, 1),
        ("3x3s2_c256_14", 256, 14, 512, 3, 2, 1, 1),
        ("1x1_c256_56", 256, 56, 64, 1, 1, 0, 1),
        ("1x1_c1024_14", 1024, 14, 256, 1, 1, 0, 1),
        ("1x1_c2048_7", 2048, 7, 512, 1, 1, 0, 1),
        ("dw3x3_c64_56", 64, 56, 64, 3, 1, 1, 64),
        ("dw3x3_c256_14", 256, 14, 256, 3, 1, 1, 256),
        ("dw3x3_c512_7", 512, 7, 512, 3, 1, 1, 512),
    ]
    return [
        (f"b{n}_{label}", n, ci, [h, h], co, [k, k], [s, s], [p, p], g)
        for n in batches
        for (label, ci, h, co, k, s, p, g) in base
    ]


def shapes_3d(batches):
    """(label, N, C_in, [D, H, W], C_out, kernel, strides, pads, groups), as conv_bench.rs --suite 3d."""
    base = [
        ("stem3x7x7s122", 3, [16, 112, 112], 64, [3, 7, 7], [1, 2, 2], [1, 3, 3], 1),
        ("3x3x3_c64_16x56", 64, [16, 56, 56], 64, [3] * 3, [1] * 3, [1] * 3, 1),
        ("3x3x3s2_c64_16x56", 64, [16, 56, 56], 128, [3] * 3, [2] * 3, [1] * 3, 1),
        ("3x3x3_c128_8x28", 128, [8, 28, 28], 128, [3] * 3, [1] * 3, [1] * 3, 1),
        ("3x3x3_c256_4x14", 256, [4, 14, 14], 256, [3] * 3, [1] * 3, [1] * 3, 1),
        ("1x1x1_c256_8x28", 256, [8, 28, 28], 64, [1] * 3, [1] * 3, [0] * 3, 1),
    ]
    return [(f"b{n}_{label}", n) + tuple(rest) for n in batches for (label, *rest) in base]


def calls(n, ci, size, co, k, s, p, g):
    """The forward, data-gradient and weight-gradient calls of one shape."""
    nd = len(size)
    x = torch.rand(n, ci, *size) - 0.5
    w = torch.rand(co, ci // g, *k) - 0.5
    ones, zeros = [1] * nd, [0] * nd

    def fwd():
        return torch.ops.aten.convolution(x, w, None, s, p, ones, False, zeros, g)

    gy = torch.rand_like(fwd()) - 0.5

    def back(mask):
        return lambda: torch.ops.aten.convolution_backward(gy, x, w, None, s, p, ones, False, zeros, g, mask)

    return {"fwd": fwd, "data": back([True, False, False]), "wgt": back([False, True, False])}


def serve(batches, min_time, suite):
    """Answers `label pass` requests from stdin with one measurement each."""
    table = {s[0]: s[1:] for s in suite(batches)}
    made, warm = {}, set()
    for line in sys.stdin:
        label, which = line.split()
        if label not in made:
            made = {label: calls(*table[label])}  # one shape's tensors at a time
        f = made[label][which]
        if (label, which) not in warm:
            warm.add((label, which))
            f()
        print(f"{timed(f, 1, min_time, warm_up=False):.4f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--batches", default="")
    ap.add_argument("--suite", default="2d", choices=["2d", "3d"])
    ap.add_argument("--only", default="")
    ap.add_argument("--serve", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    batches = [int(b) for b in (a.batches or ("1,2" if a.suite == "3d" else "1,32")).split(",")]
    suite = shapes_3d if a.suite == "3d" else shapes
    if a.serve:
        with torch.no_grad():
            serve(batches, a.min_time, suite)
        return
    with torch.no_grad():
        for label, *shape in suite(batches):
            if a.only not in label:
                continue
            c = calls(*shape)
            fwd, data, weight = (timed(c[w], a.reps, a.min_time) for w in ("fwd", "data", "wgt"))
            print(f"{label} {fwd:.4f} {data:.4f} {weight:.4f}", flush=True)


if __name__ == "__main__":
    main()
