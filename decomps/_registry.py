"""The package's own decomposition table, filled by decorators in forward.py and backward.py.

Kept apart from torch's global table: nothing here is visible to torch until install() runs.
"""

from __future__ import annotations

from collections.abc import Callable

from torch._decomp import _convert_out_params
from torch._ops import OpOverload

DECOMPOSITIONS: dict[OpOverload, Callable] = {}


def register(*ops: OpOverload) -> Callable[[Callable], Callable]:
    def decorator(fn: Callable) -> Callable:
        # As torch's register_decomposition: `out=` takes the schema's name (`grad_input=`).
        converted = _convert_out_params(fn)
        for op in ops:
            assert op not in DECOMPOSITIONS, f"{op} registered twice"
            DECOMPOSITIONS[op] = converted
        return fn

    return decorator
