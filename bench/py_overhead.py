#!/usr/bin/env python3
"""Python overhead of the `popxl` package: the MNIST example in Python
(popxl/python/examples/mnist.py) against the Rust example (`--example mnist`),
side by side in one run, alternating the two so both see the same machine load.

    cargo build --release -p popxl-session --example mnist
    pip install ./popxl/python
    python3 bench/py_overhead.py [--rounds 3] [--rust target/release/examples/mnist]

For each configuration (the guide's: batch 8, hidden 32; and batch 128, hidden 512)
it prints the median step time of each (the `bench:` lines of both examples: the time of
`Session.run` / `Session::run`, median over the run), the time to first step (build +
prepare + first run), the IR build time of the Python example, and the ratios. Each
number is the median over the rounds. Acceptance (issue 33): step ratio <= 1.10, Python
IR build <= 2x the Rust time to first step.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CONFIGS = [
    ("guide: batch 8, hidden 32", ["--batch", "8", "--hidden", "32"]),
    ("batch 128, hidden 512", ["--batch", "128", "--hidden", "512", "--epochs", "3"]),
]
STEP = re.compile(r"bench: step median ([0-9.]+) us .*time to first step ([0-9.]+) ms")
BUILD = re.compile(r"IR built in ([0-9.]+) ms")
ACC = re.compile(r"Accuracy on test set: ([0-9.]+)%")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    m = STEP.search(r.stdout)
    if not m:
        sys.exit(f"no bench line in the output of {' '.join(cmd)}:\n{r.stdout}")
    b = BUILD.search(r.stdout)
    return float(m.group(1)), float(m.group(2)), float(b.group(1)) if b else None, ACC.search(r.stdout).group(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="runs of each example per configuration (default 3)")
    p.add_argument("--rust", default=os.path.join(ROOT, "target", "release", "examples", "mnist"))
    p.add_argument("--python", default=sys.executable, help="the interpreter with popxl installed")
    o = p.parse_args()
    if not os.path.exists(o.rust):
        sys.exit(f"{o.rust} not found: cargo build --release -p popxl-session --example mnist")
    script = os.path.join(ROOT, "popxl", "python", "examples", "mnist.py")
    ok = True
    for name, args in CONFIGS:
        rust, py = [], []
        for _ in range(o.rounds):
            rust.append(run([o.rust, *args, "--bench"]))
            py.append(run([o.python, script, *args, "--bench"]))
        rs, rf = statistics.median(r[0] for r in rust), statistics.median(r[1] for r in rust)
        ps, pf = statistics.median(r[0] for r in py), statistics.median(r[1] for r in py)
        pb = statistics.median(r[2] for r in py)
        print(f"{name}: accuracy rust {rust[0][3]}%, python {py[0][3]}%")
        print(f"  step median: rust {rs:.1f} us, python {ps:.1f} us, ratio {ps / rs:.3f}")
        print(f"  time to first step: rust {rf:.1f} ms, python {pf:.1f} ms (ratio {pf / rf:.2f}); "
              f"python IR build {pb:.1f} ms = {pb / rf:.2f}x the rust time to first step")
        ok &= ps / rs <= 1.10 and pb / rf <= 2.0
    print("acceptance (step ratio <= 1.10, IR build <= 2x):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
