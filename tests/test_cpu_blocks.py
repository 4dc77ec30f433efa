"""lowerings.cpu_blocks: the generated code allocates the CPU buffers that the package's ops compute
(forward outputs, alone or fused, and gradients) from ``decomps.block_pool``, other buffers as
stock does, and each result is eager's whether its block is new, reused or was written before."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

import decomps
from decomps import block_pool
from lowerings import cpu_blocks

CALL = "decomps_empty_strided("


def test_hooks_exist():
    assert cpu_blocks.missing_hooks() == []


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks from 1 KB, for every buffer of the package's kernels (the thresholds are 4 MB for
    the store's gradients and 32 MB for other buffers)."""
    monkeypatch.setattr(block_pool, "MIN_BYTES", 1024)
    monkeypatch.setattr(block_pool, "MAPPED_BYTES", 1024)
    block_pool.clear()
    yield
    block_pool.clear()


def _step(x, g, kwargs, fn=F.interpolate):
    return torch.autograd.grad(fn(x, **kwargs), x, g)[0]


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("dynamic", [False, True])
def test_package_buffers_allocate_from_the_blocks(memory_format, dynamic, fresh_compiles, small_blocks):
    """A downsample's training step allocates its forward output (over ``MAPPED_BYTES`` at compile
    time, here 1 KB) and its gradient through the blocks, its index tables (under it) as stock
    does; stock's code (package uninstalled) never."""
    x = torch.randn(2, 3, 48, 52).contiguous(memory_format=memory_format).requires_grad_()
    g = torch.randn(2, 3, 10, 14).contiguous(memory_format=memory_format)
    kwargs = {"size": (10, 14), "mode": "nearest"}
    torch._dynamo.reset()
    compiled = torch.compile(F.interpolate, dynamic=dynamic)
    grad, (forward, backward) = run_and_get_code(lambda: _step(x, g, kwargs, compiled))
    expected = _step(x, g, kwargs)
    assert torch.equal(grad, expected) and grad.stride() == expected.stride()
    assert forward.count(CALL) == 1 and backward.count(CALL) == 1
    assert "from decomps.block_pool import empty_strided" in backward
    with decomps.disabled():
        compiled = torch.compile(F.interpolate, dynamic=dynamic)
        _, codes = run_and_get_code(lambda: _step(x, g, kwargs, compiled))
    assert not any(CALL in code for code in codes)


def _merge(x, lateral):
    return lateral + F.interpolate(x, scale_factor=2.0)


def _skip_cat(x, skip):
    return torch.cat([F.interpolate(x, scale_factor=2.0), skip], 1)


@pytest.mark.parametrize("fn", [_merge, _skip_cat])
def test_fused_outputs_allocate_from_the_blocks(fn, fresh_compiles, small_blocks):
    """An upsample fused into its consumer: the fused kernel's output is the package's buffer."""
    x, other = torch.randn(1, 4, 6, 7), torch.randn(1, 4, 12, 14)
    torch._dynamo.reset()
    out, (code,) = run_and_get_code(torch.compile(fn), x, other)
    expected = fn(x, other)
    assert torch.equal(out, expected) and out.stride() == expected.stride()
    assert CALL in code


def test_buffers_without_package_ops_stay_stock(fresh_compiles, small_blocks):
    """No package op in a kernel's origins: the stock allocation, in a graph with package ops."""
    x = torch.randn(1, 4, 16, 17)
    torch._dynamo.reset()
    out, (code,) = run_and_get_code(torch.compile(lambda x: (x * 2, F.interpolate(x, size=(8, 9)))), x)
    assert code.count(CALL) == 1 and code.count("empty_strided_cpu(") == 1
    assert torch.equal(out[0], x * 2) and torch.equal(out[1], F.interpolate(x, size=(8, 9)))


