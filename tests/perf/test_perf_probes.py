"""perf/probes/: each probe runs as ``python -m perf.probes.NAME`` and names the finding of
docs/findings.md it measures."""

import ast
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBES = sorted(p for p in (ROOT / "perf" / "probes").glob("*.py") if p.name != "__init__.py")
FINDINGS = re.findall(r"^## (\d+)\. ", (ROOT / "docs" / "findings.md").read_text(), re.M)


def test_probes_are_found():
    assert {p.stem for p in PROBES} >= {"dynamic_shapes_probe", "period_probe", "fused_tiling_probe", "step_profile"}


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.stem)
def test_probe_names_its_finding_and_command(probe):
    module = ast.parse(probe.read_text())
    doc = ast.get_docstring(module) or ""
    cited = re.findall(r"docs/findings\.md,\s+finding (\d+)", doc)
    assert cited and set(cited) <= set(FINDINGS), (cited, FINDINGS)
    assert f"python -m perf.probes.{probe.stem}" in doc
    assert any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in module.body)


def test_probe_main_writes_every_row(tmp_path, capsys, monkeypatch):
    import json

    from perf import probes

    def rows():
        yield "a", {"row": "a", "us": 1.5}
        yield "b", {"row": "b", "us": [2.0, 3.0]}

    monkeypatch.setattr(probes, "start_cuda_probe", lambda name: True)
    assert probes.probe_main("some_probe", rows, [str(tmp_path)]) == 0
    assert json.loads((tmp_path / "some_probe.json").read_text()) == [{"row": "a", "us": 1.5}, {"row": "b", "us": [2.0, 3.0]}]
    assert capsys.readouterr().out.splitlines() == ['a: {"row": "a", "us": 1.5}', 'b: {"row": "b", "us": [2.0, 3.0]}']
    monkeypatch.setattr(probes, "start_cuda_probe", lambda name: False)  # no CUDA: nothing written
    assert probes.probe_main("other_probe", rows, [str(tmp_path)]) == 1
    assert not (tmp_path / "other_probe.json").exists()


def test_cpu_threads_probe_checks_and_times_every_variant(tmp_path, monkeypatch):
    """Each variant compiles and matches eager (the probe asserts it), at small sizes."""
    import json

    import torch

    from perf.probes import cpu_threads_probe

    # Whole 16-lane vectors of a 4.3x gather: every variant's load form is generated.
    monkeypatch.setattr(cpu_threads_probe, "ROWS", [((1, 2, 12, 130), (2, 30))])
    threads = torch.get_num_threads()
    argv = [str(tmp_path), "--threads", "1", "--inputs", "2", "--rounds", "1", "--calls", "2"]
    assert cpu_threads_probe.main(argv) == 0
    (record,) = json.loads((tmp_path / "cpu_threads_probe.json").read_text())
    assert record["threads"] == 1 and record["inputs"] == 2
    assert set(record["us"]) == {*cpu_threads_probe.VARIANTS, "eager"}
    assert all(us > 0 for us in record["us"].values())
    assert torch.get_num_threads() == threads


def test_cpu_threads_probe_columns_keep_their_own_graphs():
    """Each variant compiles a code object of its own, whose graph stays in Dynamo's cache after
    the next variant compiles: columns sharing one would all run the last variant's graph."""
    import torch
    import torch.nn.functional as F
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from perf.probes import cpu_threads_probe

    def f(x, kwargs):
        return F.interpolate(x, **kwargs)

    x, kwargs = torch.randn(1, 2, 12, 130), {"size": (2, 30), "mode": "nearest"}
    torch._dynamo.reset()
    columns = {name: cpu_threads_probe._compiled(f, name, patches, x, kwargs)
               for name, patches in cpu_threads_probe.VARIANTS.items()}
    codes = [c._torchdynamo_orig_callable.__code__ for c in columns.values()]
    assert len(set(map(id, codes))) == len(codes)
    assert all(len(_debug_get_cache_entry_list(code)) == 1 for code in codes)
    for compiled in columns.values():
        assert torch.equal(compiled(x, kwargs), f(x, kwargs))


