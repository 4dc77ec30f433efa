"""CPU forward gathers with and without index tables (docs/findings.md, finding 6;
``kernel_choice.index_table``, docs/design.md, "Index tables").

Usage: ``python -m perf.probes.index_table_probe OUT_DIR [--rounds N] [--num-threads N]``

For CPU rows whose forward gathers with generated code (uint8 contiguous, channels-last
nearest-exact), compiled with ``dynamic=True`` in the call forms of the harness (``symbolic``:
``size`` from a closure; ``literal``: constants of the code) and with ``dynamic=False``: the
installed rule (``tables``), the rule turned off (``computed``: ``INDEX_TABLE_DEVICES = ()``,
each map computed wherever it is read) and eager, timed in ``N`` interleaved rounds in one
process (``torch.utils.benchmark``, the best round's median, us). Each compiled function is a new
code object, so Dynamo compiles each variant afresh. Every compiled result is checked against
eager. Writes ``OUT_DIR/index_table_probe.json`` and prints one line per row.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from unittest import mock

import torch

ROWS = [  # (input shape, output size, dtype, memory format, mode, call form, dynamic)
    ((1, 3, 500, 400), (256, 256), "uint8", "contiguous_format", "nearest", "symbolic", True),
    ((1, 3, 500, 400), (256, 256), "uint8", "contiguous_format", "nearest", "literal", True),
    ((1, 3, 500, 400), (256, 256), "uint8", "contiguous_format", "nearest-exact", "symbolic", True),
    ((1, 3, 500, 400), (256, 256), "uint8", "contiguous_format", "nearest-exact", "literal", True),
    ((1, 3, 500, 400), (256, 256), "uint8", "contiguous_format", "nearest-exact", "literal", False),
    ((4, 3, 500, 400), (256, 256), "uint8", "contiguous_format", "nearest-exact", "literal", True),
    ((1, 3, 1200, 1300), (200, 300), "uint8", "contiguous_format", "nearest-exact", "symbolic", True),
    ((1, 3, 300, 400), (600, 700), "uint8", "contiguous_format", "nearest", "literal", True),
    ((1, 3, 500, 400), (256, 256), "uint8", "channels_last", "nearest-exact", "symbolic", True),
    ((1, 3, 300, 400), (600, 700), "float32", "channels_last", "nearest-exact", "symbolic", True),
    ((1, 3, 300, 400), (600, 700), "float32", "channels_last", "nearest-exact", "literal", True),
    ((1, 3, 300, 400), (600, 700), "float32", "channels_last", "nearest", "literal", True),  # no table
]


def interpolate(osize, mode: str, form: str):
    """A new code object per call: Dynamo keys its cache on the code."""
    import torch.nn.functional as F

    if form == "literal":
        from perf.bench import literal_interpolate

        return literal_interpolate(osize, mode)
    namespace = {"F": F}
    exec("def make(kwargs):\n    return lambda x: F.interpolate(x, **kwargs)", namespace)
    return namespace["make"]({"size": tuple(osize), "mode": mode})


def _input(shape, dtype: str, memory_format: str) -> torch.Tensor:
    x = torch.rand(shape, dtype=torch.float64) * 255
    return x.to(getattr(torch, dtype)).contiguous(memory_format=getattr(torch, memory_format))


def probe_row(shape, osize, dtype, memory_format, mode, form, dynamic, rounds: int) -> dict:
    from torch.utils.benchmark import Timer

    from decomps import kernel_choice

    x = _input(shape, dtype, memory_format)
    eager = interpolate(osize, mode, form)
    expected = eager(x)
    columns = {}
    for name, devices in (("tables", kernel_choice.INDEX_TABLE_DEVICES), ("computed", ())):
        with mock.patch.object(kernel_choice, "INDEX_TABLE_DEVICES", devices):
            compiled = torch.compile(interpolate(osize, mode, form), dynamic=dynamic, fullgraph=True)
            assert torch.equal(compiled(x), expected), name
        columns[name] = compiled
    columns["eager"] = eager
    medians = {name: [] for name in columns}
    for _ in range(rounds):
        for name, fn in columns.items():
            timer = Timer("fn(x)", globals={"fn": fn, "x": x})
            medians[name].append(timer.blocked_autorange(min_run_time=0.5).median * 1e6)
    return {name: min(values) for name, values in medians.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.probes.index_table_probe")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--num-threads", type=int, default=1)
    args = parser.parse_args(argv)
    import decomps  # noqa: F401  (installs the decompositions)
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    inductor_config.fx_graph_cache = False  # its key does not see the switch flipped here
    functorch_config.enable_autograd_cache = False
    torch.set_num_threads(args.num_threads)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for shape, osize, dtype, fmt, mode, form, dynamic in ROWS:
        row = probe_row(shape, osize, dtype, fmt, mode, form, dynamic, args.rounds)
        results.append({"shape": shape, "osize": osize, "dtype": dtype, "memory_format": fmt,
                        "mode": mode, "form": form, "dynamic": dynamic, **row})
        times = "  ".join(f"{k} {v:.1f}" for k, v in row.items())
        shapes = f"{shape}->{osize} {dtype} {fmt} {mode} {form} {'dynamic' if dynamic else 'static'}"
        print(f"{shapes}: {times}", flush=True)
    (args.out_dir / "index_table_probe.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
