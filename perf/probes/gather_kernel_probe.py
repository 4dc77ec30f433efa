"""Hand-written Triton gathers against Inductor's generated ones, GPU kernel time with dynamic
shapes (docs/findings.md, finding 1, "Hand-written gathers").

Usage (CUDA only): ``python -m perf.probes.gather_kernel_probe OUT_DIR``

For forward gathers of the CUDA matrix (x1.5 float16, the seed upsampling pair, 3d x1.5; both
layouts where the matrix has them), ``size=`` from a closure (the harness's symbolic form), GPU
kernels per call (profiler, us):

* ``eager``; ``dynamic`` (``torch.compile(dynamic=True)``, as installed); ``static``;
* ``rows tiling``: the dynamic kernel tiled as (rows, row elements), the channels of a
  channels-last row included, instead of the installed tiling;
* ``rows BW/E/aA``: ``gather_rows`` below, a program per block of output rows and ``BW``
  columns (``E`` elements), reading each dim's map (``map_h[oh]``, ``map_w[ow]``, precomputed
  int32, eager's) and the input row; its size arguments unspecialized as Inductor's launcher
  passes them, the output row length passed as a multiple of ``A`` (its alignment);
* ``flat B/W/fast``: ``gather_flat``, one output element per lane, the flat index split by
  divisions (``fast``: multiply-shift divisions, Granlund-Montgomery, from the runtime sizes).

Every result is checked against eager. Writes ``OUT_DIR/gather_kernel_probe.json``.
"""

from __future__ import annotations

import contextlib
import itertools
from unittest import mock

import sympy
import torch
import triton
import triton.language as tl

from perf.probes import kernel_time, probe_main

ROWS = [  # (input shape, output size, dtype, memory format)
    ((8, 64, 200, 200), (300, 300), "float16", "contiguous_format"),
    ((8, 64, 200, 200), (300, 300), "float16", "channels_last"),
    ((4, 3, 1234, 1345), (2345, 2456), "float32", "contiguous_format"),
    ((4, 3, 1234, 1345), (2345, 2456), "bfloat16", "contiguous_format"),
    ((4, 3, 1234, 1345), (2345, 2456), "float32", "channels_last"),
    ((4, 3, 1234, 1345), (2345, 2456), "bfloat16", "channels_last"),
    ((2, 32, 64, 64, 64), (96, 96, 96), "bfloat16", "contiguous_format"),
    ((2, 32, 64, 64, 64), (96, 96, 96), "float32", "contiguous_format"),
]


