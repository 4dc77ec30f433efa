"""Eager's output layouts: the memory format of a forward output and of a backward grad_input."""

from __future__ import annotations

import torch
from torch import Tensor
from torch._prims_common import suggest_memory_format


def output_memory_format(input: Tensor) -> torch.memory_format:
    """The memory format of eager's output: the input's, on every device.

    (torch's Python meta kernel answers contiguous for CUDA 2d under 4 channels; ATen's
    structured kernel, the ground truth, keeps channels-last: measured on an H200.)
    """
    return suggest_memory_format(input)


def backward_memory_format(grad_output: Tensor) -> torch.memory_format:
    """Eager's grad_input layout: channels-last follows grad_output in 2d only."""
    if grad_output.dim() == 4:
        return suggest_memory_format(grad_output)
    return torch.contiguous_format
