#!/usr/bin/env bash
# Everything worth measuring on an accelerator of one's own (tens of minutes, 30-odd files five folders
# deep), in one command, every report under one directory. On a lent machine (minutes, 8 files back) run
# scripts/gpu_probe.sh instead, the one-shot check for it. This one measures:
# jax.devices(); the accelerator tests (make test-accelerator); a short bfloat16 training run and the
# runtime block of its config.json; bench_attention.py in float32 (--implementation=auto) and in
# bfloat16 (auto and xla), unmasked and with key padding, lengths up to 65,536; the causal chunk sweep
# (bench_chunks.py) in float32 and bfloat16; bench_train.py; bench_decode.py; the quick studies
# (python -m scripts.compare --task=mlm and --task=recall, --preset=quick); then OUT/summary.md.
#
# Usage:
#   scripts/gpu_check.sh [--out=DIR] [--quick] [--skip-tests] [--skip-studies]
#   make bench-gpu [GPU_CHECK_ARGS="--out=reports/gpu-h100"]
#
#   --out=DIR         where the reports go (default reports/gpu; or OUT=DIR)
#   --quick           smoke-test sizes: short lengths, one timing each, tiny configs (or QUICK=1)
#   --skip-tests      no make test-accelerator (or SKIP_TESTS=1)
#   --skip-studies    no compare.py studies, the longest part (or SKIP_STUDIES=1)
#
# Environment: PYTHON (default .venv/bin/python), MAX_MEMORY_GB (default 40: the attention benchmarks
# skip a kind from the length whose planned memory exceeds it), REPEATS (timings per benchmark cell,
# default 5), ATTENTION_LENGTHS, CHUNK_LENGTHS, CHUNK_SIZES (comma-separated, to override the defaults).
#
# A CPU runs it too, slowly: `scripts/gpu_check.sh --quick --skip-tests --skip-studies --out=/tmp/check`
# checks it end to end in a few minutes. Each step's output goes to the terminal and to OUT/logs/STEP.log;
# a step that fails is recorded and the next ones still run; the exit status is 1 if any step failed.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=${OUT:-reports/gpu}
QUICK=${QUICK:-0}
SKIP_TESTS=${SKIP_TESTS:-0}
SKIP_STUDIES=${SKIP_STUDIES:-0}
for arg in "$@"; do
  case $arg in
    --out=*) OUT=${arg#--out=} ;;
    --quick) QUICK=1 ;;
    --skip-tests) SKIP_TESTS=1 ;;
    --skip-studies) SKIP_STUDIES=1 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-.venv/bin/python}
MAX_MEMORY_GB=${MAX_MEMORY_GB:-40}
REPEATS=${REPEATS:-5}
if [[ $QUICK == 1 ]]; then
  ATTENTION_LENGTHS=${ATTENTION_LENGTHS:-64,128}
  CHUNK_LENGTHS=${CHUNK_LENGTHS:-128,256}
  CHUNK_SIZES=${CHUNK_SIZES:-0,16,64}
  REPEATS=1
  ATTENTION_SIZES=(--heads=2 --head_dim=16)
  TRAIN_BENCH=(--configs=configs/mlm.py:tiny --rounds=1 --steps_per_round=2)
  DECODE_BENCH=(--quick --kinds=softmax,linear)
else
  ATTENTION_LENGTHS=${ATTENTION_LENGTHS:-256,512,1024,2048,4096,8192,16384,32768,65536}
  CHUNK_LENGTHS=${CHUNK_LENGTHS:-1024,4096,8192,16384}
  CHUNK_SIZES=${CHUNK_SIZES:-0,16,32,64,128,256}
  ATTENTION_SIZES=()
  TRAIN_BENCH=()
  DECODE_BENCH=(--kinds=softmax,linear,performer)
fi

mkdir -p "$OUT/logs"
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
STEPS=()  # "name|status|seconds" per step, for the summary
FAILED=0

run_step() {  # run_step NAME COMMAND...: output to the terminal and OUT/logs/NAME.log; never stops the script
  local name=$1 started=$SECONDS status
  shift
  echo
  echo "=== $name: $*"
  set +e
  "$@" 2>&1 | tee "$OUT/logs/$name.log"
  status=${PIPESTATUS[0]}
  set -e
  if [[ $status == 0 ]]; then
    STEPS+=("$name|ok|$((SECONDS - started))")
  else
    STEPS+=("$name|FAILED (exit $status)|$((SECONDS - started))")
    FAILED=1
  fi
}

skip_step() {  # skip_step NAME REASON
  echo
  echo "=== $1: skipped ($2)"
  STEPS+=("$1|skipped: $2|0")
}

