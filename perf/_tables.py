"""Markdown rendering shared by the table tools."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from perf._pickles import Row, Run

UNITS = ((1e-6, "ns", 1e-9), (1e-3, "us", 1e-6), (1.0, "ms", 1e-3))
MISMATCH_MARK = "MISMATCH"
# Below this eager time a compiled call's own host cost decides (the "Compiled call overhead" row).
HOST_BOUND_SECONDS = 100e-6
HOST_BOUND_MARK = "host-bound"
# The label (before ", <device>") of the rows that time empty compiled graphs: references, not cases.
OVERHEAD_LABEL = "Compiled call overhead"
# A cell shows its minor page faults per call from this many on (4 kB pages: 64 kB of memory;
# fewer are the odd page of small buffers).
PAGE_FAULTS_SHOWN = 16


def host_bound_threshold(training_step: bool, step_overhead_seconds: float | None) -> float:
    """The eager time below which a row is host-bound: HOST_BOUND_SECONDS, or for a training step
    (fwd+bwd) the host cost of an empty compiled fwd+bwd step where that is measured and longer:
    no compiled step can beat eager below it."""
    if training_step and step_overhead_seconds is not None:
        return max(HOST_BOUND_SECONDS, step_overhead_seconds)
    return HOST_BOUND_SECONDS


def select_unit(seconds: float) -> tuple[str, float]:
    """The unit (and its size in seconds) that ``torch.utils.benchmark.Compare`` would pick."""
    for bound, unit, scale in UNITS:
        if seconds < bound:
            return unit, scale
    return "s", 1.0


def format_time(seconds: float, scale: float) -> str:
    value = seconds / scale
    return f"{value:.1f}" if value >= 100 else f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def format_cell(row: Row, scale: float) -> str:
    """Median time, with the spread of repeats, achieved bandwidth when recorded and a loud mark
    on a mismatch."""
    cell = format_time(row.median, scale)
    if row.spread and row.spread["n"] > 1:
        cell += f" (max +{100 * (row.spread['max'] / row.spread['min'] - 1):.0f}%)"
    if row.gbps is not None:
        cell += f" ({row.gbps:.0f} GB/s, {row.pct_of_copy:.0f}%)"
    if row.page_faults is not None and row.page_faults >= PAGE_FAULTS_SHOWN:
        cell += f" ({row.page_faults:.0f} pf)"
    if row.kernel_us is not None:
        cell += f" (kernels {row.kernel_us:.1f} us)"
    if row.problem:
        cell += f" **{MISMATCH_MARK}**"
    return cell


def time_notes(rows: Sequence[Row], unit: str) -> str:
    """The sentence under a table that says what its cells show."""
    note = f"Times are in {unit}"
    if any(r.spread and r.spread["n"] > 1 for r in rows):
        note += ("; (max +x%) = the highest median of the run's repeats (of all its processes with "
                 "--processes) is x% above the one shown (the lowest)")
    if any(r.gbps is not None for r in rows):
        note += "; (GB/s, %) = minimal bytes moved / time, and its % of the device-to-device copy bandwidth"
    if any(r.page_faults is not None and r.page_faults >= PAGE_FAULTS_SHOWN for r in rows):
        note += ("; (N pf) = minor page faults per call in the round shown: memory the allocator gave "
                 "back to the system and the calls touched again")
    if any(r.kernel_us is not None for r in rows):
        note += ("; (kernels x us) = the GPU kernels' time per call (profiler): where it is well under "
                 "the call's time, the host decides the row")
    return note + "."


def ordered_unique(items: Iterable) -> list:
    return list(dict.fromkeys(items))


def group_by_label(rows: Sequence) -> dict[str, list]:
    """Rows (anything with a ``.label``) grouped by label, in order of first appearance."""
    groups: dict[str, list] = {}
    for row in rows:
        groups.setdefault(row.label, []).append(row)
    return groups


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|")


def markdown_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(_escape(h) for h in header) + " |"]
    lines.append("|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|")
    lines += ["| " + " | ".join(_escape(c) for c in cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"


def runs_header(runs: Sequence[Run]) -> str:
    """One entry per pickle: torch version, threads, triton, extras and torch config."""
    parts = ["## Runs\n"]
    for run in runs:
        facts = [f"torch {run.torch_version}", f"num_threads {run.num_threads}", f"triton {run.triton}"]
        facts += [f"{k} {run.extra[k]}" for k in ("tag", "device", "device_name", "cpus", "dynamic", "repeat",
                                                 "processes", "shards", "call_forms")
                  if run.extra.get(k) is not None]
        if run.extra.get("huge_pages"):
            facts.append("huge pages (THP_MEM_ALLOC_ENABLE=1)")
        if run.extra.get("compiled_call_overhead_us") is not None:
            facts.append(f"compiled call overhead {run.extra['compiled_call_overhead_us']:.1f} us")
        if run.extra.get("compiled_step_overhead_us") is not None:
            facts.append(f"compiled fwd+bwd step overhead {run.extra['compiled_step_overhead_us']:.1f} us")
        if run.copy_bandwidth_gbps:
            facts.append(f"device-to-device copy {run.copy_bandwidth_gbps:.0f} GB/s")
        if run.extra.get("cases_left"):
            facts.append(f"**{run.extra['cases_left']} cases not started** (time limit)")
        parts.append(f"- `{run.path.name}`: " + ", ".join(facts))
        if run.extra.get("package"):
            parts.append(f"  - package: {run.extra['package']}")
        config = run.torch_config.strip().replace("\n", "\n  ")
        parts.append(f"  <details><summary>torch config</summary>\n\n  ```text\n  {config}\n  ```\n\n  </details>")
    return "\n".join(parts) + "\n"


def problems_section(runs: Sequence[Run]) -> str:
    """Mismatches and failed cases, so that they cannot be overlooked."""
    lines = []
    for run in runs:
        lines += [f"- `{run.path.name}` {row.description} | {row.sub_label}: {row.problem}"
                  for row in run.rows if row.problem]
        lines += [f"- `{run.path.name}` FAILED {error}" for error in run.errors]
    if not lines:
        return ""
    return f"## Problems ({MISMATCH_MARK} = compiled result differs from eager)\n\n" + "\n".join(lines) + "\n"
