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
  # The pin is this env's purpose, so it goes with each install: pip fails rather than move torch.
  # Where a machine-wide pip constraint refuses it (seen: /etc/xdg/pip capping torch<=2.14.1),
  # the install is retried without pip's config files.
  # A download can arrive corrupt (seen: pip's "do not match the hashes" for torch 2.15.0's
  # 539 MB wheel, whose sha256 matched when downloaded again), so both installs are tried up to
  # three times. pip's cache stays off: it would hold a second copy of the CUDA wheels (a few
  # GB) beside the env, and a cached corrupt download would fail every attempt.
  pinned_install() {
    local attempt
    local -x PIP_NO_CACHE_DIR=1
    for attempt in 1 2 3; do
      python -m pip install -q "$@" "torch==$TORCH" 2>/dev/null && return 0
      PIP_CONFIG_FILE=/dev/null python -m pip install -q "$@" "torch==$TORCH" && return 0
      echo "scripts/setup.sh: installing torch==$TORCH failed (attempt $attempt of 3; $(df -h . | awk 'NR == 2 {print $4}') free here)" >&2
    done
    return 1
  }
  python -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$TORCH')" 2>/dev/null \
    || pinned_install
  pinned_install -e ".[test,perf]"
else
  # Pin torch where none is importable: an unpinned `torch` pulls several GB of CUDA wheels.
  python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
  python -m pip install -q -e ".[test,perf]"
fi