@pytest.mark.parametrize("kind", ["fpn_merge", "unet_skip"])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_step_profile_times_the_harness_rows(kind, channels_last, mode):
    """step_profile's fused steps are the harness's rows (the matrix has exactly one of each)."""
    from perf.probes import step_profile

    case = step_profile._harness_case(kind, channels_last, mode)
    layout = "channels_last" if channels_last else "contiguous_format"
    assert case.name == f"{kind}+bwd {mode} (8, 256, 128, 128)->(256, 256) bfloat16 {layout}"


def test_gather_bytes_only_keeps_the_lambda_up_to_its_first_lane():
    """The bound's kernel keeps each gather's base and first lane, loads the two vectors from
    there, and leaves the rest of the kernel as it was."""
    from perf.probes import cpu_call_probe

    gather = """[&]() -> at::vec::Vectorized<float>
{
    const float* base = in_ptr0 + static_cast<int64_t>(ks1*tmp0);
    const __m512i lanes = tmp1;
    const int64_t first = _mm_cvtsi128_si32(_mm512_castsi512_si128(lanes));
    if (in_span)
    {
        return _mm512_permutex2var_ps(a, offsets, b);
    }
    return at::vec::Vectorized<float>::loadu(values);
}
()"""
    source = f"auto tmp2 = {gather};\ntmp2.store(out_ptr0 + x2);\nauto tmp3 = {gather};"
    replaced, count = cpu_call_probe.gather_bytes_only(source)
    assert count == 2
    assert "permutex2var" not in replaced and "values" not in replaced
    assert replaced.count("_mm512_loadu_ps(base + first), _mm512_loadu_ps(base + first + 16)") == 2
    assert replaced.count("const int64_t first = _mm_cvtsi128_si32") == 2
    assert "tmp2.store(out_ptr0 + x2);" in replaced


def test_cpu_neck_probe_times_the_neck_and_its_convolutions_alone(tmp_path):
    """The probe checks each compiled step against eager's and times every column with its page
    faults, at small levels, with the package and (``--stock``) without, after which the package is
    installed again."""
    import json

    import torch

    import decomps
    from perf.probes import cpu_neck_probe

    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(cpu_neck_probe.NECK_SHAPE, "cpu", (1, 4, 16, 16))
        for flags, name in (([], "cpu_neck_probe"), (["--stock"], "cpu_neck_probe-stock")):
            args = [str(tmp_path), "--threads", "1", "--rounds", "2", "--steps", "2", *flags]
            assert cpu_neck_probe.main(args) == 0
            assert decomps.is_installed()
            (record,) = json.loads((tmp_path / f"{name}.json").read_text())
            assert record["tag"] == ("stock" if flags else "package")
            assert record["threads"] == 1 and record["dtype"] == "float32" and record["shape"] == [1, 4, 16, 16]
            columns = {f"{step}, {kind}" for step in ("neck, nearest", "neck, nearest-exact", "lateral only")
                       for kind in ("compiled", "eager")}
            assert set(record["us"]) == set(record["minor faults per step"]) == columns
            assert all(0 < us["best"] <= us["median"] for us in record["us"].values())
    assert torch.get_num_threads() == threads


def test_cpu_neck_probe_lateral_only_keeps_the_neck_s_weights_inputs_and_gradients():
    import torch

    from perf.bench import LateralOnlyNeck, build_workload
    from perf.cases import Case
    from perf.probes.cpu_neck_probe import lateral_only

    work = build_workload(Case("fpn_neck", "cpu", (1, 4, 8, 8), "float32", mode="nearest-exact"))
    bound = lateral_only(work)
    assert isinstance(bound.forward, LateralOnlyNeck) and bound.forward.mode == "nearest-exact"
    assert bound.args is work.args and bound.grad_outputs is work.grad_outputs
    assert bound.wrt == (*bound.forward.parameters(), *work.args)
    for mine, theirs in zip(bound.forward.parameters(), work.forward.parameters()):
        assert torch.equal(mine, theirs) and mine is not theirs
    grads = bound.runner(bound.forward)(*bound.args)
    assert [g.shape for g in grads] == [g.shape for g in work.runner(work.forward)(*work.args)]


