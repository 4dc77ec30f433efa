"""The windows of eager's backward: ``grad_input[i]`` sums ``grad_output[lo(i) : lo(i + 1)]``.

``window_starts`` gives ``lo`` per kernel (CPU: the exact preimage of the header's forward map;
CUDA: its own ``ceilf`` formula); ``window_bound`` bounds a window's length, which fixes the
backward's gather width: the exact maximum for static sizes, a bound that ``holds`` proves (or
guards) for symbolic ones, and None where no bound holds (the backward then scatters).
docs/semantics.md, "Backward: windows", states the rules and why the bounds hold.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .eager_rules import (
    F32,
    F64,
    INT32_MAP_LIMIT,
    Rule,
    cuda_backward_scale,
    forward_scale,
    is_explicit,
    raw_source_index,
    widen,
    with_special_cases,
)
from .size_conditions import holds, host_tensors, int32_where, is_static, ratio_hint, size_hint


def cpu_window_start(i: Tensor, isize, osize, scale, rule: Rule) -> Tensor:
    """``lo(i) = #{o < osize : src(o) < i}`` for the CPU rule (src is non-decreasing).

    ``src`` rounds, so ``lo`` is within one of the real-valued preimage ``ceil(i / s)`` (or
    ``ceil(i / s - 0.5)``); counting ``src < i`` over four candidates from two below it is exact.
    """
    # The header's special cases (osize that selects it, windows), as in the forward map
    # (``eager_rules.source_index``).
    special = [(1, i), (2, 2 * i)] if rule.header_special else []

    def formula() -> Tensor:
        s = forward_scale(isize, osize, scale, rule.double)
        estimate = i.to(F64) / widen(s)
        if rule.exact:
            estimate = estimate - 0.5
        base = (estimate.ceil().to(torch.int64) - 2).clamp(0, osize)
        below = torch.zeros_like(base)
        for d in range(4):
            o = base + d
            below = below + ((o < osize) & (raw_source_index(o, s, rule) < i)).to(torch.int64)
        # The clamp to isize - 1 sends every later output to the last input.
        return torch.where(i >= isize, osize, base + below).clamp_max(osize)

    return with_special_cases(special, isize, osize, scale, formula)


def cuda_window_start(i: Tensor, isize, osize, scale, exact: bool) -> Tensor:
    """``nearest_neighbor{,_exact}_bw_compute_source_index`` of ATen's CUDA backward.

    ``min(ceilf(i * s), osize)``, and for exact ``ceilf(fmaf(i, s, -0.5))`` (nvcc contracts it).
    """
    s = cuda_backward_scale(isize, osize, scale)
    if exact:
        value = (i.to(F64) * widen(s) - 0.5).to(F32)  # fmaf: exact value, one rounding
    else:
        value = i.to(F32) * s  # ``int * float``: one float32 product
    return value.ceil().to(i.dtype).clamp(0, osize)


def cuda_window_owner(o: Tensor, isize, osize, scale, exact: bool) -> Tensor:
    """The ``i < isize`` whose CUDA window ``[lo(i), lo(i + 1))`` holds output ``o``, where the
    windows cover every output (``lo(isize) == osize``, as ``injective_windows`` requires).

    ``lo(i) <= o`` exactly where the unrounded start ``v(i)`` (``i * s``, or ``i * s - 0.5``) is,
    and ``v`` does not decrease, so the owner is the last ``i`` with ``lo(i) <= o``. Its real-valued
    estimate ``(o [+ 0.5]) / s`` is within one of it while float32 products are within ``s`` of
    their values (``isize < 2**24``); counting ``lo(i) <= o`` over four candidates from two below
    the estimate is exact.
    """
    reciprocal = 1.0 / widen(cuda_backward_scale(isize, osize, scale))  # once, not per element
    shifted = o.to(F64) + 0.5 if exact else o.to(F64)
    base = (shifted * reciprocal).floor().to(o.dtype) - 2
    base = base.clamp(0, isize - 1)
    owner = base
    for d in range(1, 5):
        i = base + d
        below = (i < isize) & (cuda_window_start(i, isize, osize, scale, exact) <= o)
        owner = owner + below.to(o.dtype)
    return owner


def cuda_window_dtype(isize, osize, scale) -> torch.dtype:
    """The integer dtype of CUDA's window starts (``i``, ``lo(i)`` and the gather's positions):
    int32 where ``i <= isize``, ``lo(i) <= osize`` and the product ``i * s`` before the clamp
    (``s`` the explicit scale, else about ``osize / isize``) stay below ``INT32_MAP_LIMIT``, as
    ``eager_rules.map_dtype`` for the forward map; under a guard where the example sizes meet
    it."""
    bound = INT32_MAP_LIMIT
    if is_explicit(scale):
        bound = min(bound, math.floor(INT32_MAP_LIMIT / scale))
    return int32_where(isize <= bound, osize <= INT32_MAP_LIMIT)


TIGHT_WINDOW_LIMIT = 2**23

# Float32 index products stretch a window by a relative ``isize * 2**-21`` at most
# (docs/semantics.md); the margin of ``ceil_ratio_bounds_windows`` is four times that.
ROUNDING_MARGIN = 2**19


def ceil_ratio_bounds_windows(isize, osize, scale, r: int):
    """Whether ``r = ceil(ratio)`` bounds every window (a bool, or a SymBool for ``holds``).

    In exact arithmetic a window spans ``ratio`` outputs (``osize / isize``, or the explicit
    scale), so it holds at most ``ceil(ratio)`` of them; float32 rounding stretches it by a
    relative ``isize * 2**-21`` at most. So ``ratio * (1 + isize / ROUNDING_MARGIN) <= r``:
    a downsample (``r = 1``) or x1.5 (``r = 2``) qualifies, an integer ratio never does.
    """
    if is_explicit(scale):
        return isize <= math.floor((r - scale) / scale * ROUNDING_MARGIN)
    return osize * (ROUNDING_MARGIN + isize) <= r * isize * ROUNDING_MARGIN


def window_bound(isize, osize, scale, rule_or_cuda) -> int | None:
    """An upper bound on ``lo(i + 1) - lo(i)`` over all ``i`` that the graph may rely on.

    Static sizes: the exact maximum. Symbolic sizes, for a ratio with ``r = ceil(ratio)`` (the
    explicit scale's where given): ``r`` where ``ceil_ratio_bounds_windows``, else ``r + 1``
    (``r + 2`` for output sizes from ``TIGHT_WINDOW_LIMIT`` on), each where ``holds`` says it
    bounds every window (a guard under torch.compile, a proof while exporting); None where no
    bound holds (the backward then scatters; tests/test_backward.py covers both).
    """
    if is_static(isize, osize):
        return max(_static_window_sizes(isize, osize, scale, rule_or_cuda))
    return symbolic_window_bound(isize, osize, scale, rule_or_cuda)


def symbolic_window_bound(isize, osize, scale, rule_or_cuda) -> int | None:
    """``window_bound``'s rule for symbolic sizes; with ints (tests) ``holds`` takes each
    condition as it is."""

    def widened(r: int) -> int:
        # A window holds at most ceil(ratio) + 1 outputs while float32 index products are
        # within one unit of their real values, which output sizes below 2**23 ensure.
        return r + (1 if holds(osize < TIGHT_WINDOW_LIMIT) else 2)

    if is_explicit(scale):
        # CUDA's windows are steps of ceilf(i * scale). CPU's clamp to isize - 1 gives the last
        # input every output from about (isize - 1) * scale on: within the bound only if the
        # output size is at most isize * scale, as when it was computed from the scale.
        if isinstance(rule_or_cuda, Rule) and not holds(torch.sym_float(osize) <= isize * scale):
            return None
        r = math.ceil(scale)
        return r if holds(ceil_ratio_bounds_windows(isize, osize, scale, r)) else widened(r)
    ratio = ratio_hint(osize, isize, ceil=True)
    for r in range(ratio, 65) if torch.compiler.is_exporting() else [ratio]:
        if holds(ceil_ratio_bounds_windows(isize, osize, None, r)):
            return r
        if holds(osize <= r * isize):
            return widened(r)
    return None


# ``cuda_window_owner``'s estimate needs float32 products within one scale of their values.
OWNER_SIZE_LIMIT = 2**24


def injective_windows(isize, osize, scale, rule_or_cuda) -> bool:
    """Whether no input receives two outputs and every output has its input: every window holds
    at most one output (``ceil_ratio_bounds_windows`` with ``r = 1``, a downsample) and they end
    at ``osize`` (``lo(isize) == osize``: always on CPU; on CUDA, whose last window may end
    early with an explicit scale, only without one, or checked for static sizes). Symbolic sizes
    take it under ``holds`` where the example sizes downsample."""
    cuda = rule_or_cuda in CUDA_RULES
    if is_static(isize, osize):
        if osize > isize or (cuda and isize >= OWNER_SIZE_LIMIT):
            return False
        sizes = _static_window_sizes(isize, osize, scale, rule_or_cuda)
        return max(sizes) <= 1 and sum(sizes) == osize
    if is_explicit(scale):
        return not cuda and scale < 1 and symbolic_window_bound(isize, osize, scale, rule_or_cuda) == 1
    if size_hint(osize) >= size_hint(isize) or (cuda and size_hint(isize) >= OWNER_SIZE_LIMIT):
        return False
    if cuda and not holds(isize < OWNER_SIZE_LIMIT):
        return False
    return holds(ceil_ratio_bounds_windows(isize, osize, None, 1))


# ``eager_rules.window_rule``'s names of CUDA's two backward kernels.
CUDA_RULES = ("cuda", "cuda-exact")


def window_starts(isize, osize, scale, rule_or_cuda, device, dtype=torch.int64) -> Tensor:
    """``lo(i)`` for ``i`` in ``0 .. isize`` (``isize + 1`` values), in ``dtype`` for CUDA's
    rules (int32 only where ``cuda_window_dtype`` says so), int64 for the CPU rules."""
    cuda = rule_or_cuda in CUDA_RULES
    i = torch.arange(isize + 1, dtype=dtype if cuda else torch.int64, device=device)
    if rule_or_cuda == "cuda":
        return cuda_window_start(i, isize, osize, scale, exact=False)
    if rule_or_cuda == "cuda-exact":
        return cuda_window_start(i, isize, osize, scale, exact=True)
    return cpu_window_start(i, isize, osize, scale, rule_or_cuda)


def _static_window_sizes(isize: int, osize: int, scale, rule_or_cuda) -> list[int]:
    with host_tensors():
        lo = window_starts(isize, osize, scale, rule_or_cuda, "cpu")
        return (lo[1:] - lo[:-1]).tolist()
