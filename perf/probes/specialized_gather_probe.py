"""A gather whose sizes Triton specializes per value, against Inductor's dynamic and static
kernels (docs/findings.md, finding 1).

Usage (CUDA only): ``python -m perf.probes.specialized_gather_probe OUT_DIR``

The dynamic gathers lose to their static kernels by the divisions of the flat index by runtime
sizes. ``gather_const`` below takes every size as ``tl.constexpr``: Triton compiles one binary
per distinct size, whose divisions are by constants, as in Inductor's static kernel, while the
graph around it stays dynamic. One output element per lane; each dim's source index read from a
table (eager's map, int32) or computed inline by eager's CUDA rule (``min(floor(o * scale),
in - 1)`` in float32). Per forward row of the CUDA matrix (``size=`` from a closure), us:

* ``eager``, ``dynamic`` (installed, ``dynamic=True``), ``static``, ``table B/W``, ``inline
  B/W`` (BLOCK / num_warps): GPU kernels per call (profiler);
* ``call eager`` / ``call dynamic`` / ``call static`` / ``call const``: the whole call back to
  back (``torch.utils.benchmark``); ``call const`` is a compiled graph (``dynamic=True``) that
  calls ``probe::gather_const``, a custom op that launches the inline kernel, which Inductor
  runs as an extern kernel;
* ``call library op``: the same with the op defined through ``torch.library.Library`` (its
  CUDA kernel the Python function, without ``custom_op``'s layers);
* ``host costs``: the per-call time of each launch path on a tensor whose kernel takes ~2 us;
* ``jit ms``: the first launch for a new output size (one Triton compile).

Every result is checked against eager. Writes ``OUT_DIR/specialized_gather_probe.json``.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import torch
import triton
import triton.language as tl
from torch.utils.benchmark import Timer

from perf.probes import kernel_time, probe_main
from perf.probes.gather_kernel_probe import records


CONFIGS = ((512, 4), (1024, 4), (2048, 8))  # (BLOCK, num_warps)


@triton.jit
def gather_const(in_ptr, out_ptr, map_d, map_h, map_w, scale_d, scale_h, scale_w,
                 NUMEL: tl.constexpr, D_IN: tl.constexpr, D_OUT: tl.constexpr, H_IN: tl.constexpr,
                 H_OUT: tl.constexpr, W_IN: tl.constexpr, W_OUT: tl.constexpr, INNER: tl.constexpr,
                 RANK: tl.constexpr, CL: tl.constexpr, INLINE: tl.constexpr, BLOCK: tl.constexpr):
    x = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = x < NUMEL
    n = x
    if CL:
        k = n % INNER
        n = n // INNER
    ow = n % W_OUT
    t = n // W_OUT
    oh = t % H_OUT
    t = t // H_OUT
    if RANK == 3:
        od = t % D_OUT
        t = t // D_OUT
    if INLINE:
        # eager's CUDA rule: min(floor(o * (float) in / out), in - 1), in float32
        iw = tl.minimum((ow.to(tl.float32) * scale_w).to(tl.int32), W_IN - 1)
        ih = tl.minimum((oh.to(tl.float32) * scale_h).to(tl.int32), H_IN - 1)
    else:
        iw = tl.load(map_w + ow, mask)
        ih = tl.load(map_h + oh, mask)
    if RANK == 3:
        if INLINE:
            idd = tl.minimum((od.to(tl.float32) * scale_d).to(tl.int32), D_IN - 1)
        else:
            idd = tl.load(map_d + od, mask)
        row = (t * D_IN + idd) * H_IN + ih
    else:
        row = t * H_IN + ih
    src = row * W_IN + iw
    if CL:
        src = src * INNER + k
    tl.store(out_ptr + x, tl.load(in_ptr + src, mask), mask)


def _geometry(x, osize):
    rank = x.dim() - 2
    cl = rank == 2 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    ins = ([1] + list(x.shape[2:]))[-3:]
    outs = ([1] + list(osize))[-3:]
    return rank, cl, ins, outs


def launch(x, out, maps=None, block=1024, warps=4):
    """``maps`` None: each source index computed inline from the float32 scale."""
    rank, cl, ins, outs = _geometry(x, out.shape[2:])
    (di, hi, wi), (do, ho, wo) = ins, outs
    scales = [float(np.float32(i) / np.float32(o)) for i, o in zip(ins, outs)]
    numel = out.numel()
    tables = maps if maps is not None else [x, x, x]
    gather_const[(triton.cdiv(numel, block),)](
        x, out, tables[0], tables[-2], tables[-1], *scales, numel, di, do, hi, ho, wi, wo,
        x.shape[1] if cl else 1, RANK=rank, CL=cl, INLINE=maps is None, BLOCK=block,
        num_warps=warps)


def _maps(x, osize):
    """Eager's map per dim (the upsample of an arange, exact below 2**24), int32."""
    import torch.nn.functional as F

    rank = len(osize)
    maps = []
    for d in range(rank):
        ones = [1] * rank
        src = torch.arange(x.shape[2 + d], device=x.device, dtype=torch.float32)
        src = src.view(1, 1, *ones[:d], -1, *ones[d + 1:])
        size = [*ones[:d], osize[d], *ones[d + 1:]]
        maps.append(F.interpolate(src, size=size, mode="nearest").flatten().to(torch.int32))
    return maps


