"""ATen's own nearest kernels as custom ops: the extern call a decomposition returns where
``kernel_choice`` picks eager's kernel over generated code.

Inductor lowers them as an extern call (a ``FallbackKernel``) of ATen's ``upsample_nearest*`` op
of the rank and mode (``lowerings.aten_kernels``); the Python kernels below serve other tracers.
The fake kernels give eager's output meta (shape, dtype, memory format). One op per direction;
the rank comes from ``output_size``, one scale per spatial dim (None: not given).

Defined with ``torch.library.Library`` and a CompositeExplicitAutograd kernel rather than
``torch.library.custom_op``, whose Python autograd wrapper costs more per call (2026-11-22,
CPU, 1 thread, a (1,3,5,4) input: ATen's op 4.8 us, through ``custom_op`` 15.1 us, through
``Library`` 7.9 us). The ops run below autograd only (inside AOTAutograd's graphs).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .layouts import backward_memory_format, output_memory_format
from .ops import BACKWARD, FORWARD

_LIBRARY = torch.library.Library("decomps", "DEF")
_LIBRARY.define(
    "upsample_nearest(Tensor input, SymInt[] output_size, float?[] scales, bool exact) -> Tensor"
)
_LIBRARY.define(
    "upsample_nearest_backward(Tensor grad_output, SymInt[] output_size, SymInt[] input_size,"
    " float?[] scales, bool exact) -> Tensor"
)


def _upsample_nearest(
    input: Tensor, output_size: Sequence[int], scales: Sequence[float | None], exact: bool
) -> Tensor:
    return FORWARD[(len(output_size), exact)].default(input, output_size, *scales)


def _upsample_nearest_fake(input, output_size, scales, exact):
    output = input.new_empty([*input.shape[:2], *output_size])
    return output.contiguous(memory_format=output_memory_format(input))


def _upsample_nearest_backward(
    grad_output: Tensor,
    output_size: Sequence[int],
    input_size: Sequence[int],
    scales: Sequence[float | None],
    exact: bool,
) -> Tensor:
    op = BACKWARD[(len(output_size), exact)].default
    return op(grad_output, output_size, input_size, *scales)


def _upsample_nearest_backward_fake(grad_output, output_size, input_size, scales, exact):
    grad_input = grad_output.new_empty(list(input_size))
    return grad_input.contiguous(memory_format=backward_memory_format(grad_output))


_LIBRARY.impl("upsample_nearest", _upsample_nearest, "CompositeExplicitAutograd")
_LIBRARY.impl("upsample_nearest_backward", _upsample_nearest_backward, "CompositeExplicitAutograd")
torch.library.register_fake("decomps::upsample_nearest", _upsample_nearest_fake, lib=_LIBRARY)
torch.library.register_fake(
    "decomps::upsample_nearest_backward", _upsample_nearest_backward_fake, lib=_LIBRARY
)

upsample_nearest = torch.ops.decomps.upsample_nearest.default
upsample_nearest_backward = torch.ops.decomps.upsample_nearest_backward.default
