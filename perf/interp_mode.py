"""One benchmark run (one tag, one process): eager vs compiled nearest upsampling.

    python -m perf.interp_mode OUTPUT_DIR --tag=PR --mode=nearest

``--tag=PR`` imports the ``decomps`` package before compiling; ``--tag=Nightly``
is stock torch and never imports it. Writes one pickle in the seed PR's
format (see docs/perf.md) and exits non-zero if any compiled result differs
from eager or any case fails (the pickle is written anyway). The pickle is
rewritten after every case, so a run stopped early keeps the cases it finished.

Before the cases, a "Compiled call overhead" row times a one-op graph (``x + 1``) with the
same ``dynamic``: the host cost of a compiled call. With ``--backward`` a second row times an
empty compiled training step (``x * 2``, fwd+bwd); fwd+bwd rows whose eager time is below it
count as host-bound. On CUDA, host-bound rows (and these two) get a ``mode="reduce-overhead"``
column, timed after every row's Eager and Compiled columns: a CUDA graph that has run in the
process can slow later plain compiled calls. Host-bound rows (these two included), and on CUDA
the rows whose compiled kernels take under half of the compiled call, are timed
again after the last case (``--late-rounds``, default 1 round), each column keeping its lowest
median: a host's speed moves in spells of seconds, and a row's back-to-back rounds share one.
``--repeat N`` times each case's columns in N interleaved rounds and keeps each column's lowest
median. ``--shard I/N`` runs every N-th case from the I-th (``python -m perf
--devices`` runs a shard per CUDA device). On CUDA each row also records its Eager and Compiled
columns' GPU kernel time per call (``kernel_us``). ``--turns`` (from ``python -m perf --lockstep``)
makes the process take turns with its partner tag's, one timed column each (``perf.turns``).

Each run must use its own Inductor cache: if ``TORCHINDUCTOR_CACHE_DIR`` is
not set, a fresh temporary one is created before torch is imported.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import re
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

from perf import turns
from perf.cases import CALL_FORMS, MODES, make_cases  # torch-free: safe before the cache directory is set

PACKAGE = "decomps"
TAGS = ("PR", "Nightly")
# Exit statuses: 1 is Python's for an uncaught exception or SystemExit(message), 2 argparse's
# for a usage error, so a failed `import decomps` gets one that nothing else returns.
EXIT_PROBLEMS = 3
EXIT_NO_PACKAGE = 4
QUICK_MIN_RUN_TIME = 0.25
DEFAULT_MIN_RUN_TIME = 2.0
COPY_MIN_RUN_TIME = 1.0
ERROR_CHARS = 500
# A host's speed moves in spells of seconds (docs/findings.md, finding 8): a host-bound row's
# rounds, back to back, fall in one spell; a late round, a whole run of cases later, in another.
LATE_ROUNDS = 1
# A row's late rounds, or its reduce-overhead column, take about this share of the time its case
# took. On an H200 with both tags taking turns: 24 training steps, 11.3 s per case and 5.0 s per
# such column (0.44); a sixteenth of the matrix (8fedd9d, shard 2, Nightly), its host-decided
# cases 6.4 s each and 13 such columns in the 40-51 s its time limit left, 3.1-3.9 s each
# (0.48-0.61). Under a time limit the cases stop early enough to leave it (the overhead rows'
# columns included); each tail line prints its column's seconds.
TAIL_SHARE = 0.6


def parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m perf.interp_mode", description=__doc__.split("\n")[0])
    parser.add_argument("output_dir", type=Path, help="folder for the pickle (created if missing)")
    parser.add_argument("--tag", required=True, choices=TAGS, help=f"PR imports {PACKAGE}; Nightly never does")
    parser.add_argument("--mode", default="both", choices=("nearest", "nearest-exact", "both"))
    parser.add_argument("--device", default="auto", choices=("cpu", "cuda", "auto"),
                        help="auto: cuda if available, else cpu")
    parser.add_argument("--min-run-time", type=float, default=None,
                        help=f"seconds per blocked_autorange (default {DEFAULT_MIN_RUN_TIME}, "
                             f"{QUICK_MIN_RUN_TIME} with --quick)")
    parser.add_argument("--num-threads", type=int, default=1)
    parser.add_argument("--dynamic", type=parse_bool, nargs="?", const=True, default=True,
                        help="torch.compile(dynamic=...) (default true)")
    parser.add_argument("--backward", action="store_true", help="add fwd+bwd rows for float dtypes")
    parser.add_argument("--quick", action="store_true", help="a small subset of the case matrix")
    parser.add_argument("--filter", default=None, help=argparse.SUPPRESS)  # regex on case names
    parser.add_argument("--call-forms", default="both", choices=("literal", "symbolic", "both"),
                        help="forms of the rows called with size (see perf.cases; default both)")
    parser.add_argument("--repeat", type=positive_int, default=1,
                        help="rounds of timing per case, interleaving its columns; each column keeps "
                             "its lowest median (default 1)")
    parser.add_argument("--late-rounds", type=non_negative_int, default=LATE_ROUNDS,
                        help="rounds of each row the host decides (host-bound, or CUDA kernels under half of the "
                             "call) timed again after the last case, its columns "
                             f"keeping their lowest median over all its rounds (default {LATE_ROUNDS})")
    parser.add_argument("--reduce-overhead", action=argparse.BooleanOptionalAction, default=True,
                        help="time a mode=\"reduce-overhead\" column of each host-bound row on CUDA after the "
                             "last case (default); --no-reduce-overhead: none, e.g. for rows whose run has them")
    parser.add_argument("--pickle-name", default=None, help="file name of the pickle (default: timestamped)")
    parser.add_argument("--shard", type=parse_shard, default=None,
                        help="I/N: only the I-th of N shards of the cases (every N-th case from the I-th)")
    parser.add_argument("--stop-after", type=float, default=None, metavar="SECONDS",
                        help="start no case later than SECONDS after this process started")
    parser.add_argument("--turns", type=turns.parse_fds, default=None, metavar="READ_FD,WRITE_FD",
                        help="take turns with a partner process through these pipe ends (perf.turns; "
                             "python -m perf --lockstep passes them)")
    return parser


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)`` with ``1 <= I <= N``."""
    match = re.fullmatch(r"(\d+)/(\d+)", text)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise argparse.ArgumentTypeError(f"expected I/N with 1 <= I <= N, got {text!r}")
    return int(match[1]), int(match[2])


