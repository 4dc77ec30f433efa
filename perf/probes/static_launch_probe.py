"""The launcher of the package's Triton repeat kernels: Triton's own, or Inductor's static CUDA
launcher, as ``lowerings.static_launch`` gives them (docs/findings.md, finding 8).

Usage (CUDA only): ``python -m perf.probes.static_launch_probe OUT_DIR [--rounds N]``

Per row (the harness's integer-repeat rows, forward and training step, ``dynamic`` False and
True), in one process, compiled with the package: its kernels on Triton's launcher
(``static_launch.is_package_kernel`` patched to decline them) and on the static launcher (as
installed), each column's results checked against the other's (``torch.equal``). Timed in
interleaved rounds: back to back (``BACK_TO_BACK`` calls launched, then one synchronize: the
harness's view, host-bound where the host is slower than the kernels), ``do_bench`` medians (one
call's latency), the GPU kernels per call (profiler), Python calls per call and the functions
with the most own time (``cProfile``). Writes ``OUT_DIR/static_launch_probe.json`` and each
column's generated modules to ``OUT_DIR/sources/``.
"""

from __future__ import annotations

import itertools
import re
import statistics
from pathlib import Path

ROUNDS = 6
BACK_TO_BACK = 200
# (label, input shape, dtype name); each upsampled x2
ROWS = [
    ("x2 (16,64,16000) f32", (16, 64, 16000), "float32"),
    ("x2 (16,64,16000) bf16", (16, 64, 16000), "bfloat16"),
    ("x2 (8,256,128,128) bf16", (8, 256, 128, 128), "bfloat16"),
]


_copies = itertools.count()


def _fresh(fn):
    """``fn`` with a code object of its own, so that Dynamo compiles it apart from ``fn``."""
    import types

    return types.FunctionType(fn.__code__.replace(co_name=f"{fn.__name__}_{next(_copies)}"), fn.__globals__,
                              None, fn.__defaults__, fn.__closure__)


def _clear_kernel_caches():
    """Inductor's in-memory caches of generated modules and Triton kernels, keyed by source: two
    columns with the same source would share one kernel object and its launcher."""
    from torch._inductor import async_compile, codecache

    codecache.PyCodeCache.cache_clear()
    clear = getattr(getattr(async_compile, "CompiledTritonKernels", None), "cache_clear", None)
    if clear is not None:
        clear()


def _interpolate(x):
    import torch.nn.functional as F

    return F.interpolate(x, scale_factor=2, mode="nearest")


SETTINGS = ("Triton's launcher", "static launcher")


def _scope(setting: str):
    """The context a column compiles in: the package as installed (``lowerings.static_launch``)
    or with its kernels left on Triton's launcher."""
    import contextlib
    from unittest import mock

    from lowerings import static_launch

    if setting == "Triton's launcher":
        return mock.patch.object(static_launch, "is_package_kernel", lambda autotuner: False)
    return contextlib.nullcontext()


def _sources() -> str:
    """The generated Python modules Inductor loaded since ``_clear_kernel_caches`` that launch
    kernels (their ``call`` functions)."""
    from torch._inductor.codecache import PyCodeCache

    texts = []
    for module in [*PyCodeCache.modules, *PyCodeCache.modules_no_attr.values()]:
        path = getattr(module, "__file__", None)
        if path and hasattr(module, "call"):
            texts.append(f"# {path}\n{Path(path).read_text()}")
    return "\n".join(texts)


def _launchers() -> dict[str, str]:
    """Each Triton kernel of the modules Inductor loaded since ``_clear_kernel_caches``
    (``CachingAutotuner`` objects): ``"static"`` where its launchers are Inductor's static ones,
    else ``"triton"``."""
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    kinds = {}
    for module in [*PyCodeCache.modules, *PyCodeCache.modules_no_attr.values()]:
        for name, value in vars(module).items():
            if isinstance(value, CachingAutotuner):
                static = value.launchers and all(getattr(launcher, "_is_static", False) for launcher in value.launchers)
                kinds[name] = "static" if static else "triton"
    return kinds


