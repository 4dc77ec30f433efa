"""Triton kernel of a CUDA channels-last 2d nearest gather of few channels (``channel_rows``).

The (N, C, H, W) channels-last tensors are rows of W * C contiguous elements, one row per
(n, h). A program covers ``BLOCK_W`` elements of ``ROWS`` consecutive output rows: it computes
each element's source column (``(ow // C)``'s source pixel, times C, plus ``ow % C``) once and
reuses it for every row, where Inductor's generated gather computes the source row and column
per element. An upsample's consecutive output rows read the same source rows, which a program
of several rows finds in its cache.
On an H200 (harness, kernels, 2026-12-01): the (4,3,1234,1345)->(2345,2456) 16-bit upsample
48.7-49.4 us against the generated gather's 64.7-68.4, the (4,3,2345,2456)->(1234,1345)
downsample 29.2-29.5 against 32.6-32.9 (docs/design.md, "Channels-last gathers of few channels").

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

# (ROWS, BLOCK_W) per program, 4 warps, where no output size is larger than the input's and
# where one is: the fastest of 1-16 rows x 512-2048 elements x 4 or 8 warps for the downsample
# and the upsample above (H200 direct launches, 2026-12-01: 29.2 us and 47.4). Where only the
# width grows, one row per program recomputes the columns' sources for every row: through
# Inductor (4,3,2345,1345)->(1234,2456) bf16 took 46.7 us with one row, 33.2 with four, the
# generated gather 38.3; (4,3,1234,2456)->(2345,1345) 49.7, 50.1 and 60.9.
BLOCK = (1, 1024)
UPSAMPLE_BLOCK = (4, 1024)
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
    # Products in float32, as eager's: Inductor passes Python floats as float64 arguments
    # (config._use_fp64_for_unbacked_floats). A float64 product of float32 values is exact, one
    # rounding short of eager's (2456 -> 1345 nearest-exact: column 672), and float64 products
    # and converts per element cost the upsample above a third of its time.
    scale_h = tl.cast(scale_h, tl.float32)
    scale_w = tl.cast(scale_w, tl.float32)
    columns = tl.cdiv(row_out, BLOCK_W)
    program = tl.program_id(0)
    row_block = program // columns
    x = (program - row_block * columns) * BLOCK_W + tl.arange(0, BLOCK_W)
    ow = x // C
    c = x - ow * C
    ow = ow.to(tl.float32)
    if EXACT:
        ow = ow + 0.5
    # floorf of a value >= 0 is the truncating convert.
    column = tl.minimum((ow * scale_w).to(tl.int32), w_in - 1) * C + c
    in_row = x < row_out
    for i in range(ROWS):
        r = row_block * ROWS + i
        n = r // h_out
        oh = (r - n * h_out).to(tl.float32)
        if EXACT:
            oh = oh + 0.5
        ih = tl.minimum((oh * scale_h).to(tl.int32), h_in - 1)
        mask = in_row & (r < rows)
        v = tl.load(in_ptr + ((n * h_in + ih) * (w_in * C) + column), mask)
        tl.store(out_ptr + (r * row_out + x), v, mask)


def launch_config(channels: int, exact: bool, isize: Sequence[int], osize: Sequence[int], itemsize: int,
                  block=None) -> dict:
    """The kernel's constexpr arguments for (H, W) ``isize`` -> ``osize`` (static)."""
    upsample = any(o > i for i, o in zip(isize, osize))
    rows, block_w = block or (UPSAMPLE_BLOCK if upsample else BLOCK)
    return {"C": channels, "EXACT": exact, "ROWS": rows, "BLOCK_W": block_w,
            "ALIGN": math.gcd(osize[1] * channels, STORE_BYTES // itemsize)}


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
        config = launch_config(c, exact, (h_in, w_in), (h_out, w_out), x.element_size())
        grid = (programs(rows, row_out, config),)
        channel_rows[grid](x, out, rows, h_out, h_in, w_in, row_out, *scales, **config, num_warps=4)
    return out
