#!/usr/bin/env python3
"""PyTorch side of the `gpt` example's `--bench` generation line: PyTorch eager
generating with its own KV cache at batch 1, on the weights the example wrote
(`--weights FILE.npz`, the names of gpt_common.param_names; the model of
gpt_common.py / torch_gpt.py: pre-LayerNorm GPT-2 blocks, learned positions,
GELU tanh, LM head tied to the token embedding).

Generation as the example's (`decode.rs`): a newline prompt, one position per
step whose keys and values enter preallocated caches [1, H, T, dh] per layer,
attention of the new position over the cached ones
(F.scaled_dot_product_attention), sampling at `--temperature`; when the
context outgrows T tokens, the window restarts at its last T / 2 tokens, which
one causal forward of the window prefills. With `check.ids` and
`check.logits` in the file (tokens the example sampled and the logits it
sampled them from), those tokens are fed back first and the largest
difference of the logits printed. Prints one JSON line:
`tokens_per_s` of the best of `--reps` generations of `--tokens` tokens.

    python3 bench/torch_gpt_generate.py --weights w.npz --heads 4 --tokens 256
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F


class Model:
    def __init__(self, w, heads):
        self.p = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in w.items()}
        self.layers = sum(1 for k in w if k.endswith(".attn_w"))
        self.seq, self.width = w["wpe"].shape
        self.heads = heads
        dh = self.width // heads
        self.k = [torch.zeros(1, heads, self.seq, dh) for _ in range(self.layers)]
        self.v = [torch.zeros(1, heads, self.seq, dh) for _ in range(self.layers)]

    def forward(self, idx, pos):
        """Logits after the tokens `idx` [1, t] at positions pos..pos + t, whose
        keys and values enter the caches; the cache holds the positions before."""
        p, d, H = self.p, self.width, self.heads
        t = idx.shape[1]
        x = p["wte"][idx] + p["wpe"][pos:pos + t]
        for l in range(self.layers):
            q_ = lambda n: p[f"h{l}.{n}"]
            h = F.layer_norm(x, (d,), q_("ln1_g"), q_("ln1_b"), 1e-5)
            q, k, v = (h @ q_("attn_w") + q_("attn_b")).split(d, dim=-1)
            heads = lambda u: u.view(1, t, H, d // H).transpose(1, 2)
            self.k[l][:, :, pos:pos + t] = heads(k)
            self.v[l][:, :, pos:pos + t] = heads(v)
            keys, values = self.k[l][:, :, :pos + t], self.v[l][:, :, :pos + t]
            if t == 1:
                y = F.scaled_dot_product_attention(heads(q), keys, values)
            else:  # a prefill from position 0
                y = F.scaled_dot_product_attention(heads(q), keys, values, is_causal=True)
            x = x + y.transpose(1, 2).reshape(1, t, d) @ q_("proj_w") + q_("proj_b")
            h = F.layer_norm(x, (d,), q_("ln2_g"), q_("ln2_b"), 1e-5)
            x = x + F.gelu(h @ q_("fc_w") + q_("fc_b"), approximate="tanh") @ q_("fc2_w") + q_("fc2_b")
        x = F.layer_norm(x[:, -1], (d,), p["lnf_g"], p["lnf_b"], 1e-5)
        return x @ p["wte"].T


def generate(m, prompt, n, pick):
    """`n` tokens after `prompt`, each `pick(step, logits)`; returns them and their logits."""
    ctx, rows = list(prompt), []
    keep = max(m.seq // 2, 1)
    start, fresh = max(len(ctx) - m.seq, 0), True
    for _ in range(n):
        if len(ctx) - start > m.seq:
            start, fresh = len(ctx) - keep, True
        window = ctx[start:]
        if fresh:
            logits = m.forward(torch.tensor([window]), 0)
        else:
            logits = m.forward(torch.tensor([window[-1:]]), len(window) - 1)
        fresh = False
        rows.append(logits[0])
        ctx.append(pick(len(rows) - 1, logits[0]))
    return ctx[len(prompt):], rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True, help=".npz of the model's weights")
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--prompt", type=int, default=0, help="the prompt's token id")
    ap.add_argument("--threads", type=int, help="torch threads (default: the CPUs of the affinity mask)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads or len(os.sched_getaffinity(0)))
    w = dict(np.load(a.weights))
    # Optional `check.ids` / `check.logits`: tokens the example generated and the logits it saw.
    weights = {k: v for k, v in w.items() if not k.startswith("check.")}
    m = Model(weights, a.heads)
    gen = torch.Generator().manual_seed(1)
    sample = lambda _, logits: int(torch.multinomial(torch.softmax(logits / a.temperature, -1), 1, generator=gen))
    times, check = [], {}
    with torch.inference_mode():
        if "check.ids" in w:
            # The example's tokens fed back: its logits against ours at every step.
            ids = w["check.ids"].astype(np.int64)
            _, rows = generate(m, [a.prompt], len(ids), lambda i, _: int(ids[i]))
            diff = np.abs(torch.stack(rows).numpy() - w["check.logits"]).max()
            check = {"checked_steps": len(ids), "max_abs_logit_diff": float(diff)}
        generate(m, [a.prompt], 4, sample)
        for _ in range(a.reps):
            t = time.perf_counter()
            generate(m, [a.prompt], a.tokens, sample)
            times.append(time.perf_counter() - t)
    best = min(times)
    print(json.dumps(check | {
        "bench": "torch_gpt_generate", "torch": torch.__version__, "threads": torch.get_num_threads(),
        "layers": m.layers, "heads": m.heads, "width": m.width, "seq": m.seq, "vocab": int(w["wte"].shape[0]),
        "tokens": a.tokens, "best_s": round(best, 4), "tokens_per_s": round(a.tokens / best, 1),
        "ms_per_token": round(best / a.tokens * 1e3, 4),
    }))


if __name__ == "__main__":
    main()
