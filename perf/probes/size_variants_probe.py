"""What per-size variants of the package's dynamic kernels (``lowerings.size_variants``) do to
the rows that docs/findings.md, finding 1, leaves behind their static kernels.

Usage (CUDA only): ``python -m perf.probes.size_variants_probe OUT_DIR [--rows REGEX]``

Per row, ``torch.compile`` six ways: ``dynamic`` (``dynamic=True``, variants off: what a size
past a kernel's ``MAX_VARIANTS`` runs), ``symbolic choice`` (``dynamic=True``, variants on, the
formulations chosen as for sizes unknown at launch: ``kernel_choice.sizes_at_launch`` off),
``variants`` (``dynamic=True``, as installed), ``static`` (``dynamic=False``), and under
``mode="reduce-overhead"`` with ``dynamic=True`` ``cuda graphs, no variants`` (no variants, the
formulations chosen for sizes unknown at launch) and ``cuda graphs`` (as installed; each call
after ``torch.compiler.cudagraph_mark_step_begin``). Per way,
after three warm-up calls: the forward's and the training step's GPU kernels per call
(profiler, us), the forward call and the step timed back to back (``torch.utils.benchmark``,
median, us), the number of variants compiled and how many of them launch their flat form
(``lowerings.flat_sources``). Every result is checked against eager
(forward ``torch.equal``, gradients against float64 eager within the dtype's tolerance).
Writes ``OUT_DIR/size_variants_probe.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import re
from unittest import mock

import torch

from perf.probes import fpn_merge_row, interp_row, kernel_time, probe_main


def _unet_skip(memory_format):
    import torch.nn.functional as F

    x = torch.randn(8, 256, 128, 128, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=memory_format)
    skip = torch.randn(8, 256, 256, 256, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=memory_format)
    return (x, skip), lambda x, s: torch.cat([s, F.interpolate(x, scale_factor=2, mode="nearest")], 1)


CL, CONTIGUOUS = torch.channels_last, torch.contiguous_format
UP = ((4, 3, 1234, 1345), (2345, 2456))
DOWN = ((4, 3, 2345, 2456), (1234, 1345))
ROWS = {
    "(8,64,200,200) x1.5 f16": lambda: interp_row((8, 64, 200, 200), torch.float16, CONTIGUOUS, scale_factor=1.5),
    "(8,64,200,200) x1.5 f16 channels_last": lambda: interp_row((8, 64, 200, 200), torch.float16, CL, scale_factor=1.5),
    "(4,3,1234,1345)->(2345,2456) bf16": lambda: interp_row(UP[0], torch.bfloat16, CONTIGUOUS, size=UP[1]),
    "(4,3,1234,1345)->(2345,2456) bf16 channels_last": lambda: interp_row(UP[0], torch.bfloat16, CL, size=UP[1]),
    "(4,3,1234,1345)->(2345,2456) f32": lambda: interp_row(UP[0], torch.float32, CONTIGUOUS, size=UP[1]),
    "(4,3,2345,2456)->(1234,1345) f32": lambda: interp_row(DOWN[0], torch.float32, CONTIGUOUS, size=DOWN[1]),
    "(4,3,2345,2456)->(1234,1345) f32 channels_last": lambda: interp_row(DOWN[0], torch.float32, CL, size=DOWN[1]),
    "(2,32,64,64,64) x1.5 bf16": lambda: interp_row((2, 32, 64, 64, 64), torch.bfloat16, CONTIGUOUS, scale_factor=1.5),
    "(8,256,128,128) x2 bf16": lambda: interp_row((8, 256, 128, 128), torch.bfloat16, CONTIGUOUS, scale_factor=2.0),
    "(8,256,128,128) x2 bf16 channels_last": lambda: interp_row((8, 256, 128, 128), torch.bfloat16, CL, scale_factor=2.0),
    "FPN merge bf16": lambda: fpn_merge_row(torch.bfloat16, CONTIGUOUS),
    "UNet skip cat bf16": lambda: _unet_skip(CONTIGUOUS),
}
WAYS = ("dynamic", "symbolic choice", "variants", "static", "cuda graphs, no variants", "cuda graphs")
TOLERANCE = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 4e-2}


def _way(name):
    from decomps import kernel_choice
    from lowerings import size_variants

    if name == "dynamic":
        return mock.patch.object(size_variants, "MAX_VARIANTS", 0)
    if name == "symbolic choice":
        return mock.patch.object(kernel_choice, "sizes_at_launch", lambda *args: False)
    if name == "cuda graphs, no variants":
        stack = contextlib.ExitStack()
        stack.enter_context(mock.patch.object(size_variants, "MAX_VARIANTS", 0))
        stack.enter_context(mock.patch.object(size_variants, "compiling_variants", lambda: False))
        return stack
    return contextlib.nullcontext()


def _compiled(f, way):
    """``f`` compiled the ``way`` way; a call under CUDA graphs begins a step (its outputs are
    the graph's, overwritten by the next replay)."""
    if not way.startswith("cuda graphs"):
        return torch.compile(f, dynamic=way != "static")
    compiled = torch.compile(f, dynamic=True, mode="reduce-overhead")

    def call(*args):
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args)

    return call


def _call_time(fn) -> float:
    from torch.utils.benchmark import Timer

    return Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.3).median * 1e6


def probe_row(make) -> dict:
    from lowerings import size_variants

    args, f = make()
    expected = f(*args)
    leaves = [a.detach().requires_grad_() for a in args]
    g = torch.randn_like(expected)
    doubles = [a.detach().double().requires_grad_() for a in args]
    reference = torch.autograd.grad(f(*doubles), doubles, g.double())
    row = {"eager forward": kernel_time(lambda: f(*args)),
           "eager step": kernel_time(lambda: torch.autograd.grad(f(*leaves), leaves, g))}
    compiles, flats = [], []
    stock_compile, stock_faster = size_variants.compile_variant, size_variants._faster

    def counted(tuner, values, *configs):
        compiles.append(values)
        return stock_compile(tuner, values, *configs)

    def faster(launches, args, stream):
        chosen = stock_faster(launches, args, stream)
        flats.append(chosen is not launches[0])
        return chosen

    for way in WAYS:
        torch._dynamo.reset()
        compiles.clear()
        flats.clear()
        with _way(way), mock.patch.object(size_variants, "compile_variant", counted), \
                mock.patch.object(size_variants, "_faster", faster):
            compiled = _compiled(f, way)
            forward = lambda: compiled(*args)  # noqa: E731
            step = lambda: torch.autograd.grad(compiled(*leaves), leaves, g)  # noqa: E731
            for _ in range(3):
                out = forward().clone()
                grads = [grad.clone() for grad in step()]
            assert torch.equal(out, expected) and out.stride() == expected.stride(), way
            tol = TOLERANCE[expected.dtype]
            for grad, ref in zip(grads, reference):
                torch.testing.assert_close(grad.double(), ref, rtol=tol, atol=tol)
            row[f"{way} forward"] = kernel_time(forward, calls=30)
            row[f"{way} step"] = kernel_time(step, calls=30)
            row[f"{way} forward call"] = _call_time(forward)
            row[f"{way} step call"] = _call_time(step)
            row[f"{way} variants"] = len(compiles)
            row[f"{way} flat variants"] = sum(flats)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--rows", default=".")
    known, rest = parser.parse_known_args(argv)

    def rows():
        for name, make in ROWS.items():
            if re.search(known.rows, name):
                yield name, {"row": name, **probe_row(make)}

    return probe_main("size_variants_probe", rows, rest)


if __name__ == "__main__":
    raise SystemExit(main())