def test_cpu_step_probe_splits_the_compiled_step(tmp_path):
    """The probe checks the compiled gradient against eager's and splits the step into its two
    graphs and the rest, at small sizes."""
    import json

    import torch

    from perf.probes import cpu_step_probe

    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu_step_probe, "ROWS", {"1200x1300": ((1, 2, 24, 26), (4, 6))})
        assert cpu_step_probe.main([str(tmp_path), "--threads", "1", "--rounds", "2", "--steps", "2"]) == 0
    (record,) = json.loads((tmp_path / "cpu_step_probe.json").read_text())
    assert record["threads"] == 1 and record["shape"] == [1, 2, 24, 26]
    assert set(record["us"]) == {"compiled step", "graphs called directly", "eager step",
                                 "tiny twin, compiled step", "tiny twin, eager step"}
    assert all(0 < us["best"] <= us["median"] for us in record["us"].values())
    split = record["compiled step, median"]
    assert split["forward graph"] > 0 and split["backward graph"] > 0
    assert sum(split.values()) == pytest.approx(record["us"]["compiled step"]["median"], rel=0.5)
    assert set(record["gradient addresses"]) == {"compiled step", "eager step"}
    assert all(n >= 1 for n in record["gradient addresses"].values())
    assert torch.get_num_threads() == threads


def test_cpu_call_probe_splits_the_call_into_kernels_and_the_rest(tmp_path):
    """The probe checks the compiled result against eager's and splits the call into the time
    inside its kernels and the rest, at small sizes, with the package and (``--stock``) without,
    after which the package is installed again; with ``--bounds``, the package's call with its
    vector gathers reduced to their loads where the C++ backend takes that path."""
    import json

    import torch

    import decomps
    from lowerings import cpu_gathers
    from perf.probes import cpu_call_probe
    from tests.common import generated_gathers

    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch, generated_gathers():
        patch.setattr(cpu_call_probe, "ROWS", {"small": ((1, 2, 50, 40), (26, 26)), "other": ((1, 2, 30, 20), (9, 9))})
        patch.setattr(cpu_call_probe, "MODES", ("nearest-exact",))
        for flags in (["--bounds", "--call-forms", "symbolic", "literal", "--rows", "small"], ["--stock", "--rows", "small"]):
            args = [str(tmp_path), "--threads", "1", "--rounds", "2", "--calls", "5", *flags]
            assert cpu_call_probe.main(args) == 0
            assert decomps.is_installed()
    rebuilt = {"package": int(cpu_gathers.available()), "stock": 0}
    records = {tag: json.loads((tmp_path / f"{name}.json").read_text())
               for name, tag in (("cpu_call_probe", "package"), ("cpu_call_probe-stock", "stock"))}
    assert [r["form"] for r in records["package"]] == ["symbolic", "literal"]
    assert [r["form"] for r in records["stock"]] == ["symbolic"]
    assert {tuple(r["shape"]) for rs in records.values() for r in rs} == {(1, 2, 50, 40)}
    for tag, record in [(tag, r) for tag, rs in records.items() for r in rs]:
        assert record["tag"] == tag and record["threads"] == 1 and record["mode"] == "nearest-exact"
        us = record["us, median of rounds"]
        bound = {"compiled, gather's bytes only"} if rebuilt[tag] else set()
        assert set(us) == {"compiled", "compiled, kernels not run", "eager"} | bound
        assert record["kernels rebuilt"] == rebuilt[tag]
        assert all(t > 0 for t in us.values())
        assert all(0 < record["us, best round"][k] <= us[k] for k in us)
        split = record["compiled, split"]
        assert split["kernels"] > 0 and split["rest"] > 0
        assert split["kernels"] + split["rest"] == pytest.approx(us["compiled"], abs=0.2)
    assert torch.get_num_threads() == threads


