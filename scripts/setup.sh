#!/usr/bin/env bash
# One-time set-up shared by the README's two commands: a virtual env in .venv with torch and
# this package (editable) and its extras. Safe to re-run; does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
# Pin torch where none is importable: an unpinned `torch` pulls several GB of CUDA wheels.
python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[test,perf]"
