"""lowerings.cpu_gathers: float32 gathers of the package's C++ kernels load whole vectors (a
permute of two vectors where the lanes' span allows, lane by lane elsewhere) and a downsample's
plain store stores them (two expands where the lanes rise within the span) with AVX512; with
AVX2's vectors (``config.cpp.simdlen=256`` on a wider machine) the gathers permute two vectors
where the span allows and load their lanes into one vector elsewhere, and load their int32 index
as whole vectors; the result is eager's, whichever path a vector takes, and other kernels keep
Inductor's code."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from torch._inductor import config
from torch._inductor.utils import run_and_get_code

import decomps
from decomps import eager_rules
from lowerings import cpu_gathers

PERMUTE = "_mm512_permutex2var_ps"
EXPAND = "_mm512_maskz_expand_ps"
# The span test of each index type: int32 where the gather reads its table's values as they are
# (decomps::index_by_maps), int64 for the channel rows' offsets.
SPAN_TEST = {torch.int32: "_mm512_cmple_epu32_mask", torch.int64: "_mm512_cmple_epu64_mask"}
# AVX2: the permute within the span, the lanes loaded into one vector elsewhere, and a whole
# vector of the int32 index loaded with Inductor's element count (a memcpy).
AVX2_PERMUTE = "_mm256_permutevar8x32_ps"
# AVX2: a span within one vector (the upsamples of SIZES) permutes one load; the downsamples'
# spans take the second load.
AVX2_ONE_VECTOR = "_mm256_testz_si256(offsets, _mm256_set1_epi32(~7))"
AVX2_LANES = "_mm256_setr_ps(base[index[0]]"
COUNTED_INT32_LOAD = re.compile(r"Vectorized<int32_t>::loadu\([^;]*, static_cast<int64_t>\(8L?\)\)")
# The machine's own vectors, and AVX2's (on a machine with AVX2 or wider).
SIMDLENS = [None, 256]


def _compile(fn, *args, dynamic=True, simdlen=None):
    torch._dynamo.reset()
    with config.patch({"cpp.simdlen": simdlen}):
        out, codes = run_and_get_code(torch.compile(fn, dynamic=dynamic, fullgraph=True), *args)
    return out, "\n".join(codes)


def _paths(simdlen):
    """Whether the AVX512 path and the AVX2 path apply with these vectors."""
    with config.patch({"cpp.simdlen": simdlen}):
        return cpu_gathers.available(), cpu_gathers.avx2_available()


def _same(actual, expected, msg=""):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, msg
    assert torch.equal(actual, expected), msg
    assert actual.stride() == expected.stride(), msg


# (input spatial size, output size): upsampling, downsampling by less than 2 (spans of 16
# outputs within two vectors), by just over 2 and by 4.3 (spans of 32 or more: each half vector
# within 32), by 6.5 (lane by lane); widths that leave a partial vector.
SIZES = [((9, 13), (20, 37)), ((50, 40), (27, 26)), ((30, 70), (14, 33)), ((12, 130), (5, 30)), ((20, 260), (7, 40))]


@pytest.mark.parametrize("simdlen", SIMDLENS)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_package_gathers_are_eager_exactly(mode, dynamic, simdlen):
    avx512, avx2 = _paths(simdlen)
    for isize, osize in SIZES:
        x = torch.randn(2, 3, *isize)
        fn = eval(f"lambda x: F.interpolate(x, size={osize!r}, mode={mode!r})", {"F": F})
        out, code = _compile(fn, x, dynamic=dynamic, simdlen=simdlen)
        _same(out, fn(x), (isize, osize, mode, dynamic, simdlen))
        # every row gathers along its innermost dim through an int32 table
        assert (PERMUTE in code) == avx512, (isize, osize)
        assert (SPAN_TEST[torch.int32] in code) == avx512
        assert (AVX2_PERMUTE in code and AVX2_LANES in code) == avx2, (isize, osize)
        assert (AVX2_ONE_VECTOR in code) == avx2, (isize, osize)
        if avx2:  # the table's whole vectors without Inductor's count; its tail with it
            assert not COUNTED_INT32_LOAD.search(code), (isize, osize)
            assert "Vectorized<int32_t>::loadu(" in code


# Run in a child process: the input's last element ends a readable region and the page after it
# is inaccessible, so a load past the input's storage ends the child with SIGSEGV.
_GUARDED_GATHERS = """
import ctypes, math, mmap, sys
import torch, torch.nn.functional as F
from torch._inductor import config
from torch._inductor.utils import run_and_get_code
import decomps
from lowerings import cpu_gathers

