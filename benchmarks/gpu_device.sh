#!/bin/bash
# The GPU runs of benchmarks/RESULTS.md ("GPU" section), as one command on a bare device machine.
# That machine has its own jax/jaxlib with CUDA (0.11.2 when measured), and no registry: NumPyro
# 0.22, Flax 0.12.12 and BlackJAX travel as wheels in .whl (see the device README), and bnn_ppl is
# copied into a site folder with the same package-dir mapping as pyproject.toml (no build).
# Usage (repo root): OUT=/tmp/gpu bash benchmarks/gpu_device.sh [gpu.py deadline s]
set -u
OUT=${OUT:-/tmp/gpu_out}
DEADLINE=${1:-240}
GPU_ARGS=${GPU_ARGS:-}  # more arguments of gpu.py
ONLY_GPU=${ONLY_GPU:-}  # set: gpu.py alone, not potential.py and vs_blackjax.py
EXTRA=${EXTRA:-}  # e.g. EXTRA=--quick: a smoke test of this script on any machine
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/site/bnn_ppl && cp -r bnn_ppl/. /tmp/site/bnn_ppl/ \
  && cp -r models /tmp/site/bnn_ppl/models && cp -r inference /tmp/site/bnn_ppl/inference || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
  > "$OUT/nvidia-smi.txt" 2>&1
cd benchmarks || exit 1
timeout $((DEADLINE + 90)) python3 gpu.py --out "$OUT" --deadline "$DEADLINE" $GPU_ARGS $EXTRA 2>&1 \
  | tee -a "$OUT/gpu.log"
[ -n "$ONLY_GPU" ] && exit 0
timeout 90 python3 potential.py --n 60000 --d 784 --width 256 --rounds 5 $EXTRA 2>&1 \
  | tee "$OUT/potential.log"
timeout 60 python3 vs_blackjax.py --rounds 5 $EXTRA 2>&1 | tee "$OUT/vs_blackjax.log"
