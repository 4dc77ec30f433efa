"""Why dynamic-shape kernels are slower than static ones on the GPU (docs/perf.md).

Usage (CUDA only): ``python -m perf.dynamic_shapes_probe OUT_DIR``

The 2x bf16 upsample of (8, 256, 128, 128), four ways, timed with ``triton.testing.do_bench``:

1. Inductor with this package, ``dynamic=False`` and ``dynamic=True`` (the generated kernels are
   written to ``OUT_DIR/dynamic_shapes_probe_code.txt``);
2. a hand-written Triton kernel with exactly the index math of Inductor's dynamic kernel
   (``x1 = (x // 2) % ks0; x3 = x // ks1; load(in + x1 + ks0 * x3)``), launched
   * with Triton's own specialization of integer arguments (divisibility by 16 known),
   * with ``do_not_specialize`` on the sizes (what Inductor's dynamic kernels see: its launcher
     marks no size argument divisible and passes every ``ks*`` as int64),
   * with the sizes as int32 and as int64.

The table (``OUT_DIR/dynamic_shapes_probe.json``) separates the cost of the index arithmetic
(int64 division) from the cost of unknown divisibility of the sizes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only machines; the probe needs CUDA anyway
    triton = tl = None

SHAPE = (8, 256, 128, 128)


def _kernels():
    # One body, two launch behaviours: Triton's JIT specializes integer arguments (divisible by
    # 16, equal to 1) unless told not to, which is what Inductor's dynamic kernels get.
    specialized = triton.jit(_dynamic_x2_kernel)
    unspecialized = triton.jit(do_not_specialize=["ks0", "ks1", "xnumel"])(_dynamic_x2_kernel)
    return specialized, unspecialized


def _dynamic_x2_kernel(in_ptr, out_ptr, ks0, ks1, xnumel, XBLOCK: tl.constexpr, I64: tl.constexpr):
    """Inductor's dynamic 2x kernel: ``x1 = (x // 2) % ks0; x3 = x // ks1``."""
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    if I64:
        a = ks0.to(tl.int64)
        b = ks1.to(tl.int64)
    else:
        a = ks0
        b = ks1
    value = tl.load(in_ptr + ((xindex // 2) % a + a * (xindex // b)), xmask)
    tl.store(out_ptr + xindex, value, xmask)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    import decomps  # noqa: F401  (installs)
    from torch._inductor.utils import run_and_get_code
    from triton.testing import do_bench

    specialized, unspecialized = _kernels()
    x = torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16)
    expected = F.interpolate(x, scale_factor=2.0, mode="nearest")
    n, c, h, w = SHAPE
    results, code = {}, []

    def record(name, fn, output):
        if output is not None:
            output.zero_()
        result = fn()
        got = output if output is not None else result
        us = do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
        results[name] = {"us": round(us, 1), "equal": bool(torch.equal(got, expected))}
        print(f"{name:60s} {us:8.1f} us  equal={results[name]['equal']}", flush=True)

    for dynamic in (False, True):
        torch._dynamo.reset()
        compiled = torch.compile(lambda t: F.interpolate(t, scale_factor=2.0, mode="nearest"), dynamic=dynamic)
        _, sources = run_and_get_code(compiled, x)
        code.append(f"##### Inductor + decomps, dynamic={dynamic}\n" + "\n".join(sources))
        record(f"Inductor + decomps, dynamic={dynamic}", lambda: compiled(x), None)

    out = torch.empty_like(expected)
    numel = out.numel()
    grid = (triton.cdiv(numel, 1024),)
    for kernel, label in ((specialized, "sizes specialized by Triton"), (unspecialized, "sizes not specialized (as Inductor dynamic)")):
        for i64 in (False, True):
            record(
                f"hand Triton, {label}, {'int64' if i64 else 'int32'} sizes",
                lambda: kernel[grid](x, out, w, 4 * w, numel, XBLOCK=1024, I64=i64, num_warps=4),
                out,
            )
    src = torch.empty_like(expected)
    copy_us = do_bench(lambda: out.copy_(src), warmup=25, rep=200, return_mode="median") * 1e3
    results["copy of the output, us"] = round(copy_us, 1)
    results["floor (input read + output write at copy bandwidth), us"] = round(copy_us * 1.25 / 2, 1)
    results["torch"] = torch.__version__
    results["triton"] = triton.__version__
    results["device"] = torch.cuda.get_device_name()
    (out_dir / "dynamic_shapes_probe.json").write_text(json.dumps(results, indent=1))
    (out_dir / "dynamic_shapes_probe_code.txt").write_text("\n\n".join(code))
    return 0 if all(v.get("equal", True) for v in results.values() if isinstance(v, dict)) else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
