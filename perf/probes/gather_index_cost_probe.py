"""What a dynamic 2d gather's kernel pays for its runtime sizes (docs/findings.md, finding 1).

Usage (CUDA only): ``python -m perf.probes.gather_index_cost_probe OUT_DIR``

A contiguous 2d nearest gather written by hand with eager's CUDA index rule (``min(floor(o *
scale), in - 1)`` in float32), one kernel body launched with sizes

* ``runtime``: every size an unspecialized argument (``do_not_specialize``, as Inductor's
  launcher passes them: no divisibility, divisions by runtime values);
* ``numel``: the same, but the element count left to Triton's specialization (divisible by 16
  known where it is), so the mask is known constant over 16 elements;
* ``magic``: as ``numel``, each division a multiply-high by ``ceil(2**64 / size)``, computed
  on the host (a few instructions for the ~20 of a 32-bit division by a runtime value);
* ``const``: every size a ``tl.constexpr`` (divisions by constants, as a static kernel);

and ``run R``: the divisions made once per run of R output elements of one row (the next R - 1
elements' indices by adding 1 and wrapping at the row's end), R = 1 or 8.

Also writes Inductor's kernels for the same rows with ``dynamic=True`` (the output size passed
as an argument, so symbolic, as the harness does) and ``dynamic=False`` to ``OUT_DIR/gather_index_cost_code.txt``.
GPU kernels per call, us (profiler); every result checked against eager;
``OUT_DIR/gather_index_cost_probe.json``.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from perf.probes import kernel_time, probe_main

ROWS = [  # (input shape, output size, dtype)
    ((8, 64, 200, 200), (300, 300), "float16"),
    ((4, 3, 1234, 1345), (2345, 2456), "bfloat16"),
    ((4, 3, 1234, 1345), (2345, 2456), "float32"),
]
BLOCK = 1024


@triton.jit
def _divmod(x, d, m, MAGIC: tl.constexpr):
    """``(x // d, x % d)`` for ``0 <= x < 2**31``; with ``MAGIC`` from ``m = ceil(2**64 / d)``:
    the high word of ``x * m`` (exact there, as ``d * m - 2**64 < d``)."""
    if MAGIC:
        q = tl.umulhi(x.to(tl.uint64), m.to(tl.uint64)).to(tl.int32)
    else:
        q = x // d
    return q, x - q * d


@triton.jit
def _body(in_ptr, out_ptr, scale_h, scale_w, IH, IW, OH, OW, NUMEL, M_OW, M_OH, R, BLOCK,
          MAGIC: tl.constexpr = False):
    # Output element x = (nc * OH + oh) * OW + ow; a run of R elements shares one division.
    start = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK // R) * R
    t, ow0 = _divmod(start, OW, M_OW, MAGIC)
    nc0, oh0 = _divmod(t, OH, M_OH, MAGIC)
    j = tl.arange(0, R)
    x = start[:, None] + j[None, :]
    ow = ow0[:, None] + j[None, :]
    wrap = ow >= OW  # R <= OW: at most one wrap per run
    ow = tl.where(wrap, ow - OW, ow)
    oh = oh0[:, None] + wrap.to(tl.int32)
    wrap = oh >= OH
    oh = tl.where(wrap, oh - OH, oh)
    nc = nc0[:, None] + wrap.to(tl.int32)
    iw = tl.minimum((ow.to(tl.float32) * scale_w).to(tl.int32), IW - 1)
    ih = tl.minimum((oh.to(tl.float32) * scale_h).to(tl.int32), IH - 1)
    mask = x < NUMEL
    value = tl.load(in_ptr + ((nc * IH + ih) * IW + iw), mask)
    tl.store(out_ptr + x, value, mask)


@triton.jit(do_not_specialize=["IH", "IW", "OH", "OW", "NUMEL"])
def gather_runtime(in_ptr, out_ptr, scale_h, scale_w, IH, IW, OH, OW, NUMEL,
                   R: tl.constexpr, BLOCK: tl.constexpr):
    _body(in_ptr, out_ptr, scale_h, scale_w, IH, IW, OH, OW, NUMEL, 0, 0, R, BLOCK)


@triton.jit(do_not_specialize=["IH", "IW", "OH", "OW"])
def gather_numel(in_ptr, out_ptr, scale_h, scale_w, IH, IW, OH, OW, NUMEL,
                 R: tl.constexpr, BLOCK: tl.constexpr):
    _body(in_ptr, out_ptr, scale_h, scale_w, IH, IW, OH, OW, NUMEL, 0, 0, R, BLOCK)


@triton.jit(do_not_specialize=["IH", "IW", "OH", "OW", "M_OW", "M_OH"])
def gather_magic(in_ptr, out_ptr, scale_h, scale_w, IH, IW, OH, OW, NUMEL, M_OW, M_OH,
                 R: tl.constexpr, BLOCK: tl.constexpr):
    _body(in_ptr, out_ptr, scale_h, scale_w, IH, IW, OH, OW, NUMEL, M_OW, M_OH, R, BLOCK,
          MAGIC=True)


@triton.jit
def gather_const(in_ptr, out_ptr, scale_h, scale_w, IH: tl.constexpr, IW: tl.constexpr,
                 OH: tl.constexpr, OW: tl.constexpr, NUMEL: tl.constexpr,
                 R: tl.constexpr, BLOCK: tl.constexpr):
    _body(in_ptr, out_ptr, scale_h, scale_w, IH, IW, OH, OW, NUMEL, 0, 0, R, BLOCK)


KERNELS = {"runtime": gather_runtime, "numel": gather_numel, "magic": gather_magic,
           "const": gather_const}


def launch(kernel, x, out, r, warps=4):
    (ih, iw), (oh, ow) = x.shape[2:], out.shape[2:]
    scales = [float(np.float32(i) / np.float32(o)) for i, o in ((ih, oh), (iw, ow))]
    magic = [-(-2**64 // d) for d in (ow, oh)] if kernel is gather_magic else []
    kernel[(triton.cdiv(out.numel(), BLOCK),)](
        x, out, *scales, ih, iw, oh, ow, out.numel(), *magic, R=r, BLOCK=BLOCK, num_warps=warps)


CODE: list[str] = []


def probe_row(shape, osize, dtype) -> dict:
    import torch.nn.functional as F
    from torch._inductor.utils import run_and_get_code

    x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype))
    expected = F.interpolate(x, size=osize, mode="nearest")
    row = {"eager": kernel_time(lambda: F.interpolate(x, size=osize, mode="nearest"))}
    for name, dynamic in (("inductor dynamic", True), ("inductor static", False)):
        torch._dynamo.reset()
        compiled = torch.compile(lambda x, size: F.interpolate(x, size=size, mode="nearest"),
                                 dynamic=dynamic)
        out, code = run_and_get_code(compiled, x, osize)
        assert torch.equal(out, expected), name
        CODE.append(f"# {shape}->{osize} {dtype} {name}\n" + "\n".join(code))
        row[name] = kernel_time(lambda: compiled(x, osize))
    out = torch.empty_like(expected)
    for name, kernel in KERNELS.items():
        for r in (1, 8):
            out.zero_()
            launch(kernel, x, out, r)
            assert torch.equal(out, expected), (name, r)
            row[f"{name} run {r}"] = kernel_time(lambda: launch(kernel, x, out, r))
    return row


def rows():
    for shape, osize, dtype in ROWS:
        yield f"{shape}->{osize} {dtype}", {"shape": shape, "osize": osize, "dtype": dtype,
                                             **probe_row(shape, osize, dtype)}


def main(argv=None) -> int:
    import sys
    from pathlib import Path

    argv = sys.argv[1:] if argv is None else argv
    status = probe_main("gather_index_cost_probe", rows, argv)
    if argv:
        Path(argv[0], "gather_index_cost_code.txt").write_text("\n\n".join(CODE))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
