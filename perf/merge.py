"""One report from the shards of a matrix, run one after another.

    python -m perf.merge OUT_DIR PICKLE [PICKLE ...] [--reruns PICKLE ...] [--drop REGEX]

``python -m perf --shard I/N`` runs the I-th of N shards of the case matrix, its Nightly and PR
processes side by side, as ``--devices`` runs one shard per device; this merges the pickles of
such runs (each run's Nightly and PR pickles) into one pickle per tag and writes the reports
that ``python -m perf`` writes, under OUT_DIR. Every row comes from the one run that timed it, so
its ratios compare the columns of one run. It refuses pickles that are not shards of one
``N``, repeat a shard, or differ in device, ``dynamic`` or ``--huge-pages``, and says which
shards are missing.

``--reruns`` adds later runs of some of the matrix's rows (``python -m perf --behind``, or a
``--filter``, of the same device and ``dynamic``): each column keeps its lowest median over the
shards and the reruns, as ``--processes`` merges its processes, so such a row's ratio may compare
columns of different runs. ``--drop REGEX`` leaves out of the shards' pickles every row whose
``label | sub_label`` matches (rows whose code changed since the shards ran), so that those rows
come from the reruns alone.

Exit status as ``python -m perf``: 1 when a tag has no pickle, a shard is missing, or a run
recorded a mismatch or a failed case.
"""

from __future__ import annotations

import argparse
import pickle
import re
import sys
from pathlib import Path

from perf.__main__ import RUN_ORDER, write_reports


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m perf.merge", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder for the merged pickles and the reports")
    parser.add_argument("pickles", nargs="+", type=Path, help="the Nightly and PR pickles of --shard runs")
    parser.add_argument("--reruns", nargs="+", type=Path, default=[], metavar="PICKLE",
                        help="pickles of later runs of some rows: each column its lowest median over shards and reruns")
    parser.add_argument("--drop", type=re.compile, default=None, metavar="REGEX",
                        help="rows ('label | sub_label') taken from the reruns only, not from the shards")
    return parser.parse_args(argv)


def _payload(path: Path) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


def group_shards(paths: list[Path]) -> tuple[dict[str, list[Path]], int, list[int]]:
    """The pickles per tag, the shard count N and the shards (1-based) that no pickle holds.
    Raises ``SystemExit`` where the pickles are not the shards of one matrix run in one setting."""
    by_tag: dict[str, dict[int, Path]] = {}
    counts, settings = set(), set()
    for path in paths:
        payload = _payload(path)
        shard, tag = payload.get("shard"), payload.get("tag")
        if not shard or tag not in RUN_ORDER:
            raise SystemExit(f"ERROR: {path} is not the pickle of a `python -m perf --shard I/N` run")
        index, count = shard
        if index in by_tag.setdefault(tag, {}):
            raise SystemExit(f"ERROR: shard {index}/{count} of {tag} twice: {by_tag[tag][index]} and {path}")
        by_tag[tag][index] = path
        counts.add(count)
        settings.add(_setting(payload))
    if len(counts) != 1:
        raise SystemExit(f"ERROR: shards of different counts ({sorted(counts)}): not one matrix")
    if len(settings) != 1:
        raise SystemExit(f"ERROR: the runs differ in (device, dynamic, huge pages): {sorted(settings, key=str)}")
    (count,) = counts
    missing = sorted(i for i in range(1, count + 1) if any(i not in shards for shards in by_tag.values()))
    return {tag: [by_tag[tag][i] for i in sorted(by_tag[tag])] for tag in by_tag}, count, missing


def group_reruns(paths: list[Path], shard: Path) -> dict[str, list[Path]]:
    """The reruns' pickles per tag. Raises ``SystemExit`` where one is of another device or
    ``dynamic`` than the shard ``shard``."""
    setting = _setting(_payload(shard))
    by_tag: dict[str, list[Path]] = {}
    for path in paths:
        payload = _payload(path)
        if payload.get("tag") not in RUN_ORDER:
            raise SystemExit(f"ERROR: {path} is not the pickle of a `python -m perf` run")
        if _setting(payload) != setting:
            raise SystemExit(f"ERROR: {path} differs from the shards in (device, dynamic, huge pages)")
        by_tag.setdefault(payload["tag"], []).append(path)
    return by_tag


def _setting(payload: dict) -> tuple:
    return payload.get("device"), payload.get("dynamic"), bool(payload.get("huge_pages"))


def main(argv=None) -> int:
    from perf._pickles import load_run, merge_runs

    args = parse_args(argv)
    grouped, count, missing = group_shards(args.pickles)
    reruns = group_reruns(args.reruns, args.pickles[0])
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"merged-{count}-shards" + ("-with-reruns" if reruns else "")
    runs = {}
    for tag, paths in grouped.items():
        path = args.out_dir.resolve() / f"{stem}-{tag}.pkl"
        # --drop applies to the shards, the first len(paths) pickles
        skip = None if args.drop is None else (
            lambda index, key: index < len(paths) and args.drop.search(f"{key[0]} | {key[1]}") is not None)
        merge_runs(paths + reruns.get(tag, []), path, skip)
        runs[tag] = load_run(path)
    print(f"Shards of {count}: " + ", ".join(f"{tag} {len(paths)}" for tag, paths in grouped.items())
          + (f"; missing: {', '.join(map(str, missing))}" if missing else "; all present")
          + (f"; reruns: {', '.join(f'{tag} {len(paths)}' for tag, paths in reruns.items())}" if reruns else ""),
          flush=True)
    written, tables = write_reports(runs, args.out_dir, stem)
    if tables:
        print("\n" + tables)
    problems = any(run.errors or any(row.problem for row in run.rows) for run in runs.values())
    for path in written:
        print(f"  {path}")
    return 0 if tables and not missing and not problems and set(runs) == set(RUN_ORDER) else 1


if __name__ == "__main__":
    sys.exit(main())
