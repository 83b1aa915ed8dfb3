#!/usr/bin/env bash
# The GPU work left open (issue 9's CUDA latency, issue 14's long en→de run) on a lent machine that
# has a GPU and Python with torch, sentencepiece, sacrebleu and safetensors, but no network and
# none of the other packages. docs/gpu.md says how a session uses it; in short:
#
#   here:   scripts/device.sh untrack              # models/ out of the tree that travels (retrack: back)
#   here:   scripts/device.sh pack [MODEL...]      # .whl/ and .whl-ct2/ (wheels for that Python), gpu/models/,
#                                                  # data/multi30k (+ alignments); prints what to carry
#   there:  scripts/device.sh setup                # installs .whl/ into /tmp/site (once per warm machine)
#   there:  scripts/device.sh check  "$OUT"        # CUDA parity and latency (CUDA graphs on and off), CT2 if it loads
#   there:  scripts/device.sh serve-check "$OUT"   # the real server on CUDA vs CPU over HTTP, shipped + imported models
#   there:  scripts/device.sh graphs-check "$OUT"  # CUDA graphs (greedy, beam) vs eager: parity, latency, served p50
#   there:  scripts/device.sh ct2-check "$OUT"     # opus-mt-shaped Marian vs CTranslate2; 0.5B LLM vs transformers
#   there:  scripts/device.sh evaluate "$OUT"      # test2016 BLEU of every model in gpu/models, side by side on its cores
#   there:  scripts/device.sh distill              # the teachers' translations of train, for the long run
#   there:  scripts/device.sh train  NAME SECONDS [attnscope train options...]   # detached; log in gpu/NAME.log
#   there:  scripts/device.sh vision OUT SECONDS FOLDER:LR...  # vision folders continued side by side (gpu/fashion-mnist)
#   there:  scripts/device.sh status               # the runs' last log lines
#   there:  scripts/device.sh collect NAME "$OUT"  # the finished model folder, packed in pieces of ≤ 15 MiB
#   here:   scripts/device.sh unpack FILES_AT DEST # the pieces back into a model folder
#
# Nothing here is needed to use attnscope; it only moves work to such a machine and back.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=.whl                     # git-ignored, like .whl-ct2/, data/ and gpu/
SITE=${DEVICE_SITE:-/tmp/site}  # where the wheels are installed on the device
DEVICE_PY=${DEVICE_PY:-3.12}    # the device's Python version, for `pack`
PYTHON=${PYTHON:-python3}       # its interpreter, for the rest
DEVICE=${DEVICE:-cuda}          # cpu only to try the script here
# What its image lacks of the runtime dependencies (it has torch, sentencepiece, sacrebleu, safetensors,
# numpy, jinja2, pillow, pytest, hypothesis, httpx, prometheus-client, ...). CTranslate2 (43 MB) goes
# in a folder of its own: the working tree that travels is at most 64 MiB, so carry it only for `check`.
NEEDED=(annotated-types fastapi fastapi_offline isal orjson plotly pydantic pydantic-settings pydantic_core
  python-dotenv sacremoses starlette typing-inspection typing_extensions uvicorn opentelemetry-api)
MODELS=(en-de-transformer)

die() { echo "device.sh: $*" >&2; exit 2; }

setup() {  # on the device: install the carried wheels once, then use them
  export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
  export ATTNSCOPE_DATA_DIR=${ATTNSCOPE_DATA_DIR:-data/multi30k}
  local dir probe
  for dir in "$WHEELS" "$WHEELS-ct2"; do  # once per warm machine; a later call need not carry them again
    probe="import fastapi, pydantic_settings, plotly, sacremoses"
    [ "$dir" = "$WHEELS-ct2" ] && probe="import ctranslate2"
    "$PYTHON" -c "$probe" 2>/dev/null && continue  # installed already (a warm machine, or this one)
    [ -d "$dir" ] || { [ "$dir" = "$WHEELS" ] && die "no $WHEELS/ here: run 'scripts/device.sh pack' and carry it"; continue; }
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$dir"/*.whl
  done
}

case "${1:-}" in
untrack)  # before the device calls: models/ (~200 MB, tracked) must not travel with the tree
  git rm -r -q --cached models
  exclude=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$exclude")"
  grep -qx /models/ "$exclude" 2>/dev/null || echo /models/ >> "$exclude"
  echo "models/ untracked for the device calls (files untouched); 'scripts/device.sh retrack' after them"
  ;;
