#!/usr/bin/env bash
# Trains the six shipped vision models side by side (meant for one GPU; each job is small and
# launch-bound): the RAM and its parameter-matched full-image CNN on translated and on cluttered
# 60x60 canvases, and Show, Attend and Tell with its no-attention twin on 84x84 scenes.
#
#   DATA=data/fashion-mnist OUT=out MAX_TIME=360 scripts/train_vision.sh
#
# DATA: the Fashion-MNIST IDX files (default: $ATTNSCOPE_FASHION_MNIST_DIR, else Debian's
# /usr/share/datasets/fashion-mnist). OUT: where the model folders go (out/<model-name>/).
# MAX_TIME: training seconds per model (the test evaluation comes after). JOBS: how many run at
# once (6 on a GPU; use 1 on a CPU, and expect it to take many hours). THREADS: CPU threads each.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=${DATA:-${ATTNSCOPE_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}}
OUT=${OUT:-out}
MAX_TIME=${MAX_TIME:-360}
JOBS=${JOBS:-6}
THREADS=${THREADS:-2}
PY=${PY:-.venv/bin/attnscope}
if [ ! -x "$PY" ]; then PY=attnscope; fi
mkdir -p "$OUT/logs"

# EXTRA: more flags for every job (e.g. a smoke test: EXTRA="--steps 2 --test-examples 10").
# shellcheck disable=SC2206
common=(--data-dir "$DATA" --max-time "$MAX_TIME" --steps 200000 --threads "$THREADS" --quiet ${EXTRA:-})
jobs_list=(
  "vision-ram-translated      --model ram            --dataset translated --batch 512 --eval-every 1000"
  "vision-ram-cluttered       --model ram            --dataset cluttered  --batch 512 --eval-every 1000"
  "vision-cnn-translated      --model full-image-cnn --dataset translated --batch 256 --eval-every 1000"
  "vision-cnn-cluttered       --model full-image-cnn --dataset cluttered  --batch 256 --eval-every 1000"
  "vision-sat-scenes          --model captioner      --dataset scenes     --batch 512 --eval-every 500"
  "vision-noattn-scenes       --model captioner      --dataset scenes     --batch 512 --eval-every 500 --no-attention"
)

running=0
status=0
for spec in "${jobs_list[@]}"; do
  read -r name args <<<"$spec"
  # shellcheck disable=SC2086  # args is a list of flags on purpose
  OMP_NUM_THREADS=$THREADS "$PY" vision-train $args "${common[@]}" --out "$OUT/$name" \
    >"$OUT/logs/$name.log" 2>&1 &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
for spec in "${jobs_list[@]}"; do
  read -r name _ <<<"$spec"
  tail -n 1 "$OUT/logs/$name.log"
done
du -sh "$OUT"/vision-* 2>/dev/null || true
exit "$status"
