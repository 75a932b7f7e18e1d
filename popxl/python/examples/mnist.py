"""Train and test the PopXL user guide's MNIST classifier, written the PopXL way.

784 -> hidden -> 10, each layer ``gelu(x @ W + b)`` (a ``popxl.Module`` traced with
``ir.create_graph``), softmax + ``nll_loss_with_softmax_grad``, gradients from
``popxl.transforms.autodiff``, SGD with ``ops.var_updates``-style in-place
``scaled_add_``, all ``in_sequence``; a ``popxl.Session`` runs it on ``cpu``.

The same options, defaults, initial weights and shuffle as the Rust example
(``cargo run --release --example mnist``): at the same settings both train the
same weights and print the same accuracy.

    python popxl/python/examples/mnist.py [--batch 8] [--hidden 32] [--bench] ...
"""

import argparse
import gzip
import math
import os
import sys
import time

import numpy as np
import popxl
import popxl.ops as ops
import popxl.transforms as transforms

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.normpath(os.path.join(HERE, "..", "..", "..", "data", "mnist"))
PIXELS = 28 * 28
MEAN = np.float32(0.1307)
STD = np.float32(0.3081)

# --------------------------------------------------------------------------- data


def _read_maybe_gz(directory, stem):
    gz = os.path.join(directory, stem + ".gz")
    if os.path.exists(gz):
        with gzip.open(gz, "rb") as f:
            return f.read()
    with open(os.path.join(directory, stem), "rb") as f:
        return f.read()


def _parse_idx(raw, what):
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{what}: not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    payload = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if payload.size != math.prod(dims):
        raise ValueError(f"{what}: expected {math.prod(dims)} payload bytes for dims {dims}, found {payload.size}")
    return payload.reshape(dims)


def load_split(directory, prefix):
    """Images normalised as torchvision's ``Normalize((0.1307,), (0.3081,))`` ([n, 28, 28] float32) and int32 labels."""
    pix = _parse_idx(_read_maybe_gz(directory, f"{prefix}-images-idx3-ubyte"), "images")
    lbl = _parse_idx(_read_maybe_gz(directory, f"{prefix}-labels-idx1-ubyte"), "labels")
    if pix.ndim != 3 or pix.shape[1] * pix.shape[2] != PIXELS or lbl.shape != (pix.shape[0],):
        raise ValueError(f"unexpected MNIST dims: images {pix.shape}, labels {lbl.shape}")
    images = (pix.astype(np.float32) / np.float32(255.0) - MEAN) / STD
    return np.ascontiguousarray(images.reshape(-1, 28, 28)), lbl.astype(np.int32)


class Rng:
    """The Rust examples' generator (SplitMix64), vectorised: output ``k`` is a function of ``k`` alone."""

    GOLDEN = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self, seed):
        self.state = np.uint64(seed) ^ self.GOLDEN
        self.count = 0

    def next_u64(self, n):
        """The next ``n`` outputs as uint64."""
        k = np.arange(self.count + 1, self.count + n + 1, dtype=np.uint64)
        self.count += n
        with np.errstate(over="ignore"):
            z = self.state + k * self.GOLDEN
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    def uniform(self, n):
        return (self.next_u64(n) >> np.uint64(11)).astype(np.float64) / float(1 << 53)

    def normal(self, n):
        """Box-Muller, one normal from each pair of uniforms."""
        u = self.uniform(2 * n).reshape(n, 2)
        u1 = np.maximum(u[:, 0], sys.float_info.min)
        return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u[:, 1])

    def permutation(self, n):
        """Fisher-Yates, as the Rust ``Rng::permutation``."""
        v = list(range(n))
        if n < 2:
            return np.array(v, dtype=np.int64)
        r = self.next_u64(n - 1)
        bounds = np.arange(n, 1, -1, dtype=np.uint64)  # i + 1 for i = n-1 .. 1
        js = (r % bounds).tolist()
        for i, j in zip(range(n - 1, 0, -1), js):
            v[i], v[j] = v[j], v[i]
        return np.array(v, dtype=np.int64)


def init_params(hidden, seed):
    """Weights and biases ~ N(0, 0.02), in the Rust example's order W0, b0, W1, b1."""
    rng = Rng(seed)
    params = {}
    for name, shape in [("W0", (PIXELS, hidden)), ("b0", (hidden,)), ("W1", (hidden, 10)), ("b1", (10,))]:
        n = math.prod(shape)
        params[name] = (rng.normal(n) * 0.02).astype(np.float32).reshape(shape)
    return params


# --------------------------------------------------------------------------- model


