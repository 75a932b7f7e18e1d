#!/usr/bin/env bash
# Side-by-side numbers: our MNIST example and compile scaling against the JAX
# baselines in ../shared/bench (or $JAX_BENCH). Needs: pip install jax jaxlib numpy threadpoolctl.
# Prints one line per measurement. Keep the machine otherwise idle.
set -euo pipefail
cd "$(dirname "$0")/.."
JAX_BENCH=${JAX_BENCH:-../shared/bench}
DATA=data/mnist
cargo build --release -q -p popxl-session --example mnist
cargo build --release -q -p popart-transforms --example autodiff_scaling
MNIST=target/release/examples/mnist

echo "== MNIST, guide settings (batch 8, width 32), one core"
taskset -c 0 $MNIST --bench | grep -E "Accuracy|bench"
taskset -c 0 python3 $JAX_BENCH/jax_mnist.py --data $DATA 2>/dev/null

echo "== MNIST, batch 128, lr 0.08, 5 epochs (accuracy), two cores"
$MNIST --bench --batch 128 --lr 0.08 --epochs 5 | grep -E "Accuracy|bench"
python3 $JAX_BENCH/jax_mnist.py --data $DATA --batch 128 --epochs 5 --lr 0.08 2>/dev/null

echo "== MNIST, compute bound (batch 128, width 512), two cores"
$MNIST --bench --batch 128 --hidden 512 --lr 0.08 --epochs 3 | grep -E "Accuracy|bench"
python3 $JAX_BENCH/jax_mnist.py --data $DATA --batch 128 --epochs 3 --hidden 512 --lr 0.08 2>/dev/null

echo "== XLA temp allocation of the same steps"
python3 $JAX_BENCH/jax_mnist_memory.py --configs 8x32,128x512 2>/dev/null

echo "== Compile scaling: build + autodiff + lower of an L-layer MLP gradient"
target/release/examples/autodiff_scaling
python3 $JAX_BENCH/jax_compile_scaling.py --layers 10,100,1000 --reps 1 2>/dev/null
