"""lowerings.cpu_blocks: the generated code allocates the plain store's CPU gradient from
``decomps.block_pool``, and each step's gradient is eager's whether its block is new, reused or
was written before."""

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
    monkeypatch.setattr(block_pool, "MIN_BYTES", 1024)
    block_pool.clear()
    yield
    block_pool.clear()


def _step(x, g, kwargs, fn=F.interpolate):
    return torch.autograd.grad(fn(x, **kwargs), x, g)[0]


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("dynamic", [False, True])
def test_the_store_allocates_its_gradient_from_the_blocks(memory_format, dynamic, fresh_compiles):
    """The backward graph of a downsample allocates its gradient through the blocks, the forward
    nothing; stock's code (package uninstalled) never."""
    x = torch.randn(2, 3, 24, 26).contiguous(memory_format=memory_format).requires_grad_()
    g = torch.randn(2, 3, 5, 7).contiguous(memory_format=memory_format)
    kwargs = {"size": (5, 7), "mode": "nearest"}
    torch._dynamo.reset()
    compiled = torch.compile(F.interpolate, dynamic=dynamic)
    grad, (forward, backward) = run_and_get_code(lambda: _step(x, g, kwargs, compiled))
    expected = _step(x, g, kwargs)
    assert torch.equal(grad, expected) and grad.stride() == expected.stride()
    assert CALL not in forward
    assert backward.count(CALL) == 1 and "from decomps.block_pool import empty_strided" in backward
    with decomps.disabled():
        compiled = torch.compile(F.interpolate, dynamic=dynamic)
        _, codes = run_and_get_code(lambda: _step(x, g, kwargs, compiled))
    assert not any(CALL in code for code in codes)


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
    assert block_pool.held_bytes() == 2 * x.numel() * 4


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