retrack)  # after them: the index as HEAD has it again, nothing committed in between
  git reset -q -- models
  sed -i "\\#^/models/\$#d" "$(git rev-parse --git-path info/exclude)"
  git status --short models | head -n 3
  ;;
setup)  # its own call, carrying .whl: with .whl-ct2 too the tree would pass 64 MiB
  setup
  "$PYTHON" -c "import fastapi, pydantic, attnscope.config; print('attnscope imports on', __import__('sys').version)"
  ;;
pack)
  [ -x .venv/bin/pip ] || die "run 'make install' first: the versions are the ones .venv has"
  shift
  [ $# -gt 0 ] && MODELS=("$@")
  fetch() {  # fetch DIR NAME...: the versions .venv has, as wheels for the device's Python
    local dir=$1 specs=() name spec; shift
    for name in "$@"; do
      spec=$(.venv/bin/pip freeze --all | grep -i -E "^${name}==" || true)
      specs+=("${spec:-$name}")
    done
    rm -rf "$dir" && mkdir -p "$dir"
    .venv/bin/pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d "$dir" \
      --python-version "$DEVICE_PY" --implementation cp --abi "cp${DEVICE_PY/./}" --abi abi3 --abi none \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform any "${specs[@]}"
  }
  fetch "$WHEELS" "${NEEDED[@]}"
  fetch "$WHEELS-ct2" ctranslate2
  # the tracked models/ (~200 MB) cannot travel: commit nothing, but run from a branch without them
  # (docs/gpu.md), and carry copies of the ones the work needs
  rm -rf gpu/models && mkdir -p gpu/models
  for model in "${MODELS[@]}"; do cp -r "models/$model" gpu/models/; done
  data=${ATTNSCOPE_DATA_DIR:-../shared/data/multi30k}
  if [ ! -f data/multi30k/train.en.gz ]; then
    mkdir -p data && cp -r "$data" data/multi30k
  fi
  # copy augmentation (issue 14's recipe) reads eflomal's alignments of train; eflomal stays here
  if [ ! -d data/multi30k/alignments ]; then
    .venv/bin/attnscope align-corpus --pair en-de --data-dir data/multi30k --split val
  fi
  du -sh "$WHEELS" "$WHEELS-ct2" gpu data/multi30k
  echo 'carry: [".whl", "gpu", "data/multi30k"], and ".whl-ct2" for check (64 MiB in all, with the tree)'
  ;;
check)
  out=${2:?usage: device.sh check OUT}
  setup
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1 || true
  "$PYTHON" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))" | tee -a "$out/gpu.txt"
  "$PYTHON" -c "import ctranslate2 as c; print('ctranslate2', c.__version__, 'CUDA devices:', c.get_cuda_device_count())" \
    >> "$out/gpu.txt" 2>&1 || echo "ctranslate2 does not load here (its wheel's CUDA)" >> "$out/gpu.txt"
  "$PYTHON" bench/cuda_parity.py --models gpu/models 2>&1 | tee "$out/parity.txt"
  "$PYTHON" bench/cuda_latency.py --model gpu/models/en-de-transformer --out "$out/latency" 2>&1 | tee "$out/latency.txt"
  ;;
serve-check)  # the real server on the GPU against the CPU over HTTP, shipped and imported models
  out=${2:?usage: device.sh serve-check OUT}
  setup
  mkdir -p "$out"
  # two tiny Hugging Face models built with the device's transformers, imported beside the shipped ones
  "$PYTHON" - "$out" <<'PY' 2>&1 | tee "$out/imported.txt"
import sys, tempfile
from pathlib import Path
sys.path.insert(0, "tests/hf")
from builders import KINDS
from attnscope.hf.importer import import_model
for name, kind in KINDS.items():
    try:
        source = kind.build(Path(tempfile.mkdtemp()) / name)
        done = import_model(str(source), Path("gpu/models") / kind.model_id, pair=kind.pair)
        print(name, "imported:", done.card.get("conversion_checks"))
    except Exception as error:  # a failure is a finding to bring back, not a reason to stop
        print(name, "import failed:", type(error).__name__, error)
