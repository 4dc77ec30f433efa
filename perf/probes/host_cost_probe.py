"""How much of a compiled training step is host time (docs/findings.md, finding 8).

Usage (CUDA): ``python -m perf.probes.host_cost_probe OUT_DIR [--stock] [--rows downsamples|neck|behind|batch4|fused] [--rounds N]``

For fwd+bwd rows whose GPU kernels are shorter than the step, with ``dynamic=True``: each row's
compiled step, the same graph at a tiny shape of the same layout (kernels of a few us, so its step
is host time only), the empty compiled step (``x * 2`` on 8 elements) and eager's step, timed in
interleaved rounds (``do_bench`` medians, steps launched back to back as the harness times them,
and the host time of a step alone, each issued to an idle GPU, whose rounds show how far the host's
speed moves); the CUDA kernels per step (profiler); and the Python
function calls per step (``cProfile``, a count that does not depend on the host's load).
``--stock`` runs without the package (never imported in that process). ``--rows downsamples``
times the batch-4 (4,3,2345,2456)->(1234,1345) training steps instead (the plain-store backward,
docs/findings.md, finding 2), without tiny twins; ``--rows neck`` the harness's FPN neck bf16
training step (``perf.bench.FPNNeck``, its CUDA levels) with ``dynamic=True`` and ``False``, the
same at tiny levels (its step is host time), the dynamic one under ``mode="reduce-overhead"``, the
neck without its top-down path (``perf.bench.LateralOnlyNeck``: every convolution, no upsampling,
no add; its compiled step bounds from below the step of any formulation of the upsampling), and
for the two full-size compiled steps the functions with the most host time (``cProfile``, own
time) and the CUDA runtime calls that wait, copy or allocate. ``--rows behind``: the training
steps whose eager step is within about 100 us over the empty compiled step, each with its
kernels by name and its host profile; ``--rows batch4`` the same for three batch-4 contiguous
nearest-exact steps, with tiny twins; ``--rows fused`` the harness's fused training steps (FPN
merge and UNet skip cat, bf16 nearest, both layouts) with ``dynamic=True`` and ``False``, each
with its tiny twin and its fused floor (``perf.cases.min_bytes`` over the copy bandwidth measured
in the same process), the empty step in both shape modes, and for each full-size step the CUDA
runtime calls that wait, copy or allocate. Prints, and writes to
``OUT_DIR/host_cost[-ROWS]-<pr|stock>.txt``.
"""

from __future__ import annotations

import statistics
import sys
from itertools import product
from pathlib import Path

ROUNDS = 8
BACK_TO_BACK_STEPS = 50
IDLE_STEPS = 20  # steps per round timed alone, each after a synchronize
COUNTED_STEPS = 50

