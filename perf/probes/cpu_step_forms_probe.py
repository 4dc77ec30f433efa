"""CPU downsampling training steps in every compiled form, in one process, beside eager
(docs/findings.md, finding 3, "the gradient's placement").

Usage: ``python -m perf.probes.cpu_step_forms_probe OUT_DIR [--stock] [--threads 1 2]
[--rows 1200x1300 500x400] [--channels-last] [--rounds R] [--steps S]``

Per row (``ROWS``: (1,3,1200,1300)->(200,300), the default, and (1,3,500,400)->(256,256);
float32, nearest, contiguous or with ``--channels-last`` channels-last, ``size`` through a kwargs
dict as the harness passes it, ``dynamic=True``; ``torch.autograd.grad`` of the call, dropped
before the next step, as the harness does), each column compiled from its own code object,
interleaved rounds of ``S`` steps, us per step and minor page faults per step:

* ``eager``;
* ``package``: the package's compiled step, its gradient stored into each input (the plain
  store) in a block of ``decomps.block_pool``;
* ``package, gradient from the allocator``: the same step with the blocks off
  (``block_pool.MIN_BYTES`` out of reach while it runs): each gradient from glibc's heap;
* ``package, ATen's backward``: the package with the plain store declined
  (``kernel_choice.plain_store``) and ATen's backward forced (``aten_backward``) while it
  compiles, as an extern call, which allocates its gradient itself.

``--stock`` measures stock Inductor instead (``decomps.uninstall()`` first: installing and
uninstalling reset Dynamo, which would recompile the other columns): ``eager`` and ``stock``.
Every column's gradient is checked against eager's (within the harness's tolerance), and the
package's strides against eager's (``eager's strides`` records each column's). Writes
``OUT_DIR/cpu_step_forms_probe[-stock].json`` and prints one line per row and thread count.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F

import decomps
from decomps import block_pool, kernel_choice
from perf.bench import GRAD_TOLERANCE
from perf.probes import cpu_rows, interleaved_rounds

ROWS = {"1200x1300": ((1, 3, 1200, 1300), (200, 300)), "500x400": ((1, 3, 500, 400), (256, 256))}


def _fresh(name: str):
    """``F.interpolate(x, **kwargs)`` as a new code object: each compiled column its own cache."""
    namespace = {"F": F}
    exec(f"def {name}(x, kwargs):\n    return F.interpolate(x, **kwargs)\n", namespace)
    return namespace[name]


def measure(threads: int, shape, size, memory_format, rounds: int, steps: int) -> dict:
    torch.set_num_threads(threads)
    torch._dynamo.reset()
    x = torch.randn(shape).contiguous(memory_format=memory_format).requires_grad_()
    g = torch.randn(*shape[:2], *size).contiguous(memory_format=memory_format)
    kwargs = {"size": size, "mode": "nearest"}

    def step_of(fn):
        return lambda: torch.autograd.grad(fn(x, kwargs), x, g)

    none = contextlib.nullcontext
    columns = {"eager": (step_of(_fresh("eager")), none)}
    tag = "package" if decomps.is_installed() else "stock"
    columns[tag] = (step_of(torch.compile(_fresh(tag), dynamic=True)), none)
    if tag == "package":
        allocator = step_of(torch.compile(_fresh("allocator"), dynamic=True))
        columns["package, gradient from the allocator"] = (
            allocator, lambda: mock.patch.object(block_pool, "MIN_BYTES", math.inf))
        aten = step_of(torch.compile(_fresh("aten"), dynamic=True))
        with mock.patch.object(kernel_choice, "plain_store", lambda *a: False), \
                mock.patch.object(kernel_choice, "aten_backward", lambda *a: True):
            aten()
        columns["package, ATen's backward"] = (aten, none)

    expected = columns["eager"][0]()[0]
    rtol, atol = GRAD_TOLERANCE["float32"]
    eager_strides = {}
    for name, (fn, context) in columns.items():
        with context():
            for _ in range(2):
                fn()  # dropped before the next call, as in the timed rounds
            (grad,) = fn()
        torch.testing.assert_close(grad, expected, rtol=rtol, atol=atol)
        eager_strides[name] = grad.stride() == expected.stride()
    del grad, expected
    # the package's gradients have eager's strides; stock's channels-last ones need not
    assert all(same for name, same in eager_strides.items() if name != "stock"), eager_strides
    return {
        "tag": tag,
        "threads": threads,
        "shape": list(shape),
        "size": list(size),
        "memory_format": str(memory_format).removeprefix("torch."),
        **interleaved_rounds({name: fn for name, (fn, _) in columns.items()}, rounds, steps,
                             {name: context for name, (_, context) in columns.items()}),
        "eager's strides": eager_strides,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.probes.cpu_step_forms_probe")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--stock", action="store_true", help="stock Inductor: uninstall the package first")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rows", nargs="+", choices=tuple(ROWS), default=["1200x1300"])
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    name = "cpu_step_forms_probe" + ("-stock" if args.stock else "")
    if args.stock:
        decomps.uninstall()
    try:
        return cpu_rows(name, args.out_dir, args.threads, [ROWS[r] for r in args.rows],
                        lambda n, shape, size: measure(n, shape, size, memory_format, args.rounds, args.steps))
    finally:
        if args.stock:
            decomps.install()


if __name__ == "__main__":
    raise SystemExit(main())
