"""Speed-up columns computed from benchmark pickles, as markdown tables.

    python -m perf.speedup OUT.md PR.pkl NIGHTLY.pkl \\
        --compare "Compiled \\(.+\\) PR;Compiled \\(.+\\) Nightly;speed-up PR vs Nightly"

Each ``--compare "A;B[;name]"`` (repeatable) names two columns by regular
expression (matched against the whole description) within the same row
(same label and sub_label); the speed-up is time(B) / time(A), so > 1 means
A is faster. Rows whose eager time is below 100 us get the note ``host-bound``; fwd+bwd rows
also where it is below the empty compiled fwd+bwd step of the runs that timed the row's columns
(``compiled_step_overhead_us``, per column in a merged pickle; see ``host_bound_seconds``). A summary closes the tables: per compare, the rows at or ahead and
each row behind. Refuses to overwrite an existing OUT.md.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perf._pickles import Row, Run, load_run
from perf._tables import (
    HOST_BOUND_MARK,
    HOST_BOUND_SECONDS,
    MISMATCH_MARK,
    OVERHEAD_LABEL,
    format_cell,
    group_by_label,
    host_bound_threshold,
    markdown_table,
    ordered_unique,
    problems_section,
    runs_header,
    select_unit,
    time_notes,
)
from perf.cases import is_training_step
from perf.results_table import merged_rows

# "Compiled \(": not the "Compiled reduce-overhead (...)" columns of host-bound CUDA rows.
PR_VS_NIGHTLY = r"Compiled \(.+\) PR;Compiled \(.+\) Nightly;speed-up PR vs Nightly"
PR_VS_EAGER = r"Compiled \(.+\) PR;Eager \(.+\) PR;speed-up PR vs Eager"
REDUCE_OVERHEAD_PR_VS_NIGHTLY = (r"Compiled reduce-overhead \(.+\) PR;Compiled reduce-overhead \(.+\) Nightly;"
                                 "speed-up reduce-overhead PR vs Nightly")
REDUCE_OVERHEAD_PR_VS_EAGER = (r"Compiled reduce-overhead \(.+\) PR;Eager \(.+\) PR;"
                               "speed-up reduce-overhead PR vs Eager")
# The compares of `python -m perf`; the reduce-overhead ones match only host-bound CUDA rows.
REPORT_COMPARES = (PR_VS_NIGHTLY, PR_VS_EAGER, REDUCE_OVERHEAD_PR_VS_NIGHTLY, REDUCE_OVERHEAD_PR_VS_EAGER)


class SpeedupError(ValueError):
    """A --compare spec that is malformed, ambiguous or matches nothing."""


@dataclass(frozen=True)
class Spec:
    first: str  # regex of the reference column (the denominator's owner)
    second: str
    name: str

    @classmethod
    def parse(cls, text: str) -> Spec:
        parts = text.split(";")
        if len(parts) not in (2, 3) or not all(parts):
            raise SpeedupError(f"--compare takes 'COLUMN_A;COLUMN_B[;NAME]', got {text!r}")
        for pattern in parts[:2]:
            try:
                re.compile(pattern)
            except re.error as e:
                raise SpeedupError(f"bad regex {pattern!r} in --compare: {e}") from e
        name = parts[2] if len(parts) == 3 else f"Speed-up: {parts[0]} vs {parts[1]}"
        return cls(parts[0], parts[1], name)


@dataclass
class SpeedupRow:
    label: str
    sub_label: str
    columns: dict[str, Row] = field(default_factory=dict)  # matched columns, by description
    ratios: dict[str, float] = field(default_factory=dict)  # by spec name
    flagged: set[str] = field(default_factory=set)  # spec names computed from a mismatched cell
    pairs: dict[str, tuple[Row, Row]] = field(default_factory=dict)  # by spec name: its (A, B) columns
    host_bound: bool = False  # an Eager column of the row (any pickle) is below host_bound_seconds
    host_bound_seconds: float = HOST_BOUND_SECONDS  # the threshold that applies to this row


def _match_one(pattern: str, rows: Sequence[Row]) -> Row | None:
    matches = [r for r in rows if re.fullmatch(pattern, r.description)]
    if len(matches) > 1:
        names = ", ".join(repr(r.description) for r in matches)
        raise SpeedupError(f"{pattern!r} matches several columns in row {rows[0].sub_label!r}: {names}")
    return matches[0] if matches else None


def host_bound_seconds(label: str, rows: Sequence[Row]) -> float:
    """The eager time below which a row of ``label`` is host-bound, given its columns ``rows``
    (each carries the empty compiled step of the run that timed it, ``Row.step_overhead_us``):
    100 us, or for a fwd+bwd label the largest of those empty compiled fwd+bwd steps where that
    is longer."""
    steps = [r.step_overhead_us for r in rows if r.step_overhead_us is not None]
    return host_bound_threshold(is_training_step(label), max(steps) * 1e-6 if steps else None)


def host_bound_note(thresholds: Sequence[float]) -> str:
    """The sentence under a table that says what ``host-bound`` means there (``thresholds``: its
    rows' thresholds, which differ where its rows come from several runs, e.g. merged shards)."""
    note = f"{HOST_BOUND_MARK}: an eager time of the row (of any pickle) is below {HOST_BOUND_SECONDS * 1e6:.0f} us"
    steps = sorted({round(t * 1e6) for t in thresholds if t > HOST_BOUND_SECONDS})
    if steps:
        value = f"{steps[0]} us" if len(steps) == 1 else f"{steps[0]}-{steps[-1]} us by row"
        note += (f", or for fwd+bwd rows below the empty compiled step ({value}, the Compiled call overhead "
                 "fwd+bwd row; the largest of the runs that timed the row's columns)")
    return note + ", where the host cost of a compiled call (the Compiled call overhead rows) decides."


def compute_speedups(rows: Sequence[Row], specs: Sequence[Spec]) -> list[SpeedupRow]:
    """One SpeedupRow per (label, sub_label) in which at least one spec matched both columns."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.label, row.sub_label), []).append(row)
    result = []
    for (label, sub_label), group in groups.items():
        out = SpeedupRow(label, sub_label, host_bound_seconds=host_bound_seconds(label, group))
        out.host_bound = any(r.description.startswith("Eager") and r.median < out.host_bound_seconds
                             for r in group)
        for spec in specs:
            first, second = _match_one(spec.first, group), _match_one(spec.second, group)
            if first is None or second is None:
                continue
            out.columns.update({first.description: first, second.description: second})
            out.ratios[spec.name] = second.median / first.median
            out.pairs[spec.name] = (first, second)
            if first.problem or second.problem:
                out.flagged.add(spec.name)
        if out.ratios:
            result.append(out)
    if not result:
        available = ", ".join(repr(d) for d in ordered_unique(r.description for r in rows))
        patterns = "; ".join(f"{s.first!r} vs {s.second!r}" for s in specs)
        raise SpeedupError(f"no row has both columns of any --compare ({patterns}); columns are: {available}")
    return result


def render_label(label: str, rows: Sequence[SpeedupRow], spec_names: Sequence[str]) -> str:
    unit, scale = select_unit(min(c.median for r in rows for c in r.columns.values()))
    columns = ordered_unique(d for r in rows for d in r.columns)
    names = [n for n in spec_names if any(n in r.ratios for r in rows)]
    body = []
    for r in rows:
        times = [format_cell(r.columns[c], scale) if c in r.columns else "" for c in columns]
        ratios = [_format_ratio(r, n) for n in names]
        body.append([r.sub_label, *times, *ratios])
    header = ["", *columns, *names]
    note = f"{time_notes([c for r in rows for c in r.columns.values()], unit)} Speed-up = time(B) / time(A)."
    if any(r.host_bound for r in rows):
        header.append("note")
        for r, cells in zip(rows, body):
            cells.append(HOST_BOUND_MARK if r.host_bound else "")
        note += " " + host_bound_note([r.host_bound_seconds for r in rows])  # one per label
    return f"### {label}\n\n" + markdown_table(header, body) + f"\n{note}\n"


def _format_ratio(row: SpeedupRow, name: str) -> str:
    if name not in row.ratios:
        return ""
    mark = f" **{MISMATCH_MARK}**" if name in row.flagged else ""
    return f"{row.ratios[name]:.2f}x{mark}"


def _kernel_times(row: SpeedupRow, name: str) -> tuple[float, float] | None:
    """The A and B columns' GPU kernel time per call (us), None unless both were measured."""
    first, second = row.pairs[name]
    if first.kernel_us is None or second.kernel_us is None:
        return None
    return first.kernel_us, second.kernel_us


def _kernels(row: SpeedupRow, name: str) -> str:
    """The two columns' GPU kernel time per call, where both were measured: a row behind whose
    kernels are not is behind in host time."""
    times = _kernel_times(row, name)
    return "" if times is None else f" (kernels {times[0]:.1f} / {times[1]:.1f} us)"


# A's kernels count as no longer than B's up to this fraction over them (the profiler's spread).
KERNEL_TIE = 0.01


def _behind_in_host_time(row: SpeedupRow, name: str) -> bool | None:
    """Whether a row's A column runs its kernels in at most B's kernel time (``KERNEL_TIE``), so
    that its call is behind in host time; None where a column's kernel time was not measured."""
    times = _kernel_times(row, name)
    return None if times is None else times[0] <= times[1] * (1 + KERNEL_TIE)


def _ahead(ratio: float) -> bool:
    """At or ahead as the tables print it: a speed-up that rounds to 1.00x or more."""
    return round(ratio, 2) >= 1.0


def _listed(spec: Spec, row: SpeedupRow) -> bool:
    """Whether the summary lists ``row`` against ``spec`` when behind: not a host-bound row
    against an eager column (``spec.second`` starting with ``Eager``), which such a row loses by
    definition."""
    return not (row.host_bound and spec.second.startswith("Eager"))


def _case_rows(speedups: Sequence[SpeedupRow]) -> list[SpeedupRow]:
    """Every row but the compiled call overhead rows (empty graphs, the references)."""
    return [r for r in speedups if not r.label.startswith(OVERHEAD_LABEL)]


def rows_behind(speedups: Sequence[SpeedupRow], specs: Sequence[Spec]) -> dict[str, list[SpeedupRow]]:
    """Per compare, the rows the summary lists as behind (``_case_rows``): a speed-up that rounds
    below 1.00x."""
    return {spec.name: [r for r in _case_rows(speedups)
                        if spec.name in r.ratios and _listed(spec, r) and not _ahead(r.ratios[spec.name])]
            for spec in specs}


def render_summary(speedups: Sequence[SpeedupRow], specs: Sequence[Spec]) -> str:
    """Per compare, over every table but the compiled call overhead rows (empty graphs, the
    references): how many rows are at or ahead and the range of their speed-ups, host-bound rows
    apart, then each row behind (``rows_behind``), so that a reader checks a target without
    reading every row. Host-bound rows behind are listed too (marked), but not against an eager
    column, which such a row loses by definition. A row behind shows both columns' GPU kernel
    time per call where the run measured it (CUDA), and the compare's line counts the rows behind
    whose A kernels take no longer than B's (``_behind_in_host_time``)."""
    lines = ["### Summary", ""]
    cases = _case_rows(speedups)
    behind = rows_behind(speedups, specs)
    for spec in specs:
        name = spec.name
        rows = [r for r in cases if name in r.ratios]
        if not rows:
            continue
        counts = []
        for host_bound, kind in ((False, "rows"), (True, f"{HOST_BOUND_MARK} rows")):
            group = [r.ratios[name] for r in rows if r.host_bound == host_bound]
            if group:
                ahead = sum(map(_ahead, group))
                counts.append(f"{ahead} of {len(group)} {kind} at or ahead ({min(group):.2f}-{max(group):.2f}x)")
        timed = [host for host in (_behind_in_host_time(r, name) for r in behind[name]) if host is not None]
        if timed:
            counts.append(f"of the {len(timed)} rows behind with both kernel times, {sum(timed)} with A's kernels "
                          f"no longer than B's (+{KERNEL_TIE:.0%}): behind in host time")
        lines.append(f"- {name}: " + "; ".join(counts))
        for r in behind[name]:
            bound = f" ({HOST_BOUND_MARK})" if r.host_bound else ""
            lines.append(f"  - {_format_ratio(r, name)} {r.label} | {r.sub_label}{bound}{_kernels(r, name)}")
    return "\n".join(lines) + "\n"


def render_tables(runs: Sequence[Run], specs: Sequence[Spec]) -> str:
    """The speed-up tables, one per label, and their summary (``render_summary``)."""
    speedups = compute_speedups(merged_rows(runs), specs)
    names = [s.name for s in specs]
    tables = [render_label(label, rows, names) for label, rows in group_by_label(speedups).items()]
    return "\n".join([*tables, render_summary(speedups, specs)])


def render(runs: Sequence[Run], specs: Sequence[Spec]) -> str:
    """The whole report: compares, pickles' metadata, problems and tables."""
    compares = "\n".join(f"- {s.name}: A = `{s.first}`, B = `{s.second}`" for s in specs)
    sections = ["# Speed-ups\n", compares + "\n", runs_header(runs), problems_section(runs),
                render_tables(runs, specs)]
    return "\n".join(s for s in sections if s)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m perf.speedup", description=__doc__.split("\n")[0])
    parser.add_argument("output", type=Path, help="markdown file to write (must not exist)")
    parser.add_argument("pickles", nargs="+", type=Path, help="benchmark pickles")
    parser.add_argument(
        "--compare", action="append", metavar="A;B[;NAME]",
        help=f"columns to compare, repeatable (default: {PR_VS_NIGHTLY!r})",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.output.exists():
        print(f"error: {args.output} already exists; refusing to overwrite it. "
              "Pass a new path or delete the file first.", file=sys.stderr)
        return 2
    try:
        specs = [Spec.parse(text) for text in args.compare or [PR_VS_NIGHTLY]]
        text = render([load_run(p) for p in args.pickles], specs)
    except (FileNotFoundError, ValueError) as e:  # SpeedupError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.output.write_text(text)
    print(f"Wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
