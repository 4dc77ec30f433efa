#!/usr/bin/env bash
# The main job: PR (package installed) vs Nightly (stock torch) perf comparison.
# CPU by default; CUDA when present. Extra args go to `python -m perf`, e.g. --quick.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec python -m perf perf-results "$@"
