"""The flat kernel of each tiled dynamic Triton kernel that holds package nodes, for its size
variants.

With dynamic sizes ``package_kernels`` tiles some kernels of package nodes in nd (contiguous
rows of runtime length, channels-last outputs): a flat kernel would divide its index by runtime
sizes per element. A size variant (``size_variants``) has the sizes as constants, where those
divisions are multiplications and the flat kernel's stores are whole vectors, and the static
graph's flat kernel beat the tiled variant 1.7x ((8,64,200,200) x1.5 f16 forward on an H200:
37.8 us against 63.7; docs/findings.md, finding 1).

So such a kernel also generates the flat kernel of its node schedule (``flat_form``) and
carries its source (compressed, ``pack``) in ``inductor_meta[FLAT]``, with the map from the
flat kernel's arguments to the tiled kernel's launch arguments: buffers by the buffer they
name, sizes by the size symbol (a symbol only the flat kernel reads becomes an argument of the
tiled kernel, passed and unused), the element count as the product of the tiled kernel's
ranges. A variant compiles both and keeps the faster (``size_variants``); a pointwise kernel
computes the same value per element whatever its tiling."""

from __future__ import annotations

import base64
import re
import zlib
from collections.abc import Callable
from itertools import chain

import sympy

from ._undo import replace_attribute

FLAT = "decomps_flat"
# The flat kernel's name in its source; a variant names it after the tiled kernel.
NAME = "decomps_flat_kernel"

_stock: dict[str, Callable] = {}


def pack(source: str) -> str:
    """``source`` as letters, digits and ``+/=``: the tiled kernel's source is itself a string
    literal in the generated module, where the escapes of a nested source would be read."""
    return base64.b64encode(zlib.compress(source.encode())).decode()


def unpack(packed: str) -> str:
    return zlib.decompress(base64.b64decode(packed)).decode()


def _pointers(args) -> dict[str, str] | None:
    """A kernel's buffer arguments, buffer name -> argument name (an in-place argument under each
    of its buffers' names); None where it has workspace arguments. Buffers the kernel removed (a
    cat's, fused into its users) are none of its arguments."""
    from torch._inductor.codegen.common import RemovedArg

    if args.workspace_args:
        return None
    pointers = {
        outer: inner
        for outer, inner in chain(args.input_buffers.items(), args.output_buffers.items())
        if not isinstance(inner, RemovedArg)
    }
    for outer, inplaced in args.inplace_buffers.items():
        if not isinstance(inplaced, RemovedArg):
            pointers[outer] = inplaced.inner_name
    return pointers


def _pointer_map(flat_pointers, pointers) -> dict[str, str] | None:
    """The flat kernel's buffer arguments -> the tiled kernel's, where every buffer of the flat
    kernel is one of the tiled kernel's and the buffers of each flat argument (one, or an
    in-place argument's two) share one tiled argument; else None."""
    if flat_pointers is None or pointers is None or not flat_pointers.keys() <= pointers.keys():
        return None
    mapped: dict[str, str] = {}
    for buffer, name in flat_pointers.items():
        if mapped.setdefault(name, pointers[buffer]) != pointers[buffer]:
            return None
    return mapped


def _numels(kernel) -> list[str]:
    return [f"{tree.prefix}numel" for tree in kernel.active_range_trees()]


def mutated_arguments(kernel) -> list[str]:
    """The arguments ``kernel`` mutates, as Inductor names them in ``mutated_arg_names``
    (``TritonKernel.codegen_kernel``): buffers of its nodes' mutations that it loads, stores or
    updates in place. A buffer they mutate that the kernel removed (a cat fused into its users,
    as the backward's sums of periods) is none of its arguments."""
    from torch._inductor.codegen.common import RemovedArg
    from torch._inductor.virtualized import V

    args = kernel.args
    removed = V.graph.removed_buffers | kernel.removed_buffers
    names = set()
    for name in kernel.mutations:
        if name in args.input_buffers:
            names.add(args.input_buffers[name])
        if name in args.inplace_buffers and name not in removed:
            names.add(args.inplace_buffers[name].inner_name)
        if name in args.output_buffers and not isinstance(args.output_buffers[name], RemovedArg):
            names.add(args.output_buffers[name])
    return sorted(names)