def _kernel_names(call) -> list[str]:
    """The CUDA kernels of one call, by name."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return [e.name[:60] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def _host_profile(call, calls: int = 200) -> dict:
    """Python function calls per call (``cProfile``: a count that does not depend on the host's
    load) and the functions with the most own time."""
    import io

    from perf.probes import profiled

    stats = profiled(call, calls, io.StringIO())
    top = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:10]
    return {"Python calls per call": round(stats.total_calls / calls),
            "most own time (us per call)": {f"{Path(f).name}:{line}({name})": round(tt / calls * 1e6, 1)
                                            for (f, line, name), (_, _, tt, _, _) in top}}


def rows(rounds: int, out_dir: Path):
    import torch

    for label, shape, dtype in ROWS:
        for dynamic in (False, True):
            for backward in (False, True):
                name = f"{label}, dynamic={dynamic}, {'fwd+bwd' if backward else 'fwd'}"
                torch.manual_seed(0)
                x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype), requires_grad=backward)
                out_shape = (*shape[:2], *(2 * s for s in shape[2:]))
                g = torch.randn(out_shape, device="cuda", dtype=x.dtype)
                columns = {}
                for setting in SETTINGS:
                    with _scope(setting):
                        columns[setting] = compiled_column(_interpolate, x, g, dynamic, backward)
                record = {"row": label, "dynamic": dynamic, "backward": backward}
                yield name, {**record, **timed_columns(name, columns, rounds, out_dir)}


def compiled_column(fn, x, g, dynamic: bool, backward: bool):
    """``fn(x)`` (with ``backward``, its gradient for ``g``) compiled now, in the caller's
    context, apart from any other column: the call, its first result, its kernels' launchers,
    the source of its generated modules and the number of graphs it compiled (0: Dynamo ran
    ``fn`` eagerly)."""
    import torch
    from torch._dynamo.utils import counters

    compiled = torch.compile(_fresh(fn), dynamic=dynamic)

    def call():
        out = compiled(x)
        return torch.autograd.grad(out, x, g) if backward else out

    _clear_kernel_caches()
    graphs = counters["stats"]["unique_graphs"]
    result = call()
    return call, result, _launchers(), _sources(), counters["stats"]["unique_graphs"] - graphs


def timed_columns(name: str, columns: dict, rounds: int, out_dir: Path) -> dict:
    """Per column (``compiled_column``'s, by setting; the last one the reference): whether its
    results equal the last column's, back-to-back and ``do_bench`` times over ``rounds``
    interleaved rounds, kernel time, launchers, kernel names and Python calls; each column's
    generated modules go to ``out_dir/sources/``."""
    import torch
    from torch._dynamo.utils import counters
    from triton.testing import do_bench

    from perf.probes import back_to_back_us, kernel_time

    def flat(result):
        return list(result) if isinstance(result, (tuple, list)) else [result]

    (out_dir / "sources").mkdir(parents=True, exist_ok=True)
    for setting, (_, _, _, source, _) in columns.items():
        slug = re.sub(r"[^a-z0-9]+", "-", f"{name} {setting}".lower()).strip("-")
        (out_dir / "sources" / f"{slug}.py").write_text(source)
    reference = flat(list(columns.values())[-1][1])
    graphs = counters["stats"]["unique_graphs"]
    calls = {setting: column[0] for setting, column in columns.items()}
    for call in calls.values():
        for _ in range(10):
            call()
    b2b = {s: [] for s in calls}
    latency = {s: [] for s in calls}
    for _ in range(rounds):
        for s, call in calls.items():
            b2b[s].append(back_to_back_us(call, BACK_TO_BACK))
            latency[s].append(do_bench(call, warmup=10, rep=50, return_mode="median") * 1000)
    record = {"graphs compiled while timed": counters["stats"]["unique_graphs"] - graphs}
    for s, (call, result, launchers, _, compiled_graphs) in columns.items():
        record[s] = {
            "graphs compiled": compiled_graphs,
            "equal": all(map(torch.equal, flat(result), reference)),
            "back to back, best / median round (us)": [round(min(b2b[s]), 1), round(statistics.median(b2b[s]), 1)],
            "do_bench, best / median round (us)": [round(min(latency[s]), 1), round(statistics.median(latency[s]), 1)],
            "kernels (us)": round(kernel_time(call), 1),
            "launchers": launchers,
            "kernel names": _kernel_names(call),
            **_host_profile(call),
        }
    return record


def main(argv=None) -> int:
    from perf.probes import probe_main_rounds

    return probe_main_rounds("static_launch_probe", rows, ROUNDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
