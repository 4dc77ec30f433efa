"""One-off measurements behind docs/findings.md, apart from the harness.

Each probe runs as ``python -m perf.probes.NAME`` and says in its docstring which finding it
measures; the harness (``python -m perf``) does not use them.
"""


def kernel_time(fn, calls: int = 20) -> float:
    """us of GPU kernels per call (profiler): what the call costs the device, without the host."""
    from perf.bench import kernel_us

    return kernel_us(fn, calls)


def _synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def back_to_back_us(fn, calls: int, device: str = "cuda") -> float:
    """us per ``fn()`` of ``calls`` calls launched back to back, then one synchronize: the
    harness's view (``torch.utils.benchmark``), where a call whose host time exceeds its kernels'
    runs at its host time."""
    import time

    _synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    _synchronize(device)
    return (time.perf_counter() - start) / calls * 1e6


def idle_host_us(fn, calls: int) -> float:
    """Median us that one ``fn()`` keeps the host, each call issued to an idle GPU: the host time
    of a call alone, which back to back hides behind kernels that take longer."""
    import statistics
    import time

    import torch

    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def profiled(fn, calls: int, stream=None, device: str = "cuda"):
    """``cProfile``'s statistics (``pstats.Stats``, printing to ``stream``) of ``calls`` calls of
    ``fn``, up to the device's end of them."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    _synchronize(device)
    profiler.disable()
    return pstats.Stats(profiler, stream=stream)


def interp_row(shape, dtype, memory_format, **kwargs):
    """``((x,), f)``: a CUDA input and ``F.interpolate(x, mode="nearest", **kwargs)``."""
    import torch
    import torch.nn.functional as F

    x = torch.randn(shape, device="cuda", dtype=dtype).contiguous(memory_format=memory_format)
    return (x,), lambda x: F.interpolate(x, mode="nearest", **kwargs)


def fpn_merge_row(dtype, memory_format):
    """``((top, lateral), f)``: the harness's CUDA FPN merge, ``lateral + up(top)``."""
    import torch
    import torch.nn.functional as F

    top = torch.randn(8, 256, 128, 128, device="cuda", dtype=dtype).contiguous(memory_format=memory_format)
    lateral = torch.randn(8, 256, 256, 256, device="cuda", dtype=dtype).contiguous(memory_format=memory_format)
    return (top, lateral), lambda t, lat: lat + F.interpolate(t, scale_factor=2, mode="nearest")


def compiled_graphs(call):
    """The compiled graphs (``CompiledFxGraph``) one ``call()`` runs, each with a copy of its
    arguments (graphs clear the list they are given)."""
    from unittest import mock

    from torch._inductor.output_code import CompiledFxGraph

    calls, stock = [], CompiledFxGraph.__call__

    def record(self, inputs):
        calls.append((self, list(inputs)))
        return stock(self, inputs)

    with mock.patch.object(CompiledFxGraph, "__call__", record):
        call()
    return calls


def start_cuda_probe(name: str) -> bool:
    """False (with a message) without CUDA; else installs the package and turns off the compile
    caches, whose keys do not see the switches the probes flip."""
    import torch

    if not torch.cuda.is_available():
        print(f"{name} needs CUDA")
        return False
    import decomps  # noqa: F401  (installs the decompositions)
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    inductor_config.fx_graph_cache = False
    functorch_config.enable_autograd_cache = False
    return True


def probe_main(name: str, rows, argv=None) -> int:
    """``main`` of a CUDA probe, ``python -m perf.probes.NAME OUT_DIR``: ``rows()`` yields one
    ``(label, record)`` per measured row, printed as it comes; all records go to
    ``OUT_DIR/NAME.json``."""
    import argparse
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(prog=f"python -m perf.probes.{name}")
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    if not start_cuda_probe(name):
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for label, record in rows():
        results.append(record)
        print(f"{label}: {json.dumps(record)}", flush=True)
    (args.out_dir / f"{name}.json").write_text(json.dumps(results, indent=1))
    return 0


