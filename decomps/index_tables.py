"""Index tables: a gather's index map computed once per call, in a buffer of its own.

Inductor inlines the computation of an index tensor into every load that reads through it. Along
the innermost dim of a contiguous output that is the whole map, eager's float arithmetic, at
every output element, in vectors; and eager's nearest-exact map on CPU is float64
arithmetic (docs/semantics.md) wherever it is read. ``decomps::index_table(index)`` is a copy of
its argument that Inductor stores in a buffer (``lowerings.index_tables``): the map is computed
once per call (one element per output position along its dim) and the gather loads it.
``kernel_choice.index_table`` says where. Other tracers run the copy.

Defined with ``torch.library.Library`` like ``aten_kernels``: it runs below autograd only, on
integer tensors.
"""

from __future__ import annotations

import torch
from torch import Tensor

_LIBRARY = torch.library.Library("decomps", "FRAGMENT")
_LIBRARY.define("index_table(Tensor index) -> Tensor")


def _index_table(index: Tensor) -> Tensor:
    return index.clone()


def _index_table_fake(index: Tensor) -> Tensor:
    return torch.empty_like(index)


_LIBRARY.impl("index_table", _index_table, "CompositeExplicitAutograd")
torch.library.register_fake("decomps::index_table", _index_table_fake, lib=_LIBRARY)

index_table = torch.ops.decomps.index_table.default