def shard_of(cases: list, shard: tuple[int, int] | None) -> list:
    """Every N-th case from the I-th: neighbouring cases (one shape's modes, layouts and dtypes)
    go to different shards, so shards take about equal time."""
    if shard is None:
        return cases
    index, count = shard
    return cases[index - 1::count]


def ensure_private_cache_dir(tag: str) -> str:
    """Give this process its own Inductor (and Triton) cache unless the caller chose one.

    Must run before torch is imported, so that no kernel compiled by a run of
    another tag (or an earlier run) is reused.
    """
    cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not cache_dir:
        cache_dir = tempfile.mkdtemp(prefix=f"perf-inductor-{tag}-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(cache_dir, "triton"))
    return cache_dir


def load_package(tag: str) -> dict | None:
    """Import the package for PR runs; make sure Nightly runs never have it."""
    if tag == "Nightly":
        assert_package_absent()
        return None
    try:
        module = importlib.import_module(PACKAGE)
    except Exception:
        traceback.print_exc()
        _no_package(f"`import {PACKAGE}` failed (above)")
    if getattr(module, "__file__", None) is None:  # a bare folder imports as a namespace package
        _no_package(f"`import {PACKAGE}` found only a folder without __init__.py at {list(module.__path__)}")
    return {"name": PACKAGE, "file": module.__file__, "version": getattr(module, "__version__", None)}


def _no_package(reason: str):
    print(f"\nERROR: --tag=PR needs the '{PACKAGE}' package, but {reason}.\n"
          f"Run from the repository root (python -m perf.interp_mode ...) or install the package.",
          file=sys.stderr)
    raise SystemExit(EXIT_NO_PACKAGE)


def assert_package_absent() -> None:
    if PACKAGE in sys.modules:
        raise SystemExit(f"ERROR: '{PACKAGE}' was imported in a Nightly run; its numbers would not be stock torch.")


def cpu_name() -> str | None:
    """The CPU's model name (Linux's /proc/cpuinfo), else what ``platform`` knows, else None."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def selected_call_forms(args) -> tuple[str, ...]:
    return CALL_FORMS if args.call_forms == "both" else (args.call_forms,)


def default_pickle_name(modes, tag: str) -> str:
    now = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{now}-upsample-{'-'.join(modes)}-{tag}.pkl"


def select_cases(args, device: str):
    modes = MODES if args.mode == "both" else (args.mode,)
    cases = make_cases(device, quick=args.quick, modes=modes, backward=args.backward,
                       call_forms=selected_call_forms(args))
    if args.filter:
        cases = [c for c in cases if re.search(args.filter, c.name)]
        if not cases:
            raise SystemExit(f"ERROR: --filter {args.filter!r} matches no case")
    return modes, shard_of(cases, getattr(args, "shard", None))


def progress_line(i: int, n: int, name: str, start: float, summary: str) -> str:
    elapsed = time.perf_counter() - start
    eta = elapsed / i * (n - i)
    return f"[{i}/{n}] {name} elapsed {elapsed:.1f}s ETA {eta:.0f}s | {summary}"


def short_message(error: Exception, limit: int = ERROR_CHARS) -> str:
    """The exception's message on one line, cut to ``limit`` characters (the traceback is printed)."""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def summarize(result) -> str:
    """``eager 1.23 ms, compiled 0.98 ms (compile 4.1s), matches eager``: one part per column."""
    from perf._tables import format_time, select_unit

    unit, scale = select_unit(min(m.median for m in result.measurements))
    times = []
    for m in result.measurements:
        description = m.task_spec.description
        times.append(f"{description.split(' (')[0].lower()} {format_time(m.median, scale)} {unit}")
        if description in result.compile_seconds:
            times[-1] += f" (compile {result.compile_seconds[description]:.1f}s)"
    problems = "; ".join(f"{d}: {p}" for d, p in result.problems.items())
    return ", ".join(times) + (f", MISMATCH: {problems}" if problems else ", matches eager")


@dataclass
class Collected:
    """Everything a run stores, filled case by case."""

    test_results: list = field(default_factory=list)
    roofline: dict = field(default_factory=dict)
    mismatches: dict = field(default_factory=dict)  # only Compiled columns: eager is the reference
    compile_seconds: dict = field(default_factory=dict)  # only Compiled columns
    spread: dict = field(default_factory=dict)
    page_faults: dict = field(default_factory=dict)  # CPU columns
    kernel_us: dict = field(default_factory=dict)  # CUDA columns: GPU kernels per call
    errors: list = field(default_factory=list)
    compiled_call_overhead_us: float | None = None
    compiled_step_overhead_us: float | None = None
    cases_left: int = 0  # not started: the process's time limit (--stop-after)
    # rows whose reduce-overhead column is still to time: (name, a function that times it)
    reduce_overhead_left: list = field(default_factory=list)
    # rows whose late rounds are still to time (CaseResult.late_rounds): (name, a function that times them,
    # what merges their result: merge_late_rounds, or the overhead rows' own)
    late_rounds_left: list = field(default_factory=list)
    # seconds that those columns are expected to take (TAIL_SHARE of the time of each row that queued one)
    tail_seconds: float = 0.0

    def queue_later(self, left: list, entry: tuple, row_seconds: float) -> None:
        """Queue a row's late rounds or reduce-overhead column (``entry`` on ``left``), timed after
        the process's last case, and keep ``TAIL_SHARE`` of the row's time (``row_seconds``) for it."""
        left.append(entry)
        self.tail_seconds += TAIL_SHARE * row_seconds

    def add(self, result) -> None:
        self.test_results += result.measurements
        for m in result.measurements:
            description = m.task_spec.description
            key = (m.task_spec.label, m.task_spec.sub_label, description)
            for keyed, per_column in ((self.compile_seconds, result.compile_seconds),
                                      (self.roofline, result.roofline), (self.mismatches, result.problems),
                                      (self.spread, result.spread),
                                      (self.page_faults, result.page_faults),
                                      (self.kernel_us, result.kernel_us)):
                if description in per_column:
                    keyed[key] = per_column[description]

    def merge_late_rounds(self, result) -> None:
        """A row's late rounds (``run_late_rounds``): each column keeps the measurement with the
        lowest median of all the row's rounds, with its roofline and page faults, and the spread
        of all of them; a mismatch of the late compile is recorded like a first one."""
        from perf._pickles import join_spreads

        index = {(m.task_spec.label, m.task_spec.sub_label, m.task_spec.description): i
                 for i, m in enumerate(self.test_results)}
        for m in result.measurements:
            description = m.task_spec.description
            key = (m.task_spec.label, m.task_spec.sub_label, description)
            if description in result.problems:
                self.mismatches.setdefault(key, result.problems[description])
            if key not in index:  # a column the first rounds did not time
                continue
            if key in self.spread and description in result.spread:
                self.spread[key] = join_spreads(self.spread[key], result.spread[description])
            if m.median < self.test_results[index[key]].median:
                self.test_results[index[key]] = m
                for keyed, per_column in ((self.roofline, result.roofline), (self.page_faults, result.page_faults)):
                    if description in per_column:
                        keyed[key] = per_column[description]

    def add_call_overhead(self, result) -> None:
        """The overhead row, and the compiled call's median (us) as ``compiled_call_overhead_us``."""
        self.add(result)
        self.compiled_call_overhead_us = _compiled_median_us(result)

    def add_step_overhead(self, result) -> None:
        """The fwd+bwd overhead row, and the compiled step's median (us) as ``compiled_step_overhead_us``."""
        self.add(result)
        self.compiled_step_overhead_us = _compiled_median_us(result)

    def merge_late_call_overhead(self, result) -> None:
        self.merge_late_rounds(result)
        self.compiled_call_overhead_us = min(self.compiled_call_overhead_us, _compiled_median_us(result))

    def merge_late_step_overhead(self, result) -> None:
        self.merge_late_rounds(result)
        self.compiled_step_overhead_us = min(self.compiled_step_overhead_us, _compiled_median_us(result))

    def step_overhead_seconds(self) -> float | None:
        return None if self.compiled_step_overhead_us is None else self.compiled_step_overhead_us * 1e-6

    def pickle_keys(self) -> dict:
        return {"roofline": self.roofline, "mismatches": self.mismatches, "errors": self.errors,
                "compile_seconds": self.compile_seconds, "spread": self.spread, "page_faults": self.page_faults,
                "kernel_us": self.kernel_us,
                "compiled_call_overhead_us": self.compiled_call_overhead_us,
                "compiled_step_overhead_us": self.compiled_step_overhead_us, "cases_left": self.cases_left}


def _compiled_median_us(result) -> float:
    """The median (us) of the Compiled column (not the reduce-overhead one) of an overhead row."""
    compiled = next(m for m in result.measurements if m.task_spec.description.startswith("Compiled ("))
    return compiled.median * 1e6


def measure_overheads(args, device: str, min_run_time: float, collected: Collected) -> None:
    """The "Compiled call overhead" rows, timed like a case: a compiled call, and with
    ``--backward`` an empty compiled fwd+bwd step. A failure is recorded, not raised."""
    from perf import bench

    rows = [(bench.OVERHEAD_SUB_LABEL, bench.measure_call_overhead, collected.add_call_overhead,
             collected.merge_late_call_overhead)]
    if args.backward:
        rows.append((bench.STEP_OVERHEAD_SUB_LABEL, bench.measure_step_overhead, collected.add_step_overhead,
                     collected.merge_late_step_overhead))
    options = dict(dynamic=args.dynamic, num_threads=args.num_threads, min_run_time=min_run_time, repeat=args.repeat)
    for sub_label, measure, add, merge_late in rows:
        name = f"{bench.OVERHEAD_LABEL} ({sub_label})"
        row_start = time.perf_counter()
        result, summary = _record(name, partial(measure, device, args.tag, **options), collected, device, add)
        row_seconds = time.perf_counter() - row_start
        if result is not None and result.reduce_overhead and args.reduce_overhead:
            collected.queue_later(collected.reduce_overhead_left, (name, partial(
                bench.measure_overhead_reduce_overhead, sub_label, device, args.tag, **options)), row_seconds)
        if result is not None and result.late_rounds and args.late_rounds:
            late = dict(options, repeat=args.late_rounds, kernels=False)
            collected.queue_later(collected.late_rounds_left,
                                  (name, partial(measure, device, args.tag, **late), merge_late), row_seconds)
        print(f"{name}: {summary}", flush=True)


def _record(name: str, measure, collected: Collected, device: str, add=None):
    """``measure()`` for row ``name``, its result added to ``collected`` (by ``add``, default
    ``collected.add``); a failure is recorded (``collected.errors``), not raised. Returns the
    result (None where it failed) and the progress line's summary."""
    import torch

    try:
        result = measure()
    except Exception as e:
        traceback.print_exc()
        error = f"{type(e).__name__}: {short_message(e)}"
        collected.errors.append(f"{name}: {error}")
        return None, f"FAILED: {error}"
    else:
        (add or collected.add)(result)
        for description, problem in result.problems.items():
            print(f"!!!!! MISMATCH: {description} != eager for {name}: {problem}", flush=True)
        return result, summarize(result)
    finally:
        if device == "cuda":
            torch.cuda.empty_cache()


def run_cases(cases, args, device: str, min_run_time: float, copy_gbps: float | None,
              save=lambda collected: None, collected: Collected | None = None,
              step_overhead_seconds: float | None = None, deadline: float | None = None) -> Collected:
    """Run every case, printing one progress line each; failures are recorded, not raised.

    ``save(collected)`` runs after each case, so that a run stopped early (a time limit) keeps the
    cases it finished. ``step_overhead_seconds`` (the run's empty compiled fwd+bwd step, None if
    not measured) is the host-bound threshold of fwd+bwd rows (``bench.workload_host_bound_seconds``).
    No case starts where ``deadline`` (``time.perf_counter()``; None: no limit) would leave less
    than ``collected.tail_seconds`` for the late rounds and reduce-overhead columns of the cases
    run, which come after the last case: the cases left are counted in ``collected.cases_left``.
    """
    from perf import bench

    collected = Collected() if collected is None else collected
    start = time.perf_counter()
    for i, case in enumerate(cases, 1):
        case_start = time.perf_counter()
        if deadline is not None and case_start + collected.tail_seconds >= deadline:
            collected.cases_left = len(cases) - i + 1
            print(f"Time limit: {collected.cases_left} of {len(cases)} cases not started "
                  f"({collected.tail_seconds:.0f} s kept for the rows' late rounds and reduce-overhead columns)", flush=True)
            break
        result, summary = _record(case.name, partial(
            bench.run_case, case, args.tag, dynamic=args.dynamic, num_threads=args.num_threads,
            min_run_time=min_run_time, copy_gbps=copy_gbps, repeat=args.repeat,
            step_overhead_seconds=step_overhead_seconds), collected, device)
        case_seconds = time.perf_counter() - case_start
        if result is not None and result.reduce_overhead and args.reduce_overhead:
            collected.queue_later(collected.reduce_overhead_left, (case.name, partial(
                bench.run_case_reduce_overhead, case, args.tag, dynamic=args.dynamic,
                num_threads=args.num_threads, min_run_time=min_run_time, copy_gbps=copy_gbps,
                repeat=args.repeat)), case_seconds)
        if result is not None and result.late_rounds and args.late_rounds:
            collected.queue_later(collected.late_rounds_left, (case.name, partial(
                bench.run_case, case, args.tag, dynamic=args.dynamic, num_threads=args.num_threads,
                min_run_time=min_run_time, copy_gbps=copy_gbps, repeat=args.late_rounds,
                step_overhead_seconds=step_overhead_seconds, kernels=False), collected.merge_late_rounds),
                case_seconds)
        save(collected)
        print(progress_line(i, len(cases), case.name, start, summary), flush=True)
    return collected


def run_late_rounds(collected: Collected, device: str, save=lambda collected: None,
                    deadline: float | None = None) -> Collected:
    """Time the late rounds that ``measure_overheads`` and ``run_cases`` left: each row that the
    host decides (``CaseResult.late_rounds``: host-bound, or on CUDA compiled kernels under half of
    the compiled call) again, on its workload built and compiled anew, after the process's last
    case, so that its rounds sample the host at two times (``LATE_ROUNDS``). A late compile is checked against
    eager like the first. None starts at or after ``deadline`` (``time.perf_counter()``)."""
    left = collected.late_rounds_left
    total = len(left)
    for i, (name, measure, merge) in enumerate(list(left), 1):
        if deadline is not None and time.perf_counter() >= deadline:
            print(f"Time limit: {len(left)} rows' late rounds not timed", flush=True)
            break
        left.pop(0)
        column_start = time.perf_counter()
        _, summary = _record(f"{name} (late rounds)", measure, collected, device, merge)
        save(collected)
        print(f"[late rounds {i}/{total}] {name} {time.perf_counter() - column_start:.1f}s | {summary}", flush=True)
    return collected


def run_reduce_overhead(collected: Collected, device: str, save=lambda collected: None,
                        deadline: float | None = None) -> Collected:
    """Time the reduce-overhead columns that ``measure_overheads`` and ``run_cases`` left, after
    every plain column of the process: once a CUDA graph has run in a process, a later plain
    compiled call can take longer (docs/findings.md, finding 8). None starts at or after
    ``deadline`` (``time.perf_counter()``)."""
    left = collected.reduce_overhead_left
    total = len(left)
    for i, (name, measure) in enumerate(list(left), 1):
        if deadline is not None and time.perf_counter() >= deadline:
            print(f"Time limit: {len(left)} reduce-overhead columns not timed", flush=True)
            break
        left.pop(0)
        column_start = time.perf_counter()
        _, summary = _record(f"{name} (reduce-overhead)", measure, collected, device)
        save(collected)
        print(f"[reduce-overhead {i}/{total}] {name} {time.perf_counter() - column_start:.1f}s | {summary}",
              flush=True)
    return collected


def compile_each_case_afresh() -> None:
    """Turn off the graph caches (FX graph, AOTAutograd) for this process.

    With ``dynamic=True`` cases of the same code trace the same graph, so a cached one, compiled
    for an earlier case's sizes, would be reused along with the size-dependent choices made for
    it. Compiled kernels may still be reused.
    """
    import torch

    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False


def run(args) -> int:
    import torch

    from perf import bench
    from perf._pickles import load_run, save_run
    from perf.results_table import render

    start = time.perf_counter()
    package = load_package(args.tag)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    torch.set_num_threads(args.num_threads)
    compile_each_case_afresh()
    min_run_time = args.min_run_time or (QUICK_MIN_RUN_TIME if args.quick else DEFAULT_MIN_RUN_TIME)
    modes, cases = select_cases(args, device)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    path = args.output_dir / (args.pickle_name or default_pickle_name(modes, args.tag))

    print(f"Output filepath: {path}")
    print(f"Tag: {args.tag}, device: {device}, package: {package}"
          + (f", shard {args.shard[0]}/{args.shard[1]} ({len(cases)} cases)" if args.shard else ""))
    print(f"Torch version: {torch.__version__}")
    print(f"Torch config: {torch.__config__.show()}")
    print(f"Num threads: {torch.get_num_threads()}, dynamic: {args.dynamic}, min_run_time: {min_run_time}, "
          f"repeat: {args.repeat}, call forms: {args.call_forms}")
    print(f"Inductor cache: {os.environ['TORCHINDUCTOR_CACHE_DIR']}\n", flush=True)

    device_name = torch.cuda.get_device_name() if device == "cuda" else cpu_name()
    copy_gbps = None
    if device == "cuda":
        copy_gbps = bench.measure_copy_bandwidth(device, args.num_threads, COPY_MIN_RUN_TIME)
        print(f"Device-to-device copy bandwidth: {copy_gbps:.0f} GB/s (read + write)", flush=True)

    def save(collected: Collected) -> None:
        save_run(path, collected.test_results, tag=args.tag, device=device, device_name=device_name,
                 shard=args.shard, dynamic=args.dynamic, cpus=len(os.sched_getaffinity(0)),
                 huge_pages=os.environ.get("THP_MEM_ALLOC_ENABLE") == "1",
                 repeat=args.repeat, call_forms=selected_call_forms(args), package=package,
                 copy_bandwidth_gbps=copy_gbps, **collected.pickle_keys())

    collected = Collected()
    measure_overheads(args, device, min_run_time, collected)
    deadline = None if args.stop_after is None else start + args.stop_after
    collected = run_cases(cases, args, device, min_run_time, copy_gbps, save, collected,
                          step_overhead_seconds=collected.step_overhead_seconds(), deadline=deadline)
    run_late_rounds(collected, device, save, deadline)
    run_reduce_overhead(collected, device, save, deadline)
    if args.tag == "Nightly":
        assert_package_absent()
    save(collected)
    print("\n" + render([load_run(path)]))
    print(f"Wrote {path} ({len(cases) - collected.cases_left} of {len(cases)} cases in "
          f"{time.perf_counter() - start:.1f}s)")
    if collected.mismatches or collected.errors:
        print(f"!!!!! {len(collected.mismatches)} mismatching and {len(collected.errors)} failed case(s); "
              "see 'Problems' above.", file=sys.stderr)
        return EXIT_PROBLEMS
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.tag == "Nightly":
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # no torch.backends entry points in stock runs
    ensure_private_cache_dir(args.tag)
    if args.turns:
        turns.join(*args.turns)
    try:
        return run(args)
    finally:
        turns.TURNS.close()


if __name__ == "__main__":
    raise SystemExit(main())
