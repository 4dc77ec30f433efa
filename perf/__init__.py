"""Performance harness for the ``decomps`` nearest / nearest-exact upsampling package.

Entry points (run from the repository root):

* ``python -m perf OUT_DIR [--quick]``: PR and Nightly runs, tables and a chart.
* ``python -m perf.interp_mode OUT_DIR --tag=PR``: one benchmark run, one pickle.
* ``python -m perf.results_table OUT.md A.pkl [B.pkl ...]``: all measurements.
* ``python -m perf.speedup OUT.md PR.pkl NIGHTLY.pkl --compare "A;B;name"``.
* ``python -m perf.plot OUT.png PR.pkl NIGHTLY.pkl --compare "A;B;name"``.

This package must not import torch at import time: ``perf.interp_mode`` sets
``TORCHINDUCTOR_CACHE_DIR`` before torch is first imported. See docs/perf.md.
"""
