"""Pickles, the results table, speed-ups and the chart, on small synthetic pickles."""

import pickle
import re

import pytest
import torch
from torch.utils.benchmark.utils.common import Measurement, TaskSpec

from perf import plot, results_table, speedup
from perf._pickles import load_run, median_seconds, merge_runs, save_run
from perf.speedup import REPORT_COMPARES, Spec, SpeedupError, compute_speedups

SUB_2D = ("Input (1, 3, 500, 400), torch.uint8, torch.contiguous_format | "
          "mode: nearest, align_corners: None, osize: (256, 256)")
SUB_F32 = ("Input (4, 3, 300, 400), torch.float32, torch.channels_last | "
           "mode: nearest-exact, align_corners: None, osize: (600, 700)")


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def measurement(label, sub_label, description, seconds, number_per_run=10):
    spec = TaskSpec(stmt="fn(x)", setup="", label=label, sub_label=sub_label, description=description)
    return Measurement(number_per_run, [seconds * number_per_run] * 3, spec)


def seed_payload(path, tag, version, times):
    """Exactly the dict the seed PR's perf_interp_mode.py pickles (and nothing more)."""
    results = []
    for sub_label, (eager, compiled) in times.items():
        results.append(measurement("Interpolate, cpu", sub_label, f"Eager ({version}) {tag}", eager))
        results.append(measurement("Interpolate, cpu", sub_label, f"Compiled ({version}) {tag}", compiled))
    payload = {
        "filepath": str(path), "torch_version": version, "torch_config": "PyTorch built with:\n  - GCC 9.3",
        "num_threads": 1, "triton": "2.2.0", "test_results": results,
    }
    with open(path, "wb") as f:
        pickle.dump(payload, f)
    return path


@pytest.fixture
def seed_pickles(tmp_path):
    pr = seed_payload(tmp_path / "pr.pkl", "PR", "2.3.0a0+git1", {SUB_2D: (300e-6, 100e-6), SUB_F32: (2e-3, 1e-3)})
    nightly = seed_payload(tmp_path / "nightly.pkl", "Nightly", "2.3.0.dev2024", {SUB_2D: (300e-6, 400e-6)})
    return pr, nightly


def test_save_and_load_round_trip(tmp_path):
    path = tmp_path / "run.pkl"
    rows = [measurement("Interpolate, cuda", SUB_F32, "Eager (x) PR", 2e-3),
            measurement("Interpolate, cuda", SUB_F32, "Compiled (x) PR", 1e-3)]
    key = ("Interpolate, cuda", SUB_F32, "Compiled (x) PR")
    save_run(path, rows, tag="PR", copy_bandwidth_gbps=4000.0, mismatches={key: "output 0 differs"},
             roofline={key: {"bytes": 10**9, "gbps": 1000.0, "pct_of_copy": 25.0}})
    with open(path, "rb") as f:
        raw = pickle.load(f)
    assert {"filepath", "torch_version", "torch_config", "num_threads", "triton", "test_results"} <= set(raw)
    assert raw["torch_version"] == torch.__version__ and raw["torch_config"] == torch.__config__.show()
    assert all(isinstance(m, Measurement) for m in raw["test_results"])
    run = load_run(path)
    assert [r.median for r in run.rows] == pytest.approx([2e-3, 1e-3])
    assert run.rows[1].problem == "output 0 differs" and run.rows[0].problem is None
    assert (run.rows[1].gbps, run.rows[1].pct_of_copy) == (1000.0, 25.0)
    assert run.copy_bandwidth_gbps == 4000.0 and run.extra["tag"] == "PR"


def test_median_falls_back_to_raw_times_for_foreign_measurements():
    m = measurement("L", "S", "D", 5e-3, number_per_run=4)
    m.raw_times = [0.004, 0.02, 0.008]  # per-run times 1, 5, 2 ms
    del m.__dict__["_sorted_times"]  # as if pickled by a torch whose Measurement lacks the attribute
    assert median_seconds(m) == pytest.approx(2e-3)


