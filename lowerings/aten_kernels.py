"""Lowerings of the ATen-kernel ops (``decomps.aten_kernels``): the generated code calls ATen's
own ``upsample_nearest*`` op of the rank and mode, as Inductor calls any op it falls back to.

Left to Inductor's implicit fallback, the generated code calls the package's op, whose Python
kernel then calls ATen's: a Python frame and a second dispatch on every call (2026-11-23, CPU,
torch 2.11, 1 thread, a compiled backward of a (1, 1, 3, 3) gradient, five interleaved
rounds: 18.5 us per call through the package's op, 14.4 us calling ATen's op, 10.6 us for an
empty compiled graph).

Inductor runs the called op on fake tensors to learn its output. ATen's 1d and 3d backward ops
have no meta kernel that takes symbolic sizes (torch 2.11 to 2.15), so there the generated code
keeps calling the package's op, whose fake kernel does.
"""

from __future__ import annotations

import torch

# Spatial ranks whose ATen backward op has a meta kernel for symbolic sizes (both modes).
SYMBOLIC_META_BACKWARD_RANKS = (2,)


def _extern(op, *args):
    from torch._inductor.lowering import fallback_handler

    return fallback_handler(op, add_to_fallback_set=False)(*args)


def upsample_nearest(input, output_size, scales, exact):
    from decomps.ops import FORWARD

    return _extern(FORWARD[(len(output_size), exact)].default, input, output_size, *scales)


def upsample_nearest_backward(grad_output, output_size, input_size, scales, exact):
    import sympy

    from decomps.ops import BACKWARD

    rank = len(output_size)
    symbolic = any(isinstance(s, sympy.Expr) and not s.is_number for s in (*output_size, *input_size))
    if symbolic and rank not in SYMBOLIC_META_BACKWARD_RANKS:
        package_op = torch.ops.decomps.upsample_nearest_backward.default
        return _extern(package_op, grad_output, output_size, input_size, scales, exact)
    return _extern(BACKWARD[(rank, exact)].default, grad_output, output_size, input_size, *scales)


def lowerings() -> dict:
    """``{op: lowering}`` to put into Inductor's lowering table."""
    return {
        torch.ops.decomps.upsample_nearest.default: upsample_nearest,
        torch.ops.decomps.upsample_nearest_backward.default: upsample_nearest_backward,
    }
