"""lowerings.cpu_sizes: the parallel regions of C++ kernels that hold the package's nodes take
their size arguments as each thread's own copies (``firstprivate``); other kernels keep
Inductor's code, and the results are eager's."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import decomps
from lowerings import cpu_sizes
from tests.common import dynamic_cpp_kernels

PARALLEL = re.compile(r"#pragma omp parallel\b[^\n]*")
SIZE_PARAMETER = re.compile(r"const int64_t (ks\d+)")


def _regions(kernel: str) -> list[tuple[str, list[str]]]:
    """Each parallel region's pragma, with the kernel's size parameters."""
    return [(pragma, SIZE_PARAMETER.findall(kernel)) for pragma in PARALLEL.findall(kernel)]


@pytest.mark.parametrize(
    "isize, osize",
    [((30, 40), (60, 70)), ((120, 130), (20, 30)), ((9, 13), (20, 37))],
    ids=["period", "downsample", "gather"],
)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_package_kernels_take_private_sizes(isize, osize, mode):
    x = torch.randn(2, 3, *isize)
    kwargs = {"size": osize, "mode": mode}
    out, kernels = dynamic_cpp_kernels(lambda x: F.interpolate(x, **kwargs), x)
    expected = F.interpolate(x, **kwargs)
    assert torch.equal(out, expected) and out.stride() == expected.stride()
    regions = [region for kernel in kernels for region in _regions(kernel)]
    assert regions, "no parallel region at 2 threads"
    for pragma, sizes in regions:
        assert sizes, pragma
        assert pragma.endswith(f" firstprivate({', '.join(sizes)})"), pragma


def test_fused_neighbours_are_eager_exactly():
    """The FPN merge's add is in the package's kernel, so it runs with private sizes too."""
    lateral, top = torch.randn(1, 8, 40, 36), torch.randn(1, 8, 20, 18)
    fn = lambda lateral, top: lateral + F.interpolate(top, scale_factor=2.0)  # noqa: E731
    out, kernels = dynamic_cpp_kernels(fn, lateral, top)
    assert torch.equal(out, fn(lateral, top))
    assert any("firstprivate(" in kernel for kernel in kernels)


def test_other_kernels_keep_inductor_code():
    x = torch.randn(64, 1000)
    out, kernels = dynamic_cpp_kernels(lambda x: x[:, ::3] * 2, x)
    assert torch.equal(out, x[:, ::3] * 2)
    assert kernels and any(PARALLEL.search(kernel) for kernel in kernels)
    assert not any("firstprivate" in kernel for kernel in kernels)


def test_uninstalled_kernels_are_stock():
    x = torch.randn(2, 3, 30, 40)
    fn = lambda x: F.interpolate(x, size=(60, 70))  # noqa: E731
    with decomps.disabled():
        _, kernels = dynamic_cpp_kernels(fn, x)
    assert kernels and not any("firstprivate" in kernel for kernel in kernels)
    _, kernels = dynamic_cpp_kernels(fn, x)
    assert any("firstprivate" in kernel for kernel in kernels)


def test_private_sizes_marks_each_region_form():
    source = "{\n    #pragma omp parallel\n    {}\n    #pragma omp parallel num_threads(2)\n    {}\n}\n"
    marked = cpu_sizes.private_sizes(source, ["ks0", "ks1"])
    assert marked == source.replace("parallel\n", "parallel firstprivate(ks0, ks1)\n").replace(
        "num_threads(2)\n", "num_threads(2) firstprivate(ks0, ks1)\n"
    )
    # static kernels: no sizes, the source as it was; regions already marked are left alone
    assert cpu_sizes.private_sizes(source, []) == source
    assert cpu_sizes.private_sizes(marked, ["ks0", "ks1"]) == marked
