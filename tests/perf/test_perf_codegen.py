"""perf/codegen.py: a hash of each case's generated code, and the comparison of two trees'."""

import json
import re
import shutil
from pathlib import Path

import pytest

from perf import codegen
from perf.cases import make_cases

STEP = "interp+bwd nearest (1, 3, 500, 400)->(256, 256) float32 contiguous_format size:literal"
ROOT = Path(__file__).resolve().parents[2]
FORWARDS = r"^interp nearest \(1, 3, 500, 400\)->\(256, 256\) (uint8|float32) contiguous_format size:literal$"


def test_normalize_drops_what_varies_between_compiles():
    code = (
        "import torch\n"
        "# kernel path: /tmp/torchinductor_u/ab/cab.py\n"
        "    # Topologically Sorted Source Nodes: [x]\n"
        "k = async_compile.triton('k', '''\n"
        "@triton_heuristics.pointwise(inductor_meta={'backend_hash': 'AB12CD', 'kernel_name': 'k'})\n"
        "''')\n"
        "m = load('/tmp/torchinductor_u/cd/m.so')  # trailing comment stays\n"
    )
    out = codegen.normalize(code)
    assert "kernel path" not in out and "Source Nodes" not in out
    assert "AB12CD" not in out and "/tmp/" not in out
    assert "'kernel_name': 'k'" in out and out.startswith("import torch\nk = async_compile.triton('k'")
    assert out.endswith("m = load('')  # trailing comment stays")


def test_a_step_hashes_the_same_twice_and_stock_differs():
    """Two graphs (forward, backward); the same tree gives the same hash, stock another."""
    import decomps

    (case,) = [c for c in make_cases("cpu", quick=True, backward=True, call_forms=("literal",)) if c.name == STEP]
    first, second = codegen.case_codes(case, dynamic=True), codegen.case_codes(case, dynamic=True)
    assert len(first) == 2 and codegen.digest(first) == codegen.digest(second)
    with decomps.disabled():
        stock = codegen.case_codes(case, dynamic=True)
    assert len(stock) == 2 and codegen.digest(stock) != codegen.digest(first)


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_compare_lists_different_and_missing_cases(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    records = [{"index": i, "name": f"case {i}", "graphs": 1, "sha256": f"{i:064x}"} for i in range(3)]
    _write(a, records)
    _write(b, records)
    assert codegen.main(["--compare", str(a), str(b)]) == 0
    assert capsys.readouterr().out == "3 of 3 shared cases generate equal code; 0 in one file only\n"
    _write(b, [records[0], {**records[1], "sha256": "f" * 64}])
    assert codegen.main(["--compare", str(a), str(b)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "1 of 2 shared cases generate equal code; 1 in one file only",
        "different: case 1",
        "one file only: case 2",
    ]
    _write(b, [records[0], {**records[1], "graphs": 2}, records[2]])  # same hash, another graph count
    assert codegen.main(["--compare", str(a), str(b)]) == 1


def test_workers_split_the_cases_and_merge_in_order(tmp_path):
    """Two worker processes, each importing the package from a copy of the checkout's tree."""
    for name in ("decomps", "lowerings"):
        shutil.copytree(ROOT / name, tmp_path / "tree" / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "hashes.jsonl"
    argv = [str(out), "--device", "cpu", "--quick", "--call-forms", "literal", "--filter", FORWARDS,
            "--workers", "2", "--code-dir", str(tmp_path / "code"), "--tree", str(tmp_path / "tree")]
    assert codegen.main(argv) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in records] == [0, 1]
    assert [re.search(r"(uint8|float32)", r["name"])[1] for r in records] == ["uint8", "float32"]
    assert all(r["graphs"] == 1 and len(r["sha256"]) == 64 for r in records)
    assert records[0]["sha256"] != records[1]["sha256"]
    assert sorted(p.name for p in (tmp_path / "code").iterdir()) == ["0.py", "1.py"]
    assert not list(tmp_path.glob("hashes.jsonl.*"))  # the workers' parts are merged and removed
    single = tmp_path / "single.jsonl"  # one process, the checkout's tree: the same code
    assert codegen.main([str(single), *argv[1:8]]) == 0
    assert single.read_text() == out.read_text()


def test_tree_must_provide_the_package(tmp_path):
    """A package imported from elsewhere (here: already imported by this process) is refused."""
    import decomps  # noqa: F401

    (tmp_path / "decomps").mkdir()
    (tmp_path / "decomps" / "__init__.py").write_text("")
    with pytest.raises(SystemExit, match="not from --tree"):
        codegen.main([str(tmp_path / "a.jsonl"), "--device", "cpu", "--tree", str(tmp_path)])
    with pytest.raises(SystemExit):  # argparse's error: stock has no tree
        codegen.main([str(tmp_path / "a.jsonl"), "--tag", "Nightly", "--tree", str(tmp_path)])