class Linear(popxl.Module):
    """``gelu(x @ W + b)``; ``W`` and ``b`` are graph inputs kept on the module."""

    def __init__(self, out_features):
        self.out_features = out_features
        self.W = None
        self.b = None

    def build(self, x):
        self.W = popxl.graph_input((x.shape[-1], self.out_features), popxl.float32, "W")
        self.b = popxl.graph_input((self.out_features,), popxl.float32, "b")
        return ops.gelu(x @ self.W + self.b)


def _sharded(opts, name):
    return opts.rts and opts.replicas > 1 and name.startswith("W")


def _full_value(opts, p, shape):
    """The full value of parameter ``p``: gathered from the replicas' shards with RTS."""
    if not (opts.rts and opts.replicas > 1) or tuple(p.shape) == tuple(shape):
        return p
    flat = ops.collectives.replicated_all_gather(p, 0, None, "concat")
    n = math.prod(shape)
    if flat.shape[0] != n:
        flat = ops.slice(flat, start=[0], stop=[n], step=[1], axis=[0])
    return flat.reshape(shape)


def _sgd_update(opts, p, full, g):
    """SGD on ``p`` (a shard with RTS) with the gradient ``g`` of its full value, averaged over replicas."""
    if opts.replicas > 1:
        if tuple(p.shape) != tuple(full.shape):
            g = ops.collectives.replicated_reduce_scatter(g, "mean", None, True)
        else:
            g = ops.collectives.replicated_all_reduce_(g, "mean")
    ops.scaled_add_(p, g, b=-opts.lr)


def _train_step(opts, ir, streams, params):
    """One SGD step in the current graph, updating ``params`` (W0, b0, W1, b1) in place."""
    img_stream, lbl_stream, loss_stream = streams
    x = ops.host_load(img_stream, "x").reshape((-1, PIXELS))
    labels = ops.host_load(lbl_stream, "label")
    W0 = _full_value(opts, params[0], (PIXELS, opts.hidden))
    W1 = _full_value(opts, params[2], (opts.hidden, 10))
    b0, b1 = params[1], params[3]

    layer0 = Linear(opts.hidden)
    graph0 = ir.create_graph(layer0, x)
    fwd0 = ops.call_with_info(graph0, x, inputs_dict={layer0.W: W0, layer0.b: b0})
    x1 = fwd0.parent_output(0)

    layer1 = Linear(10)
    graph1 = ir.create_graph(layer1, x1)
    fwd1 = ops.call_with_info(graph1, x1, inputs_dict={layer1.W: W1, layer1.b: b1})
    y = fwd1.parent_output(0)

    probs = ops.softmax(y, axis=-1)
    loss, dy = ops.nll_loss_with_softmax_grad(probs, labels)
    ops.host_store(loss_stream, loss)

    bwd1 = transforms.autodiff(graph1)
    bwd1_call = ops.call_with_info(bwd1.graph, dy, inputs_dict=bwd1.inputs_dict(fwd1))
    grads1 = bwd1.fwd_parent_ins_to_grad_parent_outs(fwd1, bwd1_call)
    _sgd_update(opts, params[2], W1, grads1[W1])
    _sgd_update(opts, params[3], b1, grads1[b1])

    bwd0 = transforms.autodiff(graph0, grads_required=[layer0.W, layer0.b])
    bwd0_call = ops.call_with_info(bwd0.graph, grads1[x1], inputs_dict=bwd0.inputs_dict(fwd0))
    grads0 = bwd0.fwd_parent_ins_to_grad_parent_outs(fwd0, bwd0_call)
    _sgd_update(opts, params[0], W0, grads0[W0])
    _sgd_update(opts, params[1], b0, grads0[b0])


def build_train(opts, params):
    """The training IR: (ir, images stream, labels stream, loss stream, variables)."""
    ir = popxl.Ir()
    ir.num_host_transfers = opts.host_transfers
    ir.replication_factor = opts.replicas
    per_replica = opts.batch // opts.replicas
    with ir.main_graph, popxl.in_sequence():
        images = popxl.h2d_stream((per_replica, 28, 28), popxl.float32, "images")
        labels = popxl.h2d_stream((per_replica,), popxl.int32, "labels")
        loss = popxl.d2h_stream((), popxl.float32, "loss")
        variables = []
        for name, data in params.items():
            if _sharded(opts, name):
                variables.append(popxl.replica_sharded_variable(data, name=name, retrieval_mode="one_per_group")[1])
            else:
                variables.append(popxl.variable(data, name=name))
        streams = (images, labels, loss)
        if opts.host_transfers == 1:
            _train_step(opts, ir, streams, variables)
        else:

            def body(w0, b0, w1, b1):
                with popxl.in_sequence():
                    ps = [w0, b0, w1, b1]
                    _train_step(opts, ir, streams, ps)
                    return ps

            graph = ir.create_graph(body, *variables)
            trained = ops.repeat(graph, opts.host_transfers, *variables)
            for v, t in zip(variables, trained):
                ops.var_updates.copy_var_update_(v, t)
    return ir, images, labels, loss, variables


