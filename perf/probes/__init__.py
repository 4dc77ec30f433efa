"""One-off measurements behind docs/findings.md, apart from the harness.

Each probe runs as ``python -m perf.probes.NAME`` and says in its docstring which finding it
measures; the harness (``python -m perf``) does not use them.
"""
