"""lowerings.cpu_stores: C++ kernels that hold the package's nodes store their short float32
vectors (4 or 8 lanes) unmasked, where the package's AVX512 path is installed; other kernels and
other counts keep Inductor's masked store, and the results are eager's."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import fresh_inductor_cache, run_and_get_code

import decomps
from lowerings import cpu_gathers, cpu_stores, cpu_vectors

# Inductor's store of a short vector: ``tmpN.store(ptr, static_cast<int64_t>(count));``
MASKED_STORE = re.compile(r"\btmp\d+\.store\([^;\n]*, static_cast<int64_t>\((\d+)L\)\);")
NARROW_STORE = {4: "_mm_storeu_ps(out_ptr0 + ", 8: "_mm256_storeu_ps(out_ptr0 + "}


def _code(fn, *args):
    """fn's result compiled with dynamic shapes, and the generated code."""
    torch._dynamo.reset()
    with fresh_inductor_cache():
        out, codes = run_and_get_code(torch.compile(fn, dynamic=True, fullgraph=True), *args)
    return out, "\n".join(codes)


@pytest.mark.parametrize(
    "shape, factor",
    [((2, 3, 10, 12), 4), ((2, 3, 10, 12), 8), ((1, 2, 5, 6, 7), 4), ((2, 3, 40), 4)],
    ids=["2d-x4", "2d-x8", "3d-x4", "1d-x4"],
)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_repeat_stores_whole_lanes(shape, factor, mode):
    x = torch.randn(shape)
    kwargs = {"scale_factor": float(factor), "mode": mode}
    out, code = _code(lambda x: F.interpolate(x, **kwargs), x)
    expected = F.interpolate(x, **kwargs)
    assert torch.equal(out, expected) and out.stride() == expected.stride()
    assert (NARROW_STORE[factor] in code) == cpu_gathers.available()
    # Inductor masks a store shorter than its vector: 8 float32 lanes fill AVX2's
    short = factor * 32 < cpu_vectors.vector_bits()
    assert (str(factor) in MASKED_STORE.findall(code)) == (short and not cpu_gathers.available())


def test_fused_neighbours_are_eager_exactly():
    """An FPN merge at x4: the repeated rows go through the short stores, the add reads them."""
    lateral, top = torch.randn(2, 3, 40, 48), torch.randn(2, 3, 10, 12)
    fn = lambda lateral, top: lateral + F.interpolate(top, scale_factor=4.0)  # noqa: E731
    out, code = _code(fn, lateral, top)
    assert torch.equal(out, fn(lateral, top))
    assert (NARROW_STORE[4] in code) == cpu_gathers.available()


# A user's own repeat: the same loop as the package's, not a package kernel (literal counts: a
# closure's int would be a symbolic size with dynamic=True).
USER_REPEATS = {
    4: lambda x: (x[..., None] * 2).expand(*x.shape, 4).reshape(*x.shape[:-1], -1),
    8: lambda x: (x[..., None] * 2).expand(*x.shape, 8).reshape(*x.shape[:-1], -1),
}


@pytest.mark.parametrize("count", sorted(USER_REPEATS))
def test_other_kernels_keep_inductor_code(count):
    x = torch.randn(2, 3, 10, 12)
    out, code = _code(USER_REPEATS[count], x)
    assert torch.equal(out, USER_REPEATS[count](x))
    assert "_mm_storeu_ps(" not in code and "_mm256_storeu_ps(" not in code
    if cpu_gathers.available():
        assert str(count) in MASKED_STORE.findall(code)


def test_uninstalled_kernels_are_stock():
    x = torch.randn(2, 3, 10, 12)
    fn = lambda x: F.interpolate(x, scale_factor=4.0)  # noqa: E731
    decomps.uninstall()
    try:
        _, code = _code(fn, x)
    finally:
        decomps.install()
    assert "_mm_storeu_ps(" not in code
    _, code = _code(fn, x)
    assert ("_mm_storeu_ps(" in code) == cpu_gathers.available()


class _Kernel:
    tiling_factor = cpu_gathers.LANES

    def __init__(self, num_elems):
        import sympy

        self.num_elems = sympy.Integer(num_elems)  # as Inductor keeps a constant tail


@pytest.mark.parametrize("count", [1, 2, 3, 12, 16])
def test_other_counts_keep_the_masked_store(count):
    import sympy

    index = sympy.Symbol("x0", integer=True, nonnegative=True)
    line = f"tmp1.store(out_ptr0 + static_cast<int64_t>(x0), static_cast<int64_t>({count}L));"
    assert cpu_stores.narrow_store(_Kernel(count), "tmp1", "out_ptr0", index, torch.float32, line) is None


def test_narrow_store_needs_float32_and_inductors_line():
    import sympy

    index = sympy.Symbol("x0", integer=True, nonnegative=True)
    line = "tmp1.store(out_ptr0 + static_cast<int64_t>(x0), static_cast<int64_t>(4L));"
    kernel = _Kernel(4)
    assert cpu_stores.narrow_store(kernel, "tmp1", "out_ptr0", index, torch.float32, line) == (
        "_mm_storeu_ps(out_ptr0 + static_cast<int64_t>(x0), _mm512_castps512_ps128(tmp1));"
    )
    # bfloat16 vectors hold 32 lanes; an index that the line does not store to; another form
    assert cpu_stores.narrow_store(kernel, "tmp1", "out_ptr0", index, torch.bfloat16, line) is None
    assert cpu_stores.narrow_store(kernel, "tmp1", "out_ptr0", index + 1, torch.float32, line) is None
    assert cpu_stores.narrow_store(kernel, "tmp1", "out_ptr0", index, torch.float32, "tmp1.store(out_ptr0);") is None
