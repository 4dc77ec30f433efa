"""The only place this project touches Inductor internals.

``install(table)`` puts the package's decompositions into Inductor's decomposition table (which
AOTAutograd applies below autograd) and moves Inductor's own nearest-upsample lowerings aside, so
every nearest upsample reaching Inductor is lowered from our aten graph. It returns a callable
that restores Inductor's stock state exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

aten = torch.ops.aten

# Inductor lowers these itself; with our decompositions in the table it never should.
STOCK_LOWERED = (
    aten.upsample_nearest1d.default,
    aten._upsample_nearest_exact1d.default,
    aten.upsample_nearest2d.default,
    aten._upsample_nearest_exact2d.default,
    aten.upsample_nearest3d.default,
    aten._upsample_nearest_exact3d.default,
    aten.upsample_nearest2d_backward.default,
)


def missing_hooks() -> list[str]:
    """Inductor internals ``install`` relies on that this torch lacks."""
    missing = []
    try:
        from torch._inductor import decomposition, lowering
    except ImportError:
        return ["torch._inductor"]
    if not isinstance(getattr(decomposition, "decompositions", None), dict):
        missing.append("torch._inductor.decomposition.decompositions")
    if not hasattr(getattr(decomposition, "fast_random_decomps", None), "cache_clear"):
        missing.append("torch._inductor.decomposition.fast_random_decomps")
    if not isinstance(getattr(lowering, "lowerings", None), dict):
        missing.append("torch._inductor.lowering.lowerings")
    return missing


def _swap(table: dict, entries: dict) -> Callable[[], None]:
    """Sets ``table[k] = v`` (``v is None`` deletes) and returns the exact undo."""
    absent = object()
    saved = {k: table.get(k, absent) for k in entries}
    for key, value in entries.items():
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value

    def undo() -> None:
        for key, value in saved.items():
            if value is absent:
                table.pop(key, None)
            else:
                table[key] = value

    return undo


def install(decompositions: dict) -> Callable[[], None]:
    from torch._inductor import decomposition, lowering

    undo_decomps = _swap(decomposition.decompositions, decompositions)
    undo_lowerings = _swap(lowering.lowerings, dict.fromkeys(STOCK_LOWERED))
    # select_decomp_table() serves a cached copy of the table.
    decomposition.fast_random_decomps.cache_clear()

    def uninstall() -> None:
        undo_lowerings()
        undo_decomps()
        decomposition.fast_random_decomps.cache_clear()

    return uninstall
