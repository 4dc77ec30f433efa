"""Index-free patterns of eager's maps (identity, repeat, stride), and the proofs behind them.

A dim whose forward map or backward windows follow a ``Pattern`` needs no index tensor: the
decompositions use views (a copy, expand + reshape, a strided slice; ``reshape + sum`` or a zero
pad backward). A pattern is taken only where it equals eager's map: for static sizes the map is
computed on the host and compared whole; for symbolic sizes only power-of-two factors and the
identity qualify, each where ``holds`` says its size condition does (a guard under
torch.compile, a proof while exporting). docs/semantics.md, "Fast paths", says why each is exact.
"""

from __future__ import annotations

import dataclasses

from .backward_windows import window_starts
from .eager_rules import (
    KernelChoice,
    Rule,
    forward_scale,
    is_explicit,
    round_to_float32,
    rule_along,
    static_source_indices,
)
from .size_conditions import holds, host_tensors, is_static, ratio_hint


@dataclasses.dataclass(frozen=True)
class Pattern:
    """A map ``src(o)`` that needs no index tensor.

    kind "identity": ``o``; "repeat": ``o // factor``; "stride": ``o * factor + offset``.
    """

    kind: str
    factor: int = 1
    offset: int = 0


def repeat_factors(patterns) -> list[int]:
    """Per dim, the factor ``k`` of a ``repeat`` pattern, 1 for any other."""
    return [p.factor if p.kind == "repeat" else 1 for p in patterns]


def static_pattern(isize: int, osize: int, scale, rule: Rule) -> Pattern | None:
    """The index-free pattern eager's map follows for these concrete sizes, if any."""
    src = static_source_indices(isize, osize, scale, rule)
    if src == list(range(osize)) and isize == osize:
        return Pattern("identity")
    if osize % isize == 0 and osize > isize:
        k = osize // isize
        if src == [o // k for o in range(osize)]:
            return Pattern("repeat", k)
    if isize % osize == 0 and isize > osize:
        k = isize // osize
        off = src[0]
        if src == [o * k + off for o in range(osize)]:
            return Pattern("stride", k, off)
    return None


def symbolic_pattern(isize, osize, scale, rule: Rule) -> Pattern | None:
    """Fast paths for symbolic sizes, each taken only where ``holds`` says its size condition
    does (a guard under torch.compile, a proof while exporting).

    Power-of-two upsampling ``osize == 2**j * isize``: the scale is exactly ``2**-j`` (or
    ``header_special`` / ``identity_if_equal`` give the same map), every product is exact below
    2**24, so ``src(o) = o >> j`` for nearest and nearest-exact alike. Equal sizes with no
    explicit scale give the identity.
    """
    if not holds(osize <= 2**24):  # float32 holds every index exactly
        return None
    explicit = is_explicit(scale)
    if holds(osize == isize):
        if not explicit or rule.identity_if_equal or rule.header_special:
            return Pattern("identity")
        if round_to_float32(1.0 / scale) == 1.0:
            return Pattern("identity")
        return None
    k = ratio_hint(osize, isize)
    if k < 2 or k & (k - 1) or not holds(osize == k * isize):
        return None
    # Without a scale, float32(isize / osize) is exactly 1/k for a power of two k.
    s = forward_scale(isize, osize, scale, rule.double) if explicit else 1.0 / k
    if s == 1.0 / k or (rule.header_special and k == 2):
        return Pattern("repeat", k)
    return None


def forward_pattern(isize, osize, scale, rule: Rule | KernelChoice) -> Pattern | None:
    """The index-free pattern of eager's forward map along one dim, if any: proved on the host
    for static sizes, under guards for symbolic ones."""
    rule = rule_along(rule, isize, osize, scale)
    if isinstance(rule, KernelChoice):
        # Either kernel may run: a pattern only where both maps follow it.
        pattern = forward_pattern(isize, osize, scale, rule.channels_last)
        return pattern if pattern == forward_pattern(isize, osize, scale, rule.generic) else None
    if is_static(isize, osize):
        return static_pattern(isize, osize, scale, rule)
    return symbolic_pattern(isize, osize, scale, rule)


def static_window_pattern(isize: int, osize: int, scale, rule_or_cuda) -> Pattern | None:
    """The index-free pattern of eager's backward windows for concrete sizes, if any.

    identity: ``[i, i + 1)``; repeat k: ``[k i, k i + k)``; stride k, offset: ``[m, m + 1)`` for
    ``i = m k + offset`` and empty otherwise (``isize == k * osize``).
    """
    with host_tensors():
        lo = window_starts(isize, osize, scale, rule_or_cuda, "cpu").tolist()
    sizes = [b - a for a, b in zip(lo, lo[1:])]
    if isize == osize and lo == list(range(isize + 1)):
        return Pattern("identity")
    if osize > isize and osize % isize == 0:
        k = osize // isize
        if lo == [k * i for i in range(isize + 1)]:
            return Pattern("repeat", k)
    if isize > osize and isize % osize == 0:
        k = isize // osize
        hits = [i for i, w in enumerate(sizes) if w]
        off = hits[0] if hits else 0
        if sizes == [int(i % k == off) for i in range(isize)] and off < k:
            return Pattern("stride", k, off)
    return None


def symbolic_window_pattern(isize, osize, scale, rule_or_cuda) -> Pattern | None:
    """Backward twin of ``symbolic_pattern``: power-of-two upsampling where ``holds`` says so."""
    if isinstance(rule_or_cuda, Rule):
        return symbolic_pattern(isize, osize, scale, rule_or_cuda)
    k = ratio_hint(osize, isize)
    if k < 1 or k & (k - 1) or not holds(osize <= 2**24) or not holds(osize == k * isize):
        return None
    if not is_explicit(scale) or round_to_float32(scale) == k:
        # lo(i) = ceilf(i * k) = k i exactly (and ceilf(k i - 0.5) = k i for exact).
        return Pattern("identity") if k == 1 else Pattern("repeat", k)
    return None
