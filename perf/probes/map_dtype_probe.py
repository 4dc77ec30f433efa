"""What 64-bit maps and window starts, and the channels-last tiling, cost the GPU kernels of
gathers with dynamic shapes (docs/findings.md, finding 1, "32-bit maps"; ``eager_rules.map_dtype``,
``backward_windows.cuda_window_dtype``, ``package_kernels.ND3_MIN_CHANNELS``).

Usage (CUDA only): ``python -m perf.probes.map_dtype_probe OUT_DIR``

For the gather rows of the CUDA matrix (x1.5, the seed pairs, 3d x1.5; both layouts) and a
channels-last FPN merge, ``torch.compile(dynamic=True)`` four ways: ``int64 maps``
(``map_dtype`` always int64, as before it), ``int64 windows`` (the same for the backward's
``backward_windows.cuda_window_dtype``), ``2 tiles`` (the channels-last forward without its 3d
tiling), and ``installed``. Per way: the forward's GPU kernels per call and the training
step's (``torch.autograd.grad``), profiler, us. Every result is checked against eager.
Writes ``OUT_DIR/map_dtype_probe.json``.
"""

from __future__ import annotations

import contextlib
from unittest import mock

import torch

from perf.probes import fpn_merge_row, interp_row, kernel_time, probe_main


CL, CONTIGUOUS = torch.channels_last, torch.contiguous_format
SEED = ((4, 3, 1234, 1345), (2345, 2456))
ROWS = {  # name: inputs and function
    "(8,64,200,200) x1.5 f16": lambda: interp_row((8, 64, 200, 200), torch.float16, CONTIGUOUS, scale_factor=1.5),
    "(8,64,200,200) x1.5 f16 channels_last": lambda: interp_row((8, 64, 200, 200), torch.float16, CL, scale_factor=1.5),
    "(8,16,200,200) x1.5 f16 channels_last": lambda: interp_row((8, 16, 200, 200), torch.float16, CL, scale_factor=1.5),
    "(4,3,1234,1345)->(2345,2456) bf16": lambda: interp_row(SEED[0], torch.bfloat16, CONTIGUOUS, size=SEED[1]),
    "(4,3,1234,1345)->(2345,2456) bf16 channels_last": lambda: interp_row(SEED[0], torch.bfloat16, CL, size=SEED[1]),
    "(4,3,1234,1345)->(2345,2456) f32 channels_last": lambda: interp_row(SEED[0], torch.float32, CL, size=SEED[1]),
    "(2,32,64,64,64) x1.5 bf16": lambda: interp_row((2, 32, 64, 64, 64), torch.bfloat16, CONTIGUOUS, scale_factor=1.5),
    "(2,32,64,64,64) x1.5 f32 channels_last_3d": lambda: interp_row(
        (2, 32, 64, 64, 64), torch.float32, torch.channels_last_3d, scale_factor=1.5),
    "(4,3,2345,2456)->(1234,1345) f32 channels_last": lambda: interp_row(
        (4, 3, 2345, 2456), torch.float32, CL, size=(1234, 1345)),
    "FPN merge bf16 channels_last": lambda: fpn_merge_row(torch.bfloat16, CL),
}


def _way(name):
    from decomps import backward_windows, eager_rules
    from lowerings import package_kernels

    if name == "int64 maps":
        return mock.patch.object(eager_rules, "map_dtype", lambda *args: torch.int64)
    if name == "int64 windows":
        return mock.patch.object(backward_windows, "cuda_window_dtype", lambda *args: torch.int64)
    if name == "2 tiles":
        return mock.patch.object(package_kernels, "ND3_MIN_CHANNELS", 2**62)
    return contextlib.nullcontext()  # installed


def probe_row(make) -> dict:
    args, f = make()
    expected = f(*args)
    leaves = [a.detach().requires_grad_() for a in args]
    g = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(f(*leaves), leaves, g)
    row = {
        "eager forward": kernel_time(lambda: f(*args)),
        "eager step": kernel_time(lambda: torch.autograd.grad(f(*leaves), leaves, g)),
    }
    for way in ("int64 maps", "int64 windows", "2 tiles", "installed"):
        torch._dynamo.reset()
        with _way(way):
            compiled = torch.compile(f, dynamic=True)
            out = compiled(*args)
            grads = torch.autograd.grad(compiled(*leaves), leaves, g)
        assert torch.equal(out, expected) and out.stride() == expected.stride(), way
        for grad, expected_grad in zip(grads, expected_grads):
            torch.testing.assert_close(grad.double(), expected_grad.double(), rtol=1e-2, atol=1e-2)
            assert grad.stride() == expected_grad.stride(), way
        row[f"{way} forward"] = kernel_time(lambda: compiled(*args), calls=30)
        row[f"{way} step"] = kernel_time(lambda: torch.autograd.grad(compiled(*leaves), leaves, g), calls=30)
    return row


def rows():
    for name, make in ROWS.items():
        yield name, {"row": name, **probe_row(make)}


def main(argv=None) -> int:
    return probe_main("map_dtype_probe", rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