# name: (input shape, output size, its tiny twin or None, dtype, channels_last, mode, literal size)
ROWS = {
    "nearest-exact (1,3,2345,2456)->(1234,1345) f32 CL, literal":
        ((1, 3, 2345, 2456), (1234, 1345), ((1, 3, 23, 24), (12, 13)), "float32", True, "nearest-exact", True),
    "nearest (1,3,2345,2456)->(1234,1345) f32 CL, symbolic":
        ((1, 3, 2345, 2456), (1234, 1345), ((1, 3, 23, 24), (12, 13)), "float32", True, "nearest", False),
    "nearest-exact (4,3,1234,1345)->(2345,2456) f32, literal":
        ((4, 3, 1234, 1345), (2345, 2456), ((4, 3, 12, 13), (23, 24)), "float32", False, "nearest-exact", True),
}
_DOWN = ((4, 3, 2345, 2456), (1234, 1345), None)
# Eager's step within about 100 us over the empty compiled step (docs/findings.md, finding 8).
# An output size given as a float is a scale factor.
_UP = ((1, 3, 1234, 1345), (2345, 2456), ((1, 3, 12, 13), (23, 24)), "float32", True, "nearest")
_DOWN_CL = "nearest (1,3,2345,2456)->(1234,1345) f32 CL, symbolic"
BEHIND_ROWS = {
    "nearest (1,3,1234,1345)->(2345,2456) f32 CL, symbolic": (*_UP, False),
    "nearest (1,3,1234,1345)->(2345,2456) f32 CL, literal": (*_UP, True),
    _DOWN_CL: ROWS[_DOWN_CL],
    "nearest x1.5 (8,64,200,200) f16":
        ((8, 64, 200, 200), 1.5, ((8, 64, 8, 8), 1.5), "float16", False, "nearest", False),
}
# The batch-4 contiguous nearest-exact steps behind eager with kernels at half of eager's
# (docs/runs/perf-h200-2026-11-28-in-process-compile.md, section C), with tiny twins.
_DOWN_TWINNED = (*_DOWN[:2], ((4, 3, 23, 24), (12, 13)))
BATCH4_ROWS = {
    "nearest-exact (4,3,1234,1345)->(2345,2456) bf16, symbolic":
        ((4, 3, 1234, 1345), (2345, 2456), ((4, 3, 12, 13), (23, 24)), "bfloat16", False, "nearest-exact", False),
    "nearest-exact (4,3,2345,2456)->(1234,1345) f16, symbolic": (*_DOWN_TWINNED, "float16", False, "nearest-exact", False),
    "nearest-exact (4,3,2345,2456)->(1234,1345) f32, literal": (*_DOWN_TWINNED, "float32", False, "nearest-exact", True),
}
DOWNSAMPLE_ROWS = {
    "nearest bf16 CL, literal": (*_DOWN, "bfloat16", True, "nearest", True),
    "nearest bf16 CL, symbolic": (*_DOWN, "bfloat16", True, "nearest", False),
    "nearest-exact f16, literal": (*_DOWN, "float16", False, "nearest-exact", True),
    "nearest f32, literal": (*_DOWN, "float32", False, "nearest", True),
    "nearest-exact f32 CL, literal": (*_DOWN, "float32", True, "nearest-exact", True),
}


def _steps(shape, osize, dtype, channels_last, mode, literal):
    """The compiled and the eager step of one row."""
    import torch
    import torch.nn.functional as F

    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    dtype = getattr(torch, dtype)
    x = torch.randn(shape, device="cuda", dtype=dtype).contiguous(memory_format=memory_format).requires_grad_(True)
    spatial = osize if not isinstance(osize, float) else tuple(int(s * osize) for s in shape[2:])
    g = torch.randn((*shape[:2], *spatial), device="cuda", dtype=dtype).contiguous(memory_format=memory_format)
    if literal:
        def forward(x):
            return F.interpolate(x, size=osize, mode=mode)
        compiled = torch.compile(forward, dynamic=True)
        return (lambda: torch.autograd.grad(compiled(x), x, g)), (lambda: torch.autograd.grad(forward(x), x, g))
    kwargs = {"scale_factor": osize, "mode": mode} if isinstance(osize, float) else {"size": osize, "mode": mode}

    def forward(x, kwargs):
        return F.interpolate(x, **kwargs)
    compiled = torch.compile(forward, dynamic=True)
    return (lambda: torch.autograd.grad(compiled(x, kwargs), x, g)), (lambda: torch.autograd.grad(forward(x, kwargs), x, g))


NECK_LEVELS = ((8, 64, 200, 200), (8, 128, 100, 100), (8, 256, 50, 50), (8, 512, 25, 25))
# the same graph with kernels of a few us: its step is host time only
TINY_NECK_LEVELS = ((8, 64, 16, 16), (8, 128, 8, 8), (8, 256, 4, 4), (8, 512, 2, 2))


def _neck_steps(dynamic: bool, levels=NECK_LEVELS, mode: str | None = None, top_down: bool = True):
    """The harness's FPN neck bf16 training step (``perf.bench._neck_workload``): compiled, eager.
    ``top_down=False``: the same step of ``perf.bench.LateralOnlyNeck``."""
    import torch

    from perf.bench import FPNNeck, LateralOnlyNeck
    from perf.cases import NECK_OUT_CHANNELS

    torch.manual_seed(0)
    neck = FPNNeck if top_down else LateralOnlyNeck
    model = neck(tuple(s[1] for s in levels), NECK_OUT_CHANNELS, "nearest").cuda().to(torch.bfloat16)
    features = [torch.randn(s, device="cuda", dtype=torch.bfloat16, requires_grad=True) for s in levels]
    with torch.no_grad():
        grad_outputs = [torch.randn_like(y) for y in model(*features)]
    wrt = (*model.parameters(), *features)
    compiled = torch.compile(model, dynamic=dynamic, mode=mode)
    return (lambda: torch.autograd.grad(compiled(*features), wrt, grad_outputs),
            lambda: torch.autograd.grad(model(*features), wrt, grad_outputs))


