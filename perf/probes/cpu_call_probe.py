"""A compiled CPU forward call split into its C++ kernels and the host's part (docs/findings.md,
finding 3, "the compiled call's own time").

Usage: ``python -m perf.probes.cpu_call_probe OUT_DIR [--stock] [--threads 1 2] [--rounds R] [--calls C]``

For each row (f32, contiguous, ``size`` through a kwargs dict as the harness passes it,
``dynamic=True``), mode and thread count, interleaved rounds of ``C`` calls per column, us per
call:

* ``compiled``: the compiled call, split into the time inside its graph's C++ kernels and the
  rest (Dynamo, AOTAutograd's wrappers, the graph's allocations and size checks);
* ``compiled, kernels not run``: the same call with its kernels skipped: the host's part while
  the caches still hold what the wrappers touch; its difference to the rest above is what the
  kernels' memory traffic costs them;
* ``eager``: eager's call.

``--stock`` measures stock Inductor (``decomps.uninstall()`` first; a graph compiled in one
install state recompiles in the other, so each tag takes its own process). Each compiled result
is checked against eager's. Writes ``OUT_DIR/cpu_call_probe[-stock].json`` and prints one line
per row.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import decomps
from perf.probes import compiled_graphs, cpu_rows

ROWS = [((1, 3, 500, 400), (256, 256))]
MODES = ("nearest", "nearest-exact")


def _interp(x, kwargs):
    return F.interpolate(x, **kwargs)


def _kernels(call):
    """The C++ kernels of the one graph a compiled call runs, ``{name: kernel}``, and the module
    globals they live in."""
    ((graph, _),) = compiled_graphs(call)
    module_globals = getattr(graph.current_callable, "__func__", graph.current_callable).__globals__
    return {k: v for k, v in module_globals.items() if k.startswith("cpp_fused")}, module_globals


class _Timed:
    """Wraps the kernels of a compiled call's graph module: sums their time, or skips them."""

    def __init__(self, kernels, module_globals):
        self.inside = 0.0
        self.skip = False
        for name, kernel in kernels.items():
            module_globals[name] = self._wrap(kernel)

    def _wrap(self, kernel):
        def timed(*args):
            if self.skip:
                return None
            start = time.perf_counter()
            kernel(*args)
            self.inside += time.perf_counter() - start

        return timed


def measure(threads: int, shape, size, mode: str, rounds: int, calls: int) -> dict:
    torch.set_num_threads(threads)
    torch._dynamo.reset()
    x = torch.randn(shape)
    kwargs = {"size": size, "mode": mode}
    expected = _interp(x, kwargs)
    compiled = torch.compile(_interp, dynamic=True)
    for _ in range(2):
        assert torch.equal(compiled(x, kwargs), expected)
    timed = _Timed(*_kernels(lambda: compiled(x, kwargs)))
    columns = {"compiled": (compiled, False), "compiled, kernels not run": (compiled, True), "eager": (_interp, False)}
    times = {name: [] for name in columns}
    inside = []
    for _ in range(rounds):
        for name, (fn, skip) in columns.items():
            timed.inside, timed.skip = 0.0, skip
            start = time.perf_counter()
            for _ in range(calls):
                fn(x, kwargs)
            times[name].append((time.perf_counter() - start) / calls * 1e6)
            if name == "compiled":
                inside.append(timed.inside / calls * 1e6)
    us = {name: round(statistics.median(t), 1) for name, t in times.items()}
    kernels = statistics.median(inside)
    return {"tag": "stock" if not decomps.is_installed() else "package", "threads": threads,
            "shape": list(shape), "size": list(size), "mode": mode, "us, median of rounds": us,
            "compiled, split": {"kernels": round(kernels, 1), "rest": round(us["compiled"] - kernels, 1)}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.probes.cpu_call_probe")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--stock", action="store_true", help="stock Inductor: uninstall the package first")
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args(argv)
    rows = [(shape, size, mode) for shape, size in ROWS for mode in MODES]
    if args.stock:
        decomps.uninstall()
    try:
        return cpu_rows("cpu_call_probe-stock" if args.stock else "cpu_call_probe", args.out_dir, args.threads, rows,
                        lambda n, shape, size, mode: measure(n, shape, size, mode, args.rounds, args.calls))
    finally:
        if args.stock:
            decomps.install()


if __name__ == "__main__":
    raise SystemExit(main())
