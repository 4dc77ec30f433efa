"""Backward decompositions of nearest / nearest-exact upsampling, as gathers.

Each grad_input element sums the window of grad_output that eager's backward kernel assigns to it,
``grad_output[lo(i) : lo(i + 1)]`` per spatial dim, with ``lo`` from ``backward_windows``: no scatter,
no atomics, no zero-fill pass, deterministic. Windows that follow an index-free pattern become
views: ``reshape + sum`` for ``o // k`` maps, zero padding for strided downsampling. Where every
window holds at most one output (a downsample), each gradient element is instead stored into its
input (``_store_to_owners``, where ``kernel_choice.plain_store`` says): a scatter without
collisions, deterministic without accumulation.
float16 / bfloat16 accumulate in float32 and round once, as eager's opmath does.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import Tensor
from torch._prims_common import suggest_memory_format
from torch._prims_common.wrappers import out_wrapper

from . import (
    alignment,
    aten_kernels,
    backward_windows,
    checks,
    eager_rules,
    index_patterns,
    index_tables,
    kernel_choice,
    repeat_kernels,
    repeats,
    short_periods,
    size_conditions,
)
from ._registry import register
from .ops import BACKWARD
from .index_patterns import Pattern
from .layouts import backward_memory_format

aten = torch.ops.aten


def _dim_pattern(isize, osize, scale, rule) -> Pattern | None:
    if size_conditions.is_static(isize, osize):
        return index_patterns.static_window_pattern(isize, osize, scale, rule)
    return index_patterns.symbolic_window_pattern(isize, osize, scale, rule)


def _unstride(g: Tensor, dim: int, p: Pattern) -> Tensor:
    """Adjoint of a strided slice: ``out[m k + offset] = g[m]``, zero elsewhere, as a pad."""
    g = g.unsqueeze(dim + 1)
    pad = [0, 0] * (g.dim() - dim - 2) + [p.offset, p.factor - 1 - p.offset]
    g = aten.constant_pad_nd(g, pad, 0)
    return g.flatten(dim, dim + 1)


# Spatial ranks whose CUDA window starts are int32 where they fit (``cuda_window_dtype``). In 2d
# the channels-last backward gathers gained (H200, `dynamic=True`, training step kernels:
# (4,3,1234,1345)->(2345,2456) bf16 405.5 -> 333.2 us, (4,3,2345,2456)->(1234,1345) f32
# 520.7 -> 404.7); in 3d the channels_last_3d x1.5 f32 step lost (1395.2 -> 1864.0).
INT32_WINDOW_MAX_RANK = 2


def _window_dtype(isize, osize, scale, rule, rank: int) -> torch.dtype:
    """The integer dtype of a dim's window starts and owners: int32 for CUDA's rules up to
    ``INT32_WINDOW_MAX_RANK`` where ``cuda_window_dtype`` allows it, else int64."""
    if rule in backward_windows.CUDA_RULES and rank <= INT32_WINDOW_MAX_RANK:
        return backward_windows.cuda_window_dtype(isize, osize, scale)
    return torch.int64


def _window_starts(isize, osize, scale, rule, device, identity_if, rank: int) -> Tensor:
    dtype = _window_dtype(isize, osize, scale, rule, rank)
    lo = backward_windows.window_starts(isize, osize, scale, rule, device, dtype)
    if identity_if is not None:
        lo = torch.where(identity_if, torch.arange(isize + 1, dtype=lo.dtype, device=device), lo)
    return lo


# Up to this many window positions per grad_input element, the gather is an unrolled sum (one
# pointwise kernel); beyond it a sum over window dims, which Inductor makes a reduction kernel.
# Measured on an H200 (docs/perf.md, finding 2): unrolled is 1.4-4x faster for 2d windows (up
# to 4 x 4), and slower than the reduction for 27 positions (3d, 3 x 3 x 3).
MAX_UNROLLED_TAPS = 16


# Longest period (inputs) of the innermost dim whose windows become sums of slices, and from
# which rank on, per device type. Measured with perf/probes/period_probe.py (docs/perf.md, finding 3):
# on CPU they beat the gather in every rank; on an H200 in 2d (x1.5 f16: 1.25x static, 1.45x
# dynamic) and 3d (1.03x / 1.08x), not in 1d (0.85x dynamic).
MAX_PERIOD_SUMS = 8
PERIOD_MIN_RANK = {"cpu": 1, "cuda": 2}


# Device types whose outer dims with runtime sizes (symbolic, no size variants) sum their periods
# too, up to this rank, where every dim inside them gathers no index; the alternative is ATen's kernel
# (kernel_choice.aten_backward). On an H200, backward kernels per call with dynamic shapes (us,
# sums of periods / ATen's; perf/probes/gather_backward_probe.py, 2026-11-23): x1.5 f16
# (8, 64, 200, 200) 104.6 / 117.2; 3d x1.5 (2, 32, 64, 64, 64) f32 200.5 / 201.5, bf16 249.4 / 200.1.
OUTER_PERIOD_DEVICES = ("cuda",)
OUTER_PERIOD_MAX_RANK = 2


def _outer_period_applies(grad_output: Tensor, constant: bool) -> bool:
    rank = grad_output.dim() - 2
    return not constant and grad_output.device.type in OUTER_PERIOD_DEVICES and rank <= OUTER_PERIOD_MAX_RANK


def _sum_periods(g: Tensor, period: short_periods.Period, dim: int) -> Tensor:
    """``out[.., m p + j, ..] = sum(g[.., m q + table[j] : m q + table[j + 1], ..])`` along
    ``dim``: the window sums of each of its periods, from slices, concatenated."""
    periods = g.unflatten(dim, (g.shape[dim] // period.outputs, period.outputs))
    within = dim + 1
    sums = []
    for start, end in zip(period.table, period.table[1:]):
        if end == start:  # no output reads this input
            sums.append(torch.zeros_like(periods.narrow(within, 0, 1)))
            continue
        # adds in eager's order, not a sum: a reduction would keep Inductor from fusing the cat
        # into its users (another dim's sums), and realize each slice on its own
        total = periods.narrow(within, start, 1)
        for k in range(start + 1, end):
            total = total + periods.narrow(within, k, 1)
        sums.append(total)
    return torch.cat(sums, within).flatten(dim, within)


def _gather_windows(g: Tensor, input_size, output_size, scales, rule, first, last, identity_if):
    """``sum_j g[.., lo(i) + j, ..]`` over ``j < lo(i + 1) - lo(i)`` for dims first..last.

    None where some dim's window length has no bound the graph may rely on.
    """
    span = last - first + 1
    bounds = []
    for d in range(first, last + 1):
        bounds.append(backward_windows.window_bound(input_size[2 + d], output_size[d], scales[d], rule))
        if bounds[-1] is None:
            return None
    starts = [
        _window_starts(input_size[2 + d], output_size[d], scales[d], rule, g.device, identity_if, len(output_size))
        for d in range(first, last + 1)
    ]
    if kernel_choice.positions_in_gather(g, math.prod(bounds), span):
        return index_tables.gather_window_starts(g, 2 + first, starts)
    # Per moving dim, (isize, bound): the output index of each window position, and the end of
    # its window.
    spans = []
    for d, bound, lo in zip(range(first, last + 1), bounds, starts):
        idx = lo[:-1].unsqueeze(1) + torch.arange(bound, dtype=lo.dtype, device=g.device)
        spans.append((idx, lo[1:].unsqueeze(1), output_size[d]))
    if kernel_choice.window_table(g, span):
        # Each dim's positions as one tensor, -1 outside the window (where the gather reads index
        # 0 and drops it), all dims' in one table built by one kernel.
        windows = [torch.where(idx < end, idx, -1) for idx, end, _ in spans]
        table = index_tables.index_table(torch.cat([w.flatten() for w in windows]))
        windows = [t.view(w.shape) for t, w in zip(table.split([w.numel() for w in windows]), windows)]
        positions = [w.clamp_min(0) for w in windows]
        inside = [w >= 0 for w in windows]
    else:
        # The index (clamped: always a valid read) and the mask apart. Several taps read each,
        # and Inductor realizes a reused pointwise of over 30 ops (``realize_opcount_threshold``)
        # in a kernel of its own: the -1 form, whose positions and masks each hold both window
        # ends, took two kernels before x1.5 f16's gather (H200); these take none. Nearest-exact's
        # mask (two float64 window starts) is 25 ops; a run-time size test in each start (where no
        # scale rules equal sizes out, below) takes it over 30.
        positions = [idx.clamp_max(osize - 1) for idx, _, osize in spans]
        inside = [idx < end for idx, end, _ in spans]
    trailing = [1] * (g.dim() - 2 - (last + 1))
    lead: list[Tensor | None] = [None] * (2 + first)

    if math.prod(bounds) <= MAX_UNROLLED_TAPS:
        # Per moving dim and window position j: (index, inside), broadcast over the moving dims.
        taps = []
        for t, bound in enumerate(bounds):
            shape = [1] * span
            shape[t] = input_size[2 + first + t]
            taps.append([(positions[t][:, j].view(shape), inside[t][:, j].view(shape + trailing))
                         for j in range(bound)])
        total = None
        for combination in itertools.product(*taps):
            valid = combination[0][1]
            for _, in_window in combination[1:]:
                valid = valid & in_window
            term = torch.where(valid, aten._unsafe_index(g, lead + [i for i, _ in combination]), 0)
            total = term if total is None else total + term
        return total

    # (.., isize_first.., bound_first.., trailing): window positions in their own dims, summed.
    indices, valid = [], None
    for t, bound in enumerate(bounds):
        shape = [1] * (2 * span)
        shape[t], shape[span + t] = input_size[2 + first + t], bound
        indices.append(positions[t].view(shape))
        in_window = inside[t].view(shape)
        valid = in_window if valid is None else valid & in_window
    windows = aten._unsafe_index(g, lead + indices)
    windows = torch.where(valid.view(list(valid.shape) + trailing), windows, 0)
    return windows.sum(list(range(2 + first + span, 2 + first + 2 * span)))


# Device types whose channels-last 2d gathers over symbolic sizes run over the (N, H, W, C)
# view, channels innermost. Over (N, C, H, W) ranges Inductor tiles such a gather with a spatial
# dim as the vector dim, whose elements lie C apart in memory. On an H200, x1.5 float16
# (8, 64, 200, 200) channels-last backward kernels: 649 -> 39 us with dynamic shapes (eager's:
# 226); with static ones the (N, C, H, W) gather is the faster, 37 us against 96
# (perf/probes/gather_backward_probe.py; docs/findings.md, finding 2).
CHANNELS_INNERMOST_DEVICES = ("cuda",)


def _gather_channels_innermost(g: Tensor, input_size, output_size, scales, rule, first, last, identity_if):
    """``_gather_windows`` of a channels-last 4-d ``g`` over its (N, 1, H, W, C) view, the
    channels a trailing dim; the result, permuted back, has eager's channels-last strides."""
    rows = g.permute(0, 2, 3, 1).unsqueeze(1)
    sizes = [input_size[0], 1, *input_size[2:], input_size[1]]
    summed = _gather_windows(rows, sizes, output_size, scales, rule, first, last, identity_if)
    return None if summed is None else summed.squeeze(1).permute(0, 3, 1, 2)


