"""Where one compiled training step spends its GPU time, per kernel (docs/findings.md, finding 5).

Usage (CUDA only): ``python -m perf.probes.step_profile OUT_DIR CASE [--stock] [--dynamic]``

CASE is ``x1.5`` or ``x1.5-cl`` (forward + ``torch.autograd.grad`` of a 1.5x nearest upsample of
(8, 64, 200, 200) float16, contiguous or channels-last) or ``fpn-neck`` (the harness's FPN neck
train step, bfloat16). ``--stock`` runs without the package (never imported in that process).
Prints, and writes to ``OUT_DIR/step_profile-<case>-<pr|stock>-<static|dynamic>.txt``, the
``do_bench`` time of the whole step and ``torch.profiler``'s CUDA time per kernel over 20 steps:
the gap between the two is host time (autograd, launches).
"""

from __future__ import annotations

import sys
from pathlib import Path

STEPS = 20


def _x15_step(channels_last: bool):
    import torch
    import torch.nn.functional as F

    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(8, 64, 200, 200, device="cuda", dtype=torch.float16)
    x = x.contiguous(memory_format=memory_format).requires_grad_(True)
    grad_output = torch.randn(8, 64, 300, 300, device="cuda", dtype=torch.float16)
    grad_output = grad_output.contiguous(memory_format=memory_format)

    def step(x):
        return torch.autograd.grad(F.interpolate(x, scale_factor=1.5, mode="nearest"), x, grad_output)[0]

    return step, (x,)


def _neck_step():
    import torch

    from perf.bench import FPNNeck
    from perf.cases import NECK_OUT_CHANNELS

    shapes = [(8, 64, 200, 200), (8, 128, 100, 100), (8, 256, 50, 50), (8, 512, 25, 25)]
    model = FPNNeck(tuple(s[1] for s in shapes), NECK_OUT_CHANNELS, "nearest").cuda().to(torch.bfloat16)
    features = [torch.randn(s, device="cuda", dtype=torch.bfloat16, requires_grad=True) for s in shapes]
    with torch.no_grad():
        grad_outputs = [torch.randn_like(y) for y in model(*features)]
    wrt = (*model.parameters(), *features)

    def step(*features):
        return torch.autograd.grad(model(*features), wrt, grad_outputs)

    return step, tuple(features)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_dir, case = Path(argv[0]), argv[1]
    stock, dynamic = "--stock" in argv, "--dynamic" in argv
    if not stock:
        import decomps  # noqa: F401  (installs)
    import torch
    from torch.profiler import ProfilerActivity, profile
    from triton.testing import do_bench

    step, args = {"x1.5": lambda: _x15_step(False), "x1.5-cl": lambda: _x15_step(True),
                  "fpn-neck": _neck_step}[case]()
    compiled = torch.compile(step, dynamic=dynamic)
    for _ in range(5):
        compiled(*args)
    step_us = do_bench(lambda: compiled(*args), warmup=50, rep=300) * 1000
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            compiled(*args)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=80)
    report = f"{case} {'stock' if stock else 'PR'} dynamic={dynamic}: step {step_us:.1f} us " \
             f"(do_bench); CUDA time per kernel over {STEPS} steps:\n{table}\n"
    print(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"step_profile-{case}-{'stock' if stock else 'pr'}-{'dynamic' if dynamic else 'static'}.txt"
    (out_dir / name).write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
