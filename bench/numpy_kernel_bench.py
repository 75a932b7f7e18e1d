"""numpy baselines of `kernel_bench --suite ops`: one line `label<TAB>median us`
per row, on one thread, at the same sizes as the Rust rows.

    python3 bench/numpy_kernel_bench.py [--elements 1048576] [--only TEXT]

Each op family has its module in `numpy_kernels/` defining
`cases(n) -> {label: (setup() -> args, fn(*args))}`; labels match the Rust
rows in `popxl-session/examples/kernel_bench/<family>.rs`.
"""
import argparse
import importlib
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FAMILIES = ["elementwise", "reduce", "indexing", "var_random"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--elements", type=int, default=1 << 20)
    p.add_argument("--only", default="")
    p.add_argument("--calls", type=int, default=50)
    a = p.parse_args()
    for fam in FAMILIES:
        mod = importlib.import_module(f"numpy_kernels.{fam}")
        for label, (setup, fn) in mod.cases(a.elements).items():
            if a.only not in label:
                continue
            args = setup()
            fn(*args)
            times = []
            for _ in range(a.calls):
                t0 = time.perf_counter()
                fn(*args)
                times.append((time.perf_counter() - t0) * 1e6)
            times.sort()
            print(f"{label}\t{times[len(times) // 2]:.1f}", flush=True)


if __name__ == "__main__":
    main()