def _scatter_to_sources(g: Tensor, input_size, output_size, scales, rule, first, last, identity_if):
    """``grad_input[i] += g[o]`` for every ``o`` in ``i``'s window, dims first..last: the
    fallback where no window bound holds for every size the graph may see (exporting).

    ``o`` belongs to the ``i`` with ``lo(i) <= o < lo(i + 1)``; an ``o`` past ``lo(isize)``
    (CUDA may end the last window early) goes to a spare row that is cut off.
    """
    indices: list[Tensor | None] = [None] * (2 + first)
    shape = list(g.shape)
    for d in range(first, last + 1):
        isize, osize = input_size[2 + d], output_size[d]
        lo = _window_starts(isize, osize, scales[d], rule, g.device, identity_if, len(output_size))
        o = torch.arange(osize, dtype=lo.dtype, device=g.device)
        owner = torch.searchsorted(lo[1:], o, right=True)
        indices.append(owner.view([-1] + [1] * (last - d)))
        shape[2 + d] = isize + 1
    summed = aten.index_put(g.new_zeros(shape), indices, g, accumulate=True)
    for d in range(first, last + 1):
        summed = summed.narrow(2 + d, 0, input_size[2 + d])
    return summed


def _owners(isize, osize, scale, rule, device, rank: int) -> Tensor:
    """``owner(o)``: the ``i`` with ``lo(i) <= o < lo(i + 1)``, for every output ``o``, where the
    windows cover every output (``backward_windows.injective_windows``). For a CPU rule, whose
    windows are the exact preimage of the non-decreasing ``src``, that is ``src(o)``, in the
    forward map's integer type (int32 where it fits: the store's index vectors are half as wide)."""
    if isinstance(rule, eager_rules.Rule):
        return eager_rules.source_indices(isize, osize, scale, rule, device, eager_rules.map_dtype(isize, osize, scale))
    o = torch.arange(osize, dtype=_window_dtype(isize, osize, scale, rule, rank), device=device)
    return backward_windows.cuda_window_owner(o, isize, osize, scale, rule == "cuda-exact")


