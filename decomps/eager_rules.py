"""Eager's source-index rule per device and kernel: which one runs, its scale, its forward map.

Eager ATen does not have one rule. Each kernel rounds the source index its own way, and which
kernel runs depends on the device, the rank, the dtype, the memory layout and the sizes. This
module names each kernel's arithmetic (``Rule``), picks the rule eager would use
(``forward_rule``, ``window_rule``), and evaluates the forward map as aten ops, so that a
decomposition's index equals eager's on every input. docs/semantics.md states the rules and where
they come from.

Everything here works on one spatial dim. Sizes may be ints or SymInts; ``scale`` is the op's
optional ``scales_*`` argument (a Python float; eager ignores values <= 0). Where eager's choice
between maps depends on symbolic sizes (CPU kernel, the header's special cases), the index is
selected at run time (``KernelChoice``, ``torch.where``), not under a guard: a guard would narrow
a ``torch.export`` program and AOTInductor drops it. The one guard, under ``torch.compile``, is a
channels-last example's channel count over 3 for nearest-exact and float64
(``_cpu_channels_last_kernel``).

Each float32 rounding of eager is one float32 op or one float64 -> float32 convert (products
that eager forms in double, or with an FMA, are exact in float64 here and converted once), never
a float64 -> float32 -> float64 chain, which Inductor may fold (see ``widen``).
"""

from __future__ import annotations

import dataclasses
import fractions
import math
import operator
import struct

import torch
from torch import Tensor

from .size_conditions import holds_where_taken, host_tensors, int32_where, is_static, scaled_size_differs, size_test

F32 = torch.float32
F64 = torch.float64


def round_to_float32(value: float) -> float:
    """The float32 nearest to ``value`` (round-half-even), as a Python float."""
    return struct.unpack("f", struct.pack("f", value))[0]


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


def _either(a: bool | Tensor, b: bool | Tensor) -> bool | Tensor:
    if isinstance(a, bool):
        return True if a else b
    if isinstance(b, bool):
        return True if b else a
    return a | b


def _cpu_channels_last_kernel(input: Tensor, output_size, guard: bool) -> bool | Tensor:
    """ATen's UpSampleKernel.cpp choice between its channels-last kernel and the generic one.

    A Python bool for static sizes, a 0-d bool tensor (see ``size_conditions.size_test``) for symbolic ones. The
    memory format stays a Python bool: strides are guarded anyway. With ``guard`` (maps that differ
    beyond the header's special cases), a symbolic channel count over 3 in the example is a guard
    (``holds_where_taken``: a layer keeps its channel count, and one map costs less than both and
    a selection); at most 3 stays a run-time test.
    """
    if input.dim() not in (4, 5):
        return False
    memory_format = torch.channels_last if input.dim() == 4 else torch.channels_last_3d
    if not bool(input.is_contiguous(memory_format=memory_format)):
        wide = False
    elif guard and holds_where_taken(input.size(1) > 3):
        wide = True
    else:
        wide = size_test(operator.gt, input.size(1), 3)
    if input.dim() == 5 or wide is True:
        return wide
    return _either(wide, size_test(operator.le, output_size[0] + output_size[1], 128))


def _cpu_kernel_maps_agree(generic: Rule, isize, osize, scale: float | None) -> bool:
    """Whether eager's two CPU forward kernels read the same inputs along a dim.

    For nearest on a non-float64 input both compute ``floor(o * s)`` with the same float32 ``s``
    (``1 / scale``, or ``fl32(I) / fl32(O)``); the channels-last kernel's header helper first
    returns ``o`` where ``O == I`` and ``o // 2`` where ``O == 2I``. Without an explicit scale
    those agree with the formula; with one they never fire where the sizes prove ``O != I`` and
    ``O != 2I`` (static sizes, or an output size computed from the scale:
    ``size_conditions.scaled_size_differs``). Checked against eager in tests/test_eager_rules.py.
    nearest-exact and float64 can differ.
    """
    if generic.exact or generic.double:
        return False
    return not is_explicit(scale) or not any(_may_equal(isize, osize, scale, k) for k in (1, 2))


