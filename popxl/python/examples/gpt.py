"""Train a GPT-2-style character model on Tiny Shakespeare with PopXL, then sample from it.

The Python twin of the Rust ``gpt`` example (``cargo run --release --example gpt``):
the same model (pre-LayerNorm GPT-2 blocks, learned positions, causal softmax
attention, GELU, LM head tied to the token embedding, mean cross-entropy), the
same three graphs traced once (``embed``, one transformer ``block`` called per
layer, ``head``), each differentiated once with ``autodiff``, Adam through
``accumulate_moving_average(_square)_`` and ``scaled_add_``, and the same initial
weights and batches (the Rust examples' SplitMix64 generator), so it prints the
same losses.

``--reference FILE`` trains from the initial weights and token batches JAX
exported (``tests/fixtures/gpt-reference``) and prints each loss beside JAX's.

    python popxl/python/examples/gpt.py [--steps 2000] [--layers 4] ...
    python popxl/python/examples/gpt.py --reference tests/fixtures/gpt-reference/gpt_l2_h2_w64_t32_b4.npz \\
        --layers 2 --heads 2 --width 64 --seq 32 --batch 4
"""

import argparse
import os
import sys
import time

import numpy as np
import popxl
import popxl.ops as ops
import popxl.transforms as transforms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mnist import Rng  # noqa: E402  (the Rust examples' generator)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
DEFAULT_DATA = os.path.join(ROOT, "data", "tinyshakespeare", "input.txt")
BLOCK_PARAMS = ["ln1_g", "ln1_b", "attn_w", "attn_b", "proj_w", "proj_b", "ln2_g", "ln2_b", "fc_w", "fc_b", "fc2_w", "fc2_b"]


def param_names(layers):
    """Every parameter name (``gpt_common.param_names``)."""
    return ["wte", "wpe"] + [f"h{layer}.{p}" for layer in range(layers) for p in BLOCK_PARAMS] + ["lnf_g", "lnf_b"]


def param_shape(name, s):
    d = s.width
    return {
        "wte": (s.vocab, d),
        "wpe": (s.seq, d),
        "attn_w": (d, 3 * d),
        "attn_b": (3 * d,),
        "proj_w": (d, d),
        "fc_w": (d, 4 * d),
        "fc_b": (4 * d,),
        "fc2_w": (4 * d, d),
    }.get(name.rsplit(".", 1)[-1], (d,))


def init_params(s, seed):
    """As the Rust example: matrices ~ N(0, 0.02), the residual outputs ~ N(0, 0.02 / sqrt(2 L)),
    biases 0, LayerNorm gains 1, drawn in name order from one generator."""
    rng = Rng(seed)
    params = {}
    for n in param_names(s.layers):
        shape = param_shape(n, s)
        if n.endswith("_g"):
            params[n] = np.ones(shape, np.float32)
        elif n.endswith("_b"):
            params[n] = np.zeros(shape, np.float32)
        else:
            std = 0.02 / np.sqrt(2 * s.layers) if n.endswith("proj_w") or n.endswith("fc2_w") else 0.02
            params[n] = (rng.normal(int(np.prod(shape))) * std).astype(np.float32).reshape(shape)
    return params


# --------------------------------------------------------------------------- model


def layer_norm(x, g, b):
    """PopXL's layer_norm normalises [N, C] rows: fold the leading dims, as PopXL programs do."""
    y = ops.layer_norm(x.reshape((-1, x.shape[-1])), g, b, eps=1e-5)
    return y.reshape(x.shape)


def block(s, x, *p):
    """One transformer block on ``x`` [B, T, d] with its 12 parameters."""
    b, t, d, h = s.batch, s.seq, s.width, s.heads
    dh = d // h

    def heads(u):
        return ops.transpose(u.reshape((b, t, h, dh)), (0, 2, 1, 3))

    causal = popxl.constant(np.tril(np.ones((t, t), dtype=bool)), name="causal")
    masked = popxl.constant(np.float32(-1e9), name="masked")
    scale = popxl.constant(np.float32(1.0) / np.sqrt(np.float32(dh)), name="scale")

    n1 = layer_norm(x, p[0], p[1])
    qkv = n1 @ p[2] + p[3]
    q, k, v = (heads(u) for u in ops.split(qkv, [d, d, d], axis=-1))
    att = (q @ ops.transpose(k, (0, 1, 3, 2))) * scale
    att = ops.softmax(ops.where(causal, att, masked), axis=-1)
    y = ops.transpose(att @ v, (0, 2, 1, 3)).reshape((b, t, d))
    x = x + (y @ p[4] + p[5])
    n2 = layer_norm(x, p[6], p[7])
    f = ops.gelu(n2 @ p[8] + p[9])
    return x + (f @ p[10] + p[11])


