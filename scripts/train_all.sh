#!/usr/bin/env bash
# Train every shipped model. On one GPU the seven small models train side by side (each process
# gets two CPU threads); on a CPU, run them one at a time instead (JOBS=1).
#   DATA=../shared/data/multi30k MODELS_OUT=models BUDGET=420 scripts/train_all.sh
# BUDGET is each model's training time in seconds (the evaluation on the test sets comes after).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DATA=${DATA:-data/multi30k}
OUT=${MODELS_OUT:-models}
JOBS=${JOBS:-7}
EXTRA=${EXTRA:-}
mkdir -p runs/tok runs/logs "$OUT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

for pair in en-de en-fr; do
  [ -f runs/tok/$pair.model ] || $PYTHON -m attnscope.cli tokenizer --pair $pair --data-dir "$DATA" --out runs/tok/$pair.model
done

budget=()
[ -n "${BUDGET:-}" ] && budget=(--max-time "$BUDGET")

train() {
  local name=$1; shift
  local pair=${name:0:5}
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
  echo "training $name"
  $PYTHON -m attnscope.cli train --out "$OUT/$name" --pair "$pair" --data-dir "$DATA" \
    --tokenizer runs/tok/$pair.model --quiet "${budget[@]}" "$@" $EXTRA > runs/logs/$name.log 2>&1 &
}

train en-de-transformer    --preset transformer
train en-fr-transformer    --preset transformer
train en-de-rnn-additive   --preset rnn --score additive
train en-de-rnn-general    --preset rnn --score general
train en-de-rnn-none       --preset rnn --score none
train en-de-self-attentive --preset self-attentive
train en-fr-rnn-additive   --preset rnn --score additive
wait
grep -h -E "epoch|ERROR|Error|wrote" runs/logs/*.log | tail -n 60
