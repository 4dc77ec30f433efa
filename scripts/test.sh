#!/usr/bin/env bash
# Runs the test suite (CPU; CUDA tests too when a GPU is visible) in two pytest-xdist workers; the
# large-tensor tests run in one of them (their xdist_group), never two at once. Extra args go to
# pytest (`-n 0`: one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec python -m pytest tests -q -n 2 --dist loadgroup "$@"
