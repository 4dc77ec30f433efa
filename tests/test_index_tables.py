"""index_tables and lowerings.index_tables: the op copies its argument, ``index_by_maps`` is
``_unsafe_index``, ``index_put_by_maps`` is ``index_put`` and ``gather_window_starts`` reads each
non-empty window's start, zero elsewhere; compiled, a gather's index table is
a buffer of its own that the gather loads (no extern call), a plain store stores through its
table without bounds checks, and the result is eager's values and strides."""

from __future__ import annotations

import itertools
import re

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code
from torch._subclasses.fake_tensor import FakeTensorMode

from decomps import index_tables, kernel_choice


def test_op_copies_its_argument():
    index = torch.arange(7) * 3
    table = index_tables.index_table(index)
    assert torch.equal(table, index) and table.data_ptr() != index.data_ptr()
    with FakeTensorMode() as mode:
        fake = index_tables.index_table(mode.from_tensor(index))
    assert (fake.shape, fake.dtype, fake.stride()) == (index.shape, index.dtype, index.stride())
    torch.library.opcheck(index_tables.index_table, (index,))


def test_index_by_maps_is_unsafe_index():
    x = torch.randn(2, 3, 5, 7)
    indices = [None, None, torch.tensor([0, 0, 2, 4]).view(-1, 1), torch.tensor([1, 3, 3, 6, 6], dtype=torch.int32)]
    out = index_tables.index_by_maps(x, indices)
    expected = torch.ops.aten._unsafe_index(x, indices)
    assert torch.equal(out, expected) and out.stride() == expected.stride()
    torch.library.opcheck(index_tables.index_by_maps, (x, indices))


def test_index_put_by_maps_is_index_put():
    x = torch.randn(2, 3, 5, 7)
    before = x.clone()
    indices = [None, None, torch.tensor([0, 2, 4]).view(-1, 1), torch.tensor([1, 3, 6], dtype=torch.int32)]
    values = torch.randn(2, 3, 3, 3)
    out = index_tables.index_put_by_maps(x, indices, values)
    expected = torch.ops.aten.index_put(x, indices, values)
    assert torch.equal(out, expected) and out.stride() == expected.stride()
    assert torch.equal(x, before)  # functional: a new tensor
    torch.library.opcheck(index_tables.index_put_by_maps, (x, indices, values))


def test_gather_window_starts_reads_each_window_start():
    x = torch.randn(2, 3, 5, 7)
    # windows [0,1) [1,1) [1,3) [3,5) [5,5) along dim 2, [0,2) [2,3) [3,3) [3,6) along dim 3
    starts = [torch.tensor([0, 1, 1, 3, 5, 5]), torch.tensor([0, 2, 3, 3, 6], dtype=torch.int32)]
    out = index_tables.gather_window_starts(x, 2, starts)
    expected = torch.zeros(2, 3, 5, 4)
    for i, j in itertools.product(range(5), range(4)):
        if starts[0][i] < starts[0][i + 1] and starts[1][j] < starts[1][j + 1]:
            expected[:, :, i, j] = x[:, :, starts[0][i], starts[1][j]]
    assert torch.equal(out, expected) and out.stride() == expected.stride()
    inner = index_tables.gather_window_starts(x, 3, starts[1:])  # one dim, not the first spatial one
    assert torch.equal(inner, torch.stack([x[..., 0], x[..., 2], torch.zeros(2, 3, 5), x[..., 3]], -1))
    torch.library.opcheck(index_tables.gather_window_starts, (x, 2, starts))


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("dynamic", [False, True])
def test_plain_store_is_generated_without_checks(dynamic, deterministic, fresh_compiles):
    """A downsample's backward stores through its owner table in generated code: no bounds
    check, no negative-index wrap, and no extern ``index_put`` in deterministic mode (where
    Inductor's ``index_put`` lowering would fall back to ATen's)."""
    op = torch.ops.aten.upsample_nearest2d_backward

    def fn(g):
        return op(g, [20, 31], [2, 3, 45, 37])

    g = torch.randn(2, 3, 20, 31)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        torch._dynamo.reset()
        out, codes = run_and_get_code(torch.compile(fn, dynamic=dynamic, fullgraph=True), g)
    finally:
        torch.use_deterministic_algorithms(previous)
    code = "\n".join(codes)
    assert "index out of bounds" not in code, code
    assert "aten.index_put" not in code and "decomps.index_put_by_maps" not in code, code  # no extern call
    expected = fn(g)
    assert torch.equal(out, expected) and out.stride() == expected.stride()


# A 1-d int buffer of the output width in the generated wrapper.
TABLE_BUFFER = re.compile(r"empty_strided_cpu\(\(27, \), \(1, \), torch\.int(32|64)\)")


@pytest.mark.parametrize("dynamic", [False, True])
def test_generated_code_stores_the_table(dynamic, vector_bits, fresh_compiles):
    """The innermost dim's table of a uint8 gather, with AVX2's vectors or wider
    (kernel_choice.index_table)."""
    def fn(x):
        return F.interpolate(x, size=(26, 27), mode="nearest-exact")

    x = torch.randint(0, 256, (2, 3, 50, 40), dtype=torch.uint8)
    torch._dynamo.reset()
    out, codes = run_and_get_code(torch.compile(fn, dynamic=dynamic, fullgraph=True), x)
    code = "\n".join(codes)
    assert "decomps.index_table" not in code  # lowered, not an extern call of the op
    assert bool(TABLE_BUFFER.search(code)) == (vector_bits >= 256), code
    expected = fn(x)
    assert torch.equal(out, expected) and out.stride() == expected.stride()


SIZES = [((50, 40), (26, 27)), ((9, 13), (20, 7))]


def _interpolate(osize, mode, call_form):
    """``size`` as constants of the code (static under ``dynamic=True``) or from a closure
    (symbolic)."""
    if call_form == "literal":
        return eval(f"lambda x: F.interpolate(x, size={osize!r}, mode={mode!r})", {"F": F})
    return lambda x: F.interpolate(x, size=osize, mode=mode)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float64], ids=str)
@pytest.mark.parametrize("channels", [3, 4])
def test_compiled_gathers_are_eager_exactly(dtype, channels):
    """Both layouts and modes, static sizes and both call forms with symbolic ones: 3
    channels-last channels take eager's generic kernel, 4 its channels-last one (chosen at run
    time where C is symbolic); float64 takes the float64 rule."""
    forms = [(False, "literal"), (True, "literal"), (True, "symbolic")]
    for (isize, osize), layout, mode, (dynamic, form) in itertools.product(
        SIZES, (torch.contiguous_format, torch.channels_last), ("nearest", "nearest-exact"), forms
    ):
        x = (torch.rand(2, channels, *isize, dtype=torch.float64) * 255).to(dtype)
        x = x.contiguous(memory_format=layout)
        fn = _interpolate(osize, mode, form)
        torch._dynamo.reset()
        out = torch.compile(fn, dynamic=dynamic, fullgraph=True)(x)
        expected = fn(x)
        msg = (dtype, channels, isize, osize, layout, mode, dynamic, form)
        assert torch.equal(out, expected) and out.stride() == expected.stride(), msg
