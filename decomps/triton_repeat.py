"""Triton kernels of the integer repeat (``repeat_kernels``) on contiguous CUDA tensors (a
channels-last tensor arrives as its contiguous (N, H, W, C) view: ``repeats.channels_last_rows``).

Both kernels work on rows: an output row of the forward is one input row, each element written
``KW`` times; a grad_input row of the backward sums ``KD * KH`` grad_output rows of ``KW``
columns per element. Rows are whole vectors, so both read and write with contiguous vector
accesses: the forward loads ``BLOCK_W / KW`` inputs and duplicates them with ``tl.interleave``,
the backward loads ``BLOCK_W * KW`` gradients and splits them into their ``KW`` columns with
``tl.split``. Divisions by sizes happen once per row. The forward also writes into a slice of
a larger output (``lowerings.repeat.cat``: a cat's input, copied with factors 1). On an H200 (x2,
(8, 256, 128, 128) bf16, profiler): forward 82.9 us static or dynamic, where Inductor's static
kernel takes 90.9 and the copy floor is 79; forward and backward together 162 us
(docs/findings.md, finding 7).

The backward adds in eager's order (window rows in order, then columns, from zero, in float32
for half types), so its result is eager's bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import triton
import triton.language as tl
from torch import Tensor

# What a program writes, measured best on an H200 at 4 warps (perf.probes.repeat_launch_probe):
# 4 KB of output in the forward (1024 float32, 2048 bfloat16: x2 bfloat16 (8, 256, 128, 128)
# 82.9 us against 88.8 at 1024), 512 grad_input elements in the backward.
FORWARD_BYTES_PER_PROGRAM = 4096
BACKWARD_ELEMENTS_PER_PROGRAM = 512
MAX_BLOCK_W = 512
# The forward writes with streaming stores (``.cs``: evict first, the output is not read back
# from L2) from this many output bytes. On an H200, kernels by the profiler: 512 MiB float32
# x2 162.8-162.9 us against 164.0, 2 GiB x4 564.4 against 567.7, 3d x2 147.7 against 148.9, 256
# MiB bfloat16 x2 79.8 against 79.9; the 64 MiB (16, 64, 16000) float32 x2 46.9 against 46.6.
STREAM_STORE_BYTES = 2**28


@triton.jit
def _program(width, BLOCK_W: tl.constexpr):
    # (row block, column block) of this program in a 1-d grid of cdiv(width, BLOCK_W) column
    # blocks per row block: neighbouring programs write neighbouring memory.
    columns = tl.cdiv(width, BLOCK_W)
    program = tl.program_id(0)
    row_block = program // columns
    return row_block, program - row_block * columns


@triton.jit
def repeat_rows(
    in_ptr, out_ptr, rows, h_in, h_out, w_in, w_out, block_rows, block_stride, out_offset,
    KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_W: tl.constexpr, STREAM: tl.constexpr,
):
    # rows: N * C * [D_out *] H_out output rows of w_out elements. Output row r starts at
    # out_offset + (r // block_rows) * block_stride + (r % block_rows) * w_out: its own tensor
    # (block_rows = rows) or a slice of a cat's output (block_rows rows per block of the cat).
    row_block, column = _program(w_out, BLOCK_W)
    r = row_block * ROWS + tl.arange(0, ROWS)[:, None]
    plane = r // h_out  # (n, c[, d_out]) of the row
    source = (plane // KD) * h_in + (r - plane * h_out) // KH
    wi = column * (BLOCK_W // KW) + tl.arange(0, BLOCK_W // KW)[None, :]
    v = tl.load(in_ptr + (source * w_in + wi), (r < rows) & (wi < w_in))
    if KW >= 2:
        v = tl.interleave(v, v)
    if KW == 4:
        v = tl.interleave(v, v)
    w = column * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    block = r // block_rows
    start = out_offset + block * block_stride + (r - block * block_rows) * w_out
    if STREAM:
        tl.store(out_ptr + (start + w), v, (r < rows) & (w < w_out), cache_modifier=".cs")
    else:
        tl.store(out_ptr + (start + w), v, (r < rows) & (w < w_out))


@triton.jit
def window_sum_rows(
    g_ptr, out_ptr, rows, h_in, h_out, w_in, w_out,
    KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_W: tl.constexpr,
):
    # rows: N * C * [D_in *] H_in grad_input rows of w_in elements.
    row_block, column = _program(w_in, BLOCK_W)
    r = row_block * ROWS + tl.arange(0, ROWS)[:, None]
    plane = r // h_in
    h = r - plane * h_in
    wo = column * (BLOCK_W * KW) + tl.arange(0, BLOCK_W * KW)[None, :]
    read = (r < rows) & (wo < w_out)
    acc = tl.zeros((ROWS, BLOCK_W), tl.float32)
    for jd in tl.static_range(KD):
        for jh in tl.static_range(KH):
            row = (plane * KD + jd) * h_out + h * KH + jh
            t = tl.load(g_ptr + (row * w_out + wo), read).to(tl.float32)
            if KW == 1:
                acc = acc + t
            elif KW == 2:
                c0, c1 = tl.split(tl.reshape(t, (ROWS, BLOCK_W, 2)))
                acc = acc + c0
                acc = acc + c1
            else:  # KW == 4: [.., 4] as [.., 2, 2]; the outer split takes columns (0, 2), (1, 3)
                even, odd = tl.split(tl.reshape(t, (ROWS, BLOCK_W, 2, 2)))
                c0, c2 = tl.split(even)
                c1, c3 = tl.split(odd)
                acc = acc + c0
                acc = acc + c1
                acc = acc + c2
                acc = acc + c3
    w = column * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    tl.store(out_ptr + (r * w_in + w), acc.to(out_ptr.dtype.element_ty), (r < rows) & (w < w_in))


def row_shapes(narrow: Sequence, wide: Sequence, factors: Sequence[int]) -> tuple[list, list, list[int]]:
    """The (narrow, wide, factors) the kernels run over: where only the innermost dim repeats,
    the rows of the contiguous tensors concatenate into one row, with no partial column block
    per row (x2 on an H200, forward kernels: (16, 64, 16001) bfloat16 25.3 us against 32.8 per
    row, (8, 32, 48001) 19.5 against 25.5; float32 48.8 / 37.0 against 50.3 / 38.3). For
    sizes known at launch: ``lowerings.repeat`` keeps rows for symbolic ones, where the one
    row's offsets and masks carry no divisibility (bfloat16 (16, 64, 16001): 131.3 against
    31.2)."""
    if any(k != 1 for k in factors[:-1]):
        return list(narrow), list(wide), list(factors)
    return [math.prod(narrow)], [math.prod(wide)], [factors[-1]]


def launch_config(w_out: int, factors: Sequence[int], forward: bool, itemsize: int, elements: int | None = None,
                  max_block_w: int = MAX_BLOCK_W, out_bytes: int = 0, rows=None) -> dict[str, int]:
    """The kernels' constexpr arguments for rows of about ``w_out`` elements of ``itemsize`` bytes
    on the wide side (the forward's output, the backward's grad_output), each program writing
    about ``elements`` elements (default: ``FORWARD_BYTES_PER_PROGRAM`` or
    ``BACKWARD_ELEMENTS_PER_PROGRAM``) in rows of at most ``max_block_w`` of the wide side, or
    where there is one row (``rows == 1``, ``row_shapes``) a program's whole share of it; the
    forward writing about ``out_bytes`` in all."""
    if elements is None:
        elements = FORWARD_BYTES_PER_PROGRAM // itemsize if forward else BACKWARD_ELEMENTS_PER_PROGRAM
    kd, kh, kw = ([1, 1, 1] + list(factors))[-3:]
    if rows == 1:
        max_block_w = elements if forward else elements * kw
    block_w = min(triton.next_power_of_2(max(w_out, kw)), max_block_w)
    per_row = block_w if forward else block_w // kw
    config = {"KD": kd, "KH": kh, "KW": kw, "ROWS": max(1, elements // per_row), "BLOCK_W": per_row}
    if forward:
        config["STREAM"] = out_bytes >= STREAM_STORE_BYTES
    return config


def programs(rows, w_out, config: dict[str, int], forward: bool, cdiv=triton.cdiv):
    """The 1-d grid's size that ``_program`` decodes: ``cdiv(rows, ROWS)`` row blocks of
    ``w_out`` (the wide side) in column blocks; ``cdiv`` of ints, or of sizes (``CeilDiv``)."""
    per_row = config["BLOCK_W"] * (1 if forward else config["KW"])
    return cdiv(rows, config["ROWS"]) * cdiv(w_out, per_row)


def _launch(kernel, src: Tensor, dst: Tensor, factors: Sequence[int], wide: Tensor, narrow: Tensor,
            config: dict[str, int] | None = None, num_warps: int = 4):
    """Rows of ``wide`` (the repeated side) hold ``KW`` times the elements of ``narrow``'s."""
    narrow_shape, wide_shape, factors = row_shapes(narrow.shape, wide.shape, factors)
    n = len(factors)
    h_in = narrow_shape[-2] if n >= 2 else 1
    h_out = wide_shape[-2] if n >= 2 else 1
    w_in, w_out = narrow_shape[-1], wide_shape[-1]
    forward = kernel is repeat_rows
    rows = math.prod((wide_shape if forward else narrow_shape)[:-1])
    config = config or launch_config(w_out, factors, forward, src.element_size(),
                                     out_bytes=wide.numel() * wide.element_size(), rows=rows)
    grid = (programs(rows, w_out, config, forward),)
    own_tensor = (rows, 0, 0) if forward else ()  # block_rows, block_stride, out_offset
    kernel[grid](src, dst, rows, h_in, h_out, w_in, w_out, *own_tensor, **config, num_warps=num_warps)


def repeat(x: Tensor, out: Tensor, factors: Sequence[int], **launch) -> Tensor:
    """``out = repeats.repeat(x, factors)``; both contiguous, fewer than 2**31 elements.
    ``launch``: ``config`` (``launch_config``'s) and ``num_warps`` other than the defaults."""
    if out.numel():
        _launch(repeat_rows, x, out, factors, out, x, **launch)
    return out


def sum_repeats(g: Tensor, out: Tensor, factors: Sequence[int], **launch) -> Tensor:
    """``out = repeats.sum_repeats(g, factors)`` in eager's order; both contiguous; ``launch`` as
    for ``repeat``."""
    if out.numel():
        _launch(window_sum_rows, g, out, factors, g, out, **launch)
    return out


def supports(*tensors: Tensor) -> bool:
    """The kernels index in 32 bits and read rows in place."""
    return all(t.is_contiguous() and t.numel() < 2**31 for t in tensors)


__all__ = ["repeat", "repeat_rows", "row_shapes", "sum_repeats", "supports", "window_sum_rows"]
