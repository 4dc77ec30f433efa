"""lowerings.cpu_stores: C++ kernels that hold the package's nodes store their short float32
vectors unmasked (2, 4 or 8 of AVX512's 16 lanes, 2 or 4 of AVX2's 8), where the package's path
is installed; other kernels and other counts keep Inductor's counted store, and the results are
eager's."""

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
# Per path (its float32 lanes), the unmasked store of a repeat's k lanes (AVX512's backend keeps a
# range of 2 in a scalar loop).
NARROW_STORE = {
    cpu_gathers.LANES: {4: "_mm_storeu_ps(out_ptr0 + ", 8: "_mm256_storeu_ps(out_ptr0 + "},
    cpu_gathers.AVX2_LANES: {2: "_mm_storel_epi64(reinterpret_cast<__m128i*>(out_ptr0 + ",
                             4: "_mm_storeu_ps(out_ptr0 + "},
}


def _path_lanes() -> int:
    """The float32 lanes of the package's C++ path on this machine: AVX512's, AVX2's, or 0."""
    if cpu_gathers.available():
        return cpu_gathers.LANES
    return cpu_gathers.AVX2_LANES if cpu_gathers.avx2_available() else 0


def _code(fn, *args):
    """fn's result compiled with dynamic shapes, and the generated code."""
    torch._dynamo.reset()
    with fresh_inductor_cache():
        out, codes = run_and_get_code(torch.compile(fn, dynamic=True, fullgraph=True), *args)
    return out, "\n".join(codes)


@pytest.mark.parametrize(
    "shape, factor",
    [((2, 3, 10, 12), 4), ((2, 3, 10, 12), 8), ((1, 2, 5, 6, 7), 4), ((2, 3, 40), 4), ((2, 3, 40), 2),
     ((2, 3, 10, 12), 2)],
    ids=["2d-x4", "2d-x8", "3d-x4", "1d-x4", "1d-x2", "2d-x2"],
)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_repeat_stores_whole_lanes(shape, factor, mode):
    x = torch.randn(shape)
    kwargs = {"scale_factor": float(factor), "mode": mode}
    out, code = _code(lambda x: F.interpolate(x, **kwargs), x)
    expected = F.interpolate(x, **kwargs)
    assert torch.equal(out, expected) and out.stride() == expected.stride()
    lanes = _path_lanes()
    narrow = NARROW_STORE.get(lanes, {}).get(factor)
    assert narrow is None or narrow in code
    # Inductor stores a vector shorter than its own with a count: none left where a path applies
    short = factor * 32 < cpu_vectors.vector_bits()
    assert (str(factor) in MASKED_STORE.findall(code)) == (short and not lanes)


def test_fused_neighbours_are_eager_exactly():
    """An FPN merge at x4: the repeated rows go through the short stores, the add reads them."""
    lateral, top = torch.randn(2, 3, 40, 48), torch.randn(2, 3, 10, 12)
    fn = lambda lateral, top: lateral + F.interpolate(top, scale_factor=4.0)  # noqa: E731
    out, code = _code(fn, lateral, top)
    assert torch.equal(out, fn(lateral, top))
    assert ("_mm_storeu_ps(out_ptr0 + " in code) == bool(_path_lanes())


# A user's own repeat: the same loop as the package's, not a package kernel (literal counts: a
# closure's int would be a symbolic size with dynamic=True).
USER_REPEATS = {
    2: lambda x: (x[..., None] * 2).expand(*x.shape, 2).reshape(*x.shape[:-1], -1),
    4: lambda x: (x[..., None] * 2).expand(*x.shape, 4).reshape(*x.shape[:-1], -1),
    8: lambda x: (x[..., None] * 2).expand(*x.shape, 8).reshape(*x.shape[:-1], -1),
}


