"""lowerings.cpu_divisions: C++ kernels that hold the package's nodes write a floor division of a
nonnegative integer by a positive one as C++'s ``/``; other divisions and other kernels keep
Inductor's ``c10::div_floor_integer``, and the results are eager's."""

from __future__ import annotations

import re

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch._inductor.codegen.cpp_utils import cexpr
from torch._inductor.utils import fresh_inductor_cache, sympy_index_symbol
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

import decomps
from lowerings import cpu_divisions
from tests.common import dynamic_cpp_kernels, generated_gathers

FLOOR = "c10::div_floor_integer("
# The output size of a scale factor of 1.5 as the package writes it: (3 * s) // 2.
SIZE_QUOTIENT = re.compile(r"\(static_cast<int64_t>\(3L\*ks\d+\) / static_cast<int64_t>\(2L\)\)")


def test_hooks_exist():
    assert cpu_divisions.missing_hooks() == []


@pytest.mark.parametrize(
    "shape, memory_format",
    [((2, 8, 6, 7, 5), torch.channels_last_3d), ((2, 3, 10, 14), torch.contiguous_format),
     ((2, 3, 10, 14), torch.channels_last)],
    ids=["3d-channels-last", "2d", "2d-channels-last"],
)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_package_kernels_divide_sizes_in_cpp(shape, memory_format, mode):
    """A scale factor of 1.5 sizes the output (3 * s) // 2: the package's kernels bound their loops
    and index their stores with C++'s division, and compute eager's result."""
    x = torch.randn(shape).contiguous(memory_format=memory_format)
    kwargs = {"scale_factor": 1.5, "mode": mode}
    out, kernels = dynamic_cpp_kernels(lambda x: F.interpolate(x, **kwargs), x)
    expected = F.interpolate(x, **kwargs)
    assert torch.equal(out, expected) and out.stride() == expected.stride()
    source = "\n".join(kernels)
    assert SIZE_QUOTIENT.search(source), source
    assert "div_floor_integer(static_cast<int64_t>(3L*ks" not in source


@pytest.mark.parametrize("isize", [(7, 9), (8, 10), (13, 2)])
def test_one_compiled_kernel_is_eager_for_each_size(isize):
    """One dynamic graph, sizes of either parity: the quotients C++ computes are eager's sizes."""
    torch._dynamo.reset()
    fn = lambda x: F.interpolate(x, scale_factor=1.5)  # noqa: E731
    with fresh_inductor_cache(), generated_gathers():
        compiled = torch.compile(fn, dynamic=True, fullgraph=True)
        for size in [isize, (isize[0] + 3, isize[1] + 1)]:
            x = torch.randn(1, 4, *size).contiguous(memory_format=torch.channels_last)
            out, expected = compiled(x), fn(x)
            assert out.shape == expected.shape and torch.equal(out, expected)


def test_other_kernels_keep_inductor_code():
    x = torch.randn(64, 1000)
    out, kernels = dynamic_cpp_kernels(lambda x: x[:, ::3] * 2, x)
    assert torch.equal(out, x[:, ::3] * 2)
    assert any(FLOOR in kernel for kernel in kernels)


def test_uninstalled_kernels_are_stock():
    x = torch.randn(2, 3, 10, 14)
    fn = lambda x: F.interpolate(x, scale_factor=1.5)  # noqa: E731
    with decomps.disabled():
        _, kernels = dynamic_cpp_kernels(fn, x)
    assert not any(SIZE_QUOTIENT.search(kernel) for kernel in kernels)
    _, kernels = dynamic_cpp_kernels(fn, x)
    assert any(SIZE_QUOTIENT.search(kernel) for kernel in kernels)


def _printed(expr) -> tuple[str, str]:
    """expr as Inductor's C++ printer writes it outside and inside a package kernel."""
    outside = cexpr(expr)
    token = cpu_divisions._package_kernel.set(True)
    try:
        return outside, cexpr(expr)
    finally:
        cpu_divisions._package_kernel.reset(token)


def test_only_provably_truncating_divisions_change():
    ks, x = sympy_index_symbol("ks0"), sympy_index_symbol("x0")
    n = sympy.Symbol("n", integer=True)  # any sign
    outside, inside = _printed(FloorDiv(3 * ks, 2))
    assert outside.startswith(FLOOR)
    assert inside == "(static_cast<int64_t>(3L*ks0) / static_cast<int64_t>(2L))"
    outside, inside = _printed(ModularIndexing(x, 4, 5))
    assert FLOOR in outside
    assert inside == "(static_cast<int64_t>((static_cast<int64_t>(x0) / static_cast<int64_t>(4L))) % static_cast<int64_t>(5L))"
    # A numerator that may be negative, or a divisor that may be 0 (Inductor's size symbols are
    # only nonnegative) or negative: floor division as Inductor writes it.
    for expr in (FloorDiv(x - 1, 2), FloorDiv(n, 2), FloorDiv(x, ks), FloorDiv(x, n), ModularIndexing(n, 2, 5)):
        outside, inside = _printed(expr)
        assert inside == outside and FLOOR in inside, expr


@pytest.mark.parametrize("a", range(-7, 8))
@pytest.mark.parametrize("b", [1, 2, 3, 16])
def test_truncation_is_floor_where_taken(a, b):
    """The rule's premise on integers: for a >= 0 and b > 0, C++'s truncating quotient (Python's
    int(a / b) for these small values) is the floor quotient; for a < 0 it need not be."""
    trunc = int(a / b)
    if cpu_divisions._truncates(sympy.Integer(a), sympy.Integer(b)):
        assert a >= 0 and trunc == a // b
    else:
        assert a < 0