def test_results_table_has_all_columns_of_all_pickles(seed_pickles, tmp_path):
    out = tmp_path / "table.md"
    assert results_table.main([str(out), *map(str, seed_pickles)]) == 0
    text = out.read_text()
    header = next(line for line in text.splitlines() if line.startswith("|  |"))
    assert cells(header)[1:] == ["Eager (2.3.0a0+git1) PR", "Compiled (2.3.0a0+git1) PR",
                                 "Eager (2.3.0.dev2024) Nightly", "Compiled (2.3.0.dev2024) Nightly"]
    row = next(line for line in text.splitlines() if "500, 400" in line)
    assert cells(row) == [SUB_2D.replace("|", "\\|"), "300.0", "100.0", "300.0", "400.0"]
    assert "torch 2.3.0a0+git1" in text and "triton 2.2.0" in text and "GCC 9.3" in text
    assert "Times are in us" in text


def test_duplicate_columns_are_told_apart(seed_pickles, tmp_path):
    pr, _ = seed_pickles
    rows = results_table.merged_rows([load_run(pr), load_run(pr)])
    assert len({r.key for r in rows}) == len(rows)
    assert any(r.description.endswith("[pr]") for r in rows)


def test_speedup_on_seed_pickles(seed_pickles, tmp_path):
    out = tmp_path / "speedup.md"
    spec = "Compiled .+ PR;Compiled .+ Nightly;speed-up PR vs Nightly"
    assert speedup.main([str(out), *map(str, seed_pickles), "--compare", spec,
                         "--compare", "Compiled .+ PR;Eager .+ PR"]) == 0
    text = out.read_text()
    row = next(line for line in text.splitlines() if "500, 400" in line)
    assert "4.00x" in row  # Nightly compiled 400 us / PR compiled 100 us
    assert "3.00x" in row  # PR eager 300 us / PR compiled 100 us
    f32_row = next(line for line in text.splitlines() if "300, 400" in line)
    assert "2.00x" in f32_row and "4.00x" not in f32_row  # no Nightly column for this row
    assert "Speed-up: Compiled .+ PR vs Eager .+ PR" in text


def test_speedup_refuses_to_overwrite(seed_pickles, tmp_path, capsys):
    out = tmp_path / "speedup.md"
    out.write_text("precious")
    assert speedup.main([str(out), *map(str, seed_pickles)]) != 0
    assert "refusing to overwrite" in capsys.readouterr().err
    assert out.read_text() == "precious"


def test_regex_matches_whole_descriptions_within_a_row(seed_pickles):
    rows = results_table.merged_rows([load_run(p) for p in seed_pickles])
    ratios = compute_speedups(rows, [Spec.parse("Compiled .+ PR;Eager .+ Nightly;x")])
    assert [r.ratios["x"] for r in ratios] == pytest.approx([3.0])
    with pytest.raises(SpeedupError, match="matches several columns"):
        compute_speedups(rows, [Spec.parse("Compiled.*;Eager .+ PR")])
    with pytest.raises(SpeedupError, match="no row has both columns"):
        compute_speedups(rows, [Spec.parse("Compiled .+ PR;Compiled .+ Nightl")])  # fullmatch, not search
    with pytest.raises(SpeedupError):
        Spec.parse("only one column")
    with pytest.raises(SpeedupError, match="bad regex"):
        Spec.parse("Compiled (;Eager")


def test_mismatch_and_roofline_are_shown(tmp_path):
    label = "Interpolate, cuda"
    pr, nightly = tmp_path / "pr.pkl", tmp_path / "nightly.pkl"
    bad = (label, SUB_F32, "Compiled (v) PR")
    save_run(pr, [measurement(label, SUB_F32, "Eager (v) PR", 2e-3), measurement(*bad, 1e-3)],
             mismatches={bad: "output 0 (equal): 7 of 9 elements differ"},
             roofline={bad: {"bytes": 1, "gbps": 2345.6, "pct_of_copy": 54.4}})
    save_run(nightly, [measurement(label, SUB_F32, "Compiled (v) Nightly", 3e-3)])
    table = results_table.render([load_run(pr), load_run(nightly)])
    assert "1.00 (2346 GB/s, 54%) **MISMATCH**" in table
    assert "7 of 9 elements differ" in table and "GB/s" in table
    out = tmp_path / "s.md"
    assert speedup.main([str(out), str(pr), str(nightly)]) == 0
    assert re.search(r"3\.00x \*\*MISMATCH\*\*", out.read_text())