def _store_to_owners(g: Tensor, input_size, output_size, scales, rule, memory_format) -> Tensor:
    """``grad_input[owner(o)] = g[o]`` into zeros, where no input receives two outputs
    (``backward_windows.injective_windows`` in every dim): the adjoint is then a scatter without
    collisions, which a plain store makes deterministic (no accumulation, no atomics), and each
    stored value is eager's (a sum of one element)."""
    n = len(output_size)
    owners = [_owners(input_size[2 + d], output_size[d], scales[d], rule, g.device, n) for d in range(n)]
    store = aten._unsafe_index_put
    if kernel_choice.owner_table(g):
        # every dim's owners in one table: one kernel computes them all; stored through as they
        # are (no negative-index wrap, no bounds check: owners are inputs, no two equal)
        owners = index_tables.index_table(torch.cat(owners)).split(list(output_size))
        store = index_tables.index_put_by_maps
    indices = [owner.view([-1] + [1] * (n - 1 - d)) for d, owner in enumerate(owners)]
    if memory_format == torch.channels_last:  # over the (N, H, W, C) view: eager's strides
        zeros = g.new_zeros([input_size[0], *input_size[2:], input_size[1]])
        stored = store(zeros, [None, *indices], g.permute(0, 2, 3, 1))
        return stored.permute(0, 3, 1, 2)
    return store(g.new_zeros(list(input_size)), [None, None, *indices], g)