def guarded(shape):
    nbytes = 4 * math.prod(shape)
    page = mmap.PAGESIZE
    pages = -(-nbytes // page)
    region = mmap.mmap(-1, (pages + 1) * page)
    start = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    assert libc.mprotect(start + pages * page, page, 0) == 0, ctypes.get_errno()  # PROT_NONE
    x = torch.frombuffer(region, dtype=torch.float32, count=math.prod(shape), offset=pages * page - nbytes)
    assert x.data_ptr() + nbytes == start + pages * page
    x.copy_(torch.randn(x.numel()))
    return x.view(shape), region

simdlen, sizes = int(sys.argv[1]), eval(sys.argv[2])
with config.patch({"cpp.simdlen": simdlen}):
    avx2 = cpu_gathers.avx2_available()
    for mode in ("nearest", "nearest-exact"):
        for isize, osize in sizes:
            x, region = guarded((2, 3, *isize))
            fn = eval(f"lambda x: F.interpolate(x, size={osize!r}, mode={mode!r})", {"F": F})
            torch._dynamo.reset()
            out, code = run_and_get_code(torch.compile(fn, dynamic=True, fullgraph=True), x)
            assert torch.equal(out, fn(x)), (mode, isize, osize)
            assert ("_mm256_permutevar8x32_ps" in "".join(code)) == avx2, (mode, isize, osize)
print("ok")
"""


def test_avx2_loads_stay_within_the_input():
    """The AVX2 gather's unmasked loads read past the lanes' elements, never past the input's
    storage: at its end (the last rows) the lanes load one by one."""
    result = subprocess.run([sys.executable, "-c", _GUARDED_GATHERS, "256", repr(SIZES)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (result.returncode, result.stderr[-2000:])


def _backward_op(mode):
    aten = torch.ops.aten
    return aten._upsample_nearest_exact2d_backward if mode == "nearest-exact" else aten.upsample_nearest2d_backward


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_package_stores_are_eager_exactly(mode, dynamic):
    """The downsamples' backward: a plain store of each gradient element into its input
    (decomps::index_put_by_maps), by expands where 16 outputs' inputs lie within 32, lane by lane
    where they do not (the 2.1x, 4.3x and 6.5x downsamples' wider vectors)."""
    op = _backward_op(mode)
    for isize, osize in SIZES[1:]:
        g = torch.randn(2, 3, *osize)
        fn = lambda g: op(g, list(osize), [2, 3, *isize])  # noqa: E731
        out, code = _compile(fn, g, dynamic=dynamic)
        _same(out, fn(g), (isize, osize, mode, dynamic))
        assert (EXPAND in code) == cpu_gathers.available(), (isize, osize)


def test_stores_through_int64_owners():
    """Owners past int32's range are int64 (``eager_rules.map_dtype``; here every size is, by a
    limit of 0): the store's span test reads two int64 vectors."""
    op = _backward_op("nearest")
    g, x = torch.randn(2, 3, 27, 26), torch.empty(2, 3, 50, 40)
    fn = lambda g, x: op(g, list(g.shape[2:]), list(x.shape))  # noqa: E731  symbolic sizes
    with mock.patch.object(eager_rules, "INT32_MAP_LIMIT", 0):
        out, code = _compile(fn, g, x)
    _same(out, fn(g, x))
    assert (EXPAND in code and SPAN_TEST[torch.int64] in code) == cpu_gathers.available()


def test_other_stores_keep_inductors_code():
    """A store of the user's own through an index, with nothing of the package in its kernel."""
    x = torch.zeros(2, 3, 9, 40)
    index = torch.arange(0, 40, 2)
    values = torch.randn(2, 3, 9, 20)

    def fn(x, index, values):
        return torch.ops.aten.index_put(x, [None, None, None, index], values) + 1

    out, code = _compile(fn, x, index, values)
    _same(out, fn(x, index, values))
    assert EXPAND not in code


@pytest.mark.parametrize("simdlen", SIMDLENS)
@pytest.mark.parametrize("sizes", [((9, 13), (20, 37)), ((20, 260), (7, 40))], ids=["permute", "lane by lane"])
def test_channel_rows_take_the_int64_index(sizes, simdlen):
    """A channels-last gather of 3 channels reads rows through int64 offsets: upsampling within
    the span, a 6.5x downsample (spans of about 100 elements) lane by lane; with AVX2 lane by
    lane into one vector."""
    isize, osize = sizes
    avx512, avx2 = _paths(simdlen)
    x = torch.randn(2, 3, *isize).contiguous(memory_format=torch.channels_last)
    fn = lambda x: F.interpolate(x, size=osize, mode="nearest")  # noqa: E731
    out, code = _compile(fn, x, simdlen=simdlen)
    _same(out, fn(x), sizes)
    assert (SPAN_TEST[torch.int64] in code) == avx512
    assert (AVX2_LANES in code) == avx2


# Lane orders of a user's index fused into the upsample's gather: in order, a swap inside the
# vector (first and last lanes kept: the permute), a swap with the first lane (an offset below
# the first lane's: lane by lane), reversed (lane by lane).
def _orders(n):
    inner = list(range(n))
    inner[3], inner[7] = inner[7], inner[3]
    first = list(range(n))
    first[0], first[1] = first[1], first[0]
    return {"in order": list(range(n)), "inner swap": inner, "first swap": first,
            "reversed": list(range(n))[::-1]}


@pytest.mark.parametrize("simdlen", SIMDLENS)
@pytest.mark.parametrize("order", list(_orders(37)))
def test_any_lane_order_is_exact(order, simdlen):
    avx512, avx2 = _paths(simdlen)
    x = torch.randn(2, 3, 9, 13)
    index = torch.tensor(_orders(37)[order])

    def fn(x, index):
        return F.interpolate(x, size=(20, 37), mode="nearest")[..., index] * 2

    out, code = _compile(fn, x, index, simdlen=simdlen)
    _same(out, fn(x, index), order)
    assert (PERMUTE in code) == avx512
    assert (AVX2_PERMUTE in code) == avx2


@pytest.mark.parametrize("simdlen", SIMDLENS)
def test_other_kernels_keep_inductors_code(simdlen):
    """A gather of the user's own, with nothing of the package in its kernel."""
    x = torch.randn(2, 3, 9, 13)
    index = torch.tensor([0, 1, 1, 2, 3, 3, 4, 5, 5, 6, 7, 7, 8, 9, 9, 10, 11, 11, 12] * 2)

    def fn(x, index):
        return x[..., index] + 1

    out, code = _compile(fn, x, index, simdlen=simdlen)
    _same(out, fn(x, index))
    assert PERMUTE not in code and AVX2_PERMUTE not in code and AVX2_LANES not in code


@pytest.mark.parametrize("simdlen", SIMDLENS)
def test_other_dtypes_keep_inductors_code(simdlen):
    """uint8 gathers (their own index tables) load lane by lane."""
    x = torch.randint(0, 256, (2, 3, 50, 40), dtype=torch.uint8)
    fn = lambda x: F.interpolate(x, size=(27, 26), mode="nearest")  # noqa: E731
    out, code = _compile(fn, x, simdlen=simdlen)
    _same(out, fn(x))
    assert PERMUTE not in code and AVX2_PERMUTE not in code and AVX2_LANES not in code


def test_uninstall_restores_inductors_code_generation():
    from torch._inductor.codegen import cpp

    def hooks():
        return (cpp.CppVecKernel._load_or_store_non_contiguous, cpp.CppKernelProxy.codegen_nodes,
                cpp.CppVecKernel._get_vec_load_line)

    def owners():
        return {f.__module__ for f in hooks()}

    package = {cpp.__name__} if cpu_gathers.missing_hooks() else {cpu_gathers.__name__}
    assert owners() == package
    with decomps.disabled():
        assert owners() == {cpp.__name__}
        assert "_load_or_store_non_contiguous" in cpp.CppVecKernel.__dict__
        assert "codegen_nodes" in cpp.CppKernelProxy.__dict__
        assert "_get_vec_load_line" in cpp.CppVecKernel.__dict__
    assert owners() == package


@pytest.mark.parametrize("threads", [1, 2])
def test_batches_and_threads(threads):
    """Outer loops split over threads; each thread's vectors are eager's."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for (isize, osize), batch in itertools.product(SIZES[:2], (1, 5)):
            x = torch.randn(batch, 4, *isize)
            fn = lambda x: F.interpolate(x, size=osize, mode="nearest-exact")  # noqa: E731
            out, _ = _compile(fn, x)
            _same(out, fn(x), (isize, osize, batch, threads))
            if isize[0] > osize[0]:  # a downsample: its backward's plain store
                g = torch.randn_like(out)
                step = lambda g: _backward_op("nearest-exact")(g, list(osize), list(x.shape))  # noqa: E731
                out, _ = _compile(step, g)
                _same(out, step(g), (isize, osize, batch, threads, "backward"))
    finally:
        torch.set_num_threads(previous)