def loads_any(source: str, names) -> bool:
    """Whether a kernel's ``source`` loads any of the arguments ``names``. A form that only
    writes its mutated arguments leaves them as one launch leaves them after any number of
    launches, so a variant's forms can be timed by launching them again."""
    return any(re.search(rf"tl\.load\(\s*{re.escape(name)}\b", source) for name in names)


def has_flat_form(kernel) -> bool:
    """Whether ``kernel`` is a pointwise Triton kernel of package nodes, tiled with dynamic sizes,
    whose size arguments ``package_kernels`` makes 32-bit (so it has size variants)."""
    from torch._inductor.codegen.triton import TritonKernel

    from .package_kernels import narrows_size_arguments

    features = getattr(kernel, "features", None)
    return (
        type(kernel) is TritonKernel
        and features is not None
        and features.reduction_numel == 1
        and bool(sympy.sympify(features.numel).free_symbols)
        and sum(not tree.is_reduction for tree in kernel.range_trees) > 1
        and narrows_size_arguments(kernel)
    )


def flat_form(scheduling, node_schedule, kernel) -> dict | None:
    """The flat kernel of ``kernel``'s node schedule: its source and argument map (``FLAT``'s
    value), or None where the two kernels' buffers differ or the flat kernel loads an argument it
    mutates (``loads_any``). Registers the sizes the flat kernel reads as arguments of
    ``kernel``."""
    from torch._inductor.utils import Placeholder
    from torch._inductor.virtualized import V

    features = kernel.features
    tiling = scheduling.create_tiling([features.numel], [features.reduction_numel])
    kernels = scheduling.create_kernel_choices(features, [tiling], {"features": features, "tiling_scores": None})
    if len(kernels) != 1 or type(kernels[0]) is not type(kernel):
        return None
    (flat,) = kernels
    _stock["codegen_node_schedule_with_kernel"](scheduling, node_schedule, flat)
    with V.set_kernel_handler(flat):
        source = flat.codegen_kernel()
    flat_pointers, pointers = _pointers(flat.args), _pointers(kernel.args)
    mapped = _pointer_map(flat_pointers, pointers)
    if mapped is None or loads_any(source, mutated_arguments(flat)):
        return None
    sizes = list(flat.args.sizevars.items())
    if not all(isinstance(symbol, sympy.Symbol) for symbol, _ in sizes):
        return None
    for placeholder in Placeholder:
        source = source.replace(str(placeholder), NAME)
    return {
        "source": pack(source),
        # what a launch passes, in order: all but the constexprs
        "arguments": [name for name, t in flat.triton_meta["signature"].items() if t != "constexpr"],
        "pointers": mapped,
        "sizes": {name: kernel.args.size(symbol) for symbol, name in sizes},
        "numels": {name: _numels(kernel) for name in _numels(flat)},
    }


def codegen_node_schedule_with_kernel(self, node_schedule, kernel):
    """Inductor's code generation of a node schedule into ``kernel``; a kernel with a flat form
    (``has_flat_form``) also generates it, for its ``inductor_meta``."""
    _stock["codegen_node_schedule_with_kernel"](self, node_schedule, kernel)
    if has_flat_form(kernel):
        kernel._decomps_flat = flat_form(self, node_schedule, kernel)


def missing_hooks() -> list[str]:
    from torch._inductor.codegen.simd import SIMDScheduling

    return [
        f"SIMDScheduling.{name}"
        for name in ("codegen_node_schedule_with_kernel", "create_tiling", "create_kernel_choices")
        if not callable(getattr(SIMDScheduling, name, None))
    ]


def install() -> Callable[[], None]:
    from torch._inductor.codegen.simd import SIMDScheduling

    _stock["codegen_node_schedule_with_kernel"] = SIMDScheduling.codegen_node_schedule_with_kernel
    return replace_attribute(SIMDScheduling, "codegen_node_schedule_with_kernel", codegen_node_schedule_with_kernel)
