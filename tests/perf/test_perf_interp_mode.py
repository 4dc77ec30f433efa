"""The runner: a tiny end-to-end Nightly run, and the PR/Nightly isolation rules."""

import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
import argparse
import itertools
from argparse import Namespace
from pathlib import Path

import pytest

from perf import __main__ as orchestrator
from perf import interp_mode
from perf.cases import make_cases

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_one_case_nightly_run_end_to_end(tmp_path):
    """One literal-size case, timed in 2 rounds, after the compiled call overhead row, whose late
    round follows the case."""
    case = next(c for c in make_cases("cpu", quick=True, modes=("nearest",)) if c.call_form == "literal")
    cache = tmp_path / "inductor-cache"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    env.pop("TRITON_CACHE_DIR", None)
    command = [sys.executable, "-m", "perf.interp_mode", str(tmp_path), "--tag=Nightly", "--device=cpu",
               "--quick", "--mode=nearest", "--min-run-time=0.01", "--repeat=2",
               f"--filter=^{re.escape(case.name)}$", "--pickle-name=run.pkl"]
    proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(rf"^\[1/1\] {re.escape(case.name)} elapsed [\d.]+s ETA 0s \| .*matches eager$",
                     proc.stdout, re.M), proc.stdout
    assert re.search(r"^Compiled call overhead .*: eager [\d.]+ us, compiled [\d.]+ us", proc.stdout, re.M)

    with open(tmp_path / "run.pkl", "rb") as f:
        payload = pickle.load(f)
    import torch

    assert payload["torch_version"] == torch.__version__
    assert payload["num_threads"] == 1 and payload["tag"] == "Nightly" and payload["package"] is None
    assert payload["dynamic"] is True and payload["mismatches"] == {} and payload["errors"] == []
    assert payload["repeat"] == 2 and payload["call_forms"] == ("symbolic", "literal")
    overhead_eager, overhead, eager, compiled = payload["test_results"]
    assert {m.task_spec.label for m in (overhead_eager, overhead)} == {"Compiled call overhead, cpu"}
    assert overhead.task_spec.description == f"Compiled ({torch.__version__}) Nightly"
    assert payload["compiled_call_overhead_us"] == pytest.approx(overhead.median * 1e6)
    assert payload["compiled_call_overhead_us"] > 0
    assert payload["compiled_step_overhead_us"] is None  # measured only with --backward
    assert (eager.task_spec.label, eager.task_spec.sub_label) == (case.label, case.sub_label)
    assert case.sub_label.endswith(", size: literal")
    assert eager.task_spec.description == f"Eager ({torch.__version__}) Nightly"
    assert compiled.task_spec.description == f"Compiled ({torch.__version__}) Nightly"
    assert compiled.median > 0
    keys = [(m.task_spec.label, m.task_spec.sub_label, m.task_spec.description) for m in payload["test_results"]]
    assert sorted(payload["spread"]) == sorted(keys)
    assert re.search(r"^\[late rounds 1/\d\] Compiled call overhead", proc.stdout, re.M), proc.stdout
    case_late = f"] {case.name} | " in proc.stdout  # a case under 100 us in eager is host-bound too
    for m, key in zip(payload["test_results"], keys):  # the kept Measurement is the lowest median
        spread = payload["spread"][key]
        late = key[0] == "Compiled call overhead, cpu" or case_late
        assert spread["n"] == (3 if late else 2) and spread["min"] == m.median <= spread["max"]
    assert sorted(payload["compile_seconds"]) == sorted([keys[1], keys[3]])
    assert sorted(payload["page_faults"]) == sorted(keys)  # a CPU run: every column
    assert all(faults >= 0 for faults in payload["page_faults"].values())
    assert any(cache.iterdir()), "the run did not use the Inductor cache it was given"


def test_pr_run_without_the_package_fails_clearly(monkeypatch, capsys):
    monkeypatch.setattr(interp_mode, "PACKAGE", "decomps_not_installed_anywhere")
    with pytest.raises(SystemExit) as exit_info:
        interp_mode.load_package("PR")
    assert exit_info.value.code == interp_mode.EXIT_NO_PACKAGE
    assert "--tag=PR needs the 'decomps_not_installed_anywhere' package" in capsys.readouterr().err


def test_the_import_failure_status_is_returned_by_nothing_else():
    """1: an uncaught exception or SystemExit(message); 2: argparse's usage error."""
    assert interp_mode.EXIT_NO_PACKAGE not in (0, 1, 2, interp_mode.EXIT_PROBLEMS)


def test_only_the_import_failure_status_is_reported_as_one():
    no_package = orchestrator.failure_message("PR", interp_mode.EXIT_NO_PACKAGE)
    assert "could not import the 'decomps' package" in no_package
    for tag, rc in (("PR", 2), ("PR", 1), ("PR", interp_mode.EXIT_PROBLEMS), ("Nightly", interp_mode.EXIT_NO_PACKAGE)):
        message = orchestrator.failure_message(tag, rc)
        assert message == f"ERROR: the {tag} run exited with status {rc} (see above).", message
    assert orchestrator.failure_message("PR", 0) is None


def test_a_usage_error_of_the_pr_run_is_not_reported_as_an_import_failure(monkeypatch, tmp_path, capfd):
    """The child exits in argparse (status 2), before torch is imported."""
    args = orchestrator.parse_args([str(tmp_path), "--device=cpu"])
    command = orchestrator.child_command
    monkeypatch.setattr(orchestrator, "child_command", lambda *a: command(*a) + ["--no-such-option"])
    path, rc = orchestrator.run_tag("PR", args, "stem")
    err = capfd.readouterr().err
    assert (path, rc) == (None, 2)
    assert "unrecognized arguments: --no-such-option" in err
    assert "ERROR: the PR run exited with status 2" in err and "could not import" not in err


def test_nightly_run_refuses_the_package(monkeypatch):
    monkeypatch.delitem(sys.modules, interp_mode.PACKAGE, raising=False)  # tests/conftest.py may import it
    assert interp_mode.load_package("Nightly") is None
    monkeypatch.setitem(sys.modules, interp_mode.PACKAGE, object())
    with pytest.raises(SystemExit, match="imported in a Nightly run"):
        interp_mode.load_package("Nightly")


