"""Size conditions on int or symbolic sizes, and host evaluation of index maps.

A decomposition traced with symbolic sizes must not bake in a fact about the example sizes that
the graph does not check. Three tools, one per kind of choice (docs/design.md, "Size
conditions"):

* ``size_test`` / ``sizes_equal``: a condition evaluated at run time as a 0-d bool tensor, for
  eager's own case splits (selected with ``torch.where``; no guard anywhere);
* ``holds`` / ``holds_where_taken``: whether a fast path's condition holds for the graph being
  traced: a guard under ``torch.compile``, a proof over the declared ranges while exporting
  (export turns a guard into an assertion over the range, and AOTInductor drops it);
* ``size_hint`` / ``ratio_hint``: example values, to pick which fast path to ask ``holds`` about.

``host_tensors`` runs tensor code eagerly for concrete sizes, outside any tracing mode, to prove
on the host that a fast path equals eager's map.
"""

from __future__ import annotations

import fractions
import math
import operator

import torch
from torch import Tensor
from torch.fx.experimental import symbolic_shapes


def is_static(*sizes) -> bool:
    return all(isinstance(s, int) for s in sizes)


def size_test(compare, size, bound) -> bool | Tensor:
    """``compare(size, bound)`` for a size: a Python bool for an int; for a SymInt a 0-d bool
    tensor evaluated at run time. A Python bool of a SymInt condition installs a guard, which
    ``torch.export`` turns into an assertion over the declared range and AOTInductor drops.
    """
    if is_static(size):
        return compare(size, bound)
    return compare(torch.scalar_tensor(size, dtype=torch.int64), bound)


def scaled_size(isize, factor):
    """``(int64_t)(isize * factor)`` in double, as eager.

    An integral factor makes the product exact: ``isize * k`` keeps a symbolic size a polynomial
    that the shape env can reason about (``2 * s0``, not ``TruncToInt(2.0 * ToFloat(s0))``), so
    fast paths need no guard. Any other double is ``p / 2**k``, and ``isize * factor`` is exact
    in double while ``p * isize < 2**53``: there the size is ``(p * s0) // 2**k``, taken where
    the example sizes meet the bound. Compiled code evaluates a size at every use (each kernel's
    size arguments, each stride, in both graphs of a training step), in Python integers for
    this form; the float form costs five Python calls per use (``torch.sym_float``).
    """
    if type(factor) in (int, float) and float(factor).is_integer():
        return isize * int(factor)
    if type(factor) is float and not is_static(isize) and math.isfinite(factor) and factor > 0:
        ratio = fractions.Fraction(factor)
        if holds_where_taken(isize * ratio.numerator < 2**53):
            return (isize * ratio.numerator) // ratio.denominator
    return torch.sym_int(torch.sym_float(isize) * factor)


def scaled_size_differs(isize, osize, scale: float | None, k: int) -> bool:
    """Whether a symbolic ``osize`` that ``.vec`` computed from ``scale`` (``scaled_size``)
    differs from ``k * isize`` for every size in ``isize``'s range: a proof, no guard.

    ``O = trunc(fl(s * I))``, and ``k I`` and ``k I + 1`` are doubles, so rounding keeps the
    product on their side of them: for ``s > k``, ``O >= k I + 1`` wherever ``(s - k) I >= 1``
    (exactly, in rationals), which the range's lower bound decides (Dynamo's dynamic sizes start
    at 2); for ``s < k``, ``O < k I`` unless ``s`` is within a rounding of ``k``.
    """
    if scale is None or is_static(isize, osize) or float(scale).is_integer():
        return False
    if not symbolic_shapes.statically_known_true(osize == scaled_size(isize, scale)):
        return False
    excess = fractions.Fraction(scale) - k
    if excess < 0:
        return -excess > fractions.Fraction(1, 2**40)
    return symbolic_shapes.statically_known_true(isize >= math.ceil(1 / excess))


def holds(condition) -> bool:
    """Whether a size condition that selects a fast path holds, for the graph being traced.

    A Python bool as it is. A SymBool: under ``torch.compile`` a guard (Dynamo recompiles when it
    fails); while exporting only what the shape env proves over the declared ranges, because
    export turns guards into assertions over those ranges and AOTInductor drops them.
    """
    if isinstance(condition, bool):
        return condition
    if torch.compiler.is_exporting():
        return symbolic_shapes.statically_known_true(condition)
    return symbolic_shapes.guard_or_false(condition)


def holds_where_taken(condition) -> bool:
    """``holds`` for a fast path whose alternative is exact for every size: where the example
    sizes say no, no guard (the graph without the fast path serves every size, so sizes that
    would take it cause no recompile); where they say yes, ``holds``."""
    if isinstance(condition, bool) or torch.compiler.is_exporting():
        return holds(condition)
    if condition.node.has_hint() and not condition.node.hint:
        return False
    return holds(condition)


def int32_where(*conditions) -> torch.dtype:
    """``torch.int32`` where every size condition (a bound on an index's values) holds, by
    ``holds_where_taken``, else ``torch.int64``, which serves every size."""
    return torch.int32 if all(holds_where_taken(c) for c in conditions) else torch.int64


def sizes_equal(sizes, others) -> Tensor:
    """``sizes == others`` (all of them) as a 0-d bool tensor evaluated at run time (no guard)."""
    result = torch.ones((), dtype=torch.bool)
    for a, b in zip(sizes, others, strict=True):
        result = result & size_test(operator.eq, a - b, 0)
    return result


def size_hint(size) -> int:
    """A size's example value, without a guard: which fast path to try (``holds`` decides)."""
    if isinstance(size, int):
        return size
    hint = getattr(symbolic_shapes, "optimization_hint", None)  # torch 2.13+
    if hint is not None:
        return hint(size, fallback=1)
    # torch 2.11: the node's own hint (hint_int warns that it is deprecated)
    return size.node.hint if size.node.has_hint() else 1


def ratio_hint(osize, isize, ceil: bool = False) -> int:
    """``osize // isize`` (or its ceiling) of the example sizes."""
    o, i = size_hint(osize), max(size_hint(isize), 1)
    return -(-o // i) if ceil else o // i


class host_tensors:
    """Runs tensor code eagerly on the host, outside any tracing or fake mode.

    Decompositions use it to evaluate the index map for concrete sizes, to prove a fast path
    equals eager's map before taking it.
    """

    def __enter__(self):
        from torch.utils._python_dispatch import _disable_current_modes

        self._modes = _disable_current_modes()
        self._modes.__enter__()
        return self

    def __exit__(self, *exc):
        return self._modes.__exit__(*exc)
