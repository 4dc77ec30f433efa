"""The package's large CPU gradients allocated from ``decomps.block_pool``.

The lowering of ``decomps::index_put_by_maps`` (``lowerings.index_tables``: a downsample's
backward storing each gradient element into its input) marks its output buffer where it is on the
CPU (``mark``); the Python wrapper then allocates that buffer with
``decomps.block_pool.empty_strided`` in place of ``empty_strided_cpu``
(``make_buffer_allocation``), which serves buffers of 4 MB and more from blocks it hands out
again once nothing holds them. The buffer is the store's copy of its zeros, written whole before
the store, so a block's earlier contents never show. Nothing changes for other buffers, other
devices or the C++ wrapper.
"""

from __future__ import annotations

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
    """Allocate ``buffer`` (a realized CPU tensor of the graph being lowered) from the blocks."""
    from torch._inductor.virtualized import V

    if buffer.get_device().type != "cpu" or not _stock:
        return
    marks = getattr(V.graph, _MARKS, None)
    if marks is None:
        marks = set()
        setattr(V.graph, _MARKS, marks)
    marks.add(buffer.get_name())


def make_buffer_allocation(self, buffer):
    """``PythonWrapperCodegen.make_buffer_allocation``: a marked buffer's line calls the blocks'
    ``empty_strided`` with the stock line's arguments."""
    from torch._inductor.virtualized import V

    line = _stock["make_buffer_allocation"](self, buffer)
    name = buffer.get_name()
    stock_call = f"{name} = empty_strided_cpu("
    add_import = getattr(self, "add_import_once", None)
    marked = name in getattr(V.graph, _MARKS, ())
    if not (marked and isinstance(line, str) and line.startswith(stock_call) and callable(add_import)):
        return line
    add_import(_IMPORT)
    return f"{name} = {_CALL}(" + line[len(stock_call):]


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
