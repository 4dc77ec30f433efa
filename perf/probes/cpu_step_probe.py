"""A CPU training step split into its compiled graphs and the rest (docs/findings.md, finding 3,
"the compiled step's own cost").

Usage: ``python -m perf.probes.cpu_step_probe OUT_DIR [--threads 1 2] [--rounds R] [--steps S]
[--rows 1200x1300 300x400]``

For each row (``ROWS``: (1,3,1200,1300)->(200,300), the default, and (1,3,300,400)->(600,700);
f32, contiguous, nearest, ``size`` through a kwargs dict as the harness passes it, ``dynamic=True``)
and thread count, interleaved rounds of ``S`` steps per column, us per step:

* ``compiled step``: ``torch.autograd.grad`` of the compiled call, as the harness times it, with
  the time spent inside its forward and backward graphs (``CompiledFxGraph`` calls) and the rest
  (Dynamo, AOTAutograd's wrappers, the autograd engine, freeing the gradient);
* ``graphs called directly``: the same two compiled graphs called one after the other with the
  arguments the step passed them, outside autograd;
* ``eager step``;
* ``tiny twin``: the compiled and the eager step at a shape whose kernels take a few us, that
  is the host cost of each kind of step.

For the compiled and the eager step it also reports the minor page faults per step (memory the
allocator gave back to the system and touches again) and how many addresses the gradient took.
The compiled gradient is checked against eager's (within the harness's tolerance: an upsample's
backward sums its windows in another order). Writes ``OUT_DIR/cpu_step_probe.json`` and
prints one line per row.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F

import decomps  # noqa: F401  (installs)
from perf.bench import GRAD_TOLERANCE
from perf.probes import compiled_graphs, cpu_rows, minor_faults

ROWS = {"1200x1300": ((1, 3, 1200, 1300), (200, 300)), "300x400": ((1, 3, 300, 400), (600, 700))}
TINY = ((1, 3, 12, 13), (2, 3))


def _interp(x, kwargs):
    return F.interpolate(x, **kwargs)


def _step(fn, x, g, kwargs):
    return lambda: torch.autograd.grad(fn(x, kwargs), x, g)


def _inputs(shape, size):
    x = torch.randn(shape, requires_grad=True)
    return x, torch.randn(*shape[:2], *size), {"size": size, "mode": "nearest"}


def measure(threads: int, shape, size, rounds: int, steps: int) -> dict:
    from torch._inductor.output_code import CompiledFxGraph

    torch.set_num_threads(threads)
    torch._dynamo.reset()
    compiled = torch.compile(_interp, dynamic=True)
    x, g, kwargs = _inputs(shape, size)
    step = _step(compiled, x, g, kwargs)
    for _ in range(3):
        (grad,) = step()
    rtol, atol = GRAD_TOLERANCE["float32"]
    torch.testing.assert_close(grad, torch.autograd.grad(_interp(x, kwargs), x, g)[0], rtol=rtol, atol=atol)
    (forward, forward_args), (backward, backward_args) = compiled_graphs(step)

    def graphs_directly():
        out = forward(list(forward_args))
        return out, backward(list(backward_args))

    tiny_x, tiny_g, tiny_kwargs = _inputs(*TINY)
    columns = {
        "compiled step": step,
        "graphs called directly": graphs_directly,
        "eager step": _step(_interp, x, g, kwargs),
        "tiny twin, compiled step": _step(compiled, tiny_x, tiny_g, tiny_kwargs),
        "tiny twin, eager step": _step(_interp, tiny_x, tiny_g, tiny_kwargs),
    }
    for fn in columns.values():
        fn()
    times = {name: [] for name in columns}
    inside = {"forward": 0.0, "backward": 0.0}
    split = {"forward graph": [], "backward graph": [], "rest": []}
    faults = {"compiled step": 0, "eager step": 0}
    addresses = {"compiled step": set(), "eager step": set()}
    stock = CompiledFxGraph.__call__

    def timed(self, inputs):
        start = time.perf_counter()
        out = stock(self, inputs)
        inside["backward" if self is backward else "forward"] += time.perf_counter() - start
        return out

    for _ in range(rounds):
        for name, fn in columns.items():
            graphs_timed = name == "compiled step"
            inside.update(forward=0.0, backward=0.0)
            before = minor_faults()
            with mock.patch.object(CompiledFxGraph, "__call__", timed) if graphs_timed else contextlib.nullcontext():
                start = time.perf_counter()
                for _ in range(steps):
                    out = fn()
                    if name in addresses:
                        addresses[name].add(out[0].data_ptr())
                    del out
                times[name].append((time.perf_counter() - start) / steps * 1e6)
            if name in faults:
                faults[name] += minor_faults() - before
            if graphs_timed:
                parts = [inside["forward"] / steps * 1e6, inside["backward"] / steps * 1e6]
                for key, us in zip(split, [*parts, times[name][-1] - sum(parts)]):
                    split[key].append(us)
    return {
        "threads": threads,
        "shape": list(shape),
        "size": list(size),
        "us": {name: {"best": round(min(t), 1), "median": round(statistics.median(t), 1)} for name, t in times.items()},
        "compiled step, median": {part: round(statistics.median(us), 1) for part, us in split.items()},
        "minor faults per step": {name: round(n / (rounds * steps), 1) for name, n in faults.items()},
        "gradient addresses": {name: len(a) for name, a in addresses.items()},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.probes.cpu_step_probe")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rows", nargs="+", choices=tuple(ROWS), default=["1200x1300"],
                        help="inputs (ROWS): (1,3,1200,1300)->(200,300), (1,3,300,400)->(600,700)")
    args = parser.parse_args(argv)
    return cpu_rows("cpu_step_probe", args.out_dir, args.threads, [ROWS[name] for name in args.rows],
                    lambda n, shape, size: measure(n, shape, size, args.rounds, args.steps))


if __name__ == "__main__":
    raise SystemExit(main())