# The fused rows' tiny twin: the same batch and channels at 4 x 4 (kernels of a few us).
TINY_FUSED_SPATIAL = (4, 4)


def fused_case(kind: str, memory_format: str, tiny: bool = False):
    """The harness's bf16 nearest fused training-step case of ``kind`` and ``memory_format``
    (``perf.cases``, CUDA), or its tiny twin."""
    from perf.cases import FUSED_TOP_SHAPE, Case, scaled_size

    top = FUSED_TOP_SHAPE["cuda"]
    if tiny:
        top = (*top[:2], *TINY_FUSED_SPATIAL)
    return Case(kind, "cuda", top, "bfloat16", memory_format, "nearest",
                osize=scaled_size(top[2:], 2), scale_factor=2.0, backward=True)


def _fused_steps(case, dynamic: bool):
    """``case``'s training step as the harness builds it (``perf.bench``), compiled with
    ``dynamic``, and eager."""
    import torch

    from perf.bench import build_workload

    work = build_workload(case)
    compiled = work.runner(torch.compile(work.forward, dynamic=dynamic))
    eager = work.runner(work.forward)
    return (lambda: compiled(*work.args)), (lambda: eager(*work.args))


def _fused_columns(columns: dict) -> dict:
    """Adds the fused rows' columns (and the empty step with static shapes); returns each fused
    row's floor in us."""
    import torch

    from perf.bench import empty_step_workload, measure_copy_bandwidth
    from perf.cases import min_bytes

    work = empty_step_workload("cuda")
    static_empty = work.runner(torch.compile(work.forward, dynamic=False))
    columns["empty compiled step, dynamic=False"] = lambda: static_empty(*work.args)
    copy_gbps = measure_copy_bandwidth("cuda", 1, 0.5)
    floors = {}
    for kind, layout, dynamic in product(("fpn_merge", "unet_skip"), ("contiguous_format", "channels_last"),
                                         (True, False)):
        name, case = f"{kind} bf16 {layout}, dynamic={dynamic}", fused_case(kind, layout)
        columns[name], eager = _fused_steps(case, dynamic)
        if dynamic:
            columns[f"{kind} bf16 {layout}, eager"] = eager
        columns[f"{name}, tiny"] = _fused_steps(fused_case(kind, layout, tiny=True), dynamic)[0]
        floors[name] = min_bytes(case) / copy_gbps / 1e3
    return floors


def _runtime_calls(step) -> str:
    """The CUDA runtime calls per step that wait for the GPU, copy or allocate (a step that makes
    one runs at its host time plus its kernels', back to back too)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            step()
        torch.cuda.synchronize()
    runtime = {}
    for event in prof.events():
        if event.name.startswith("cuda") and ("ynchronize" in event.name or "emcpy" in event.name
                                              or "Malloc" in event.name or "Free" in event.name):
            runtime[event.name] = runtime.get(event.name, 0) + 1 / 20
    return ", ".join(f"{name} {count:g}" for name, count in sorted(runtime.items())) or "none"


def _host_profile(step, top: int = 25) -> str:
    """The functions with the most own time over ``COUNTED_STEPS`` steps (``cProfile``), and the
    CUDA runtime calls per step that wait for the GPU, copy or allocate."""
    import io

    from perf.probes import profiled

    text = io.StringIO()
    profiled(step, COUNTED_STEPS, text).sort_stats("tottime").print_stats(top)
    return f"CUDA runtime calls per step that wait, copy or allocate: {_runtime_calls(step)}\n{text.getvalue()}"


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


def _kernel_names(step) -> str:
    """Each CUDA kernel of a step: its name and time (us)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return "\n".join(f"- {e.name[:100]}: {e.device_time:.1f} us" for e in kernels)


