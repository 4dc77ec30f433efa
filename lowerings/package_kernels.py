"""Code generation choices for Triton kernels that hold this package's nodes, and no others.

A kernel holds a package node where one of its buffers was traced from a nearest-upsample op
(``origin.meta["original_aten"]``: the decompositions keep their op there). For those kernels:

* **tiling** (``tiling_settings``): as many tiles as the ranges allow for channels-last outputs
  with dynamic sizes (three for a forward alone with whole pixels of channels), else flat where
  the kernel fuses other ops.
* **32-bit size arguments.** With dynamic shapes Inductor types every ``ks*`` size argument
  ``i64`` (``signature_to_meta``), so all index arithmetic that touches a size, divisions
  included, runs in 64 bits, even where the kernel indexes in 32 bits because Inductor proved
  (and guarded) that every buffer it touches has fewer than 2**31 elements. A ``ks*`` argument
  is a size or stride of those buffers, or a product of them that an index expression forms, so
  it is below 2**31 too: such kernels get ``i32`` size arguments (x2 bf16 channels-last forward
  with dynamic shapes on an H200: 135 -> 97 us, docs/findings.md).
* **a mark** in their ``inductor_meta`` (``PACKAGE``), by which a loaded kernel is known as one
  of the package's (``lowerings.cached_launch``).

Nothing changes for other kernels, kernels that index in 64 bits, or the C++ wrapper (whose
argument declarations do not read this signature).
"""

from __future__ import annotations

from collections.abc import Callable

import sympy

from ._undo import replace_attribute

# By name: graph passes copy node metadata, and a copied OpOverload is another object.
PACKAGE_OPS = frozenset(
    f"aten.{name}{rank}d{suffix}.default"
    for name in ("upsample_nearest", "_upsample_nearest_exact")
    for rank in (1, 2, 3)
    for suffix in ("", "_backward")
)


# ``inductor_meta`` key of a kernel that holds package nodes.
PACKAGE = "decomps_package"


def _buffers(node_schedule) -> list:
    # None for the schedule's reduction markers
    return [b for b in (getattr(s, "node", None) for s in node_schedule) if b is not None]


def _from_package(origin) -> bool:
    return str(origin.meta.get("original_aten")) in PACKAGE_OPS


def package_buffers(node_schedule) -> list:
    """The buffers of a kernel's node schedule that were traced from a nearest-upsample op."""
    return [b for b in _buffers(node_schedule) if any(map(_from_package, b.origins))]


def _from_repeat_op(origin) -> bool:
    return str(getattr(origin, "target", "")).startswith("decomps.upsample_repeat")


def fuses_other_ops(node_schedule) -> bool:
    """Whether the kernel also computes ops of the user's graph (an add, a cat, ...)."""
    return any(not _from_package(o) for b in _buffers(node_schedule) for o in b.origins)


def _channels_last(buffer) -> bool:
    """Whether a 4d / 5d buffer has its channel dim innermost (stride 1)."""
    try:
        stride = buffer.get_stride()
    except (AttributeError, NotImplementedError):
        return False
    return len(stride) in (4, 5) and stride[1] == 1


# Buffer ranks whose contiguous kernels alone tile in nd with dynamic sizes (4: the 2d
# upsample's; a 3d x1.5 forward took 102 us flat, 169 tiled).
ND_TILED_CONTIGUOUS_RANKS = (4,)
# Below this static row length a tiled kernel's blocks run past the rows' ends more than the
# flat kernel's constant divisions cost (x1.5 f16 to 300: flat 66.6 us, tiled 72.5).
ND_MIN_STATIC_ROW = 1024


# Channels-last 4-d forward kernels of the upsample alone, with dynamic sizes and at least this
# many channels (example size), tile in 3d: (N * OH, OW, C).
ND3_MIN_CHANNELS = 8


def _from_backward(origin) -> bool:
    return str(origin.meta.get("original_aten")).endswith("_backward.default")


def _size_hint(size) -> int:
    from torch._inductor.virtualized import V

    size = sympy.sympify(size)
    return int(size) if size.is_number else V.graph.sizevars.optimization_hint(size, fallback=0)