@triton.jit
def gather_rows(in_ptr, out_ptr, map_d, map_h, map_w,
                rows, d_in, d_out, h_in, h_out, w_in, w_out_q, inner,
                GATHER_D: tl.constexpr, W_ALIGN: tl.constexpr,
                ROWS: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_K: tl.constexpr):
    # Output rows (n, c[, d], h) of w_out elements (contiguous), or (n, h) of w_out pixels of
    # ``inner`` channels (channels-last); divisions by sizes once per row.
    w_out = w_out_q * W_ALIGN
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = r < rows
    oh = r % h_out
    t = r // h_out
    ih = tl.load(map_h + oh, rmask).to(tl.int32)
    if GATHER_D:
        od = t % d_out
        src = ((t // d_out) * d_in + tl.load(map_d + od, rmask).to(tl.int32)) * h_in + ih
    else:
        src = t * h_in + ih
    w = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    wmask = w < w_out
    iw = tl.load(map_w + w, wmask).to(tl.int32)
    if BLOCK_K == 1:
        m = rmask[:, None] & wmask[None, :]
        v = tl.load(in_ptr + (src[:, None] * w_in + iw[None, :]), m)
        tl.store(out_ptr + (r[:, None] * w_out + w[None, :]), v, m)
    else:
        k = tl.program_id(2) * BLOCK_K + tl.arange(0, BLOCK_K)
        m = rmask[:, None, None] & wmask[None, :, None] & (k < inner)[None, None, :]
        so = (src[:, None, None] * w_in + iw[None, :, None]) * inner + k[None, None, :]
        do = (r[:, None, None] * w_out + w[None, :, None]) * inner + k[None, None, :]
        v = tl.load(in_ptr + so, m)
        tl.store(out_ptr + do, v, m)


@triton.jit
def _magic(d):
    # (multiplier, shift) such that n // d == umulhi(n, m) >> s for 0 <= n, d < 2**31 and d > 1
    # (Granlund-Montgomery; CUTLASS's FastDivmod).
    d = d.to(tl.int64)
    l = tl.math.ceil(tl.math.log2(d.to(tl.float32))).to(tl.int64)
    one = tl.full([], 1, tl.int64)
    l = tl.where((one << l) < d, l + 1, l)
    l = tl.where((l > 0) & ((one << (l - 1)) >= d), l - 1, l)
    m = (((one << (31 + l)) + d - 1) // d).to(tl.uint32)
    return m, tl.maximum(l - 1, 0).to(tl.uint32)


@triton.jit
def _divmod(n, d, m, s):
    q = tl.where(d == 1, n, tl.umulhi(n, m) >> s)
    return q, n - q * d


@triton.jit
def gather_flat(in_ptr, out_ptr, map_d, map_h, map_w, numel, d_in, d_out, h_in, h_out, w_in, w_out, inner,
                RANK: tl.constexpr, CL: tl.constexpr, BLOCK: tl.constexpr, FAST: tl.constexpr):
    # One output element per lane: contiguous stores, the index split by divisions per element.
    x = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = x < numel
    n = x.to(tl.uint32)
    inner = inner.to(tl.uint32)
    w_out = w_out.to(tl.uint32)
    h_out = h_out.to(tl.uint32)
    d_out = d_out.to(tl.uint32)
    if FAST:
        mw, sw = _magic(w_out)
        mh, sh = _magic(h_out)
        if CL:
            mk, sk = _magic(inner)
            n, k = _divmod(n, inner, mk, sk)
        t, ow = _divmod(n, w_out, mw, sw)
        t, oh = _divmod(t, h_out, mh, sh)
        if RANK == 3:
            md, sd = _magic(d_out)
            t, od = _divmod(t, d_out, md, sd)
    else:
        if CL:
            k = n % inner
            n = n // inner
        ow = n % w_out
        t = n // w_out
        oh = t % h_out
        t = t // h_out
        if RANK == 3:
            od = t % d_out
            t = t // d_out
    iw = tl.load(map_w + ow, mask).to(tl.int32)
    ih = tl.load(map_h + oh, mask).to(tl.int32)
    p = t.to(tl.int32)
    if RANK == 3:
        row = (p * d_in + tl.load(map_d + od, mask).to(tl.int32)) * h_in + ih
    else:
        row = p * h_in + ih
    src = row * w_in + iw
    if CL:
        src = src * inner + k.to(tl.int32)
    v = tl.load(in_ptr + src, mask)
    tl.store(out_ptr + x, v, mask)


# Inductor's launcher does not specialize size arguments: neither do these.
ROWS_KERNEL = triton.jit(gather_rows.fn, do_not_specialize=list(range(5, 13)))
FLAT_KERNEL = triton.jit(gather_flat.fn, do_not_specialize=list(range(5, 13)))


def _geometry(x, out):
    """(rank, channels_last, input sizes (d, h, w), output sizes (d, h, w))."""
    rank = x.dim() - 2
    cl = rank == 2 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    ins = ([1] + list(x.shape[2:]))[-3:]
    outs = ([1] + list(out.shape[2:]))[-3:]
    return rank, cl, ins, outs


def launch_rows(x, out, maps, block_w, elements, align):
    rank, cl, (di, hi, wi), (do, ho, wo) = _geometry(x, out)
    n, c = x.shape[:2]
    rows, inner = (n * ho, c) if cl else (n * c * do * ho, 1)
    bk = triton.next_power_of_2(c) if cl else 1
    bw = min(block_w, triton.next_power_of_2(wo))
    per_block = max(1, elements // (bw * bk))
    grid = (triton.cdiv(rows, per_block), triton.cdiv(wo, bw), triton.cdiv(inner, bk))
    ROWS_KERNEL[grid](x, out, maps[0], maps[-2], maps[-1], rows, di, do, hi, ho, wi, wo // align, inner,
                      GATHER_D=rank == 3, W_ALIGN=align, ROWS=per_block, BLOCK_W=bw, BLOCK_K=bk, num_warps=4)


def launch_flat(x, out, maps, block, warps, fast):
    rank, cl, (di, hi, wi), (do, ho, wo) = _geometry(x, out)
    grid = (triton.cdiv(out.numel(), block),)
    FLAT_KERNEL[grid](x, out, maps[0], maps[-2], maps[-1], out.numel(), di, do, hi, ho, wi, wo,
                      x.shape[1] if cl else 1, RANK=rank, CL=cl, BLOCK=block, FAST=fast, num_warps=warps)


def _rows_tiling():
    """Inductor's tiling choice with kernels of package nodes tiled as (rows, row elements)."""
    from torch._inductor.codegen.simd import SIMDScheduling

    from lowerings import package_kernels

    installed = SIMDScheduling.get_tiling_and_scores.__func__

    @classmethod
    def rows(cls, node_schedule, numel, reduction_numel=sympy.S.One, *args, **kwargs):
        buffers = package_kernels.package_buffers(node_schedule)
        if not buffers or reduction_numel != 1:
            return installed(cls, node_schedule, numel, reduction_numel, *args, **kwargs)
        size = list(buffers[0].get_size())
        row = size[-1] * size[1] if package_kernels._channels_last(buffers[0]) else size[-1]
        return cls.create_tiling([sympy.simplify(numel / row), row], [reduction_numel]), None

    return mock.patch.object(SIMDScheduling, "get_tiling_and_scores", rows)


def _alignment(size: int) -> int:
    a = 1
    while a < 16 and size % (2 * a) == 0:
        a *= 2
    return a


def probe_row(shape, osize, dtype, memory_format) -> dict:
    import torch.nn.functional as F

    x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype)).contiguous(memory_format=getattr(torch, memory_format))
    kwargs = {"size": osize, "mode": "nearest"}
    f = lambda x: F.interpolate(x, **kwargs)  # noqa: E731
    expected = f(x)
    rank = len(osize)
    maps = []  # eager's map per dim: the upsample of an arange (exact below 2**24)
    for d in range(rank):
        ones = [1] * rank
        src = torch.arange(shape[2 + d], device="cuda", dtype=torch.float32).view(1, 1, *ones[:d], -1, *ones[d + 1:])
        size = [*ones[:d], osize[d], *ones[d + 1:]]
        maps.append(F.interpolate(src, size=size, mode="nearest").flatten().to(torch.int32))
    row = {"eager": kernel_time(lambda: f(x))}
    for name, dynamic, tiling in (("dynamic", True, None), ("static", False, None), ("rows tiling", True, _rows_tiling)):
        torch._dynamo.reset()
        with tiling() if tiling else contextlib.nullcontext():
            compiled = torch.compile(f, dynamic=dynamic)
            out = compiled(x)
        assert torch.equal(out, expected) and out.stride() == expected.stride(), name
        row[name] = kernel_time(lambda: compiled(x))
    out = torch.empty_like(expected)
    for block_w, elements, align in itertools.product((64, 128, 256), (1024, 2048), sorted({1, _alignment(osize[-1])})):
        out.zero_()
        launch_rows(x, out, maps, block_w, elements, align)
        assert torch.equal(out, expected)
        row[f"rows {block_w}/{elements}/a{align}"] = kernel_time(lambda: launch_rows(x, out, maps, block_w, elements, align))
    for block, warps, fast in itertools.product((1024, 2048, 4096), (4, 8), (True, False)):
        out.zero_()
        launch_flat(x, out, maps, block, warps, fast)
        assert torch.equal(out, expected)
        row[f"flat {block}/{warps}/{'fast' if fast else 'div'}"] = kernel_time(lambda: launch_flat(x, out, maps, block, warps, fast))
    return row


def records(measure):
    """``(label, record)`` per row of ``ROWS``, its columns from ``measure(shape, osize, dtype,
    memory_format)``."""
    for shape, osize, dtype, fmt in ROWS:
        row = measure(shape, osize, dtype, fmt)
        yield f"{shape}->{osize} {dtype} {fmt}", {"shape": shape, "osize": osize, "dtype": dtype, "memory_format": fmt, **row}


def main(argv=None) -> int:
    return probe_main("gather_kernel_probe", lambda: records(probe_row), argv)


if __name__ == "__main__":
    raise SystemExit(main())