def _gather(x: torch.Tensor, osize: list[int]) -> torch.Tensor:
    fmt = torch.channels_last if _geometry(x, osize)[1] else torch.contiguous_format
    out = torch.empty([*x.shape[:2], *osize], device=x.device, dtype=x.dtype, memory_format=fmt)
    launch(x, out)
    return out


gather_op = torch.library.custom_op("probe::gather_const", mutates_args=())(_gather)


@gather_op.register_fake
def _fake(x, osize):
    fmt = torch.channels_last if _geometry(x, osize)[1] else torch.contiguous_format
    return x.new_empty([*x.shape[:2], *osize]).contiguous(memory_format=fmt)


# The same op defined without ``custom_op``'s Python layers: its CUDA kernel is the function.
_library = torch.library.Library("probe", "FRAGMENT")
_library.define("gather_lib(Tensor x, SymInt[] osize) -> Tensor")
_library.impl("gather_lib", _gather, "CUDA")
torch.library.register_fake("probe::gather_lib", lib=_library)(_fake)


def _call_time(fn) -> float:
    fn()
    torch.cuda.synchronize()
    timer = Timer("f()", globals={"f": fn})
    return min(timer.blocked_autorange(min_run_time=0.3).median for _ in range(3)) * 1e6


def probe_row(shape, osize, dtype, memory_format) -> dict:
    import torch.nn.functional as F

    x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype))
    x = x.contiguous(memory_format=getattr(torch, memory_format))
    f = lambda x: F.interpolate(x, size=osize, mode="nearest")  # noqa: E731
    expected = f(x)
    row = {"eager": kernel_time(lambda: f(x)), "call eager": _call_time(lambda: f(x))}
    for name, dynamic in (("dynamic", True), ("static", False)):
        torch._dynamo.reset()
        compiled = torch.compile(f, dynamic=dynamic)
        out = compiled(x)
        assert torch.equal(out, expected) and out.stride() == expected.stride(), name
        row[name] = kernel_time(lambda: compiled(x))
        row[f"call {name}"] = _call_time(lambda: compiled(x))
    maps = _maps(x, osize)
    out = torch.empty_like(expected)
    for tables, (block, warps) in itertools.product((maps, None), CONFIGS):
        out.zero_()
        launch(x, out, tables, block, warps)
        assert torch.equal(out, expected)
        name = "table" if tables is not None else "inline"
        row[f"{name} {block}/{warps}"] = kernel_time(lambda: launch(x, out, tables, block, warps))
    torch._dynamo.reset()
    op = torch.compile(lambda x: gather_op(x, list(osize)), dynamic=True)
    out = op(x)
    assert torch.equal(out, expected) and out.stride() == expected.stride(), "op"
    row["call const"] = _call_time(lambda: op(x))
    torch._dynamo.reset()
    op = torch.compile(lambda x: torch.ops.probe.gather_lib(x, list(osize)), dynamic=True)
    assert torch.equal(op(x), expected), "library op"
    row["call library op"] = _call_time(lambda: op(x))
    other = [s + 1 for s in osize]
    bigger = torch.empty_like(F.interpolate(x, size=other, mode="nearest"))
    torch.cuda.synchronize()
    start = time.perf_counter()
    launch(x, bigger)
    torch.cuda.synchronize()
    row["jit ms"] = (time.perf_counter() - start) * 1e3
    return row


def host_costs():
    """Per-call time of the launch paths on a tensor whose kernel takes ~2 us: the host's."""
    import torch.nn.functional as F

    osize = [30, 30]
    x = torch.randn(1, 3, 20, 20, device="cuda")
    expected = F.interpolate(x, size=osize, mode="nearest")
    out = torch.empty_like(expected)
    calls = {
        "launch": lambda x: launch(x, out),
        "custom_op": lambda x: gather_op(x, osize),
        "library op": lambda x: torch.ops.probe.gather_lib(x, osize),
    }
    row = {name: _call_time(lambda: f(x)) for name, f in calls.items()}
    compiled = {
        "compiled x + 1": lambda x: x + 1,
        "compiled gather": lambda x: F.interpolate(x, size=osize, mode="nearest"),
        "compiled custom_op": calls["custom_op"],
        "compiled library op": calls["library op"],
    }
    for name, f in compiled.items():
        torch._dynamo.reset()
        g = torch.compile(f, dynamic=True)
        result = g(x)
        assert name.endswith("x + 1") or torch.equal(result, expected), name
        row[name] = _call_time(lambda: g(x))
    yield "host costs (1,3,20,20)->(30,30) f32", row


def main(argv=None) -> int:
    return probe_main(
        "specialized_gather_probe",
        lambda: itertools.chain(host_costs(), records(probe_row)),
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