def _channel_rows(buffers) -> bool:
    """Whether every buffer is a channels-last 4-d forward output whose pixels hold at least
    ``ND3_MIN_CHANNELS`` channels (example size)."""
    return all(
        _channels_last(b)  # first: a buffer with 4-d or 5-d strides has sizes
        and len(b.get_size()) == 4
        and not any(_from_backward(o) for o in b.origins)
        and _size_hint(b.get_size()[1]) >= ND3_MIN_CHANNELS
        for b in buffers
    )


def _tiled_rows(buffer) -> bool:
    """Whether a contiguous buffer's kernel, with dynamic sizes, tiles rows and columns: a
    rank of ``ND_TILED_CONTIGUOUS_RANKS`` and rows of runtime length (a flat index would divide
    by it per element) or of at least ``ND_MIN_STATIC_ROW`` elements."""
    try:
        size = buffer.get_size()
    except (AttributeError, NotImplementedError):
        return False
    if len(size) not in ND_TILED_CONTIGUOUS_RANKS or _channels_last(buffer):
        return False
    row = sympy.sympify(size[-1])
    return bool(row.free_symbols) or int(row) >= ND_MIN_STATIC_ROW


def tiling_settings(node_schedule, numel, reduction_numel) -> dict:
    """Inductor config under which a pointwise kernel holding package nodes picks its tiling.

    Dynamic sizes, channels-last output: as many tiles as the ranges allow. A flat kernel then
    divides its index by four or five runtime sizes per element, a tiled one per row and column
    (on an H200, UNet skip cat channels_last 455 -> 264 us; docs/upstream.md). Inductor stops at
    2 tiles, and for a channels-last x1.5 gather its 2-tile choice was the flat kernel; the
    forward alone with at least ``ND3_MIN_CHANNELS`` channels gets 3, (N * OH, OW, C), whole
    pixels per row ((8,64,200,200) x1.5 f16 63.3 -> 47.3 us, 16 channels 17.1 -> 10.2). With 3
    channels 3 tiles lost (181.5 -> 325.3), as in kernels that fuse other ops (FPN merge 139.6 ->
    204.0) and in the backward (about +20 us in the x1.5 f16 training step). Otherwise, a
    kernel that fuses the upsample with other ops (an add, a cat), or that holds a repeat op's
    generated code (``lowerings.repeat``), flat: its 2d tiling wrote a x2 bf16 repeat into its
    slice of a UNet skip cat in 307 us static and 168 us dynamic, the flat kernel in about 85. Inductor's coalescing
    analysis scores the upsample's read, broadcast along output rows, for the row variable and
    splits the kernel in 2d, which loses to the flat kernel (FPN merge contiguous 185 -> 151 us
    static, 186 -> 155 us dynamic; UNet skip cat 366 -> 196 / 371 -> 284 us). A kernel of the
    upsample alone, contiguous 4-d with dynamic sizes, tiles in nd (``_tiled_rows``): with a
    runtime row length its flat index divides by it per element ((8,64,200,200) x1.5 f16
    forward, symbolic size: flat 149 us, tiled 86; (4,3,1234,1345)->(2345,2456) f32 223 ->
    108), and with long static rows the tiled kernel computes the gather's column index once
    per column (literal size (2345, 2456): 121.5 -> 102.7). Elsewhere Inductor's choice stays
    (a static x1.5 gather: flat 67 us, 2d 43 us).
    """
    buffers = package_buffers(node_schedule)
    if not buffers or reduction_numel != 1:
        return {}
    dynamic = bool(sympy.sympify(numel).free_symbols)
    if dynamic and any(_channels_last(buffer) for buffer in buffers):
        if not fuses_other_ops(node_schedule) and _channel_rows(buffers):
            return {"triton.prefer_nd_tiling": True, "triton.max_tiles": 3}
        return {"triton.prefer_nd_tiling": True}
    if fuses_other_ops(node_schedule) or any(
        _from_repeat_op(o) for buffer in buffers for o in buffer.origins
    ):
        return {"triton.max_tiles": 1}
    if dynamic and any(_tiled_rows(buffer) for buffer in buffers):
        return {"triton.prefer_nd_tiling": True}
    return {}


