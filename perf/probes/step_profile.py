"""Where one compiled training step spends its GPU time, per kernel (docs/findings.md, finding 5).

Usage (CUDA only): ``python -m perf.probes.step_profile OUT_DIR CASE [--stock] [--dynamic] [--exact]``

CASE is ``x1.5`` or ``x1.5-cl`` (forward + ``torch.autograd.grad`` of a 1.5x upsample of
(8, 64, 200, 200) float16, contiguous or channels-last), ``fpn-neck`` (the harness's FPN neck
train step, bfloat16, nearest), or one of the harness's static fused training steps and its empty
step, built and compiled as the harness builds and compiles them: ``fpn-merge``, ``fpn-merge-cl``,
``unet-skip``, ``unet-skip-cl`` (bfloat16, (8, 256, 128, 128) x2) and ``empty`` (``x * 2`` on 8
elements). Nearest, nearest-exact with ``--exact`` (not for ``fpn-neck``). ``--stock`` runs
without the package (never imported in that process). Prints, and writes to
``OUT_DIR/step_profile-<case>-<mode>-<pr|stock>-<static|dynamic>.txt``, the ``do_bench`` time of
the whole step, the host's time per step (steps launched without waiting for the GPU, the lowest
and the median of rounds), steps back to back, and ``torch.profiler``'s CUDA time per kernel over
20 steps: where the host's time per step exceeds the kernels', the step is host time (autograd,
launches).
"""

from __future__ import annotations

import sys
from pathlib import Path

STEPS = 20
HOST_ROUNDS, HOST_STEPS = 7, 50


def _x15_step(channels_last: bool, mode: str):
    import torch
    import torch.nn.functional as F

    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(8, 64, 200, 200, device="cuda", dtype=torch.float16)
    x = x.contiguous(memory_format=memory_format).requires_grad_(True)
    grad_output = torch.randn(8, 64, 300, 300, device="cuda", dtype=torch.float16)
    grad_output = grad_output.contiguous(memory_format=memory_format)

    def step(x):
        return torch.autograd.grad(F.interpolate(x, scale_factor=1.5, mode=mode), x, grad_output)[0]

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


def _harness_case(kind: str, channels_last: bool, mode: str = "nearest"):
    """The harness's fused fwd+bwd row of ``kind`` (``fpn_merge`` or ``unet_skip``), bfloat16."""
    from perf.cases import make_cases

    layout = "channels_last" if channels_last else "contiguous_format"
    (case,) = [c for c in make_cases("cuda", modes=(mode,), backward=True)
               if c.kind == kind and c.backward and c.memory_format == layout]
    return case


def _harness_step(kind: str, channels_last: bool, dynamic: bool, mode: str):
    """A fused row's training step (``_harness_case``) or, for ``empty``, the harness's empty one,
    built (``perf.bench``) and compiled as the harness builds and compiles them."""
    import torch

    from perf import bench

    if kind == "empty":
        work = bench.empty_step_workload("cuda")
    else:
        work = bench.build_workload(_harness_case(kind, channels_last, mode))
    return work.runner(torch.compile(work.forward, dynamic=dynamic)), work.args


def _host_per_step(step, args) -> tuple[float, float, float]:
    """us per step: the host's (steps launched without waiting; lowest and median round) and
    back to back (the same steps up to the GPU's end; lowest round)."""
    import statistics
    import time

    import torch

    host, back_to_back = [], []
    for _ in range(HOST_ROUNDS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(HOST_STEPS):
            step(*args)
        launched = time.perf_counter()
        torch.cuda.synchronize()
        host.append((launched - start) / HOST_STEPS * 1e6)
        back_to_back.append((time.perf_counter() - start) / HOST_STEPS * 1e6)
    return min(host), statistics.median(host), min(back_to_back)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_dir, case = Path(argv[0]), argv[1]
    stock, dynamic = "--stock" in argv, "--dynamic" in argv
    mode = "nearest-exact" if "--exact" in argv else "nearest"
    if mode != "nearest" and case == "fpn-neck":
        raise SystemExit("fpn-neck: nearest only")
    if not stock:
        import decomps  # noqa: F401  (installs)
    import torch
    from torch.profiler import ProfilerActivity, profile
    from triton.testing import do_bench

    harness_steps = {
        "fpn-merge": ("fpn_merge", False), "fpn-merge-cl": ("fpn_merge", True),
        "unet-skip": ("unet_skip", False), "unet-skip-cl": ("unet_skip", True), "empty": ("empty", False),
    }
    if case in harness_steps:
        compiled, args = _harness_step(*harness_steps[case], dynamic, mode)
    else:
        step, args = {"x1.5": lambda: _x15_step(False, mode), "x1.5-cl": lambda: _x15_step(True, mode),
                      "fpn-neck": _neck_step}[case]()
        compiled = torch.compile(step, dynamic=dynamic)
    for _ in range(5):
        compiled(*args)
    step_us = do_bench(lambda: compiled(*args), warmup=50, rep=300) * 1000
    host_low, host_median, back_to_back = _host_per_step(compiled, args)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            compiled(*args)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=80)
    kernels = sum(e.device_time for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) / STEPS
    report = f"{case} {mode} {'stock' if stock else 'PR'} dynamic={dynamic}: step {step_us:.1f} us " \
             f"(do_bench); host per step {host_low:.1f} us (median of rounds {host_median:.1f}), " \
             f"back to back {back_to_back:.1f}; CUDA kernels per step {kernels:.1f} us; " \
             f"CUDA time per kernel over {STEPS} steps:\n{table}\n"
    print(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"step_profile-{case}-{mode}-{'stock' if stock else 'pr'}-{'dynamic' if dynamic else 'static'}.txt"
    (out_dir / name).write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
