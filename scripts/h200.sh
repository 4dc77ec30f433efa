#!/usr/bin/env bash
# The H200 run (device tool): the whole test suite (CUDA tests included) and the CUDA perf
# harness rows, results under $OUT. Usage: bash scripts/h200.sh [TEST_TIMEOUT_S] [PERF_FILTER] [PERF_TIMEOUT_S]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/h200-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then  # expecttest is not in the image
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } | tee "$OUT/env.txt"
timeout "${1:-330}" python3 -m pytest tests -q -p no:cacheprovider -n 8 --ignore=tests/perf \
  -rfE 2>&1 | tail -60 | tee "$OUT/tests.txt"
if [ -n "${2:-}" ]; then
  timeout "${3:-400}" python3 -m perf /tmp/perf --device cuda --backward --min-run-time 0.3 --filter "$2" 2>&1 \
    | tail -80 | tee "$OUT/perf.txt"
  cp /tmp/perf/*.md /tmp/perf/*.png /tmp/perf/*.pkl "$OUT/" 2>/dev/null  # at most 8 files come back
fi
