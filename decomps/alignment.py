"""Alignment of the innermost sizes of the GPU kernels' tensors, as a guard Inductor can use.

With dynamic shapes Inductor's kernels take their sizes as arguments, and Triton vectorizes a
load or store only where it knows the sizes in its index are multiples of 16. A guard
``size % 16 == 0`` on the innermost (stride-1) size of each tensor an upsample reads and writes
gives that fact to every size argument built from it (``lowerings.divisibility`` carries it
through products and sums).

The guard is one condition per op and is taken only where the example sizes meet it
(``size_conditions.holds_where_taken``): a call site compiles at most two graphs for it, one
for aligned sizes and one, without the guard, that serves every size. The CPU backend does not
use the fact, so CPU graphs take no guard (``UNGUARDED_DEVICE_TYPES``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .size_conditions import holds_where_taken

ALIGNMENT = 16
# The C++ backend vectorizes without divisibility facts: no guard there.
UNGUARDED_DEVICE_TYPES = frozenset({"cpu"})


def _innermost(shape: Sequence, memory_format: torch.memory_format):
    """The size of the stride-1 dim of a tensor of ``shape`` in ``memory_format``."""
    if memory_format in (torch.channels_last, torch.channels_last_3d):
        return shape[1]
    return shape[-1]


def note_alignment(device: torch.device, shapes_and_formats) -> bool:
    """Guards that the innermost size of every ``(shape, memory_format)`` is a multiple of
    ``ALIGNMENT`` where the example sizes say so; returns whether it holds for this graph."""
    if device.type in UNGUARDED_DEVICE_TYPES:
        return False
    conditions = []
    for shape, memory_format in shapes_and_formats:
        size = _innermost(shape, memory_format)
        if isinstance(size, int):
            if size % ALIGNMENT:
                return False
        else:
            conditions.append(size % ALIGNMENT == 0)
    if not conditions:
        return True
    condition = conditions[0]
    for other in conditions[1:]:
        condition = condition & other
    return holds_where_taken(condition)
