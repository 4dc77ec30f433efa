"""How much of a compiled training step is host time (docs/findings.md, finding 8).

Usage (CUDA): ``python -m perf.probes.host_cost_probe OUT_DIR [--stock]``

For fwd+bwd rows whose GPU kernels are shorter than the step, with ``dynamic=True``: each row's
compiled step, the same graph at a tiny shape of the same layout (kernels of a few us, so its step
is host time only), the empty compiled step (``x * 2`` on 8 elements) and eager's step, timed in
interleaved rounds (``do_bench`` medians); the CUDA kernels per step (profiler); and the Python
function calls per step (``cProfile``, a count that does not depend on the host's load).
``--stock`` runs without the package (never imported in that process). Prints, and writes to
``OUT_DIR/host_cost-<pr|stock>.txt``.
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
from pathlib import Path

ROUNDS = 8
COUNTED_STEPS = 50

# name: (input shape, output size, its tiny twin, channels_last, mode, literal size)
ROWS = {
    "nearest-exact (1,3,2345,2456)->(1234,1345) f32 CL, literal":
        ((1, 3, 2345, 2456), (1234, 1345), ((1, 3, 23, 24), (12, 13)), True, "nearest-exact", True),
    "nearest (1,3,2345,2456)->(1234,1345) f32 CL, symbolic":
        ((1, 3, 2345, 2456), (1234, 1345), ((1, 3, 23, 24), (12, 13)), True, "nearest", False),
    "nearest-exact (4,3,1234,1345)->(2345,2456) f32, literal":
        ((4, 3, 1234, 1345), (2345, 2456), ((4, 3, 12, 13), (23, 24)), False, "nearest-exact", True),
}


def _steps(shape, osize, channels_last, mode, literal):
    """The compiled and the eager step of one row."""
    import torch
    import torch.nn.functional as F

    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(shape, device="cuda").contiguous(memory_format=memory_format).requires_grad_(True)
    g = torch.randn((*shape[:2], *osize), device="cuda").contiguous(memory_format=memory_format)
    if literal:
        def forward(x):
            return F.interpolate(x, size=osize, mode=mode)
        compiled = torch.compile(forward, dynamic=True)
        return (lambda: torch.autograd.grad(compiled(x), x, g)), (lambda: torch.autograd.grad(forward(x), x, g))
    kwargs = {"size": osize, "mode": mode}

    def forward(x, kwargs):
        return F.interpolate(x, **kwargs)
    compiled = torch.compile(forward, dynamic=True)
    return (lambda: torch.autograd.grad(compiled(x, kwargs), x, g)), (lambda: torch.autograd.grad(forward(x, kwargs), x, g))


def _empty_step():
    import torch

    x = torch.randn(8, device="cuda", requires_grad=True)
    g = torch.randn(8, device="cuda")
    compiled = torch.compile(lambda x: x * 2, dynamic=True)
    return lambda: torch.autograd.grad(compiled(x), x, g)


def _kernels(step) -> tuple[float, float]:
    """CUDA kernels per step and their time per step (us)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(kernels) / 20, sum(e.device_time for e in kernels) / 20


def _python_calls(step) -> float:
    import torch

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(COUNTED_STEPS):
        step()
    torch.cuda.synchronize()
    profiler.disable()
    return pstats.Stats(profiler).total_calls / COUNTED_STEPS


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_dir, stock = Path(argv[0]), "--stock" in argv
    if not stock:
        import decomps  # noqa: F401  (installs)
    import torch
    from triton.testing import do_bench

    columns = {"empty compiled step": _empty_step()}
    for name, (shape, osize, (tiny_shape, tiny_osize), channels_last, mode, literal) in ROWS.items():
        columns[name], columns[f"{name}, eager"] = _steps(shape, osize, channels_last, mode, literal)
        columns[f"{name}, tiny"] = _steps(tiny_shape, tiny_osize, channels_last, mode, literal)[0]
    for step in columns.values():
        for _ in range(5):
            step()
    torch.cuda.synchronize()
    times = {name: [] for name in columns}
    for _ in range(ROUNDS):
        for name, step in columns.items():
            times[name].append(do_bench(step, warmup=25, rep=100, return_mode="median") * 1000)
    lines = [f"{'PR' if not stock else 'stock'}, dynamic=True, {ROUNDS} interleaved rounds of do_bench "
             "medians (us): best / median round; CUDA kernels per step (us); Python calls per step",
             "| step | best | median | kernels | kernel us | Python calls |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, step in columns.items():
        count, kernel_us = _kernels(step)
        lines.append(f"| {name} | {min(times[name]):.1f} | {statistics.median(times[name]):.1f} | "
                     f"{count:.0f} | {kernel_us:.1f} | {_python_calls(step):.0f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"host_cost-{'stock' if stock else 'pr'}.txt").write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
