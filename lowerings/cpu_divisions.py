"""Floor divisions of nonnegative integers as C++ divisions, in C++ kernels that hold this
package's nodes, and no others.

Inductor's C++ printer writes every integer ``FloorDiv`` (and the division in
``ModularIndexing``) as ``c10::div_floor_integer(a, b)``, whose checks of ``b == 0``, of
``INT64_MIN / -1`` and of the signs are branches. Where such a division sits in a loop bound or
an index, as the output size ``(3 * s) // 2`` of a scale factor of 1.5 does in every store of
its forward, GCC keeps those branches in the innermost loop rather than hoisting the invariant
quotient. Where sympy knows ``a >= 0`` and ``b > 0`` (sizes and loop variables are nonnegative
symbols), truncation is floor division and C++'s ``/`` gives the same quotient without them.
(2,32,64,64,64)->(96,96,96) float32 channels-last forward, its generated module's call with a
fresh output, 2 threads, rounds with the order rotated: 1.05-1.06x stock's time as generated,
1.00-1.01x with the divisions written as ``/`` (docs/findings.md, finding 3).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

import sympy

from . import package_kernels
from ._undo import replace_attribute

_stock: dict[str, Callable] = {}
# Whether the C++ kernel being generated holds a package node.
_package_kernel = contextvars.ContextVar("decomps_package_cpp_kernel", default=False)


def missing_hooks() -> list[str]:
    """Inductor internals this change relies on that this torch lacks."""
    try:
        from torch._inductor.codegen import cpp, cpp_utils
    except ImportError:
        return ["torch._inductor.codegen.cpp"]
    missing = []
    if not callable(getattr(getattr(cpp, "CppScheduling", None), "codegen_node", None)):
        missing.append("CppScheduling.codegen_node")
    printer = getattr(cpp_utils, "CppPrinter", None)
    for name in ("_print_FloorDiv", "_print_ModularIndexing"):
        if not callable(getattr(printer, name, None)):
            missing.append(f"CppPrinter.{name}")
    return missing


def _truncates(x: sympy.Expr, div: sympy.Expr) -> bool:
    """Whether ``x // div`` equals C++'s ``x / div``: integers with ``x >= 0`` and ``div > 0``."""
    return bool(x.is_integer and div.is_integer and x.is_nonnegative and div.is_positive)


def _quotient(printer, x: sympy.Expr, div: sympy.Expr) -> str:
    return f"(static_cast<int64_t>({printer.doprint(x)}) / static_cast<int64_t>({printer.doprint(div)}))"


def print_floor_div(self, expr: sympy.Expr) -> str:
    x, div = expr.args
    if _package_kernel.get() and _truncates(x, div):
        return _quotient(self, x, div)
    return _stock["_print_FloorDiv"](self, expr)


def print_modular_indexing(self, expr: sympy.Expr) -> str:
    x, div, mod = expr.args
    if _package_kernel.get() and _truncates(x, div) and mod.is_positive:
        # Inductor's own form, its floor division written as above.
        return f"(static_cast<int64_t>({_quotient(self, x, div)}) % static_cast<int64_t>({self.doprint(mod)}))"
    return _stock["_print_ModularIndexing"](self, expr)


def codegen_node(self, node):
    """``CppScheduling.codegen_node``: a kernel's loops and body, printed with the divisions above
    where it holds a package node."""
    token = _package_kernel.set(bool(package_kernels.package_buffers(node.get_nodes())))
    try:
        return _stock["codegen_node"](self, node)
    finally:
        _package_kernel.reset(token)


def install() -> Callable[[], None]:
    if missing_hooks():
        return lambda: None
    from torch._inductor.codegen import cpp, cpp_utils

    _stock["codegen_node"] = cpp.CppScheduling.codegen_node
    _stock["_print_FloorDiv"] = cpp_utils.CppPrinter._print_FloorDiv
    _stock["_print_ModularIndexing"] = cpp_utils.CppPrinter._print_ModularIndexing
    undo = [
        replace_attribute(cpp.CppScheduling, "codegen_node", codegen_node),
        replace_attribute(cpp_utils.CppPrinter, "_print_FloorDiv", print_floor_div),
        replace_attribute(cpp_utils.CppPrinter, "_print_ModularIndexing", print_modular_indexing),
    ]

    def uninstall() -> None:
        for step in reversed(undo):
            step()

    return uninstall
