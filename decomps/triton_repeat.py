"""Triton kernels of the integer repeat (``repeat_kernels``) on contiguous CUDA tensors (a
channels-last tensor arrives as its contiguous (N, H, W, C) view: ``repeats.channels_last_rows``).

Both kernels work on rows: an output row of the forward is one input row, each element written
``KW`` times; a grad_input row of the backward sums ``KD * KH`` grad_output rows of ``KW``
columns per element. Rows are whole vectors, so both read and write with contiguous vector
accesses: the forward loads ``BLOCK_W / KW`` inputs and duplicates them with ``tl.interleave``,
the backward loads ``BLOCK_W * KW`` gradients and splits them into their ``KW`` columns with
``tl.split``. Divisions by sizes happen once per row. The forward also writes into a slice of
a larger output (``lowerings.repeat.cat``: a cat's input, copied with factors 1). On an H200 (x2, (8, 256, 128, 128)
bf16, ``do_bench``): forward 85 us and backward 84 us, where Inductor's kernels take 98 and 94 us
with dynamic shapes (82 and 91 static); the copy floor is 79 us each (docs/findings.md, finding 7).

The backward adds in eager's order (window rows in order, then columns, from zero, in float32
for half types), so its result is eager's bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import triton
import triton.language as tl
from torch import Tensor

# Elements per program: measured best at 1024-2048 for x2 bf16 (1024 x 4 warps).
ELEMENTS_PER_PROGRAM = 1024
MAX_BLOCK_W = 512


@triton.jit
def repeat_rows(
    in_ptr, out_ptr, rows, h_in, h_out, w_in, w_out, block_rows, block_stride, out_offset,
    KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_W: tl.constexpr,
):
    # rows: N * C * [D_out *] H_out output rows of w_out elements. Output row r starts at
    # out_offset + (r // block_rows) * block_stride + (r % block_rows) * w_out: its own tensor
    # (block_rows = rows) or a slice of a cat's output (block_rows rows per block of the cat).
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    plane = r // h_out  # (n, c[, d_out]) of the row
    source = (plane // KD) * h_in + (r - plane * h_out) // KH
    wi = tl.program_id(1) * (BLOCK_W // KW) + tl.arange(0, BLOCK_W // KW)[None, :]
    v = tl.load(in_ptr + (source * w_in + wi), (r < rows) & (wi < w_in))
    if KW >= 2:
        v = tl.interleave(v, v)
    if KW == 4:
        v = tl.interleave(v, v)
    w = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    block = r // block_rows
    start = out_offset + block * block_stride + (r - block * block_rows) * w_out
    tl.store(out_ptr + (start + w), v, (r < rows) & (w < w_out))


@triton.jit
def window_sum_rows(
    g_ptr, out_ptr, rows, h_in, h_out, w_in, w_out,
    KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_W: tl.constexpr,
):
    # rows: N * C * [D_in *] H_in grad_input rows of w_in elements.
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    plane = r // h_in
    h = r - plane * h_in
    wo = tl.program_id(1) * (BLOCK_W * KW) + tl.arange(0, BLOCK_W * KW)[None, :]
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
    w = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    tl.store(out_ptr + (r * w_in + w), acc.to(out_ptr.dtype.element_ty), (r < rows) & (w < w_in))


def launch_config(w_out: int, factors: Sequence[int], forward: bool) -> dict[str, int]:
    """The kernels' constexpr arguments for output rows of about ``w_out`` elements (the wide
    side's rows: the forward's output, the backward's grad_output)."""
    kd, kh, kw = ([1, 1, 1] + list(factors))[-3:]
    block_w = min(triton.next_power_of_2(max(w_out, kw)), MAX_BLOCK_W)
    per_row = block_w if forward else block_w // kw
    return {"KD": kd, "KH": kh, "KW": kw, "ROWS": max(1, ELEMENTS_PER_PROGRAM // per_row), "BLOCK_W": per_row}


def _launch(kernel, src: Tensor, dst: Tensor, factors: Sequence[int], rows: int, wide: Tensor, narrow: Tensor):
    """Rows of ``wide`` (the repeated side) hold ``KW`` times the elements of ``narrow``'s."""
    n = len(factors)
    h_in = narrow.shape[-2] if n >= 2 else 1
    h_out = wide.shape[-2] if n >= 2 else 1
    w_in, w_out = narrow.shape[-1], wide.shape[-1]
    config = launch_config(w_out, factors, kernel is repeat_rows)
    per_row = config["BLOCK_W"] * (1 if kernel is repeat_rows else config["KW"])
    grid = (triton.cdiv(rows, config["ROWS"]), math.ceil(w_out / per_row))
    own_tensor = (rows, 0, 0) if kernel is repeat_rows else ()  # block_rows, block_stride, out_offset
    kernel[grid](src, dst, rows, h_in, h_out, w_in, w_out, *own_tensor, **config, num_warps=4)


def repeat(x: Tensor, out: Tensor, factors: Sequence[int]) -> Tensor:
    """``out = repeats.repeat(x, factors)``; both contiguous, fewer than 2**31 elements."""
    if out.numel():
        _launch(repeat_rows, x, out, factors, out.numel() // out.shape[-1], out, x)
    return out


def sum_repeats(g: Tensor, out: Tensor, factors: Sequence[int]) -> Tensor:
    """``out = repeats.sum_repeats(g, factors)`` in eager's order; both contiguous."""
    if out.numel():
        _launch(window_sum_rows, g, out, factors, out.numel() // out.shape[-1], g, out)
    return out


def supports(*tensors: Tensor) -> bool:
    """The kernels index in 32 bits and read rows in place."""
    return all(t.is_contiguous() and t.numel() < 2**31 for t in tensors)


__all__ = ["repeat", "repeat_rows", "sum_repeats", "supports", "window_sum_rows"]