def _may_equal(isize, osize, scale: float | None, k: int) -> bool:
    """Whether ``osize == k * isize`` is possible (a header special case may fire)."""
    if is_static(isize, osize):
        return osize == k * isize
    return not scaled_size_differs(isize, osize, scale, k)


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

    def along(self, isize, osize, scale: float | None) -> Rule | KernelChoice:
        """The rule of one dim: the generic one wherever both kernels' maps agree."""
        return self.generic if _cpu_kernel_maps_agree(self.generic, isize, osize, scale) else self


def rule_along(rule: Rule | KernelChoice, isize, osize, scale: float | None) -> Rule | KernelChoice:
    """``rule`` along one dim: a ``KernelChoice`` only where the two kernels' maps can differ."""
    return rule.along(isize, osize, scale) if isinstance(rule, KernelChoice) else rule


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
    if all(_cpu_kernel_maps_agree(generic, i, o, s) for i, o, s in zip(input.shape[2:], output_size, scales)):
        return generic  # whichever kernel eager runs: nothing to decide, nothing to guard
    # The channels-last kernel uses the header helpers for every dtype: float32 scale; nearest
    # has the special cases.
    channels_last = Rule(exact=exact, header_special=not exact)
    use_channels_last = _cpu_channels_last_kernel(input, output_size, guard=exact or double)
    if isinstance(use_channels_last, bool):
        return channels_last if use_channels_last else generic
    return KernelChoice(use_channels_last, channels_last, generic)


def cpu_backward_rule(exact: bool) -> Rule:
    """CPU backward scatters with the header helpers (``nearest_idx`` / ``nearest_exact_idx``)."""
    return Rule(exact=exact, header_special=not exact)


def window_rule(device: torch.device, exact: bool) -> Rule | str:
    """Which eager backward kernel's windows: a CPU ``Rule`` (adjoint of its map) or CUDA's."""
    if device.type == "cpu":
        return cpu_backward_rule(exact)
    return "cuda-exact" if exact else "cuda"


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


def widen(scale):
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


# Below this many output positions a centre ``o + 0.5`` has at most 24 significant bits: exact in
# float32.
FLOAT32_EXACT_CENTRES = 2**23


def float32_centres(osize, rule: Rule) -> bool:
    """Whether ``raw_source_index`` may compute a double-product rule's centres in float32: every
    ``o + 0.5`` below ``osize`` is exact there, and the exact double product of two such float32
    values rounded to float is their float32 product (48 significant bits fit a double). Float32
    index math runs about 1.2x faster in a GPU kernel (docs/findings.md, finding 1). Under a guard
    where the example size meets it; else the float64 form, exact for every size."""
    if not rule.exact or rule.centre_shift or rule.double:
        return False
    return holds_where_taken(osize <= FLOAT32_EXACT_CENTRES)


def _truncate(value: Tensor, dtype: torch.dtype) -> Tensor:
    """``floorf`` of a float32 ``value >= 0`` as an integer: a truncating convert, which is floor
    there (one op less per element and dim in the kernel)."""
    return value.to(dtype)


def raw_source_index(o: Tensor, scale, rule: Rule, in_float32: bool = False, dtype=torch.int64) -> Tensor:
    """``src(o)`` before the clamp to ``isize - 1``; ``o`` an integer tensor (any shape), the
    result ``dtype``, which must hold it (``map_dtype``).

    Each float32 rounding of eager is one float32 op or one float64 -> float32 convert here,
    never a float64 -> float32 -> float64 chain (graph passes may fold those, see ``widen``).
    A float64 -> float32 convert keeps its ``floor`` before the integer convert, so that no pass
    can fold the two converts into one. ``in_float32``: ``float32_centres`` holds for every ``o``.
    """
    if rule.centre_shift:
        # area_pixel_compute_source_index(scale, o, align_corners=False) then floorf(r + 0.5).
        centre = (o.to(F64) + 0.5) * widen(scale)  # exact in float64
        if rule.double:
            shifted = centre - 0.5  # float64 throughout (FMA would differ in the last bit only)
            return _floor_f32(shifted.clamp_min(0.0) + 0.5).to(dtype)
        if rule.fma:
            shifted = (centre - 0.5).to(F32)  # fmaf: exact value, one rounding
        else:
            shifted = centre.to(F32) - 0.5  # two float32 roundings
        return _truncate(shifted.clamp_min(0.0) + 0.5, dtype)
    if rule.exact:
        # ``(o + 0.5) * scale`` is a double product in eager, exact, then rounded to float.
        if in_float32:
            return _truncate((o.to(F32) + 0.5) * scale, dtype)
        return _floor_f32((o.to(F64) + 0.5) * widen(scale)).to(dtype)
    if rule.double:
        return _floor_f32(o.to(F64) * scale).to(dtype)
    # ``int64 * float`` in eager: o converted to float, one float32 product.
    return _truncate(o.to(F32) * scale, dtype)


