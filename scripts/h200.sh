#!/usr/bin/env bash
# The H200 runs (device tool), results under $OUT. Run from the repo root there, with the
# expecttest wheel carried in .whl/ (not in the image):
#
#   bash scripts/h200.sh tests [TIMEOUT_S] [K/N]
#                                              the whole suite, CPU and CUDA variants; with K/N
#                                              the K-th of N shards (every N-th test, pytest's
#                                              --shard from tests/conftest.py), so that the suite
#                                              fits device calls of 600 s: 1/2, then 2/2
#   bash scripts/h200.sh perf [PERF ARGS...]   python -m perf /tmp/perf --device cuda ARGS
#                                              (under a device call's limit, add --time-limit: e.g. 480)
#                                              (on a machine of several GPUs add --devices 0,1,...)
#
# tests: every file but two runs under xdist; test_large_tensors.py (tens of GB of GPU memory
# per test) runs beside it in one process, and test_export.py one test per process, so that a
# crash in AOTInductor's loader costs one test, not a worker. Logs (-v, one line per test) go
# to $OUT/tests-*.log; $OUT/tests-summary.txt counts them.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/h200-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc;
  python3 -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
  git log -1 --format='commit %H' 2>/dev/null; } | tee "$OUT/env.txt"

what=${1:-tests}
shift || true
case "$what" in
tests)
  limit=${1:-560}
  shard=()
  [ -n "${2:-}" ] && shard=(--shard "$2")
  # Each xdist worker compiles in its own process: no compile pool per worker on 16 cores.
  export TORCHINDUCTOR_COMPILE_THREADS=1
  serial=(tests/test_large_tensors.py tests/test_export.py)
  (
    timeout "$limit" python3 -m pytest tests/test_large_tensors.py -v -p no:cacheprovider -rfE "${shard[@]}"
    for t in $(python3 -m pytest tests/test_export.py --collect-only -q -p no:cacheprovider "${shard[@]}" | grep '::'); do
      timeout 120 python3 -m pytest "$t" -v -p no:cacheprovider -rfE || echo "EXIT $? $t"
    done
  ) >"$OUT/tests-serial.log" 2>&1 &
  timeout "$limit" python3 -m pytest tests -v -n 12 -p no:cacheprovider -rfE "${shard[@]}" \
    "${serial[@]/#/--ignore=}" >"$OUT/tests-xdist.log" 2>&1
  echo "xdist exit $?" >>"$OUT/tests-xdist.log"
  wait
  {
    for f in "$OUT"/tests-xdist.log "$OUT"/tests-serial.log; do
      echo "$(basename "$f"): passed $(grep -c ' PASSED' "$f"), failed $(grep -c ' FAILED' "$f"),"\
        "errors $(grep -c ' ERROR' "$f"), crashed $(grep -c '^EXIT' "$f")"
      grep -E '^(FAILED|ERROR|EXIT)|Fatal Python|Segmentation|passed|failed' "$f" | tail -20
    done
  } | tee "$OUT/tests-summary.txt"
  ;;
perf)
  python3 -m perf /tmp/perf --device cuda "$@" 2>&1 | tee "$OUT/perf.log" | tail -40
  # The reports and each tag's (merged) pickle as files; every process's pickle and log (with
  # --processes / --devices, dozens: more files than a device call brings back) in one archive.
  cp /tmp/perf/*.md /tmp/perf/*.png "$OUT/" 2>/dev/null
  find /tmp/perf -maxdepth 1 -name '*.pkl' ! -name '*-shard*' ! -name '*-process*' -exec cp {} "$OUT/" \;
  (cd /tmp/perf && tar czf "$OUT/perf-processes.tgz" -- *-shard* *-process* 2>/dev/null)
  ;;
*)
  echo "usage: bash scripts/h200.sh tests [TIMEOUT_S] [K/N] | perf [PERF ARGS...]" >&2
  exit 2
  ;;
esac
