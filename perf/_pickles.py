"""Reading and writing benchmark pickles (the seed PR's format, plus optional keys).

A pickle holds a dict with the seed's keys ``filepath``, ``torch_version``,
``torch_config``, ``num_threads``, ``triton`` and ``test_results`` (a list of
``torch.utils.benchmark`` Measurements). Runs of this harness add optional
keys, all keyed by ``(label, sub_label, description)`` where relevant:
``roofline``, ``mismatches``, ``errors``, ``compile_seconds``, ``spread``,
``page_faults``, ``kernel_us``, ``copy_bandwidth_gbps``, ``compiled_call_overhead_us``,
``compiled_step_overhead_us``, ``tag``, ``device``, ``dynamic``, ``repeat``, ``call_forms``,
``package``, ``device_name`` (the GPU's or CPU's name), ``shard`` (``(I, N)`` of a run of one
shard of the cases), ``cases_left`` (cases a time limit left unstarted), and ``processes`` and
``shards`` in a pickle that ``merge_runs`` made from several runs of one tag.

Readers accept pickles written by the seed scripts and by other torch
versions: only ``.median`` (or the raw times) and the task spec's labels are
used from each Measurement.
"""

from __future__ import annotations

import os
import pickle
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

Key = tuple[str, str, str]


@dataclass
class Row:
    """One measurement, reduced to what the tables and the chart need."""

    label: str
    sub_label: str
    description: str
    median: float  # seconds
    gbps: float | None = None
    pct_of_copy: float | None = None
    problem: str | None = None  # a correctness mismatch recorded by the run
    spread: dict | None = None  # {"min", "max", "n"} of the medians of the run's repeats
    page_faults: float | None = None  # minor page faults per call in the kept round (CPU runs)
    kernel_us: float | None = None  # us of GPU kernels per call (CUDA runs, profiler)
    # The run's, from the pickle's keys (None where a pickle, e.g. a seed one, lacks the key)
    torch_version: str | None = None
    device: str | None = None
    dynamic: bool | None = None
    step_overhead_us: float | None = None  # compiled_step_overhead_us: the run's empty compiled fwd+bwd step

    @property
    def key(self) -> Key:
        return (self.label, self.sub_label, self.description)


@dataclass
class Run:
    """One loaded pickle."""

    path: Path
    torch_version: str
    torch_config: str
    num_threads: int | None
    triton: str | None
    rows: list[Row]
    copy_bandwidth_gbps: float | None = None
    errors: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


def triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def save_run(path: Path, test_results: list, **extra) -> dict:
    """Pickle ``test_results`` with the seed's metadata keys plus ``extra`` keys."""
    payload = {
        "filepath": str(path),
        "torch_version": torch.__version__,
        "torch_config": torch.__config__.show(),
        "num_threads": torch.get_num_threads(),
        "triton": triton_version(),
        "test_results": list(test_results),
        **extra,
    }
    _write(path, payload)
    return payload


def _write(path, payload: dict) -> None:
    partial = Path(f"{path}.partial")  # a run killed mid-write leaves the last complete pickle
    with open(partial, "wb") as f:
        pickle.dump(payload, f)
    os.replace(partial, path)


def median_seconds(measurement) -> float:
    """``Measurement.median``, recomputed from raw times if the object predates this torch."""
    try:
        return float(measurement.median)
    except (AttributeError, TypeError, RuntimeError):
        number = getattr(measurement, "number_per_run", 1) or 1
        return statistics.median(t / number for t in measurement.raw_times)


def _task_field(measurement, name: str) -> str:
    value = getattr(getattr(measurement, "task_spec", None), name, None)
    return "" if value is None else str(value)


def step_overhead_us(payload: dict, key: Key) -> float | None:
    """The empty compiled step of the run that timed column ``key``: a merged pickle's own value
    for it (``step_overhead_us``), else the run's ``compiled_step_overhead_us``."""
    return (payload.get("step_overhead_us") or {}).get(key, payload.get("compiled_step_overhead_us"))


def to_row(measurement, payload: dict) -> Row:
    row = Row(
        label=_task_field(measurement, "label"),
        sub_label=_task_field(measurement, "sub_label"),
        description=_task_field(measurement, "description"),
        median=median_seconds(measurement),
    )
    roofline = (payload.get("roofline") or {}).get(row.key, {})
    row.gbps = roofline.get("gbps")
    row.pct_of_copy = roofline.get("pct_of_copy")
    row.problem = (payload.get("mismatches") or {}).get(row.key)
    row.spread = (payload.get("spread") or {}).get(row.key)
    row.page_faults = (payload.get("page_faults") or {}).get(row.key)
    row.kernel_us = (payload.get("kernel_us") or {}).get(row.key)
    row.torch_version = payload.get("torch_version")
    row.device = payload.get("device")
    row.dynamic = payload.get("dynamic")
    row.step_overhead_us = step_overhead_us(payload, row.key)
    return row


