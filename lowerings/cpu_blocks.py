"""The package's large CPU buffers allocated from ``decomps.block_pool``.

On the CPU the Python wrapper allocates two kinds of buffer with
``decomps.block_pool.empty_strided`` in place of ``empty_strided_cpu``
(``make_buffer_allocation``), which serves buffers of ``block_pool.MIN_BYTES`` (4 MB) or more
from blocks it hands out again once nothing holds them:

* the plain store's gradient (the output of ``decomps::index_put_by_maps``, marked by its
  lowering, ``mark``), whose heap placement glibc changes from step to step;
* a buffer that a kernel of the package's ops computes (an upsample or its backward, alone or
  fused with its neighbours: one of the buffer's FX origins was decomposed from it) whose size
  at compile time (at the example sizes, where they are symbolic) is ``block_pool.MAPPED_BYTES``
  (32 MB) or more, which glibc maps afresh at every call. Smaller ones keep the stock line: glibc
  hands them memory its heap recycles, often still in the caches.

Each such buffer is written whole by its kernels (a forward's output, the store's copy of its
zeros), so a block's earlier contents never show through it. Other buffers, other devices and the
C++ wrapper keep Inductor's allocation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ._undo import replace_attribute

_stock: dict[str, Callable] = {}
# The names of a graph's marked buffers, kept on the graph being lowered.
_MARKS = "decomps_block_buffers"
_CALL = "decomps_empty_strided"
_IMPORT = f"from decomps.block_pool import empty_strided as {_CALL}"


def missing_hooks() -> list[str]:
    """Inductor internals this change relies on that this torch lacks."""
    import torch

    try:
        from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    except ImportError:
        return ["torch._inductor.codegen.wrapper.PythonWrapperCodegen"]
    missing = []
    if not callable(getattr(PythonWrapperCodegen, "make_buffer_allocation", None)):
        missing.append("PythonWrapperCodegen.make_buffer_allocation")
    if not callable(getattr(torch._C, "_storage_Use_Count", None)):
        missing.append("torch._C._storage_Use_Count")
    return missing


def mark(buffer) -> None:
    """Allocate ``buffer`` (a realized CPU tensor of the graph being lowered) from the blocks at
    any size."""
    from torch._inductor.virtualized import V

    if buffer.get_device().type != "cpu" or not _stock:
        return
    marks = getattr(V.graph, _MARKS, None)
    if marks is None:
        marks = set()
        setattr(V.graph, _MARKS, marks)
    marks.add(buffer.get_name())


@functools.cache
def _package_op_names() -> frozenset[str]:
    from decomps.ops import BACKWARD_OVERLOADS, FORWARD_OVERLOADS

    return frozenset(op.name() for op in FORWARD_OVERLOADS + BACKWARD_OVERLOADS)


def computes_package_op(buffer) -> bool:
    """Whether a kernel of ``buffer`` computes one of the package's ops, by the FX nodes it came
    from (``origins``) and the op each was decomposed from (``original_aten``), by name: a graph's
    nodes may hold another ``OpOverload`` object of the same op."""
    names = _package_op_names()
    for node in getattr(buffer, "origins", None) or ():
        op = node.meta.get("original_aten")
        if callable(getattr(op, "name", None)) and op.name() in names:
            return True
    return False


def _bytes_hint(buffer) -> int:
    from torch._inductor.virtualized import V

    sizevars = V.graph.sizevars
    hint = getattr(sizevars, "optimization_hint", None) or sizevars.size_hint
    return hint(buffer.get_layout().storage_size(), fallback=0) * buffer.get_dtype().itemsize


def _from_blocks(buffer) -> bool:
    from torch._inductor.virtualized import V

    from decomps import block_pool  # not at import: decomps installs by importing this package

    if buffer.get_name() in getattr(V.graph, _MARKS, ()):
        return True
    return computes_package_op(buffer) and _bytes_hint(buffer) >= block_pool.MAPPED_BYTES


def make_buffer_allocation(self, buffer):
    """``PythonWrapperCodegen.make_buffer_allocation``: the line of a marked buffer, or of a large
    one that a package op computes, calls the blocks' ``empty_strided`` with the stock line's
    arguments."""
    line = _stock["make_buffer_allocation"](self, buffer)
    stock_call = f"{buffer.get_name()} = empty_strided_cpu("
    add_import = getattr(self, "add_import_once", None)
    if not (isinstance(line, str) and line.startswith(stock_call) and callable(add_import)):
        return line
    if not _from_blocks(buffer):
        return line
    add_import(_IMPORT)
    return f"{buffer.get_name()} = {_CALL}(" + line[len(stock_call):]


def install() -> Callable[[], None]:
    if missing_hooks():
        return lambda: None
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    _stock["make_buffer_allocation"] = PythonWrapperCodegen.make_buffer_allocation
    undo = replace_attribute(PythonWrapperCodegen, "make_buffer_allocation", make_buffer_allocation)

    def uninstall() -> None:
        undo()
        _stock.clear()

    return uninstall