# Bound on a 32-bit map's values (``o`` and ``src(o)``): half of int32's range, room for every
# rounding of the formulas above.
INT32_MAP_LIMIT = 2**30


def map_dtype(isize, osize, scale: float | None) -> torch.dtype:
    """The integer dtype of a dim's map (``o`` and ``src(o)``): int32 where its values fit, else
    int64.

    With symbolic sizes Inductor cannot bound the map's values, so an int64 map keeps the
    kernel's float -> integer converts, clamps and load addresses in 64 bits: on an H200,
    ``dynamic=True``, forward kernels (8,64,200,200) x1.5 f16 80.2 -> 75.0 us,
    (4,3,1234,1345)->(2345,2456) bf16 117.0 -> 89.4, (2,32,64,64,64) x1.5 bf16 95.9 -> 75.9
    (``perf/probes/map_dtype_probe.py``). The values are below ``osize`` and
    ``osize * s`` (``s = 1 / scale`` if given, else about ``isize / osize``); under a guard
    where the example sizes keep them below ``INT32_MAP_LIMIT`` (the int64 map serves every size).
    """
    bound = INT32_MAP_LIMIT
    if is_explicit(scale):
        bound = min(bound, math.floor(INT32_MAP_LIMIT * scale))
    return int32_where(osize <= bound, isize <= INT32_MAP_LIMIT)