def load_run(path) -> Run:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"benchmark pickle not found: {path}")
    with open(path, "rb") as f:
        payload = pickle.load(f)
    if not isinstance(payload, dict) or "test_results" not in payload:
        raise ValueError(f"{path} is not a benchmark pickle (expected a dict with 'test_results')")
    known = {"filepath", "torch_version", "torch_config", "num_threads", "triton", "test_results"}
    return Run(
        path=path,
        torch_version=str(payload.get("torch_version", "unknown")),
        torch_config=str(payload.get("torch_config", "")),
        num_threads=payload.get("num_threads"),
        triton=payload.get("triton"),
        rows=[to_row(m, payload) for m in payload["test_results"]],
        copy_bandwidth_gbps=payload.get("copy_bandwidth_gbps"),
        errors=list(payload.get("errors") or []),
        extra={k: v for k, v in payload.items() if k not in known},
    )


def join_spreads(seen: dict | None, own: dict) -> dict:
    """One column's spread ``{"min", "max", "n"}`` over two sets of rounds' medians (``seen``
    None: ``own`` alone)."""
    if seen is None:
        return own
    return {"min": min(seen["min"], own["min"]), "max": max(seen["max"], own["max"]), "n": seen["n"] + own["n"]}


def merge_runs(paths: list, path, skip=None) -> dict:
    """One pickle from several runs of one tag (``python -m perf --processes N``), and of its
    shards (``--devices``: each shard a part of the cases, its own rows). ``skip(index, key)``:
    leave out the column ``key`` of ``paths[index]`` (its measurement and any mismatch recorded
    for it), e.g. rows whose code changed since that run (``python -m perf.merge --drop``).

    Each column keeps the Measurement with the lowest median of all runs, with that run's
    roofline, compile time, page faults and kernel time; its spread spans every run's medians
    (and their repeats). A mismatch or error in any run is kept; ``shard`` is the runs' where they
    ran one shard (the processes of a ``--shard I/N`` run). The empty-call overheads are the
    runs' lowest, like the columns; ``step_overhead_us`` keeps, per column, the empty compiled step of
    the run that timed it, against which the tables judge whether a training step is host-bound
    (shards' processes meet different host spells). ``processes`` is how many runs timed a column, the most common
    count (every run times the empty-call rows, only some a reduce-overhead column); ``shards``
    the number of distinct shards; ``cases_left`` the runs' unstarted cases, summed. A process's
    state can decide a CPU row: the same kernel timed
    345 us in one process and 570 us in another on a 2-core machine (docs/runs/README.md, "CPU").
    """
    payloads = []
    for p in paths:
        with open(p, "rb") as f:
            payloads.append(pickle.load(f))
    best: dict[Key, tuple] = {}  # key -> (median, Measurement, payload)
    spread: dict[Key, dict] = {}
    mismatches: dict[Key, str] = {}
    timed: dict[Key, int] = {}  # key -> the runs that timed it
    for index, payload in enumerate(payloads):
        for m in payload["test_results"]:
            key = (_task_field(m, "label"), _task_field(m, "sub_label"), _task_field(m, "description"))
            if skip is not None and skip(index, key):
                continue
            median = median_seconds(m)
            timed[key] = timed.get(key, 0) + 1
            if key not in best or median < best[key][0]:
                best[key] = (median, m, payload)
            own = (payload.get("spread") or {}).get(key) or {"min": median, "max": median, "n": 1}
            spread[key] = join_spreads(spread.get(key), own)
        for key, problem in (payload.get("mismatches") or {}).items():
            if skip is None or not skip(index, key):
                mismatches.setdefault(key, problem)

    def from_best(name: str) -> dict:
        return {key: payload[name][key] for key, (_, _, payload) in best.items() if key in (payload.get(name) or {})}

    def lowest(name: str):
        values = [p[name] for p in payloads if p.get(name) is not None]
        return min(values) if values else None

    names = sorted({p["device_name"] for p in payloads if p.get("device_name")})
    shards = {tuple(p["shard"]) if p.get("shard") else None for p in payloads}
    cpus = sorted({p["cpus"] for p in payloads if p.get("cpus")})
    merged = {
        **payloads[0], "filepath": str(path), "test_results": [m for _, m, _ in best.values()],
        "device_name": ", ".join(names) or None, "shard": next(iter(shards)) if len(shards) == 1 else None,
        "cpus": (cpus[0] if len(cpus) == 1 else f"{cpus[0]}-{cpus[-1]}") if cpus else None,
        "shards": None if None in shards else len(shards),
        "roofline": from_best("roofline"), "compile_seconds": from_best("compile_seconds"),
        "page_faults": from_best("page_faults"), "kernel_us": from_best("kernel_us"),
        "spread": spread, "mismatches": mismatches,
        "errors": [e for p in payloads for e in p.get("errors") or []],
        "compiled_call_overhead_us": lowest("compiled_call_overhead_us"),
        "compiled_step_overhead_us": lowest("compiled_step_overhead_us"),
        "step_overhead_us": {key: step for key, (_, _, payload) in best.items()
                             if (step := step_overhead_us(payload, key)) is not None},
        "processes": Counter(timed.values()).most_common(1)[0][0] if timed else 0,
        "cases_left": sum(p.get("cases_left") or 0 for p in payloads),
    }
    _write(path, merged)
    return merged
