"""A compiled CPU forward call split into its C++ kernels and the host's part (docs/findings.md,
finding 3, "the compiled call's own time").

Usage: ``python -m perf.probes.cpu_call_probe OUT_DIR [--stock] [--threads 1 2] [--rounds R] [--calls C] [--bounds]
[--call-forms symbolic literal] [--rows 500x400 1200x1300]``

For each row (``ROWS``: (1,3,500,400)->(256,256), the default, and (1,3,1200,1300)->(200,300); f32,
contiguous, ``dynamic=True``), mode, call form (``symbolic``: ``size`` through
a kwargs dict as the harness passes it, the default; ``literal``: the size written as constants,
as in the harness's ``size:literal`` rows) and thread count, interleaved rounds of ``C`` calls per column, us per
call:

* ``compiled``: the compiled call, split into the time inside its graph's C++ kernels and the
  rest (Dynamo, AOTAutograd's wrappers, the graph's allocations and size checks);
* ``compiled, kernels not run``: the same call with its kernels skipped: the host's part while
  the caches still hold what the wrappers touch; its difference to the rest above is what the
  kernels' memory traffic costs them;
* ``eager``: eager's call;
* with ``--bounds``, ``compiled, gather's bytes only``: the call with each kernel rebuilt from
  its source with every vector gather of the package (``lowerings/cpu_gathers``) replaced by two
  unmasked loads from its first lane's element, added (``gather_bytes_only``): where a vector's
  lanes span at most 32 inputs, the cache lines the gather reads, and at most one more per input
  row, with no index work; where they span more (downsampling by more than about 2), fewer. Not
  the result; a bound from below on any kernel with ordinary loads and stores in that call. The input lies in a
  larger buffer, so the loads past its end stay in memory the process owns.

``--stock`` measures stock Inductor (``decomps.uninstall()`` first; a graph compiled in one
install state recompiles in the other, so each tag takes its own process). Each compiled result
is checked against eager's. Writes ``OUT_DIR/cpu_call_probe[-stock].json`` and prints one line
per row.
"""

from __future__ import annotations

import argparse
import ast
import math
import re
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import decomps
from perf.bench import literal_interpolate
from perf.probes import compiled_graphs, cpu_rows

ROWS = {"500x400": ((1, 3, 500, 400), (256, 256)), "1200x1300": ((1, 3, 1200, 1300), (200, 300))}
MODES = ("nearest", "nearest-exact")


def _interp(x, kwargs):
    return F.interpolate(x, **kwargs)


def _literal(size, mode: str):
    """``_interp`` with the output size and mode written as constants (``kwargs`` unused)."""
    interpolate = literal_interpolate(size, mode)
    return lambda x, kwargs: interpolate(x)


def _kernels(call):
    """The C++ kernels of the one graph a compiled call runs, ``{name: kernel}``, and the module
    globals they live in."""
    ((graph, _),) = compiled_graphs(call)
    module_globals = getattr(graph.current_callable, "__func__", graph.current_callable).__globals__
    return {k: v for k, v in module_globals.items() if k.startswith("cpp_fused")}, module_globals


class _Timed:
    """Wraps the kernels of a compiled call's graph module: sums their time, or skips them;
    ``kernels`` (by name) are the ones that run."""

    def __init__(self, kernels, module_globals):
        self.inside = 0.0
        self.skip = False
        self.kernels = dict(kernels)
        for name in kernels:
            module_globals[name] = self._wrap(name)

    def _wrap(self, name):
        def timed(*args):
            if self.skip:
                return None
            start = time.perf_counter()
            self.kernels[name](*args)
            self.inside += time.perf_counter() - start

        return timed


# One vector gather of lowerings/cpu_gathers: its lambda up to the first lane's index, the rest.
_GATHER = re.compile(
    r"(\[&\]\(\) -> at::vec::Vectorized<float>\n\{\n    const float\* base = [^\n]*\n.*?"
    r"\n    const int64_t first = [^\n]*\n).*?\n\}\n\(\)",
    re.S,
)
_BYTES_ONLY = ("    return at::vec::Vectorized<float>(\n"
               "        _mm512_add_ps(_mm512_loadu_ps(base + first), _mm512_loadu_ps(base + first + 16)));\n}\n()")


