"""PR vs Nightly in one command: two benchmark runs, tables and a chart.

    python -m perf OUT_DIR [--quick] [--device auto|cpu|cuda] [--backward] [--mode ...]

Runs ``python -m perf.interp_mode`` twice, each in its own process with its own fresh Inductor
cache under OUT_DIR, ``--tag=Nightly`` (stock torch) and ``--tag=PR`` (imports ``decomps``): side
by side, taking turns after each timed column (``perf.turns``; each one's output in a log file
and on the console after its tag), or with ``--no-lockstep`` Nightly's, then PR's; with
``--processes N``, N such pairs, whose pickles are merged per tag (each column's lowest median);
with ``--devices 0,1,...`` the cases are split into a shard per CUDA device, the shards run side
by side (each its own Nightly and PR processes on its device, output to a log file under OUT_DIR)
and their pickles merge the same way; with ``--shard I/N`` only that
shard of the cases, on one device (``python -m perf.merge`` reports a matrix's shards, run one
after another, as one run); with ``--time-limit SECONDS``
no process starts a case after that time (each taking an equal share of what is left when it
starts), and the reports cover the cases that ran. Then writes the results
table, the speed-up table (compiled PR vs compiled Nightly, compiled PR vs eager) and a PNG chart
of the speed-ups, and prints the speed-up tables and their summary (rows at or ahead per
speed-up column, and each row behind).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from pathlib import Path

from perf import turns
from perf.cases import MODES
from perf.interp_mode import EXIT_NO_PACKAGE, LATE_ROUNDS, non_negative_int, parse_bool, parse_shard, positive_int

REPO_ROOT = Path(__file__).resolve().parent.parent
RUN_ORDER = ("Nightly", "PR")  # Nightly first: it does not depend on the package


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m perf", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder for pickles, tables, chart and Inductor caches")
    parser.add_argument("--quick", action="store_true", help="a small subset of the case matrix")
    parser.add_argument("--device", default="auto", choices=("cpu", "cuda", "auto"),
                        help="auto (default): cuda if available, else cpu")
    parser.add_argument("--backward", action="store_true", help="add fwd+bwd rows for float dtypes")
    parser.add_argument("--mode", default="both", choices=("nearest", "nearest-exact", "both"))
    parser.add_argument("--min-run-time", type=float, default=None, help="seconds per blocked_autorange")
    parser.add_argument("--num-threads", type=int, default=1)
    parser.add_argument("--dynamic", type=parse_bool, nargs="?", const=True, default=True)
    parser.add_argument("--filter", default=None, help="regex on case names (see perf.cases.Case.name)")
    parser.add_argument("--call-forms", default="both", choices=("literal", "symbolic", "both"),
                        help="forms of the rows called with size (see perf.cases)")
    parser.add_argument("--repeat", type=positive_int, default=1,
                        help="rounds of timing per case in each run; keeps each column's lowest median")
    parser.add_argument("--late-rounds", type=non_negative_int, default=LATE_ROUNDS, metavar="N",
                        help="rounds of each row the host decides (host-bound, or CUDA kernels under half of the "
                             "call) timed again after a run's last case (its "
                             f"back-to-back rounds share one of the host's slow or fast spells; default {LATE_ROUNDS})")
    parser.add_argument("--reduce-overhead", action=argparse.BooleanOptionalAction, default=True,
                        help="on CUDA, a mode=\"reduce-overhead\" column for each host-bound row, timed after a "
                             "run's last case (default); --no-reduce-overhead: none, e.g. again for rows behind "
                             "whose run has those columns")
    parser.add_argument("--processes", type=positive_int, default=1,
                        help="runs per tag, a Nightly and a PR process per pair, each in a new process; "
                             "keeps each column's lowest median")
    parser.add_argument("--lockstep", action=argparse.BooleanOptionalAction, default=True,
                        help="run each Nightly and PR process pair side by side, taking turns after each "
                             "timed column (perf.turns), so that both tags' rounds meet the same spells of "
                             "the host's speed (default); --no-lockstep: Nightly's process, then PR's")
    parser.add_argument("--behind", nargs="+", type=Path, default=None, metavar="PICKLE",
                        help="time only the rows that the report of these pickles (a run's PR and Nightly "
                             "pickles) lists as behind, e.g. again with --processes")
    parser.add_argument("--devices", type=parse_devices, default=None,
                        help="CUDA devices to spread the cases over, e.g. 0,1,2,3: a shard of the cases per "
                             "device, run side by side; every row's columns come from one device")
    parser.add_argument("--shard", type=parse_shard, default=None, metavar="I/N",
                        help="only the I-th of N shards of the cases (every N-th case from the I-th), e.g. to "
                             "run a matrix on one device over several calls; python -m perf.merge makes one "
                             "report of the shards' pickles")
    parser.add_argument("--cpus-per-process", type=positive_int, default=None, metavar="N",
                        help="run each timing process on N CPUs (the first N of its shard's slice with "
                             "--devices); default: all of them")
    parser.add_argument("--huge-pages", action="store_true",
                        help="run both tags' processes with THP_MEM_ALLOC_ENABLE=1: PyTorch's CPU allocator "
                             "asks for transparent huge pages for allocations of 2 MB or more")
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                        help="start no case later than SECONDS after the start, each process taking an equal "
                             "share of the time left when it starts; the reports cover the cases run")
    args = parser.parse_args(argv)
    if args.behind and args.filter:
        parser.error("--behind selects the rows itself; it takes no --filter")
    if args.shard and args.devices:
        parser.error("--devices shards the cases itself; it takes no --shard")
    if args.cpus_per_process is not None and args.cpus_per_process < args.num_threads:
        parser.error("--cpus-per-process is below --num-threads: the threads would share CPUs")
    if args.time_limit is not None and args.time_limit <= 0:
        parser.error("--time-limit takes a positive number of seconds")
    if args.devices and (args.device == "cpu" or args.device == "auto" and not _has_cuda()):
        parser.error("--devices spreads CUDA runs; this machine has no CUDA device" if args.device == "auto"
                     else "--devices spreads CUDA runs; it needs --device cuda or auto")
    return args


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def behind_filter(pickles: list[Path], args: argparse.Namespace) -> str:
    """A ``--filter`` that matches exactly the cases of this run's matrix whose rows the report of
    ``pickles`` lists as behind (``perf.speedup.rows_behind``, every compare of the report)."""
    import re

    from perf import speedup
    from perf._pickles import load_run
    from perf.interp_mode import select_cases
    from perf.results_table import merged_rows

    runs = [load_run(p) for p in pickles]
    specs = [speedup.Spec.parse(c) for c in speedup.REPORT_COMPARES]
    rows = speedup.compute_speedups(merged_rows(runs), specs)
    behind = {(r.label, r.sub_label) for listed in speedup.rows_behind(rows, specs).values() for r in listed}
    device = next((run.extra["device"] for run in runs if run.extra.get("device")), None)
    # every case of the matrix, args.filter being unset: with --shard the run's processes take their
    # shard of the rows behind, not of the matrix
    whole = argparse.Namespace(**{**vars(args), "shard": None})
    _, cases = select_cases(whole, device or ("cuda" if _has_cuda() else "cpu"))
    names = [c.name for c in cases if (c.label, c.sub_label) in behind]
    if not names:
        raise SystemExit(f"ERROR: no row of this run's matrix is behind in {', '.join(map(str, pickles))}")
    print(f"--behind: {len(names)} rows behind in {', '.join(p.name for p in pickles)}", flush=True)
    return "^(" + "|".join(map(re.escape, names)) + ")$"


def parse_devices(text: str) -> list[int]:
    """``"0,1,3"`` -> ``[0, 1, 3]``: distinct CUDA device indices."""
    try:
        devices = [int(d) for d in text.split(",")]
    except ValueError:
        devices = []
    if not devices or min(devices) < 0 or len(set(devices)) != len(devices):
        raise argparse.ArgumentTypeError(f"expected distinct device indices like 0,1,2,3, got {text!r}")
    return devices


def child_command(tag: str, args: argparse.Namespace, pickle_name: str,
                  shard: tuple[int, int] | None = None, stop_after: float | None = None) -> list[str]:
    command = [sys.executable, "-m", "perf.interp_mode", str(args.out_dir), f"--tag={tag}",
               f"--mode={args.mode}", f"--device={args.device}", f"--num-threads={args.num_threads}",
               f"--dynamic={args.dynamic}", f"--call-forms={args.call_forms}", f"--repeat={args.repeat}",
               f"--late-rounds={args.late_rounds}",
               f"--pickle-name={pickle_name}"]
    command += ["--quick"] * args.quick + ["--backward"] * args.backward + ["--no-reduce-overhead"] * (not args.reduce_overhead)
    if args.min_run_time is not None:
        command.append(f"--min-run-time={args.min_run_time}")
    if args.filter:
        command.append(f"--filter={args.filter}")
    if shard is not None:
        command.append(f"--shard={shard[0]}/{shard[1]}")
    if stop_after is not None:
        command.append(f"--stop-after={stop_after:.1f}")
    return command


def child_env(cache_dir: Path, device: int | None = None, huge_pages: bool = False) -> dict[str, str]:
    """The parent's environment with a private Inductor and Triton cache (and, for a shard, its
    one visible CUDA device and no compile workers; with ``huge_pages``, ``THP_MEM_ALLOC_ENABLE=1``,
    which PyTorch's CPU allocator reads once, at its first allocation)."""
    env = dict(os.environ)
    if huge_pages:
        env["THP_MEM_ALLOC_ENABLE"] = "1"
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    env["TRITON_CACHE_DIR"] = str(cache_dir / "triton")
    env["PYTHONUNBUFFERED"] = "1"
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device)
        # A shard compiles in its own process, on one core: a pool of compile workers busy on its
        # CPU slice slows the host-bound rows that the other shards time meanwhile (docs/perf.md).
        env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    return env


