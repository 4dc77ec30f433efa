"""Exact, fused nearest / nearest-exact upsampling for ``torch.compile``.

``import decomps`` installs the decompositions: every nearest upsample that torch.compile sees
(forward and backward, 1d/2d/3d) then lowers from this package's aten decompositions, bit-exact
with eager. ``uninstall()`` restores stock behaviour, ``disabled()`` scopes it, and
``decomposition_table()`` hands the table to ``make_fx`` or ``torch.export``'s
``run_decompositions``.
"""

from __future__ import annotations

from torch._ops import OpOverload

from . import backward, forward  # noqa: F401  (fill the registry)
from ._install import disabled, install, is_installed, uninstall
from ._registry import DECOMPOSITIONS

__all__ = ["decomposition_table", "disabled", "install", "is_installed", "uninstall"]
__version__ = "0.1.0"


def decomposition_table() -> dict[OpOverload, object]:
    """``{OpOverload: decomposition}`` for every forward and backward nearest overload."""
    return dict(DECOMPOSITIONS)


install()