def narrows_size_arguments(kernel) -> bool:
    """Whether a Triton kernel gets ``i32`` size arguments (see the module docstring)."""
    from torch._inductor.virtualized import V

    features = getattr(kernel, "features", None)
    return (
        getattr(kernel, "index_dtype", None) == "tl.int32"
        and not V.graph.cpp_wrapper
        and bool(package_buffers(getattr(features, "node_schedule", ())))
    )


_stock: dict[str, Callable] = {}


def signature_to_meta(*args, **kwargs) -> dict[str, str]:
    """Inductor's kernel signature, with ``i32`` size arguments where ``narrows_size_arguments``."""
    from torch._inductor.virtualized import V

    signature = _stock["signature_to_meta"](*args, **kwargs)
    if kwargs.get("is_template") or not narrows_size_arguments(V.kernel):
        return signature
    signature = {
        name: "i32" if name.startswith("ks") and dtype == "i64" else dtype
        for name, dtype in signature.items()
    }
    V.kernel._decomps_size_args = symbolic_size_args(args[0] if args else kwargs["signature"], signature)
    return signature


def symbolic_size_args(args, signature: dict[str, str]) -> list[str]:
    """The names of a kernel's ``i32`` size arguments whose values are symbolic."""
    from torch._inductor.codegen.common import SizeArg

    return [
        arg.name
        for arg in args
        if isinstance(arg, SizeArg)
        and signature.get(arg.name) == "i32"
        and isinstance(arg.expr, sympy.Expr)
        and arg.expr.free_symbols
    ]


@classmethod
def inductor_meta_common(cls) -> dict:
    """Inductor's kernel metadata; a kernel that holds package nodes says so (``PACKAGE``, for
    ``lowerings.cached_launch``), and one with ``i32`` symbolic size arguments names them
    (``lowerings.size_variants``), with its flat form where it has one (``lowerings.flat_sources``)
    and whether it is compiled for CUDA graphs."""
    from torch._inductor import config
    from torch._inductor.virtualized import V

    from .flat_sources import FLAT
    from .size_variants import CUDA_GRAPHS, SIZE_ARGS

    meta = _stock["inductor_meta_common"](cls)
    if package_buffers(getattr(getattr(V.kernel, "features", None), "node_schedule", ())):
        meta[PACKAGE] = True
    names = getattr(V.kernel, "_decomps_size_args", None)
    if names:
        meta[SIZE_ARGS] = list(names)
        # a kernel whose best configuration is cached loads with that one alone, and its variants
        # are autotuned over the configurations it is compiled with (size_variants.candidate_configs)
        meta["autotune_local_cache"] = False
        flat = getattr(V.kernel, "_decomps_flat", None)
        if flat:
            meta[FLAT] = flat
        if config.triton.cudagraphs:  # its variants are made at a size's warm-up run
            meta[CUDA_GRAPHS] = True
    return meta


@classmethod
def get_tiling_and_scores(cls, node_schedule, numel, reduction_numel=sympy.S.One, *args, **kwargs):
    """Inductor's tiling choice under ``tiling_settings``."""
    from torch._inductor import config

    with config.patch(tiling_settings(node_schedule, numel, reduction_numel)):
        return _stock["get_tiling_and_scores"](cls, node_schedule, numel, reduction_numel, *args, **kwargs)


def install() -> Callable[[], None]:
    from torch._inductor.codegen import triton
    from torch._inductor.codegen.simd import SIMDScheduling

    _stock["signature_to_meta"] = triton.signature_to_meta
    _stock["get_tiling_and_scores"] = SIMDScheduling.get_tiling_and_scores.__func__
    _stock["inductor_meta_common"] = triton.TritonKernel.inductor_meta_common.__func__
    undo = [
        replace_attribute(triton, "signature_to_meta", signature_to_meta),
        replace_attribute(SIMDScheduling, "get_tiling_and_scores", get_tiling_and_scores),
        replace_attribute(triton.TritonKernel, "inductor_meta_common", inductor_meta_common),
    ]

    def uninstall() -> None:
        for step in reversed(undo):
            step()

    return uninstall
