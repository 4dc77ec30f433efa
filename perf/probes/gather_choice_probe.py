"""CPU forward gathers: the formulations ``decomps.kernel_choice`` picks among, side by side in one
process (docs/findings.md, finding 3, "float32 gathers table-driven with AVX2's vectors";
docs/design.md, "Kernel choice").

Usage: ``python -m perf.probes.gather_choice_probe OUT_DIR [--rounds R] [--calls C]
[--num-threads N] [--dtypes float32 uint8 bfloat16] [--layouts contiguous_format channels_last]``

For the harness's batch-1 CPU seed rows whose forward gathers, both modes and both call forms
(``symbolic``: ``size`` in a closure's kwargs dict, as the harness passes it; ``literal``: constants
of the code), ``dynamic=True``, one compiled function per formulation, each a new code object
traced under a patch of ``kernel_choice`` (the compile caches off: their keys do not see it):

* contiguous: ``aten`` (ATen's kernel as an extern call), ``computed`` (the generated gather
  computing its innermost map per lane), ``table`` (the map loaded from a table, ``index_table``);
* channels-last, 3 channels: ``pixel`` (one masked vector per pixel), ``rows`` (rows of W * C
  elements, ``channel_rows``), ``aten``;

and ``eager``, timed in R interleaved rounds of C back-to-back calls per column. On small shared
machines the CPU's speed moves by up to 2x between rounds, so each column's result is the median
over rounds of its time divided by eager's in the same round (``ratio``; below 1: faster than
eager), next to its best round (``best_us``). The (300,400)->(600,700) contiguous rows with a
symbolic size cut a short period into slices and gather nothing; they are left out. Every compiled
result is checked against eager (``torch.equal``, eager's strides). Writes
``OUT_DIR/gather_choice_probe.json`` and prints one line per row.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path
from unittest import mock

import torch

SHAPES = [((1, 3, 500, 400), (256, 256)), ((1, 3, 1200, 1300), (200, 300)), ((1, 3, 300, 400), (600, 700))]
MODES = ("nearest", "nearest-exact")
FORMS = ("literal", "symbolic")


def _variants(kernel_choice) -> dict:
    """``{layout: {formulation: {attribute of kernel_choice: replacement}}}``."""
    index_table = kernel_choice.index_table

    def innermost_table(table: bool):
        def rule(input, innermost, rule):
            return table if innermost else index_table(input, innermost, rule)
        return rule

    aten = {"aten_forward": lambda input, patterns: patterns[-1] is None}
    generated = {"aten_forward": lambda input, patterns: False}
    return {
        "contiguous_format": {
            "aten": aten,
            "computed": {**generated, "index_table": innermost_table(False)},
            "table": {**generated, "index_table": innermost_table(True)},
        },
        "channels_last": {
            "pixel": {**generated, "channel_rows": lambda input, patterns: False},
            "rows": {**generated, "channel_rows": lambda input, patterns: kernel_choice._few_channels(input, patterns)},
            "aten": aten,
        },
    }


def rows(dtypes, layouts):
    for dtype in dtypes:
        for layout in layouts:
            for (shape, osize) in SHAPES:
                for mode in MODES:
                    for form in FORMS:
                        periodic = osize == (600, 700) and layout == "contiguous_format"
                        if not (periodic and form == "symbolic"):
                            yield shape, osize, dtype, layout, mode, form


def measure(shape, osize, dtype, layout, mode, form, rounds: int, calls: int) -> dict:
    from decomps import kernel_choice
    from perf.probes import minor_faults
    from perf.probes.index_table_probe import _input, interpolate

    # torch 2.11 compiles each of these functions through one wrapper frame, so every row's columns
    # would count toward that frame's recompile limit (8) and a fullgraph compile would fail.
    torch._dynamo.reset()
    x = _input(shape, dtype, layout)
    eager = interpolate(osize, mode, form)
    expected = eager(x)
    columns = {"eager": eager}
    for name, patches in _variants(kernel_choice)[layout].items():
        with contextlib.ExitStack() as stack:
            for attribute, value in patches.items():
                stack.enter_context(mock.patch.object(kernel_choice, attribute, value))
            compiled = torch.compile(interpolate(osize, mode, form), dynamic=True, fullgraph=True)
            out = compiled(x)
        assert torch.equal(out, expected) and out.stride() == expected.stride(), name
        columns[name] = compiled
    times = {name: [] for name in columns}
    faults = {name: 0 for name in columns}
    for _ in range(rounds):
        for name, fn in columns.items():
            fn(x)
            before = minor_faults()
            start = time.perf_counter()
            for _ in range(calls):
                fn(x)
            times[name].append((time.perf_counter() - start) / calls * 1e6)
            faults[name] = max(faults[name], (minor_faults() - before) // calls)
    ratio = {name: round(statistics.median(t / e for t, e in zip(ts, times["eager"])), 3) for name, ts in times.items()}
    return {"shape": list(shape), "osize": list(osize), "dtype": dtype, "layout": layout, "mode": mode, "form": form,
            "ratio": ratio, "best_us": {name: round(min(ts), 1) for name, ts in times.items()},
            "page_faults_per_call_max": faults}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.probes.gather_choice_probe")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--num-threads", type=int, default=1)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "uint8"], choices=("float32", "uint8", "bfloat16"))
    parser.add_argument("--layouts", nargs="+", default=["contiguous_format", "channels_last"],
                        choices=("contiguous_format", "channels_last"))
    args = parser.parse_args(argv)
    import decomps  # noqa: F401  (installs the decompositions)
    from perf.probes import cpu_rows

    return cpu_rows("gather_choice_probe", args.out_dir, [args.num_threads], list(rows(args.dtypes, args.layouts)),
                    lambda n, *row: _measure_at(n, *row, args.rounds, args.calls))


def _measure_at(threads: int, *row) -> dict:
    torch.set_num_threads(threads)
    return {"threads": threads, **measure(*row)}


if __name__ == "__main__":
    raise SystemExit(main())
