"""The example programs (``popxl/python/examples``), run briefly and checked against
independent numpy computations and the JAX reference trajectory."""

import math
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, EXAMPLES)

import gpt  # noqa: E402
import mnist  # noqa: E402

GPT_FIXTURE = os.path.join(ROOT, "tests", "fixtures", "gpt-reference", "gpt_l2_h2_w64_t32_b4.npz")


def _gelu(z):
    """The tanh approximation of GELU (PopXL's ``gelu``) and its derivative, in float64."""
    c, k = math.sqrt(2 / math.pi), 0.044715
    t = np.tanh(c * (z + k * z**3))
    return 0.5 * z * (1 + t), 0.5 * (1 + t) + 0.5 * z * (1 - t**2) * c * (1 + 3 * k * z**2)


def _numpy_mnist(params, images, labels, order, batch, lr, steps):
    """SGD on the two-layer gelu network written out by hand (float64): the losses and trained weights."""
    W0, b0, W1, b1 = (params[n].astype(np.float64) for n in ["W0", "b0", "W1", "b1"])
    losses = []
    for s in range(steps):
        idx = order[s * batch : (s + 1) * batch]
        x = images[idx].reshape(batch, -1).astype(np.float64)
        lbl = labels[idx]
        z0 = x @ W0 + b0
        h, dh0 = _gelu(z0)
        z1 = h @ W1 + b1
        y, dh1 = _gelu(z1)
        p = np.exp(y - y.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        losses.append(-np.mean(np.log(p[np.arange(batch), lbl])))
        dy = p.copy()
        dy[np.arange(batch), lbl] -= 1
        dy /= batch
        dz1 = dy * dh1
        dh = dz1 @ W1.T
        dz0 = dh * dh0
        W1, b1 = W1 - lr * h.T @ dz1, b1 - lr * dz1.sum(0)
        W0, b0 = W0 - lr * x.T @ dz0, b0 - lr * dz0.sum(0)
    return losses, {"W0": W0, "b0": b0, "W1": W1, "b1": b1}


def _numpy_accuracy(params, images, labels):
    h = _gelu(images.reshape(len(labels), -1) @ params["W0"] + params["b0"])[0]
    y = _gelu(h @ params["W1"] + params["b1"])[0]
    return 100.0 * np.mean(np.argmax(y, axis=1) == labels)


def test_mnist_example_trains_as_the_numpy_reference():
    steps = 300
    opts = mnist.parse_args(["--limit-batches", str(steps), "--lr", "0.05"])
    train_x, train_y = mnist.load_split(opts.data, "train")
    test_x, test_y = mnist.load_split(opts.data, "t10k")
    assert train_x.shape == (8000, 28, 28) and test_x.shape == (2000, 28, 28)
    # The normalisation, from the raw bytes.
    raw = mnist._parse_idx(mnist._read_maybe_gz(opts.data, "train-images-idx3-ubyte"), "images")
    np.testing.assert_allclose(train_x, (raw / 255.0 - 0.1307) / 0.3081, rtol=1e-5, atol=1e-5)

    report = mnist.train(opts, train_x, train_y)
    acc = mnist.test(opts, report["params"], test_x, test_y)

    order = mnist.Rng(opts.seed + 1).permutation(len(train_y))
    assert sorted(order.tolist()) == list(range(len(train_y)))
    want_losses, want_params = _numpy_mnist(
        mnist.init_params(opts.hidden, opts.seed), train_x, train_y, order, opts.batch, opts.lr, steps
    )
    want_acc = _numpy_accuracy(want_params, test_x, test_y)
    assert len(report["losses"]) == steps
    np.testing.assert_allclose(report["losses"], want_losses, rtol=2e-3, atol=2e-4)
    for n, w in want_params.items():
        np.testing.assert_allclose(report["params"][n], w, rtol=1e-3, atol=2e-5)
    # float32 against float64: a handful of the 2000 test digits may flip.
    assert abs(acc - want_acc) <= 0.5, (acc, want_acc)
    # And the run learned something: far above chance (10%).
    # And the run learned: 300 steps at lr 0.05 reach 87% on this data; chance is 10%.
    assert want_acc > 80, want_acc


def test_mnist_rng_is_splitmix64():
    """The vectorised generator against SplitMix64 written out with Python ints."""
    def splitmix(seed, n):
        mask = (1 << 64) - 1
        state = seed ^ 0x9E3779B97F4A7C15
        out = []
        for _ in range(n):
            state = (state + 0x9E3779B97F4A7C15) & mask
            z = state
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
            out.append(z ^ (z >> 31))
        return out

    rng = mnist.Rng(7)
    got = rng.next_u64(5).tolist() + rng.next_u64(3).tolist()
    assert got == splitmix(7, 8)


@pytest.mark.skipif(not os.path.exists(GPT_FIXTURE), reason="no GPT reference fixture")
def test_gpt_example_reproduces_the_jax_losses():
    args = ["--reference", GPT_FIXTURE, "--layers", "2", "--heads", "2", "--width", "64", "--seq", "32", "--batch", "4"]
    got, want = gpt.main(args)
    assert len(got) == len(want) == 6
    for step, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= 1e-4 * abs(w), f"step {step}: loss {g}, JAX {w}"


def _numpy_gpt_loss(p, x, y, s):
    """The model's mean cross-entropy, written out in numpy (float64)."""
    def ln(v, g, b):
        m = v.mean(-1, keepdims=True)
        var = ((v - m) ** 2).mean(-1, keepdims=True)
        return (v - m) / np.sqrt(var + 1e-5) * g + b

    B, T, d, H = x.shape[0], x.shape[1], s.width, s.heads
    dh = d // H
    h = p["wte"][x] + p["wpe"]
    mask = np.tril(np.ones((T, T), bool))
    for layer in range(s.layers):
        q_ = {n: p[f"h{layer}.{n}"] for n in gpt.BLOCK_PARAMS}
        qkv = ln(h, q_["ln1_g"], q_["ln1_b"]) @ q_["attn_w"] + q_["attn_b"]
        q, k, v = (u.reshape(B, T, H, dh).transpose(0, 2, 1, 3) for u in np.split(qkv, 3, axis=-1))
        att = np.where(mask, q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh), -1e9)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        h = h + (att @ v).transpose(0, 2, 1, 3).reshape(B, T, d) @ q_["proj_w"] + q_["proj_b"]
        f = _gelu(ln(h, q_["ln2_g"], q_["ln2_b"]) @ q_["fc_w"] + q_["fc_b"])[0]
        h = h + f @ q_["fc2_w"] + q_["fc2_b"]
    logits = (ln(h, p["lnf_g"], p["lnf_b"]) @ p["wte"].T).reshape(B * T, -1)
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -np.mean(logp[np.arange(B * T), y.reshape(-1)])


def test_gpt_example_first_loss_from_its_own_initialisation():
    """Default mode (the Rust example's initialisation and batches) at a small size: the first
    step's loss is the numpy forward pass of the initial weights on the first batch."""
    args = ["--layers", "2", "--heads", "2", "--width", "32", "--seq", "16", "--batch", "2", "--steps", "3",
            "--eval-every", "0", "--eval-batches", "1", "--sample", "0"]
    losses, val = gpt.main(args)
    o = gpt.parse_args(args)
    corpus = gpt.Corpus(o.data)
    s = gpt.Shape(layers=2, heads=2, width=32, seq=16, batch=2, vocab=len(corpus.vocab))
    init = {n: a.astype(np.float64) for n, a in gpt.init_params(s, o.seed).items()}
    x, y = gpt.batch(gpt.Rng(o.seed + 1), corpus.ids, 0, corpus.split, s)
    want = _numpy_gpt_loss(init, x, y, s)
    assert abs(losses[0] - want) <= 1e-4 * want, (losses[0], want)
    assert len(losses) == 3 and all(np.isfinite(losses)) and np.isfinite(val)