class Graphs:
    """The traced graphs of one model shape: ``embed``, ``block``, ``head``."""

    def __init__(self, ir, s):
        d = s.width
        f32 = popxl.float32

        def spec(shape):
            return popxl.TensorSpec(tuple(shape), f32)

        def embed(tok, wte, wpe):
            return ops.gather(wte, tok, axis=0) + wpe

        def head(x, g, b, wte):
            x = layer_norm(x, g, b).reshape((s.batch * s.seq, d))
            return x @ ops.transpose(wte, (1, 0))

        self.embed = ir.create_graph(
            embed, popxl.TensorSpec((s.batch, s.seq), popxl.int32), spec((s.vocab, d)), spec((s.seq, d))
        )
        block_specs = [spec(param_shape(n, s)) for n in BLOCK_PARAMS]
        self.block = ir.create_graph(lambda x, *p: block(s, x, *p), spec((s.batch, s.seq, d)), *block_specs)
        self.head = ir.create_graph(head, spec((s.batch, s.seq, d)), spec((d,)), spec((d,)), spec((s.vocab, d)))


def forward(g, s, tokens, p):
    """Forward through every graph: (call sites embed, blocks..., head; block inputs and head input; logits)."""
    embed = ops.call_with_info(g.embed, tokens, p["wte"], p["wpe"])
    x = embed.parent_output(0)
    sites, xs = [embed], []
    for layer in range(s.layers):
        site = ops.call_with_info(g.block, x, *[p[f"h{layer}.{n}"] for n in BLOCK_PARAMS])
        xs.append(x)
        x = site.parent_output(0)
        sites.append(site)
    head = ops.call_with_info(g.head, x, p["lnf_g"], p["lnf_b"], p["wte"])
    xs.append(x)
    sites.append(head)
    return sites, xs, head.parent_output(0)


def loss_and_grad(logits, targets):
    """Mean cross-entropy of ``logits`` against ``targets`` [B, T], and d(loss)/d(logits)."""
    probs = ops.softmax(logits, axis=-1)
    return ops.nll_loss_with_softmax_grad(probs, targets.reshape((-1,)))


def grad_graph(graph, skip_first):
    """The gradient graph of ``graph`` for every input (but the first, integer tokens, with ``skip_first``)."""
    ins = graph.inputs
    return transforms.autodiff(graph, grads_required=ins[1:] if skip_first else ins)


def backward(info, site, seed):
    """Call gradient graph ``info`` for forward call ``site`` with output gradient ``seed``."""
    call = ops.call_with_info(info.graph, seed, inputs_dict=info.inputs_dict(site))
    return info.fwd_parent_ins_to_grad_parent_outs(site, call)


def adam(w, g, name, lr):
    """Adam (betas 0.9/0.999, eps 1e-8, bias-corrected, no weight decay) on ``w``; gradients
    averaged over the replicas first in a replicated IR."""
    if popxl.gir().replication_factor > 1:
        g = ops.collectives.replicated_all_reduce(g, "mean")
    zeros = np.zeros(w.shape, np.float32)
    m = popxl.variable(zeros, name=f"{name}.adam_m")
    v = popxl.variable(zeros, name=f"{name}.adam_v")
    t = popxl.variable(np.float32(0), name=f"{name}.adam_t")
    # The factors as float32, as the Rust example passes them.
    m = ops.var_updates.accumulate_moving_average_(m, g, np.float32(0.9))
    v = ops.var_updates.accumulate_moving_average_square_(v, g, np.float32(0.999))
    # time_step is incremented by the updater; the corrections are computed in float64.
    upd = ops.var_updates.adam_updater(m, v, time_step=t, beta1=0.9, beta2=0.999, epsilon=1e-8)
    ops.scaled_add_(w, upd, 1.0, -lr)


