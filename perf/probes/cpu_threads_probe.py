"""CPU forward gathers at 1 and 2 threads: the gather's load forms, ATen's kernel as an extern
call, eager (docs/findings.md, finding 3, "the batch-4 downsampling forwards at 2 threads").

Usage: ``python -m perf.probes.cpu_threads_probe OUT_DIR [--threads 1 2] [--inputs K]``

For each thread count, f32 contiguous downsampling rows (``size`` through a kwargs dict, as the
harness passes it; ``dynamic=True``), each compiled afresh per variant:

* ``package``: as installed (``lowerings/cpu_gathers.py``: permutes of whole or half vectors);
* ``lane``: the same kernel with Inductor's lane-by-lane loads (``_gather_line`` declined);
* ``vgatherdps``: the same kernel with AVX512's gather instruction for those loads;
* ``aten``: ATen's kernel as an extern call (``kernel_choice.aten_forward``);
* ``eager``.

Interleaved rounds of back-to-back calls, best round per column (us per call); ``--inputs K``
alternates K inputs, so that with K of the 75 MB inputs every call reads memory instead of the
last level cache.
Every compiled result is checked against eager (``torch.equal``). Writes
``OUT_DIR/cpu_threads_probe.json`` and prints one line per row.
"""

from __future__ import annotations

import argparse
import contextlib
import time
import types
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F

import decomps  # noqa: F401  (installs)
from decomps import kernel_choice
from lowerings import cpu_gathers
from perf.probes import cpu_rows

ROWS = [((4, 3, 1200, 1300), (200, 300)), ((4, 3, 200, 1300), (200, 300))]


def _vgatherdps(kernel, var, index, dtype):
    """``_gather_line`` as one ``_mm512_i32gather_ps`` (int32 indices; else Inductor's loads)."""
    from torch._inductor.codegen.cpp_utils import cexpr_index

    parts = cpu_gathers._whole_vector_index(kernel, index, dtype)
    if parts is None or kernel._load_mask is not None or parts[0].dtype != torch.int32:
        return None
    indirect, rest = parts
    return f"at::vec::Vectorized<float>(_mm512_i32gather_ps({indirect}, {var} + {cexpr_index(rest)}, 4))"


VARIANTS = {
    "package": {},
    "lane": {(cpu_gathers, "_gather_line"): lambda *args: None},
    "vgatherdps": {(cpu_gathers, "_gather_line"): _vgatherdps},
    "aten": {(kernel_choice, "aten_forward"): lambda *args: True},
}


def _compiled(f, name: str, patches: dict, x, kwargs):
    """``torch.compile`` of a copy of ``f`` with a code object of its own (Dynamo keeps compiled
    graphs per code object: copies sharing one would run one variant's graph), ``dynamic=True``,
    traced and compiled (three calls) under ``patches``."""
    from torch._inductor.utils import fresh_inductor_cache

    code = f.__code__.replace(co_name=f"{f.__name__}_{name}")
    own = types.FunctionType(code, f.__globals__, code.co_name, f.__defaults__, f.__closure__)
    with fresh_inductor_cache(), contextlib.ExitStack() as stack:
        for (owner, attribute), value in patches.items():
            stack.enter_context(mock.patch.object(owner, attribute, value))
        compiled = torch.compile(own, dynamic=True)
        for _ in range(3):
            compiled(x, kwargs)
    return compiled


def measure(threads: int, shape, size, inputs: int, rounds: int, calls: int) -> dict:
    torch.set_num_threads(threads)
    xs = [torch.randn(shape) for _ in range(inputs)]
    kwargs = {"size": size, "mode": "nearest"}

    def f(x, kwargs):
        return F.interpolate(x, **kwargs)

    torch._dynamo.reset()
    columns = {name: _compiled(f, name, patches, xs[0], kwargs) for name, patches in VARIANTS.items()}
    for name, compiled in columns.items():
        assert torch.equal(compiled(xs[0], kwargs), f(xs[0], kwargs)), name
    columns["eager"] = f
    best = {}
    for _ in range(rounds):
        for name, fn in columns.items():
            start = time.perf_counter()
            for i in range(calls):
                fn(xs[i % inputs], kwargs)
            us = (time.perf_counter() - start) / calls * 1e6
            best[name] = round(min(best.get(name, us), us), 1)
    return {"threads": threads, "shape": list(shape), "size": list(size), "inputs": inputs, "us": best}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.probes.cpu_threads_probe")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--inputs", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args(argv)
    # The variants differ while decomposing and generating code: no cached graph across them.
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        return cpu_rows("cpu_threads_probe", args.out_dir, args.threads, ROWS,
                        lambda n, shape, size: measure(n, shape, size, args.inputs, args.rounds, args.calls))


if __name__ == "__main__":
    raise SystemExit(main())
