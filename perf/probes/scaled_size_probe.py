"""What eager's special cases cost the GPU kernels of a scale-factor upsample with dynamic
shapes (docs/findings.md, finding 1; docs/design.md, "Size conditions";
``size_conditions.scaled_size_differs``).

Usage (CUDA only): ``python -m perf.probes.scaled_size_probe OUT_DIR``

For the x1.5 rows of the CUDA matrix (``scale_factor=1.5``, both modes and layouts),
``torch.compile(dynamic=True)`` two ways, twice each in turn: ``selected``, eager's
``osize == isize`` / ``osize == 2 * isize`` cases selected at run time
(``scaled_size_differs`` off), and ``proved``, as installed (the output size computed from 1.5
differs from both). Per way: the forward's GPU kernels per call (profiler, us), the forward call
(``do_bench``, us) and the training step's kernels (``torch.autograd.grad``). Every result is
checked against eager. Writes ``OUT_DIR/scaled_size_probe.json``.
"""

from __future__ import annotations

from unittest import mock

import torch

from perf.probes import kernel_time, probe_main

ROWS = [  # (input shape, dtype, memory format)
    ((8, 64, 200, 200), "float16", "contiguous_format"),
    ((8, 64, 200, 200), "float16", "channels_last"),
    ((2, 32, 64, 64, 64), "bfloat16", "contiguous_format"),
    ((2, 32, 64, 64, 64), "float32", "contiguous_format"),
    ((2, 32, 64, 64, 64), "float32", "channels_last_3d"),
]


def probe_row(shape, dtype, memory_format, mode) -> dict:
    import torch.nn.functional as F
    from triton.testing import do_bench

    from decomps import eager_rules

    x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype)).contiguous(memory_format=getattr(torch, memory_format))
    f = lambda x: F.interpolate(x, scale_factor=1.5, mode=mode)  # noqa: E731
    expected = f(x)
    xg = x.detach().requires_grad_()
    g = torch.randn_like(expected)
    expected_grad = torch.autograd.grad(f(xg), xg, g)[0].double()
    row = {"eager forward kernels": kernel_time(lambda: f(x))}
    for way in ("selected", "proved") * 2:
        proof = eager_rules.scaled_size_differs if way == "proved" else (lambda *args: False)
        with mock.patch.object(eager_rules, "scaled_size_differs", proof):
            torch._dynamo.reset()
            compiled = torch.compile(f, dynamic=True)
            out = compiled(x)
            grad = torch.autograd.grad(compiled(xg), xg, g)[0]
        assert torch.equal(out, expected) and out.stride() == expected.stride(), way
        torch.testing.assert_close(grad.double(), expected_grad, rtol=1e-2, atol=1e-2)
        step = lambda: torch.autograd.grad(compiled(xg), xg, g)  # noqa: E731
        row.setdefault(f"{way} forward kernels", []).append(kernel_time(lambda: compiled(x)))
        row.setdefault(f"{way} forward call", []).append(do_bench(lambda: compiled(x), warmup=25, rep=200, return_mode="median") * 1e3)
        row.setdefault(f"{way} step kernels", []).append(kernel_time(step))
    return row


def rows():
    for shape, dtype, fmt in ROWS:
        for mode in ("nearest", "nearest-exact"):
            row = probe_row(shape, dtype, fmt, mode)
            record = {"shape": shape, "dtype": dtype, "memory_format": fmt, "mode": mode, **row}
            yield f"{shape} x1.5 {dtype} {fmt} {mode}", record


def main(argv=None) -> int:
    return probe_main("scaled_size_probe", rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
