"""Triton kernel of a CUDA channels-last 2d nearest gather of few channels (``channel_rows``).

The (N, C, H, W) channels-last tensors are rows of W * C contiguous elements, one row per
(n, h). A program covers ``ROWS`` output rows by ``BLOCK_W`` elements of them: each row's source
row once per tile row, each element's source column (``(ow // C)``'s source pixel, times C, plus
``ow % C``) once per tile column, where Inductor's generated gather computes both per element.
On an H200 (harness, kernels): the (4,3,2345,2456)->(1234,1345) 16-bit downsample 29.6-30.1 us against the generated gather's
32.6-32.8 and stock's 46.0-47.6 (docs/design.md, "Channels-last gathers of few channels").

The source index is eager's CUDA formula, ``min(floorf((o [+ 0.5]) * scale), isize - 1)``, in
float32: ``channel_rows.kernel_scales`` gives each dim's scale where that map equals eager's for
the sizes (checked on the host), else the op is not used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import triton
import triton.language as tl
from torch import Tensor

# (ROWS, BLOCK_W) per program, 4 warps: the best of seven block shapes for the downsample above
# (H200 direct launches, 2026-11-30: one row x 1024 29.5 us; 8 rows x 256 33.2).
BLOCK = (1, 1024)
# Bytes of the widest vector store; ``launch_config`` tells the kernel the output row length's
# alignment up to it.
STORE_BYTES = 16


@triton.jit
def channel_rows(
    in_ptr, out_ptr, rows, h_out, h_in, w_in, row_out, scale_h, scale_w,
    C: tl.constexpr, EXACT: tl.constexpr, ROWS: tl.constexpr, BLOCK_W: tl.constexpr, ALIGN: tl.constexpr,
):
    # rows: N * h_out output rows of row_out = w_out * C elements; a 1-d grid of column blocks
    # per row block, so that neighbouring programs write neighbouring memory.
    # row_out is a multiple of ALIGN (static sizes, ``launch_config``): rewritten so that Triton
    # knows it and can store whole vectors, as it can in Inductor's code, whose static sizes are
    # literals.
    row_out = row_out // ALIGN * ALIGN
    columns = tl.cdiv(row_out, BLOCK_W)
    program = tl.program_id(0)
    row_block = program // columns
    r = row_block * ROWS + tl.arange(0, ROWS)[:, None]
    x = (program - row_block * columns) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    n = r // h_out
    oh = (r - n * h_out).to(tl.float32)
    ow = x // C
    c = x - ow * C
    ow = ow.to(tl.float32)
    if EXACT:
        oh = oh + 0.5
        ow = ow + 0.5
    # Rounded to float32 as eager's product: Inductor passes Python floats as float64 arguments
    # (config._use_fp64_for_unbacked_floats), and a float64 product of two float32 values is
    # exact, one rounding short of eager's (2456 -> 1345 nearest-exact: column 672).
    # floorf of a value >= 0 is the truncating convert.
    ih = tl.minimum((oh * scale_h).to(tl.float32).to(tl.int32), h_in - 1)
    iw = tl.minimum((ow * scale_w).to(tl.float32).to(tl.int32), w_in - 1)
    mask = (r < rows) & (x < row_out)
    v = tl.load(in_ptr + ((n * h_in + ih) * (w_in * C) + (iw * C + c)), mask)
    tl.store(out_ptr + (r * row_out + x), v, mask)


def launch_config(channels: int, exact: bool, row_out: int, itemsize: int, block=BLOCK) -> dict:
    """The kernel's constexpr arguments; ``row_out`` the output row's length (static)."""
    rows, block_w = block
    return {"C": channels, "EXACT": exact, "ROWS": rows, "BLOCK_W": block_w,
            "ALIGN": math.gcd(row_out, STORE_BYTES // itemsize)}


def programs(rows, row_out, config: dict, cdiv=triton.cdiv):
    """The 1-d grid's size: ``cdiv`` of ints, or of sizes (``CeilDiv``)."""
    return cdiv(rows, config["ROWS"]) * cdiv(row_out, config["BLOCK_W"])


def gather(x: Tensor, out: Tensor, scales: Sequence[float], exact: bool) -> Tensor:
    """``out[n, c, oh, ow] = x[n, c, src_h(oh), src_w(ow)]``; both channels-last 4-d, fewer
    than 2**31 elements each (``channel_rows.supports``); ``scales`` float32 values."""
    n, c, h_in, w_in = x.shape
    h_out, w_out = out.shape[-2:]
    rows, row_out = n * h_out, w_out * c
    if out.numel():
        config = launch_config(c, exact, row_out, x.element_size())
        grid = (programs(rows, row_out, config),)
        channel_rows[grid](x, out, rows, h_out, h_in, w_in, row_out, *scales, **config, num_warps=4)
    return out
