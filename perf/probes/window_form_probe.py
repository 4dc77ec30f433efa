"""A downsample's backward on CUDA: window starts computed in the gather or read from the window
table, per size variant's form (docs/findings.md, finding 2; docs/design.md, "Kernel choice",
``kernel_choice.positions_in_gather``).

Usage (CUDA only): ``python -m perf.probes.window_form_probe OUT_DIR``

For harness training steps (``CASES``, case names of ``perf.cases.make_cases``) whose backward
gathers one-tap windows over two dims, each compiled as the harness compiles it
(``fullgraph=True``) in each of ``FORMS``:

* ``as chosen``: the package as installed (``positions_in_gather`` decides);
* ``starts`` / ``table``: the window starts in the gather over one or two dims, or the table,
  whatever the rule says;
* ``... tiled``: with ``dynamic=True``, each size variant keeps its tiled kernel where it would
  time the flat one against it (``size_variants._faster``).

``dynamic=True`` in each form, ``dynamic=False`` as chosen. Per column: the GPU kernels per step
(profiler, 10 steps after 3) by name (``step_host_probe.kernel_table``; a ``_flat`` name is a size
variant's flat kernel), and each variant choice's two times (us, tiled then flat, as
``size_variants._faster`` took them with ``benchmarker.benchmark_gpu``) with the one it kept. Each step's gradients are checked against
eager's as the harness checks them. Writes ``OUT_DIR/window_form_probe.json`` and each column's
generated modules to ``OUT_DIR/sources/``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from unittest import mock

CASES = [
    f"interp+bwd {mode} (4, 3, 2345, 2456)->(1234, 1345) {dtype} {layout}"
    for mode in ("nearest-exact", "nearest")
    for dtype, layout in (("bfloat16", "contiguous_format"), ("float32", "contiguous_format"),
                          ("bfloat16", "channels_last"))
]
FORMS = ("as chosen", "starts", "table", "starts tiled", "table tiled")
WARMUP = 3


def scope(form: str, picks: list):
    """The patches a column compiles under: ``positions_in_gather`` forced one way or left to its
    rule, and the size variants' choice of form logged into ``picks`` or pinned to the tiled kernel."""
    from decomps import kernel_choice
    from lowerings import size_variants

    stack = contextlib.ExitStack()
    if form.startswith(("starts", "table")):
        # one-tap gathers over up to two dims compute their starts, or none does
        dims = 2 if form.startswith("starts") else 0
        stack.enter_context(mock.patch.object(kernel_choice, "POSITIONS_IN_GATHER_MAX_DIMS", dims))
    chosen = size_variants._faster

    def faster(launches, args, stream):
        if form.endswith("tiled"):
            return launches[0]
        from torch._inductor.runtime.benchmarking import benchmarker

        times = []  # the times the choice itself takes (ms), one per launch
        timed = benchmarker.benchmark_gpu

        def recorded(fn, *rest, **kwargs):
            times.append(timed(fn, *rest, **kwargs))
            return times[-1]

        with mock.patch.object(benchmarker, "benchmark_gpu", recorded):
            kept = chosen(launches, args, stream)
        picks.append({"us": [t * 1e3 for t in times], "kept": launches.index(kept)})
        return kept

    stack.enter_context(mock.patch.object(size_variants, "_faster", faster))
    return stack


def measure(name: str, form: str, dynamic: bool, sources: Path) -> dict:
    import torch
    from torch._inductor.utils import run_and_get_code

    from perf.bench import build_workload, compare_results
    from perf.cases import make_cases
    from perf.probes.step_host_probe import _kernels

    case = {c.name: c for c in make_cases("cuda", backward=True)}[name]
    picks: list = []
    with scope(form, picks):
        torch._dynamo.reset()
        work = build_workload(case)
        step = work.runner(torch.compile(work.forward, fullgraph=True, dynamic=dynamic))
        got, codes = run_and_get_code(step, *work.args)
        mismatch = compare_results(got, work.runner(work.forward)(*work.args), work.check, case.dtype)
        for _ in range(WARMUP):  # the size variants are made and tuned
            step(*work.args)
        count, us, table = _kernels(lambda: step(*work.args), "cuda")
    label = f"{name} dynamic={dynamic} {form}"
    sources.mkdir(parents=True, exist_ok=True)
    stem = "".join(ch if ch.isalnum() else "_" for ch in label)
    (sources / f"{stem}.py").write_text(f"# {label}\n" + "\n\n# ======\n".join(codes))
    return {"case": name, "dynamic": dynamic, "form": form, "mismatch": mismatch, "variant_choices": picks,
            "kernels_per_step": count, "kernel_us": us, "kernels": table}


def rows(out_dir: Path):
    for name in CASES:
        columns = [(form, True) for form in FORMS] + [("as chosen", False)]
        for form, dynamic in columns:
            record = measure(name, form, dynamic, out_dir / "sources")
            if record["mismatch"]:
                raise AssertionError(f"{name} {form} dynamic={dynamic}: {record['mismatch']}")
            yield f"{name} dynamic={dynamic} {form}", record


def main(argv=None) -> int:
    import sys

    from perf.probes import probe_main

    argv = sys.argv[1:] if argv is None else list(argv)
    return probe_main("window_form_probe", lambda: rows(Path(argv[0])), argv)


if __name__ == "__main__":
    raise SystemExit(main())
