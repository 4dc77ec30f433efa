"""``--shard K/N`` (tests/conftest.py): the shards of a collection partition it."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _collect(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pytest", "tests/test_divisibility.py", "--collect-only", "-q", "-p", "no:cacheprovider"]
    return subprocess.run([*command, *args], cwd=ROOT, capture_output=True, text=True)


def _collected(*args: str) -> list[str]:
    out = _collect(*args)
    assert out.returncode == 0, out.stdout + out.stderr
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_shards_partition_the_collection():
    whole = _collected()
    shards = [_collected("--shard", f"{k}/3") for k in (1, 2, 3)]
    assert len(whole) >= 3 and all(shards)
    assert sorted(sum(shards, [])) == sorted(whole)
    assert shards[0] == whole[0::3]


@pytest.mark.parametrize("shard", ["3/2", "x/2"])
def test_bad_shard_is_a_usage_error(shard):
    out = _collect("--shard", shard)
    assert out.returncode == 4 and "--shard wants" in out.stderr, out.stdout + out.stderr
