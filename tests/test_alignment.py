"""decomps.alignment: the innermost-size guard, taken where the example sizes meet it, costs a
call site at most two graphs, and every graph stays exact."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from decomps import alignment

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class _Graphs:
    """An Inductor backend that counts the graphs it compiled and keeps each one's guards."""

    def __init__(self):
        self.guards: list[list[str]] = []

    def __call__(self, gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        compiled = compile_fx(gm, example_inputs)
        shape_env = torch._guards.TracingContext.try_get().fake_mode.shape_env
        self.guards.append([str(g.expr) for g in shape_env.guards])
        return compiled


def _stream(device, widths, *, memory_format=torch.contiguous_format, grad=True):
    torch._dynamo.reset()
    graphs = _Graphs()
    fn = lambda x: F.interpolate(x, scale_factor=2.0, mode="nearest")  # noqa: E731
    compiled = torch.compile(fn, backend=graphs, dynamic=True)
    for i, width in enumerate(widths):
        x0 = torch.randn(2, 4, 5, width, device=device, generator=None).contiguous(memory_format=memory_format)
        x, xe = x0.clone().requires_grad_(grad), x0.clone().requires_grad_(grad)
        y, e = compiled(x), fn(xe)
        assert torch.equal(y, e) and y.stride() == e.stride()
        if grad:
            g = torch.randn_like(e)
            y.backward(g)
            e.backward(g)
            assert torch.equal(x.grad, xe.grad)
    return graphs


@pytest.fixture(autouse=True)
def fresh_graphs():
    """Every compile traces the decompositions: a graph served from the FX-graph or AOTAutograd
    cache (shared with other tests) would skip them and take no guard."""
    with torch._inductor.config.patch(fx_graph_cache=False):
        with torch._functorch.config.patch(enable_autograd_cache=False):
            yield


@pytest.fixture
def guarded_everywhere(monkeypatch):
    """The guard on every device (the CPU backend ignores the fact; the guards are the same)."""
    monkeypatch.setattr(alignment, "UNGUARDED_DEVICE_TYPES", frozenset())


def _alignment_guards(guards: list[str]) -> list[str]:
    return [g for g in guards if "Mod(" in g and "16" in g]


@pytest.mark.parametrize("device", DEVICES)
def test_aligned_then_unaligned_sizes_compile_two_graphs(device, guarded_everywhere):
    graphs = _stream(device, [32, 17, 48, 21, 64])
    assert len(graphs.guards) == 2
    assert _alignment_guards(graphs.guards[0])  # aligned example: guarded
    assert not _alignment_guards(graphs.guards[1])  # the graph for every size takes no guard


@pytest.mark.parametrize("device", DEVICES)
def test_unaligned_first_takes_no_guard(device, guarded_everywhere):
    graphs = _stream(device, [17, 32, 21, 48])
    assert len(graphs.guards) == 1
    assert not _alignment_guards(graphs.guards[0])


@pytest.mark.parametrize("device", DEVICES)
def test_channels_last_guards_the_channel_size(device, guarded_everywhere):
    torch._dynamo.reset()
    graphs = _Graphs()
    fn = lambda x: F.interpolate(x, scale_factor=2.0, mode="nearest")  # noqa: E731
    compiled = torch.compile(fn, backend=graphs, dynamic=True)
    for channels in (32, 24, 48):
        x = torch.randn(2, channels, 5, 7, device=device).contiguous(memory_format=torch.channels_last)
        assert torch.equal(compiled(x), fn(x))
    assert len(graphs.guards) == 2
    assert _alignment_guards(graphs.guards[0]) and not _alignment_guards(graphs.guards[1])


def test_cpu_graphs_take_no_guard():
    graphs = _stream("cpu", [32, 48], grad=False)
    assert len(graphs.guards) == 1
    assert not _alignment_guards(graphs.guards[0])
