"""The only place this project touches Inductor internals.

``install(table)`` puts the package's decompositions into Inductor's decomposition table (which
AOTAutograd applies below autograd), moves Inductor's own nearest-upsample lowerings aside, so
every nearest upsample reaching Inductor is lowered from our aten graph, adds the lowerings of
the package's integer-repeat ops (``repeat``), ATen-kernel ops (``aten_kernels``), channels-last
rows of few channels (``channel_rows``) and index tables (``index_tables``), three code generation
facts (``divisibility``, ``positive_sizes``, ``package_kernels``), per-size variants of the package's dynamic Triton
kernels (``size_variants``) with the flat forms of the tiled ones (``flat_sources``), Inductor's
static launcher for the package's own Triton kernels (``static_launch``), launches of the
package's kernels without ``CachingAutotuner.run``'s per-launch work (``cached_launch``), the
vector loads and stores of the package's CPU gathers (``cpu_gathers``), unmasked stores of its
C++ kernels' short vectors (``cpu_stores``), each OpenMP thread's own copy of those kernels'
sizes (``cpu_sizes``), their floor divisions of nonnegative integers as C++ divisions
(``cpu_divisions``) and the large CPU gradients of its stores allocated from the package's blocks
(``cpu_blocks``). It returns a callable that
restores Inductor's stock state exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import (aten_kernels, cached_launch, channel_rows, cpu_blocks, cpu_divisions, cpu_gathers, cpu_sizes, cpu_stores, divisibility,
               index_tables, package_kernels, positive_sizes, repeat, size_variants, static_launch)
from ._undo import swap_entries

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


def missing_codegen_hooks() -> list[str]:
    """Inductor internals the code generation facts rely on; without them, those stay off."""
    missing = []
    try:
        from torch._inductor.codegen import triton
        from torch._inductor.sizevars import SizeVarAllocator
    except ImportError:
        return ["torch._inductor.codegen.triton"]
    for name in ("statically_known_multiple_of", "simplify"):
        if not callable(getattr(SizeVarAllocator, name, None)):
            missing.append(f"SizeVarAllocator.{name}")
    if not callable(getattr(triton, "signature_to_meta", None)):
        missing.append("torch._inductor.codegen.triton.signature_to_meta")
    from torch._inductor.codegen.simd import SIMDScheduling

    if not isinstance(SIMDScheduling.__dict__.get("get_tiling_and_scores"), classmethod):
        missing.append("SIMDScheduling.get_tiling_and_scores")
    if not isinstance(triton.TritonKernel.__dict__.get("inductor_meta_common"), classmethod):
        missing.append("TritonKernel.inductor_meta_common")
    return missing


def codegen_hooks() -> dict[str, object]:
    """The Inductor attributes ``install`` replaces for the code generation facts (the class
    entry, so a classmethod compares by identity)."""
    from torch._inductor.codegen import cpp, cpp_utils, simd, triton, wrapper
    from torch._inductor.runtime import triton_heuristics
    from torch._inductor.sizevars import SizeVarAllocator

    return {
        "CppVecKernel._load_or_store_non_contiguous": cpp.CppVecKernel.__dict__.get("_load_or_store_non_contiguous"),
        "CppKernelProxy.codegen_nodes": cpp.CppKernelProxy.__dict__.get("codegen_nodes"),
        "CppVecKernel._get_store_line": cpp.CppVecKernel.__dict__.get("_get_store_line"),
        "KernelGroup.codegen_group": cpp.KernelGroup.__dict__.get("codegen_group"),
        "CppScheduling.codegen_node": cpp.CppScheduling.__dict__.get("codegen_node"),
        "CppPrinter._print_FloorDiv": cpp_utils.CppPrinter.__dict__.get("_print_FloorDiv"),
        "CppPrinter._print_ModularIndexing": cpp_utils.CppPrinter.__dict__.get("_print_ModularIndexing"),
        "PythonWrapperCodegen.make_buffer_allocation": wrapper.PythonWrapperCodegen.__dict__.get(
            "make_buffer_allocation"
        ),
        "SizeVarAllocator.statically_known_multiple_of": SizeVarAllocator.__dict__.get("statically_known_multiple_of"),
        "SizeVarAllocator.simplify": SizeVarAllocator.__dict__.get("simplify"),
        "codegen.triton.signature_to_meta": triton.signature_to_meta,
        "SIMDScheduling.get_tiling_and_scores": simd.SIMDScheduling.__dict__.get("get_tiling_and_scores"),
        "SIMDScheduling.codegen_node_schedule_with_kernel": simd.SIMDScheduling.__dict__.get(
            "codegen_node_schedule_with_kernel"
        ),
        "TritonKernel.inductor_meta_common": triton.TritonKernel.__dict__.get("inductor_meta_common"),
        "CachingAutotuner.precompile": triton_heuristics.CachingAutotuner.__dict__.get("precompile"),
        "CachingAutotuner._precompile_worker": triton_heuristics.CachingAutotuner.__dict__.get("_precompile_worker"),
    }


def install(decompositions: dict) -> Callable[[], None]:
    from torch._inductor import decomposition, lowering

    undo = [
        swap_entries(decomposition.decompositions, decompositions),
        swap_entries(lowering.lowerings, dict.fromkeys(STOCK_LOWERED)),
        swap_entries(lowering.lowerings, repeat.lowerings(lowering.lowerings)),
        swap_entries(lowering.lowerings, aten_kernels.lowerings()),
        swap_entries(lowering.lowerings, channel_rows.lowerings()),
        swap_entries(lowering.lowerings, index_tables.lowerings()),
    ]
    if not missing_codegen_hooks():
        undo += [divisibility.install(), positive_sizes.install(), package_kernels.install(), size_variants.install()]
    undo.append(static_launch.install())
    # after size_variants: a kernel with variants launches through them
    undo.append(cached_launch.install())
    undo.append(cpu_gathers.install())
    undo.append(cpu_stores.install())
    undo.append(cpu_sizes.install())
    undo.append(cpu_divisions.install())
    undo.append(cpu_blocks.install())
    # select_decomp_table() serves a cached copy of the table.
    decomposition.fast_random_decomps.cache_clear()

    def uninstall() -> None:
        for step in reversed(undo):
            step()
        decomposition.fast_random_decomps.cache_clear()

    return uninstall