def test_gather_choice_probe_checks_and_rates_every_formulation(tmp_path, monkeypatch):
    """Each formulation compiles and matches eager (the probe asserts it), at small sizes; every
    row's ratios are to eager's time in the same rounds."""
    import json

    from perf.probes import gather_choice_probe

    monkeypatch.setattr(gather_choice_probe, "SHAPES", [((1, 3, 12, 130), (5, 30))])
    argv = [str(tmp_path), "--rounds", "2", "--calls", "2"]
    assert gather_choice_probe.main(argv) == 0
    records = json.loads((tmp_path / "gather_choice_probe.json").read_text())
    assert len(records) == 2 * 2 * 2 * 2  # dtypes, layouts, modes, call forms
    for record in records:
        names = {"contiguous_format": {"aten", "computed", "table"}, "channels_last": {"pixel", "rows", "aten"}}
        assert set(record["ratio"]) == {"eager", *names[record["layout"]]}
        assert record["ratio"]["eager"] == 1.0 and all(r > 0 for r in record["ratio"].values())


def test_shared_timers_call_the_function_as_often_as_asked(monkeypatch):
    import torch

    from perf import probes
    from perf.probes import static_launch_probe

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # CPU only: nothing to wait for
    calls = []
    assert probes.back_to_back_us(lambda: calls.append(1), 7) > 0 and len(calls) == 7
    assert probes.profiled(lambda: calls.append(1), 3).total_calls >= 3 and len(calls) == 10
    profile = static_launch_probe._host_profile(lambda: calls.append(1), calls=4)
    assert profile["Python calls per call"] >= 1 and len(calls) == 14


def test_idle_host_us_times_each_call_alone_after_a_synchronize(monkeypatch):
    """Each call starts on an idle GPU (a synchronize before it), and the result is the median
    call, which one slow call does not move."""
    import time

    import torch

    from perf import probes

    events, now = [], [0.0]
    durations = iter([5.0, 1.0, 2.0, 100.0, 3.0])  # seconds per call on a fake clock

    def call():
        events.append("call")
        now[0] += next(durations)

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: events.append("sync"))
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    assert probes.idle_host_us(call, 5) == 3.0e6
    assert events == ["sync", "call"] * 5 + ["sync"]


def test_static_launch_probe_compiles_each_column_apart():
    """Each column's function has a code object of its own, so Dynamo caches it apart."""
    from perf.probes import static_launch_probe

    f, g = static_launch_probe._fresh(static_launch_probe._interpolate), static_launch_probe._fresh(
        static_launch_probe._interpolate)
    assert f.__code__ is not g.__code__ and f.__code__.co_name != g.__code__.co_name
    assert f.__code__.co_code == static_launch_probe._interpolate.__code__.co_code


def test_cached_launch_probe_columns():
    """The "through run" column compiles with no kernel taken for the package's; the other as
    installed. Each row's function is the interpolation it names."""
    import torch

    from lowerings import cached_launch, package_kernels
    from perf.probes import cached_launch_probe

    marked = type("Tuner", (), {"inductor_meta": {package_kernels.PACKAGE: True}})()
    with cached_launch_probe._scope("through run"):
        assert not cached_launch.is_package_kernel(marked)
    with cached_launch_probe._scope("cached launch"):
        assert cached_launch.is_package_kernel(marked)
    x = torch.arange(6.0).reshape(1, 1, 6)
    fn = cached_launch_probe._interpolation("nearest", {"scale_factor": 2})
    assert torch.equal(fn(x), x.repeat_interleave(2, dim=-1))


def test_host_cost_probe_rows_are_harness_steps_with_tiny_twins():
    """Each step the probe times is a training step of the CUDA matrix (same input, output size,
    dtype, layout, mode and call form), and its tiny twin keeps the row's rank, layout and
    direction (up or down) with kernels of a few us."""
    from perf.cases import CHANNELS_LAST, CONTIGUOUS, make_cases
    from perf.probes import host_cost_probe

    steps = {(c.shape, c.scale_factor or c.osize, c.dtype, c.memory_format, c.mode, c.call_form == "literal")
             for c in make_cases("cuda", backward=True) if c.kind == "interp" and c.backward}
    rows = {**host_cost_probe.ROWS, **host_cost_probe.BEHIND_ROWS, **host_cost_probe.BATCH4_ROWS,
            **host_cost_probe.DOWNSAMPLE_ROWS}
    for name, (shape, osize, tiny, dtype, channels_last, mode, literal) in rows.items():
        layout = CHANNELS_LAST[len(shape) - 2] if channels_last else CONTIGUOUS
        literal = literal and not isinstance(osize, float)  # a scale factor has one call form
        assert (shape, osize, dtype, layout, mode, literal) in steps, name
        if tiny is not None:
            tiny_shape, tiny_osize = tiny
            assert len(tiny_shape) == len(shape) and tiny_shape[:2] == shape[:2], name
            assert math.prod(tiny_shape) <= 2**16, name
            if not isinstance(osize, float):
                assert [o > i for o, i in zip(tiny_osize, tiny_shape[2:])] == [
                    o > i for o, i in zip(osize, shape[2:])], name


