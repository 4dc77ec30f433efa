"""Which tiling Inductor picks for the fused x2 upsample rows, and what each costs
(docs/findings.md, finding 4).

Usage (CUDA only): ``python -m perf.probes.fused_tiling_probe OUT_DIR VARIANT``, one variant per
process (Inductor settings are global), VARIANT one of:

* ``stock``: torch as installed, ``decomps`` not imported;
* ``pr``: ``import decomps``;
* ``pr-max_tiles1``, ``pr-no_coalesce``: ``import decomps`` with ``triton.max_tiles = 1`` or
  ``triton.coalesce_tiling_analysis = False``: both force flat (1d) kernels here. They are
  global Inductor settings, used only to measure what the tiling choice costs.

The x2 bf16 upsample of (8, 256, 128, 128) alone, an FPN merge ``lateral + up(top)`` and a UNet
skip ``cat([skip, up(x)], 1)``, compiled with ``dynamic=False`` and ``dynamic=True``, each checked
with ``torch.equal`` against eager and timed with ``triton.testing.do_bench``. Prints one line
per row and writes the generated code to ``OUT_DIR/fused_tiling_probe-VARIANT.txt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

VARIANTS = ("stock", "pr", "pr-max_tiles1", "pr-no_coalesce")


def upsample(skip, x):
    return F.interpolate(x, scale_factor=2.0, mode="nearest")


def fpn_merge(lateral, top):
    return lateral + upsample(lateral, top)


def unet_cat(skip, x):
    return torch.cat([skip, upsample(skip, x)], 1)


def main(argv: list[str]) -> None:
    out_dir, variant = Path(argv[0]), argv[1]
    if variant not in VARIANTS:
        raise SystemExit(f"VARIANT must be one of {VARIANTS}")
    if variant != "stock":
        import decomps  # noqa: F401
    from torch._inductor.utils import run_and_get_code
    from triton.testing import do_bench

    config = torch._inductor.config
    config.force_disable_caches = True  # every variant compiles its own kernels
    if variant == "pr-max_tiles1":
        config.triton.max_tiles = 1
    if variant == "pr-no_coalesce":
        config.triton.coalesce_tiling_analysis = False

    big = torch.randn(8, 256, 256, 256, device="cuda", dtype=torch.bfloat16)
    small = torch.randn(8, 256, 128, 128, device="cuda", dtype=torch.bfloat16)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / f"fused_tiling_probe-{variant}.txt", "w") as code_file:
        for dynamic in (False, True):
            for fn in (upsample, fpn_merge, unet_cat):
                torch._dynamo.reset()
                compiled = torch.compile(fn, dynamic=dynamic)
                result, code = run_and_get_code(compiled, big, small)
                if not torch.equal(result, fn(big, small)):
                    raise SystemExit(f"{variant} {fn.__name__} dynamic={dynamic}: differs from eager")
                us = do_bench(lambda: compiled(big, small), rep=300) * 1e3
                line = f"{variant} dynamic={dynamic} {fn.__name__}: {us:.1f} us"
                print(line, flush=True)
                code_file.write(f"===== {line}\n" + "\n".join(code) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
