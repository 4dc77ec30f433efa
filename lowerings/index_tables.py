"""Lowerings of ``decomps::index_table``, its argument's values in a buffer of their own, and
of ``decomps::index_by_maps``, a gather through such tables (``decomps.index_tables``).

Inductor inlines a pointwise index computation into each load that reads it; a realized copy is
computed once, in its own loop, and read back by the gather. The gather is Inductor's
``_unsafe_index`` lowering without its wrapping of negative indices (``wrap_neg=False``), which
the indices never need; where this torch's ``index_impl_helper`` has no ``wrap_neg``, it is
``_unsafe_index``'s.
"""

from __future__ import annotations

import inspect

import torch


def index_table(index):
    from torch._inductor.lowering import clone

    table = clone(index)
    table.realize()
    return table


def index_by_maps(x, indices):
    from torch._inductor import ir, lowering

    helper = lowering.index_impl_helper
    if "wrap_neg" not in inspect.signature(helper).parameters:
        return lowering.index_impl(x, indices, check=False)
    output_size, inner_fn, _ = helper(x, indices, check=False, wrap_neg=False)
    return ir.Pointwise.create(device=x.get_device(), dtype=x.get_dtype(), inner_fn=inner_fn, ranges=output_size)


def lowerings() -> dict:
    """``{op: lowering}`` to put into Inductor's lowering table."""
    return {
        torch.ops.decomps.index_table.default: index_table,
        torch.ops.decomps.index_by_maps.default: index_by_maps,
    }
