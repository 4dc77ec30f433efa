"""Source-index math of nearest / nearest-exact upsampling: the one place both directions use.

Eager ATen does not have one rule. Each kernel rounds the source index its own way, and which
kernel runs depends on the device, the rank, the dtype, the memory layout and the sizes. This
module names each kernel's arithmetic (``Rule``), picks the rule eager would use
(``forward_rule``, ``window_rule``), and evaluates it as aten ops, so that a decomposition's
index equals eager's on every input. docs/semantics.md states the rules and where they come from.

Everything here works on one spatial dim. Sizes may be ints or SymInts; ``scale`` is the op's
optional ``scales_*`` argument (a Python float; eager ignores values <= 0). Where eager's choice
between maps depends on symbolic sizes (CPU kernel, the header's special cases), the index is
selected at run time (``KernelChoice``, ``torch.where``), not under a guard: a guard would narrow
a ``torch.export`` program and AOTInductor drops it. Fast paths and static loop bounds that need
a size condition ask ``holds``: a guard under torch.compile, a proof while exporting.

Each float32 rounding of eager is one float32 op or one float64 -> float32 convert (products
that eager forms in double, or with an FMA, are exact in float64 here and converted once), never
a float64 -> float32 -> float64 chain, which Inductor may fold (see ``_widen``).
"""

from __future__ import annotations

import dataclasses
import fractions
import functools
import math
import operator
import struct

import torch
from torch import Tensor
from torch.fx.experimental import symbolic_shapes

aten = torch.ops.aten

F32 = torch.float32
F64 = torch.float64


def round_to_float32(value: float) -> float:
    """The float32 nearest to ``value`` (round-half-even), as a Python float."""
    return struct.unpack("f", struct.pack("f", value))[0]


def is_static(*sizes) -> bool:
    return all(isinstance(s, int) for s in sizes)


@dataclasses.dataclass(frozen=True)
class Rule:
    """One eager kernel's arithmetic for ``src(o)``, the input index output ``o`` reads.

    exact:           nearest-exact (pixel centres) instead of nearest.
    double:          scale and product in float64, rounded to float32 once before ``floorf``
                     (CPU generic kernel on float64 input); otherwise float32 throughout.
    header_special:  ``nearest_idx`` in ATen/native/UpSample.h: ``osize == isize`` gives ``o``
                     and ``osize == 2 * isize`` gives ``o >> 1`` whatever the explicit scale.
    identity_if_equal: CUDA 2d forward: ``src(o) = o`` along a dim whose sizes are equal.
    centre_shift:    CPU generic nearest-exact kernel: ``r = s * (o + 0.5) - 0.5`` clamped at 0,
                     then ``floorf(r + 0.5)``; ``fma`` when the kernel build contracts it.
    """

    exact: bool
    double: bool = False
    header_special: bool = False
    identity_if_equal: bool = False
    centre_shift: bool = False
    fma: bool = False


# ---------------------------------------------------------------------------------------------
# Which rule eager uses


def _cpu_uses_fma() -> bool:
    # The generic CPU kernel is built per capability; only the vectorized builds contract FMA.
    return torch.backends.cpu.get_cpu_capability() != "DEFAULT"


def _size_test(compare, size, bound) -> bool | Tensor:
    """``compare(size, bound)`` for a size: a Python bool for an int; for a SymInt a 0-d bool
    tensor evaluated at run time. A Python bool of a SymInt condition installs a guard, which
    ``torch.export`` turns into an assertion over the declared range and AOTInductor drops.
    """
    if is_static(size):
        return compare(size, bound)
    return compare(torch.scalar_tensor(size, dtype=torch.int64), bound)


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


def sizes_equal(sizes, others) -> Tensor:
    """``sizes == others`` (all of them) as a 0-d bool tensor evaluated at run time (no guard)."""
    result = torch.ones((), dtype=torch.bool)
    for a, b in zip(sizes, others, strict=True):
        result = result & _size_test(operator.eq, a - b, 0)
    return result


