"""Lowering of ``decomps::index_table``: its argument's values in a buffer of their own.

Inductor inlines a pointwise index computation into each load that reads it; a realized copy is
computed once, in its own loop, and read back by the gather (``decomps.index_tables``).
"""

from __future__ import annotations

import torch


def index_table(index):
    from torch._inductor.lowering import clone

    table = clone(index)
    table.realize()
    return table


def lowerings() -> dict:
    """``{op: lowering}`` to put into Inductor's lowering table."""
    return {torch.ops.decomps.index_table.default: index_table}