def failure_message(tag: str, rc: int) -> str | None:
    """What to report for a run's exit status (None for success). Only EXIT_NO_PACKAGE, which
    nothing else returns, means that the PR run could not import the package."""
    if rc == 0:
        return None
    if rc == EXIT_NO_PACKAGE and tag == "PR":
        return "ERROR: the PR run could not import the 'decomps' package (see above); no PR results."
    return f"ERROR: the {tag} run exited with status {rc} (see above)."


def tag_process(tag: str, args: argparse.Namespace, stem: str, shard: tuple[int, int] | None = None,
                device: int | None = None, stop_after: float | None = None) -> tuple[list[str], dict, list | None, Path]:
    """One benchmark process's command, environment, CPUs (``process_cpus``) and pickle. ``stem``
    names the pickle ``<stem>-<tag>.pkl`` and its private cache."""
    out_dir = args.out_dir.resolve()
    pickle_path, cache_dir = out_dir / f"{stem}-{tag}.pkl", out_dir / f"inductor-cache-{stem}-{tag}"
    command = child_command(tag, args, pickle_path.name, shard, stop_after)
    env = child_env(cache_dir, device, args.huge_pages)
    cpus = process_cpus(sorted(os.sched_getaffinity(0)), None if device is None else shard, args.cpus_per_process)
    return command, env, cpus, pickle_path