def _size_hint(size) -> int:
    """A size's example value, without a guard: which fast path to try (``holds`` decides)."""
    if isinstance(size, int):
        return size
    # torch 2.13 renamed hint_int to optimization_hint
    hint = getattr(symbolic_shapes, "optimization_hint", None) or symbolic_shapes.hint_int
    return hint(size, fallback=1)


def _ratio_hint(osize, isize, ceil: bool = False) -> int:
    """``osize // isize`` (or its ceiling) of the example sizes."""
    o, i = _size_hint(osize), max(_size_hint(isize), 1)
    return -(-o // i) if ceil else o // i


def _either(a: bool | Tensor, b: bool | Tensor) -> bool | Tensor:
    if isinstance(a, bool):
        return True if a else b
    if isinstance(b, bool):
        return True if b else a
    return a | b


def _cpu_channels_last_kernel(input: Tensor, output_size) -> bool | Tensor:
    """ATen's UpSampleKernel.cpp choice between its channels-last kernel and the generic one.

    A Python bool for static sizes, a 0-d bool tensor (see ``_size_test``) for symbolic ones. The
    memory format stays a Python bool: strides are guarded anyway.
    """
    if input.dim() not in (4, 5):
        return False
    wide = _size_test(operator.gt, input.size(1), 3)
    memory_format = torch.channels_last if input.dim() == 4 else torch.channels_last_3d
    if wide is not False and not bool(input.is_contiguous(memory_format=memory_format)):
        wide = False
    if input.dim() == 5 or wide is True:
        return wide
    return _either(wide, _size_test(operator.le, output_size[0] + output_size[1], 128))


def _cpu_kernel_maps_agree(generic: Rule, scale: float | None) -> bool:
    """Whether eager's two CPU forward kernels read the same inputs along a dim.

    They do for nearest without an explicit scale on a non-float64 input: both compute
    ``floor(o * fl32(fl32(I) / fl32(O)))``, and the header's special cases agree with it (a scale
    of exactly 1 for ``O == I``, 0.5 for ``O == 2I``). Checked against eager in
    tests/test_source_index.py. nearest-exact, float64 and explicit scales can differ.
    """
    return not generic.exact and not generic.double and not is_explicit(scale)


def is_explicit(scale: float | None) -> bool:
    """Eager uses a ``scales_*`` argument only if it is > 0 (NaN and <= 0 mean "from the sizes")."""
    return scale is not None and scale > 0


@dataclasses.dataclass(frozen=True)
class KernelChoice:
    """Eager's CPU forward kernel, when it depends on symbolic sizes and the two maps can differ.

    ``use_channels_last`` is a 0-d bool tensor computed from the sizes at run time: the index is
    computed with both rules and selected with ``torch.where``, so the graph is exact for every
    size without a guard.
    """

    use_channels_last: Tensor
    channels_last: Rule
    generic: Rule

    def along(self, scale: float | None) -> Rule | KernelChoice:
        """The rule of one dim: the generic one wherever both kernels' maps agree."""
        return self.generic if _cpu_kernel_maps_agree(self.generic, scale) else self


def forward_rule(input: Tensor, output_size, exact: bool, scales) -> Rule | KernelChoice:
    """The rule of the eager forward kernel that ``input`` (on its device) would run.

    On CPU a ``KernelChoice`` where the kernel depends on symbolic sizes and its maps can differ.
    """
    if input.device.type != "cpu":
        # CUDA (and other devices, which share CUDA's formulas): float32, per-dim identity in 2d.
        return Rule(exact=exact, identity_if_equal=input.dim() == 4)
    double = input.dtype == F64
    if exact:
        generic = Rule(exact=True, double=double, centre_shift=True, fma=_cpu_uses_fma())
    else:
        generic = Rule(exact=False, double=double)
    if all(_cpu_kernel_maps_agree(generic, s) for s in scales):
        return generic  # whichever kernel eager runs: nothing to decide, nothing to guard
    # The channels-last kernel uses the header helpers for every dtype: float32 scale; nearest
    # has the special cases.
    channels_last = Rule(exact=exact, header_special=not exact)
    use_channels_last = _cpu_channels_last_kernel(input, output_size)
    if isinstance(use_channels_last, bool):
        return channels_last if use_channels_last else generic
    return KernelChoice(use_channels_last, channels_last, generic)


def cpu_backward_rule(exact: bool) -> Rule:
    """CPU backward scatters with the header helpers (``nearest_idx`` / ``nearest_exact_idx``)."""
    return Rule(exact=exact, header_special=not exact)


# ---------------------------------------------------------------------------------------------
# Scales


def forward_scale(isize, osize, scale: float | None, double: bool):
    """``compute_scales_value``: ``1 / scale`` if given and > 0, else ``isize / osize``.

    Static sizes give a Python float (float32-rounded unless ``double``); symbolic sizes give a
    0-d tensor holding the same value, float32 (float64 if ``double``).
    """
    if is_explicit(scale):
        return 1.0 / scale if double else round_to_float32(1.0 / scale)
    if is_static(isize, osize):
        if double:
            return isize / osize
        return round_to_float32(round_to_float32(isize) / round_to_float32(osize))
    ratio = _as_f64(isize) / _as_f64(osize)
    # float64 quotient of two ints below 2**24, rounded once more, is float32 division.
    return ratio if double else ratio.to(F32)


def cuda_backward_scale(isize, osize, scale: float | None):
    """``compute_scales_value_backwards<float>``: ``scale`` if given and > 0, else ``osize / isize``."""
    if is_explicit(scale):
        return round_to_float32(scale)
    if is_static(isize, osize):
        return round_to_float32(round_to_float32(osize) / round_to_float32(isize))
    return (_as_f64(osize) / _as_f64(isize)).to(F32)


def _as_f64(size) -> Tensor:
    return torch.scalar_tensor(size, dtype=F64)


def _widen(scale):
    """A scale (Python float or 0-d tensor) as float64, for exact float64 products.

    A float32 tensor goes through ``abs`` (a no-op: scales are positive) before the upcast:
    Inductor's joint-graph pass ``pointless_convert`` (torch 2.11) folds the chain
    ``float64 -> float32 -> float64`` into nothing and so drops the float32 rounding of the scale.
    """
    if isinstance(scale, Tensor) and scale.dtype == F32:
        return scale.abs().to(F64)
    return scale


# ---------------------------------------------------------------------------------------------
# Forward map


def _floor_f32(value: Tensor) -> Tensor:
    """``(int64) floorf((float) value)`` for a float64 ``value``."""
    return value.to(F32).floor().to(torch.int64)


def _raw_source_index(o: Tensor, scale, rule: Rule) -> Tensor:
    """``src(o)`` before the clamp to ``isize - 1``; ``o`` is int64 (any shape).

    Each float32 rounding of eager is one float32 op or one float64 -> float32 convert here,
    never a float64 -> float32 -> float64 chain (graph passes may fold those, see ``_widen``).
    """
    if rule.centre_shift:
        # area_pixel_compute_source_index(scale, o, align_corners=False) then floorf(r + 0.5).
        centre = (o.to(F64) + 0.5) * _widen(scale)  # exact in float64
        if rule.double:
            shifted = centre - 0.5  # float64 throughout (FMA would differ in the last bit only)
            return _floor_f32(shifted.clamp_min(0.0) + 0.5)
        if rule.fma:
            shifted = (centre - 0.5).to(F32)  # fmaf: exact value, one rounding
        else:
            shifted = centre.to(F32) - 0.5  # two float32 roundings
        return (shifted.clamp_min(0.0) + 0.5).floor().to(torch.int64)
    if rule.exact:
        # ``(o + 0.5) * scale`` is a double product in eager, exact, then rounded to float.
        return _floor_f32((o.to(F64) + 0.5) * _widen(scale))
    if rule.double:
        return _floor_f32(o.to(F64) * scale)
    # ``int64 * float`` in eager: o converted to float, one float32 product.
    return (o.to(F32) * scale).floor().to(torch.int64)


def source_index(o: Tensor, isize, osize, scale: float | None, rule: Rule | KernelChoice) -> Tensor:
    """Eager's input index for output indices ``o`` (int64 tensor) along one dim."""
    if isinstance(rule, KernelChoice):
        rule = rule.along(scale)
    if isinstance(rule, KernelChoice):
        return torch.where(
            rule.use_channels_last,
            source_index(o, isize, osize, scale, rule.channels_last),
            source_index(o, isize, osize, scale, rule.generic),
        )
    # Eager's special cases, checked in this order before its formula: (osize that selects it, map)
    special = []
    if rule.identity_if_equal or rule.header_special:
        special.append((isize, o))
    if rule.header_special:
        special.append((2 * isize, o // 2))
    if is_static(isize, osize):
        for size, src in special:
            if osize == size:
                return src
        special = []
    s = forward_scale(isize, osize, scale, rule.double)
    src = _raw_source_index(o, s, rule).clamp_max(isize - 1)
    # Symbolic sizes: selected at run time, not under a guard (see _size_test).
    for size, special_src in reversed(special):
        src = torch.where(_size_test(operator.eq, osize - size, 0), special_src, src)
    return src


def source_indices(isize, osize, scale, rule: Rule, device) -> Tensor:
    """``source_index`` of every output position: an int64 tensor of length ``osize``."""
    o = torch.arange(osize, dtype=torch.int64, device=device)
    return source_index(o, isize, osize, scale, rule)


# ---------------------------------------------------------------------------------------------
# Backward windows: grad_input[i] sums grad_output[lo(i) : lo(i + 1)]


def cpu_window_start(i: Tensor, isize, osize, scale, rule: Rule) -> Tensor:
    """``lo(i) = #{o < osize : src(o) < i}`` for the CPU rule (src is non-decreasing).

    ``src`` rounds, so ``lo`` is within one of the real-valued preimage ``ceil(i / s)`` (or
    ``ceil(i / s - 0.5)``); counting ``src < i`` over four candidates from two below it is exact.
    """
    # The header's special cases (osize that selects it, windows), as in ``source_index``.
    special = [(isize, i), (2 * isize, 2 * i)] if rule.header_special else []
    if is_static(isize, osize):
        for size, start in special:
            if osize == size:
                return start
        special = []
    s = forward_scale(isize, osize, scale, rule.double)
    estimate = i.to(F64) / _widen(s)
    if rule.exact:
        estimate = estimate - 0.5
    base = (estimate.ceil().to(torch.int64) - 2).clamp(0, osize)
    below = torch.zeros_like(base)
    for d in range(4):
        o = base + d
        below = below + ((o < osize) & (_raw_source_index(o, s, rule) < i)).to(torch.int64)
    start = base + below
    # The clamp to isize - 1 sends every later output to the last input.
    start = torch.where(i >= isize, osize, start).clamp_max(osize)
    # Symbolic sizes: selected at run time, not under a guard (see _size_test).
    for size, special_start in reversed(special):
        start = torch.where(_size_test(operator.eq, osize - size, 0), special_start, start)
    return start


def cuda_window_start(i: Tensor, isize, osize, scale, exact: bool) -> Tensor:
    """``nearest_neighbor{,_exact}_bw_compute_source_index`` of ATen's CUDA backward.

    ``min(ceilf(i * s), osize)``, and for exact ``ceilf(fmaf(i, s, -0.5))`` (nvcc contracts it).
    """
    s = cuda_backward_scale(isize, osize, scale)
    if exact:
        value = (i.to(F64) * _widen(s) - 0.5).to(F32)  # fmaf: exact value, one rounding
    else:
        value = i.to(F32) * s  # ``int * float``: one float32 product
    return value.ceil().to(torch.int64).clamp(0, osize)


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
    ratio = _ratio_hint(osize, isize, ceil=True)
    for r in range(ratio, 65) if torch.compiler.is_exporting() else [ratio]:
        if holds(ceil_ratio_bounds_windows(isize, osize, None, r)):
            return r
        if holds(osize <= r * isize):
            return widened(r)
    return None


def window_starts(isize, osize, scale, rule_or_cuda, device) -> Tensor:
    """``lo(i)`` for ``i`` in ``0 .. isize`` (``isize + 1`` values)."""
    i = torch.arange(isize + 1, dtype=torch.int64, device=device)
    if rule_or_cuda == "cuda":
        return cuda_window_start(i, isize, osize, scale, exact=False)
    if rule_or_cuda == "cuda-exact":
        return cuda_window_start(i, isize, osize, scale, exact=True)
    return cpu_window_start(i, isize, osize, scale, rule_or_cuda)


def _static_window_sizes(isize: int, osize: int, scale, rule_or_cuda) -> list[int]:
    with host_tensors():
        lo = window_starts(isize, osize, scale, rule_or_cuda, "cpu")
        return (lo[1:] - lo[:-1]).tolist()


# ---------------------------------------------------------------------------------------------
# Host evaluation (static sizes): fast-path proofs


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


def static_source_indices(isize: int, osize: int, scale, rule: Rule) -> list[int]:
    """Eager's map for concrete sizes, computed on the host."""
    with host_tensors():
        return source_indices(isize, osize, scale, rule, "cpu").tolist()


@dataclasses.dataclass(frozen=True)
class Pattern:
    """A map ``src(o)`` that needs no index tensor.

    kind "identity": ``o``; "repeat": ``o // factor``; "stride": ``o * factor + offset``.
    """

    kind: str
    factor: int = 1
    offset: int = 0


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
    k = _ratio_hint(osize, isize)
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
    if isinstance(rule, KernelChoice):
        rule = rule.along(scale)
    if isinstance(rule, KernelChoice):
        # Either kernel may run: a pattern only where both maps follow it.
        pattern = forward_pattern(isize, osize, scale, rule.channels_last)
        return pattern if pattern == forward_pattern(isize, osize, scale, rule.generic) else None
    if is_static(isize, osize):
        return static_pattern(isize, osize, scale, rule)
    return symbolic_pattern(isize, osize, scale, rule)


def window_rule(device: torch.device, exact: bool) -> Rule | str:
    """Which eager backward kernel's windows: a CPU ``Rule`` (adjoint of its map) or CUDA's."""
    if device.type == "cpu":
        return cpu_backward_rule(exact)
    return "cuda-exact" if exact else "cuda"


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
    k = _ratio_hint(osize, isize)
    if k < 1 or k & (k - 1) or not holds(osize <= 2**24) or not holds(osize == k * isize):
        return None
    if not is_explicit(scale) or round_to_float32(scale) == k:
        # lo(i) = ceilf(i * k) = k i exactly (and ceilf(k i - 0.5) = k i for exact).
        return Pattern("identity") if k == 1 else Pattern("repeat", k)
    return None


# ---------------------------------------------------------------------------------------------
# Periodic maps: rational ratios with a short period


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
        p, q = _lowest_terms(max(_size_hint(isize), 1), max(_size_hint(osize), 1))
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
    if isinstance(rule, KernelChoice):
        rule = rule.along(scale)
    if isinstance(rule, KernelChoice):
        period = forward_period(isize, osize, scale, rule.channels_last, max_length)
        same = period == forward_period(isize, osize, scale, rule.generic, max_length)
        return period if same else None
    return _period(isize, osize, scale, rule, backward=False, max_length=max_length)


def window_period(isize, osize, scale, rule_or_cuda, max_length: int) -> Period | None:
    """Eager's backward windows along one dim as a ``Period`` of at most ``max_length`` inputs."""
    return _period(isize, osize, scale, rule_or_cuda, backward=True, max_length=max_length)