def build_test(opts, params):
    """The forward-only test IR with variables of the same names: (ir, images stream, logits stream, variables)."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        images = popxl.h2d_stream((opts.test_batch, 28, 28), popxl.float32, "images")
        x = ops.host_load(images, "x").reshape((-1, PIXELS))
        variables = [popxl.variable(data, name=name) for name, data in params.items()]
        layer0 = Linear(opts.hidden)
        graph0 = ir.create_graph(layer0, x)
        (h,) = ops.call(graph0, x, inputs_dict={layer0.W: variables[0], layer0.b: variables[1]})
        layer1 = Linear(10)
        graph1 = ir.create_graph(layer1, h)
        (y,) = ops.call(graph1, h, inputs_dict={layer1.W: variables[2], layer1.b: variables[3]})
        logits = popxl.d2h_stream(y.shape, y.dtype, "logits")
        ops.host_store(logits, y)
    return ir, images, logits, variables


# --------------------------------------------------------------------------- training and test


def _host_shape(n, replicas, shape):
    """Stream array shape ``[host_transfers, replicas, *shape]`` without the size-1 leading dims."""
    return ((n,) if n > 1 else ()) + ((replicas,) if replicas > 1 else ()) + tuple(shape)


def train(opts, train_images, train_labels):
    """Train with the guide's loop (shuffle each epoch, drop the last partial batch); returns a report dict."""
    params = init_params(opts.hidden, opts.seed)
    start = time.perf_counter()
    ir, images, labels, loss, variables = build_train(opts, params)
    built = time.perf_counter()
    session = popxl.Session(ir, opts.device)
    prepared = time.perf_counter()

    per_run = opts.batch * opts.host_transfers
    batches_per_epoch = len(train_labels) // opts.batch
    if opts.limit_batches is not None:
        batches_per_epoch = min(batches_per_epoch, opts.limit_batches)
    runs_per_epoch = batches_per_epoch // opts.host_transfers
    pb = opts.batch // opts.replicas
    ishape = _host_shape(opts.host_transfers, opts.replicas, (pb, 28, 28))
    lshape = _host_shape(opts.host_transfers, opts.replicas, (pb,))
    rng = Rng(opts.seed + 1)
    losses = []
    run_times = []
    first_step = None
    # The batch buffers, filled in place every step: they cross into the session without a copy.
    img = np.empty((per_run, 28, 28), np.float32)
    lbl = np.empty((per_run,), np.int32)
    inputs = {images: img.reshape(ishape), labels: lbl.reshape(lshape)}
    train_start = time.perf_counter()
    with session:
        for epoch in range(opts.epochs):
            order = rng.permutation(len(train_labels))
            for r in range(runs_per_epoch):
                idx = order[r * per_run : (r + 1) * per_run]
                np.take(train_images, idx, axis=0, out=img)
                np.take(train_labels, idx, out=lbl)
                t = time.perf_counter()
                out = session.run(inputs)
                if r > 0 or epoch > 0:
                    run_times.append(time.perf_counter() - t)
                else:
                    first_step = time.perf_counter() - start
                # One loss per step and replica: the step's loss is their mean.
                losses.extend(np.asarray(out[loss], np.float32).reshape(-1, opts.replicas).mean(axis=1).tolist())
    train_wall = time.perf_counter() - train_start
    data = session.get_tensors_data(variables)
    trained = {v.name: data[v] for v in variables}
    return {
        "losses": losses,
        "run_times": run_times,
        "time_to_first_step": first_step if first_step is not None else float("nan"),
        "build": built - start,
        "prepare": prepared - built,
        "train_wall": train_wall,
        "params": trained,
    }


def test(opts, params, test_images, test_labels):
    """Accuracy (percent) of ``params`` on the test set, weights written by name while detached."""
    ir, images, logits, variables = build_test(opts, init_params(opts.hidden, opts.seed))
    session = popxl.Session(ir, opts.device)
    session.write_variables_data({v: params[v.name] for v in variables})
    batches = len(test_labels) // opts.test_batch
    correct = 0
    with session:
        for i in range(batches):
            sl = slice(i * opts.test_batch, (i + 1) * opts.test_batch)
            out = session.run({images: test_images[sl]})
            correct += int(np.sum(np.argmax(out[logits], axis=-1) == test_labels[sl]))
    return 100.0 * correct / (batches * opts.test_batch)


