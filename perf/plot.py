"""Bar chart (PNG) of speed-ups per row.

    python -m perf.plot OUT.png PR.pkl NIGHTLY.pkl --compare "A;B;name" [--compare ...]

Same ``--compare`` semantics as ``perf.speedup``; one horizontal bar per
(row, compare), log scale, with a line at 1x.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from perf._pickles import load_run
from perf.results_table import merged_rows
from perf.speedup import PR_VS_EAGER, PR_VS_NIGHTLY, Spec, SpeedupRow, compute_speedups

BAR_HEIGHT_INCHES = 0.22
# Row titles are long; drop what every row shares.
SHORTHANDS = (("torch.", ""), (", align_corners: None", ""), ("contiguous_format", "contiguous"))


def row_title(row: SpeedupRow) -> str:
    label = row.label.rsplit(",", 1)[0]  # the device is in the chart title
    title = f"{label} | {row.sub_label}"
    for long, short in SHORTHANDS:
        title = title.replace(long, short)
    return title


def plot_speedups(rows: Sequence[SpeedupRow], spec_names: Sequence[str], output: Path, title: str = "") -> None:
    """Bars from 1x to each speed-up, on a log axis, one group of bars per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in spec_names if any(n in r.ratios for r in rows)]
    bar = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(16, BAR_HEIGHT_INCHES * len(rows) * max(len(names), 1) + 1.5))
    values = []
    for i, name in enumerate(names):
        points = [(k + i * bar, r.ratios[name]) for k, r in enumerate(rows) if name in r.ratios]
        ax.barh([p for p, _ in points], [v - 1 for _, v in points], left=1, height=bar, label=name)
        for position, value in points:
            ax.text(value, position, f" {value:.2f}x ", va="center", ha="left" if value >= 1 else "right", fontsize=6)
        values += [v for _, v in points]
    ax.set_xscale("log")
    ax.set_xlim(min(values + [1]) / 2, max(values + [1]) * 2)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks([k + bar * (len(names) - 1) / 2 for k in range(len(rows))])
    ax.set_yticklabels([row_title(r) for r in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up (log scale; > 1: the first column of the compare is faster)")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=7)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.plot", description=__doc__.split("\n")[0])
    parser.add_argument("output", type=Path, help="PNG file to write")
    parser.add_argument("pickles", nargs="+", type=Path)
    parser.add_argument("--compare", action="append", metavar="A;B[;NAME]",
                        help="columns to compare, repeatable (default: PR vs Nightly and PR vs Eager)")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    try:
        specs = [Spec.parse(t) for t in args.compare or [PR_VS_NIGHTLY, PR_VS_EAGER]]
        rows = compute_speedups(merged_rows([load_run(p) for p in args.pickles]), specs)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    plot_speedups(rows, [s.name for s in specs], args.output, args.title)
    print(f"Wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
