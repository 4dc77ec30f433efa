"""GPU kernel time of the forward gathers with dynamic shapes, by tiling and call form
(docs/findings.md, finding 1; ``lowerings.package_kernels.tiling_settings``).

Usage (CUDA only): ``python -m perf.probes.forward_gather_probe OUT_DIR``

For the CUDA matrix's forward gathers of contiguous tensors (the seed pairs, x1.5 float16, 3d
x1.5; a 1d x1.5 and a 2d x0.5 for the other ranks and the strided slice; two channels-last rows
for reference), in the call forms a model uses:

* ``scale``: ``scale_factor=`` (the output size an expression of the input's, ``TruncToInt``);
* ``kw``: ``size=`` from a closure, as the harness's symbolic form (int symbols);
* ``literal``: ``size=`` written as constants (static output size, symbolic input);

the GPU kernels per forward call (profiler, us) of eager and of ``torch.compile``:
``dynamic`` as installed, ``nd all`` with every contiguous rank tiled where its rows have a
runtime length (``ND_TILED_CONTIGUOUS_RANKS = (3, 4, 5)``), ``flat`` with none, and
``static`` (``dynamic=False``). Every compiled result is checked against eager. Writes
``OUT_DIR/forward_gather_probe.json``.
"""

from __future__ import annotations

from unittest import mock

import torch

from perf.probes import kernel_time, probe_main

ROWS = [  # (input shape, output size, dtype, memory format, call form)
    ((8, 64, 200, 200), (300, 300), "float16", "contiguous_format", "scale"),
    ((8, 64, 200, 200), (300, 300), "float16", "contiguous_format", "kw"),
    ((8, 64, 200, 200), (300, 300), "float16", "contiguous_format", "literal"),
    ((4, 3, 1234, 1345), (2345, 2456), "float32", "contiguous_format", "kw"),
    ((4, 3, 1234, 1345), (2345, 2456), "float32", "contiguous_format", "literal"),
    ((4, 3, 1234, 1345), (2345, 2456), "bfloat16", "contiguous_format", "kw"),
    ((4, 3, 1234, 1345), (2345, 2456), "bfloat16", "contiguous_format", "literal"),
    ((1, 3, 1234, 1345), (2345, 2456), "float32", "contiguous_format", "literal"),
    ((1, 3, 2345, 2456), (1234, 1345), "float32", "contiguous_format", "literal"),
    ((4, 3, 2345, 2456), (1234, 1345), "float32", "contiguous_format", "kw"),
    ((4, 3, 2345, 2456), (1234, 1345), "float32", "contiguous_format", "literal"),
    ((2, 32, 64, 64, 64), (96, 96, 96), "bfloat16", "contiguous_format", "scale"),
    ((2, 32, 64, 64, 64), (96, 96, 96), "float32", "contiguous_format", "scale"),
    ((2, 32, 64, 64, 64), (96, 96, 96), "bfloat16", "contiguous_format", "kw"),
    ((16, 64, 16000), (24000,), "float32", "contiguous_format", "scale"),
    ((8, 64, 200, 200), (100, 100), "float16", "contiguous_format", "scale"),
    ((8, 64, 200, 200), (300, 300), "float16", "channels_last", "scale"),
    ((4, 3, 1234, 1345), (2345, 2456), "bfloat16", "channels_last", "kw"),
]

VARIANTS = {  # name: (dynamic, ND_TILED_CONTIGUOUS_RANKS or None for the installed one)
    "dynamic": (True, None),
    "nd all": (True, (3, 4, 5)),
    "flat": (True, ()),
    "static": (False, None),
}


def interpolate(form: str, shape, osize):
    import torch.nn.functional as F

    if form == "scale":
        factor = osize[-1] / shape[-1]
        return lambda x: F.interpolate(x, scale_factor=factor, mode="nearest")
    if form == "literal":  # constants of the code stay static under dynamic=True
        from perf.bench import literal_interpolate

        return literal_interpolate(osize, "nearest")
    kwargs = {"size": osize, "mode": "nearest"}
    return lambda x: F.interpolate(x, **kwargs)


def probe_row(shape, osize, dtype, memory_format, form) -> dict:
    from lowerings import package_kernels

    x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype))
    x = x.contiguous(memory_format=getattr(torch, memory_format))
    f = interpolate(form, shape, osize)
    expected = f(x)
    row = {"eager": kernel_time(lambda: f(x))}
    for name, (dynamic, ranks) in VARIANTS.items():
        ranks = package_kernels.ND_TILED_CONTIGUOUS_RANKS if ranks is None else ranks
        with mock.patch.object(package_kernels, "ND_TILED_CONTIGUOUS_RANKS", ranks):
            torch._dynamo.reset()
            compiled = torch.compile(f, dynamic=dynamic, fullgraph=True)
            out = compiled(x)
            assert torch.equal(out, expected), name
            row[name] = kernel_time(lambda: compiled(x))
    return row


def rows():
    for shape, osize, dtype, fmt, form in ROWS:
        row = probe_row(shape, osize, dtype, fmt, form)
        record = {"shape": shape, "osize": osize, "dtype": dtype, "memory_format": fmt, "form": form, **row}
        yield f"{shape}->{osize} {dtype} {fmt} {form}", record


def main(argv=None) -> int:
    return probe_main("forward_gather_probe", rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