def test_buffers_under_the_mapped_size_stay_stock_but_the_store(fresh_compiles):
    """The default thresholds: a 5 MB forward output (under ``MAPPED_BYTES`` at compile time) keeps
    the stock line, the store's 18.7 MB gradient comes from the blocks."""
    x = torch.randn(1, 3, 1200, 1300, requires_grad=True)
    g = torch.randn(1, 3, 600, 700)
    kwargs = {"size": (600, 700), "mode": "nearest"}
    torch._dynamo.reset()
    compiled = torch.compile(F.interpolate, dynamic=True)
    grad, (forward, backward) = run_and_get_code(lambda: _step(x, g, kwargs, compiled))
    assert torch.equal(grad, _step(x, g, kwargs))
    assert CALL not in forward and backward.count(CALL) == 1


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("scale", [2.0, 1.5])
def test_forwards_are_eager_through_reused_blocks(memory_format, scale, small_blocks):
    """Inference calls: a kept output keeps its values while the next call writes another block; a
    dropped one's block is written again, whole, even after it was overwritten with NaN."""
    xs = [torch.randn(1, 3, 20, 22).contiguous(memory_format=memory_format) for _ in range(3)]
    torch._dynamo.reset()
    compiled = torch.compile(F.interpolate, dynamic=True)
    expected = [F.interpolate(x, scale_factor=scale) for x in xs]
    first = compiled(xs[0], scale_factor=scale)
    second = compiled(xs[1], scale_factor=scale)
    assert first.data_ptr() != second.data_ptr()
    assert torch.equal(first, expected[0]) and torch.equal(second, expected[1])
    ptr = first.data_ptr()
    first.fill_(float("nan"))
    del first
    third = compiled(xs[2], scale_factor=scale)
    assert third.data_ptr() == ptr and third._base is None
    assert torch.equal(third, expected[2]) and third.stride() == expected[2].stride()


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_steps_are_eager_through_reused_blocks(memory_format, mode, small_blocks):
    """A held gradient keeps its values while the next step writes another block; a dropped one's
    block is written again, whole, even after it was overwritten with NaN."""
    x = torch.randn(1, 3, 40, 45).contiguous(memory_format=memory_format).requires_grad_()
    gs = [torch.randn(1, 3, 9, 11).contiguous(memory_format=memory_format) for _ in range(4)]
    kwargs = {"size": (9, 11), "mode": mode}
    torch._dynamo.reset()
    compiled = torch.compile(F.interpolate, dynamic=True)
    expected = [_step(x, g, kwargs) for g in gs]
    first = _step(x, gs[0], kwargs, compiled)
    second = _step(x, gs[1], kwargs, compiled)
    assert first.data_ptr() != second.data_ptr()
    assert torch.equal(first, expected[0]) and torch.equal(second, expected[1])
    ptr = first.data_ptr()
    first.fill_(float("nan"))
    del first
    third = _step(x, gs[2], kwargs, compiled)
    assert third.data_ptr() == ptr and third._base is None
    assert torch.equal(third, expected[2]) and third.stride() == expected[2].stride()
    del second, third
    fourth = _step(x, gs[3], kwargs, compiled)
    assert torch.equal(fourth, expected[3])
    # two gradients' blocks and one of the forward's outputs, each dropped before the next step
    assert block_pool.held_bytes() == 2 * x.numel() * 4 + 3 * 9 * 11 * 4


def test_leaf_gradients_accumulate(small_blocks):
    """``backward()`` into a leaf's ``.grad``: the first step's gradient is kept as ``.grad``,
    later ones are added to it, as eager's are."""
    x = torch.randn(1, 3, 40, 45, requires_grad=True)
    kwargs = {"size": (9, 11), "mode": "nearest"}
    g = torch.randn(1, 3, 9, 11)
    torch._dynamo.reset()
    compiled = torch.compile(F.interpolate, dynamic=True)
    for _ in range(3):
        compiled(x, **kwargs).backward(g)
    expected = _step(x, g, kwargs)
    assert torch.equal(x.grad, 3 * expected)
