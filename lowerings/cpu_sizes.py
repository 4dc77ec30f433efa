"""Each OpenMP thread's own copy of the size arguments, in C++ kernels that hold this package's
nodes, and no others.

Inductor's C++ backend passes a dynamic kernel's sizes as ``const int64_t ks0, ...`` and runs
its loops in a ``#pragma omp parallel`` region, where they are shared variables: GCC's outlined
region reads each through a pointer. A vector store (``_mm512_storeu_ps`` and kin store through
types that may alias anything) could have changed them, so the compiler reloads the sizes and
recomputes every index expression built from them, loop-invariant or not, at each vector of the
innermost loop. ``firstprivate(ks0, ...)`` gives each thread its own copies, which no store can
reach, and the invariant work leaves the loop, as it does where the sizes are constants.
(4,3,300,400)->(600,700) float32, the gather's kernel alone, 2 threads: 1011-1062 -> 529-628 us,
the same kernel with the sizes as constants 631-641 (docs/findings.md, finding 3).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from . import package_kernels
from ._undo import replace_attribute

# A parallel region as Inductor's WorkSharing opens it, with or without its thread count.
_PARALLEL = re.compile(r"^(?P<pragma>[ \t]*#pragma omp parallel(?: num_threads\([^)\n]*\))?)[ \t]*$", re.M)

_stock: dict[str, Callable] = {}


def missing_hooks() -> list[str]:
    """Inductor internals this change relies on that this torch lacks."""
    try:
        from torch._inductor.codegen import cpp
    except ImportError:
        return ["torch._inductor.codegen.cpp"]
    if not callable(getattr(getattr(cpp, "KernelGroup", None), "codegen_group", None)):
        return ["KernelGroup.codegen_group"]
    return []


def private_sizes(source: str, sizes: list[str]) -> str:
    """``source`` with ``firstprivate(sizes)`` on each of its parallel regions."""
    if not sizes:
        return source
    clause = f" firstprivate({', '.join(sizes)})"
    return _PARALLEL.sub(lambda m: m["pragma"] + clause, source)


def codegen_group(self, name=None) -> str:
    """``KernelGroup.codegen_group``: the kernel's source, its sizes private to each thread
    where it holds a package node."""
    source = _stock["codegen_group"](self, name)
    if source and package_kernels.package_buffers(self.scheduled_nodes):
        # the names of the kernel's size parameters (KernelArgs.cpp_argdefs)
        return private_sizes(source, list(self.args.sizevars.values()))
    return source


def install() -> Callable[[], None]:
    if missing_hooks():
        return lambda: None
    from torch._inductor.codegen import cpp

    _stock["codegen_group"] = cpp.KernelGroup.codegen_group
    return replace_attribute(cpp.KernelGroup, "codegen_group", codegen_group)