# --------------------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Train and test the PopXL MNIST example.")
    p.add_argument("--data", default=DEFAULT_DATA, help="directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (default: the bundled 10,000-digit subset in data/mnist)")
    p.add_argument("--batch", type=int, default=8, help="training batch size (default 8)")
    p.add_argument("--test-batch", type=int, default=80, help="test batch size (default 80)")
    p.add_argument("--lr", type=float, default=0.005, help="SGD learning rate (default 0.005)")
    p.add_argument("--epochs", type=int, default=1, help="epochs (default 1)")
    p.add_argument("--hidden", type=int, default=32, help="hidden width (default 32)")
    p.add_argument("--host-transfers", type=int, default=1, help="batches per Session.run (num_host_transfers, default 1)")
    p.add_argument("--replicas", type=int, default=1, help="data-parallel replicas (replication_factor, default 1)")
    p.add_argument("--rts", action="store_true", help="with --replicas: shard the weight matrices over the replicas")
    p.add_argument("--seed", type=int, default=0, help="initialisation and shuffle seed (default 0)")
    p.add_argument("--limit-batches", type=int, default=None, help="train on at most N batches per epoch")
    p.add_argument("--device", default="cpu", help="cpu | ipu_model | ipu_hw (default cpu)")
    p.add_argument("--save", default=None, help="write the trained weights W0, b0, W1, b1 (.npz, else a directory of .npy)")
    p.add_argument("--load", default=None, help="test the weights saved in PATH (.npz or directory) instead of training")
    p.add_argument("--bench", action="store_true", help="print timing numbers as well")
    for flag in ["--profile", "--no-patterns", "--dump"]:
        p.add_argument(flag, action="store_true", help="the Rust example's option; not available from Python")
    opts = p.parse_args(argv)
    if min(opts.batch, opts.test_batch, opts.host_transfers, opts.replicas) <= 0:
        p.error("--batch, --test-batch, --host-transfers and --replicas must be positive")
    if opts.batch % opts.replicas:
        p.error(f"--batch ({opts.batch}) must be a multiple of --replicas ({opts.replicas})")
    for flag in ["profile", "no_patterns", "dump"]:
        if getattr(opts, flag):
            p.error(f"--{flag.replace('_', '-')} is only available in the Rust example (cargo run --release --example mnist)")
    return opts


def _save(path, params):
    if path.endswith(".npz"):
        np.savez(path, **params)
    else:
        os.makedirs(path, exist_ok=True)
        for name, a in params.items():
            np.save(os.path.join(path, name + ".npy"), a)


def _load(path):
    names = ["W0", "b0", "W1", "b1"]
    if path.endswith(".npz"):
        with np.load(path) as z:
            return {n: np.asarray(z[n], np.float32) for n in names}
    return {n: np.load(os.path.join(path, n + ".npy")).astype(np.float32) for n in names}


def main(argv=None):
    opts = parse_args(argv)
    train_images, train_labels = load_split(opts.data, "train")
    test_images, test_labels = load_split(opts.data, "t10k")
    rts = " with RTS" if opts.rts and opts.replicas > 1 else ""
    print(
        f"MNIST: {len(train_labels)} train / {len(test_labels)} test samples from {opts.data}; batch {opts.batch}, "
        f"lr {opts.lr}, {opts.epochs} epoch(s), hidden {opts.hidden}, {opts.replicas} replica(s){rts}",
        file=sys.stderr,
    )
    if opts.load is not None:
        acc = test(opts, _load(opts.load), test_images, test_labels)
        print(f"Accuracy on test set: {acc:.2f}% (weights from {opts.load})")
        return acc
    report = train(opts, train_images, train_labels)
    losses = report["losses"]
    tail = losses[-100:]
    wall = report["train_wall"]
    print(
        f"Trained {len(losses)} steps in {wall:.2f} s ({len(losses) * opts.batch / wall:.0f} samples/s); "
        f"mean loss of the last {len(tail)} steps: {sum(tail) / max(len(tail), 1):.4f}"
    )
    if opts.save is not None:
        _save(opts.save, report["params"])
        print(f"saved the trained weights to {opts.save}", file=sys.stderr)
    acc = test(opts, report["params"], test_images, test_labels)
    print(f"Accuracy on test set: {acc:.2f}%")
    if opts.bench:
        per_step = sorted(t * 1e6 / opts.host_transfers for t in report["run_times"])
        pct = (lambda q: per_step[int((len(per_step) - 1) * q)]) if per_step else (lambda q: float("nan"))
        print(
            f"bench: step median {pct(0.5):.1f} us (p10 {pct(0.1):.1f}, p90 {pct(0.9):.1f}) over {len(per_step)} runs; "
            f"time to first step {report['time_to_first_step'] * 1e3:.2f} ms "
            f"(IR built in {report['build'] * 1e3:.2f} ms, session prepared in {report['prepare'] * 1e3:.2f} ms)"
        )
    return acc


if __name__ == "__main__":
    main()