@pytest.mark.parametrize("count", sorted(USER_REPEATS))
def test_other_kernels_keep_inductor_code(count):
    x = torch.randn(2, 3, 10, 12)
    out, code = _code(USER_REPEATS[count], x)
    assert torch.equal(out, USER_REPEATS[count](x))
    for store in ("_mm_storel_epi64(", "_mm_storeu_ps(", "_mm256_storeu_ps("):
        assert store not in code
    if count in NARROW_STORE.get(_path_lanes(), {}):  # what the package's kernels would store unmasked
        assert str(count) in MASKED_STORE.findall(code)


def test_uninstalled_kernels_are_stock():
    x = torch.randn(2, 3, 10, 12)
    fn = lambda x: F.interpolate(x, scale_factor=4.0)  # noqa: E731
    with decomps.disabled():
        _, code = _code(fn, x)
    assert "_mm_storeu_ps(" not in code
    _, code = _code(fn, x)
    assert ("_mm_storeu_ps(" in code) == bool(_path_lanes())


class _Kernel:
    def __init__(self, num_elems, lanes=cpu_gathers.LANES):
        import sympy

        self.num_elems = sympy.Integer(num_elems)  # as Inductor keeps a constant tail
        self.tiling_factor = lanes


def _line(count: int) -> str:
    return f"tmp1.store(out_ptr0 + static_cast<int64_t>(x0), static_cast<int64_t>({count}L));"


@pytest.mark.parametrize("lanes, count", [(16, 1), (16, 3), (16, 12), (16, 16), (8, 1), (8, 3), (8, 8), (4, 2)])
def test_other_counts_keep_the_counted_store(lanes, count):
    import sympy

    index = sympy.Symbol("x0", integer=True, nonnegative=True)
    assert cpu_stores.narrow_store(_Kernel(count, lanes), "tmp1", "out_ptr0", index, torch.float32,
                                   _line(count)) is None


@pytest.mark.parametrize("lanes, count, store", [
    (16, 2, "_mm_storel_epi64(reinterpret_cast<__m128i*>(out_ptr0 + static_cast<int64_t>(x0)), "
            "_mm_castps_si128(_mm512_castps512_ps128(tmp1)));"),
    (16, 4, "_mm_storeu_ps(out_ptr0 + static_cast<int64_t>(x0), _mm512_castps512_ps128(tmp1));"),
    (16, 8, "_mm256_storeu_ps(out_ptr0 + static_cast<int64_t>(x0), _mm512_castps512_ps256(tmp1));"),
    (8, 2, "_mm_storel_epi64(reinterpret_cast<__m128i*>(out_ptr0 + static_cast<int64_t>(x0)), "
           "_mm_castps_si128(_mm256_castps256_ps128(tmp1)));"),
    (8, 4, "_mm_storeu_ps(out_ptr0 + static_cast<int64_t>(x0), _mm256_castps256_ps128(tmp1));"),
])
def test_narrow_store_of_each_width(lanes, count, store):
    import sympy

    index = sympy.Symbol("x0", integer=True, nonnegative=True)
    assert cpu_stores.narrow_store(_Kernel(count, lanes), "tmp1", "out_ptr0", index, torch.float32,
                                   _line(count)) == store


def test_narrow_store_needs_float32_and_inductors_line():
    import sympy

    index = sympy.Symbol("x0", integer=True, nonnegative=True)
    line = _line(4)
    for lanes in (16, 8):
        kernel = _Kernel(4, lanes)
        assert cpu_stores.narrow_store(kernel, "tmp1", "out_ptr0", index, torch.float32, line) is not None
        # bfloat16 vectors hold other lane counts; an index that the line does not store to; another form
        assert cpu_stores.narrow_store(kernel, "tmp1", "out_ptr0", index, torch.bfloat16, line) is None
        assert cpu_stores.narrow_store(kernel, "tmp1", "out_ptr0", index + 1, torch.float32, line) is None
        assert cpu_stores.narrow_store(kernel, "tmp1", "out_ptr0", index, torch.float32, "tmp1.store(out_ptr0);") is None