def pinned_to(cpus: list[int] | None) -> dict:
    """``subprocess`` keywords that run a child on ``cpus`` (None: the parent's)."""
    return {} if cpus is None else {"preexec_fn": partial(os.sched_setaffinity, 0, cpus)}


def run_tag(tag: str, args: argparse.Namespace, stem: str, shard: tuple[int, int] | None = None,
            device: int | None = None, stop_after: float | None = None) -> tuple[Path | None, int]:
    """One benchmark process; returns its pickle (None if it wrote none) and exit status.
    ``stem`` names the pickle ``<stem>-<tag>.pkl`` and its private cache. A shard's process runs
    on ``device`` alone and writes its output to ``<stem>-<tag>.log`` (a ``--shard`` run, with no
    ``device``, prints it). ``stop_after``: the seconds after which the process starts no case
    (None: no limit)."""
    command, env, cpus, pickle_path = tag_process(tag, args, stem, shard, device, stop_after)
    pinned = pinned_to(cpus)
    if device is None:
        on = "" if cpus is None else f", {len(cpus)} CPUs"
        print(f"\n===== {tag} run (Inductor cache: {env['TORCHINDUCTOR_CACHE_DIR']}{on}) =====", flush=True)
        rc = subprocess.call(command, cwd=REPO_ROOT, env=env, **pinned)
    else:
        log = args.out_dir.resolve() / f"{stem}-{tag}.log"
        print(f"===== {tag} run, shard {shard[0]}/{shard[1]} on CUDA device {device}, {len(cpus)} CPUs "
              f"(output: {log})", flush=True)
        with open(log, "w") as f:
            rc = subprocess.call(command, cwd=REPO_ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, **pinned)
    return _finished(tag, pickle_path, rc, shard)