def test_plot_writes_a_png(seed_pickles, tmp_path):
    out = tmp_path / "chart.png"
    assert plot.main([str(out), *map(str, seed_pickles)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_spread_of_repeats_is_shown(tmp_path):
    label, path = "Interpolate, cpu", tmp_path / "pr.pkl"
    eager, compiled = (label, SUB_F32, "Eager (v) PR"), (label, SUB_F32, "Compiled (v) PR")
    save_run(path, [measurement(*eager, 2e-3), measurement(*compiled, 1e-3)],
             spread={eager: {"min": 2e-3, "max": 3e-3, "n": 2}, compiled: {"min": 1e-3, "max": 1e-3, "n": 1}})
    table = results_table.render([load_run(path)])
    row = next(line for line in table.splitlines() if "300, 400" in line)
    assert cells(row)[1:] == ["2.00 (max +50%)", "1.00"]
    assert "highest median of the run's repeats" in table


def test_host_bound_rows_are_marked_and_reduce_overhead_columns_compared(tmp_path):
    """Rows with eager below 100 us get a note; "Compiled (" compares skip reduce-overhead columns."""
    label, version = "Interpolate, cuda", "2.13.0"
    small, large = SUB_2D, SUB_F32
    paths = []
    for tag, (compiled, reduce_overhead) in {"PR": (60e-6, 20e-6), "Nightly": (90e-6, 30e-6)}.items():
        rows = [measurement(label, small, f"Eager ({version}) {tag}", 80e-6),
                measurement(label, small, f"Compiled ({version}) {tag}", compiled),
                measurement(label, small, f"Compiled reduce-overhead ({version}) {tag}", reduce_overhead),
                measurement(label, large, f"Eager ({version}) {tag}", 2e-3),
                measurement(label, large, f"Compiled ({version}) {tag}", 1e-3)]
        paths.append(tmp_path / f"{tag}.pkl")
        save_run(paths[-1], rows, compiled_call_overhead_us=12.5)
    runs = [load_run(p) for p in paths]
    specs = [Spec.parse(c) for c in REPORT_COMPARES]
    by_row = {r.sub_label: r for r in compute_speedups(results_table.merged_rows(runs), specs)}
    assert by_row[small].host_bound and not by_row[large].host_bound
    assert by_row[small].ratios == pytest.approx({
        "speed-up PR vs Nightly": 1.5, "speed-up PR vs Eager": 80 / 60,
        "speed-up reduce-overhead PR vs Nightly": 1.5, "speed-up reduce-overhead PR vs Eager": 4.0})
    assert set(by_row[large].ratios) == {"speed-up PR vs Nightly", "speed-up PR vs Eager"}

    text = speedup.render(runs, specs)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("|  |"))
    assert cells(header)[-1] == "note"
    assert cells(next(line for line in lines if "500, 400" in line))[-1] == "host-bound"
    assert cells(next(line for line in lines if "300, 400" in line))[-1] == ""
    assert "host-bound: an eager time of the row (of any pickle) is below 100 us" in text
    assert "compiled call overhead 12.5 us" in text
    seed = [seed_payload(tmp_path / "seed-pr.pkl", "PR", "2.3.0", {SUB_F32: (2e-3, 1e-3)}),
            seed_payload(tmp_path / "seed-nightly.pkl", "Nightly", "2.3.0", {SUB_F32: (2e-3, 1.5e-3)})]
    assert "note" not in speedup.render_tables([load_run(p) for p in seed], specs)


def test_chart_title_names_the_runs_and_labels_fit(tmp_path):
    """The title names device, torch version and ``dynamic`` from the pickles' keys; every row
    label is drawn whole (its wrapped lines are the row's title) inside the figure."""
    long_sub = ("FPN merge: lateral (8, 256, 256, 256) + interpolate(top (8, 256, 128, 128), "
                "scale_factor=2), torch.bfloat16, torch.contiguous_format | mode: nearest")
    paths = []
    for tag, compiled in (("PR", 1e-3), ("Nightly", 2e-3)):
        rows = [measurement("Interpolate fused consumer, cuda", sub, f"{kind} (2.11.0+cu130) {tag}", t)
                for sub in (SUB_F32, long_sub) for kind, t in (("Eager", 3e-3), ("Compiled", compiled))]
        paths.append(tmp_path / f"{tag}.pkl")
        save_run(paths[-1], rows, tag=tag, device="cuda", dynamic=False)
    specs = [Spec.parse(speedup.PR_VS_NIGHTLY), Spec.parse(speedup.PR_VS_EAGER)]
    rows = compute_speedups(results_table.merged_rows([load_run(p) for p in paths]), specs)
    fig = plot.speedup_figure(rows, [s.name for s in specs], "speed-ups")
    axes = fig.axes[0]
    assert axes.get_title() == f"speed-ups\ndevice cuda | torch {torch.__version__} | dynamic=False"
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = axes.get_yticklabels()
    assert [t.get_text().replace("\n", " ") for t in labels] == [plot.row_title(r) for r in rows]
    assert max(t.get_text().count("\n") for t in labels) >= 1  # the long one wraps
    inside = fig.bbox
    for box in [t.get_window_extent(renderer) for t in labels] + [axes.get_tightbbox(renderer)]:
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1, box


def test_chart_title_of_seed_pickles_says_what_is_not_recorded(seed_pickles):
    specs = [Spec.parse(speedup.PR_VS_NIGHTLY)]
    rows = compute_speedups(results_table.merged_rows([load_run(p) for p in seed_pickles]), specs)
    assert plot.chart_title(rows) == "device cpu | torch 2.3.0a0+git1 / 2.3.0.dev2024 | dynamic=not recorded"


def test_fwd_bwd_rows_are_host_bound_below_the_empty_compiled_step(tmp_path):
    """A fwd+bwd row whose eager step is faster than the largest empty compiled step of the pickles
    is host-bound; forward rows keep the 100 us rule, and pickles without the key load as before."""
    forward, step, neck, version = "Interpolate, cuda", "Interpolate fwd+bwd, cuda", "FPN neck fwd+bwd, cuda", "2.11.0"
    paths = []
    for tag, step_us in (("PR", 530.0), ("Nightly", 710.0)):
        rows = [measurement(label, sub, f"{kind} ({version}) {tag}", seconds)
                for label, sub, eager in ((forward, SUB_F32, 300e-6), (step, SUB_F32, 300e-6), (step, SUB_2D, 800e-6))
                for kind, seconds in (("Eager", eager), ("Compiled", eager / 2))]
        paths.append(tmp_path / f"{tag}.pkl")
        save_run(paths[-1], rows, compiled_call_overhead_us=12.5, compiled_step_overhead_us=step_us)
    runs = [load_run(p) for p in paths]
    rows = results_table.merged_rows(runs)
    assert speedup.host_bound_seconds(step, rows) == pytest.approx(710e-6)  # the largest of the runs
    assert speedup.host_bound_seconds(neck, rows) == pytest.approx(710e-6)
    assert speedup.host_bound_seconds(forward, rows) == pytest.approx(100e-6)
    specs = [Spec.parse(c) for c in REPORT_COMPARES]
    by_row = {(r.label, r.sub_label): r for r in compute_speedups(rows, specs)}
    assert by_row[(step, SUB_F32)].host_bound and by_row[(step, SUB_F32)].host_bound_seconds == pytest.approx(710e-6)
    assert not by_row[(step, SUB_2D)].host_bound and not by_row[(forward, SUB_F32)].host_bound

    out = tmp_path / "speedup.md"
    assert speedup.main([str(out), *map(str, paths), "--compare", speedup.PR_VS_NIGHTLY]) == 0
    text = out.read_text()
    assert "compiled call overhead 12.5 us, compiled fwd+bwd step overhead 530.0 us" in text
    assert "compiled fwd+bwd step overhead 710.0 us" in text
    step_table = text.split(f"### {step}")[1]
    assert cells(next(line for line in step_table.splitlines() if "300, 400" in line))[-1] == "host-bound"
    assert ("host-bound: an eager time of the row (of any pickle) is below 100 us, or for fwd+bwd rows below "
            "the empty compiled step (710 us, the Compiled call overhead fwd+bwd row") in step_table
    assert "note" not in text.split(f"### {forward}")[1].split("###")[0]  # 300 us forward: not host-bound

    seed = seed_payload(tmp_path / "seed.pkl", "PR", "2.3.0", {SUB_F32: (2e-3, 1e-3)})
    seed_rows = load_run(seed).rows
    assert seed_rows[0].step_overhead_us is None
    assert speedup.host_bound_seconds(step, seed_rows) == pytest.approx(100e-6)


def test_merged_runs_keep_each_columns_lowest_median(tmp_path):
    """``--processes``: per column the lowest median of all runs, with that run's roofline; the
    spread spans every run's repeats; a mismatch in any run stays."""
    label = "Interpolate, cuda"
    eager, compiled = (label, SUB_F32, "Eager (v) PR"), (label, SUB_F32, "Compiled (v) PR")
    small = (label, SUB_2D, "Compiled (v) PR")
    first, second = tmp_path / "p1.pkl", tmp_path / "p2.pkl"
    save_run(first, [measurement(*eager, 2e-3), measurement(*compiled, 1.5e-3), measurement(*small, 1e-4)],
             tag="PR", spread={eager: {"min": 2e-3, "max": 2.2e-3, "n": 2}},
             roofline={compiled: {"gbps": 100.0, "pct_of_copy": 10.0}},
             mismatches={small: "output 0 differs"}, errors=["case A failed"],
             compiled_call_overhead_us=60.0, compiled_step_overhead_us=None)
    save_run(second, [measurement(*eager, 2.4e-3), measurement(*compiled, 1e-3)],
             tag="PR", spread={eager: {"min": 2.4e-3, "max": 3e-3, "n": 2}},
             roofline={compiled: {"gbps": 150.0, "pct_of_copy": 15.0}},
             compiled_call_overhead_us=45.0, compiled_step_overhead_us=200.0)
    merged_path = tmp_path / "PR.pkl"
    merged = merge_runs([first, second], merged_path)
    run = load_run(merged_path)
    rows = {r.key: r for r in run.rows}
    assert rows[eager].median == pytest.approx(2e-3) and rows[compiled].median == pytest.approx(1e-3)
    assert rows[eager].spread == {"min": 2e-3, "max": 3e-3, "n": 4}
    assert rows[compiled].spread["n"] == 2 and rows[compiled].spread["max"] == pytest.approx(1.5e-3)
    assert (rows[compiled].gbps, rows[compiled].pct_of_copy) == (150.0, 15.0)
    assert rows[small].problem == "output 0 differs" and run.errors == ["case A failed"]
    assert merged["compiled_call_overhead_us"] == 45.0 and merged["compiled_step_overhead_us"] == 200.0
    assert run.extra["processes"] == 2 and run.extra["tag"] == "PR"
    assert merged["filepath"] == str(merged_path)
    assert "processes 2" in results_table.render([run])


def test_merged_shards_judge_each_step_by_the_empty_step_of_its_own_runs(tmp_path):
    """Shards meet different host spells: a training step is host-bound against the empty
    compiled step of the processes that timed it, not another shard's, and the note names the
    thresholds' range."""
    step = "Interpolate fwd+bwd, cuda"
    paths = {tag: [] for tag in ("PR", "Nightly")}
    # shard 1's empty step 200 us, shard 2's 300 us; each shard times one step whose eager takes 250 us
    for shard, (sub, step_us) in enumerate(((SUB_F32, 200.0), (SUB_2D, 300.0)), start=1):
        for tag in paths:
            rows = [measurement(step, sub, f"{kind} (2.11.0) {tag}", seconds)
                    for kind, seconds in (("Eager", 250e-6), ("Compiled", 240e-6))]
            paths[tag].append(tmp_path / f"shard{shard}-{tag}.pkl")
            save_run(paths[tag][-1], rows, tag=tag, shard=(shard, 2), compiled_call_overhead_us=40.0,
                     compiled_step_overhead_us=step_us + (10.0 if tag == "Nightly" else 0.0))
    merged = [tmp_path / f"{tag}.pkl" for tag in paths]
    for tag, path in zip(paths, merged):
        merge_runs(paths[tag], path)
    runs = [load_run(path) for path in merged]
    assert runs[0].extra["compiled_step_overhead_us"] == 200.0  # the runs' lowest, as before
    assert {r.sub_label: r.step_overhead_us for r in runs[0].rows} == {SUB_F32: 200.0, SUB_2D: 300.0}
    by_row = {r.sub_label: r for r in compute_speedups(results_table.merged_rows(runs),
                                                      [Spec.parse(speedup.PR_VS_NIGHTLY)])}
    assert by_row[SUB_F32].host_bound_seconds == pytest.approx(210e-6)  # its runs' largest: Nightly's
    assert not by_row[SUB_F32].host_bound
    assert by_row[SUB_2D].host_bound_seconds == pytest.approx(310e-6) and by_row[SUB_2D].host_bound

    out = tmp_path / "speedup.md"
    assert speedup.main([str(out), *map(str, merged), "--compare", speedup.PR_VS_NIGHTLY]) == 0
    assert "below the empty compiled step (210-310 us by row," in out.read_text()
    # merged again (e.g. with a later run), each column keeps its own run's empty step
    again = tmp_path / "again-PR.pkl"
    merge_runs([merged[0]], again)
    assert {r.sub_label: r.step_overhead_us for r in load_run(again).rows} == {SUB_F32: 200.0, SUB_2D: 300.0}


def test_merged_runs_say_how_many_cpus_their_processes_ran_on(tmp_path):
    """``cpus``: each process's count, one number where they agree, else the range; in the Runs
    section."""
    key = ("Interpolate, cuda", SUB_F32, "Compiled (v) PR")
    for counts, expected in (((2, 2), 2), ((2, 16), "2-16"), ((None, None), None)):
        paths = [tmp_path / f"p{i}.pkl" for i in range(2)]
        for path, count in zip(paths, counts):
            save_run(path, [measurement(*key, 1e-3)], tag="PR", cpus=count)
        merged = merge_runs(paths, tmp_path / "PR.pkl")
        assert merged["cpus"] == expected
        assert (f"cpus {expected}" in results_table.render([load_run(tmp_path / "PR.pkl")])) == (expected is not None)


def test_page_faults_are_shown_and_merged_with_their_run(tmp_path):
    label, path = "Interpolate, cpu", tmp_path / "pr.pkl"
    eager, compiled = (label, SUB_F32, "Eager (v) PR"), (label, SUB_F32, "Compiled (v) PR")
    save_run(path, [measurement(*eager, 2e-3), measurement(*compiled, 1e-3)],
             page_faults={eager: 8.0, compiled: 4570.4})  # a few pages: not shown
    table = results_table.render([load_run(path)])
    row = next(line for line in table.splitlines() if "300, 400" in line)
    assert cells(row)[1:] == ["2.00", "1.00 (4570 pf)"]
    assert "minor page faults per call" in table
    other = tmp_path / "pr2.pkl"
    save_run(other, [measurement(*eager, 1e-3), measurement(*compiled, 2e-3)], page_faults={eager: 12.0, compiled: 0.0})
    merge_runs([path, other], tmp_path / "PR.pkl")
    rows = {r.key: r for r in load_run(tmp_path / "PR.pkl").rows}
    assert rows[eager].page_faults == 12.0 and rows[compiled].page_faults == 4570.4  # the kept runs'


def test_summary_counts_rows_ahead_and_lists_rows_behind(tmp_path):
    """The summary under the tables: per compare, the rows at or ahead (as the tables round them),
    host-bound rows apart, each row behind listed; the compiled call overhead rows left out, and
    host-bound rows not listed against eager."""
    label, version = "Interpolate, cuda", "2.13.0"
    behind, rounded, small = SUB_F32, SUB_2D, "Input (1, 3, 20, 20), torch.float32 | mode: nearest"
    times = {  # sub_label: (eager, PR compiled, Nightly compiled)
        behind: (2e-3, 1.1e-3, 1e-3),  # PR behind Nightly, ahead of eager
        rounded: (2e-3, 1.004e-3, 1e-3),  # 0.996x: printed 1.00x, counted at or ahead
        small: (50e-6, 60e-6, 55e-6),  # host-bound: behind both
    }
    paths = []
    for tag, column in (("PR", 1), ("Nightly", 2)):
        rows = [measurement("Compiled call overhead, cuda", "Input (8,), torch.float32 | fn: x + 1",
                            f"Compiled ({version}) {tag}", 40e-6 if tag == "PR" else 30e-6),
                measurement("Compiled call overhead, cuda", "Input (8,), torch.float32 | fn: x + 1",
                            f"Eager ({version}) {tag}", 5e-6)]
        for sub_label, t in times.items():
            rows += [measurement(label, sub_label, f"Eager ({version}) {tag}", t[0]),
                     measurement(label, sub_label, f"Compiled ({version}) {tag}", t[column])]
        paths.append(tmp_path / f"{tag}.pkl")
        save_run(paths[-1], rows)
    specs = [Spec.parse(speedup.PR_VS_NIGHTLY), Spec.parse(speedup.PR_VS_EAGER)]
    text = speedup.render_tables([load_run(p) for p in paths], specs)
    summary = text[text.index("### Summary"):].splitlines()
    assert summary[2] == ("- speed-up PR vs Nightly: 1 of 2 rows at or ahead (0.91-1.00x); "
                          "0 of 1 host-bound rows at or ahead (0.92-0.92x)")
    assert summary[3] == f"  - 0.91x {label} | {behind}"
    assert summary[4] == f"  - 0.92x {label} | {small} (host-bound)"
    assert summary[5] == ("- speed-up PR vs Eager: 2 of 2 rows at or ahead (1.82-1.99x); "
                          "0 of 1 host-bound rows at or ahead (0.83-0.83x)")
    assert len(summary) == 6  # nothing listed against eager; no overhead row anywhere
    assert "Compiled call overhead" not in "\n".join(summary)


def test_cuda_cells_and_rows_behind_show_their_kernel_time(tmp_path):
    """A CUDA run's columns carry their GPU kernels' time per call (``kernel_us``): each cell
    shows it, a row behind in the summary shows both columns', and a merge keeps the kernel time
    of the process whose median it keeps."""
    label, version = "Interpolate, cuda", "2.11.0"
    paths = []
    for tag, compiled, process in (("PR", 60e-6, 1), ("PR", 50e-6, 2), ("Nightly", 45e-6, 1)):
        rows = [measurement(label, SUB_F32, f"Eager ({version}) {tag}", 300e-6),
                measurement(label, SUB_F32, f"Compiled ({version}) {tag}", compiled)]
        kernels = {(label, SUB_F32, f"Compiled ({version}) {tag}"): 40.0 + process + 3 * (tag == "Nightly"),
                   (label, SUB_F32, f"Eager ({version}) {tag}"): 290.0}
        paths.append(tmp_path / f"{tag}-{process}.pkl")
        save_run(paths[-1], rows, kernel_us=kernels)
    merge_runs(paths[:2], tmp_path / "PR.pkl")
    runs = [load_run(tmp_path / "PR.pkl"), load_run(paths[2])]
    compiled_pr = next(r for r in runs[0].rows if r.description.startswith("Compiled"))
    assert compiled_pr.kernel_us == 42.0  # process 2's: its median (50 us) is the one kept
    text = speedup.render_tables(runs, [Spec.parse(speedup.PR_VS_NIGHTLY)])
    assert "50.00 (max +20%) (kernels 42.0 us)" in text and "(kernels 41.0 us)" not in text  # not process 1's
    assert "(kernels x us) = the GPU kernels' time per call" in text
    summary = text[text.index("### Summary"):].splitlines()
    assert summary[3] == f"  - 0.90x {label} | {SUB_F32} (kernels 42.0 / 44.0 us)"
    assert summary[2].endswith("; of the 1 rows behind with both kernel times, 1 with A's kernels no longer "
                               "than B's (+1%): behind in host time")


def test_the_summary_counts_rows_behind_in_host_time(tmp_path):
    """A row behind whose A kernels take longer than B's (over ``KERNEL_TIE``) is not counted as
    behind in host time; one within the tie is; one without kernel times is left out."""
    label, version = "Interpolate, cuda", "2.11.0"
    sub_1d = "Input (16, 64, 16000), torch.float32, torch.contiguous_format | mode: nearest, align_corners: None"
    runs = []
    for tag, compiled in (("PR", 50e-6), ("Nightly", 45e-6)):
        rows = [measurement(label, sub, f"{kind} ({version}) {tag}", seconds)
                for sub in (SUB_F32, SUB_2D, sub_1d)
                for kind, seconds in (("Eager", 300e-6), ("Compiled", compiled))]
        pr = tag == "PR"
        kernels = {(label, SUB_F32, f"Compiled ({version}) {tag}"): 44.4 if pr else 44.0,  # within 1%
                   (label, SUB_2D, f"Compiled ({version}) {tag}"): 44.5 if pr else 44.0}  # over 1%
        save_run(tmp_path / f"{tag}.pkl", rows, kernel_us=kernels)
        runs.append(load_run(tmp_path / f"{tag}.pkl"))
    text = speedup.render_tables(runs, [Spec.parse(speedup.PR_VS_NIGHTLY)])
    summary = text[text.index("### Summary"):].splitlines()
    assert summary[2].endswith("; of the 2 rows behind with both kernel times, 1 with A's kernels no longer "
                               "than B's (+1%): behind in host time")
    assert len([line for line in summary if line.startswith("  - 0.90x")]) == 3
