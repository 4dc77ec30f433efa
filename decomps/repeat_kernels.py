"""The integer repeat of a contiguous tensor and its adjoint as custom ops, so that Inductor
chooses per call site between generated code and the package's Triton kernels.

``decomps::upsample_repeat(input, factors)`` is ``repeats.repeat(input, factors)`` as a new
contiguous tensor; ``decomps::upsample_repeat_backward(grad_output, factors)`` is
``repeats.sum_repeats`` accumulated in float32 for half types, in grad_output's dtype. Their
default kernels are those views; on CUDA the kernels of ``triton_repeat`` run instead where
they apply (contiguous, 32-bit indexable). ``lowerings.repeat`` lowers the ops: on CUDA as the
Triton kernels where nothing would fuse with them, else (and on CPU) as generated code.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import Tensor

from . import repeats

_LIBRARY = torch.library.Library("decomps", "FRAGMENT")
_LIBRARY.define("upsample_repeat(Tensor input, int[] factors) -> Tensor")
_LIBRARY.define("upsample_repeat_backward(Tensor grad_output, int[] factors) -> Tensor")

# The innermost factors the Triton kernels handle (tl.interleave / tl.split doubles or halves).
TRITON_INNERMOST_FACTORS = (1, 2, 4)
# The backward kernel accumulates in float32: float64 keeps its own precision elsewhere.
TRITON_BACKWARD_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def repeated_shape(shape: Sequence, factors: Sequence[int]) -> list:
    n = len(factors)
    return [*shape[:-n], *(s * k for s, k in zip(shape[-n:], factors))]


def summed_shape(shape: Sequence, factors: Sequence[int]) -> list:
    n = len(factors)
    return [*shape[:-n], *(s // k for s, k in zip(shape[-n:], factors))]


def _repeat_views(input: Tensor, factors: Sequence[int]) -> Tensor:
    return repeats.repeat(input, factors).clone(memory_format=torch.contiguous_format)


def _sum_repeats_views(grad_output: Tensor, factors: Sequence[int]) -> Tensor:
    """``repeats.sum_repeats`` term by term in eager's order (window rows, then columns)."""
    g = grad_output.to(repeats.accumulation_dtype(grad_output.dtype))
    n = len(factors)
    lead = [slice(None)] * (g.dim() - n)
    windows = g.reshape(repeats.window_shape(g.shape, factors))
    total = None
    for offsets in itertools.product(*(range(k) for k in factors)):
        term = windows[(*lead, *(part for j in offsets for part in (slice(None), j)))]
        total = term if total is None else total + term
    return total.to(grad_output.dtype).clone(memory_format=torch.contiguous_format)


def _triton_applies(factors: Sequence[int], *tensors: Tensor) -> bool:
    from . import triton_repeat

    return factors[-1] in TRITON_INNERMOST_FACTORS and triton_repeat.supports(*tensors)


def _repeat_cuda(input: Tensor, factors: Sequence[int]) -> Tensor:
    out = input.new_empty(repeated_shape(input.shape, factors))
    if not _triton_applies(factors, input, out):
        return _repeat_views(input, factors)
    from . import triton_repeat

    return triton_repeat.repeat(input, out, factors)


def _sum_repeats_cuda(grad_output: Tensor, factors: Sequence[int]) -> Tensor:
    out = grad_output.new_empty(summed_shape(grad_output.shape, factors))
    if grad_output.dtype not in TRITON_BACKWARD_DTYPES or not _triton_applies(factors, grad_output, out):
        return _sum_repeats_views(grad_output, factors)
    from . import triton_repeat

    return triton_repeat.sum_repeats(grad_output, out, factors)


def _repeat_fake(input: Tensor, factors: Sequence[int]) -> Tensor:
    return input.new_empty(repeated_shape(input.shape, factors))


def _sum_repeats_fake(grad_output: Tensor, factors: Sequence[int]) -> Tensor:
    return grad_output.new_empty(summed_shape(grad_output.shape, factors))


_LIBRARY.impl("upsample_repeat", _repeat_views, "CompositeExplicitAutograd")
_LIBRARY.impl("upsample_repeat_backward", _sum_repeats_views, "CompositeExplicitAutograd")
_LIBRARY.impl("upsample_repeat", _repeat_cuda, "CUDA")
_LIBRARY.impl("upsample_repeat_backward", _sum_repeats_cuda, "CUDA")
torch.library.register_fake("decomps::upsample_repeat", _repeat_fake, lib=_LIBRARY)
torch.library.register_fake("decomps::upsample_repeat_backward", _sum_repeats_fake, lib=_LIBRARY)

upsample_repeat = torch.ops.decomps.upsample_repeat.default
upsample_repeat_backward = torch.ops.decomps.upsample_repeat_backward.default
