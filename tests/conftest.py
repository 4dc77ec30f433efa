import os

# Keep the kernels that pytest runs compile apart from a user's own cache.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.getcwd(), ".pytest_cache", "inductor"))
# The cache tests (tests/test_install.py) need the FX graph and AOTAutograd caches on; these
# variables would force them off whatever a test patches. Tests that want a cache off patch the
# config (``fresh_compiles``, ``tests.graphs.post_grad_graphs``).
for _name in ("TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE", "TORCHINDUCTOR_FORCE_DISABLE_CACHES"):
    os.environ.pop(_name, None)

import decomps  # noqa: E402,F401  (installs)
import pytest  # noqa: E402

from lowerings import cpu_vectors  # noqa: E402


@pytest.fixture(params=[256, 512], ids=["256-bit", "512-bit"])
def vector_bits(request, monkeypatch):
    """The C++ backend's vector width as on an AVX2 and an AVX512 machine
    (``decomps.kernel_choice`` reads it for CPU gathers)."""
    monkeypatch.setattr(cpu_vectors, "vector_bits", lambda: request.param)
    return request.param


@pytest.fixture
def fresh_compiles():
    """Every compile traces the decompositions: the compile caches' keys do not see switches
    that tests flip (the vector width)."""
    import torch

    with torch._inductor.config.patch(fx_graph_cache=False):
        with torch._functorch.config.patch(enable_autograd_cache=False):
            yield


def pytest_addoption(parser):
    parser.addoption(
        "--shard",
        default=None,
        metavar="K/N",
        help="run the K-th of N shards (1-based) of the collected tests, every N-th test from the K-th, "
        "so that a run under a time limit can be split into calls",
    )


def _shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard wants K/N, got {text!r}") from None
    if not 1 <= k <= n:
        raise pytest.UsageError(f"--shard wants 1 <= K <= N, got {text!r}")
    return k, n


def pytest_collection_modifyitems(config, items):
    if config.getoption("--shard") is None:
        return
    k, n = _shard(config.getoption("--shard"))
    shards = [items[i::n] for i in range(n)]
    config.hook.pytest_deselected(items=[item for i, shard in enumerate(shards) if i != k - 1 for item in shard])
    items[:] = shards[k - 1]