def _python_calls(step) -> float:
    from perf.probes import profiled

    return profiled(step, COUNTED_STEPS).total_calls / COUNTED_STEPS


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_dir, stock = Path(argv[0]), "--stock" in argv
    chosen = argv[argv.index("--rows") + 1] if "--rows" in argv else None
    rows = {"downsamples": DOWNSAMPLE_ROWS, "neck": {}, "behind": BEHIND_ROWS, "batch4": BATCH4_ROWS,
            "fused": {}}.get(chosen, ROWS)
    by_row = chosen in ("behind", "batch4")  # each row's kernels by name and its host profile
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else ROUNDS
    if not stock:
        import decomps  # noqa: F401  (installs)
    import torch
    from triton.testing import do_bench

    from perf.probes import back_to_back_us, idle_host_us

    columns = {"empty compiled step": _empty_step()}
    profiled = ["empty compiled step"] if by_row else []
    for name, (shape, osize, tiny, dtype, channels_last, mode, literal) in rows.items():
        columns[name], columns[f"{name}, eager"] = _steps(shape, osize, dtype, channels_last, mode, literal)
        if tiny is not None:
            columns[f"{name}, tiny"] = _steps(*tiny, dtype, channels_last, mode, literal)[0]
        if by_row:
            profiled.append(name)
    if chosen == "neck":
        for dynamic in (True, False):
            name = f"FPN neck bf16, dynamic={dynamic}"
            columns[name], columns[f"{name}, eager"] = _neck_steps(dynamic)
            profiled.append(name)
            columns[f"{name}, tiny"], columns[f"{name}, tiny, eager"] = _neck_steps(dynamic, TINY_NECK_LEVELS)
        columns["FPN neck bf16, dynamic=True, reduce-overhead"] = _neck_steps(True, mode="reduce-overhead")[0]
        name = "FPN neck bf16 without its top-down path, dynamic=True"
        columns[name], columns[f"{name}, eager"] = _neck_steps(True, top_down=False)
    floors = _fused_columns(columns) if chosen == "fused" else {}
    for step in columns.values():
        for _ in range(5):
            step()
    torch.cuda.synchronize()
    times = {name: [] for name in columns}
    back_to_back = {name: [] for name in columns}
    alone = {name: [] for name in columns}
    for _ in range(rounds):
        for name, step in columns.items():
            times[name].append(do_bench(step, warmup=25, rep=100, return_mode="median") * 1000)
            back_to_back[name].append(back_to_back_us(step, BACK_TO_BACK_STEPS))
            alone[name].append(idle_host_us(step, IDLE_STEPS))
    lines = [f"{'PR' if not stock else 'stock'}, dynamic=True, {rounds} interleaved rounds of do_bench "
             "medians (us): best / median round; back to back (us per step): best / median round; "
             "a step alone, host time (median us, each step issued to an idle GPU): best / median / "
             "worst round; CUDA kernels per step (us); Python calls per step",
             "| step | best | median | back to back, best | median | host alone, best | median | worst "
             "| kernels | kernel us | Python calls |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, step in columns.items():
        count, kernel_us = _kernels(step)
        lines.append(f"| {name} | {min(times[name]):.1f} | {statistics.median(times[name]):.1f} | "
                     f"{min(back_to_back[name]):.1f} | {statistics.median(back_to_back[name]):.1f} | "
                     f"{min(alone[name]):.1f} | {statistics.median(alone[name]):.1f} | {max(alone[name]):.1f} | "
                     f"{count:.0f} | {kernel_us:.1f} | {_python_calls(step):.0f} |")
    if floors:
        lines += ["", "Fused floor (us) and the best round's share of it, do_bench / back to back; the CUDA "
                  "runtime calls per step that wait, copy or allocate:", ""]
        lines += [f"- {name}: floor {floor:.1f}, {100 * floor / min(times[name]):.0f}% / "
                  f"{100 * floor / min(back_to_back[name]):.0f}%; {_runtime_calls(columns[name])}"
                  for name, floor in floors.items()]
    report = "\n".join(lines) + "\n"
    for name in profiled:
        if by_row:
            report += f"\n## {name}: kernels\n{_kernel_names(columns[name])}\n"
        report += f"\n## {name}: host\n{_host_profile(columns[name])}"
    print(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = f"-{chosen}" if chosen else ""
    (out_dir / f"host_cost{suffix}-{'stock' if stock else 'pr'}.txt").write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
