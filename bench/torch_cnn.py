#!/usr/bin/env python3
"""PyTorch (CPU) mirror of `cargo run --release --example cnn`: the same LeNet-5-style network,
initial weights, batch order, optimiser and protocol, for a side-by-side step time.

Model (NCHW; Caffe's LeNet): x [B,1,28,28] -> conv 5x5 (1->20) + bias -> relu -> max_pool 2x2
-> conv 5x5 (20->50) + bias -> relu -> max_pool 2x2 -> flatten [B,800] -> relu(x@W2+b2) [B,500]
-> x@W3+b3 [B,10] -> mean NLL of softmax. SGD with momentum: v = momentum*v + g; p -= lr*v.
Initial weights: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) from the example's SplitMix64 generator (seed),
in the order conv1.W, conv1.b, conv2.W, conv2.b, W2, b2, W3, b3; the batch order comes from the
same generator (seed + 1), a Fisher-Yates permutation per epoch, drop_last. Data: the bundled
MNIST subset (data/mnist), normalised with (0.1307, 0.3081).
One step = forward + backward + update on host tensors made from the batch, then loss.item().
--compile wraps the step in torch.compile (inductor) and reports the steady state.
Prints one JSON line.
"""
import argparse, gzip, json, os, statistics, sys, time
from pathlib import Path

import numpy as np
import torch

MASK = (1 << 64) - 1


class SplitMix64:
    """The example's generator (examples/mnist/data.rs `Rng`), bit for bit."""

    def __init__(self, seed):
        self.s = (seed ^ 0x9E3779B97F4A7C15) & MASK

    def next_u64(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def uniform(self):
        return (self.next_u64() >> 11) / float(1 << 53)

    def permutation(self, n):
        v = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.next_u64() % (i + 1)
            v[i], v[j] = v[j], v[i]
        return np.array(v)


SHAPES = [("conv1.W", (20, 1, 5, 5), 25), ("conv1.b", (20,), 25), ("conv2.W", (50, 20, 5, 5), 500),
          ("conv2.b", (50,), 500), ("W2", (800, 500), 800), ("b2", (500,), 800), ("W3", (500, 10), 500),
          ("b3", (10,), 500)]


def init_params(seed):
    rng = SplitMix64(seed)
    out = {}
    for name, shape, fan_in in SHAPES:
        bound = 1.0 / np.sqrt(fan_in)
        n = int(np.prod(shape))
        out[name] = np.array([(2.0 * rng.uniform() - 1.0) * bound for _ in range(n)], dtype=np.float32).reshape(shape)
    return out


def load_split(data, prefix):
    def read(stem):
        p = data / f"{stem}.gz"
        raw = gzip.open(p).read() if p.exists() else (data / stem).read_bytes()
        ndim = raw[3]
        dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
        return np.frombuffer(raw[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)
    x = (read(f"{prefix}-images-idx3-ubyte").astype(np.float32) / 255.0 - 0.1307) / 0.3081
    y = read(f"{prefix}-labels-idx1-ubyte").astype(np.int64)
    return x.reshape(-1, 1, 28, 28), y


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parent.parent / "data" / "mnist")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--test-batch", type=int, default=500)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--compile", action="store_true", help="torch.compile the step (inductor)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    xtr, ytr = load_split(args.data, "train")
    xte, yte = load_split(args.data, "t10k")
    p = {k: torch.tensor(v, requires_grad=True) for k, v in init_params(args.seed).items()}
    vel = {k: torch.zeros_like(v) for k, v in p.items()}
    F = torch.nn.functional

    def forward(x):
        h = F.max_pool2d(F.relu(F.conv2d(x, p["conv1.W"], p["conv1.b"])), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p["conv2.W"], p["conv2.b"])), 2)
        h = F.relu(h.reshape(h.shape[0], 800) @ p["W2"] + p["b2"])
        return h @ p["W3"] + p["b3"]

    def step(x, y):
        for t in p.values():
            t.grad = None
        loss = F.nll_loss(torch.log_softmax(forward(x), -1), y)
        loss.backward()
        with torch.no_grad():
            for k, t in p.items():
                vel[k].mul_(args.momentum).add_(t.grad)
                t.sub_(args.lr * vel[k])
        return loss

    compile_s = 0.0
    if args.compile:
        t0 = time.perf_counter()
        step = torch.compile(step)
        saved = {k: v.detach().clone() for k, v in p.items()}
        step(torch.from_numpy(xtr[:args.batch]), torch.from_numpy(ytr[:args.batch])).item()
        with torch.no_grad():
            for k in p:
                p[k].copy_(saved[k])
                vel[k].zero_()
        compile_s = time.perf_counter() - t0

    rng = SplitMix64(args.seed + 1)
    nb = len(xtr) // args.batch
    step_times, losses = [], []
    t_train = time.perf_counter()
    for epoch in range(args.epochs):
        order = rng.permutation(len(xtr))
        for i in range(nb):
            idx = order[i * args.batch:(i + 1) * args.batch]
            xb, yb = torch.from_numpy(xtr[idx]), torch.from_numpy(ytr[idx])
            ts = time.perf_counter()
            loss = step(xb, yb).item()
            step_times.append(time.perf_counter() - ts)
            losses.append(loss)
        print(f"epoch {epoch + 1}/{args.epochs}: mean loss {np.mean(losses[-nb:]):.4f}", file=sys.stderr)
    train_s = time.perf_counter() - t_train

    nt = len(xte) // args.test_batch
    with torch.no_grad():
        correct = sum(int((forward(torch.from_numpy(xte[i * args.test_batch:(i + 1) * args.test_batch])).argmax(-1)
                           == torch.from_numpy(yte[i * args.test_batch:(i + 1) * args.test_batch])).sum())
                      for i in range(nt))
    steady = step_times[1:]
    med = statistics.median(steady)
    print(json.dumps({
        "bench": "torch_cnn", "torch": torch.__version__, "compile": args.compile, "threads": torch.get_num_threads(),
        "batch": args.batch, "epochs": args.epochs, "lr": args.lr, "momentum": args.momentum, "steps": len(losses),
        "compile_s": round(compile_s, 3), "first_step_s": round(step_times[0], 4),
        "step_median_us": round(med * 1e6, 1),
        "step_p10_us": round(float(np.percentile(steady, 10)) * 1e6, 1),
        "step_p90_us": round(float(np.percentile(steady, 90)) * 1e6, 1),
        "train_wall_s": round(train_s, 3),
        "first_losses": [round(v, 5) for v in losses[:5]],
        "final_loss_mean_last_50": round(float(np.mean(losses[-50:])), 4),
        "test_accuracy_pct": round(100.0 * correct / (nt * args.test_batch), 2),
    }))


if __name__ == "__main__":
    main()
