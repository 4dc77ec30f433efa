"""The channels-last 3-channel rows through the op ``decomps::gather_channel_rows``: block shapes
and the output row's alignment, launched by Inductor (docs/findings.md, finding 8).

Usage (CUDA only): ``python -m perf.probes.channel_rows_probe OUT_DIR [--rounds N]``.

Per row, compiled with ``dynamic=False`` and a literal size, one process: the generated gather
(``kernel_choice.CHANNEL_ROWS_KERNEL_DEVICES`` empty), and the op with each block shape of
``BLOCKS`` (rows per program x elements per row), the kernel told the output row's alignment
(``launch_config``'s ``ALIGN``) or not (``ALIGN`` 1). Each variant is compared with eager
(``torch.equal`` and strides: ``equal``), says whether the op's kernel ran (``op_kernel``) and is
timed by the profiler (kernels per call) in ``--rounds`` rounds (3) right after its compile
(Dynamo's caches are reset between variants): the lowest and highest round, in
``OUT_DIR/channel_rows_probe.json``.
"""

from __future__ import annotations

import contextlib
from unittest import mock

import torch
import torch.nn.functional as F

from perf.probes import kernel_time, probe_main_rounds

# (input shape, output size, dtype, mode): upsamples and a downsample of the harness's rows, and
# the two mixes of their dims.
CASES = (
    ((4, 3, 1234, 1345), (2345, 2456), torch.bfloat16, "nearest-exact"),
    ((4, 3, 1234, 1345), (2345, 2456), torch.float16, "nearest"),
    ((1, 3, 1234, 1345), (2345, 2456), torch.bfloat16, "nearest-exact"),
    ((4, 3, 2345, 2456), (1234, 1345), torch.bfloat16, "nearest-exact"),
    ((4, 3, 2345, 1345), (1234, 2456), torch.bfloat16, "nearest-exact"),
    ((4, 3, 1234, 2456), (2345, 1345), torch.bfloat16, "nearest-exact"),
)
# (ROWS, BLOCK_W) of the kernel's programs
BLOCKS = ((1, 1024), (2, 1024), (4, 1024), (8, 1024), (4, 2048))


@contextlib.contextmanager
def _variant(block, aligned):
    """The op's kernel with this launch shape."""
    from decomps import triton_channel_rows

    stock = triton_channel_rows.launch_config

    def launch_config(*args):
        config = stock(*args, block=block)
        return config if aligned else {**config, "ALIGN": 1}

    with mock.patch.object(triton_channel_rows, "launch_config", launch_config):
        yield


def rows(rounds: int, out_dir):
    from decomps import kernel_choice
    from torch._inductor.utils import run_and_get_code

    variants = [("generated", None, None)] + [
        (f"op {r}x{w}{' aligned' if aligned else ''}", (r, w), aligned) for r, w in BLOCKS for aligned in (True, False)
    ]
    for shape, osize, dtype, mode in CASES:
        row = f"{shape}->{osize} {dtype} {mode}"
        x = torch.randn(shape, device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)
        expected = F.interpolate(x, size=osize, mode=mode)
        for name, block, aligned in variants:
            context = (mock.patch.object(kernel_choice, "CHANNEL_ROWS_KERNEL_DEVICES", ()) if block is None
                       else _variant(block, aligned))
            torch._dynamo.reset()  # each variant its own graph; timed right after its compile
            fn = torch.compile(lambda t: F.interpolate(t, size=osize, mode=mode), dynamic=False)
            with context:
                actual, code = run_and_get_code(fn, x)
                equal = torch.equal(actual, expected) and actual.stride() == expected.stride()
                launched = any("def channel_rows(" in c for c in code)
                times = [kernel_time(lambda: fn(x)) for _ in range(rounds)]
            yield f"{row} {name}", {"row": row, "variant": name, "equal": equal, "op_kernel": launched,
                                    "kernels_us": [min(times), max(times)]}


if __name__ == "__main__":
    raise SystemExit(probe_main_rounds("channel_rows_probe", rows, 3))