def test_host_cost_probe_fused_rows_are_harness_steps_with_tiny_twins():
    """``--rows fused``: each fused step is a case of the CUDA matrix (the same name), and its
    tiny twin differs only in its spatial sizes, small enough for kernels of a few us."""
    from perf.cases import make_cases
    from perf.probes import host_cost_probe

    names = {c.name for c in make_cases("cuda", backward=True)}
    for kind in ("fpn_merge", "unet_skip"):
        for layout in ("contiguous_format", "channels_last"):
            case, tiny = host_cost_probe.fused_case(kind, layout), host_cost_probe.fused_case(kind, layout, tiny=True)
            assert case.name in names and case.backward, case.name
            assert tiny.shape[:2] == case.shape[:2] and tiny.kind == kind and tiny.memory_format == layout
            assert math.prod(tiny.output_shape) <= 2**18 < math.prod(case.output_shape)


def test_call_host_probe_checks_and_times_both_call_forms(tmp_path, monkeypatch):
    """Each row in both call forms compiles, matches eager with eager's strides, and gets its call
    time, its round's empty call and a count of Python calls, at a small size on the CPU; the
    process's compile caches are as they were."""
    import json

    import torch

    from perf.probes import call_host_probe

    caching = torch._inductor.config.fx_graph_cache

    monkeypatch.setattr(call_host_probe, "ROWS", [((1, 3, 20, 16), (9, 11), "nearest-exact", "float32", True)])
    argv = [str(tmp_path), "--device", "cpu", "--rounds", "1", "--calls", "2"]
    assert call_host_probe.main(argv) == 0
    records = json.loads((tmp_path / "call_host_probe-pr.json").read_text())
    assert [r["form"] for r in records] == ["literal", "symbolic"]
    for record in records:
        assert record["call_us"] > 0 and record["empty_us"] > 0 and record["python_calls"] > 10
    assert torch._inductor.config.fx_graph_cache == caching


def test_call_host_probe_static_cases_compile_without_dynamic_sizes(tmp_path, monkeypatch):
    """``--static``: each harness case (here a literal size and a scale factor of the CPU matrix)
    compiles with ``dynamic=False`` as the harness builds it, matches eager with eager's strides
    and gets its times and count; a name outside the matrix is refused; the shipped cases are
    forwards of the CUDA matrix."""
    import json

    from perf.cases import make_cases
    from perf.probes import call_host_probe

    names = ["interp nearest (1, 3, 500, 400)->(256, 256) uint8 channels_last size:literal",
             "interp nearest (16, 64, 16000)->(32000,) float32 contiguous_format"]
    cuda_forwards = {case.name for case in make_cases("cuda") if not case.backward}
    assert set(call_host_probe.STATIC_CASES) <= cuda_forwards
    monkeypatch.setattr(call_host_probe, "STATIC_CASES", names)
    argv = [str(tmp_path), "--device", "cpu", "--rounds", "1", "--calls", "2", "--static"]
    assert call_host_probe.main(argv) == 0
    records = json.loads((tmp_path / "call_host_probe-pr.json").read_text())
    assert [(r["case"], r["dynamic"]) for r in records] == [(name, False) for name in names]
    for record in records:
        assert record["call_us"] > 0 and record["empty_us"] > 0 and record["python_calls"] > 10
    monkeypatch.setattr(call_host_probe, "STATIC_CASES", ["interp nearest (3,)->(5,)"])
    with pytest.raises(SystemExit, match="no case"):
        call_host_probe.main(argv)


