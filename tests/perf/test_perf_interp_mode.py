"""The runner: a tiny end-to-end Nightly run, and the PR/Nightly isolation rules."""

import os
import pickle
import re
import subprocess
import sys
import tempfile
from argparse import Namespace
from pathlib import Path

import pytest

from perf import __main__ as orchestrator
from perf import interp_mode
from perf.cases import make_cases

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_one_case_nightly_run_end_to_end(tmp_path):
    case = make_cases("cpu", quick=True, modes=("nearest",))[0]
    cache = tmp_path / "inductor-cache"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    env.pop("TRITON_CACHE_DIR", None)
    command = [sys.executable, "-m", "perf.interp_mode", str(tmp_path), "--tag=Nightly", "--device=cpu",
               "--quick", "--mode=nearest", "--min-run-time=0.01", "--dynamic=false",
               f"--filter=^{re.escape(case.name)}$", "--pickle-name=run.pkl"]
    proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(rf"^\[1/1\] {re.escape(case.name)} elapsed [\d.]+s ETA 0s \| .*matches eager$",
                     proc.stdout, re.M), proc.stdout

    with open(tmp_path / "run.pkl", "rb") as f:
        payload = pickle.load(f)
    import torch

    assert payload["torch_version"] == torch.__version__
    assert payload["num_threads"] == 1 and payload["tag"] == "Nightly" and payload["package"] is None
    assert payload["dynamic"] is False and payload["mismatches"] == {} and payload["errors"] == []
    eager, compiled = payload["test_results"]
    assert (eager.task_spec.label, eager.task_spec.sub_label) == (case.label, case.sub_label)
    assert eager.task_spec.description == f"Eager ({torch.__version__}) Nightly"
    assert compiled.task_spec.description == f"Compiled ({torch.__version__}) Nightly"
    assert compiled.median > 0
    assert any(cache.iterdir()), "the run did not use the Inductor cache it was given"


def test_pr_run_without_the_package_fails_clearly(monkeypatch, capsys):
    monkeypatch.setattr(interp_mode, "PACKAGE", "decomps_not_installed_anywhere")
    with pytest.raises(SystemExit) as exit_info:
        interp_mode.load_package("PR")
    assert exit_info.value.code == interp_mode.EXIT_NO_PACKAGE
    assert "--tag=PR needs the 'decomps_not_installed_anywhere' package" in capsys.readouterr().err


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
    assert (args.mode, args.device, args.num_threads, args.dynamic, args.backward, args.quick) == (
        "both", "auto", 1, True, False, False)
    assert parser.parse_args(["out", "--tag=PR", "--dynamic=false"]).dynamic is False
    assert parser.parse_args(["out", "--tag=PR", "--dynamic"]).dynamic is True
    assert interp_mode.selected_call_forms(args) == ("symbolic", "literal")
    literal = parser.parse_args(["out", "--tag=PR", "--call-forms=literal"])
    assert interp_mode.selected_call_forms(literal) == ("literal",)
    for bad in (["--tag=Other"], ["--tag=PR", "--call-forms=static"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["out", *bad])


def test_orchestrator_gives_each_tag_its_own_cache(tmp_path):
    args = orchestrator.parse_args([str(tmp_path), "--quick", "--backward", "--device=cpu"])
    envs = [orchestrator.child_env(tmp_path / f"cache-{tag}") for tag in orchestrator.RUN_ORDER]
    assert len({e["TORCHINDUCTOR_CACHE_DIR"] for e in envs}) == 2
    assert len({e["TRITON_CACHE_DIR"] for e in envs}) == 2
    command = orchestrator.child_command("Nightly", args, "x.pkl")
    assert command[1:4] == ["-m", "perf.interp_mode", str(tmp_path)]
    assert {"--tag=Nightly", "--quick", "--backward", "--device=cpu", "--dynamic=True",
            "--call-forms=both", "--pickle-name=x.pkl"} <= set(command)
    assert not any(a.startswith("--min-run-time") for a in command)
    assert isinstance(args, Namespace)
    args = orchestrator.parse_args([str(tmp_path), "--call-forms=literal"])
    assert "--call-forms=literal" in orchestrator.child_command("PR", args, "x.pkl")


def test_a_wrong_compiled_result_is_recorded_as_a_mismatch(monkeypatch):
    from perf import bench

    case = next(c for c in make_cases("cpu", quick=True, modes=("nearest",)) if c.dtype == "float32")
    monkeypatch.setattr(bench.torch, "compile", lambda fn, **kwargs: (lambda *args: fn(*args) + 1))
    result = bench.run_case(case, "PR", dynamic=True, num_threads=1, min_run_time=0.01, copy_gbps=100.0)
    assert result.problem and "elements differ" in result.problem
    eager, compiled = (m.task_spec.description for m in result.measurements)
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
        return bench.CaseResult(measurements, problem=None, compile_seconds=0.0)

    monkeypatch.setattr(bench, "run_case", fake_run_case)
    path = tmp_path / "run.pkl"
    saved = []

    def save(collected):
        saved.append(len(collected.test_results))
        save_run(path, collected.test_results, tag="PR")

    args = Namespace(tag="PR", dynamic=True, num_threads=1)
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