def run_pair(args: argparse.Namespace, stem: str, shard: tuple[int, int] | None = None,
             device: int | None = None, stop_after: float | None = None) -> list[tuple[Path | None, int]]:
    """A Nightly and a PR process side by side, taking turns (``perf.turns``): one pipe each way,
    the token first in Nightly's. Each one's output goes to ``<stem>-<tag>.log`` and, but for a
    shard of ``--devices``, to the console, each line after its tag. Returns each tag's pickle
    and exit status, in ``RUN_ORDER``."""
    to_nightly, to_pr = os.pipe(), os.pipe()  # (read end, write end)
    ends = {"Nightly": (to_nightly[0], to_pr[1]), "PR": (to_pr[0], to_nightly[1])}
    os.write(to_nightly[1], turns.TOKEN)
    out_dir = args.out_dir.resolve()
    print(f"\n===== Nightly and PR runs side by side, taking turns"
          + (f", shard {shard[0]}/{shard[1]} on CUDA device {device}" if device is not None else "")
          + f" (output: {out_dir / stem}-<tag>.log) =====", flush=True)
    processes, relays = [], []
    try:
        for tag in RUN_ORDER:
            command, env, cpus, pickle_path = tag_process(tag, args, stem, shard, device, stop_after)
            command.append("--turns={},{}".format(*ends[tag]))
            process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, pass_fds=ends[tag], **pinned_to(cpus))
            echo = f"[{tag}] " if device is None else None
            relays.append(threading.Thread(target=relay, args=(process.stdout, out_dir / f"{stem}-{tag}.log", echo)))
            relays[-1].start()
            processes.append((tag, process, pickle_path))
    finally:
        for fd in (*to_nightly, *to_pr):  # only the children hold the ring: one's exit ends the other's waits
            os.close(fd)
    results = [_finished(tag, pickle_path, process.wait(), shard) for tag, process, pickle_path in processes]
    for thread in relays:
        thread.join()
    return results


def relay(stream, log: Path, prefix: str | None) -> None:
    """Copy a child's output, line by line, to ``log`` and (with a ``prefix``) to the console."""
    with open(log, "w") as f:
        for line in stream:
            f.write(line)
            f.flush()
            if prefix is not None:
                print(prefix + line, end="", flush=True)


def _finished(tag: str, pickle_path: Path, rc: int, shard: tuple[int, int] | None) -> tuple[Path | None, int]:
    message = failure_message(tag, rc)
    if message:
        print(f"\n{message}" + (f" (shard {shard[0]}/{shard[1]})" if shard else ""), file=sys.stderr)
    return (pickle_path if pickle_path.is_file() else None), rc


def process_cpus(cpus: list[int], shard: tuple[int, int] | None, count: int | None) -> list[int] | None:
    """The CPUs a timing process runs on: its shard's slice of ``cpus`` (``shard_cpus``), or the
    first ``count`` of them (of ``cpus`` without shards); None: the parent's, unchanged. A compiled
    training step hands its backward to the autograd engine's device thread and waits for it: on
    the H200 hosts' virtual CPUs, an empty compiled step took 141.6-151.6 us on one or two CPUs
    and 181.2-321.3 us on sixteen (docs/findings.md, finding 8)."""
    if shard is not None:
        cpus = shard_cpus(cpus, shard)
    elif count is None:
        return None
    return cpus[:count] if count else cpus


def shard_cpus(cpus: list[int], shard: tuple[int, int]) -> list[int]:
    """The I-th of N equal slices of ``cpus`` (all of them where there are fewer than N): a shard's
    host-bound rows are timed on cores that no other shard uses."""
    index, count = shard
    size = len(cpus) // count
    return cpus[(index - 1) * size:index * size] if size else cpus


def run_stem(stem: str, args: argparse.Namespace, shard: int | None, process: int) -> str:
    """The stem of one process's pickle: the run's, with its shard and its process number."""
    if shard is not None:
        stem += f"-shard{shard}"
    return stem if args.processes == 1 else f"{stem}-process{process}"