PY
  "$PYTHON" bench/cuda_served.py --models gpu/models --device "$DEVICE" --out "$out/served.json" 2>&1 | tee "$out/served.txt"
  "$PYTHON" bench/hf_import.py --device "$DEVICE" --shipped-dir gpu/models 2>&1 | tee "$out/hf_import.txt"
  ;;
graphs-check)  # issue 49's first goal: CUDA graphs (greedy and beam) against the eager steps, in process and over HTTP
  out=${2:?usage: device.sh graphs-check OUT}
  setup
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1 || true
  "$PYTHON" bench/cuda_parity.py --models gpu/models 2>&1 | tee "$out/parity.txt"
  "$PYTHON" bench/cuda_latency.py --model gpu/models/en-de-transformer --out "$out/latency" 2>&1 | tee "$out/latency.txt"
  "$PYTHON" bench/cuda_served.py --models gpu/models --device "$DEVICE" --no-cpu-parity --eager-too --on-demand-too \
    --requests 30 --out "$out/served.json" 2>&1 | tee "$out/served.txt"
  "$PYTHON" bench/served_profile.py --model gpu/models/en-de-transformer --device "$DEVICE" 2>&1 | tee "$out/profile.txt"
  ;;
ct2-check)  # its second and third: an opus-mt-shaped Marian against CTranslate2, a 0.5B LLM against transformers
  # carries .whl-ct2 and .whl-min (pydantic and the rest the engine imports): with .whl the tree passes 64 MiB
  out=${2:?usage: device.sh ct2-check OUT}
  mkdir -p "$out"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl-min/*.whl .whl-ct2/*.whl
  export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
  # CTranslate2's wheel opens CUDA 12's cuBLAS by name; a CUDA 13 image has libcublas.so.13, whose
  # functions CTranslate2 calls keep their names: offer it under the old name unless a real one is there
  if ! ldconfig -p | grep -q libcublas.so.12; then
    lib=$(find "$("$PYTHON" -c 'import sys; print(sys.prefix)')" /usr/local/cuda*/ -name 'libcublas.so.1[23]*' 2>/dev/null | sort | head -n 1)
    mkdir -p /tmp/cublas12 && [ -n "$lib" ] && ln -sf "$lib" /tmp/cublas12/libcublas.so.12
    export LD_LIBRARY_PATH="/tmp/cublas12:$(dirname "${lib:-/x}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "cuBLAS for CTranslate2: ${lib:-none found}" | tee "$out/cublas.txt"
  fi
  "$PYTHON" bench/marian_ct2.py --device "$DEVICE" --out "$out/marian.json" 2>&1 | tee "$out/marian.txt"
  for dtype in float32 bfloat16; do
    "$PYTHON" bench/llm_speed.py --device "$DEVICE" --dtype $dtype --vocab 151936 --prompt 64 --tokens 64 --runs 3 --peer \
      > "$out/llm-$dtype.json" 2> "$out/llm-$dtype.log" || tail -n 5 "$out/llm-$dtype.log"
    cat "$out/llm-$dtype.json"
  done
  ;;
evaluate)  # every model in gpu/models on test2016, side by side on the CPU cores (as the cards measured)
  out=${2:?usage: device.sh evaluate OUT}
  setup
  mkdir -p "$out/runs"
  for folder in gpu/models/*/; do
    name=$(basename "$folder")
    OMP_NUM_THREADS=2 "$PYTHON" -m attnscope.cli evaluate "$folder" --splits test2016 --device cpu \
      --data-dir "$ATTNSCOPE_DATA_DIR" > "$out/runs/$name.json" 2> "$out/runs/$name.log" &
  done
  wait
  "$PYTHON" - gpu/models "$out/runs" <<'PY' | tee "$out/bleu.txt"
import json, sys
from pathlib import Path
models, runs = Path(sys.argv[1]), Path(sys.argv[2])
for card in sorted(models.glob("*/card.json")):
    name = card.parent.name
    before = json.loads(card.read_text()).get("bleu", {}).get("test2016", {}).get("lowercase_13a")
    try:
        now = json.loads((runs / f"{name}.json").read_text())["bleu"]["test2016"]["lowercase_13a"]
    except (OSError, ValueError, KeyError) as error:
        now = f"failed ({type(error).__name__})"
    print(f"{name:28s} card {before}  now {now}")
