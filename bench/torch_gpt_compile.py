#!/usr/bin/env python3
"""The GPT training-step benchmark of torch_gpt.py (the baselines' PyTorch eager script: same
model, data, weights, Adam and JSON line) with its forward compiled by torch.compile (default
mode, inductor on the CPU). The first steps compile; the step median covers the steps after.

    python3 bench/torch_gpt_compile.py --baselines ../shared/bench [torch_gpt.py's options]

Prints torch_gpt.py's JSON line with "bench": "torch_gpt_compile".
"""
import argparse, json, sys
from pathlib import Path

ap = argparse.ArgumentParser(add_help=False)
ap.add_argument("--baselines", type=Path, required=True, help="the directory of torch_gpt.py and gpt_common.py")
known, rest = ap.parse_known_args()
sys.path.insert(0, str(known.baselines.resolve()))
sys.argv = [sys.argv[0]] + rest

import torch  # noqa: E402
import torch_gpt as T  # noqa: E402

T.forward = torch.compile(T.forward)

# torch_gpt.main prints one JSON line; relabel it.
_print = print


def relabel(*args, **kw):
    if len(args) == 1 and isinstance(args[0], str) and args[0].startswith("{"):
        res = json.loads(args[0])
        res["bench"] = "torch_gpt_compile"
        args = (json.dumps(res),)
    _print(*args, **kw)


T.print = relabel
T.main()