def source_index(o: Tensor, isize, osize, scale: float | None, rule: Rule | KernelChoice) -> Tensor:
    """Eager's input index for output indices ``o`` (an integer tensor) along one dim, in ``o``'s
    dtype, or int32 where static sizes prove it fits."""
    rule = rule_along(rule, isize, osize, scale)
    if isinstance(rule, KernelChoice):
        return torch.where(
            rule.use_channels_last,
            source_index(o, isize, osize, scale, rule.channels_last),
            source_index(o, isize, osize, scale, rule.generic),
        )
    # Eager's special cases, checked in this order before its formula: (k where osize == k * isize
    # selects it, map)
    special = []
    if rule.identity_if_equal or rule.header_special:
        special.append((1, o))
    if rule.header_special:
        special.append((2, o // 2))

    def formula() -> Tensor:
        s = forward_scale(isize, osize, scale, rule.double)
        in_float32 = float32_centres(osize, rule)
        if is_static(isize, osize):
            if _static_in_range(isize, osize, s, rule, in_float32):
                # no clamp, and 32-bit index math, as Inductor's own lowering has
                return raw_source_index(o, s, rule, in_float32, torch.int32)
        elif holds_where_taken(unclamped_in_range(isize, osize, scale, rule, in_float32)):
            return raw_source_index(o, s, rule, in_float32, o.dtype)
        return raw_source_index(o, s, rule, in_float32, o.dtype).clamp_max(isize - 1)

    return with_special_cases(special, isize, osize, scale, formula)


def _float32_product(rule: Rule, in_float32: bool) -> bool:
    """Whether a rule's map is one float32 product of a float32 centre and the scale, then a
    floor: the maps whose largest index the in-range checks below bound."""
    return not (rule.centre_shift or rule.double or (rule.exact and not in_float32))


def _static_in_range(isize: int, osize: int, scale, rule: Rule, in_float32: bool) -> bool:
    """Whether a float32-product rule's largest index, at the last output position (the map does
    not decrease), is below ``isize`` without the clamp, and ``isize`` fits 32 bits. Evaluated on
    the host in Python floats: a product of two float32 values is exact in a double, so one
    rounding to float32 is eager's float32 product."""
    if not _float32_product(rule, in_float32):
        return False
    if not (0 < isize <= torch.iinfo(torch.int32).max and osize > 0 and isinstance(scale, float)):
        return False
    o = round_to_float32(osize - 1)
    if rule.exact:
        o = round_to_float32(o + 0.5)
    try:
        last = round_to_float32(o * scale)
    except OverflowError:  # past float32's range: the clamp decides
        return False
    return math.isfinite(last) and math.floor(last) <= isize - 1


# A float32 rounding (to nearest) moves a positive value up by at most this factor.
_ROUNDED_UP = fractions.Fraction(2**24 + 1, 2**24)
# Output sizes up to this keep the map of a scale computed from the sizes below ``isize``.
UNCLAMPED_OSIZE_LIMIT = 2**20


def unclamped_in_range(isize, osize, scale: float | None, rule: Rule, in_float32: bool):
    """A size condition under which a float32-product rule's map stays below ``isize`` without
    the clamp, for symbolic sizes (``False`` where none is known). Eager clamps; a kernel without
    the clamp does one op less per element and dim (a 3d x1.5 channels-last gather on CPU took
    10.53-11.55 ms with it and 9.66-10.12 without, docs/findings.md, finding 3).

    The last centre ``c = osize - 1 (+ 0.5)`` gives the largest index. Each float32 rounding
    moves a value up by at most ``1 + 2**-24`` (``u``): at most twice for ``c``, once for the
    product, and for a scale from the sizes ``fl(fl(I) / fl(O))`` at most ``(1 + u)**2 / (1 - u)``
    over ``I / O``. Without an explicit scale the index is then below
    ``(c / O) I (1 + 6.0001 u) < I`` wherever ``O <= 2**20`` (``O < 2**24 / 12`` suffices); with
    one, ``s = fl(1 / scale)`` is a constant and the condition is ``c s (1 + u)**3 < I`` itself,
    in integers (an upper bound of ``s (1 + u)**3`` with a 27-bit numerator keeps the guard's
    products in 64 bits for any tensor that fits in memory).
    """
    if not _float32_product(rule, in_float32):
        return False
    if not is_explicit(scale):
        return osize <= UNCLAMPED_OSIZE_LIMIT
    bound = fractions.Fraction(round_to_float32(1.0 / scale)) * _ROUNDED_UP**3
    shift = max(0, 26 - math.floor(math.log2(bound)))
    numerator, denominator = math.ceil(bound * 2**shift), 2**shift
    twice_last = 2 * osize - 1 if rule.exact else 2 * osize - 2
    return twice_last * numerator < 2 * isize * denominator


def with_special_cases(special, isize, osize, scale, formula) -> Tensor:
    """Eager's special cases before its formula: the first ``(k, value)`` of ``special`` with
    ``osize == k * isize`` gives ``value``, else ``formula()``. Static sizes pick on the host;
    symbolic ones select at run time, not under a guard (see size_conditions.size_test), except
    where ``osize`` provably differs (an output size computed from ``scale``:
    ``size_conditions.scaled_size_differs``)."""
    if is_static(isize, osize):
        for k, value in special:
            if osize == k * isize:
                return value
        return formula()
    result = formula()
    for k, value in reversed(special):
        if not scaled_size_differs(isize, osize, scale, k):
            result = torch.where(size_test(operator.eq, osize - k * isize, 0), value, result)
    return result


def source_indices(isize, osize, scale, rule: Rule, device, dtype=torch.int64) -> Tensor:
    """``source_index`` of every output position: a tensor of length ``osize``, in ``dtype`` (or
    int32 where static sizes prove it fits)."""
    o = torch.arange(osize, dtype=dtype, device=device)
    return source_index(o, isize, osize, scale, rule)


def static_source_indices(isize: int, osize: int, scale, rule: Rule) -> list[int]:
    """Eager's map for concrete sizes, computed on the host."""
    with host_tensors():
        return source_indices(isize, osize, scale, rule, "cpu").tolist()