def upsample_nearest_backward(
    grad_output: Tensor,
    output_size: Sequence,
    input_size: Sequence,
    scales: Sequence[float | None],
    exact: bool,
) -> Tensor:
    n = len(scales)  # the op's spatial rank: one scales_* argument per dim
    checks.check_backward(grad_output, output_size, input_size, n, exact)
    memory_format = backward_memory_format(grad_output)
    alignment.note_alignment(
        grad_output.device,
        [(grad_output.shape, suggest_memory_format(grad_output)), (input_size, memory_format)],
    )
    dtype = grad_output.dtype
    isizes = input_size[2:]
    identity_if = None  # CUDA 2d, symbolic sizes: a 0-d bool, the sizes match at run time
    if n == 2 and grad_output.device.type != "cpu":
        # CUDA's 2d backward copies when the sizes match, whatever the scales.
        if all(size_conditions.holds(o == i) for o, i in zip(output_size, isizes)):
            return grad_output.clone(memory_format=memory_format)
        # Without an explicit scale the windows are [i, i + 1) there anyway. Where some dim's output
        # size, computed from its scale, provably differs from its input size, no run-time test.
        explicit = any(eager_rules.is_explicit(s) for s in scales)
        if explicit and not any(
            size_conditions.scaled_size_differs(i, o, s, 1) for i, o, s in zip(isizes, output_size, scales)
        ):
            identity_if = size_conditions.sizes_equal(output_size, isizes)

    rule = eager_rules.window_rule(grad_output.device, exact)
    patterns = [_dim_pattern(i, o, s, rule) for i, o, s in zip(isizes, output_size, scales)]

    static = [size_conditions.is_static(i, o) for i, o in zip(isizes, output_size)]
    # sizes the kernels see as constants: static ones, and symbolic ones under size variants
    constant = [True] * n if kernel_choice.sizes_at_launch(grad_output, math.prod(input_size)) else static
    periods = {}  # spatial dim -> its Period, innermost first
    sliceable = n >= PERIOD_MIN_RANK.get(grad_output.device.type, math.inf)
    sliceable = sliceable and memory_format == torch.contiguous_format
    for d in reversed(range(n) if sliceable else ()):
        if patterns[d] is None and (d == n - 1 or _outer_period_applies(grad_output, constant[d])):
            period = short_periods.window_period(isizes[d], output_size[d], scales[d], rule, MAX_PERIOD_SUMS)
            if period is not None:
                periods[d] = period
                patterns[d] = Pattern("identity")  # after the sums: equal sizes, unit windows
        if patterns[d] is None:
            break  # outer dims gather whole rows
    if not periods and identity_if is None and kernel_choice.plain_store(grad_output, patterns, constant) and all(
        backward_windows.injective_windows(i, o, s, rule) for i, o, s in zip(isizes, output_size, scales)
    ):
        return _store_to_owners(grad_output, input_size, output_size, scales, rule, memory_format)
    if kernel_choice.aten_backward(grad_output, patterns, constant):
        return aten_kernels.upsample_nearest_backward(grad_output, output_size, input_size, scales, exact)
    if not periods and kernel_choice.repeat_op(grad_output, patterns):
        rows, factors, back = repeats.channels_last_rows(grad_output, index_patterns.repeat_factors(patterns))
        return back(repeat_kernels.upsample_repeat_backward(rows, factors))

    g = grad_output.to(repeats.accumulation_dtype(dtype))
    concatenated = None
    for d, period in periods.items():
        g = concatenated = _sum_periods(g, period, 2 + d)
        output_size = [*output_size[:d], isizes[d], *output_size[d + 1:]]
        scales = [*scales[:d], None, *scales[d + 1:]]

    if all(p is not None for p in patterns):
        for d, p in enumerate(patterns):
            if p.kind == "stride":
                g = _unstride(g, 2 + d, p)
        factors = index_patterns.repeat_factors(patterns)
        if any(k > 1 for k in factors):
            g = repeats.sum_repeats(g, factors)
    else:
        moving = [d for d, p in enumerate(patterns) if p is None or p.kind != "identity"]
        args = (input_size, output_size, scales, rule, moving[0], moving[-1], identity_if)
        # symbolic sizes, with or without size variants: over the view, with variants, the x1.5
        # f16 step's kernels took 75.2 us, the static graph's 74.8 (docs/findings.md, finding 1)
        channels_last = memory_format == torch.channels_last and not all(static)
        if channels_last and g.device.type in CHANNELS_INNERMOST_DEVICES:
            summed = _gather_channels_innermost(g, *args)
            if summed is not None:  # a new tensor in eager's layout
                return summed.to(dtype)
        summed = _gather_windows(g, *args)
        g = _scatter_to_sources(g, *args) if summed is None else summed
    if g is concatenated:  # already a new contiguous tensor: a clone would copy it once more
        return g.to(dtype)
    # clone, not contiguous: never alias grad_output, canonical strides for size-1 dims.
    return g.to(dtype).clone(memory_format=memory_format)


