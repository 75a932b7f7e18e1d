"""PyTorch side of `cargo run --release --example layer_norm_bench`.

Times float32 `torch.nn.functional.layer_norm` over the last dim (with weight
and bias) forward, and forward + backward (`torch.autograd.grad` of the
output for a given output gradient, w.r.t. input, weight and bias), for each
shape; median of `--reps` measurements of at least `--min-time` seconds.
Prints one line per shape: `ROWSxCOLS fwd_ms fwdbwd_ms`.

    python3 bench/torch_layer_norm.py --threads 2 --shapes 1024x1024,4096x256

With `--serve` it reads requests `ROWSxCOLS pass` (pass: fwd or both) from
standard input and answers each with the milliseconds of one call, from one
measurement of at least `--min-time` seconds, so that `layer_norm_bench`
can alternate its measurements with PyTorch's.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import serve, timed  # noqa: E402


def calls(s):
    """The forward and forward + backward calls of shape `ROWSxCOLS`."""
    r, c = (int(v) for v in s.split("x"))
    x = torch.randn(r, c, requires_grad=True)
    w = torch.rand(c, requires_grad=True)
    b = torch.rand(c, requires_grad=True)
    gy = torch.randn(r, c)

    def fwd():
        with torch.no_grad():
            return torch.nn.functional.layer_norm(x, (c,), w, b, 1e-5)

    def both():
        y = torch.nn.functional.layer_norm(x, (c,), w, b, 1e-5)
        return torch.autograd.grad(y, (x, w, b), gy)

    return {"fwd": fwd, "both": both}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", default="1024x1024,4096x256")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--serve", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.serve:
        serve(calls, a.min_time)
        return
    for s in a.shapes.split(","):
        c = calls(s)
        print(f"{s} {timed(c['fwd'], a.reps, a.min_time):.4f} {timed(c['both'], a.reps, a.min_time):.4f}", flush=True)


if __name__ == "__main__":
    main()