def gather_bytes_only(source: str) -> tuple[str, int]:
    """A C++ kernel's source with each vector gather replaced by two unmasked loads from its
    first lane's element, added, and how many were replaced."""
    return _GATHER.subn(lambda m: m.group(1) + _BYTES_ONLY, source)


def _bytes_only_kernels(module_globals) -> dict:
    """The graph module's C++ kernels rebuilt by ``gather_bytes_only``, ``{name: kernel}``; empty
    where no kernel has a vector gather."""
    from torch._inductor.async_compile import AsyncCompile

    source = Path(module_globals["__file__"]).read_text()
    kernels = {}
    for name, argtypes, code in re.findall(r"(cpp_fused\w*) = async_compile\.cpp_pybinding\((\[.*?\]), r'''(.*?)'''\)",
                                           source, re.S):
        code, count = gather_bytes_only(code)
        if count:
            kernel = AsyncCompile().cpp_pybinding(ast.literal_eval(argtypes), code)  # C type names
            kernels[name] = kernel.result() if hasattr(kernel, "result") else kernel
    return kernels


def measure(threads: int, shape, size, mode: str, form: str, rounds: int, calls: int, bounds: bool = False) -> dict:
    torch.set_num_threads(threads)
    torch._dynamo.reset()
    numel = math.prod(shape)
    x = torch.randn(numel + 64)[:numel].view(shape)  # the bound's loads may read past the end
    kwargs = {"size": size, "mode": mode}
    expected = _interp(x, kwargs)
    compiled = torch.compile(_literal(size, mode) if form == "literal" else _interp, dynamic=True)
    for _ in range(2):
        assert torch.equal(compiled(x, kwargs), expected)
    kernels, module_globals = _kernels(lambda: compiled(x, kwargs))
    timed = _Timed(kernels, module_globals)
    columns = {"compiled": (compiled, False, kernels), "compiled, kernels not run": (compiled, True, kernels),
               "eager": (_interp, False, kernels)}
    bytes_only = _bytes_only_kernels(module_globals) if bounds else {}
    if bytes_only:
        columns["compiled, gather's bytes only"] = (compiled, False, {**kernels, **bytes_only})
    times = {name: [] for name in columns}
    inside = []
    for _ in range(rounds):
        for name, (fn, skip, running) in columns.items():
            timed.inside, timed.skip, timed.kernels = 0.0, skip, running
            start = time.perf_counter()
            for _ in range(calls):
                fn(x, kwargs)
            times[name].append((time.perf_counter() - start) / calls * 1e6)
            if name == "compiled":
                inside.append(timed.inside / calls * 1e6)
    timed.kernels = kernels
    us = {name: round(statistics.median(t), 1) for name, t in times.items()}
    best = {name: round(min(t), 1) for name, t in times.items()}
    inside_us = statistics.median(inside)
    return {"tag": "stock" if not decomps.is_installed() else "package", "threads": threads,
            "shape": list(shape), "size": list(size), "mode": mode, "form": form, "us, median of rounds": us,
            "us, best round": best, "kernels rebuilt": len(bytes_only),
            "compiled, split": {"kernels": round(inside_us, 1), "rest": round(us["compiled"] - inside_us, 1)}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.probes.cpu_call_probe")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--stock", action="store_true", help="stock Inductor: uninstall the package first")
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--call-forms", nargs="+", choices=("symbolic", "literal"), default=["symbolic"])
    parser.add_argument("--rows", nargs="+", choices=tuple(ROWS), default=["500x400"],
                        help="inputs (ROWS): (1,3,500,400)->(256,256), (1,3,1200,1300)->(200,300)")
    parser.add_argument("--bounds", action="store_true",
                        help="also the call with its vector gathers reduced to their memory traffic")
    args = parser.parse_args(argv)
    rows = [(shape, size, mode, form)
            for shape, size in map(ROWS.get, args.rows) for mode in MODES for form in args.call_forms]
    if args.stock:
        decomps.uninstall()
    try:
        return cpu_rows("cpu_call_probe-stock" if args.stock else "cpu_call_probe", args.out_dir, args.threads, rows,
                        lambda n, *row: measure(n, *row, args.rounds, args.calls, args.bounds))
    finally:
        if args.stock:
            decomps.install()


if __name__ == "__main__":
    raise SystemExit(main())
