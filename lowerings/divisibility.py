"""Divisibility of kernel size arguments that a guard proved.

Inductor marks a kernel argument ``tt.divisibility = 16`` only where
``SizeVarAllocator.statically_known_multiple_of`` proves it, and with dynamic shapes that proof
does not use the guards already taken: after a guard ``Eq(Mod(s0, 16), 0)`` (recorded by the
shape env in ``ShapeEnv.divisible``), torch 2.11 still cannot prove ``s0`` or ``4*s0*s1`` a
multiple of 16, and torch 2.13's structural check cannot prove ``2*s0`` one after a guard on
``Mod(2*s0, 16)``. Without the attribute Triton cannot vectorize loads and stores whose index
uses those sizes (docs/findings.md, "Dynamic shapes").

``install()`` extends the check with the divisors those recorded guards give each size symbol
(or other size expression they name), carried through products, powers and sums. It only adds
facts that hold for every size the graph accepts, so every Inductor kernel may use them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import sympy

from ._undo import replace_attribute


def guarded_divisors(divisible) -> dict[sympy.Expr, int]:
    """``{e: d}``: ``e`` is a multiple of ``d``, from ``Mod(k * e, m) == 0`` facts
    (``m / gcd(k, m)``).

    ``e`` is a size symbol, or any other size expression a guard named: an output size from a
    scale factor (``TruncToInt(1.5*ToFloat(s0))``), a product of sizes."""
    divisors: dict[sympy.Expr, int] = {}
    for fact in divisible:
        base, modulus = fact.args
        coefficient, expr = sympy.sympify(base).as_coeff_Mul()
        if not (modulus.is_Integer and coefficient.is_Integer and expr.free_symbols):
            continue
        divisor = int(modulus) // math.gcd(int(coefficient), int(modulus))
        divisors[expr] = math.lcm(divisors.get(expr, 1), divisor)
    return divisors


def known_divisor(expr, divisors: dict[sympy.Expr, int]) -> int:
    """A ``d`` with ``expr`` a multiple of ``d`` for every value of its symbols (0 for zero)."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return abs(int(expr))
    known = divisors.get(expr, 1)
    if isinstance(expr, sympy.Mul):
        coefficient, rest = expr.as_coeff_Mul()  # 2*s*t: a guard may have named s*t
        if coefficient.is_Integer:
            known = math.lcm(known, abs(int(coefficient)) * divisors.get(rest, 1))
        return math.lcm(known, math.prod(known_divisor(factor, divisors) for factor in expr.args))
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp > 0:
        return math.lcm(known, known_divisor(expr.base, divisors) ** int(expr.exp))
    if isinstance(expr, sympy.Add):
        return math.lcm(known, math.gcd(*(known_divisor(term, divisors) for term in expr.args)))
    return known


_stock: dict[str, Callable] = {}


def statically_known_multiple_of(self, numerator, denominator) -> bool:
    """Inductor's check, then the divisors that the shape env's recorded guards give."""
    if _stock["statically_known_multiple_of"](self, numerator, denominator):
        return True
    if not isinstance(denominator, (int, sympy.Integer)) or int(denominator) == 0:
        return False
    divisible = getattr(self.shape_env, "divisible", None)
    if not divisible:
        return False
    return known_divisor(numerator, guarded_divisors(divisible)) % int(denominator) == 0


def install() -> Callable[[], None]:
    from torch._inductor.sizevars import SizeVarAllocator

    _stock["statically_known_multiple_of"] = SizeVarAllocator.statically_known_multiple_of
    return replace_attribute(SizeVarAllocator, "statically_known_multiple_of", statically_known_multiple_of)