def test_step_host_probe_times_a_harness_step_against_the_empty_step(tmp_path):
    """A harness training step (the CPU matrix's smallest) compiles, its gradients match eager's,
    and eager's, the compiled and the empty step each get a time and a count of Python calls;
    a name outside the matrix is refused; the process's compile caches are as they were."""
    import json

    import torch

    from perf.probes import step_host_probe

    caching = torch._inductor.config.fx_graph_cache
    name = "interp+bwd nearest-exact (1, 3, 500, 400)->(256, 256) float32 contiguous_format"
    argv = [str(tmp_path), "--device", "cpu", "--rounds", "1", "--steps", "2", "--cases", name]
    assert step_host_probe.main(argv) == 0
    (record,) = json.loads((tmp_path / "step_host_probe-pr.json").read_text())
    assert record["case"] == name
    for column in ("eager", "compiled", "empty"):
        assert record[column]["us"] > 0 and record[column]["python_calls"] > 10
        assert record[column]["kernels"] is None and record[column]["kernel_table"] is None  # CUDA only
    # a compiled step runs Dynamo, AOTAutograd and the autograd engine: more Python than eager's
    assert record["compiled"]["python_calls"] > record["eager"]["python_calls"]
    assert torch._inductor.config.fx_graph_cache == caching
    with pytest.raises(SystemExit, match="no case"):
        step_host_probe.main([str(tmp_path), "--device", "cpu", "--cases", "interp+bwd no such case"])


def test_step_host_probe_tables_a_step_s_kernels_by_name_heaviest_first():
    """Kernels of the same name are summed per step, the heaviest first, at most ``TOP`` names."""
    from perf.probes import step_host_probe

    kernels = [("copy", 10.0), ("gather", 3.0), ("copy", 12.0), ("gather", 4.0), ("memset", 30.0)]
    assert step_host_probe.kernel_table(kernels, 2) == [
        {"kernel": "memset", "calls": 0.5, "us": 15.0},
        {"kernel": "copy", "calls": 1.0, "us": 11.0},
        {"kernel": "gather", "calls": 1.0, "us": 3.5},
    ]
    many = [(f"k{i}", float(i)) for i in range(step_host_probe.TOP + 3)]
    table = step_host_probe.kernel_table(many, 1)
    assert len(table) == step_host_probe.TOP and table[0]["kernel"] == f"k{step_host_probe.TOP + 2}"


def test_step_host_probe_names_the_hot_functions_of_a_step_compiled_in_a_mode(tmp_path):
    """With ``--mode``, the compiled step compiles in that mode, and its record names the functions
    of most own time per step, heaviest first; a forward case is measured against the empty
    compiled call, which runs less Python than the empty step."""
    import json

    from perf.probes import step_host_probe

    name = "interp+bwd nearest (1, 3, 500, 400)->(256, 256) float32 contiguous_format"
    forward = "interp nearest (1, 3, 500, 400)->(256, 256) float32 contiguous_format"
    argv = [str(tmp_path), "--device", "cpu", "--rounds", "1", "--steps", "2", "--cases", name, forward,
            "--mode", "reduce-overhead"]
    assert step_host_probe.main(argv) == 0
    record, forward_record = json.loads((tmp_path / "step_host_probe-pr.json").read_text())
    assert forward_record["case"] == forward
    assert forward_record["empty"]["python_calls"] < record["empty"]["python_calls"]
    assert record["mode"] == "reduce-overhead"
    top = record["compiled"]["top"]
    assert len(top) == step_host_probe.TOP
    own = [row["own_us"] for row in top]
    assert own == sorted(own, reverse=True) and own[0] > 0
    assert all(row["calls"] > 0 for row in top)
    assert "top" not in record["empty"]
    assert isinstance(record["counters"], dict)


