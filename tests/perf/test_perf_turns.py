"""``python -m perf --lockstep``: a Nightly and a PR process side by side, taking turns."""

import sys
from pathlib import Path

import pytest

from perf import __main__ as orchestrator
from perf import turns

REPO_ROOT = Path(__file__).resolve().parents[2]

# A child that joins the ring (``--turns`` last on its command line, as run_pair appends it),
# writes one line per step and passes the turn after each, like a run after each timed column.
CHILD = """
import sys
from perf import turns
tag, steps, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
turns.join(*turns.parse_fds(sys.argv[-1].split("=")[1]))
for step in range(steps):
    with open(path, "a") as f:
        f.write(f"{tag} {step}\\n")
    print(f"step {step}", flush=True)
    turns.TURNS.pass_turn()
turns.TURNS.close()
"""


def test_a_pair_takes_turns_nightly_first_and_one_goes_on_alone(monkeypatch, tmp_path, capsys):
    """The two processes alternate strictly, Nightly first; when one has exited (here Nightly,
    with fewer steps), the other runs its remaining steps alone instead of waiting. Each one's
    output goes to its log and to the console after its tag."""
    lines = tmp_path / "steps.txt"
    steps = {"Nightly": 3, "PR": 5}

    def fake_process(tag, args, stem, shard=None, device=None, stop_after=None):
        command = [sys.executable, "-c", CHILD, tag, str(steps[tag]), str(lines)]
        return command, {"PYTHONPATH": str(REPO_ROOT)}, None, tmp_path / f"{stem}-{tag}.pkl"

    monkeypatch.setattr(orchestrator, "tag_process", fake_process)
    args = orchestrator.parse_args([str(tmp_path), "--device=cpu", "--lockstep"])
    results = orchestrator.run_pair(args, "stem")
    assert results == [(None, 0), (None, 0)]  # exit statuses 0, no pickles
    assert lines.read_text().split("\n")[:-1] == [
        "Nightly 0", "PR 0", "Nightly 1", "PR 1", "Nightly 2", "PR 2", "PR 3", "PR 4"]
    console = capsys.readouterr().out.splitlines()
    for tag in ("Nightly", "PR"):
        printed = [f"step {step}" for step in range(steps[tag])]
        assert (tmp_path / f"stem-{tag}.log").read_text().splitlines() == printed
        assert [line.removeprefix(f"[{tag}] ") for line in console if line.startswith(f"[{tag}] ")] == printed


def test_without_a_partner_a_process_never_waits():
    alone = turns.Turns()
    alone.wait()
    alone.pass_turn()
    assert alone.alone


def test_each_timed_column_passes_the_turn(monkeypatch):
    """time_workload hands the token on after each column of each round, so that the partner
    times the same column next."""
    import torch

    from perf import bench

    events = []

    class Recorder(turns.Turns):
        def pass_turn(self):
            events.append("pass")

    class Timer:
        def __init__(self, description):
            self.description = description

        def blocked_autorange(self, min_run_time):
            events.append(self.description.split(" (")[0])
            return bench.benchmark.utils.common.Measurement(
                1, [1e-6], bench.benchmark.utils.common.TaskSpec("", "", description=self.description))

    monkeypatch.setattr(turns, "TURNS", Recorder())
    monkeypatch.setattr(bench.torch, "compile", lambda fn, **options: fn)
    monkeypatch.setattr(bench, "_timer", lambda fn, args, label, sub_label, description, threads: Timer(description))
    work = bench.Workload(lambda x: x + 1, (torch.zeros(8),))
    bench.time_workload(work, "L", "S", "float32", "cpu", "PR", dynamic=True, num_threads=1,
                        min_run_time=0.01, repeat=2)
    assert events == ["Eager", "pass", "Compiled", "pass"] * 2


def test_lockstep_runs_each_process_pair_as_one_step(monkeypatch, tmp_path):
    """By default (--lockstep) with --processes 2, two pairs, one after the other, each pair's
    processes side by side (run_pair) with the whole share of the time limit that a pair has."""
    pairs = []

    def fake_pair(args, stem, shard=None, device=None, stop_after=None):
        pairs.append((stem, stop_after))
        return [(None, 0), (None, 0)]

    def no_tag(*args, **kwargs):
        raise AssertionError("run_tag runs one process at a time")

    monkeypatch.setattr(orchestrator, "run_pair", fake_pair)
    monkeypatch.setattr(orchestrator, "run_tag", no_tag)
    args = orchestrator.parse_args([str(tmp_path), "--device=cpu", "--processes=2", "--time-limit=100"])
    assert args.lockstep and not orchestrator.parse_args([str(tmp_path), "--no-lockstep"]).lockstep
    import time

    runs, statuses = orchestrator.run_processes(args, "stem", deadline=time.monotonic() + 100)
    assert [stem for stem, _ in pairs] == ["stem-process1", "stem-process2"]
    assert pairs[0][1] == pytest.approx(50, abs=1) and pairs[1][1] == pytest.approx(100, abs=1)
    assert statuses == [0, 0, 0, 0] and runs == {"Nightly": [], "PR": []}
