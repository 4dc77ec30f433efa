"""The host's part of a compiled training step, the package's against stock's and the empty
step's (docs/findings.md, finding 8, "training steps behind eager").

Usage: ``python -m perf.probes.step_host_probe OUT_DIR [--stock] [--device cuda|cpu] [--rounds R]
[--cases NAME ...] [--mode reduce-overhead]``

For harness training steps (``CASES``, case names of ``perf.cases.make_cases``, ``dynamic=True``),
built as the harness builds them (forward, then ``torch.autograd.grad`` with a fixed grad_output):
eager's step, the compiled step and the empty compiled step (``x * 2`` on 8 elements, the
harness's ``Compiled call overhead`` step; for a forward case the empty call ``x + 1``), in ``R``
interleaved rounds: us per step back to back,
Python function calls per step (``cProfile``, a count that the host's load does not move), and on
CUDA the kernels per step, their time and the heaviest by name (profiler). ``--mode`` compiles both compiled steps in
that ``torch.compile`` mode; the compiled step's record then also names its functions of most own
time per step (``top``) and Inductor's counters that its calls moved (``counters``: CUDA graph
skips and re-recordings show there). One tag per process and no switch of the
install state in it: ``--stock`` runs stock torch, the package never imported (a switch would
reset Dynamo's caches, and each graph would compile again). Each compiled step's gradients are
checked against eager's as the harness checks them. Writes
``OUT_DIR/step_host_probe-<pr|stock>.json`` and prints one line per case.
"""

from __future__ import annotations

import statistics
from functools import partial

from perf.probes import back_to_back_us, profiled, tag_probe_main

# Steps the harness left behind eager on an H200 (eager's step 200-300 us, the package's kernels
# 40-90 us of it).
CASES = [
    "interp+bwd nearest (1, 3, 1234, 1345)->(2345, 2456) float16 channels_last",
    "interp+bwd nearest-exact (1, 3, 1234, 1345)->(2345, 2456) bfloat16 channels_last size:literal",
    "interp+bwd nearest (8, 64, 200, 200)->(300, 300) float16 contiguous_format",
]
STEPS = 100  # per round
TOP = 12  # functions of the compiled step named in its record


def workloads(names, device: str) -> list:
    """``(name, Workload)`` of the harness's cases ``names`` on ``device``'s matrix."""
    from perf.bench import build_workload
    from perf.cases import make_cases

    cases = {case.name: case for case in make_cases(device, backward=True)}
    missing = [name for name in names if name not in cases]
    if missing:
        raise SystemExit(f"step_host_probe: no case {missing} in the {device} matrix")
    return [(name, build_workload(cases[name])) for name in names]


def _kernels(step, device: str) -> tuple[float | None, float | None, list | None]:
    """Kernels per step, their us and the heaviest by name (``kernel_table``), from one profiler
    pass over 10 steps; None off CUDA."""
    if device != "cuda":
        return None, None, None
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
    kernels = [(e.name, e.time_range.elapsed_us()) for e in prof.events() if e.device_type == DeviceType.CUDA]
    return len(kernels) / 10, sum(us for _, us in kernels) / 10, kernel_table(kernels, 10)


def kernel_table(kernels, steps: int) -> list[dict]:
    """The ``TOP`` kernel names of most time in ``kernels`` (``(name, us)`` over ``steps``
    steps), per step: which kernels a step's device time goes to (a replayed CUDA graph's input
    copies, a variant's launch or the dynamic kernel's)."""
    table: dict[str, list] = {}
    for name, us in kernels:
        row = table.setdefault(name, [0, 0.0])
        row[0] += 1
        row[1] += us
    rows = sorted(table.items(), key=lambda item: item[1][1], reverse=True)[:TOP]
    return [{"kernel": name, "calls": count / steps, "us": us / steps} for name, (count, us) in rows]


def _top(stats, calls: int) -> list[dict]:
    """The ``TOP`` functions of most own time in ``stats`` (``pstats.Stats`` of ``calls`` steps),
    per step."""
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:TOP]
    return [{"function": f"{file}:{line}({function})", "calls": count / calls, "own_us": own / calls * 1e6}
            for (file, line, function), (_, count, own, _, _) in rows]


def _inductor_counters() -> dict:
    from torch._dynamo.utils import counters

    return dict(counters["inductor"])


def measure(name: str, work, device: str, rounds: int, steps: int, mode: str | None = None) -> dict:
    import torch

    from perf.bench import call_overhead_workload, compare_results, empty_step_workload

    torch._dynamo.reset()
    # a forward row's empty column is the empty compiled call
    empty = (empty_step_workload if work.wrt else call_overhead_workload)(device)
    options = {"fullgraph": True, "dynamic": True, "mode": mode}  # as the harness compiles
    calls = {  # each column's step, called with its arguments
        "eager": partial(work.runner(work.forward), *work.args),
        "compiled": partial(work.runner(torch.compile(work.forward, **options)), *work.args),
        "empty": partial(empty.runner(torch.compile(empty.forward, **options)), *empty.args),
    }
    dtype = str(work.args[0].dtype).removeprefix("torch.")
    problem = compare_results(calls["compiled"](), calls["eager"](), work.check, dtype)
    assert problem is None, f"{name}: compiled != eager: {problem}"
    for call in calls.values():
        for _ in range(3):
            call()
    warm = _inductor_counters()
    times: dict[str, list[float]] = {column: [] for column in calls}
    for _ in range(rounds):
        for column, call in calls.items():
            times[column].append(back_to_back_us(call, steps, device))
    record = {"case": name, "mode": mode}
    for column, call in calls.items():
        kernels, kernel_us, by_name = _kernels(call, device)
        stats = profiled(call, 20, device=device)
        record[column] = {
            "us": statistics.median(times[column]), "us_min": min(times[column]),
            "python_calls": stats.total_calls / 20,
            "kernels": kernels, "kernel_us": kernel_us, "kernel_table": by_name,
        }
        if column == "compiled" and mode is not None:
            record[column]["top"] = _top(stats, 20)
    timed = _inductor_counters()
    record["counters"] = {key: timed[key] - warm.get(key, 0) for key in timed if timed[key] != warm.get(key, 0)}
    return record


def main(argv=None) -> int:
    def add_arguments(parser):
        parser.add_argument("--rounds", type=int, default=5)
        parser.add_argument("--steps", type=int, default=STEPS)
        parser.add_argument("--cases", nargs="+", default=CASES, help="harness case names (perf.cases)")
        parser.add_argument("--mode", default=None, help='torch.compile mode of the compiled steps, e.g. "reduce-overhead"')

    def records(args):
        for name, work in workloads(args.cases, args.device):
            yield measure(name, work, args.device, args.rounds, args.steps, args.mode)

    return tag_probe_main("step_host_probe", argv, add_arguments, records)


if __name__ == "__main__":
    raise SystemExit(main())
