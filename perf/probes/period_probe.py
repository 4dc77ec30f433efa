"""Slices of each period vs the gather, per device (docs/findings.md, finding 3).

Usage: ``python -m perf.probes.period_probe OUT_DIR [cpu|cuda]`` (default: cuda when available)

Along an innermost dim whose map repeats every ``p`` inputs / ``q`` outputs the package can cut
the input into the ``q`` slices of each period and concatenate them (forward), or sum slices of
each period of the gradient (backward), instead of gathering through an index. It does so from
the rank ``decomps.forward.PERIOD_MIN_RANK`` / ``decomps.backward.PERIOD_MIN_RANK`` give the
device type (forward: CPU, where ``decomps.kernel_choice.period_slices`` agrees; backward: CPU,
CUDA from 2d). This probe times both forms on one device, slices in every rank (and under outer
repeats) or nowhere on it, by setting those tables and that rule for the run:
``torch.compile`` (static and ``dynamic=True``), forward and forward + backward, every result
checked against eager (forward ``torch.equal``, gradients ``allclose``). Writes
``OUT_DIR/period_probe.json`` and prints a table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import decomps  # noqa: F401  (installs)
from decomps import backward, forward, kernel_choice

DEFAULTS = {forward: dict(forward.PERIOD_MIN_RANK), backward: dict(backward.PERIOD_MIN_RANK)}
PERIOD_SLICES = kernel_choice.period_slices
CUDA_CASES = [  # shape, interpolate kwargs, dtype
    ((8, 64, 200, 200), {"scale_factor": 1.5}, torch.float16),
    ((2, 32, 64, 64, 64), {"scale_factor": 1.5}, torch.float32),
    ((4, 3, 300, 400), {"size": (600, 700)}, torch.float32),
    ((16, 64, 16000), {"scale_factor": 1.5}, torch.bfloat16),
]
CPU_CASES = [
    ((1, 3, 300, 400), {"size": (600, 700)}, torch.float32),
    ((1, 64, 50, 50), {"scale_factor": 1.5}, torch.float32),
    ((4, 64, 4000), {"scale_factor": 1.5}, torch.float32),
]


def _timer(fn, device: str) -> float:
    """Median microseconds of ``fn()``."""
    if device == "cuda":
        from triton.testing import do_bench

        return do_bench(fn, warmup=50, rep=300) * 1000
    from torch.utils.benchmark import Timer

    return Timer("fn()", globals={"fn": fn}, num_threads=1).blocked_autorange(min_run_time=1).median * 1e6


def _set_slices(on: bool, device: str) -> None:
    """Slices on ``device`` in every rank and under outer repeats (on), or nowhere on it (off)."""
    for module in (forward, backward):
        module.PERIOD_MIN_RANK = {**DEFAULTS[module], device: 1} if on else {
            t: r for t, r in DEFAULTS[module].items() if t != device}
    kernel_choice.period_slices = (lambda input, patterns: True) if on else PERIOD_SLICES


def run(out_dir: Path, device: str) -> list[dict]:
    # The choice is made while decomposing: a cached graph of the other form must not be reused.
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    rows = []
    cases = CUDA_CASES if device == "cuda" else CPU_CASES
    for shape, kwargs, dtype in cases:
        x = torch.randn(shape, device=device, dtype=dtype)
        x_grad = x.clone().requires_grad_(True)
        y = F.interpolate(x, mode="nearest", **kwargs)
        grad_output = torch.randn_like(y)
        expected_grad = torch.autograd.grad(F.interpolate(x_grad, mode="nearest", **kwargs), x_grad, grad_output)[0]

        def fwd(x):
            return F.interpolate(x, mode="nearest", **kwargs)

        def fwd_bwd(x):
            return torch.autograd.grad(F.interpolate(x, mode="nearest", **kwargs), x, grad_output)[0]

        for dynamic in (False, True):
            for slices in (False, True):
                _set_slices(slices, device)
                row = {"shape": shape, "kwargs": kwargs, "dtype": str(dtype), "dynamic": dynamic,
                       "form": "slices" if slices else "gather"}
                for name, fn, arg, expected in (("fwd", fwd, x, y), ("fwd+bwd", fwd_bwd, x_grad, expected_grad)):
                    torch._dynamo.reset()
                    compiled = torch.compile(fn, dynamic=dynamic)
                    actual = compiled(arg)
                    if name == "fwd":
                        ok = torch.equal(actual, expected)
                    else:
                        ok = torch.allclose(actual.float(), expected.float(), rtol=5e-3, atol=5e-3)
                    row[name] = round(_timer(lambda: compiled(arg), device), 1)
                    row[f"{name} matches eager"] = bool(ok and actual.stride() == expected.stride())
                rows.append(row)
                print(row, flush=True)
    for module, default in DEFAULTS.items():
        module.PERIOD_MIN_RANK = default
    kernel_choice.period_slices = PERIOD_SLICES
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "period_probe.json").write_text(json.dumps(rows, indent=1))
    return rows


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    device = argv[1] if len(argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu")
    rows = run(Path(argv[0]), device)
    return 0 if all(r["fwd matches eager"] and r["fwd+bwd matches eager"] for r in rows) else 3


if __name__ == "__main__":
    raise SystemExit(main())
