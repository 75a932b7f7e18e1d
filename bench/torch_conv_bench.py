"""PyTorch (oneDNN) side of `cargo run --release --example conv_bench`.

Times, for each shape of the table (the same list as the Rust example), the
float32 NCHW convolution forward, its data gradient and its weight gradient
(`torch.ops.aten.convolution_backward` with one output mask each), median of
`--reps` measurements each lasting at least `--min-time` seconds. Prints one
line per shape: `label fwd_ms data_ms weight_ms`.

    python3 bench/torch_conv_bench.py --threads 2 [--only TEXT] [--batches 1,32]

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
    """(label, N, C_in, H, C_out, k, stride, pad, groups), as conv_bench.rs."""
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
    return [(f"b{n}_{label}", n) + tuple(rest) for n in batches for (label, *rest) in base]


def calls(n, ci, h, co, k, s, p, g):
    """The forward, data-gradient and weight-gradient calls of one shape."""
    x = torch.rand(n, ci, h, h) - 0.5
    w = torch.rand(co, ci // g, k, k) - 0.5
    y = torch.nn.functional.conv2d(x, w, stride=s, padding=p, groups=g)
    gy = torch.rand_like(y) - 0.5

    def back(mask):
        return lambda: torch.ops.aten.convolution_backward(
            gy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], g, mask
        )

    fwd = lambda: torch.nn.functional.conv2d(x, w, stride=s, padding=p, groups=g)  # noqa: E731
    return {"fwd": fwd, "data": back([True, False, False]), "wgt": back([False, True, False])}


def serve(batches, min_time):
    """Answers `label pass` requests from stdin with one measurement each."""
    table = {s[0]: s[1:] for s in shapes(batches)}
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
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--only", default="")
    ap.add_argument("--serve", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    batches = [int(b) for b in a.batches.split(",")]
    if a.serve:
        with torch.no_grad():
            serve(batches, a.min_time)
        return
    with torch.no_grad():
        for label, n, ci, h, co, k, s, p, g in shapes(batches):
            if a.only not in label:
                continue
            c = calls(n, ci, h, co, k, s, p, g)
            fwd, data, weight = (timed(c[w], a.reps, a.min_time) for w in ("fwd", "data", "wgt"))
            print(f"{label} {fwd:.4f} {data:.4f} {weight:.4f}", flush=True)


if __name__ == "__main__":
    main()
