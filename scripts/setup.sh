#!/usr/bin/env bash
# One-time set-up shared by the README's two commands and CI: a virtual env with torch and this
# package (editable) and its extras. Safe to re-run; does nothing that is already done.
#
#   bash scripts/setup.sh                      .venv; torch==2.13.0 where no torch is importable
#   bash scripts/setup.sh .venv-newest 2.15.0  that env with exactly torch 2.15.0
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${1:-.venv}
TORCH=${2:-}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
. "$VENV/bin/activate"
if [ -n "$TORCH" ]; then
  python -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$TORCH')" 2>/dev/null \
    || python -m pip install -q "torch==$TORCH"
else
  # Pin torch where none is importable: an unpinned `torch` pulls several GB of CUDA wheels.
  python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
fi
python -m pip install -q -e ".[test,perf]"
