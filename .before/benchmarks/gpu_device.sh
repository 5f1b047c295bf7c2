#!/bin/bash
# The GPU runs of benchmarks/RESULTS.md ("GPU" section), as one command on a bare device machine.
# That machine has its own jax/jaxlib with CUDA (0.11.2 when measured), and no registry: NumPyro
# 0.22, Flax 0.12.12 and BlackJAX travel as wheels in .whl (see the device README), and bnn_ppl is
# copied into a site folder with the same package-dir mapping as pyproject.toml (no build).
#
# gpu.py's sections run in groups, each group in a process of its own: a CUDA error (on an H200,
# XLA's autotuner hit CUDA_ERROR_ILLEGAL_ADDRESS compiling 3 vectorized chains) leaves the CUDA
# context broken for every later section of its process. The first group is the chunk sweep;
# profile, hmc1/hmc3 and precision run at the sweep's fastest chunk, which each measures again in
# its own process (so a ratio to the raw gradient, HMC's, is of one process). A group that fails or times out is
# logged and the next one runs.
#
# Usage (repo root): OUT=/tmp/gpu bash benchmarks/gpu_device.sh [deadline s per group]
#   SECTION_GROUPS="sweep profile hmc1 hmc3 vmap3 widths precision other one_chunk potential blackjax"
#   (the default: all, in that order; potential and blackjax are potential.py and
#   vs_blackjax.py; GROUP:S gives that group S seconds instead of deadline + 90), TOTAL: seconds for the whole script (each group's limit is cut to what is
#   left, and a group with under 30 s left is not started), BEST_CHUNK: the chunk of profile,
#   hmc1/hmc3 and precision when no sweep runs (default "auto", the memory rule), GPU_ARGS: more
#   gpu.py arguments for every group, POTENTIAL_ARGS / BLACKJAX_ARGS: those scripts' arguments;
#   ONLY_GPU=1: not potential and blackjax; EXTRA=--quick: a smoke test on any machine.
set -u
OUT=${OUT:-/tmp/gpu_out}
DEADLINE=${1:-240}
GPU_ARGS=${GPU_ARGS:-}
ONLY_GPU=${ONLY_GPU:-}
EXTRA=${EXTRA:-}
SECTION_GROUPS=${SECTION_GROUPS:-sweep profile hmc1 hmc3 widths precision other one_chunk potential blackjax}
POTENTIAL_ARGS=${POTENTIAL_ARGS:---n 60000 --d 784 --width 256 --rounds 5}
BLACKJAX_ARGS=${BLACKJAX_ARGS:---rounds 5}
END=$(($(date +%s) + ${TOTAL:-1000000}))
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/site/bnn_ppl && cp -r bnn_ppl/. /tmp/site/bnn_ppl/ \
  && cp -r models /tmp/site/bnn_ppl/models && cp -r inference /tmp/site/bnn_ppl/inference || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
  > "$OUT/nvidia-smi.txt" 2>&1
cd benchmarks || exit 1

ALL="vmap profile hmc widths precision cnn_lstm mlp one_chunk"  # gpu.py's --skip names
limit() {  # limit WANTED: WANTED seconds, or what is left of TOTAL less 10 s if that is less
  local left=$((END - $(date +%s) - 10))
  echo $(($1 < left ? $1 : left))
}
gpu() {  # gpu() GROUP SECTIONS-TO-RUN [gpu.py arguments]: one process, WANT seconds
  local group=$1 keep=$2 skip="" s t
  shift 2
  t=$(limit "$WANT")
  if ((t < 30)); then echo "# group $group: not started, $t s left" | tee -a "$OUT/gpu.log"; return; fi
  for s in $ALL; do [[ " $keep " == *" $s "* ]] || skip="$skip $s"; done
  echo "# group $group, a process of its own ($t s): gpu.py $* --skip$skip" | tee -a "$OUT/gpu.log"
  # shellcheck disable=SC2086
  timeout "$t" python3 gpu.py --out "$OUT" --deadline "$((t - 90 > 10 ? t - 90 : 10))" "$@" \
    --skip $skip $GPU_ARGS $EXTRA 2>&1 | tee -a "$OUT/gpu.log"
  echo "# group $group: exit ${PIPESTATUS[0]}" | tee -a "$OUT/gpu.log"
}
script() {  # script() NAME WANTED-S ARGS...: potential.py or vs_blackjax.py, its own log
  local name=$1 t
  t=$(limit "$2")
  shift 2
  if ((t < 30)); then echo "# $name: not started, $t s left" | tee -a "$OUT/gpu.log"; return; fi
  echo "# $name.py $* ($t s)" | tee -a "$OUT/gpu.log"
  timeout "$t" python3 "$name.py" "$@" 2>&1 | tee "$OUT/$name.log"
  echo "# $name: exit ${PIPESTATUS[0]}" | tee -a "$OUT/gpu.log"
}
best_chunk() {  # the fastest resnet chunk recorded so far in gpu.jsonl (default precision)
  python3 - "$OUT/gpu.jsonl" <<'EOF'
import json, math, sys
best = None
for line in open(sys.argv[1]):
    r = json.loads(line)
    ms = r.get("grad_ms", math.nan)
    if r.get("section") == "resnet" and r.get("precision") == "default" and ms == ms:
        if best is None or ms < best[0]:
            best = (ms, r["chunk"])
print(best[1] if best else "auto")
EOF
}

BEST=${BEST_CHUNK:-auto}
for item in $SECTION_GROUPS; do
  group=${item%%:*}
  WANT=$((DEADLINE + 90))
  [[ $item == *:* ]] && WANT=${item#*:}
  case $group in
    sweep) gpu sweep "" ; BEST=$(best_chunk) ; echo "# fastest chunk: $BEST" | tee -a "$OUT/gpu.log" ;;
    profile) gpu profile "profile" --chunks "$BEST" ;;
    hmc1) gpu hmc1 "hmc" --chunks "$BEST" --hmc-chains 1 ;;
    hmc3) gpu hmc3 "hmc" --chunks "$BEST" --hmc-chains 3 ;;
    vmap3) gpu vmap3 "vmap" --chunks "$BEST" --hmc-chains 3 ;;
    widths) gpu widths "widths" --chunks ;;  # no chunk sweep: each width's memory-rule chunk
    precision) gpu precision "precision" --chunks "$BEST" ;;
    other) gpu other "cnn_lstm mlp" --chunks ;;
    one_chunk) gpu one_chunk "one_chunk" --chunks ;;
    # shellcheck disable=SC2086
    potential) [ -z "$ONLY_GPU" ] && script potential "$WANT" $POTENTIAL_ARGS $EXTRA ;;
    # shellcheck disable=SC2086
    blackjax) [ -z "$ONLY_GPU" ] && script vs_blackjax "$WANT" $BLACKJAX_ARGS $EXTRA ;;
    *) echo "unknown group $group" >&2 ; exit 2 ;;
  esac
done
exit 0