def test_private_cache_dir_is_created_unless_given(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    first = interp_mode.ensure_private_cache_dir("PR")
    assert Path(first).parent == tmp_path / "tmp" and "PR" in Path(first).name
    assert os.environ["TRITON_CACHE_DIR"].startswith(first)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    assert interp_mode.ensure_private_cache_dir("PR") != first
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert interp_mode.ensure_private_cache_dir("Nightly") == str(tmp_path)


def test_options():
    parser = interp_mode.build_parser()
    args = parser.parse_args(["out", "--tag=PR"])
    assert (args.mode, args.device, args.num_threads, args.dynamic, args.backward, args.quick, args.repeat) == (
        "both", "auto", 1, True, False, False, 1)
    assert interp_mode.selected_call_forms(args) == ("symbolic", "literal")
    assert parser.parse_args(["out", "--tag=PR", "--dynamic=false"]).dynamic is False
    assert parser.parse_args(["out", "--tag=PR", "--dynamic"]).dynamic is True
    literal = parser.parse_args(["out", "--tag=PR", "--call-forms=literal", "--repeat=3"])
    assert interp_mode.selected_call_forms(literal) == ("literal",) and literal.repeat == 3
    for bad in (["--tag=Other"], ["--tag=PR", "--repeat=0"], ["--tag=PR", "--call-forms=static"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["out", *bad])


def test_orchestrator_gives_each_tag_its_own_cache(tmp_path):
    args = orchestrator.parse_args([str(tmp_path), "--quick", "--backward", "--device=cpu"])
    envs = [orchestrator.child_env(tmp_path / f"cache-{tag}") for tag in orchestrator.RUN_ORDER]
    assert len({e["TORCHINDUCTOR_CACHE_DIR"] for e in envs}) == 2
    assert len({e["TRITON_CACHE_DIR"] for e in envs}) == 2
    command = orchestrator.child_command("Nightly", args, "x.pkl")
    assert command[1:4] == ["-m", "perf.interp_mode", str(tmp_path)]
    assert {"--tag=Nightly", "--quick", "--backward", "--device=cpu", "--dynamic=True", "--repeat=1",
            "--call-forms=both", "--pickle-name=x.pkl"} <= set(command)
    assert not any(a.startswith("--min-run-time") for a in command)
    assert isinstance(args, Namespace)
    args = orchestrator.parse_args([str(tmp_path), "--repeat=3", "--call-forms=literal"])
    assert {"--repeat=3", "--call-forms=literal"} <= set(orchestrator.child_command("PR", args, "x.pkl"))


def test_a_wrong_compiled_result_is_recorded_as_a_mismatch(monkeypatch):
    from perf import bench

    case = next(c for c in make_cases("cpu", quick=True, modes=("nearest",)) if c.dtype == "float32")
    monkeypatch.setattr(bench.torch, "compile", lambda fn, **kwargs: (lambda *args: fn(*args) + 1))
    result = bench.run_case(case, "PR", dynamic=True, num_threads=1, min_run_time=0.01, copy_gbps=100.0)
    eager, compiled = (m.task_spec.description for m in result.measurements)
    assert list(result.problems) == [compiled] and "elements differ" in result.problems[compiled]
    assert eager.startswith("Eager (") and eager.endswith(") PR") and compiled.startswith("Compiled (")
    assert result.roofline[compiled]["gbps"] == pytest.approx(
        result.roofline[compiled]["bytes"] / result.measurements[1].median / 1e9)
    assert result.roofline[compiled]["pct_of_copy"] == pytest.approx(result.roofline[compiled]["gbps"])

    collected = interp_mode.Collected()
    collected.add(result)
    assert list(collected.mismatches) == [(case.label, case.sub_label, compiled)]
    assert len(collected.test_results) == 2 and len(collected.roofline) == 2
    assert "MISMATCH" in interp_mode.summarize(result)


def test_error_messages_are_kept_to_one_short_line():
    message = interp_mode.short_message(RuntimeError("first line\n  Explanation: " + "x" * 1000), limit=40)
    assert message == "first line Explanation: xxxxxxxxxxxxx..." and len(message) == 40
    assert interp_mode.short_message(ValueError("short")) == "short"


def test_the_pickle_is_saved_after_every_case(monkeypatch, tmp_path):
    """A run stopped early (a device time limit) keeps every case it finished."""
    from torch.utils.benchmark.utils.common import Measurement, TaskSpec

    from perf import bench
    from perf._pickles import load_run, save_run

    cases = make_cases("cpu", quick=True, modes=("nearest",))[:3]

    def fake_run_case(case, tag, **kwargs):
        if case is cases[2]:
            raise KeyboardInterrupt  # stands for the kill of a time limit
        measurements = [Measurement(1, [1e-6], TaskSpec("", "", label=case.label, sub_label=case.sub_label,
                                                        description=f"{kind} (x) {tag}"))
                        for kind in ("Eager", "Compiled")]
        return bench.CaseResult(measurements)

    monkeypatch.setattr(bench, "run_case", fake_run_case)
    path = tmp_path / "run.pkl"
    saved = []

    def save(collected):
        saved.append(len(collected.test_results))
        save_run(path, collected.test_results, tag="PR")

    args = Namespace(tag="PR", dynamic=True, num_threads=1, repeat=1)
    with pytest.raises(KeyboardInterrupt):
        interp_mode.run_cases(cases, args, "cpu", 0.01, None, save)
    assert saved == [2, 4]
    assert len(load_run(path).rows) == 4
    assert not (tmp_path / "run.pkl.partial").exists()


def test_each_case_compiles_its_own_graph(monkeypatch):
    """Two cases of the same code with dynamic=True: each one is decomposed for its own sizes."""
    import torch
    import torch.nn.functional as F

    import decomps.forward

    traced = []
    original = decomps.forward.upsample_nearest
    monkeypatch.setattr(decomps.forward, "upsample_nearest",
                        lambda x, *a, **k: traced.append(x.shape) or original(x, *a, **k))

    def upsample(x):
        return F.interpolate(x, size=(6, 7), mode="nearest")

    # config.patch restores both settings afterwards (monkeypatch would delete them)
    before = (torch._inductor.config.fx_graph_cache, torch._functorch.config.enable_autograd_cache)
    with torch._inductor.config.patch(fx_graph_cache=True), \
            torch._functorch.config.patch(enable_autograd_cache=True):
        interp_mode.compile_each_case_afresh()
        assert not torch._inductor.config.fx_graph_cache
        assert not torch._functorch.config.enable_autograd_cache
        for shape in ((1, 2, 5, 4), (1, 2, 3, 4)):
            torch._dynamo.reset()
            x = torch.randn(shape)
            torch.testing.assert_close(torch.compile(upsample, dynamic=True)(x), upsample(x), rtol=0, atol=0)
    assert (torch._inductor.config.fx_graph_cache, torch._functorch.config.enable_autograd_cache) == before
    assert len(traced) == 2, traced


def _measurement(median: float, description: str = "Compiled (x) PR"):
    from torch.utils.benchmark.utils.common import Measurement, TaskSpec

    return Measurement(1, [median], TaskSpec("", "", label="L", sub_label="S", description=description))


def test_repeats_keep_the_lowest_median_and_record_the_spread():
    from perf import bench

    rounds = [_measurement(t) for t in (3e-6, 1e-6, 2e-6)]
    best, spread = bench.pick_best(rounds)
    assert best is rounds[1]
    assert spread == {"min": 1e-6, "max": 3e-6, "n": 3}
    assert bench.pick_best(rounds[:1]) == (rounds[0], {"min": 3e-6, "max": 3e-6, "n": 1})


def test_reduce_overhead_only_for_host_bound_cuda_rows():
    from perf import bench

    assert bench.wants_reduce_overhead("cuda", 99e-6)
    assert not bench.wants_reduce_overhead("cuda", 100e-6)
    assert not bench.wants_reduce_overhead("cpu", 1e-6)
    assert bench.wants_reduce_overhead("cuda", 300e-6, 600e-6)
    assert not bench.wants_reduce_overhead("cpu", 300e-6, 600e-6)
    # rows whose compiled graph's extern calls cost the host about eager's step: whatever eager takes
    assert bench.wants_reduce_overhead("cuda", 3e-3, 600e-6, host_heavy=True)
    assert not bench.wants_reduce_overhead("cpu", 3e-3, 600e-6, host_heavy=True)


def test_only_the_fpn_neck_is_host_heavy():
    from perf import bench, cases

    heavy = {case.kind for case in cases.make_cases("cpu", backward=True, quick=True)
             if bench.build_workload(case).host_heavy}
    assert heavy == {"fpn_neck"}


def test_fwd_bwd_workloads_are_host_bound_below_the_empty_compiled_step():
    import torch

    from perf import bench

    x = torch.zeros(8, requires_grad=True)
    step = bench.Workload(lambda x: x * 2, (x,), wrt=(x,), grad_outputs=(torch.ones(8),))
    forward = bench.Workload(lambda x: x * 2, (x,))
    assert bench.workload_host_bound_seconds(step, 600e-6) == 600e-6
    assert bench.workload_host_bound_seconds(step, 40e-6) == 100e-6  # never below the call's 100 us
    assert bench.workload_host_bound_seconds(step, None) == 100e-6  # not measured (no --backward)
    assert bench.workload_host_bound_seconds(forward, 600e-6) == 100e-6
    for device, wanted in (("cuda", True), ("cpu", False)):
        threshold = bench.workload_host_bound_seconds(step, 600e-6)
        assert bench.wants_reduce_overhead(device, 300e-6, threshold) is wanted


def _time_fake(monkeypatch, device: str, forward, wrong_reduce_overhead: bool = False, backward: bool = False,
               step_overhead_seconds: float | None = None, kernel_us=lambda call: (call(), 7.5)[1]):
    """time_workload, and time_reduce_overhead where it asks for that column, with a recording
    stand-in for torch.compile, so that their CUDA branch runs on CPU."""
    import torch

    from perf import bench

    compiled = []

    def fake_compile(fn, **options):
        compiled.append(options)
        if wrong_reduce_overhead and options.get("mode") == "reduce-overhead":
            return lambda *args: fn(*args) + 1
        return fn

    monkeypatch.setattr(bench.torch, "compile", fake_compile)
    monkeypatch.setattr(bench, "_synchronize", lambda device: None)
    monkeypatch.setattr(bench, "kernel_us", kernel_us)  # the profiler needs CUDA
    if backward:
        x = torch.zeros(8, requires_grad=True)
        work = bench.Workload(forward, (x,), wrt=(x,), grad_outputs=(torch.ones(8),), check="allclose")
    else:
        work = bench.Workload(forward, (torch.zeros(8),))
    options = dict(dynamic=True, num_threads=1, min_run_time=0.01, repeat=2)
    result = bench.time_workload(work, "L", "S", "float32", device, "PR", step_overhead_seconds=step_overhead_seconds,
                                 **options)
    if result.reduce_overhead:
        later = bench.time_reduce_overhead(work, "L", "S", "float32", device, "PR", **options)
        assert [m.task_spec.description.split(" (")[0] for m in later.measurements] == [bench.REDUCE_OVERHEAD]
        result.measurements += later.measurements
        for name in ("problems", "compile_seconds", "spread", "kernel_us"):
            getattr(result, name).update(getattr(later, name))
    return result, compiled


def test_host_bound_cuda_rows_get_a_checked_reduce_overhead_column(monkeypatch):
    import torch

    def add_one(x):
        return x + 1

    def slow_add_one(x):
        time.sleep(200e-6)
        return x + 1

    result, compiled = _time_fake(monkeypatch, "cuda", add_one)
    version = torch.__version__
    descriptions = [m.task_spec.description for m in result.measurements]
    assert descriptions == [f"Eager ({version}) PR", f"Compiled ({version}) PR",
                            f"Compiled reduce-overhead ({version}) PR"]
    assert compiled == [{"fullgraph": True, "dynamic": True},
                        {"fullgraph": True, "dynamic": True, "mode": "reduce-overhead"}]
    assert [result.spread[d]["n"] for d in descriptions] == [2, 2, 2]  # timed in every round
    assert sorted(result.compile_seconds) == sorted(descriptions[1:]) and not result.problems
    assert result.kernel_us == {description: 7.5 for description in descriptions}  # each column's own

    result, _ = _time_fake(monkeypatch, "cuda", add_one, wrong_reduce_overhead=True)
    assert list(result.problems) == [f"Compiled reduce-overhead ({version}) PR"]

    for device, forward in (("cpu", add_one), ("cuda", slow_add_one)):
        result, compiled = _time_fake(monkeypatch, device, forward)
        assert [m.task_spec.description.split(" (")[0] for m in result.measurements] == ["Eager", "Compiled"]
        assert compiled == [{"fullgraph": True, "dynamic": True}] and not result.reduce_overhead
        assert len(result.kernel_us) == (2 if device == "cuda" else 0)



def test_host_bound_rows_are_marked_on_every_device(monkeypatch):
    """``host_bound`` (eager's first round under the row's threshold) decides a row's late rounds,
    on the CPU as on CUDA; ``kernels=False`` skips the kernel times."""
    from perf import bench

    def add_one(x):
        return x + 1

    def slow_add_one(x):
        time.sleep(200e-6)
        return x + 1

    for device in ("cpu", "cuda"):
        assert _time_fake(monkeypatch, device, add_one)[0].host_bound
        assert not _time_fake(monkeypatch, device, slow_add_one)[0].host_bound
    monkeypatch.setattr(bench, "kernel_us", lambda call: pytest.fail("profiled"))
    work = bench.Workload(add_one, (__import__("torch").zeros(8),))
    result = bench.time_workload(work, "L", "S", "float32", "cuda", "PR", dynamic=True, num_threads=1,
                                 min_run_time=0.01, kernels=False)
    assert result.kernel_us == {}

def test_a_cuda_row_without_a_profiler_keeps_its_times(monkeypatch, capsys):
    def no_profiler(call):
        raise RuntimeError("CUPTI unavailable")

    result, _ = _time_fake(monkeypatch, "cuda", lambda x: x + 1, kernel_us=no_profiler)
    assert len(result.measurements) == 3 and result.kernel_us == {}
    assert "no kernel time for Compiled (S): RuntimeError: CUPTI unavailable" in capsys.readouterr().out


def test_compiled_columns_are_warm_and_checked_before_their_timing(monkeypatch):
    """One-time work of a compiled function's first calls (size variants compile at a size's
    second launch) must not land in blocked_autorange's block-size estimate, and the results of
    the warm calls must match eager as well as the first one, each checked before a later call
    overwrites it (as a CUDA graph's replay does)."""
    import torch

    from perf import bench

    calls = []

    def fake_compile(fn, wrong_at=None, **options):
        outputs = []

        def compiled(*args):
            calls.append("compiled")
            for previous in outputs:
                previous.fill_(float("nan"))
            outputs.append(fn(*args) + (1 if len(calls) == wrong_at else 0))
            return outputs[-1]

        return compiled

    class Timer:
        def __init__(self, stmt, **kwargs):
            self.stmt = stmt

        def blocked_autorange(self, min_run_time):
            calls.append("timed")
            return _measurement(1e-6)

    monkeypatch.setattr(bench, "_synchronize", lambda device: None)
    monkeypatch.setattr(bench, "_timer", lambda fn, *args, **kwargs: Timer(fn))
    work = bench.Workload(lambda x: x + 1, (torch.zeros(8),))
    for wrong_at, problems in ((None, []), (bench.WARM_UP_CALLS, [f"Compiled ({torch.__version__}) PR"])):
        calls.clear()
        monkeypatch.setattr(bench.torch, "compile", lambda fn, **options: fake_compile(fn, wrong_at, **options))
        result = bench.time_workload(work, "L", "S", "float32", "cpu", "PR", dynamic=True, num_threads=1,
                                     min_run_time=0.01)
        assert calls == ["compiled"] * bench.WARM_UP_CALLS + ["timed", "timed"]
        assert list(result.problems) == problems
    assert bench.WARM_UP_CALLS > 2  # past size_variants.SPECIALIZE_AT, and CUDA graphs' recording call


def test_host_bound_fwd_bwd_cuda_rows_get_the_reduce_overhead_column(monkeypatch):
    """A fwd+bwd step of 200+ us is host-bound when the run's empty compiled step takes 1 ms."""

    def slow_double(x):
        time.sleep(200e-6)
        return x * 2

    def kinds(result):
        return [m.task_spec.description.split(" (")[0] for m in result.measurements]

    result, compiled = _time_fake(monkeypatch, "cuda", slow_double, backward=True, step_overhead_seconds=1e-3)
    assert kinds(result) == ["Eager", "Compiled", "Compiled reduce-overhead"] and not result.problems
    assert compiled[-1]["mode"] == "reduce-overhead"
    for device, backward, step in (("cuda", True, None), ("cuda", False, 1e-3), ("cpu", True, 1e-3)):
        result, _ = _time_fake(monkeypatch, device, slow_double, backward=backward, step_overhead_seconds=step)
        assert kinds(result) == ["Eager", "Compiled"], (device, backward, step)


def test_the_call_overhead_is_stored_as_a_row_and_a_key():
    from perf import bench

    collected = interp_mode.Collected()
    eager, compiled = _measurement(3e-6, "Eager (x) PR"), _measurement(15e-6)
    collected.add_call_overhead(bench.CaseResult([eager, compiled], spread={"Compiled (x) PR": {"n": 1}}))
    assert collected.test_results == [eager, compiled]
    assert collected.pickle_keys()["compiled_call_overhead_us"] == pytest.approx(15.0)
    assert collected.pickle_keys()["spread"] == {("L", "S", "Compiled (x) PR"): {"n": 1}}


def test_run_cases_passes_the_step_overhead_to_every_case(monkeypatch):
    from perf import bench

    cases = make_cases("cpu", quick=True, modes=("nearest",), backward=True)[:2]
    seen = []

    def fake_run_case(case, tag, **kwargs):
        seen.append(kwargs["step_overhead_seconds"])
        return bench.CaseResult([_measurement(1e-6, f"{kind} (x) PR") for kind in ("Eager", "Compiled")])

    monkeypatch.setattr(bench, "run_case", fake_run_case)
    args = Namespace(tag="PR", dynamic=True, num_threads=1, repeat=1)
    interp_mode.run_cases(cases, args, "cpu", 0.01, None, step_overhead_seconds=6e-4)
    interp_mode.run_cases(cases, args, "cpu", 0.01, None)
    assert seen == [6e-4, 6e-4, None, None]


def test_run_cases_starts_no_case_after_its_deadline(monkeypatch):
    """``deadline``: the cases started before it run to the end; the rest are counted, not run."""
    from perf import bench

    cases = make_cases("cpu", quick=True, modes=("nearest",))[:3]
    clock = itertools.count(0.0, 10.0)  # 10 s per reading
    monkeypatch.setattr(interp_mode.time, "perf_counter", lambda: next(clock))
    ran = []

    def fake_run_case(case, tag, **kwargs):
        ran.append(case)
        return bench.CaseResult([_measurement(1e-6, f"{kind} (x) PR") for kind in ("Eager", "Compiled")])

    monkeypatch.setattr(bench, "run_case", fake_run_case)
    args = Namespace(tag="PR", dynamic=True, num_threads=1, repeat=1)
    collected = interp_mode.run_cases(cases, args, "cpu", 0.01, None, deadline=25.0)
    # start 0; case 1 checked at 10 (runs, progress line at 20), case 2 at 30: past 25
    assert ran == cases[:1] and collected.cases_left == 2
    assert collected.pickle_keys()["cases_left"] == 2
    assert interp_mode.run_cases(cases, args, "cpu", 0.01, None).cases_left == 0


def test_run_cases_keeps_time_for_the_columns_after_the_cases(monkeypatch):
    """Under a deadline, a case whose row queues late rounds or a reduce-overhead column makes the
    later cases stop early enough to leave those columns ``TAIL_SHARE`` of its time each."""
    from perf import bench

    cases = make_cases("cpu", quick=True, modes=("nearest",))[:4]
    now = [0.0]
    monkeypatch.setattr(interp_mode.time, "perf_counter", lambda: now[0])
    ran, queues = [], []

    def fake_run_case(case, tag, **kwargs):
        ran.append(case)
        now[0] += 10.0  # each case takes 10 s
        queue = bool(queues) and len(ran) == 1  # the first case's row queues both later columns
        return bench.CaseResult([_measurement(1e-6, f"{kind} (x) PR") for kind in ("Eager", "Compiled")],
                                reduce_overhead=queue, host_bound=queue)

    monkeypatch.setattr(bench, "run_case", fake_run_case)
    args = Namespace(tag="PR", dynamic=True, num_threads=1, repeat=1, late_rounds=1, reduce_overhead=True)
    # without such columns: case 3 starts at 20 (< 25), case 4 not at 30
    collected = interp_mode.run_cases(cases, args, "cpu", 0.01, None, deadline=25.0)
    assert len(ran) == 3 and collected.cases_left == 1 and collected.tail_seconds == 0
    ran.clear()
    queues.append(True)
    now[0] = 0.0
    collected = interp_mode.run_cases(cases, args, "cpu", 0.01, None, deadline=25.0)
    # 2 x 0.6 x 10 s kept: case 2 starts at 10 (10 + 12 < 25), case 3 not at 20 (20 + 12 >= 25)
    assert interp_mode.TAIL_SHARE == 0.6 and collected.tail_seconds == pytest.approx(12.0)
    assert ran == cases[:2] and collected.cases_left == 2
    assert len(collected.late_rounds_left) == 1 and len(collected.reduce_overhead_left) == 1
    # --no-reduce-overhead: the late rounds alone, 0.6 x 10 s kept: case 3 starts at 20 (20 + 6 >= 25: not)
    ran.clear()
    now[0] = 0.0
    args.reduce_overhead = False
    collected = interp_mode.run_cases(cases, args, "cpu", 0.01, None, deadline=25.0)
    assert collected.tail_seconds == pytest.approx(6.0) and ran == cases[:2]
    assert len(collected.late_rounds_left) == 1 and collected.reduce_overhead_left == []


def test_time_limit_shares_the_time_left_among_the_processes_left(monkeypatch, tmp_path):
    """``--time-limit``: each process gets the time left divided by the processes left in its
    shard's sequence, as ``--stop-after``; none starts once it has passed; the merged pickle counts
    the cases its runs left, and the report names them."""
    from torch.utils.benchmark.utils.common import Measurement, TaskSpec

    from perf._pickles import load_run, save_run

    clock = [1000.0]
    monkeypatch.setattr(orchestrator.time, "monotonic", lambda: clock[0])
    shares = []

    def fake_run_tag(tag, args, stem, shard=None, device=None, stop_after=None):
        shares.append((tag, stop_after))
        clock[0] += 30.0  # each process takes 30 s
        path = args.out_dir.resolve() / f"{stem}-{tag}.pkl"
        results = [Measurement(1, [seconds], TaskSpec("fn(x)", "", label="Interpolate, cpu", sub_label="Input (1,)",
                                                        description=f"{kind} (v) {tag}"))
                   for kind, seconds in (("Eager", 1e-3), ("Compiled", 5e-4))]
        save_run(path, results, tag=tag, cases_left=3)
        return path, 0

    monkeypatch.setattr(orchestrator, "run_tag", fake_run_tag)
    assert orchestrator.main([str(tmp_path), "--device=cpu", "--no-lockstep", "--processes=3", "--time-limit=100"]) == 0
    # 6 processes planned; at 0 s 100 left for 6, at 30 s 70 for 5, 40 for 4, 10 for 3, then none
    assert [tag for tag, _ in shares] == ["Nightly", "PR", "Nightly", "PR"]
    assert [round(t, 2) for _, t in shares] == [round(100 / 6, 2), 14.0, 10.0, round(10 / 3, 2)]
    command = orchestrator.child_command("PR", orchestrator.parse_args([str(tmp_path)]), "x.pkl", stop_after=14.04)
    assert command[-1] == "--stop-after=14.0"
    for tag in orchestrator.RUN_ORDER:
        (path,) = [p for p in tmp_path.glob(f"*-{tag}.pkl") if "-process" not in p.name]
        assert load_run(path).extra["cases_left"] == 6
    (table,) = tmp_path.glob("*-speedup.md")
    assert "**6 cases not started** (time limit)" in table.read_text()
    with pytest.raises(SystemExit):
        orchestrator.parse_args([str(tmp_path), "--time-limit=0"])


def test_the_step_overhead_is_a_compiled_fwd_bwd_step(monkeypatch):
    """``autograd.grad(compiled(x), x, g)`` of ``x * 2``, stored as a row and as ``compiled_step_overhead_us``."""
    import torch

    from perf import bench

    timed = []
    time_workload = bench.time_workload

    def record(work, *args, **kwargs):
        timed.append(work)
        return time_workload(work, *args, **kwargs)

    monkeypatch.setattr(bench, "time_workload", record)
    result = bench.measure_step_overhead("cpu", "PR", dynamic=True, num_threads=1, min_run_time=0.01)
    (work,) = timed
    (x,) = work.args
    assert len(work.wrt) == 1 and work.wrt[0] is x and x.requires_grad and x.shape == (8,)
    assert len(work.grad_outputs) == 1
    assert not result.problems
    assert {(m.task_spec.label, m.task_spec.sub_label) for m in result.measurements} == {
        ("Compiled call overhead, cpu", "Input (8,), torch.float32 | fn: x * 2, fwd+bwd")}
    assert [m.task_spec.description for m in result.measurements] == [
        f"Eager ({torch.__version__}) PR", f"Compiled ({torch.__version__}) PR"]

    collected = interp_mode.Collected()
    collected.add_step_overhead(result)
    assert collected.test_results == result.measurements
    compiled_us = result.measurements[1].median * 1e6
    assert collected.pickle_keys()["compiled_step_overhead_us"] == pytest.approx(compiled_us)
    assert collected.step_overhead_seconds() == pytest.approx(compiled_us * 1e-6)
    assert interp_mode.Collected().pickle_keys()["compiled_step_overhead_us"] is None


def test_the_step_overhead_row_is_measured_only_with_backward(monkeypatch, capsys):
    from perf import bench

    measured = []

    def fake(sub_label, seconds):
        def measure(device, tag, **kwargs):
            measured.append(sub_label)
            if seconds is None:
                raise RuntimeError("no compiler")
            return bench.CaseResult([_measurement(seconds / 5, "Eager (x) PR"), _measurement(seconds)])
        return measure

    monkeypatch.setattr(bench, "measure_call_overhead", fake(bench.OVERHEAD_SUB_LABEL, 20e-6))
    monkeypatch.setattr(bench, "measure_step_overhead", fake(bench.STEP_OVERHEAD_SUB_LABEL, 600e-6))
    for backward, rows, step_us in ((False, 2, None), (True, 4, 600.0)):
        args = Namespace(tag="PR", dynamic=True, num_threads=1, repeat=1, backward=backward)
        collected = interp_mode.Collected()
        interp_mode.measure_overheads(args, "cpu", 0.01, collected)
        assert len(collected.test_results) == rows
        assert collected.compiled_call_overhead_us == pytest.approx(20.0)
        assert collected.compiled_step_overhead_us == pytest.approx(step_us)
    assert measured == [bench.OVERHEAD_SUB_LABEL, bench.OVERHEAD_SUB_LABEL, bench.STEP_OVERHEAD_SUB_LABEL]
    assert "fn: x * 2, fwd+bwd): eager 120.0 us, compiled 600.0 us" in capsys.readouterr().out

    monkeypatch.setattr(bench, "measure_step_overhead", fake(bench.STEP_OVERHEAD_SUB_LABEL, None))
    collected = interp_mode.Collected()
    interp_mode.measure_overheads(args, "cpu", 0.01, collected)
    assert collected.compiled_step_overhead_us is None and collected.step_overhead_seconds() is None
    assert collected.errors == [f"Compiled call overhead ({bench.STEP_OVERHEAD_SUB_LABEL}): RuntimeError: no compiler"]


def test_the_overhead_rows_keep_time_for_their_later_columns(monkeypatch):
    """The overhead rows' late rounds and reduce-overhead columns come after the cases too: each
    queued one keeps ``TAIL_SHARE`` of its row's time, as a case's does."""
    from perf import bench

    now = [0.0]
    monkeypatch.setattr(interp_mode.time, "perf_counter", lambda: now[0])

    def measure(device, tag, **kwargs):
        now[0] += 5.0  # each overhead row takes 5 s
        return bench.CaseResult([_measurement(1e-6, "Eager (x) PR"), _measurement(40e-6)],
                                reduce_overhead=device == "cuda", host_bound=True)

    monkeypatch.setattr(bench, "measure_call_overhead", measure)
    monkeypatch.setattr(bench, "measure_step_overhead", measure)
    for device, late_rounds, reduce_overhead, columns in (("cuda", 1, True, 4), ("cuda", 0, True, 2),
                                                          ("cuda", 1, False, 2), ("cpu", 1, True, 2)):
        args = Namespace(tag="PR", dynamic=True, num_threads=1, repeat=1, backward=True, late_rounds=late_rounds,
                         reduce_overhead=reduce_overhead)
        collected = interp_mode.Collected()
        interp_mode.measure_overheads(args, device, 0.01, collected)
        assert len(collected.late_rounds_left) + len(collected.reduce_overhead_left) == columns
        assert reduce_overhead or collected.reduce_overhead_left == []
        assert collected.tail_seconds == pytest.approx(columns * interp_mode.TAIL_SHARE * 5.0)


def test_processes_alternate_the_tags_and_merge_each_tags_runs(monkeypatch, tmp_path):
    """``--processes 2``: Nightly, PR, Nightly, PR, each a new process with its own pickle and
    cache; each tag's table column is its lowest median."""
    from torch.utils.benchmark.utils.common import Measurement, TaskSpec

    from perf._pickles import load_run, save_run

    label, sub_label = "Interpolate, cpu", "Input (1, 3, 300, 400), torch.float32 | mode: nearest"
    times = {("Nightly", 1): 4e-4, ("PR", 1): 5e-4, ("Nightly", 2): 6e-4, ("PR", 2): 3e-4}
    calls = []

    def fake_run_tag(tag, args, stem, shard=None, device=None, stop_after=None):
        assert stop_after is None  # no --time-limit
        calls.append((tag, stem))
        process = len(calls) // 2 + len(calls) % 2
        path = args.out_dir.resolve() / f"{stem}-{tag}.pkl"
        results = [Measurement(1, [seconds], TaskSpec("fn(x)", "", label=label, sub_label=sub_label,
                                                        description=f"{kind} (v) {tag}"))
                   for kind, seconds in (("Eager", 1e-3), ("Compiled", times[tag, process]))]
        save_run(path, results, tag=tag)
        return path, 0

    monkeypatch.setattr(orchestrator, "run_tag", fake_run_tag)
    assert orchestrator.main([str(tmp_path), "--device=cpu", "--no-lockstep", "--processes=2"]) == 0
    assert [tag for tag, _ in calls] == ["Nightly", "PR", "Nightly", "PR"]
    stems = [stem for _, stem in calls]
    assert stems[0] == stems[1] != stems[2] == stems[3] and stems[0].endswith("-process1")
    merged = {}
    for tag in orchestrator.RUN_ORDER:
        (path,) = [p for p in tmp_path.glob(f"*-{tag}.pkl") if "-process" not in p.name]
        run = load_run(path)
        assert run.extra["processes"] == 2 and run.extra["shards"] is None  # not sharded
        merged[tag] = {r.description: r.median for r in run.rows}
    assert merged["Nightly"]["Compiled (v) Nightly"] == pytest.approx(4e-4)
    assert merged["PR"]["Compiled (v) PR"] == pytest.approx(3e-4)
    (table,) = tmp_path.glob("*-speedup.md")
    assert "1.33x" in table.read_text()  # 4e-4 / 3e-4


def test_devices_run_a_shard_each_side_by_side_and_merge_them(monkeypatch, tmp_path):
    """``--devices 2,5``: each device runs its shard's Nightly and PR processes with only that
    device visible; each tag's pickle holds both shards' rows, each row from its own shard."""
    from torch.utils.benchmark.utils.common import Measurement, TaskSpec

    from perf._pickles import load_run, save_run

    label = "Interpolate, cuda"
    calls = []

    def fake_run_tag(tag, args, stem, shard=None, device=None, stop_after=None):
        calls.append((tag, stem, shard, device))
        sub_label = f"Input (1, 3, {shard[0]}, 4), torch.float32 | mode: nearest"
        path = args.out_dir.resolve() / f"{stem}-{tag}.pkl"
        results = [Measurement(1, [seconds], TaskSpec("fn(x)", "", label=label, sub_label=sub_label,
                                                        description=f"{kind} (v) {tag}"))
                   for kind, seconds in (("Eager", 1e-3), ("Compiled", 5e-4 if tag == "PR" else 6e-4))]
        save_run(path, results, tag=tag, shard=shard, device_name=f"card {device}")
        return path, 0

    monkeypatch.setattr(orchestrator, "run_tag", fake_run_tag)
    assert orchestrator.main([str(tmp_path), "--device=cuda", "--no-lockstep", "--devices=2,5"]) == 0
    assert sorted((tag, shard, device) for tag, _, shard, device in calls) == [
        ("Nightly", (1, 2), 2), ("Nightly", (2, 2), 5), ("PR", (1, 2), 2), ("PR", (2, 2), 5)]
    assert {stem.rsplit("-", 1)[1] for _, stem, _, _ in calls} == {"shard1", "shard2"}
    for tag in orchestrator.RUN_ORDER:
        (path,) = [p for p in tmp_path.glob(f"*-{tag}.pkl") if "-shard" not in p.name]
        run = load_run(path)
        assert sorted(r.sub_label for r in run.rows if r.description.startswith("Compiled")) == [
            "Input (1, 3, 1, 4), torch.float32 | mode: nearest", "Input (1, 3, 2, 4), torch.float32 | mode: nearest"]
        assert run.extra["shards"] == 2 and run.extra["processes"] == 1
        assert run.extra["device_name"] == "card 2, card 5"
    (table,) = tmp_path.glob("*-speedup.md")
    rows = [line for line in table.read_text().splitlines() if line.startswith("| Input")]
    assert len(rows) == 2 and all("1.20x" in row for row in rows)  # 6e-4 / 5e-4, one row per shard


def test_each_shard_times_on_its_own_cpus():
    cpus = list(range(64))
    slices = [orchestrator.shard_cpus(cpus, (i, 4)) for i in range(1, 5)]
    assert [len(s) for s in slices] == [16] * 4 and sorted(sum(slices, [])) == cpus
    assert orchestrator.shard_cpus([0, 1], (2, 4)) == [0, 1]  # fewer CPUs than shards: all of them


def test_cpus_per_process_pins_each_process_to_the_first_of_its_cpus():
    cpus = list(range(64))
    assert orchestrator.process_cpus(cpus, None, None) is None  # the parent's, unchanged
    assert orchestrator.process_cpus(cpus, None, 2) == [0, 1]
    assert orchestrator.process_cpus(cpus, (3, 4), None) == list(range(32, 48))
    assert orchestrator.process_cpus(cpus, (3, 4), 2) == [32, 33]
    assert orchestrator.process_cpus([5], None, 2) == [5]  # fewer CPUs than asked: all of them
    args = orchestrator.parse_args(["out", "--cpus-per-process", "2"])
    assert args.cpus_per_process == 2 and orchestrator.parse_args(["out"]).cpus_per_process is None
    with pytest.raises(SystemExit):  # fewer CPUs than intra-op threads
        orchestrator.parse_args(["out", "--cpus-per-process", "1", "--num-threads", "2"])


def test_a_shard_compiles_without_workers(tmp_path):
    shard, alone = orchestrator.child_env(tmp_path / "a", device=3), orchestrator.child_env(tmp_path / "b")
    assert shard["CUDA_VISIBLE_DEVICES"] == "3" and shard["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    assert alone.get("TORCHINDUCTOR_COMPILE_THREADS") == os.environ.get("TORCHINDUCTOR_COMPILE_THREADS")


def test_behind_times_only_the_rows_a_report_lists_as_behind(monkeypatch, tmp_path):
    """``--behind PR.pkl NIGHTLY.pkl``: the cases of the run's matrix whose rows that report lists
    as behind (a host-bound row behind eager is not listed), and no others; with ``--shard I/N``,
    the I-th of N shards of those cases."""
    from torch.utils.benchmark.utils.common import Measurement, TaskSpec

    from perf._pickles import save_run

    cases = [c for c in make_cases("cpu", quick=True) if c.kind == "interp"][:3]
    # per case: (eager, PR, Nightly) seconds: behind Nightly; ahead of both; host-bound, behind eager only
    times = {cases[0]: (1e-3, 6e-4, 5e-4), cases[1]: (1e-3, 4e-4, 5e-4), cases[2]: (50e-6, 60e-6, 70e-6)}
    pickles = []
    for tag, column in (("PR", 1), ("Nightly", 2)):
        rows = [Measurement(1, [t[kind_index]], TaskSpec("fn(x)", "", label=c.label, sub_label=c.sub_label,
                                                          description=f"{kind} (v) {tag}"))
                for c, t in times.items() for kind, kind_index in (("Eager", 0), ("Compiled", column))]
        pickles.append(tmp_path / f"{tag}.pkl")
        save_run(pickles[-1], rows, tag=tag, device="cpu")
    filters = []

    def fake_run_tag(tag, args, stem, shard=None, device=None, stop_after=None):
        filters.append(args.filter)
        return None, 0

    monkeypatch.setattr(orchestrator, "run_tag", fake_run_tag)
    orchestrator.main([str(tmp_path / "again"), "--device=cpu", "--quick", "--no-lockstep", "--behind", *map(str, pickles)])
    assert len(filters) == 2 and filters[0] == filters[1]
    matched = [c.name for c in make_cases("cpu", quick=True) if re.search(filters[0], c.name)]
    assert matched == [cases[0].name]
    # with --shard, the filter names every row behind, and the run's processes take their shard of them
    orchestrator.main([str(tmp_path / "again"), "--device=cpu", "--quick", "--no-lockstep", "--shard=2/2", "--behind",
                       *map(str, pickles)])
    assert filters[2:] == filters[:2]
    with pytest.raises(SystemExit):
        orchestrator.parse_args(["out", "--behind", str(pickles[0]), "--filter", "x"])


def test_devices_need_cuda():
    with pytest.raises(SystemExit):
        orchestrator.parse_args(["out", "--device=cpu", "--devices=0,1"])
    for text in ("0,0", "a", "-1", ""):
        with pytest.raises(SystemExit):
            orchestrator.parse_args(["out", "--device=cuda", f"--devices={text}"])
    assert orchestrator.parse_args(["out", "--device=cuda", "--devices=0,3"]).devices == [0, 3]


def test_a_shard_takes_every_nth_case_and_the_shards_cover_the_matrix():
    cases = make_cases("cuda", backward=True)
    shards = [interp_mode.shard_of(cases, (i, 4)) for i in range(1, 5)]
    assert sorted(map(len, shards)) == [len(cases) // 4] * (4 - len(cases) % 4) + [len(cases) // 4 + 1] * (len(cases) % 4)
    assert sorted((c.name for s in shards for c in s)) == sorted(c.name for c in cases)
    assert interp_mode.parse_shard("2/4") == (2, 4)
    for text in ("0/4", "5/4", "1", "a/b"):
        with pytest.raises(argparse.ArgumentTypeError):
            interp_mode.parse_shard(text)


def test_calls_of_counts_every_call_of_blocked_autorange():
    import torch.utils.benchmark as benchmark

    from perf import bench

    calls = []
    measurement = benchmark.Timer("f()", globals={"f": lambda: calls.append(1)}).blocked_autorange(min_run_time=0.02)
    assert bench.calls_of(measurement) == len(calls)


def test_cpu_columns_record_their_page_faults_per_call(monkeypatch):
    """A call whose 64 MB buffer the allocator maps afresh faults every page of it; ``x + 1`` none."""
    import torch

    def fresh_buffer(x):
        return torch.ones(16 << 20) + x.sum()

    def add_one(x):
        return x + 1

    result, _ = _time_fake(monkeypatch, "cpu", fresh_buffer)
    descriptions = [m.task_spec.description for m in result.measurements]
    assert sorted(result.page_faults) == sorted(descriptions)
    assert all(result.page_faults[d] > 8000 for d in descriptions)  # 16384 pages of 4 kB
    result, _ = _time_fake(monkeypatch, "cpu", add_one)
    assert all(faults < 1 for faults in result.page_faults.values())
    result, _ = _time_fake(monkeypatch, "cuda", add_one)
    assert result.page_faults == {}


def test_shard_runs_one_shard_of_the_cases_on_this_device(monkeypatch, tmp_path):
    """``--shard 3/16``: one Nightly and PR pair of that shard, printing to the console on the
    parent's device and CPUs, its pickles named for the shard (``python -m perf.merge`` joins them)."""
    calls = []

    def fake_call(command, **kwargs):
        calls.append((command, kwargs))
        return 0

    monkeypatch.setattr(orchestrator.subprocess, "call", fake_call)
    assert orchestrator.main([str(tmp_path), "--device=cpu", "--no-lockstep", "--shard=3/16"]) == 1  # the fakes wrote no pickle
    assert [c[0][4] for c in calls] == ["--tag=Nightly", "--tag=PR"]
    for command, kwargs in calls:
        assert "--shard=3/16" in command and re.search(r"-shard3of16-(Nightly|PR)\.pkl$", command[-2])
        assert "stdout" not in kwargs and "preexec_fn" not in kwargs
        for name in ("CUDA_VISIBLE_DEVICES", "TORCHINDUCTOR_COMPILE_THREADS"):  # the parent's
            assert kwargs["env"].get(name) == os.environ.get(name)
    with pytest.raises(SystemExit):
        orchestrator.parse_args(["out", "--device=cuda", "--devices=0,1", "--shard=1/2"])
    for text in ("0/4", "5/4", "x"):
        with pytest.raises(SystemExit):
            orchestrator.parse_args(["out", f"--shard={text}"])


def test_reduce_overhead_columns_are_timed_after_every_plain_column(monkeypatch, tmp_path, capsys):
    """Once a CUDA graph has run in a process, a later plain compiled call can take longer: a run
    times the reduce-overhead columns of the overhead rows and of the host-bound cases last, each
    stored with its row."""
    import torch
    from torch.utils.benchmark.utils.common import Measurement, TaskSpec

    from perf import bench
    from perf._pickles import load_run

    cases = [c for c in make_cases("cpu", quick=True, modes=("nearest",)) if c.kind == "interp"][:2]
    events = []

    def result(label, sub_label, kinds, reduce_overhead=False):
        return bench.CaseResult([Measurement(1, [1e-5], TaskSpec("", "", label=label, sub_label=sub_label,
                                                                 description=f"{kind} (x) PR")) for kind in kinds],
                                reduce_overhead=reduce_overhead)

    def plain_overhead(sub_label):
        def measure(device, tag, **kwargs):
            events.append(("plain", sub_label))
            return result(bench.OVERHEAD_LABEL, sub_label, ("Eager", "Compiled"), reduce_overhead=True)
        return measure

    def fake_run_case(case, tag, **kwargs):
        events.append(("plain", case.name))
        return result(case.label, case.sub_label, ("Eager", "Compiled"), reduce_overhead=case.name == cases[0].name)

    def fake_case_reduce_overhead(case, tag, **kwargs):
        events.append(("reduce-overhead", case.name))
        return result(case.label, case.sub_label, (bench.REDUCE_OVERHEAD,))

    def fake_overhead_reduce_overhead(sub_label, device, tag, **kwargs):
        events.append(("reduce-overhead", sub_label))
        return result(bench.OVERHEAD_LABEL, sub_label, (bench.REDUCE_OVERHEAD,))

    monkeypatch.setattr(bench, "measure_call_overhead", plain_overhead(bench.OVERHEAD_SUB_LABEL))
    monkeypatch.setattr(bench, "measure_step_overhead", plain_overhead(bench.STEP_OVERHEAD_SUB_LABEL))
    monkeypatch.setattr(bench, "run_case", fake_run_case)
    monkeypatch.setattr(bench, "run_case_reduce_overhead", fake_case_reduce_overhead)
    monkeypatch.setattr(bench, "measure_overhead_reduce_overhead", fake_overhead_reduce_overhead)
    # run() sets process-wide state for a benchmark process: keep it from the other tests here
    monkeypatch.setattr(interp_mode, "compile_each_case_afresh", lambda: None)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "inductor-cache" / "triton"))
    threads = torch.get_num_threads()
    names = "|".join(re.escape(c.name) for c in cases)
    try:
        assert interp_mode.main([str(tmp_path), "--tag=PR", "--device=cpu", "--quick", "--mode=nearest",
                                 "--backward", f"--filter=^({names})$", "--pickle-name=run.pkl"]) == 0
    finally:
        torch.set_num_threads(threads)
    plain = [("plain", bench.OVERHEAD_SUB_LABEL), ("plain", bench.STEP_OVERHEAD_SUB_LABEL)]
    plain += [("plain", c.name) for c in cases]
    reduce_overhead = [("reduce-overhead", bench.OVERHEAD_SUB_LABEL), ("reduce-overhead", bench.STEP_OVERHEAD_SUB_LABEL),
                       ("reduce-overhead", cases[0].name)]
    assert events == plain + reduce_overhead
    assert "[reduce-overhead 3/3] " + cases[0].name in capsys.readouterr().out
    columns = {(r.sub_label, r.description.split(" (")[0]) for r in load_run(tmp_path / "run.pkl").rows}
    assert (cases[0].sub_label, bench.REDUCE_OVERHEAD) in columns
    assert (cases[1].sub_label, bench.REDUCE_OVERHEAD) not in columns

    # past the deadline, the columns left are counted, not timed
    events.clear()
    collected = interp_mode.Collected(reduce_overhead_left=[("row", lambda: events.append("timed"))])
    interp_mode.run_reduce_overhead(collected, "cpu", deadline=time.perf_counter() - 1)
    assert events == [] and "Time limit: 1 reduce-overhead columns not timed" in capsys.readouterr().out

    # a column that fails is recorded, and the ones after it still run
    def fail():
        raise RuntimeError("no graph")

    def other():
        events.append("timed")
        return result("L", "S", (bench.REDUCE_OVERHEAD,))

    collected = interp_mode.Collected(reduce_overhead_left=[("row", fail), ("other", other)])
    interp_mode.run_reduce_overhead(collected, "cpu")
    assert collected.errors == ["row (reduce-overhead): RuntimeError: no graph"] and events == ["timed"]
    assert len(collected.test_results) == 1 and collected.reduce_overhead_left == []



def test_host_bound_rows_are_timed_again_after_the_last_case(monkeypatch, tmp_path, capsys):
    """A host's speed moves in spells of seconds, and a row's back-to-back rounds share one: each
    host-bound row (the overhead rows included) is timed again after the last case and before any
    reduce-overhead column, each column keeping the lowest median of all its rounds; the other
    rows are timed once."""
    import torch
    from torch.utils.benchmark.utils.common import Measurement, TaskSpec

    from perf import bench
    from perf._pickles import load_run

    cases = [c for c in make_cases("cpu", quick=True, modes=("nearest",)) if c.kind == "interp"][:2]
    events, late_options = [], []

    def result(label, sub_label, medians, host_bound, problem=None):
        kinds = ("Eager", "Compiled")
        measurements = [Measurement(1, [t], TaskSpec("", "", label=label, sub_label=sub_label,
                                                     description=f"{kind} (x) PR")) for kind, t in zip(kinds, medians)]
        spread = {m.task_spec.description: {"min": m.median, "max": m.median, "n": 1} for m in measurements}
        problems = {} if problem is None else {"Compiled (x) PR": problem}
        return bench.CaseResult(measurements, spread=spread, host_bound=host_bound, problems=problems,
                                reduce_overhead=host_bound)

    def overhead(sub_label, first, late):
        def measure(device, tag, **kwargs):
            is_late = "kernels" in kwargs
            events.append(("late" if is_late else "plain", sub_label))
            return result(bench.OVERHEAD_LABEL, sub_label, late if is_late else first, True)
        return measure

    def fake_run_case(case, tag, **kwargs):
        is_late = kwargs.get("kernels") is False
        events.append(("late" if is_late else "plain", case.name))
        if is_late:
            late_options.append(kwargs)
            return result(case.label, case.sub_label, (5e-5, 1e-5), True, problem="late values differ")
        return result(case.label, case.sub_label, (4e-5, 2e-5), case.name == cases[0].name)

    monkeypatch.setattr(bench, "measure_call_overhead", overhead(bench.OVERHEAD_SUB_LABEL, (8e-6, 6e-5), (9e-6, 4e-5)))
    monkeypatch.setattr(bench, "measure_step_overhead", overhead(bench.STEP_OVERHEAD_SUB_LABEL, (9e-5, 3e-4),
                                                                 (8e-5, 4e-4)))
    monkeypatch.setattr(bench, "run_case", fake_run_case)
    def reduce_overhead(label, sub_label):
        events.append(("reduce-overhead", sub_label if label == bench.OVERHEAD_LABEL else cases[0].name))
        description = f"{bench.REDUCE_OVERHEAD} (x) PR"
        return bench.CaseResult([Measurement(1, [3e-5], TaskSpec("", "", label=label, sub_label=sub_label,
                                                                  description=description))])

    monkeypatch.setattr(bench, "run_case_reduce_overhead",
                        lambda case, tag, **kwargs: reduce_overhead(case.label, case.sub_label))
    monkeypatch.setattr(bench, "measure_overhead_reduce_overhead",
                        lambda sub_label, device, tag, **kwargs: reduce_overhead(bench.OVERHEAD_LABEL, sub_label))
    monkeypatch.setattr(interp_mode, "compile_each_case_afresh", lambda: None)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "inductor-cache" / "triton"))
    threads = torch.get_num_threads()
    names = "|".join(re.escape(c.name) for c in cases)
    argv = [str(tmp_path), "--tag=PR", "--device=cpu", "--quick", "--mode=nearest", "--backward",
            f"--filter=^({names})$", "--repeat=3"]
    try:
        status = interp_mode.main(argv + ["--late-rounds=2", "--pickle-name=run.pkl"])
    finally:
        torch.set_num_threads(threads)
    assert status == interp_mode.EXIT_PROBLEMS  # the late compile's mismatch counts like a first one
    overheads = (bench.OVERHEAD_SUB_LABEL, bench.STEP_OVERHEAD_SUB_LABEL)
    plain = [("plain", s) for s in overheads] + [("plain", c.name) for c in cases]
    late = [("late", s) for s in overheads] + [("late", cases[0].name)]
    reduce_overhead = [("reduce-overhead", s) for s in overheads] + [("reduce-overhead", cases[0].name)]
    assert events == plain + late + reduce_overhead
    assert [(o["repeat"], o["kernels"]) for o in late_options] == [(2, False)]
    assert "[late rounds 3/3] " + cases[0].name in capsys.readouterr().out

    run = load_run(tmp_path / "run.pkl")
    times = {(r.sub_label, r.description.split(" (")[0]): r.median for r in run.rows}
    assert times[(cases[0].sub_label, "Compiled")] == 1e-5 and times[(cases[0].sub_label, "Eager")] == 4e-5
    assert times[(cases[1].sub_label, "Compiled")] == 2e-5
    assert run.extra["spread"][(cases[0].label, cases[0].sub_label, "Compiled (x) PR")] == {
        "min": 1e-5, "max": 2e-5, "n": 2}
    assert (cases[0].label, cases[0].sub_label, "Compiled (x) PR") in run.extra["mismatches"]
    assert run.extra["compiled_call_overhead_us"] == pytest.approx(40.0)
    assert run.extra["compiled_step_overhead_us"] == pytest.approx(300.0)

    events.clear()
    try:
        interp_mode.main(argv + ["--late-rounds=0", "--pickle-name=none.pkl"])
    finally:
        torch.set_num_threads(threads)
    assert [e for e in events if e[0] == "late"] == []
    with pytest.raises(SystemExit):
        interp_mode.build_parser().parse_args(["out", "--tag=PR", "--late-rounds=-1"])
    assert interp_mode.build_parser().parse_args(["out", "--tag=PR"]).late_rounds == interp_mode.LATE_ROUNDS == 1
    command = orchestrator.child_command("PR", orchestrator.parse_args(["out", "--late-rounds=3"]), "p.pkl")
    assert "--late-rounds=3" in command and "--no-reduce-overhead" not in command
    command = orchestrator.child_command("PR", orchestrator.parse_args(["out", "--no-reduce-overhead"]), "p.pkl")
    assert "--no-reduce-overhead" in command
    assert not interp_mode.build_parser().parse_args(command[3:]).reduce_overhead
    assert interp_mode.build_parser().parse_args(["out", "--tag=PR"]).reduce_overhead

