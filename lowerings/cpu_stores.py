"""Unmasked stores for the short vectors of C++ kernels that hold this package's nodes, and no
others.

Where a vectorized loop runs over a constant range shorter than the vector (the repeat op's
innermost ``k`` copies of one input element, ``lowerings.repeat``: ranges ``(..., W, k)``),
Inductor's C++ backend stores each vector with ``Vectorized::store(ptr, count)``: with AVX512 a
masked store (``_mm512_mask_storeu_ps``), with AVX2 a copy through a buffer (``memcpy``). Both
cost far more than a plain store of the vector's low lanes: the AVX512 masked store on the AMD
Zen 5 machine of the CPU tables, the AVX2 copy on the Zen 3 one. Where the count is a constant 2,
4 or 8 float32 lanes (2 or 4 with AVX2's 8 lanes), the vector's low 64, 128 or 256 bits are
stored unmasked (``_mm_storel_epi64``, ``_mm_storeu_ps``, ``_mm256_storeu_ps``): the same bytes to
the same addresses. x4 float32 (1,256,128,128) forward with AVX512, the kernel alone, 2 threads:
76.3 -> 57.5 ms, eager 66.6 (1 thread: 131.4 -> 96.2, eager 111.6); x2 float32 (16,64,16000)
with AVX2, 1 thread, output pages in: 97.0-125.0 -> 26.2-34.8 ms, eager 37.4-46.7
(docs/findings.md, finding 9).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import cpu_gathers
from ._undo import replace_attribute

# Per float32 vector's lanes (AVX512's 16, AVX2's 8), the lane counts with an unmasked store of
# their width. ``_mm_storel_epi64`` stores through an unaligned, may-alias 64-bit type.
_NARROW_STORES = {
    cpu_gathers.LANES: {
        2: "_mm_storel_epi64(reinterpret_cast<__m128i*>({ptr}), _mm_castps_si128(_mm512_castps512_ps128({value})));",
        4: "_mm_storeu_ps({ptr}, _mm512_castps512_ps128({value}));",
        8: "_mm256_storeu_ps({ptr}, _mm512_castps512_ps256({value}));",
    },
    cpu_gathers.AVX2_LANES: {
        2: "_mm_storel_epi64(reinterpret_cast<__m128i*>({ptr}), _mm_castps_si128(_mm256_castps256_ps128({value})));",
        4: "_mm_storeu_ps({ptr}, _mm256_castps256_ps128({value}));",
    },
}

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

    stores = _NARROW_STORES.get(kernel.tiling_factor, {})
    if dtype != torch.float32 or kernel.num_elems not in stores:
        return None
    ptr = f"{var} + {cexpr_index(index)}"
    if stock_line != f"{value}.store({ptr}, {cexpr_index(kernel.num_elems)});":
        return None
    return stores[int(kernel.num_elems)].format(ptr=ptr, value=value)


def get_store_line(self, value, var, index, dtype, accu_store=False):
    """``CppVecKernel._get_store_line``: in package kernels, a short vector's masked store as an
    unmasked store of its width, where ``narrow_store`` applies; else Inductor's line."""
    from torch._inductor.utils import IndentedBuffer

    code = _stock["get_store_line"](self, value, var, index, dtype, accu_store)
    # a package kernel whose float32 vectors are its path's (AVX512's 16 lanes or AVX2's 8)
    if accu_store or cpu_gathers.package_kernel_bits() != self.tiling_factor * 32:
        return code
    line = narrow_store(self, value, var, index, dtype, code.getvalue().strip())
    if line is None:
        return code
    narrow = IndentedBuffer()
    narrow.writeline(line)
    return narrow


def install() -> Callable[[], None]:
    """Installed with the package's gathers' hooks; a store changes only in a kernel they mark
    (``cpu_gathers.package_kernel_bits``: a package node, AVX512 or AVX2 vectors). Returns the
    undo."""
    if missing_hooks() or cpu_gathers.missing_hooks():
        return lambda: None
    from torch._inductor.codegen import cpp

    _stock["get_store_line"] = cpp.CppVecKernel._get_store_line
    return replace_attribute(cpp.CppVecKernel, "_get_store_line", get_store_line)