PY
  tar -czf "$out/runs.tar.gz" -C "$out" runs && rm -rf "$out/runs"
  ;;
distill)
  setup
  mkdir -p gpu
  for teacher in en-de-transformer en-de-transformer-aligned; do
    [ -d "gpu/models/$teacher" ] || die "gpu/models/$teacher missing: scripts/device.sh pack en-de-transformer en-de-transformer-aligned"
    [ -f "gpu/kd-$teacher.tsv.gz" ] || "$PYTHON" -m attnscope.cli distill "gpu/models/$teacher" --split train --beam 5 \
      --device "$DEVICE" --batch-size 256 --out "gpu/kd-$teacher.tsv.gz"
  done
  cat gpu/kd-en-de-transformer.tsv.gz gpu/kd-en-de-transformer-aligned.tsv.gz > gpu/kd-en-de.tsv.gz
  ls -l gpu/kd-*.tsv.gz
  ;;
train)
  name=${2:?usage: device.sh train NAME SECONDS [options]}; seconds=${3:?usage: device.sh train NAME SECONDS [options]}
  shift 3
  setup
  mkdir -p gpu
  resume=()
  [ -d "runs/$name" ] && resume=(--resume)
  setsid nohup "$PYTHON" -m attnscope.cli train --out "gpu/$name" --run-dir "runs/$name" --device "$DEVICE" \
    --max-time "$seconds" "${resume[@]}" "$@" > "gpu/$name.log" 2>&1 < /dev/null &
  echo "started $name (pid $!), log gpu/$name.log"
  ;;
vision)  # issue 49 goal 4: continue vision folders on the GPU, several runs side by side, all back in OUT
  out=${2:?usage: device.sh vision OUT SECONDS RUN...}; seconds=${3:?usage: device.sh vision OUT SECONDS RUN...}
  shift 3  # each RUN is FOLDER:LR, FOLDER under gpu/models (carried), e.g. vision-sat-scenes:5e-4
  setup
  mkdir -p "$out" gpu/trained
  nvidia-smi --query-gpu=name --format=csv,noheader > "$out/gpu.txt" 2>&1 || true
  pids=()
  # side by side, each run gets its share of the cores: unbounded, every run's torch pool took all
  # 16 and the host-side work of six runs fought over them (2.3 steps/s for the captioner)
  threads=$(( $(nproc) / $# )); [ "$threads" -ge 1 ] || threads=1
  for run in "$@"; do
    folder=${run%%:*}; lr=${run##*:}
    kind=$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['kind'])" "gpu/models/$folder/vision.json")
    dataset=$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['dataset'])" "gpu/models/$folder/vision.json")
    "$PYTHON" -m attnscope.cli vision-train --model "$kind" --dataset "$dataset" --init "gpu/models/$folder" \
      --out "gpu/trained/$folder-lr$lr" --max-time "$seconds" --steps 1000000 --batch 256 --lr "$lr" \
      --eval-every 500 --data-dir gpu/fashion-mnist --device "$DEVICE" --threads "$threads" --quiet \
      > "$out/$folder-lr$lr.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || echo "a run failed (pid $pid): see its log" >> "$out/gpu.txt"; done
  tar -C gpu/trained -czf "$out/trained.tgz" .
  ls -l "$out"
  ;;
status)
  for log in gpu/*.log; do echo "== $log"; tail -c 4000 "$log" | tr "\r" "\n" | grep -v "^ *$" | tail -n 3; done
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv 2>/dev/null || true
  ;;
collect)
  name=${2:?usage: device.sh collect NAME OUT}; out=${3:?usage: device.sh collect NAME OUT}
  [ -f "gpu/$name/card.json" ] || die "gpu/$name has no card.json yet: the run has not finished"
  mkdir -p "$out"
  tar -C gpu -czf - "$name" "$name.log" | split -b 15M -d - "$out/$name.tgz."
  ls -l "$out"
  ;;
unpack)
  from=${2:?usage: device.sh unpack FILES_AT DEST}; dest=${3:?usage: device.sh unpack FILES_AT DEST}
  mkdir -p "$dest"
  cat "$from"/*.tgz.* | tar -C "$dest" -xzf -
  ls -l "$dest"
  ;;
*)
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
