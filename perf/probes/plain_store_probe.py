"""The backward of downsampling rows as a plain store against the previous choices
(docs/findings.md, finding 2; docs/design.md, "Kernel choice").

Usage (CUDA only): ``python -m perf.probes.plain_store_probe OUT_DIR [--filter REGEX]``

Where no input receives two outputs, ``backward._store_to_owners`` stores each gradient element
into its input. For the CUDA matrix's downsampling rows, each variant's training step
(forward, then ``torch.autograd.grad``) is timed with ``triton.testing.do_bench`` (median, us),
its GPU kernels per step (profiler: time and count) and its host time per step (50 steps launched
back to back, timed until the last launch returns):

* ``store``: the package with static sizes storing too (``PLAIN_STORE_STATIC_DEVICES``
  with ``cuda``; as it is for symbolic sizes);
* ``store, computed owners``: the owner index computed at each stored element, no table
  (``kernel_choice.OWNER_TABLE_DEVICES`` empty);
* ``no store``: ``kernel_choice.PLAIN_STORE_LAYOUTS`` empty, the choice before the store (ATen's
  kernel for contiguous symbolic sizes, the window gather elsewhere);
* ``stock``: ``decomps.disabled()``, Inductor's own decomposition (an ``index_put`` scatter-add);
* ``eager``.

``literal`` passes the output size as a literal (static while the input is symbolic); otherwise
it comes from a tensor's shape, symbolic as in the harness. ``static`` compiles with
``dynamic=False``. Writes ``OUT_DIR/plain_store_probe.json``; every gradient is checked
bit for bit against eager's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
from pathlib import Path
from unittest import mock

import torch

from perf.probes import kernel_time, start_cuda_probe

SHAPES = [((b, 3, 2345, 2456), (1234, 1345)) for b in (4, 1)]
ROWS = [  # (input shape, output size, dtype, memory format, mode, call form)
    *[(s, o, d, f, "nearest", "symbolic") for s, o in SHAPES for d in ("float32", "bfloat16")
      for f in ("contiguous_format", "channels_last")],
    *[(SHAPES[0][0], SHAPES[0][1], "float32", f, m, c) for f in ("contiguous_format", "channels_last")
      for m, c in (("nearest", "literal"), ("nearest-exact", "symbolic"), ("nearest", "static"))],
]


def _host_time(fn, steps: int = 50) -> float:
    """us per step on the host: ``steps`` steps launched back to back, timed until the last
    launch returns, before the GPU catches up."""
    import time

    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / steps * 1e6


def _kernel_count(fn) -> float:
    """GPU kernels per step (profiler)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    return sum(e.device_type == DeviceType.CUDA for e in prof.events()) / 10


def _bench(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3


def probe_row(shape, osize, dtype, memory_format, mode: str, form: str) -> dict:
    import torch.nn.functional as F

    import decomps
    from decomps import kernel_choice

    fmt = getattr(torch, memory_format)
    x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype)).contiguous(memory_format=fmt)
    x.requires_grad_()
    g = torch.randn(*shape[:2], *osize, device="cuda", dtype=x.dtype).contiguous(memory_format=fmt)
    o = torch.empty(osize, dtype=torch.uint8)

    if form == "literal":
        def forward(x, o):
            return F.interpolate(x, size=osize, mode=mode)
    else:
        def forward(x, o):  # the output size from a tensor: symbolic under dynamic=True
            return F.interpolate(x, size=tuple(o.shape), mode=mode)

    def step(fn):
        return lambda: torch.autograd.grad(fn(x, o), x, g)

    (expected,) = step(forward)()
    row = {"eager": _bench(step(forward)), "eager kernels": kernel_time(step(forward))}
    stores, no_stores = {"cuda": None}, {}  # kernel_choice.PLAIN_STORE_LAYOUTS
    variants = {  # name: (plain store layouts, owner table devices, package installed)
        "store": (stores, ("cuda",), True),
        "store, computed owners": (stores, (), True),
        "no store": (no_stores, ("cuda",), True),
        "stock": (no_stores, (), False),
    }
    for name, (store, table, installed) in variants.items():
        torch._dynamo.reset()
        compiled = torch.compile(forward, dynamic=form != "static", fullgraph=True)
        scope = contextlib.nullcontext() if installed else decomps.disabled()
        with mock.patch.object(kernel_choice, "PLAIN_STORE_LAYOUTS", store), \
                mock.patch.object(kernel_choice, "PLAIN_STORE_STATIC_DEVICES", ("cuda",)), \
                mock.patch.object(kernel_choice, "OWNER_TABLE_DEVICES", table), scope:
            (grad,) = step(compiled)()  # compiles forward and backward here
            if not installed:
                # stock's scatter-add sums in another order where windows hold several outputs
                torch.testing.assert_close(grad, expected, msg=name)
            else:
                assert torch.equal(grad, expected) and grad.stride() == expected.stride(), name
            row[name] = _bench(step(compiled))
            row[f"{name} kernels"] = kernel_time(step(compiled))
            row[f"{name} host"] = _host_time(step(compiled))
            row[f"{name} launches"] = _kernel_count(step(compiled))
    # input read + output written, grad_output read + grad_input written, at 4.25 TB/s
    row["floor"] = 2 * (g.numel() + x.numel()) * x.element_size() / 4.25e6
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.probes.plain_store_probe")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--filter", default="", help="regex on 'shape->osize dtype format mode form'")
    args = parser.parse_args(argv)
    if not start_cuda_probe("plain_store_probe"):
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for shape, osize, dtype, fmt, mode, form in ROWS:
        label = f"{shape}->{osize} {dtype} {fmt} {mode} {form}"
        if not re.search(args.filter, label):
            continue
        row = probe_row(shape, osize, dtype, fmt, mode, form)
        results.append({"shape": shape, "osize": osize, "dtype": dtype, "memory_format": fmt,
                        "mode": mode, "form": form, **row})
        print(f"{label}: " + "  ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
        (args.out_dir / "plain_store_probe.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
