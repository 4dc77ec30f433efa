"""Argument checks with eager's exception types and messages (ATen's UpSample.h / .cpp)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

_SPATIAL = {1: ("W",), 2: ("H", "W"), 3: ("D", "H", "W")}
# Dtypes ATen's nearest kernels dispatch on (CPU and CUDA alike).
SUPPORTED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8)


def _sizes_message(isizes, osizes, n: int) -> str:
    names = _SPATIAL[n]
    inp = ", ".join(f"{a}: {s}" for a, s in zip(names, isizes))
    out = ", ".join(f"{a}: {s}" for a, s in zip(names, osizes))
    return f"Input and output sizes should be greater than 0, but got input ({inp}) output ({out})"


def check_common(input_size, output_size, n: int) -> None:
    """``upsample_{1,2,3}d_common_check``."""
    torch._check(
        len(output_size) == n,
        lambda: f"It is expected output_size equals to {n}, but got size {len(output_size)}",
    )
    torch._check(
        len(input_size) == n + 2,
        lambda: f"It is expected input_size equals to {n + 2}, but got size {len(input_size)}",
    )
    isizes, osizes = list(input_size[2:]), list(output_size)
    torch._check(
        all(s > 0 for s in isizes) and all(s > 0 for s in osizes),
        lambda: _sizes_message(isizes, osizes, n),
    )


def check_dtype(dtype: torch.dtype, op_name: str) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise NotImplementedError(f'"{op_name}" not implemented for \'{dtype}\'')


def check_forward(input: Tensor, output_size, n: int) -> None:
    """The structured meta kernel's checks, in its order; ``n`` is the op's spatial rank."""
    check_common(input.shape, output_size, n)
    # Allows an empty batch, not an empty channel (or spatial) dim. Bools, not ints: torch's own
    # meta kernels pass an int here, which torch._check rejects for N == 0.
    torch._check(
        input.numel() != 0 or all(s != 0 for s in input.shape[1:]),
        lambda: f"Non-empty {n + 2}D data tensor expected but got a tensor with sizes {list(input.shape)}",
    )


def check_vec_arguments(output_size, scale_factors, n: int) -> None:
    """``compute_output_size``: exactly one of output_size and scale_factors, ``n`` (the input's
    rank less two, as in ATen) of them."""
    torch._check(
        (output_size is None) != (scale_factors is None),
        lambda: "Must specify exactly one of output_size and scale_factors",
    )
    given = output_size if output_size is not None else scale_factors
    torch._check(
        len(given) == n,
        lambda: f"Expected {'output_size' if output_size is not None else 'scale_factors'} "
        f"to have {n} elements, but got {len(given)}",
    )


def check_output_size_from_factor(isize, factor: float) -> None:
    """``c10::checked_convert<int64_t>(isize * factor)`` in ``compute_output_size``: NaN, infinite
    and out-of-range sizes are eager's RuntimeError (Python's ``int`` raises ValueError /
    OverflowError). A symbolic size with a finite factor is not checked: that would be a guard."""
    torch._check(
        math.isfinite(factor)
        and (not isinstance(isize, int) or -(2.0**63) <= isize * factor < 2.0**63),
        lambda: "value cannot be converted to type int64_t without overflow",
    )


def check_scale_count(scales, n: int) -> None:
    """``get_scale_value(scale_factors, i)`` for each of the op's ``n`` dims indexes the list."""
    torch._check(
        len(scales) >= n,
        lambda: f"ArrayRef: invalid index Index = {len(scales)}; Length = {len(scales)}",
    )


def check_backward(grad_output: Tensor, output_size, input_size, n: int, exact: bool) -> None:
    check_common(input_size, output_size, n)
    torch._check(
        grad_output.dim() == n + 2,
        lambda: f"Expected grad_output to be a tensor of dimension {n + 2} but got: dimension {grad_output.dim()}",
    )
    full_output_size = [*input_size[:2], *output_size]
    for i in range(n + 2):
        torch._check(
            grad_output.size(i) == full_output_size[i],
            lambda: (
                "Expected grad_output to have the same shape as output;"
                f" output.size({i}) = {full_output_size[i]}"
                f" but got grad_output.size({i}) = {grad_output.size(i)}"
            ),
        )
    if not grad_output.dtype.is_floating_point:
        raise NotImplementedError(
            f'"upsample_nearest{"_exact" if exact else ""}{n}d_backward" not implemented for \'{grad_output.dtype}\''
        )
