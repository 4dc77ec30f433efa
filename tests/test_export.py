"""torch.export and AOTInductor with the decompositions.

* ``ExportedProgram.run_decompositions(decomps.decomposition_table())`` leaves no nearest op in
  the graph and equals eager, static and dynamic shapes.
* AOTInductor (``aoti_compile_and_package`` / ``aoti_load_package``) on CPU equals eager; with
  the package installed Inductor decomposes the nearest ops with this package's table.
* With dynamic dims, both stay exact over the declared ranges: no fast path may rest on a guard
  (export turns guards into assertions, AOTInductor drops them).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import decomps
from decomps import ops

aten = torch.ops.aten
TABLE = decomps.decomposition_table()
PACKETS = set(ops.FORWARD.values()) | set(ops.BACKWARD.values())


@pytest.fixture(autouse=True)
def _installed():
    assert decomps.install()
    yield
    decomps.install()


def _same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert torch.equal(actual, expected)
    assert actual.stride() == expected.stride()


def _check_family(actual, expected) -> None:
    """Forward outputs bit-equal; backward outputs (window sums, another summation order) close."""
    actual, expected = list(actual), list(expected)
    assert len(actual) == len(expected) == 8
    for a, e in zip(actual[:6], expected[:6]):
        _same(a, e)
    for a, e in zip(actual[6:], expected[6:]):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)
        assert a.stride() == e.stride()


def _nearest_nodes(gm: torch.fx.GraphModule) -> list[str]:
    return [
        str(n.target)
        for n in gm.graph.nodes
        if n.op == "call_function" and getattr(n.target, "overloadpacket", None) in PACKETS
    ]


class Family(torch.nn.Module):
    """Every rank and mode, sizes and scale factors, a channels-last input, a backward op."""

    def forward(self, x1, x2, x3, g):
        return (
            F.interpolate(x1, scale_factor=2.0, mode="nearest"),
            F.interpolate(x1, size=11, mode="nearest-exact"),
            F.interpolate(x2, scale_factor=1.5, mode="nearest"),
            F.interpolate(x2, size=(3, 17), mode="nearest-exact"),
            F.interpolate(x3, scale_factor=(2.0, 0.5, 1.7), mode="nearest"),
            F.interpolate(x3, size=(5, 4, 3), mode="nearest-exact"),
            aten.upsample_nearest2d_backward.default(g, [10, 14], [2, 4, 5, 7]),
            aten._upsample_nearest_exact2d_backward.default(g, [10, 14], [2, 4, 4, 9], None, None),
        )


def _family_inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(2, 3, 7, generator=gen),
        torch.randn(2, 4, 5, 7, generator=gen).contiguous(memory_format=torch.channels_last),
        torch.randn(1, 2, 4, 6, 3, generator=gen),
        torch.randn(2, 4, 10, 14, generator=gen),
    )


def test_run_decompositions_removes_nearest_ops_and_matches_eager():
    model, args = Family(), _family_inputs()
    ep = torch.export.export(model, args)
    assert _nearest_nodes(ep.graph_module), "export should keep the nearest ops before decomposing"
    decomposed = ep.run_decompositions(TABLE)
    assert _nearest_nodes(decomposed.graph_module) == []
    _check_family(decomposed.module()(*args), model(*args))
    other = _family_inputs(seed=1)  # the exported program is reusable on other values
    _check_family(decomposed.module()(*other), model(*other))


def test_run_decompositions_with_stock_tables_keeps_working():
    """The package's table composes with torch's default one (core ATen IR)."""
    model, args = Family(), _family_inputs()
    table = torch.export.default_decompositions()
    table.update(TABLE)
    decomposed = torch.export.export(model, args).run_decompositions(table)
    assert _nearest_nodes(decomposed.graph_module) == []
    _check_family(decomposed.module()(*args), model(*args))


class Up(torch.nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, x):
        return F.interpolate(x, **self.kwargs)


H = Dim("h", min=3, max=300)
W = Dim("w", min=3, max=300)
# Both sides of eager's 2d CPU kernel choice (oh + ow <= 128 for C <= 3), all in the declared range.
DYNAMIC_SIZES = [(5, 6), (3, 4), (20, 9), (40, 41), (100, 120), (299, 3)]


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(scale_factor=2.0, mode="nearest"),
        dict(scale_factor=1.5, mode="nearest-exact"),
        # a fixed output size: (5, 6) -> (10, 10) is x2 along h, which must not narrow the program
        dict(size=(10, 10), mode="nearest"),
        dict(size=(10, 10), mode="nearest-exact"),
    ],
    ids=["x2-nearest", "x1.5-exact", "size10-nearest", "size10-exact"],
)
def test_dynamic_export_run_decompositions_matches_eager_over_the_declared_range(kwargs):
    model = Up(**kwargs)
    ep = torch.export.export(model, (torch.randn(2, 3, 5, 6),), dynamic_shapes={"x": {2: H, 3: W}})
    decomposed = ep.run_decompositions(TABLE)
    assert _nearest_nodes(decomposed.graph_module) == []
    ranges = {str(r) for r in decomposed.range_constraints.values()}
    assert ranges == {"VR[3, 300]"}, "run_decompositions narrowed the declared ranges"
    module = decomposed.module()
    for h, w in DYNAMIC_SIZES:
        x = torch.randn(2, 3, h, w)
        _same(module(x), model(x))


def _aoti(ep, tmp_path):
    path = torch._inductor.aoti_compile_and_package(ep, package_path=os.fspath(tmp_path / "model.pt2"))
    return torch._inductor.aoti_load_package(path)


def test_aoti_static_matches_eager(tmp_path):
    model, args = Family(), _family_inputs()
    ep = torch.export.export(model, args)
    compiled = _aoti(ep, tmp_path)
    _check_family(compiled(*args), model(*args))
    other = _family_inputs(seed=2)
    _check_family(compiled(*other), model(*other))


class Dyn(torch.nn.Module):
    def forward(self, x):
        return (
            F.interpolate(x, scale_factor=2.0, mode="nearest"),
            F.interpolate(x, scale_factor=1.5, mode="nearest-exact"),
            # eager's two CPU kernels disagree here: only the channels-last one (oh + ow <= 128)
            # reads o >> 1 when osize == 2 * isize whatever the scale
            F.interpolate(x, scale_factor=2.0000001, mode="nearest"),
            # and here only at (3, 4), where osize == 2 * isize along h
            F.interpolate(x, scale_factor=2.3, mode="nearest"),
            # x2 along h at the example size (5, 6) only: no fast path may assume it
            F.interpolate(x, size=(10, 10), mode="nearest"),
            F.interpolate(x, size=(10, 12), mode="nearest-exact"),
        )


def test_aoti_dynamic_shapes_match_eager_over_the_declared_range(tmp_path):
    """AOTInductor cannot recompile: a program compiled for one kernel choice must not be run
    for sizes where eager picks the other one."""
    model = Dyn()
    ep = torch.export.export(model, (torch.randn(2, 3, 5, 6),), dynamic_shapes={"x": {2: H, 3: W}})
    compiled = _aoti(ep, tmp_path)
    for h, w in DYNAMIC_SIZES:
        x = torch.arange(2 * 3 * h * w, dtype=torch.float32).reshape(2, 3, h, w)
        for i, (actual, expected) in enumerate(zip(compiled(x), model(x), strict=True)):
            assert actual.shape == expected.shape
            assert torch.equal(actual, expected), f"output {i} at {(h, w)}: {(actual != expected).sum()} differ"


class Backward(torch.nn.Module):
    """Backward ops whose sizes come from two inputs: no ratio between them is known."""

    def forward(self, g, x):
        return (
            aten.upsample_nearest2d_backward.default(g, g.shape[2:], x.shape, None, None),
            aten._upsample_nearest_exact2d_backward.default(g, g.shape[2:], x.shape, None, None),
        )


def test_dynamic_export_of_backward_ops_matches_eager_for_any_ratio(tmp_path):
    """Window bounds hold for every size in the declared ranges, or the graph scatters."""
    model = Backward()
    example = (torch.randn(2, 3, 12, 12, dtype=torch.float64), torch.empty(2, 3, 5, 5))
    dims = {"g": {2: Dim("o", min=2, max=400), 3: Dim("o", min=2, max=400)},
            "x": {2: Dim("i", min=2, max=100), 3: Dim("i", min=2, max=100)}}
    ep = torch.export.export(model, example, dynamic_shapes=dims)
    decomposed = ep.run_decompositions(TABLE)
    assert _nearest_nodes(decomposed.graph_module) == []
    compiled = _aoti(ep, tmp_path)
    for o, i in [(12, 5), (7, 7), (300, 3), (5, 17), (2, 100), (400, 2)]:
        g, x = torch.randn(2, 3, o, o, dtype=torch.float64), torch.empty(2, 3, i, i)
        expected = model(g, x)
        for program in (decomposed.module(), compiled):
            for actual, e in zip(program(g, x), expected, strict=True):
                torch.testing.assert_close(actual, e, rtol=1e-12, atol=1e-12)
