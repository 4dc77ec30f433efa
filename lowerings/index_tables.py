"""Lowerings of ``decomps::index_table``, its argument's values in a buffer of their own, of
``decomps::index_by_maps``, a gather through such tables, and of ``decomps::index_put_by_maps``,
a store through them, and of ``decomps::gather_window_starts``, a gather through window starts
(``decomps.index_tables``).

Inductor inlines a pointwise index computation into each load that reads it; a realized copy is
computed once, in its own loop, and read back by the gather. The gather is Inductor's
``_unsafe_index`` lowering without its wrapping of negative indices (``wrap_neg=False``), which
the indices never need; the store is its ``index_put`` lowering without that wrap and without the
bounds check, as a scatter into a copy of ``self`` (no accumulation). Where this torch's helpers
have no ``wrap_neg``, they are ``_unsafe_index``'s and ``_unsafe_index_put``'s lowerings. The
gather through window starts reads each dim's start at ``i`` and ``i + 1`` and masks its load
where a window is empty: those elements read nothing.
"""

from __future__ import annotations

import functools
import inspect

import torch

from . import cpu_blocks


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


def index_put_by_maps(x, indices, values):
    from torch._inductor import ir, lowering
    from torch._inductor.virtualized import V

    if "wrap_neg" not in inspect.signature(lowering.index_output_size_and_inner_fn).parameters:
        return lowering._unsafe_index_put(x, indices, values)
    out = lowering.clone(x)
    out.realize()
    cpu_blocks.mark(out)  # written whole by the clone: a block's earlier contents never show
    indices, tensor_indices = lowering.check_and_broadcast_indices(indices, out.get_device())
    loaders = [None if i is None else i.make_loader() for i in indices]
    size = out.get_size()
    values_size, output_indexer = lowering.index_output_size_and_inner_fn(
        size,
        indices,
        tensor_indices,
        list(indices[tensor_indices[0]].get_size()),
        loaders,
        [size[d] for d in range(len(indices))],
        None,
        check=False,
        wrap_neg=False,
    )
    values = lowering.expand(lowering.to_dtype(values, out.get_dtype()), values_size)
    scatter = ir.Scatter(
        device=out.get_device(),
        dtype=out.get_dtype(),
        inner_fn=values.make_loader(),
        ranges=values_size,
        output_indexer=output_indexer,
        scatter_mode=None,
    )
    buffer = ir.ComputedBuffer(name=None, layout=ir.MutationLayoutSHOULDREMOVE(out), data=scatter)
    buffer.name = V.graph.register_buffer(buffer)
    V.graph.register_operation(buffer)
    return out


def gather_window_starts(x, dim, starts):
    from torch._inductor import ir, lowering
    from torch._inductor.virtualized import ops

    x_loader = x.make_loader()
    loaders = [(lo.make_loader(), lo.get_dtype()) for lo in starts]
    x_size = x.get_size()
    size = list(x_size)
    for t, lo in enumerate(starts):
        size[dim + t] = lo.get_size()[0] - 1
    unwrapped = {"wrap_neg": False} if "wrap_neg" in inspect.signature(lowering.index_impl_helper).parameters else {}
    zero = 0.0 if x.get_dtype().is_floating_point else 0

    def inner_fn(idx):
        index, inside = list(idx), []
        for t, (load, dtype) in enumerate(loaders):
            i = idx[dim + t]
            lo, hi = load([i]), load([i + 1])
            inside.append(ops.lt(lo, hi))
            start = ops.where(inside[-1], lo, ops.constant(0, dtype))
            index[dim + t] = ops.indirect_indexing(start, x_size[dim + t], check=False, **unwrapped)
        return ops.masked(functools.reduce(ops.and_, inside), lambda: x_loader(index), zero)

    return ir.Pointwise.create(device=x.get_device(), dtype=x.get_dtype(), inner_fn=inner_fn, ranges=size)


def lowerings() -> dict:
    """``{op: lowering}`` to put into Inductor's lowering table."""
    return {
        torch.ops.decomps.index_table.default: index_table,
        torch.ops.decomps.index_by_maps.default: index_by_maps,
        torch.ops.decomps.index_put_by_maps.default: index_put_by_maps,
        torch.ops.decomps.gather_window_starts.default: gather_window_starts,
    }
