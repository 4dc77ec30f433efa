"""Launches of the package's kernels through ``CachingAutotuner.run`` or through their launcher,
as ``lowerings.cached_launch`` makes them on torch 2.11 (docs/findings.md, finding 8).

Usage (CUDA, torch 2.11): ``python -m perf.probes.cached_launch_probe OUT_DIR [--rounds N]``

Per row (host-bound rows of the harness's matrix and one kernel-bound row), in one process,
compiled with the package: its kernels through ``run`` at every launch
(``cached_launch.is_package_kernel`` patched to decline them) and as installed, each column's
results checked against the other's (``torch.equal``). Timed as ``static_launch_probe`` times its
columns (``timed_columns``): back to back, ``do_bench``, kernels, Python calls per call. Writes
``OUT_DIR/cached_launch_probe.json`` and each column's generated modules to ``OUT_DIR/sources/``.
"""

from __future__ import annotations

from pathlib import Path

ROUNDS = 6
# (label, input shape, dtype name, channels-last, interpolate's keywords but the mode, mode,
# dynamic, fwd+bwd). Scale factors are floats: with dynamic=True Dynamo traces an int read from
# the closure as a SymInt, which F.interpolate's scale factors refuse (a graph break, the call
# eager; torch 2.11 and 2.13, stock or not).
ROWS = [
    ("x2 (16,64,16000) bf16", (16, 64, 16000), "bfloat16", False, {"scale_factor": 2.0}, "nearest", False, False),
    ("x2 (16,64,16000) f32", (16, 64, 16000), "float32", False, {"scale_factor": 2.0}, "nearest", False, False),
    ("x2 (16,64,16000) bf16", (16, 64, 16000), "bfloat16", False, {"scale_factor": 2.0}, "nearest", True, False),
    ("x2 (16,64,16000) bf16", (16, 64, 16000), "bfloat16", False, {"scale_factor": 2.0}, "nearest", False, True),
    ("3d x1.5 (2,32,64,64,64) bf16", (2, 32, 64, 64, 64), "bfloat16", False, {"scale_factor": 1.5}, "nearest",
     False, False),
    ("3d x1.5 (2,32,64,64,64) bf16", (2, 32, 64, 64, 64), "bfloat16", False, {"scale_factor": 1.5},
     "nearest-exact", False, True),
    ("(1,3,2345,2456)->(1234,1345) f32 channels_last", (1, 3, 2345, 2456), "float32", True,
     {"size": (1234, 1345)}, "nearest", False, False),
    ("x1.5 (8,64,200,200) f16", (8, 64, 200, 200), "float16", False, {"scale_factor": 1.5}, "nearest", False,
     True),
    ("x2 (8,256,128,128) bf16", (8, 256, 128, 128), "bfloat16", False, {"scale_factor": 2.0}, "nearest", False,
     False),
]
SETTINGS = ("through run", "cached launch")


def _scope(setting: str):
    """The context a column compiles in: the package as installed, or with every kernel
    launching through ``run``."""
    import contextlib
    from unittest import mock

    from lowerings import cached_launch

    if setting == "through run":
        return mock.patch.object(cached_launch, "is_package_kernel", lambda tuner: False)
    return contextlib.nullcontext()


def _interpolation(mode: str, kwargs: dict):
    import torch.nn.functional as F

    return lambda x: F.interpolate(x, mode=mode, **kwargs)


def rows(rounds: int, out_dir: Path):
    import torch

    from perf.probes.static_launch_probe import compiled_column, timed_columns

    for label, shape, dtype, channels_last, kwargs, mode, dynamic, backward in ROWS:
        name = f"{label} {mode}, dynamic={dynamic}, {'fwd+bwd' if backward else 'fwd'}"
        torch.manual_seed(0)
        fn = _interpolation(mode, kwargs)
        x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype))
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        x.requires_grad_(backward)
        g = torch.randn_like(fn(x.detach()))
        columns = {}
        for setting in SETTINGS:
            with _scope(setting):
                columns[setting] = compiled_column(fn, x, g, dynamic, backward)
        record = {"row": label, "mode": mode, "dynamic": dynamic, "backward": backward}
        yield name, {**record, **timed_columns(name, columns, rounds, out_dir)}


def main(argv=None) -> int:
    from perf.probes import probe_main_rounds

    return probe_main_rounds("cached_launch_probe", rows, ROUNDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
