"""``python -m perf.merge``: one report from the shards of a matrix run one after another."""

import pickle

import pytest
from torch.utils.benchmark.utils.common import Measurement, TaskSpec

from perf import merge
from perf._pickles import load_run, save_run

LABEL = "Interpolate, cuda"


def shard_pickles(tmp_path, index, count, pr_seconds=5e-4, nightly_seconds=6e-4, name="run", shard=True, **extra):
    """A ``--shard index/count`` run's two pickles (``shard`` False: a run of that shard's row
    alone, e.g. ``--behind``): one row, eager 1 ms, Nightly 0.6 ms."""
    sub_label = f"Input (1, 3, {index}, 4), torch.float32 | mode: nearest"
    paths = []
    for tag, compiled in (("Nightly", nightly_seconds), ("PR", pr_seconds)):
        results = [Measurement(1, [seconds], TaskSpec("fn(x)", "", label=LABEL, sub_label=sub_label,
                                                      description=f"{kind} (v) {tag}"))
                   for kind, seconds in (("Eager", 1e-3), ("Compiled", compiled))]
        paths.append(tmp_path / f"{name}{index}of{count}-{tag}.pkl")
        save_run(paths[-1], results, **{"tag": tag, "shard": (index, count) if shard else None, "device": "cuda",
                                        "dynamic": True, **extra})
    return paths


def merged_compiled(tmp_path, tag, stem="merged-2-shards-with-reruns") -> dict:
    run = load_run(tmp_path / "out" / f"{stem}-{tag}.pkl")
    return {r.sub_label.split(",")[2].strip(): r.median for r in run.rows if r.description.startswith("Compiled")}


def test_the_shards_of_a_matrix_make_one_report_each_row_from_its_run(tmp_path, capsys):
    pickles = shard_pickles(tmp_path, 1, 2) + shard_pickles(tmp_path, 2, 2, pr_seconds=3e-4)
    assert merge.main([str(tmp_path / "out"), *map(str, pickles)]) == 0
    assert "Shards of 2: Nightly 2, PR 2; all present" in capsys.readouterr().out
    run = load_run(tmp_path / "out" / "merged-2-shards-PR.pkl")
    compiled = {r.sub_label: r.median for r in run.rows if r.description.startswith("Compiled")}
    assert sorted(compiled.values()) == pytest.approx([3e-4, 5e-4]) and run.extra["shards"] == 2
    table = (tmp_path / "out" / "merged-2-shards-speedup.md").read_text()
    assert "1.20x" in table and "2.00x" in table  # 6e-4 / 5e-4 and 6e-4 / 3e-4, each from its shard


def test_a_missing_shard_is_named_and_fails_the_merge(tmp_path, capsys):
    pickles = shard_pickles(tmp_path, 1, 3) + shard_pickles(tmp_path, 3, 3)
    assert merge.main([str(tmp_path / "out"), *map(str, pickles)]) == 1
    assert "Shards of 3: Nightly 2, PR 2; missing: 2" in capsys.readouterr().out
    assert (tmp_path / "out" / "merged-3-shards-speedup.md").is_file()  # the report of what ran


def test_a_recorded_mismatch_fails_the_merge(tmp_path):
    first = shard_pickles(tmp_path, 1, 2)
    key = (LABEL, "Input (1, 3, 2, 4), torch.float32 | mode: nearest", "Compiled (v) Nightly")
    second = shard_pickles(tmp_path, 2, 2, mismatches={key: "output 0 differs"})
    assert merge.main([str(tmp_path / "out"), *map(str, first + second)]) == 1


@pytest.mark.parametrize("problem", ["twice", "counts", "dynamic", "huge pages", "not a shard"])
def test_pickles_that_are_not_one_matrix_run_are_refused(tmp_path, problem):
    pickles = shard_pickles(tmp_path, 1, 2)
    if problem == "twice":
        (tmp_path / "again").mkdir()
        pickles += shard_pickles(tmp_path / "again", 1, 2)
    elif problem == "counts":
        pickles += shard_pickles(tmp_path, 2, 3)
    elif problem == "dynamic":
        pickles += shard_pickles(tmp_path, 2, 2, dynamic=False)
    elif problem == "huge pages":
        pickles += shard_pickles(tmp_path, 2, 2, huge_pages=True)
    else:
        with open(pickles[0], "rb") as f:
            payload = pickle.load(f)
        payload["shard"] = None  # a run of the whole matrix
        with open(pickles[0], "wb") as f:
            pickle.dump(payload, f)
    with pytest.raises(SystemExit, match="ERROR"):
        merge.main([str(tmp_path / "out"), *map(str, pickles)])


def test_reruns_join_each_column_at_its_lowest_median(tmp_path, capsys):
    """``--reruns``: a later run of shard 1's row; each column keeps the lower of its two medians."""
    pickles = shard_pickles(tmp_path, 1, 2) + shard_pickles(tmp_path, 2, 2)
    reruns = shard_pickles(tmp_path, 1, 2, pr_seconds=4e-4, nightly_seconds=7e-4, name="rerun", shard=False)
    assert merge.main([str(tmp_path / "out"), *map(str, pickles), "--reruns", *map(str, reruns)]) == 0
    assert "; reruns: Nightly 1, PR 1" in capsys.readouterr().out
    assert merged_compiled(tmp_path, "PR") == pytest.approx({"1": 4e-4, "2": 5e-4})
    assert merged_compiled(tmp_path, "Nightly") == pytest.approx({"1": 6e-4, "2": 6e-4})
    assert "1.50x" in (tmp_path / "out" / "merged-2-shards-with-reruns-speedup.md").read_text()


def test_dropped_rows_come_from_the_reruns_alone(tmp_path):
    """``--drop``: shard 1's row (faster, and with a mismatch recorded) is left out of the shards;
    the rerun's slower columns stand for it, and shard 2's row is untouched."""
    key = (LABEL, "Input (1, 3, 1, 4), torch.float32 | mode: nearest", "Compiled (v) PR")
    pickles = shard_pickles(tmp_path, 1, 2, mismatches={key: "output 0 differs"}) + shard_pickles(tmp_path, 2, 2)
    reruns = shard_pickles(tmp_path, 1, 2, pr_seconds=8e-4, nightly_seconds=9e-4, name="rerun", shard=False)
    argv = [str(tmp_path / "out"), *map(str, pickles), "--reruns", *map(str, reruns), "--drop", r"\(1, 3, 1, 4\)"]
    assert merge.main(argv) == 0
    assert merged_compiled(tmp_path, "PR") == pytest.approx({"1": 8e-4, "2": 5e-4})
    assert merged_compiled(tmp_path, "Nightly") == pytest.approx({"1": 9e-4, "2": 6e-4})


def test_a_rerun_of_another_setting_is_refused(tmp_path):
    pickles = shard_pickles(tmp_path, 1, 2) + shard_pickles(tmp_path, 2, 2)
    reruns = shard_pickles(tmp_path, 1, 2, name="rerun", shard=False, dynamic=False)
    with pytest.raises(SystemExit, match="differs from the shards"):
        merge.main([str(tmp_path / "out"), *map(str, pickles), "--reruns", *map(str, reruns)])
