"""Forward decompositions of nearest / nearest-exact upsampling (1d, 2d, 3d).

Each spatial dim gets eager's source index from ``eager_rules``. Where eager's map provably
needs no index tensor the decomposition uses views instead: identity, ``o // k`` as
expand + reshape, ``o * k + offset`` as a strided slice (see docs/semantics.md), and on CPU a
map with a short period (a ratio such as 2 / 3) as slices of each period, concatenated. Any
other dim reads through ``aten._unsafe_index`` with an index computed in the graph from an
integer arange.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor
from torch._prims_common.wrappers import out_wrapper

from . import (
    alignment,
    aten_kernels,
    channel_rows,
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
from .ops import FORWARD
from .index_patterns import Pattern
from .layouts import output_memory_format

aten = torch.ops.aten


def _slice_strided(x: Tensor, dim: int, osize, p: Pattern) -> Tensor:
    return aten.slice(x, dim, p.offset, p.offset + (osize - 1) * p.factor + 1, p.factor)


# Longest period (outputs) of the innermost dim that becomes slices, and from which rank on,
# per device type: Inductor's C++ backend copies each slice of a cat with strided loops, where
# a gather loads element by element through a buffer (docs/findings.md, finding 3; where its
# gathers load whole vectors, kernel_choice.period_slices decides); on CUDA the cat is one masked
# kernel, slower than the gather with static shapes (perf/probes/period_probe.py).
MAX_PERIOD_SLICES = 8
PERIOD_MIN_RANK = {"cpu": 1}


def _slice_periods(x: Tensor, period: short_periods.Period) -> Tensor:
    """``out[.., m q + t] = x[.., m p + table[t]]``: the q slices of each period of x's last dim."""
    periods = x.unflatten(-1, (x.shape[-1] // period.inputs, period.inputs))
    last = periods.dim() - 1
    return torch.cat([periods.narrow(last, src, 1) for src in period.table], last).flatten(-2)


def _gather_channel_rows(x: Tensor, indices: list[Tensor | None]) -> Tensor:
    """``aten._unsafe_index(x, indices)`` for a channels-last ``x`` gathered along its innermost
    spatial dim (``indices[-1]``, 1-d): over the view of x as rows of (W * C) contiguous
    elements, output element ``j`` of a row reads ``last[j // C] * C + j % C``, a table
    computed once per call (``kernel_choice.channel_rows``)."""
    c = x.shape[1]
    rows = x.movedim(1, -1).flatten(-2)
    last = indices[-1].to(torch.int64)  # its values times c may pass int32's range
    channels = torch.arange(c, device=last.device)
    offsets = index_tables.index_table((last.unsqueeze(-1) * c + channels).flatten())
    out = index_tables.index_by_maps(rows, [*indices[:1], *indices[2:-1], offsets])
    return out.unflatten(-1, (last.shape[0], c)).movedim(-1, 1)


def upsample_nearest(
    input: Tensor,
    output_size: Sequence,
    scales: Sequence[float | None],
    exact: bool,
) -> Tensor:
    n = len(scales)  # the op's spatial rank: one scales_* argument per dim
    checks.check_forward(input, output_size, n)
    checks.check_dtype(input.dtype, f"upsample_nearest{'_exact' if exact else ''}{n}d")
    rule = eager_rules.forward_rule(input, output_size, exact, scales)
    isizes = input.shape[2:]
    patterns = [
        index_patterns.forward_pattern(i, o, s, rule) for i, o, s in zip(isizes, output_size, scales)
    ]
    memory_format = output_memory_format(input)
    output_shape = [*input.shape[:2], *output_size]
    alignment.note_alignment(
        input.device, [(input.shape, memory_format), (output_shape, memory_format)]
    )

    period = None
    sliceable = n >= PERIOD_MIN_RANK.get(input.device.type, math.inf)
    sliceable = sliceable and memory_format == torch.contiguous_format
    outer_views = all(p is not None for p in patterns[:-1])
    if sliceable and patterns[-1] is None and outer_views and kernel_choice.period_slices(input, patterns):
        # The innermost dim only, and only where no outer dim gathers: the slices then make the
        # output in one pass (two with a repeat); before an outer gather they would be an extra
        # pass over memory (3d x1.5 at 2 threads: 0.81x the gather alone).
        period = short_periods.forward_period(
            isizes[-1], output_size[-1], scales[-1], rule, MAX_PERIOD_SLICES
        )
        if period is not None:
            patterns[-1] = Pattern("identity")  # after the slices: equal sizes
    if kernel_choice.aten_forward(input, patterns):
        return aten_kernels.upsample_nearest(input, output_size, scales, exact)
    if kernel_choice.channel_rows_kernel(input, output_size, patterns):
        kernel_scales = channel_rows.kernel_scales(isizes, output_size, scales, rule)
        if kernel_scales is not None:
            return channel_rows.gather_channel_rows(input, output_size, kernel_scales, exact)
    if period is None and kernel_choice.repeat_op(input, patterns):
        rows, factors, back = repeats.channels_last_rows(input, index_patterns.repeat_factors(patterns))
        return back(repeat_kernels.upsample_repeat(rows, factors))

    x = input
    for d, (p, o) in enumerate(zip(patterns, output_size)):
        if p is not None and p.kind == "stride":
            x = _slice_strided(x, 2 + d, o, p)
    concatenated = None
    if period is not None:
        x = concatenated = _slice_periods(x, period)
    if all(p is not None for p in patterns):
        factors = index_patterns.repeat_factors(patterns)
        if any(k > 1 for k in factors):
            x = repeats.repeat(x, factors)
        # A cat's output is already a new contiguous tensor: a clone would copy it once more.
        return x if x is concatenated else x.clone(memory_format=memory_format)

    # Index tensors for every dim from the first to the last one that still moves data
    # (adjacent advanced indices keep their place); dims outside that range stay whole.
    moving = [d for d, p in enumerate(patterns) if p is None or p.kind == "repeat"]
    first, last = moving[0], moving[-1]
    rows = kernel_choice.channel_rows(input, patterns)
    repeat_map = kernel_choice.repeat_map(input, patterns)
    indices: list[Tensor | None] = [None] * (2 + first)
    tables = False
    for d in range(first, last + 1):
        dtype = eager_rules.map_dtype(isizes[d], output_size[d], scales[d])
        o = torch.arange(output_size[d], dtype=dtype, device=input.device)
        p = patterns[d]
        if p is None or (repeat_map and p.kind == "repeat"):
            dim_rule = eager_rules.rule_along(rule, isizes[d], output_size[d], scales[d])
            idx = eager_rules.source_index(o, isizes[d], output_size[d], scales[d], dim_rule)
            innermost = d == n - 1 and memory_format == torch.contiguous_format
            # The rows' table holds the innermost map already (_gather_channel_rows).
            table = not (rows and d == n - 1) and kernel_choice.index_table(input, innermost, dim_rule)
            if table:
                idx = index_tables.index_table(idx)
                tables = True
        elif p.kind == "repeat":
            idx = o // p.factor
        else:  # identity, or a stride already applied as a slice
            idx = o
        indices.append(idx.view([-1] + [1] * (last - d)))
    if rows:
        x = _gather_channel_rows(x, indices)
    else:
        x = (index_tables.index_by_maps if tables else aten._unsafe_index)(x, indices)
    # clone, not contiguous: size-1 dims would keep non-canonical strides.
    return x.clone(memory_format=memory_format)


def meta_default(n: int, input: Tensor, output_size: Sequence, *scales, **named_scales) -> Tensor:
    """Meta kernel of the rank-``n`` forward ``.default`` overloads while installed (the scales do
    not change the output's shape).

    torch's Python meta kernels pass ``input.numel() != 0 or <product of sizes>`` (an int) to
    ``torch._check``, a TypeError for an empty batch; stock never reaches them (its Python
    kernels decompose above autograd), the package does. Same checks with bools, eager's layout.
    """
    checks.check_forward(input, output_size, n)
    output = input.new_empty([*input.shape[:2], *output_size])
    return output.contiguous(memory_format=output_memory_format(input))


def _registered(exact: bool, rank: int):
    packet = FORWARD[(rank, exact)]
    return register(packet.default, packet.out)


@_registered(exact=False, rank=1)
@out_wrapper(preserve_memory_format=True, exact_dtype=True)
def upsample_nearest1d(input: Tensor, output_size: Sequence, scales: float | None = None) -> Tensor:
    return upsample_nearest(input, output_size, [scales], exact=False)


@_registered(exact=True, rank=1)
@out_wrapper(preserve_memory_format=True, exact_dtype=True)
def upsample_nearest_exact1d(
    input: Tensor, output_size: Sequence, scales: float | None = None
) -> Tensor:
    return upsample_nearest(input, output_size, [scales], exact=True)


@_registered(exact=False, rank=2)
@out_wrapper(preserve_memory_format=True, exact_dtype=True)
def upsample_nearest2d(
    input: Tensor,
    output_size: Sequence,
    scales_h: float | None = None,
    scales_w: float | None = None,
) -> Tensor:
    return upsample_nearest(input, output_size, [scales_h, scales_w], exact=False)


@_registered(exact=True, rank=2)
@out_wrapper(preserve_memory_format=True, exact_dtype=True)
def upsample_nearest_exact2d(
    input: Tensor,
    output_size: Sequence,
    scales_h: float | None = None,
    scales_w: float | None = None,
) -> Tensor:
    return upsample_nearest(input, output_size, [scales_h, scales_w], exact=True)


@_registered(exact=False, rank=3)
@out_wrapper(preserve_memory_format=True, exact_dtype=True)
def upsample_nearest3d(
    input: Tensor,
    output_size: Sequence,
    scales_d: float | None = None,
    scales_h: float | None = None,
    scales_w: float | None = None,
) -> Tensor:
    return upsample_nearest(input, output_size, [scales_d, scales_h, scales_w], exact=False)


@_registered(exact=True, rank=3)
@out_wrapper(preserve_memory_format=True, exact_dtype=True)
def upsample_nearest_exact3d(
    input: Tensor,
    output_size: Sequence,
    scales_d: float | None = None,
    scales_h: float | None = None,
    scales_w: float | None = None,
) -> Tensor:
    return upsample_nearest(input, output_size, [scales_d, scales_h, scales_w], exact=True)


def output_size_from_scales(input: Tensor, output_size, scale_factors, n: int):
    """``compute_output_size`` of UpSample.cpp and ``get_scale_value`` of the op's ``n`` dims,
    for the ``.vec`` overloads: the output size and the ``scales_*`` of ``.default``."""
    checks.check_vec_arguments(output_size, scale_factors, input.dim() - 2)
    if output_size is not None:
        return list(output_size), [None] * n
    for isize, s in zip(input.shape[2:], scale_factors):
        checks.check_output_size_from_factor(isize, s)
    sizes = [size_conditions.scaled_size(isize, s) for isize, s in zip(input.shape[2:], scale_factors)]
    checks.check_scale_count(scale_factors, n)
    return sizes, list(scale_factors)[:n]


_RANK = {packet.default: rank for (rank, _), packet in FORWARD.items()}


def vec_to_default(default, input: Tensor, output_size, scale_factors) -> Tensor:
    """``.vec`` as a call of its ``.default`` overload, SymInt sizes included.

    ATen's C++ CompositeImplicitAutograd kernel does the same but takes concrete sizes only;
    installation registers this in its place (with ``default`` bound) for tracing.
    """
    osize, scales = output_size_from_scales(input, output_size, scale_factors, _RANK[default])
    return default(input, osize, *scales)


def _vec_decomposition(rank: int, exact: bool):
    def upsample_nearest_vec(
        input: Tensor, output_size: Sequence | None, scale_factors: Sequence[float] | None
    ) -> Tensor:
        osize, scales = output_size_from_scales(input, output_size, scale_factors, rank)
        return upsample_nearest(input, osize, scales, exact)

    upsample_nearest_vec.__name__ = f"upsample_nearest{'_exact' if exact else ''}{rank}d_vec"
    return upsample_nearest_vec


def _register_vec_decompositions() -> None:
    # One per op: the rank comes from the op, not from the input (eager checks it against both).
    for (rank, exact), packet in FORWARD.items():
        register(packet.vec)(_vec_decomposition(rank, exact))


_register_vec_decompositions()
