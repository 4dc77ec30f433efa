"""Unmasked stores for the short vectors of C++ kernels that hold this package's nodes, and no
others.

Where a vectorized loop runs over a constant range shorter than the vector (the repeat op's
innermost ``k`` copies of one input element, ``lowerings.repeat``: ranges ``(..., W, k)``),
Inductor's C++ backend stores each vector with ``Vectorized::store(ptr, count)``, which AVX512
does with a masked store (``_mm512_mask_storeu_ps``). On the AMD Zen 5 machine of the CPU tables a
masked store costs far more than a plain one. Where the count is a constant 4 or 8 float32
lanes, the vector's low 128 or 256 bits are stored unmasked (``_mm_storeu_ps``,
``_mm256_storeu_ps``): the same bytes to the same addresses. x4 float32 (1,256,128,128) forward,
the kernel alone, 2 threads: 76.3 -> 57.5 ms, eager 66.6 (1 thread: 131.4 -> 96.2, eager 111.6;
docs/findings.md, finding 9).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import cpu_gathers
from ._undo import replace_attribute

# Lane counts with an unmasked store of their width, for one AVX512 float32 vector.
_NARROW_STORES = {4: "_mm_storeu_ps({ptr}, _mm512_castps512_ps128({value}));",
                  8: "_mm256_storeu_ps({ptr}, _mm512_castps512_ps256({value}));"}

_stock: dict[str, Callable] = {}


def missing_hooks() -> list[str]:
    """Inductor internals this change relies on that this torch lacks."""
    try:
        from torch._inductor.codegen import cpp
    except ImportError:
        return ["torch._inductor.codegen.cpp"]
    if not callable(getattr(cpp.CppVecKernel, "_get_store_line", None)):
        return ["CppVecKernel._get_store_line"]
    return []


def narrow_store(kernel, value, var: str, index, dtype: torch.dtype, stock_line: str) -> str | None:
    """The unmasked store that replaces ``stock_line``, Inductor's store of a short vector
    ``value`` to ``var[index]``, or None where this path does not apply."""
    from torch._inductor.codegen.cpp_utils import cexpr_index

    if dtype != torch.float32 or kernel.tiling_factor != cpu_gathers.LANES:
        return None
    if kernel.num_elems not in _NARROW_STORES:
        return None
    ptr = f"{var} + {cexpr_index(index)}"
    if stock_line != f"{value}.store({ptr}, {cexpr_index(kernel.num_elems)});":
        return None
    return _NARROW_STORES[int(kernel.num_elems)].format(ptr=ptr, value=value)


def get_store_line(self, value, var, index, dtype, accu_store=False):
    """``CppVecKernel._get_store_line``: in package kernels, a short vector's masked store as an
    unmasked store of its width, where ``narrow_store`` applies; else Inductor's line."""
    from torch._inductor.utils import IndentedBuffer

    code = _stock["get_store_line"](self, value, var, index, dtype, accu_store)
    if accu_store or not cpu_gathers.in_package_kernel():
        return code
    line = narrow_store(self, value, var, index, dtype, code.getvalue().strip())
    if line is None:
        return code
    narrow = IndentedBuffer()
    narrow.writeline(line)
    return narrow


def install() -> Callable[[], None]:
    """Installed with the package's gathers' hooks; a store changes only in a kernel they mark
    (``cpu_gathers.in_package_kernel``: a package node, AVX512, whose masked stores this
    replaces). Returns the undo."""
    if missing_hooks() or cpu_gathers.missing_hooks():
        return lambda: None
    from torch._inductor.codegen import cpp

    _stock["get_store_line"] = cpp.CppVecKernel._get_store_line
    return replace_attribute(cpp.CppVecKernel, "_get_store_line", get_store_line)
