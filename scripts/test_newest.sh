#!/usr/bin/env bash
# The newest tested torch release (decomps/_install.py: NEWEST_TESTED_TORCH) in its own env,
# .venv-newest: the install, compile, backward, repeat-lowering, static- and cached-launch and export tests, and those of the
# C++ code generation hooks (gathers, private sizes, short stores, divisions, the vector width), in two
# pytest-xdist workers as scripts/test.sh. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh .venv-newest 2.15.0
. .venv-newest/bin/activate
exec python -m pytest tests/test_install.py tests/test_compile.py tests/test_backward.py tests/test_repeat.py tests/test_static_launch.py tests/test_cached_launch.py \
  tests/test_export.py tests/test_cpu_gathers.py tests/test_cpu_sizes.py tests/test_cpu_stores.py tests/test_cpu_divisions.py tests/test_cpu_vectors.py tests/test_cpu_blocks.py tests/test_block_pool.py \
  -q -n 2 --dist loadgroup "$@"