def run_processes(args: argparse.Namespace, stem: str, shard: int | None = None,
                  deadline: float | None = None) -> tuple[dict, list]:
    """``args.processes`` pairs of runs, alternating Nightly and PR, of every case (of
    ``args.shard``'s) or of one shard (1-based, of ``args.devices``); returns each tag's pickles
    and the exit statuses. With a
    ``deadline`` (``time.monotonic()``), each process may start cases for an equal share of the
    time left when it starts (a process that starts slower reaches fewer of them), and no process
    starts after it."""
    runs, statuses = {tag: [] for tag in RUN_ORDER}, []
    of_shard = args.shard if shard is None else (shard, len(args.devices))
    device = None if shard is None else args.devices[shard - 1]
    # with --lockstep (the default) a pair's two processes are one step, side by side
    tags = (RUN_ORDER,) if args.lockstep else tuple((tag,) for tag in RUN_ORDER)
    order = [(i, step) for i in range(1, args.processes + 1) for step in tags]
    for n, (i, step) in enumerate(order):
        stop_after = None
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                print(f"Time limit: {len(step) * (len(order) - n)} process(es) not started"
                      + (f" (shard {shard}/{len(args.devices)})" if shard else ""), file=sys.stderr)
                break
            stop_after = left / (len(order) - n)
        process_stem = run_stem(stem, args, shard, i)
        if args.lockstep:
            results = run_pair(args, process_stem, of_shard, device, stop_after)
        else:
            results = [run_tag(step[0], args, process_stem, of_shard, device, stop_after)]
        for tag, (path, rc) in zip(step, results):
            statuses.append(rc)
            if path is not None:
                runs[tag].append(path)
    return runs, statuses


def write_reports(runs: dict, out_dir: Path, stem: str) -> tuple[list[Path], str | None]:
    """Results table always; speed-up table and chart when both tags have comparable results.

    Returns the files written and the speed-up tables (None when there are none).
    """
    from perf import plot, results_table, speedup

    results_md = out_dir / f"{stem}-results.md"
    results_md.write_text(results_table.render(list(runs.values())))
    if set(runs) != set(RUN_ORDER):
        print("ERROR: only the " + ", ".join(runs) + " run has results; no speed-up table.", file=sys.stderr)
        return [results_md], None
    specs = [speedup.Spec.parse(c) for c in speedup.REPORT_COMPARES]
    try:
        rows = speedup.compute_speedups(results_table.merged_rows(list(runs.values())), specs)
    except speedup.SpeedupError as e:
        print(f"ERROR: no speed-up table: {e}", file=sys.stderr)
        return [results_md], None
    speedup_md, chart = out_dir / f"{stem}-speedup.md", out_dir / f"{stem}-speedup.png"
    speedup_md.write_text(speedup.render(list(runs.values()), specs))
    tables = speedup.render_tables(list(runs.values()), specs)
    try:
        plot.plot_speedups(rows, [s.name for s in specs], chart, title=f"decomps speed-ups ({stem})")
    except ImportError as e:
        print(f"ERROR: no chart ({e}); install matplotlib, e.g. pip install -e '.[perf]'.", file=sys.stderr)
        return [results_md, speedup_md], tables
    return [results_md, speedup_md, chart], tables


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.behind:
        args.filter = behind_filter(args.behind, args)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    modes = MODES if args.mode == "both" else (args.mode,)
    stem = f"{datetime.now():%Y%m%d-%H%M%S}-upsample-{'-'.join(modes)}"
    if args.shard:
        stem += f"-shard{args.shard[0]}of{args.shard[1]}"
    start = time.perf_counter()
    deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
    if args.devices:
        with ThreadPoolExecutor(len(args.devices)) as pool:
            shards = list(pool.map(partial(run_processes, args, stem, deadline=deadline),
                                   range(1, len(args.devices) + 1)))
    else:
        shards = [run_processes(args, stem, deadline=deadline)]
    runs = {tag: [p for shard_runs, _ in shards for p in shard_runs[tag]] for tag in RUN_ORDER}
    statuses = [rc for _, shard_statuses in shards for rc in shard_statuses]

    from perf._pickles import load_run, merge_runs

    pickles = {}
    for tag, paths in runs.items():
        if len(paths) == 1 and not args.devices:
            pickles[tag] = paths[0]
        elif paths:  # several processes or shards: one pickle of their best medians
            pickles[tag] = args.out_dir.resolve() / f"{stem}-{tag}.pkl"
            merge_runs(paths, pickles[tag])
    if not pickles:
        print("ERROR: no run produced a pickle.", file=sys.stderr)
        return 1

    written, speedup_tables = write_reports({tag: load_run(p) for tag, p in pickles.items()}, args.out_dir, stem)
    if speedup_tables:
        print("\n" + speedup_tables)
    print(f"Done in {time.perf_counter() - start:.0f}s. Outputs:")
    for path in [*pickles.values(), *written]:
        print(f"  {path}")
    return 0 if speedup_tables and not any(statuses) else 1


if __name__ == "__main__":
    raise SystemExit(main())
