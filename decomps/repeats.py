"""Integer repeats ``out[..., o] = x[..., o // k]`` per spatial dim, as views, and their adjoint.

The decompositions build these from views; ``repeat_kernels`` runs them as custom ops whose
default kernels are these same functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from torch._prims_common import suggest_memory_format


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """Sums of float16 / bfloat16 accumulate in float32 and round once, as eager's opmath."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def repeat(x: Tensor, factors: Sequence[int]) -> Tensor:
    """``out[..., o_1, .., o_n] = x[..., o_1 // k_1, .., o_n // k_n]`` as expand + reshape."""
    n = len(factors)
    lead = list(x.shape[:-n])
    expanded_view, expanded, final = list(lead), list(lead), list(lead)
    for size, k in zip(x.shape[-n:], factors):
        expanded_view += [size, 1]
        expanded += [size, k]
        final.append(size * k)
    return x.reshape(expanded_view).expand(expanded).reshape(final)


def window_shape(shape: Sequence, factors: Sequence[int]) -> list:
    """``shape`` with each of its last ``len(factors)`` sizes split into ``(size // k, k)``."""
    n = len(factors)
    split = list(shape[:-n])
    for size, k in zip(shape[-n:], factors):
        split += [size // k, k]
    return split


def sum_repeats(g: Tensor, factors: Sequence[int]) -> Tensor:
    """Adjoint of ``repeat``: ``out[..., i, ..] = sum_j g[..., i k + j, ..]``."""
    lead = g.dim() - len(factors)
    return g.reshape(window_shape(g.shape, factors)).sum([lead + 2 * t + 1 for t in range(len(factors))])


def channels_last_rows(x: Tensor, factors: Sequence[int]) -> tuple[Tensor, list[int], Callable[[Tensor], Tensor]]:
    """A repeat over ``x``'s spatial dims as one over contiguous rows: ``(view, factors, back)``.

    A channels-last 4-d tensor is a contiguous (N, H, W, C) one: its repeat (or window sum) is the
    same op over (H, W, C) with factors ``(kh, kw, 1)``, and ``back`` turns the (N, H', W', C)
    result into the channels-last (N, C, H', W') one eager returns. Other tensors pass as they
    are."""
    if x.dim() == 4 and suggest_memory_format(x) == torch.channels_last:
        return x.permute(0, 2, 3, 1), [*factors, 1], lambda y: y.permute(0, 3, 1, 2)
    return x, list(factors), lambda y: y