def probe_main_rounds(name: str, rows, rounds: int, argv=None) -> int:
    """``probe_main`` of a probe whose ``rows(rounds, out_dir)`` takes a number of timing rounds:
    ``python -m perf.probes.NAME OUT_DIR [--rounds N]`` (``rounds`` by default)."""
    import sys
    from pathlib import Path

    argv = sys.argv[1:] if argv is None else list(argv)
    if "--rounds" in argv:
        i = argv.index("--rounds")
        rounds = int(argv[i + 1])
        del argv[i:i + 2]
    return probe_main(name, lambda: rows(rounds, Path(argv[0])), argv)


def tag_probe_main(name: str, argv, add_arguments, records) -> int:
    """``main`` of a probe that measures one tag per process: ``python -m perf.probes.NAME OUT_DIR
    [--stock] [--device cuda|cpu] ...`` (``add_arguments(parser)`` adds the rest). ``--stock`` runs
    stock torch, the package never imported (a switch of the install state in one process would
    reset Dynamo's caches). ``records(args)`` yields one record per row, printed as it comes and
    compiled with the FX graph cache off (each row compiles, not served a graph); all go to
    ``OUT_DIR/NAME-<pr|stock>.json``."""
    import argparse
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(prog=f"python -m perf.probes.{name}")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--stock", action="store_true", help="stock torch; the package is never imported")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    add_arguments(parser)
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"{name} --device cuda needs CUDA")
        return 1
    if not args.stock:
        import decomps  # noqa: F401  (installs the decompositions)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    with torch._inductor.config.patch(fx_graph_cache=False):
        for record in records(args):
            results.append(record)
            print(json.dumps(record), flush=True)
    (args.out_dir / f"{name}-{'stock' if args.stock else 'pr'}.json").write_text(json.dumps(results, indent=1))
    return 0


def minor_faults() -> int:
    """The process's minor page faults so far (``getrusage``): memory the allocator gave back to
    the system and a call touched again."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def interleaved_rounds(columns: dict, rounds: int, steps: int, contexts: dict | None = None) -> dict:
    """``rounds`` rounds, each calling every column's callable ``steps`` times in turn (inside
    ``contexts[name]()`` where given): per column, us per call (best and median round) and minor
    page faults per call."""
    import contextlib
    import statistics
    import time

    times = {name: [] for name in columns}
    faults = dict.fromkeys(columns, 0)
    for _ in range(rounds):
        for name, fn in columns.items():
            with (contexts or {}).get(name, contextlib.nullcontext)():
                before = minor_faults()
                start = time.perf_counter()
                for _ in range(steps):
                    fn()
                times[name].append((time.perf_counter() - start) / steps * 1e6)
                faults[name] += minor_faults() - before
    return {
        "us": {name: {"best": round(min(t), 1), "median": round(statistics.median(t), 1)} for name, t in times.items()},
        "minor faults per step": {name: round(n / (rounds * steps), 1) for name, n in faults.items()},
    }


def cpu_rows(name: str, out_dir, threads, rows, measure) -> int:
    """``main``'s loop of a CPU probe: ``measure(n, *row)`` for each thread count ``n`` and row,
    printed as it comes; all records go to ``OUT_DIR/NAME.json``, and the process's thread count
    is restored. The compile caches are off meanwhile: their keys do not see the switches the
    probes flip (a graph compiled under one would be served under another)."""
    import json

    import torch
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    out_dir.mkdir(parents=True, exist_ok=True)
    records = []
    threads_before = torch.get_num_threads()
    try:
        with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
            for n in threads:
                for row in rows:
                    records.append(measure(n, *row))
                    print(json.dumps(records[-1]), flush=True)
    finally:
        torch.set_num_threads(threads_before)
    (out_dir / f"{name}.json").write_text(json.dumps(records, indent=1))
    return 0
