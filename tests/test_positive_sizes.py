"""lowerings.positive_sizes: ``Max(1, x)`` in contiguous strides, dropped where the shape env proves ``x >= 1``."""

from __future__ import annotations

import sympy
import torch
import torch.nn.functional as F
from torch._dynamo.source import ConstantSource
from torch._inductor.utils import fresh_inductor_cache, run_and_get_code
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.utils._sympy.functions import Max

import decomps
from lowerings import positive_sizes

from .common import generated_code


def test_proven_maxima():
    x, y = sympy.symbols("x y", integer=True)
    expr = 3 * Max(1, x) * Max(1, y) + Max(0, x) + Max(1, x, y)
    assert positive_sizes.proven_maxima(expr, lambda e: e == x) == {Max(1, x): x}
    assert positive_sizes.proven_maxima(expr, lambda e: False) == {}


def _sizevars_with_scaled_size():
    from torch._inductor.sizevars import SizeVarAllocator

    env = ShapeEnv()
    symbol = env.create_symbol(64, ConstantSource("x_size"))
    scaled = torch.sym_int(torch.sym_float(env.create_symintnode(symbol, hint=64)) * 1.5)
    unbounded = env.create_unbacked_symint()  # may be 0
    return SizeVarAllocator(env), scaled.node.expr, unbounded.node.expr


def test_installed_simplify_drops_proven_maxima():
    sizevars, scaled, unbounded = _sizevars_with_scaled_size()
    assert decomps.is_installed()
    # 1.5 * s >= 3 for every size s >= 2 the shape env allows; an unbacked size may be 0.
    assert sizevars.simplify(7 * Max(1, scaled) ** 2) == 7 * scaled**2
    assert sizevars.simplify(Max(1, unbounded)) == Max(1, unbounded)


def test_installed_simplify_leaves_inductors_own_symbols():
    """Inductor simplifies indices over its own symbols too (``ks0`` for a precomputed size, loop
    variables): the shape env has no range for them, so their maxima stay."""
    sizevars, scaled, _ = _sizevars_with_scaled_size()
    ks0 = sympy.Symbol("ks0", integer=True)
    x0 = sympy.Symbol("x0", integer=True, nonnegative=True)
    expr = x0 * Max(1, ks0) + Max(1, scaled)
    assert sizevars.simplify(expr) == sympy.expand(x0 * Max(1, ks0) + scaled)


def test_uninstalled_simplify_is_stock():
    sizevars, scaled, _ = _sizevars_with_scaled_size()
    with decomps.disabled():
        from torch._inductor.sizevars import SizeVarAllocator

        assert SizeVarAllocator.simplify is not positive_sizes.simplify
        assert sizevars.simplify(Max(1, scaled)) == Max(1, scaled)


def test_output_strides_of_a_scale_factor_without_max():
    """A scale factor's output size is an expression sympy does not know positive; the compiled
    forward writes its output along its flat index, with no ``max(1, ...)`` in its strides."""
    x = torch.randn(2, 3, 4, 4, 4)

    def f(x):
        return F.interpolate(x, scale_factor=1.5, mode="nearest")

    with generated_code(), fresh_inductor_cache():
        out, (code,) = run_and_get_code(torch.compile(f, dynamic=True, fullgraph=True), x)
    assert torch.equal(out, f(x))
    assert out.stride() == f(x).stride()
    assert "max(1," not in code.replace("static_cast<int64_t>(1L)", "1"), code
