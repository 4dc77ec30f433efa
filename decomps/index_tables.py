"""Index tables: a gather's index map computed once per call, in a buffer of its own.

Inductor inlines the computation of an index tensor into every load that reads through it. Along
the innermost dim of a contiguous output that is the whole map, eager's float arithmetic, at
every output element, in vectors; and eager's nearest-exact map on CPU is float64
arithmetic (docs/semantics.md) wherever it is read. ``decomps::index_table(index)`` is a copy of
its argument that Inductor stores in a buffer (``lowerings.index_tables``): the map is computed
once per call (one element per output position along its dim) and the gather loads it.
``kernel_choice.index_table`` says where. Other tracers run the copy.

A gather through a table is ``decomps::index_by_maps``, ``aten._unsafe_index`` for indices
that are never negative: Inductor bounds no value it loads, so through ``_unsafe_index`` it
would test each loaded index for Python's negative indexing, in int64 (on CPU a convert, an
add, a compare and a blend of two int64 vectors per vector of outputs). Its adjoint,
``decomps::index_put_by_maps``, is ``aten.index_put`` without accumulation through such indices
where no two of them address the same element (a downsample's backward stores each gradient
element into its own input): Inductor lowers ``index_put`` with that wrap and a bounds check at
every stored vector, and in deterministic mode as an extern call (the store is deterministic
without it: no two stores collide).

``decomps::gather_window_starts(self, dim, starts)`` is a window gather of one tap (a downsample's
backward, each window holding one element of ``self`` at most): along dims ``dim``, ``dim + 1``,
.. each element reads ``self`` at its window start ``starts[t][i]`` where its window is not empty
(``starts[t][i] < starts[t][i + 1]``), else zero. Each dim's starts are one read of their
pointwise, which Inductor computes in the gather (``lowerings.index_tables``): no table, no kernel
or allocation of its own. Built from the windows' index tensors instead, the start tensor feeds
both ends of each window, and Inductor realizes a reused pointwise of over 30 ops (nearest-exact's
starts) in a kernel of its own.

Defined with ``torch.library.Library`` like ``aten_kernels``: it runs below autograd only, on
integer tensors.
"""

from __future__ import annotations

import torch
from torch import Tensor

_LIBRARY = torch.library.Library("decomps", "FRAGMENT")
_LIBRARY.define("index_table(Tensor index) -> Tensor")
_LIBRARY.define("index_by_maps(Tensor self, Tensor?[] indices) -> Tensor")
_LIBRARY.define("index_put_by_maps(Tensor self, Tensor?[] indices, Tensor values) -> Tensor")
_LIBRARY.define("gather_window_starts(Tensor self, int dim, Tensor[] starts) -> Tensor")


def _index_table(index: Tensor) -> Tensor:
    return index.clone()


def _index_table_fake(index: Tensor) -> Tensor:
    return torch.empty_like(index)


def _index_by_maps(self: Tensor, indices) -> Tensor:
    return torch.ops.aten._unsafe_index(self, indices)


def _index_put_by_maps(self: Tensor, indices, values: Tensor) -> Tensor:
    return torch.ops.aten.index_put(self, indices, values)


def _gather_window_starts(self: Tensor, dim: int, starts) -> Tensor:
    for t, lo in enumerate(starts):
        inside = lo[:-1] < lo[1:]
        self = self.index_select(dim + t, torch.where(inside, lo[:-1], 0))
        self = torch.where(inside.view([-1] + [1] * (self.dim() - dim - t - 1)), self, 0)
    return self


_LIBRARY.impl("index_table", _index_table, "CompositeExplicitAutograd")
torch.library.register_fake("decomps::index_table", _index_table_fake, lib=_LIBRARY)
_LIBRARY.impl("index_by_maps", _index_by_maps, "CompositeExplicitAutograd")
# aten._unsafe_index's meta kernel gives the fake output.
torch.library.register_fake("decomps::index_by_maps", _index_by_maps, lib=_LIBRARY)
_LIBRARY.impl("index_put_by_maps", _index_put_by_maps, "CompositeExplicitAutograd")
torch.library.register_fake("decomps::index_put_by_maps", _index_put_by_maps, lib=_LIBRARY)
_LIBRARY.impl("gather_window_starts", _gather_window_starts, "CompositeExplicitAutograd")
torch.library.register_fake("decomps::gather_window_starts", _gather_window_starts, lib=_LIBRARY)

index_table = torch.ops.decomps.index_table.default
# ``aten._unsafe_index(self, indices)`` where every index is a map (no negative values) or a
# table of one: Inductor reads the indices as they are (``lowerings.index_tables``), without the
# test for Python's negative indexing that it adds where it cannot bound a loaded index.
index_by_maps = torch.ops.decomps.index_by_maps.default
# ``aten.index_put(self, indices, values)`` (no accumulation) where every index is a map or a
# table of one and no two index tuples are equal: Inductor stores through them as they are.
index_put_by_maps = torch.ops.decomps.index_put_by_maps.default
# A window gather of one tap from each dim's window starts: zero where a window is empty.
gather_window_starts = torch.ops.decomps.gather_window_starts.default