def test_cuda_rows_whose_kernels_are_a_fraction_of_the_call_get_late_rounds(monkeypatch):
    """A CUDA row whose compiled kernels take under half of its compiled call is decided by the
    host's spells, whatever its eager time: it gets late rounds like a host-bound row. A 300 us
    step (not host-bound at a 100 us threshold) with 7.5 us of kernels does; with kernels as long
    as the call, or without a kernel time (CPU), it does not."""

    def slow_double(x):
        time.sleep(300e-6)
        return x * 2

    result, _ = _time_fake(monkeypatch, "cuda", slow_double, backward=True, step_overhead_seconds=100e-6)
    assert not result.host_bound and result.host_decided and result.late_rounds
    result, _ = _time_fake(monkeypatch, "cuda", slow_double, backward=True, step_overhead_seconds=100e-6,
                           kernel_us=lambda call: (call(), 1e4)[1])
    assert not result.host_decided and not result.late_rounds
    result, _ = _time_fake(monkeypatch, "cpu", slow_double, backward=True, step_overhead_seconds=100e-6)
    assert result.kernel_us == {} and not result.late_rounds


def test_huge_pages_run_both_tags_with_the_cpu_allocators_huge_pages(monkeypatch, tmp_path):
    """``--huge-pages``: ``THP_MEM_ALLOC_ENABLE=1`` in both tags' processes (PyTorch's CPU allocator
    reads it once), recorded in each pickle and shown in the Runs section."""
    from perf import results_table
    from perf._pickles import load_run, save_run

    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    assert orchestrator.child_env(tmp_path, huge_pages=True)["THP_MEM_ALLOC_ENABLE"] == "1"
    assert "THP_MEM_ALLOC_ENABLE" not in orchestrator.child_env(tmp_path)
    envs = []

    def fake_call(command, **kwargs):
        envs.append(kwargs["env"].get("THP_MEM_ALLOC_ENABLE"))
        return 0

    monkeypatch.setattr(orchestrator.subprocess, "call", fake_call)
    orchestrator.main([str(tmp_path), "--device=cpu", "--no-lockstep", "--huge-pages"])
    assert envs == ["1", "1"]
    save_run(tmp_path / "run.pkl", [_measurement(1e-3)], tag="PR", huge_pages=True)
    assert "huge pages (THP_MEM_ALLOC_ENABLE=1)" in results_table.render([load_run(tmp_path / "run.pkl")])
