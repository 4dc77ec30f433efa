"""Bar chart (PNG) of speed-ups per row.

    python -m perf.plot OUT.png PR.pkl NIGHTLY.pkl --compare "A;B;name" [--compare ...]

Same ``--compare`` semantics as ``perf.speedup``; one horizontal bar per
(row, compare), log scale, with a line at 1x. The title names the device, the
torch version and ``dynamic`` of the runs (from the pickles' keys).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from perf._pickles import load_run
from perf._tables import ordered_unique
from perf.results_table import merged_rows
from perf.speedup import PR_VS_EAGER, PR_VS_NIGHTLY, Spec, SpeedupRow, compute_speedups

BAR_HEIGHT_INCHES = 0.22
LINE_HEIGHT_INCHES = 0.11  # one line of a 6 pt row label, with its leading
PLOT_WIDTH_INCHES = 9.0  # the bars; the labels get whatever width they need on top
LABEL_CHARS = 90  # row labels wrap at this width
MARGIN_INCHES = 0.2
DPI = 110  # text widths depend on it (hinting): labels are measured at the dpi saved
TOP_INCHES = 0.75  # title (two lines)
BOTTOM_INCHES = 0.55  # x tick labels and axis label
# Row titles are long; drop what every row shares.
SHORTHANDS = (("torch.", ""), (", align_corners: None", ""), ("contiguous_format", "contiguous"))


def row_title(row: SpeedupRow) -> str:
    label = row.label.rsplit(",", 1)[0]  # the device is in the chart title
    title = f"{label} | {row.sub_label}"
    for long, short in SHORTHANDS:
        title = title.replace(long, short)
    return title


def wrapped(title: str) -> str:
    """``title`` in lines of at most ``LABEL_CHARS`` (longer only for one unbroken word), broken
    between parts, never inside a parenthesis (a shape stays on one line)."""
    depth, kept = 0, []
    for char in title:
        depth += {"(": 1, ")": -1}.get(char, 0)
        kept.append("\u00a0" if char == " " and depth > 0 else char)  # textwrap breaks at ASCII space only
    lines = textwrap.wrap("".join(kept), LABEL_CHARS, break_long_words=False)
    return "\n".join(lines).replace("\u00a0", " ")


def _joined(values) -> str:
    known = ordered_unique(str(v) for v in values if v is not None)
    return " / ".join(known) if known else "not recorded"


def chart_title(rows: Sequence[SpeedupRow], title: str = "") -> str:
    """``title`` over a line naming the device, torch version and ``dynamic`` of the compared
    columns' runs (a pickle without the key, e.g. a seed one: device from the row label)."""
    columns = [c for r in rows for c in r.columns.values()]
    devices = _joined(c.device or c.label.rsplit(", ", 1)[-1] for c in columns)
    facts = f"device {devices} | torch {_joined(c.torch_version for c in columns)}"
    facts += f" | dynamic={_joined(c.dynamic for c in columns)}"
    return f"{title}\n{facts}" if title else facts


def speedup_figure(rows: Sequence[SpeedupRow], spec_names: Sequence[str], title: str = ""):
    """Bars from 1x to each speed-up, on a log axis, one group of bars per row; the left margin
    is as wide as the widest (wrapped) row label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    names = [n for n in spec_names if any(n in r.ratios for r in rows)]
    labels = [wrapped(row_title(r)) for r in rows]
    lines = max(label.count("\n") + 1 for label in labels)
    slot = max(BAR_HEIGHT_INCHES * max(len(names), 1), LINE_HEIGHT_INCHES * (lines + 1))
    height = slot * len(rows) + TOP_INCHES + BOTTOM_INCHES
    fig, ax = plt.subplots(figsize=(PLOT_WIDTH_INCHES, height), dpi=DPI)
    bar = 0.8 / max(len(names), 1)
    values = []
    for i, name in enumerate(names):
        points = [(k + i * bar, r.ratios[name]) for k, r in enumerate(rows) if name in r.ratios]
        ax.barh([p for p, _ in points], [v - 1 for _, v in points], left=1, height=bar, label=name)
        for position, value in points:
            ax.text(value, position, f" {value:.2f}x ", va="center", ha="left" if value >= 1 else "right", fontsize=6)
        values += [v for _, v in points]
    ax.set_xscale("log", base=2)
    ax.set_xlim(min(values + [1]) / 2, max(values + [1]) * 2)
    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks([k + bar * (len(names) - 1) / 2 for k in range(len(rows))])
    ax.set_yticklabels(labels, fontsize=6)
    ax.set_ylim(len(rows) - 0.5 + bar * (len(names) - 1) / 2, -0.5 + bar * (len(names) - 1) / 2)
    ax.set_xlabel("speed-up (log scale; > 1: the first column of the compare is faster)")
    ax.set_title(chart_title(rows, title), fontsize=9)
    ax.legend(loc="best", fontsize=7)
    ax.grid(axis="x", which="both", alpha=0.3)
    # Room for the labels as drawn: widen the figure by the widest one.
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    label_width = max(t.get_window_extent(renderer).width for t in ax.get_yticklabels()) / fig.dpi
    left = label_width + 2 * MARGIN_INCHES
    width = left + PLOT_WIDTH_INCHES
    fig.set_size_inches(width, height)
    fig.subplots_adjust(left=left / width, right=1 - MARGIN_INCHES / width,
                        top=1 - TOP_INCHES / height, bottom=BOTTOM_INCHES / height)
    return fig


def plot_speedups(rows: Sequence[SpeedupRow], spec_names: Sequence[str], output: Path, title: str = "") -> None:
    import matplotlib.pyplot as plt

    fig = speedup_figure(rows, spec_names, title)
    fig.savefig(output, dpi=DPI)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.plot", description=__doc__.split("\n")[0])
    parser.add_argument("output", type=Path, help="PNG file to write")
    parser.add_argument("pickles", nargs="+", type=Path)
    parser.add_argument("--compare", action="append", metavar="A;B[;NAME]",
                        help="columns to compare, repeatable (default: PR vs Nightly and PR vs Eager)")
    parser.add_argument("--title", default="", help="first line of the title (a second names the runs)")
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
