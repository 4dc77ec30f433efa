"""lowerings.divisibility: divisors from recorded guards, and the installed Inductor check."""

from __future__ import annotations

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.utils._sympy.functions import Mod

import decomps
from lowerings import divisibility

s, t = sympy.symbols("s t", integer=True, positive=True)


def test_guarded_divisors_from_modular_facts():
    facts = {Mod(s, 16), Mod(2 * t, 16), Mod(s * t, 64)}
    # Mod(2 t, 16) == 0 makes t a multiple of 8; a product fact names the product, not its factors.
    assert divisibility.guarded_divisors(facts) == {s: 16, t: 8, s * t: 64}


def test_known_divisor_through_products_powers_and_sums():
    divisors = {s: 16, t: 8}
    assert divisibility.known_divisor(4 * s * t, divisors) == 512
    assert divisibility.known_divisor(s**2, divisors) == 256
    assert divisibility.known_divisor(2 * t, divisors) == 16
    assert divisibility.known_divisor(s + 2 * t, divisors) == 16
    assert divisibility.known_divisor(s + 1, divisors) == 1
    assert divisibility.known_divisor(sympy.Integer(0), divisors) == 0
    assert divisibility.known_divisor(sympy.Symbol("u", integer=True), divisors) == 1
    assert divisibility.known_divisor(2 * s * t, {s * t: 64}) == 128  # a named product


def test_installed_check_uses_a_guard_on_a_scaled_size():
    """An output size from a scale factor is an expression, not a symbol: a guard on it gives
    the sizes built from it (the kernel's numel, its strides) their divisor."""
    from torch._dynamo.source import ConstantSource
    from torch._inductor.sizevars import SizeVarAllocator

    from decomps.size_conditions import scaled_size

    # both forms of .vec's output size: the float product, and (3*s) // 2 (size_conditions.scaled_size)
    for scale in (lambda s: torch.sym_int(torch.sym_float(s) * 1.5), lambda s: scaled_size(s, 1.5)):
        env = ShapeEnv()
        symbol = env.create_symbol(64, ConstantSource("x_size"))
        scaled = scale(env.create_symintnode(symbol, hint=64))  # 96
        sizevars = SizeVarAllocator(env)
        size = scaled.node.expr
        assert not sizevars.statically_known_multiple_of(size, 16)
        assert bool(scaled % 16 == 0)  # a guard: recorded in env.divisible
        for multiple in (size, size**3, 2 * symbol * size**2):
            assert sizevars.statically_known_multiple_of(multiple, 16), (size, multiple)
        assert not sizevars.statically_known_multiple_of(size + 1, 16)


def _sizevars_after_guard(size: int, modulus: int, coefficient: int = 1):
    """A shape env with one size symbol that took the guard ``coefficient * size % modulus == 0``."""
    from torch._dynamo.source import ConstantSource
    from torch._inductor.sizevars import SizeVarAllocator

    env = ShapeEnv()
    symbol = env.create_symbol(size, ConstantSource("x_size"))
    other = env.create_symbol(size + 3, ConstantSource("y_size"))
    sym = env.create_symintnode(symbol, hint=size)
    assert bool(coefficient * sym % modulus == 0)  # a guard: recorded in env.divisible
    return SizeVarAllocator(env), symbol, other


def test_installed_check_uses_the_guard():
    sizevars, x, y = _sizevars_after_guard(64, 16)
    assert decomps.is_installed()
    for multiple in (x, 4 * x, 2 * x * y, x + 32, x**2):
        assert sizevars.statically_known_multiple_of(multiple, 16), multiple
    for other in (y, x + 1, 2 * y, x * y + 1):
        assert not sizevars.statically_known_multiple_of(other, 16), other


def test_installed_check_uses_a_guard_on_a_multiple():
    sizevars, x, y = _sizevars_after_guard(72, 16, coefficient=2)  # x: a multiple of 8
    assert sizevars.statically_known_multiple_of(2 * x * y, 16)
    assert sizevars.statically_known_multiple_of(2 * x, 16)
    assert not sizevars.statically_known_multiple_of(x, 16)


def test_uninstalled_check_is_stock():
    sizevars, x, y = _sizevars_after_guard(72, 16, coefficient=2)
    with decomps.disabled():
        from torch._inductor.sizevars import SizeVarAllocator

        assert SizeVarAllocator.statically_known_multiple_of is not divisibility.statically_known_multiple_of
        # Stock Inductor does not carry a guard on 2 x to a product with it (2.11 to 2.13).
        assert not sizevars.statically_known_multiple_of(2 * x * y, 16)
    assert sizevars.statically_known_multiple_of(2 * x * y, 16)