def train_step(g, s, tokens, targets, p, lr):
    """Forward, backward through the three gradient graphs (blocks in reverse order), Adam on every parameter."""
    sites, xs, logits = forward(g, s, tokens, p)
    loss, dlogits = loss_and_grad(logits, targets)
    dhead, dblock, dembed = grad_graph(g.head, False), grad_graph(g.block, False), grad_graph(g.embed, True)
    grads = {}
    gh = backward(dhead, sites[-1], dlogits)
    dx = gh[xs[s.layers]]
    for name in ["lnf_g", "lnf_b", "wte"]:
        grads[name] = gh[p[name]]
    for layer in reversed(range(s.layers)):
        gb = backward(dblock, sites[layer + 1], dx)
        for n in BLOCK_PARAMS:
            grads[f"h{layer}.{n}"] = gb[p[f"h{layer}.{n}"]]
        dx = gb[xs[layer]]
    ge = backward(dembed, sites[0], dx)
    grads["wte"] = grads["wte"] + ge[p["wte"]]
    grads["wpe"] = ge[p["wpe"]]
    for name in sorted(p):
        adam(p[name], grads[name], name, lr)
    return loss


class Program:
    """An IR with the parameters as variables, token/target streams in and one stream out."""

    def __init__(self, s, init, lr=None, logits_only=False, replicas=1):
        if replicas <= 0 or s.batch % replicas:
            raise ValueError(f"--batch ({s.batch}) must be a multiple of --replicas ({replicas})")
        s = Shape(s, batch=s.batch // replicas)
        self.replicas = replicas
        self.ir = ir = popxl.Ir()
        ir.replication_factor = replicas
        with ir.main_graph, popxl.in_sequence():
            self.tokens = popxl.h2d_stream((s.batch, s.seq), popxl.int32, "tokens")
            self.targets = popxl.h2d_stream((s.batch, s.seq), popxl.int32, "targets")
            self.params = {n: popxl.variable(a, name=n) for n, a in init.items()}
            graphs = Graphs(ir, s)
            tok = ops.host_load(self.tokens, "x")
            tgt = ops.host_load(self.targets, "y")
            if lr is not None:
                result = train_step(graphs, s, tok, tgt, self.params, lr)
            else:
                logits = forward(graphs, s, tok, self.params)[2]
                result = logits if logits_only else loss_and_grad(logits, tgt)[0]
            self.out = popxl.d2h_stream(result.shape, result.dtype, "out")
            ops.host_store(self.out, result)

    def inputs(self, x, y):
        """The stream inputs of one step: the global batch split over the replicas."""
        if self.replicas > 1:
            x = x.reshape((self.replicas, -1, x.shape[-1]))
            y = y.reshape((self.replicas, -1, y.shape[-1]))
        return {self.tokens: x, self.targets: y}


class Shape:
    """Model and batch sizes."""

    def __init__(self, other=None, **kw):
        for k in ["layers", "heads", "width", "seq", "batch", "vocab"]:
            setattr(self, k, kw[k] if k in kw else getattr(other, k))


# --------------------------------------------------------------------------- data


class Corpus:
    """The text as token ids, its (sorted) vocabulary and the 90% / 10% split point."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.vocab = sorted(set(text))
        lut = {c: i for i, c in enumerate(self.vocab)}
        self.ids = np.array([lut[c] for c in text], dtype=np.int32)
        self.split = len(self.ids) * 9 // 10


def batch(rng, ids, lo, hi, s):
    """``s.batch`` windows of ``seq + 1`` tokens from ``ids[lo:hi]``: inputs and next-token targets."""
    span = hi - lo - s.seq - 1
    starts = lo + (rng.next_u64(s.batch) % np.uint64(span)).astype(np.int64)
    win = starts[:, None] + np.arange(s.seq + 1)[None, :]
    w = ids[win]
    return np.ascontiguousarray(w[:, :-1]), np.ascontiguousarray(w[:, 1:])


def validate(session, prog, corpus, s, batches):
    """Mean loss over ``batches`` validation batches (always the same ones)."""
    rng = Rng(12345)
    total = 0.0
    with session:
        for _ in range(batches):
            x, y = batch(rng, corpus.ids, corpus.split, len(corpus.ids), s)
            total += float(session.run(prog.inputs(x, y))[prog.out].reshape(-1)[0])
    return total / max(batches, 1)


def sample(session, prog, corpus, s, n, temp, seed):
    """Sample ``n`` characters after a newline prompt with the logits-only program (batch 1)."""
    rng = Rng(seed ^ 0x5A5A)
    newline = corpus.vocab.index("\n") if "\n" in corpus.vocab else 0
    ctx = [newline]
    out = []
    with session:
        for _ in range(n):
            window = ctx[-s.seq :]
            x = np.zeros((1, s.seq), np.int32)
            x[0, : len(window)] = window
            logits = session.run(prog.inputs(x, x.copy()))[prog.out].astype(np.float64)
            row = logits[len(window) - 1]
            w = np.exp((row - row.max()) / temp)
            u = float(rng.uniform(1)[0]) * float(w.sum())
            pick = len(w) - 1
            for i, wi in enumerate(w.tolist()):
                if u < wi:
                    pick = i
                    break
                u -= wi
            ctx.append(pick)
            out.append(corpus.vocab[pick])
    return "".join(out)


# --------------------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Train a GPT-2-style character model on Tiny Shakespeare, then sample from it.")
    p.add_argument("--data", default=DEFAULT_DATA, help="text file (default data/tinyshakespeare/input.txt)")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks (default 4)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--width", type=int, default=256, help="model width (default 256)")
    p.add_argument("--seq", type=int, default=128, help="context length (default 128)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step (default 16)")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3)")
    p.add_argument("--steps", type=int, default=2000, help="training steps (default 2000)")
    p.add_argument("--eval-every", type=int, default=500, help="validation loss every N steps (default 500; 0: only at the end)")
    p.add_argument("--eval-batches", type=int, default=8, help="validation batches per evaluation (default 8)")
    p.add_argument("--seed", type=int, default=0, help="initialisation and batch seed (default 0)")
    p.add_argument("--sample", type=int, default=400, help="characters to sample after training (default 400)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8)")
    p.add_argument("--save", default=None, help="write the trained weights (.npz or a directory of .npy)")
    p.add_argument("--load", default=None, help="start from saved weights")
    p.add_argument("--replicas", type=int, default=1, help="data-parallel replicas (replication_factor, default 1)")
    p.add_argument("--bench", action="store_true", help="print ms/step and tokens/s")
    p.add_argument("--print-losses", action="store_true", help="print every training step's loss")
    p.add_argument("--reference", default=None, help="train from the weights and batches of a JAX reference .npz and compare losses")
    o = p.parse_args(argv)
    if min(o.layers, o.heads, o.width, o.seq, o.batch) <= 0 or o.width % o.heads:
        p.error("--layers, --heads, --width, --seq and --batch must be positive, the width a multiple of the heads")
    if not o.temperature > 0:
        p.error("--temperature must be positive")
    return o


def _load_weights(path, names):
    if path.endswith(".npz"):
        with np.load(path) as z:
            return {n: np.asarray(z[n], np.float32) for n in names}
    return {n: np.load(os.path.join(path, n + ".npy")).astype(np.float32) for n in names}


def run_reference(o, s):
    """Train from JAX's initial weights on JAX's batches; print our loss and JAX's for each step."""
    with np.load(o.reference) as z:
        init = {n: np.asarray(z[f"p.{n}"], np.float32) for n in param_names(s.layers)}
        steps = sum(1 for k in z.files if k.startswith("x"))
        batches = [(z[f"x{i}"].astype(np.int32), z[f"y{i}"].astype(np.int32)) for i in range(steps)]
        want = np.asarray(z["losses"], np.float64)
    s.vocab = init["wte"].shape[0]
    for n, a in init.items():
        if a.shape != param_shape(n, s):
            raise SystemExit(f"{o.reference}: {n} has shape {a.shape}, not {param_shape(n, s)}: pass the sizes it was made with")
    prog = Program(s, init, lr=o.lr)
    got = []
    with popxl.Session(prog.ir, "cpu") as session:
        for x, y in batches:
            got.append(float(session.run(prog.inputs(x, y))[prog.out]))
    for i, (g, w) in enumerate(zip(got, want)):
        print(f"step {i}: loss {g:.7f}, JAX {w:.7f} (relative difference {abs(g - w) / abs(w):.1e})")
    return got, want.tolist()


def main(argv=None):
    o = parse_args(argv)
    corpus = Corpus(o.data)
    s = Shape(layers=o.layers, heads=o.heads, width=o.width, seq=o.seq, batch=o.batch, vocab=len(corpus.vocab))
    if o.reference is not None:
        return run_reference(o, s)
    if corpus.split <= s.seq + 1 or len(corpus.ids) - corpus.split <= s.seq + 1:
        raise SystemExit("the text is too short for this context length")
    print(
        f"GPT: {s.layers} layers, {s.heads} heads, width {s.width}, context {s.seq}, batch {s.batch}, vocab {s.vocab}, "
        f"{o.replicas} replica(s); {corpus.split} train / {len(corpus.ids) - corpus.split} validation characters",
        file=sys.stderr,
    )
    names = param_names(s.layers)
    init = _load_weights(o.load, names) if o.load else init_params(s, o.seed)
    start = time.perf_counter()
    train = Program(s, init, lr=o.lr, replicas=o.replicas)
    session = popxl.Session(train.ir, "cpu")
    print(f"training program built and prepared in {time.perf_counter() - start:.3f} s", file=sys.stderr)
    eval_prog = Program(s, init)
    evaluation = popxl.Session(eval_prog.ir, "cpu")

    rng = Rng(o.seed + 1)
    losses, step_times = [], []
    with session:
        for step in range(o.steps):
            x, y = batch(rng, corpus.ids, 0, corpus.split, s)
            t = time.perf_counter()
            out = session.run(train.inputs(x, y))
            step_times.append(time.perf_counter() - t)
            # One loss per replica: the step's loss (of the global batch) is their mean.
            losses.append(float(np.mean(out[train.out])))
            if o.print_losses:
                print(f"step {step}: loss {losses[-1]:.6f}")
            if o.eval_every > 0 and (step + 1) % o.eval_every == 0 and step + 1 < o.steps:
                data = session.get_tensors_data(list(train.params.values()))
                evaluation.write_variables_data({eval_prog.params[n]: data[v] for n, v in train.params.items()})
                val = validate(evaluation, eval_prog, corpus, s, o.eval_batches)
                print(f"step {step + 1}: validation loss {val:.4f}", file=sys.stderr)
    data = session.get_tensors_data(list(train.params.values()))
    weights = {n: data[v] for n, v in train.params.items()}
    evaluation.write_variables_data({eval_prog.params[n]: weights[n] for n in names})
    val = validate(evaluation, eval_prog, corpus, s, o.eval_batches)
    tail = losses[-50:]
    print(
        f"Trained {len(losses)} steps; mean training loss of the last {len(tail)}: {sum(tail) / max(len(tail), 1):.4f}; "
        f"validation loss {val:.4f} nats/char"
    )
    if o.save:
        if o.save.endswith(".npz"):
            np.savez(o.save, **weights)
        else:
            os.makedirs(o.save, exist_ok=True)
            for n, a in weights.items():
                np.save(os.path.join(o.save, n + ".npy"), a)
        print(f"saved the weights to {o.save}", file=sys.stderr)
    if o.bench and len(step_times) > 1:
        ms = sorted(t * 1e3 for t in step_times[1:])
        med = ms[len(ms) // 2]
        print(
            f"bench: step median {med:.2f} ms (p10 {ms[len(ms) // 10]:.2f}, p90 {ms[len(ms) * 9 // 10]:.2f}), "
            f"{s.batch * s.seq / (med / 1e3):.0f} tokens/s"
        )
    if o.sample > 0:
        one = Shape(s, batch=1)
        prog = Program(one, weights, logits_only=True)
        text = sample(popxl.Session(prog.ir, "cpu"), prog, corpus, one, o.sample, o.temperature, o.seed)
        print(f"--- sample (temperature {o.temperature}) ---\n{text}\n---")
    return losses, val


if __name__ == "__main__":
    main()
