"""``--shard K/N`` (tests/conftest.py): the shards of a collection partition it."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sharded(items: list, shard: str) -> tuple[list, list]:
    """``items`` kept and deselected by the hook under ``--shard shard``."""
    deselected = []
    config = SimpleNamespace(
        getoption=lambda name: shard,
        hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)),
    )
    kept = list(items)
    conftest.pytest_collection_modifyitems(config, kept)
    return kept, deselected


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_shards_partition_the_collection(n):
    items = list(range(10))
    shards = []
    for k in range(1, n + 1):
        kept, deselected = _sharded(items, f"{k}/{n}")
        assert kept == items[k - 1::n]
        assert sorted(kept + deselected) == items
        shards.append(kept)
    assert sorted(sum(shards, [])) == items


@pytest.mark.parametrize("shard", ["3/2", "0/2", "x/2", "1"])
def test_bad_shard_is_a_usage_error(shard):
    with pytest.raises(pytest.UsageError, match="--shard wants"):
        _sharded([1, 2], shard)


def test_pytest_takes_the_option():
    command = [sys.executable, "-m", "pytest", "tests/test_divisibility.py", "--collect-only", "-q", "-p", "no:cacheprovider"]

    def collected(*args):
        out = subprocess.run([*command, *args], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        return [line for line in out.stdout.splitlines() if "::" in line]

    whole = collected()
    assert len(whole) >= 3 and collected("--shard", "2/3") == whole[1::3]
