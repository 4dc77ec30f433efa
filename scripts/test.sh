#!/usr/bin/env bash
# Runs the test suite (CPU; CUDA tests too when a GPU is visible). Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec python -m pytest tests -q "$@"
