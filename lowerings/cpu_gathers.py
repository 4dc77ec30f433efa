"""Vector loads for the gathers, and vector stores for the plain stores, of C++ kernels that hold
this package's nodes, and no others.

Inductor's C++ backend loads a gather (an index that varies along the vectorized dim other than
with stride 0 or 1) one lane at a time: it stores the index vector to an array, loads each
element through it into a second array and reloads that as a vector. A nearest map moves
slowly: for a scale ``s``, the 16 outputs of one vector read from a span of ``15 * s + 1``
inputs, so for ``s < 2`` (every upsampling, downsampling by less than 2) two vectors of the
input hold all of them, and one two-source permute (``vpermt2ps``) picks them. For such a load
the kernel now takes, at run time, the index vector's first and last lanes; where they are less
than 32 apart and every lane lies between them (one unsigned compare of the offsets), it loads
the span from the first lane's element (two masked loads: only addresses between two that the
gather reads) and permutes; where the span is wider (downsampling by 2 to about 4.4), it tests
each half vector the same way and permutes each half from its own span (four masked loads, two
permutes and a blend); elsewhere it loads lane by lane as before. The lanes' minimum and
maximum by reductions cost more than the permute saves. (1,3,500,400)->(256,256) float32, the
kernel, 1 thread: 131 -> 49-52 us, eager's call 128 (docs/findings.md, finding 3).

A load takes this path where the kernel holds a package node (``package_kernels``: a buffer
traced from a nearest-upsample op), the backend's vectors are AVX512's 16 float32 lanes, the
loaded dtype is float32 and the vector is a whole one, no mask, and the index is one vectorized
indirect variable plus a part that does not change along the vectorized dim. A store of that
form, without accumulation (a downsample's backward storing each gradient element into its own
input), takes the adjoint path (``_store_lines``): where the lanes rise within the span, two
expands and two masked stores. Everything else is Inductor's code, unchanged.

With AVX2's 8 float32 lanes (``_avx2_gather_line``), a float32 gather whose int32 index has
every lane within 8 (upsampling) or 16 (downsampling by up to about 2.1) elements of its first
lane's is one or two plain loads from the first lane's element, a one-source permute
(``vpermps``) each and a blend; the loads may read past the lanes' elements, so they are taken
only where the 8 or 16 elements lie within the input's storage (its layout's length, ``_extent``),
which leaves only a tensor's last few vectors lane by lane. Elsewhere its lanes are loaded into one
vector directly (``_mm256_setr_ps``) rather than through an array that is then reloaded. And an
integer vector load that fills its vectors drops Inductor's element count (``vec_load_line``):
AVX2's ``Vectorized<int32_t>::loadu(ptr, count)`` copies through ``memcpy`` whatever the count, a
call in the loop where a table-driven gather loads its index. Stores keep Inductor's code there.
(1,3,500,400)->(256,256) float32 nearest, symbolic size, the kernels alone, AMD EPYC (Zen 3),
1 thread, interleaved: 164-168 us -> 135-145 with whole index loads -> 114-127 with the permutes
of two masked loads after an unsigned range test -> 1.30x faster again with plain loads and one
``vptest`` per range; eager's call 166-184 (docs/findings.md, finding 3).

The hooks are installed wherever this torch has them; the vector width is asked when a C++
kernel is generated, after Inductor has picked its ISA itself. Picking it builds and loads a
probe program per candidate ISA, 6.7 s of ``import decomps`` with a fresh Inductor cache on the
CPU machine, which a process that compiles no C++ code should not pay.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

import sympy
import torch

from . import package_kernels
from ._undo import replace_attribute

# The vector width of the whole-vector path (AVX512 intrinsics), and its float32 lanes.
VECTOR_BITS = 512
LANES = 16
# AVX2's width and float32 lanes (``_avx2_gather_line``, ``vec_load_line``).
AVX2_BITS = 256
AVX2_LANES = 8

# The vector width of the path the C++ kernel being generated takes: 0 where it holds no package
# node or the backend's vectors are neither of the above.
_PACKAGE_KERNEL = contextvars.ContextVar("decomps_cpp_package_kernel", default=0)


def missing_hooks() -> list[str]:
    """Inductor internals this path relies on that this torch lacks."""
    try:
        from torch._inductor.codegen import cpp
    except ImportError:
        return ["torch._inductor.codegen.cpp"]
    missing = []
    for owner, name in (
        (cpp.CppVecKernel, "_load_or_store_non_contiguous"),
        (cpp.CppKernelProxy, "codegen_nodes"),
    ):
        if not callable(getattr(owner, name, None)):
            missing.append(f"{owner.__name__}.{name}")
    return missing


def available() -> bool:
    """Whether this torch and machine take the path: its hooks exist and the C++ backend's vectors
    are ``VECTOR_BITS`` wide (asking picks Inductor's ISA)."""
    return not missing_hooks() and _vectors_fit()


def _vectors_fit() -> bool:
    """Whether the C++ backend's vectors are ``VECTOR_BITS`` wide (asking picks Inductor's ISA)."""
    return _path_bits() == VECTOR_BITS


def _path_bits() -> int:
    """``VECTOR_BITS`` or ``AVX2_BITS`` where the C++ backend's vectors are that wide and its ISA
    is AVX512 or AVX2 (other ISAs of those widths, VSX and SVE, have none of these intrinsics),
    else 0. Asking picks Inductor's ISA."""
    from torch._inductor import cpu_vec_isa

    from . import cpu_vectors

    bits = cpu_vectors.vector_bits()
    if not isinstance(cpu_vec_isa.pick_vec_isa(), (cpu_vec_isa.VecAVX512, cpu_vec_isa.VecAVX2)):
        return 0
    if bits >= VECTOR_BITS:
        return VECTOR_BITS
    return AVX2_BITS if bits == AVX2_BITS else 0


def avx2_available() -> bool:
    """Whether this torch and machine take the AVX2 path (``_avx2_gather_line``): its hooks exist
    and the C++ backend's vectors are ``AVX2_BITS`` wide (asking picks Inductor's ISA)."""
    return not missing_hooks() and _path_bits() == AVX2_BITS


def vector_dtypes() -> tuple[torch.dtype, ...]:
    """The dtypes whose gathers load whole vectors here, with AVX512's or AVX2's vectors (asking
    picks Inductor's ISA)."""
    return (torch.float32,) if not missing_hooks() and _path_bits() else ()


def package_kernel_bits() -> int:
    """The path's vector width (``VECTOR_BITS`` or ``AVX2_BITS``) where the C++ kernel being
    generated holds a package node and the backend's vectors are one of the paths', else 0 (set
    by ``codegen_nodes`` while installed)."""
    return _PACKAGE_KERNEL.get()


def holds_package_node(nodes) -> bool:
    """Whether any of a C++ kernel's scheduler nodes was traced from a nearest-upsample op."""
    return bool(package_kernels.package_buffers(nodes))


def _index_parts(kernel, index: sympy.Expr):
    """``(indirect variable, rest)`` where ``index`` is one vectorized indirect variable plus a
    part that is the same in every lane, else None."""
    from torch.utils._sympy.symbol import SymT, symbol_is_type

    indirect = [s for s in index.free_symbols if symbol_is_type(s, SymT.TMP)]
    vectors = [s for s in indirect if kernel.cse.varname_map[s.name].is_vec]
    if len(vectors) != 1:
        return None
    (symbol,) = vectors
    rest = sympy.expand(index - symbol)
    lane_var = kernel.itervars[kernel.tiling_idx]
    if symbol in rest.free_symbols or lane_var in rest.free_symbols:
        return None
    return kernel.cse.varname_map[symbol.name], rest


# Per index type: the C++ of the permute's range test and offsets (``first``, ``last``: the first
# and last lane; every lane's offset from ``first`` within ``last - first``, unsigned), and of
# the index's lanes as an array for the lane-by-lane load.
_INDEX_CODE = {
    torch.int32: (
        """const __m512i lanes = {index};
    const int64_t first = _mm_cvtsi128_si32(_mm512_castsi512_si128(lanes));
    const int64_t last = _mm_extract_epi32(_mm512_extracti32x4_epi32(lanes, 3), 3);
    const __m512i offsets = _mm512_sub_epi32(lanes, _mm512_set1_epi32(static_cast<int32_t>(first)));
    const bool in_span = last >= first && last - first < 32
        && _mm512_cmple_epu32_mask(offsets, _mm512_set1_epi32(static_cast<int32_t>(last - first))) == 0xFFFF;""",
        "int32_t",
    ),
    torch.int64: (
        """const __m512i lo = {index}[0];
    const __m512i hi = {index}[1];
    const int64_t first = _mm_cvtsi128_si64(_mm512_castsi512_si128(lo));
    const int64_t last = _mm_extract_epi64(_mm512_extracti64x2_epi64(hi, 3), 1);
    const __m512i lo_offsets = _mm512_sub_epi64(lo, _mm512_set1_epi64(first));
    const __m512i hi_offsets = _mm512_sub_epi64(hi, _mm512_set1_epi64(first));
    const __m512i width = _mm512_set1_epi64(last - first);
    const bool in_span = last >= first && last - first < 32
        && (_mm512_cmple_epu64_mask(lo_offsets, width) & _mm512_cmple_epu64_mask(hi_offsets, width)) == 0xFF;
    const __m512i offsets = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm512_cvtepi64_epi32(lo_offsets)), _mm512_cvtepi64_epi32(hi_offsets), 1);""",
        "int64_t",
    ),
}


# Per index type: the C++ of the halves' range test, where the whole vector's span is 32 or more
# (a downsample by 2 to about 4.4): lanes 0-7 within 32 from lane 0 and lanes 8-15 within 32 from
# lane 8 (``mid_first``, ``mid_last``: lanes 8 and 7), and ``half_offsets``, each lane's offset
# from its half's first lane.
_HALVES_CODE = {
    torch.int32: """const int64_t mid_first = _mm_cvtsi128_si32(_mm512_extracti32x4_epi32(lanes, 2));
    const int64_t mid_last = _mm_extract_epi32(_mm512_extracti32x4_epi32(lanes, 1), 3);
    const __m512i half_offsets = _mm512_mask_sub_epi32(
        offsets, 0xFF00, lanes, _mm512_set1_epi32(static_cast<int32_t>(mid_first)));
    const __m512i half_widths = _mm512_mask_blend_epi32(0xFF00,
        _mm512_set1_epi32(static_cast<int32_t>(mid_last - first)),
        _mm512_set1_epi32(static_cast<int32_t>(last - mid_first)));
    const bool in_halves = mid_last >= first && mid_last - first < 32 && last >= mid_first && last - mid_first < 32
        && _mm512_cmple_epu32_mask(half_offsets, half_widths) == 0xFFFF;""",
    torch.int64: """const int64_t mid_first = _mm_cvtsi128_si64(_mm512_castsi512_si128(hi));
    const int64_t mid_last = _mm_extract_epi64(_mm512_extracti64x2_epi64(lo, 3), 1);
    const __m512i mid_offsets = _mm512_sub_epi64(hi, _mm512_set1_epi64(mid_first));
    const bool in_halves = mid_last >= first && mid_last - first < 32 && last >= mid_first && last - mid_first < 32
        && _mm512_cmple_epu64_mask(lo_offsets, _mm512_set1_epi64(mid_last - first)) == 0xFF
        && _mm512_cmple_epu64_mask(mid_offsets, _mm512_set1_epi64(last - mid_first)) == 0xFF;
    const __m512i half_offsets = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm512_cvtepi64_epi32(lo_offsets)), _mm512_cvtepi64_epi32(mid_offsets), 1);""",
}


def _whole_vector_index(kernel, index: sympy.Expr, dtype: torch.dtype, lanes: int = LANES):
    """``(indirect variable, rest)`` of a whole float32 vector's index of ``lanes`` lanes
    (``_index_parts``) whose indirect variable has a type of ``_INDEX_CODE``, else None."""
    if dtype != torch.float32 or kernel.tiling_factor != lanes or kernel.num_elems != lanes:
        return None
    parts = _index_parts(kernel, index)
    if parts is None or parts[0].dtype not in _INDEX_CODE:
        return None
    return parts


def _gather_line(kernel, var: str, index: sympy.Expr, dtype: torch.dtype) -> str | None:
    """The C++ expression that loads ``var[index]`` as one vector, or None where this path
    does not apply."""
    from torch._inductor.codegen.cpp_utils import cexpr_index

    parts = _whole_vector_index(kernel, index, dtype)
    if parts is None or kernel._load_mask is not None:
        return None
    indirect, rest = parts
    span_test, index_type = _INDEX_CODE[indirect.dtype]
    # The masked loads read [first, last] only, addresses between two that the gather reads.
    return f"""[&]() -> at::vec::Vectorized<float>
{{
    const float* base = {var} + {cexpr_index(rest)};
    {span_test.format(index=indirect)}
    if (in_span)
    {{
        const uint32_t span = static_cast<uint32_t>((uint64_t{{2}} << (last - first)) - 1);
        const __m512 a = _mm512_maskz_loadu_ps(static_cast<__mmask16>(span), base + first);
        const __m512 b = _mm512_maskz_loadu_ps(static_cast<__mmask16>(span >> {LANES}), base + first + {LANES});
        return _mm512_permutex2var_ps(a, offsets, b);
    }}
    {_HALVES_CODE[indirect.dtype]}
    if (in_halves)
    {{
        const uint32_t low_span = static_cast<uint32_t>((uint64_t{{2}} << (mid_last - first)) - 1);
        const uint32_t high_span = static_cast<uint32_t>((uint64_t{{2}} << (last - mid_first)) - 1);
        const __m512 low = _mm512_permutex2var_ps(
            _mm512_maskz_loadu_ps(static_cast<__mmask16>(low_span), base + first), half_offsets,
            _mm512_maskz_loadu_ps(static_cast<__mmask16>(low_span >> {LANES}), base + first + {LANES}));
        const __m512 high = _mm512_permutex2var_ps(
            _mm512_maskz_loadu_ps(static_cast<__mmask16>(high_span), base + mid_first), half_offsets,
            _mm512_maskz_loadu_ps(static_cast<__mmask16>(high_span >> {LANES}), base + mid_first + {LANES}));
        return _mm512_mask_blend_ps(0xFF00, low, high);
    }}
    __at_align__ {index_type} index[{LANES}];
    {indirect}.store(index);
    __at_align__ float values[{LANES}];
    for (int lane = 0; lane < {LANES}; lane++)
    {{
        values[lane] = base[index[lane]];
    }}
    return at::vec::Vectorized<float>::loadu(values);
}}
()"""


def _extent(kernel, var: str) -> str | None:
    """The C expression of how many elements from ``var``'s pointer its buffer holds (its layout's
    storage length), or None where ``var`` is not one input buffer of fixed layout."""
    from torch._inductor import ir
    from torch._inductor.codegen.cpp_utils import cexpr_index
    from torch._inductor.virtualized import V

    names = [name for name, arg in kernel.args.input_buffers.items() if arg == var]
    buffer = V.graph.try_get_buffer(names[0]) if len(names) == 1 else None
    layout = buffer.get_layout() if buffer is not None else None
    if not isinstance(layout, ir.FixedLayout):
        return None
    # compute_required_storage_length without its test for no elements (no loads run then)
    length = 1 + layout.offset + sum((size - 1) * stride for size, stride in zip(layout.size, layout.stride))
    return cexpr_index(kernel.rename_indexing(sympy.sympify(length)))


def _avx2_gather_line(kernel, var: str, index: sympy.Expr, dtype: torch.dtype) -> str | None:
    """With AVX2's vectors, the C++ expression that loads ``var[index]`` as one float32 vector of
    ``AVX2_LANES``, or None where this path does not apply (Inductor's lane-by-lane load).

    Where every lane of the int32 index lies within 8 (every upsample), or 16 (downsampling by up
    to about 2.1), elements from the first lane's and those elements lie within ``var``'s buffer,
    one or two unmasked loads read them and each lane takes its element by a permute (and a
    blend); else, and for int64 indices, the lanes' elements are loaded into one vector directly.
    The range tests are one ``vptest`` each: no lane's offset from the first has a bit above
    the span's."""
    from torch._inductor.codegen.cpp_utils import cexpr_index

    parts = _whole_vector_index(kernel, index, dtype, AVX2_LANES)
    if parts is None or kernel._load_mask is not None:
        return None
    indirect, rest = parts
    index_type = _INDEX_CODE[indirect.dtype][1]
    lanes = ", ".join(f"base[index[{lane}]]" for lane in range(AVX2_LANES))
    by_lanes = f"""__at_align__ {index_type} index[{AVX2_LANES}];
    {indirect}.store(index);
    return _mm256_setr_ps({lanes});"""
    extent = _extent(kernel, var) if indirect.dtype == torch.int32 else None
    if extent is None:
        return f"""[&]() -> at::vec::Vectorized<float>
{{
    const float* base = {var} + {cexpr_index(rest)};
    {by_lanes}
}}
()"""
    return f"""[&]() -> at::vec::Vectorized<float>
{{
    const int64_t start = {cexpr_index(rest)};
    const float* base = {var} + start;
    const __m256i lanes = {indirect};
    const int32_t first = _mm256_cvtsi256_si32(lanes);
    const __m256i offsets = _mm256_sub_epi32(lanes, _mm256_set1_epi32(first));
    if (_mm256_testz_si256(offsets, _mm256_set1_epi32(~{AVX2_LANES - 1})) && start + first + {AVX2_LANES} <= {extent})
    {{
        return _mm256_permutevar8x32_ps(_mm256_loadu_ps(base + first), offsets);
    }}
    if (_mm256_testz_si256(offsets, _mm256_set1_epi32(~{2 * AVX2_LANES - 1})) && start + first + {2 * AVX2_LANES} <= {extent})
    {{
        // offsets of 8 or more take the second vector's element: bit 3 moved to the blend's sign bit
        return _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_loadu_ps(base + first), offsets),
                                _mm256_permutevar8x32_ps(_mm256_loadu_ps(base + first + {AVX2_LANES}), offsets),
                                _mm256_castsi256_ps(_mm256_slli_epi32(offsets, 28)));
    }}
    {by_lanes}
}}
()"""


def _store_lines(kernel, var: str, index: sympy.Expr, dtype: torch.dtype, value) -> str | None:
    """The C++ statements that store the vector ``value`` to ``var[index]`` (no accumulation),
    or None where this path does not apply.

    Where the lanes' offsets from the first lane rise strictly and lie under 32 apart (a
    downsample's plain store: every output to its own input), the values are spread to their
    positions by two expands (``vexpandps``) and stored with two masked stores; elsewhere lane by
    lane, in lane order, as Inductor's code stores them."""
    from torch._inductor.codegen.cpp_utils import cexpr_index

    parts = _whole_vector_index(kernel, index, dtype)
    if parts is None:
        return None
    indirect, rest = parts
    span_test, index_type = _INDEX_CODE[indirect.dtype]
    return f"""{{
    float* base = {var} + {cexpr_index(rest)};
    {span_test.format(index=indirect)}
    // offsets[l] < offsets[l + 1] for l < 15: distinct, in lane order
    const bool rising = in_span
        && (_mm512_cmplt_epu32_mask(offsets, _mm512_alignr_epi32(offsets, offsets, 1)) & 0x7FFF) == 0x7FFF;
    const __m512 values = {value};
    if (rising)
    {{
        const uint32_t positions = static_cast<uint32_t>(
            _mm512_reduce_or_epi32(_mm512_sllv_epi32(_mm512_set1_epi32(1), offsets)));
        const __mmask16 low = static_cast<__mmask16>(positions);
        const __mmask16 high = static_cast<__mmask16>(positions >> {LANES});
        const __m512 rest = _mm512_maskz_compress_ps(
            static_cast<__mmask16>(0xFFFF << __builtin_popcount(low)), values);
        _mm512_mask_storeu_ps(base + first, low, _mm512_maskz_expand_ps(low, values));
        _mm512_mask_storeu_ps(base + first + {LANES}, high, _mm512_maskz_expand_ps(high, rest));
    }}
    else
    {{
        __at_align__ {index_type} index[{LANES}];
        {indirect}.store(index);
        __at_align__ float lanes_values[{LANES}];
        _mm512_store_ps(lanes_values, values);
        for (int lane = 0; lane < {LANES}; lane++)
        {{
            base[index[lane]] = lanes_values[lane];
        }}
    }}
}}"""


# Inductor's own methods, while installed.
_stock: dict[str, Callable] = {}


def load_or_store_non_contiguous(self, var, index, dtype, buffer=None, store_value=None, accu_store=False):
    """``CppVecKernel._load_or_store_non_contiguous``: loads of package kernels by this path
    where it applies, everything else by Inductor's."""
    bits = _PACKAGE_KERNEL.get()
    if bits and var is not None and store_value is None:
        gather = _gather_line if bits == VECTOR_BITS else _avx2_gather_line
        line = gather(self, var, index, dtype)
        if line is not None:
            csevar = self.cse.generate(self.loads if buffer is None else buffer, line, dtype=dtype)
            csevar.is_vec = True
            return csevar
    if bits == VECTOR_BITS and store_value is not None and not accu_store and buffer is not None:
        lines = _store_lines(self, var, index, dtype, store_value)
        if lines is not None:
            buffer.splice(lines)
            return None
    return _stock["non_contiguous"](self, var, index, dtype, buffer, store_value, accu_store)


def vec_load_line(self, var, index, dtype, load_mask=None):
    """``CppVecKernel._get_vec_load_line``: in package kernels with AVX2's vectors, an unmasked
    int32 or int64 load that fills its vectors exactly without Inductor's element count (the
    same elements; AVX2's counted integer load copies through ``memcpy``); else Inductor's
    line."""
    from torch._inductor.codegen.cpp_utils import cexpr_index

    line = _stock["vec_load_line"](self, var, index, dtype, load_mask)
    if _PACKAGE_KERNEL.get() != AVX2_BITS or load_mask is not None or dtype not in (torch.int32, torch.int64):
        return line
    if self.num_elems != self.tiling_factor:
        return line
    if self.num_elems * dtype.itemsize * 8 != self._get_num_vectors(dtype) * AVX2_BITS:
        return line
    count = f", {cexpr_index(self.num_elems)})"
    return line[: -len(count)] + ")" if line.endswith(count) else line


def codegen_nodes(self, nodes):
    """``CppKernelProxy.codegen_nodes``, with the kernel marked by its path's vector width where it
    holds a package node and the backend's vectors are one of the paths'."""
    token = _PACKAGE_KERNEL.set(_path_bits() if holds_package_node(nodes) else 0)  # hooks: installed
    try:
        return _stock["codegen_nodes"](self, nodes)
    finally:
        _PACKAGE_KERNEL.reset(token)


def install() -> Callable[[], None]:
    from torch._inductor.codegen import cpp

    if missing_hooks():
        return lambda: None
    _stock["non_contiguous"] = cpp.CppVecKernel._load_or_store_non_contiguous
    _stock["codegen_nodes"] = cpp.CppKernelProxy.codegen_nodes
    undo = [
        replace_attribute(cpp.CppVecKernel, "_load_or_store_non_contiguous", load_or_store_non_contiguous),
        replace_attribute(cpp.CppKernelProxy, "codegen_nodes", codegen_nodes),
    ]
    if callable(getattr(cpp.CppVecKernel, "_get_vec_load_line", None)):  # the whole index loads: optional
        _stock["vec_load_line"] = cpp.CppVecKernel._get_vec_load_line
        undo.append(replace_attribute(cpp.CppVecKernel, "_get_vec_load_line", vec_load_line))

    def uninstall() -> None:
        for step in reversed(undo):
            step()

    return uninstall
