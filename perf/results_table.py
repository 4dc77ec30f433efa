"""All measurements of one or more benchmark pickles as markdown tables.

    python -m perf.results_table OUT.md A.pkl [B.pkl ...]

Grouped like ``torch.utils.benchmark.Compare``: one table per label, one row
per sub_label, one column per description (in order of first appearance).
On CUDA each cell also shows the achieved bandwidth and its % of the run's
device-to-device copy bandwidth; with ``--repeat`` > 1, the spread of the repeats.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from perf._pickles import Row, Run, load_run
from perf._tables import (
    format_cell,
    group_by_label,
    markdown_table,
    ordered_unique,
    problems_section,
    runs_header,
    select_unit,
    time_notes,
)


def merged_rows(runs: Sequence[Run]) -> list[Row]:
    """All rows of all runs; a (label, sub_label, description) seen in an earlier
    pickle gets the later pickle's file name appended to its description."""
    seen: set = set()
    rows = []
    for run in runs:
        for row in run.rows:
            if row.key in seen:
                row = replace(row, description=f"{row.description} [{run.path.stem}]")
            seen.add(row.key)
            rows.append(row)
    return rows


def render_label(label: str, rows: Sequence[Row]) -> str:
    unit, scale = select_unit(min(r.median for r in rows))
    columns = ordered_unique(r.description for r in rows)
    cells = {(r.sub_label, r.description): format_cell(r, scale) for r in rows}
    body = [
        [sub_label] + [cells.get((sub_label, col), "") for col in columns]
        for sub_label in ordered_unique(r.sub_label for r in rows)
    ]
    return f"### {label}\n\n" + markdown_table([""] + columns, body) + f"\n{time_notes(rows, unit)}\n"


def render(runs: Sequence[Run]) -> str:
    groups = group_by_label(merged_rows(runs))
    tables = [render_label(label, rows) for label, rows in groups.items()]
    sections = ["# Benchmark results\n", runs_header(runs), problems_section(runs), *tables]
    return "\n".join(s for s in sections if s)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.results_table", description=__doc__.split("\n")[0])
    parser.add_argument("output", type=Path, help="markdown file to write")
    parser.add_argument("pickles", nargs="+", type=Path, help="benchmark pickles")
    args = parser.parse_args(argv)
    text = render([load_run(p) for p in args.pickles])
    args.output.write_text(text)
    print(f"Wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