def test_window_form_probe_columns_force_the_form_and_the_variant():
    """Each column's patches: ``positions_in_gather`` answers its form for one-tap gathers over
    one or two dims (and refuses two taps), or keeps its rule; a ``tiled`` column's size variants
    keep the tiled kernel. The probe's cases are harness cases."""
    from unittest import mock

    import torch

    from decomps import kernel_choice
    from lowerings import size_variants
    from perf.cases import make_cases
    from perf.probes import window_form_probe

    assert set(window_form_probe.CASES) <= {c.name for c in make_cases("cuda", backward=True)}
    g = torch.empty(1)
    with mock.patch.object(kernel_choice, "POSITIONS_IN_GATHER_DEVICES", ("cpu",)):
        for form, starts in (("starts", True), ("table", False), ("starts tiled", True), ("table tiled", False)):
            with window_form_probe.scope(form, []):
                assert kernel_choice.positions_in_gather(g, 1, 1) is starts, form
                assert kernel_choice.positions_in_gather(g, 1, 2) is starts, form
                assert not kernel_choice.positions_in_gather(g, 2, 2), form  # two taps: always the table
                if form.endswith("tiled"):
                    assert size_variants._faster(["tiled", "flat"], (), None) == "tiled"
        with window_form_probe.scope("as chosen", []):
            assert kernel_choice.positions_in_gather(g, 1, 1) and not kernel_choice.positions_in_gather(g, 1, 2)


def test_window_form_probe_logs_the_times_the_variant_choice_took(monkeypatch):
    """Outside ``tiled`` columns the size variants choose as installed (``size_variants._faster``),
    and the probe records the times that choice took, in us, with the launch it kept."""
    from torch._inductor.runtime.benchmarking import benchmarker

    from lowerings import size_variants
    from perf.probes import window_form_probe

    class Launch:
        def __init__(self, ms):
            self.ms, self.runs = ms, 0

        def run(self, *args, stream=None):
            self.runs += 1
            return self.ms

    monkeypatch.setattr(benchmarker, "benchmark_gpu", lambda fn, *args, **kwargs: fn())
    tiled, flat = Launch(0.25), Launch(0.125)
    picks = []
    with window_form_probe.scope("as chosen", picks):
        assert size_variants._faster([tiled, flat], (), None) is flat
    assert picks == [{"us": [250.0, 125.0], "kept": 1}]
    assert tiled.runs == flat.runs == 2  # compiled once, timed once: no second timing


def test_cpu_step_forms_probe_times_every_form(tmp_path):
    """Each form compiles and matches eager (the probe asserts it), at small sizes, contiguous and
    channels-last, with the package and (``--stock``) without, after which the package is
    installed again with its blocks on."""
    import json

    import torch

    import decomps
    from decomps import block_pool
    from perf.probes import cpu_step_forms_probe

    threads, min_bytes = torch.get_num_threads(), block_pool.MIN_BYTES
    argv = [str(tmp_path), "--threads", "1", "--rounds", "2", "--steps", "3", "--rows", "500x400"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu_step_forms_probe, "ROWS", {"500x400": ((1, 2, 24, 26), (4, 6))})
        assert cpu_step_forms_probe.main([*argv, "--channels-last"]) == 0
        (channels_last,) = json.loads((tmp_path / "cpu_step_forms_probe.json").read_text())
        assert cpu_step_forms_probe.main(argv) == 0
        assert cpu_step_forms_probe.main([*argv, "--stock"]) == 0
    assert decomps.is_installed() and torch.get_num_threads() == threads and block_pool.MIN_BYTES == min_bytes
    forms = {
        "package": {"eager", "package", "package, gradient from the allocator", "package, ATen's backward"},
        "stock": {"eager", "stock"},
    }
    (contiguous,) = json.loads((tmp_path / "cpu_step_forms_probe.json").read_text())
    (stock,) = json.loads((tmp_path / "cpu_step_forms_probe-stock.json").read_text())
    assert channels_last["memory_format"] == "channels_last" and contiguous["memory_format"] == "contiguous_format"
    for record, tag in ((channels_last, "package"), (contiguous, "package"), (stock, "stock")):
        assert record["tag"] == tag and record["threads"] == 1 and record["shape"] == [1, 2, 24, 26]
        assert set(record["us"]) == set(record["minor faults per step"]) == forms[tag]
        assert all(0 < us["best"] <= us["median"] for us in record["us"].values())
        assert set(record["eager's strides"]) == forms[tag]