def _registered(exact: bool, rank: int):
    packet = BACKWARD[(rank, exact)]
    return register(packet.default, packet.grad_input)


_grad_input = out_wrapper("grad_input", preserve_memory_format=True, exact_dtype=True)


@_registered(exact=False, rank=1)
@_grad_input
def upsample_nearest1d_backward(
    grad_output: Tensor, output_size: Sequence, input_size: Sequence, scales: float | None = None
) -> Tensor:
    return upsample_nearest_backward(grad_output, output_size, input_size, [scales], exact=False)


@_registered(exact=True, rank=1)
@_grad_input
def upsample_nearest_exact1d_backward(
    grad_output: Tensor, output_size: Sequence, input_size: Sequence, scales: float | None = None
) -> Tensor:
    return upsample_nearest_backward(grad_output, output_size, input_size, [scales], exact=True)


@_registered(exact=False, rank=2)
@_grad_input
def upsample_nearest2d_backward(
    grad_output: Tensor,
    output_size: Sequence,
    input_size: Sequence,
    scales_h: float | None = None,
    scales_w: float | None = None,
) -> Tensor:
    return upsample_nearest_backward(
        grad_output, output_size, input_size, [scales_h, scales_w], exact=False
    )


@_registered(exact=True, rank=2)
@_grad_input
def upsample_nearest_exact2d_backward(
    grad_output: Tensor,
    output_size: Sequence,
    input_size: Sequence,
    scales_h: float | None = None,
    scales_w: float | None = None,
) -> Tensor:
    return upsample_nearest_backward(
        grad_output, output_size, input_size, [scales_h, scales_w], exact=True
    )


@_registered(exact=False, rank=3)
@_grad_input
def upsample_nearest3d_backward(
    grad_output: Tensor,
    output_size: Sequence,
    input_size: Sequence,
    scales_d: float | None = None,
    scales_h: float | None = None,
    scales_w: float | None = None,
) -> Tensor:
    return upsample_nearest_backward(
        grad_output, output_size, input_size, [scales_d, scales_h, scales_w], exact=False
    )


@_registered(exact=True, rank=3)
@_grad_input
def upsample_nearest_exact3d_backward(
    grad_output: Tensor,
    output_size: Sequence,
    input_size: Sequence,
    scales_d: float | None = None,
    scales_h: float | None = None,
    scales_w: float | None = None,
) -> Tensor:
    return upsample_nearest_backward(
        grad_output, output_size, input_size, [scales_d, scales_h, scales_w], exact=True
    )
