"""Short periods: maps of a rational ratio ``I / O = p / q`` that repeat every ``p`` inputs /
``q`` outputs.

Along the innermost dim such a map needs no index: the forward is ``q`` slices of each period,
concatenated, and each input's gradient a sum of slices (``forward._slice_periods``,
``backward._sum_periods``). A ``Period`` is the map's first period, taken only where the whole
map follows it: checked on the host for static sizes; for symbolic sizes proved once per ratio
(``ratio_period``) and taken under ``holds_where_taken``. docs/semantics.md says why one
evaluation per ratio covers every size with that ratio.
"""

from __future__ import annotations

import dataclasses
import fractions
import functools
import math

import torch
from torch import Tensor

from .backward_windows import window_starts
from .eager_rules import KernelChoice, Rule, is_explicit, rule_along, source_indices
from .size_conditions import holds_where_taken, host_tensors, is_static, size_hint


# Sizes up to which a period is proved on the host for symbolic sizes (one evaluation of the
# map at the largest sizes with the ratio, cached per ratio, scale and rule).
PERIOD_SIZE_LIMIT = 2**21


@dataclasses.dataclass(frozen=True)
class Period:
    """A map that repeats every ``inputs`` inputs / ``outputs`` outputs (``isize / osize`` in
    lowest terms), from a table of its first period:

    forward:   ``src(m * outputs + t) = m * inputs + table[t]`` for ``t < outputs``;
    backward:  ``lo(m * inputs + j) = m * outputs + table[j]`` for ``j <= inputs``.
    """

    inputs: int
    outputs: int
    table: tuple[int, ...]


def _lowest_terms(isize: int, osize: int) -> tuple[int, int]:
    g = math.gcd(isize, osize)
    return isize // g, osize // g


def _periodic_prefix(values: Tensor, length: int, step: int) -> tuple[tuple[int, ...], int]:
    """``values[:length]`` and how many leading values follow
    ``values[k] == (k // length) * step + values[k % length]`` (``values``: int64, on the host)."""
    k = torch.arange(values.numel())
    head = values[:length]
    broken = (values != (k // length) * step + head[k % length]).nonzero()
    return tuple(head.tolist()), int(broken[0]) if broken.numel() else values.numel()


def _forward_period(isize: int, osize: int, scale, rule: Rule) -> tuple[Period, int]:
    """The period of the map's first outputs, and up to which output size it holds."""
    p, q = _lowest_terms(isize, osize)
    with host_tensors():
        table, length = _periodic_prefix(source_indices(isize, osize, scale, rule, "cpu"), q, p)
    return Period(p, q, table), length


def _window_period(isize: int, osize: int, scale, rule_or_cuda) -> tuple[Period, int]:
    """The period of the first windows, and up to which input size it holds."""
    p, q = _lowest_terms(isize, osize)
    with host_tensors():
        # isize + 1 starts, the last one osize: a period is p starts and the period's end, q.
        lo = window_starts(isize, osize, scale, rule_or_cuda, "cpu")
        table, length = _periodic_prefix(lo, p, q)
    return Period(p, q, table + (q,)), length - 1


@functools.lru_cache(maxsize=256)
def ratio_period(p: int, q: int, scale, rule_or_cuda, backward: bool) -> tuple[Period, int]:
    """The period of the map for the sizes ``(m p, m q)``, and the largest ``m`` it holds for.

    The scale is the same for all of them (``fl(m p) / fl(m q)`` is the correctly rounded ``p / q``;
    an explicit scale is given), so their maps differ only by the clamps at the ends. One
    evaluation at the largest pair under ``PERIOD_SIZE_LIMIT`` gives the longest prefix that
    follows the period; a pair within it has the same values there (the clamps act past it: a
    periodic value stays below the next period's inputs), so its whole map follows the period.
    """
    m = PERIOD_SIZE_LIMIT // max(p, q)
    if backward:
        period, isize_limit = _window_period(m * p, m * q, scale, rule_or_cuda)
        return period, isize_limit // p
    period, osize_limit = _forward_period(m * p, m * q, scale, rule_or_cuda)
    if max(period.table) >= p:  # a source past its period: the clamp argument needs it within
        return period, 0
    return period, osize_limit // q


def _period(isize, osize, scale, rule_or_cuda, backward: bool, max_length: int) -> Period | None:
    if is_static(isize) != is_static(osize):
        return None  # the ratio guard would pin the symbolic size to one value
    if is_static(isize, osize):
        p, q = _lowest_terms(isize, osize)
    elif is_explicit(scale):
        # The scale's ratio: an output size from .vec, floor(isize * scale), has that ratio for
        # some sizes only (even ones for 1.5), and the others must not each get a graph.
        ratio = fractions.Fraction(scale).limit_denominator(64)
        p, q = ratio.denominator, ratio.numerator
    else:
        p, q = _lowest_terms(max(size_hint(isize), 1), max(size_hint(osize), 1))
    if min(p, q) < 2 or (p if backward else q) > max_length:
        return None  # integer ratios are repeats or strides; long periods stay gathers
    if is_static(isize, osize):
        if backward:
            period, length = _window_period(isize, osize, scale, rule_or_cuda)
            return period if length == isize else None
        period, length = _forward_period(isize, osize, scale, rule_or_cuda)
        return period if length == osize else None
    period, periods = ratio_period(p, q, scale, rule_or_cuda, backward)
    if periods < 1:
        return None
    if not holds_where_taken(osize * p == isize * q):
        return None
    if not holds_where_taken(isize <= periods * p):
        return None
    return period


def forward_period(
    isize, osize, scale, rule: Rule | KernelChoice, max_length: int
) -> Period | None:
    """Eager's forward map along one dim as a ``Period`` of at most ``max_length`` outputs: proved
    on the host for static sizes, under guards (``holds_where_taken``) for symbolic ones."""
    rule = rule_along(rule, isize, osize, scale)
    if isinstance(rule, KernelChoice):
        period = forward_period(isize, osize, scale, rule.channels_last, max_length)
        same = period == forward_period(isize, osize, scale, rule.generic, max_length)
        return period if same else None
    return _period(isize, osize, scale, rule, backward=False, max_length=max_length)


def window_period(isize, osize, scale, rule_or_cuda, max_length: int) -> Period | None:
    """Eager's backward windows along one dim as a ``Period`` of at most ``max_length`` inputs."""
    return _period(isize, osize, scale, rule_or_cuda, backward=True, max_length=max_length)
