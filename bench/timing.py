"""Timing helper shared by the PyTorch benchmark scripts of this directory."""
import sys
import time


def timed(f, reps, min_time, warm_up=True):
    """Median milliseconds of one call of `f`: `reps` measurements, each
    repeating `f` for at least `min_time` seconds, after one warm-up call
    (unless `warm_up` is false)."""
    if warm_up:
        f()
    out = []
    for _ in range(reps):
        iters, t0 = 0, time.perf_counter()
        while True:
            f()
            iters += 1
            el = time.perf_counter() - t0
            if el >= min_time:
                out.append(el / iters * 1e3)
                break
    return sorted(out)[len(out) // 2]


def serve(calls, min_time):
    """The `--serve` loop of the kernel benches: each line of standard input
    names a shape and a pass (`calls(shape)[pass]`); answer one measurement of
    it in milliseconds (warmed up once on first use)."""
    made, warm = {}, set()
    for line in sys.stdin:
        s, which = line.split()
        if s not in made:
            made = {s: calls(s)}
        f = made[s][which]
        if (s, which) not in warm:
            warm.add((s, which))
            f()
        print(f"{timed(f, 1, min_time, warm_up=False):.4f}", flush=True)
