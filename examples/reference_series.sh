#!/bin/bash
# Learned-noise UCI reference series: one split at a time, each resumable from its checkpoint
# folder; finished splits (a record in $OUT/out) are skipped, and no new split starts once the
# file $OUT/STOP exists. Run from the repository root with the UCI files in $BNN_PPL_DATA:
#   BNN_PPL_DATA=/path/to/uci OUT=runs/learned_noise bash examples/reference_series.sh boston yacht
# (default data sets: boston concrete wine-red yacht; copy finished records from $OUT/out into
# examples/references and run `python docs/_generate.py` to list them in the catalogue).
set -u
OUT=${OUT:-runs/learned_noise}
mkdir -p "$OUT/out" "$OUT/ckpt"
for ds in ${@:-boston concrete wine-red yacht}; do
  for k in $(seq 0 19); do
    name=uci_${ds}_split${k}_learned_prior0.3_init
    [ -f "$OUT/out/$name.json" ] && continue
    [ -f "$OUT/STOP" ] && { echo "STOP: not launching $name" >> "$OUT/series.log"; exit 0; }
    echo "$(date -u +%T) start $name" >> "$OUT/series.log"
    nice -n 10 python examples/reference.py --dataset "$ds" --split "$k" --prior-scale 0.3 \
      --num-warmup 1500 --segment-draws 500 --max-num-steps 256 --burn-in 0.5 \
      --max-seconds 5400 --max-draws 60000 --init-steps 20000 --name "$name" \
      --out "$OUT/out" --checkpoint-dir "$OUT/ckpt/${ds}_split${k}" > "$OUT/$name.log" 2>&1
    rc=$?  # (read before the date's command substitution resets it)
    echo "$(date -u +%T) end $name rc=$rc" >> "$OUT/series.log"
  done
done
