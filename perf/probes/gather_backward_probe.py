"""Which kernel the backward of a non-integer ratio should run on the GPU with dynamic shapes
(docs/findings.md, finding 2; docs/design.md, "Kernel choice").

Usage (CUDA only): ``python -m perf.probes.gather_backward_probe OUT_DIR [--mode nearest]``

For the CUDA matrix's rows whose backward gathers windows (the seed pairs, 3d x1.5, x1.5
float16; every layout; the output size symbolic as in the harness), the backward graph alone
(``torch.autograd.grad(out, x, g, retain_graph=True)``: its kernels and autograd's per-call
cost), timed with ``triton.testing.do_bench`` (median, us), four ways:

* ``eager``: ATen's kernel;
* ``generated dynamic``: the package's decomposition, ``torch.compile(dynamic=True)``, with
  ``kernel_choice.ATEN_SYMBOLIC_BACKWARD_DEVICES`` and ``backward.OUTER_PERIOD_DEVICES`` empty
  (the window gather in generated code);
* ``periods dynamic``: the same with outer dims' short periods as sums of slices (where the
  ratio has one; else the window gather);
* ``extern dynamic``: ATen's kernel as an extern call, for every layout;
* ``generated static``: ``dynamic=False``, where neither rule applies;

each also as the GPU kernel time per call (profiler), which leaves out the host's cost.

The forward of each row is timed too, as kernels per call (eager, and the forward graph of each
compiled variant, where the forward is always generated code) and as the call (eager, generated
dynamic), for the forward's choice.
Writes ``OUT_DIR/gather_backward_probe.json``; every compiled result is checked against eager.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from unittest import mock

import torch

from perf import cases as perf_cases
from perf.probes import kernel_time, start_cuda_probe

ROWS = [  # (input shape, output size, dtype, memory format)
    *[((b, 3, *i), o, d, f)
      for (i, o) in perf_cases.SEED_PAIRS["cuda"] for b in (1, 4)
      for d in ("float32", "bfloat16") for f in ("contiguous_format", "channels_last")],
    *[(perf_cases.SHAPE_3D, perf_cases.scaled_size(perf_cases.SHAPE_3D[2:], 1.5), d, f)
      for d in ("float32", "bfloat16") for f in ("contiguous_format", "channels_last_3d")],
    *[(perf_cases.SHAPE_X15_F16, perf_cases.scaled_size(perf_cases.SHAPE_X15_F16[2:], 1.5), "float16", f)
      for f in ("contiguous_format", "channels_last")],
]


def _bench(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3


def _compiled(fn, dynamic: bool):
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=dynamic, fullgraph=True)


def probe_row(shape, osize, dtype, memory_format, mode: str) -> dict:
    import torch.nn.functional as F

    from decomps import backward as backward_decompositions
    from decomps import kernel_choice

    fmt = getattr(torch, memory_format)
    x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype)).contiguous(memory_format=fmt)
    x.requires_grad_()
    g = torch.randn(*shape[:2], *osize, device="cuda", dtype=x.dtype).contiguous(memory_format=fmt)
    o = torch.empty(osize, dtype=torch.uint8)

    def forward(x, o):  # the output size from a tensor: symbolic under dynamic=True
        return F.interpolate(x, size=tuple(o.shape), mode=mode)

    def backward(out):  # the backward graph alone, run again and again
        return lambda: torch.autograd.grad(out, x, g, retain_graph=True)

    expected = forward(x, o)
    (expected_grad,) = backward(expected)()
    row = {"eager": _bench(backward(expected)), "eager kernels": kernel_time(backward(expected)),
           "eager forward": _bench(lambda: forward(x, o))}
    row["eager forward kernels"] = kernel_time(lambda: forward(x, o))
    every_layout = (torch.contiguous_format, torch.channels_last, torch.channels_last_3d)
    variants = {  # name: (dynamic, ATen's kernel, outer periods)
        "generated dynamic": (True, (), ()),
        "periods dynamic": (True, (), ("cuda",)),
        "extern dynamic": (True, ("cuda",), ()),
        "generated static": (False, ("cuda",), ()),
    }
    for name, (dynamic, devices, periods) in variants.items():
        with mock.patch.object(kernel_choice, "ATEN_SYMBOLIC_BACKWARD_DEVICES", devices), \
                mock.patch.object(kernel_choice, "ATEN_SYMBOLIC_BACKWARD_LAYOUTS", every_layout), \
                mock.patch.object(backward_decompositions, "OUTER_PERIOD_DEVICES", periods):
            compiled = _compiled(forward, dynamic)
            out = compiled(x, o)
            (grad,) = backward(out)()
        assert torch.equal(out, expected), name
        torch.testing.assert_close(grad, expected_grad, msg=name)  # sums in another order
        row[name] = _bench(backward(out))
        row[f"{name} kernels"] = kernel_time(backward(out))
        row[f"{name} forward kernels"] = kernel_time(lambda: compiled(x, o))
        if name == "generated dynamic":
            row["generated dynamic forward"] = _bench(lambda: compiled(x, o))
    # grad_output read + grad_input written, at the device-to-device copy floor (4.25 TB/s).
    row["floor"] = (g.numel() + x.numel()) * x.element_size() / 4.25e6
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.probes.gather_backward_probe")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--mode", default="nearest", choices=perf_cases.MODES)
    parser.add_argument("--filter", default="", help="regex on 'shape->osize dtype memory_format'")
    args = parser.parse_args(argv)
    if not start_cuda_probe("gather_backward_probe"):
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for shape, osize, dtype, fmt in ROWS:
        if not re.search(args.filter, f"{shape}->{osize} {dtype} {fmt}"):
            continue
        row = probe_row(shape, osize, dtype, fmt, args.mode)
        results.append({"shape": shape, "osize": osize, "dtype": dtype, "memory_format": fmt, **row})
        times = "  ".join(f"{k} {v:.1f}" for k, v in row.items() if not math.isnan(v))
        print(f"{shape}->{osize} {dtype} {fmt}: {times}", flush=True)
    (args.out_dir / "gather_backward_probe.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
