"""Contiguous strides over sizes the shape env proves positive.

A contiguous stride is a product of ``Max(1, size)`` (``make_contiguous_strides_for``: a size
may be 0). sympy drops the ``Max`` for a size symbol of a tensor, which it knows positive, but
not for an output size computed from a scale factor (``TruncToInt(1.5*ToFloat(s0))``) or an
int argument (``s1``, after the guard ``s1 > 0``). Inductor keeps a graph output's strides as
they are, so the ``Max`` reaches the kernel: its store index is no longer the flat index, and
Triton stores element by element (docs/findings.md, finding 1).

The shape env's own ``simplify`` drops ``Max(1, x)`` where its ranges and guards prove
``x >= 1``; Inductor's ``SizeVarAllocator.simplify`` does not. ``install()`` makes it do the
same. It only adds facts that hold for every size the graph accepts, so every kernel may use them.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy
from torch.utils._sympy.functions import Max

from ._undo import replace_attribute

_stock: dict[str, Callable] = {}


def proven_maxima(expr, proves_at_least_one: Callable[[sympy.Expr], bool]) -> dict:
    """``{Max(1, x): x}`` for the atoms of ``expr`` whose ``x`` is proved ``>= 1``."""
    replacements = {}
    for atom in expr.atoms(Max):
        if len(atom.args) == 2 and sympy.S.One in atom.args:
            (other,) = (a for a in atom.args if a != sympy.S.One)
            if proves_at_least_one(other):
                replacements[atom] = other
    return replacements


def simplify(self, expr):
    """Inductor's simplification, then ``Max(1, x) -> x`` where the shape env proves ``x >= 1``."""
    expr = _stock["simplify"](self, expr)
    if not (isinstance(expr, sympy.Expr) and expr.has(Max)):
        return expr

    known = self.shape_env.var_to_range

    def proves_at_least_one(x):
        # Only over the shape env's symbols: Inductor's own (``ks0``, loop variables) have no
        # range there.
        if not x.free_symbols <= known.keys():
            return False
        return bool(self.shape_env._maybe_evaluate_static(sympy.Ge(x, 1)))

    replacements = proven_maxima(expr, proves_at_least_one)
    return expr.xreplace(replacements) if replacements else expr


def install() -> Callable[[], None]:
    from torch._inductor.sizevars import SizeVarAllocator

    _stock["simplify"] = SizeVarAllocator.simplify
    return replace_attribute(SizeVarAllocator, "simplify", simplify)
