"""Triton kernel of a CUDA channels-last 2d nearest gather of few channels (``channel_rows``).

The (N, C, H, W) channels-last tensors are rows of W * C contiguous elements, one row per
(n, h). A program covers ``BLOCK`` elements of one output row: its source row once, as a scalar,
where Inductor's generated gather computes it per element, and each element's source column
(``(ow // C)``'s source pixel, times C, plus ``ow % C``). On an H200 (harness, kernels): the
(4,3,2345,2456)->(1234,1345) 16-bit downsample 29.6-30.1 us against the generated gather's
32.6-32.8 and stock's 46.0-47.6 (docs/design.md, "Channels-last gathers of few channels").

The source index is eager's CUDA formula, ``min(floorf((o [+ 0.5]) * scale), isize - 1)``, in
float32: ``channel_rows.kernel_scales`` gives each dim's scale where that map equals eager's for
the sizes (checked on the host), else the op is not used.
"""

from __future__ import annotations

from collections.abc import Sequence

import triton
import triton.language as tl
from torch import Tensor

# Elements of an output row per program (4 warps): the best of seven block shapes for the
# downsample above (H200 probe, 2026-11-30: one row x 1024 29.5 us; 8 rows x 256 33.2).
BLOCK = 1024


@triton.jit
def channel_rows(
    in_ptr, out_ptr, h_out, h_in, w_in, row_out, scale_h, scale_w,
    C: tl.constexpr, EXACT: tl.constexpr, BLOCK: tl.constexpr,
):
    # N * h_out output rows of row_out = w_out * C elements; the column blocks of a row are
    # neighbouring programs, which write neighbouring memory.
    columns = tl.cdiv(row_out, BLOCK)
    program = tl.program_id(0)
    r = program // columns
    x = (program - r * columns) * BLOCK + tl.arange(0, BLOCK)
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
    mask = x < row_out
    v = tl.load(in_ptr + ((n * h_in + ih) * (w_in * C) + (iw * C + c)), mask)
    tl.store(out_ptr + (r * row_out + x), v, mask)


def launch_config(channels: int, exact: bool) -> dict:
    """The kernel's constexpr arguments."""
    return {"C": channels, "EXACT": exact, "BLOCK": BLOCK}


def programs(rows, row_out, cdiv=triton.cdiv):
    """The 1-d grid's size: ``cdiv`` of ints, or of sizes (``CeilDiv``)."""
    return rows * cdiv(row_out, BLOCK)


def gather(x: Tensor, out: Tensor, scales: Sequence[float], exact: bool) -> Tensor:
    """``out[n, c, oh, ow] = x[n, c, src_h(oh), src_w(ow)]``; both channels-last 4-d, fewer
    than 2**31 elements each (``channel_rows.supports``); ``scales`` float32 values."""
    n, c, h_in, w_in = x.shape
    h_out, w_out = out.shape[-2:]
    if out.numel():
        grid = (programs(n * h_out, w_out * c),)
        channel_rows[grid](x, out, h_out, h_in, w_in, w_out * c, *scales, **launch_config(c, exact), num_warps=4)
    return out