devices() {
  "$PYTHON" -c 'import jax; print(jax.devices()); print("backend:", jax.default_backend(), "| jax", jax.__version__)'
}

short_training_run() {  # train.py's tiny MLM run in bfloat16 in a temporary workdir; its runtime block
  local workdir="$SCRATCH/train-bf16"
  "$PYTHON" train.py --config=configs/mlm.py:tiny --config.compute_dtype=bfloat16 --workdir="$workdir"
  "$PYTHON" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["runtime"], indent=1))' \
    "$workdir/config.json" | tee "$OUT/train_bf16_runtime.json"
}

bench_attention() {  # bench_attention DTYPE IMPLEMENTATION
  "$PYTHON" -m scripts.bench_attention --kinds=softmax,linear,performer,reference --dtype="$1" \
    --implementation="$2" --masks=none,padding --lengths="$ATTENTION_LENGTHS" --repeats="$REPEATS" \
    --max_memory_gb="$MAX_MEMORY_GB" "${ATTENTION_SIZES[@]}" --out="$OUT/attention-$1-$2"
}

bench_chunks() {  # bench_chunks DTYPE
  "$PYTHON" -m scripts.bench_chunks --kinds=linear --dtype="$1" --chunk_sizes="$CHUNK_SIZES" \
    --lengths="$CHUNK_LENGTHS" --repeats="$REPEATS" --max_memory_gb="$MAX_MEMORY_GB" "${ATTENTION_SIZES[@]}" \
    --out="$OUT/chunks-$1"
}

study() {  # study TASK
  "$PYTHON" -m scripts.compare --task="$1" --preset=quick --runs_dir="$OUT/studies/runs" \
    --reports_dir="$OUT/studies"
}

run_step devices devices
if [[ $SKIP_TESTS == 1 ]]; then skip_step tests "SKIP_TESTS=1"; else run_step tests make --no-print-directory test-accelerator; fi
run_step train-bf16 short_training_run
run_step attention-float32-auto bench_attention float32 auto
run_step attention-bfloat16-auto bench_attention bfloat16 auto
run_step attention-bfloat16-xla bench_attention bfloat16 xla
run_step chunks-float32 bench_chunks float32
run_step chunks-bfloat16 bench_chunks bfloat16
run_step bench-train "$PYTHON" -m scripts.bench_train "${TRAIN_BENCH[@]}" --workdir="$SCRATCH/bench-train" \
  --out="$OUT/train"
run_step bench-decode "$PYTHON" -m scripts.bench_decode "${DECODE_BENCH[@]}" --out="$OUT/decode"
if [[ $SKIP_STUDIES == 1 ]]; then
  skip_step study-mlm "SKIP_STUDIES=1"
  skip_step study-recall "SKIP_STUDIES=1"
else
  run_step study-mlm study mlm
  run_step study-recall study recall
fi

# --- summary: the steps, then each report's headline lines ---------------------------------------------
# One "## <title>" section of the summary: the output of <command...> on the report.
section() {
  local title=$1 report=$2
  shift 2
  echo
  echo "## $title"
  echo
  "$@" "$report"
}

{
  echo "# GPU check: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "\`scripts/gpu_check.sh$(printf ' %s' "$@")\` (quick=$QUICK, repeats=$REPEATS); logs in \`$OUT/logs/\`."
  echo
  echo '```'
  cat "$OUT/logs/devices.log"
  echo '```'
  echo
  echo "| step | status | seconds |"
  echo "|---|---|---:|"
  for step in "${STEPS[@]}"; do
    IFS='|' read -r name status seconds <<<"$step"
    echo "| $name | $status | $seconds |"
  done
  for report in "$OUT"/attention-*/attention.md; do
    [[ -f $report ]] && section "$(basename "$(dirname "$report")")" "$report" grep -E '^B=|^\*\*' || true
  done
  for report in "$OUT"/chunks-*/chunks.md; do
    [[ -f $report ]] && section "$(basename "$(dirname "$report")")" "$report" sed -n '/^## /,$p' || true
  done
  for report in "$OUT/train/train.md" "$OUT/decode/decode.md"; do
    [[ -f $report ]] && section "$(basename "$report")" "$report" cat || true
  done
} >"$OUT/summary.md"
echo
echo "=== summary: $OUT/summary.md"
for step in "${STEPS[@]}"; do
  IFS='|' read -r name status seconds <<<"$step"
  printf '%-26s %-28s %6s s\n' "$name" "$status" "$seconds"
done
exit $FAILED
