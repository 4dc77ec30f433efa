"""A channels-last 2d nearest gather of few channels as a custom op, so that Inductor runs the
package's Triton kernel for it (``triton_channel_rows``) where nothing fuses with it.

``decomps::gather_channel_rows(input, output_size, scales, exact)``: ``input`` (N, C, H, W)
channels-last; output (N, C, *output_size) in eager's layout (channels-last but where the
input's strides are ambiguous, as with batch 0) with ``out[.., oh, ow] = input[..,
src(oh), src(ow)]``, each dim's ``src(o) = min(floorf((o [+ 0.5 if exact]) * scale), isize - 1)``
in float32, eager's CUDA formula. ``kernel_scales`` gives the scales for which that map is
eager's own, checked on the host for the static sizes the op is taken for
(``kernel_choice.channel_rows_kernel``). The default kernel computes the same map with aten
ops; CUDA runs the Triton kernel. ``lowerings.channel_rows`` lowers the op: the Triton kernel
where nothing would fuse with it, else a pointwise node of the same map.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch._prims_common import suggest_memory_format

from . import eager_rules

_LIBRARY = torch.library.Library("decomps", "FRAGMENT")
_LIBRARY.define("gather_channel_rows(Tensor input, SymInt[] output_size, float[] scales, bool exact) -> Tensor")


def source_map(isize: int, osize: int, scale: float, exact: bool, device=None) -> Tensor:
    """The op's map along one dim, int64, as the kernel computes it (float32 throughout)."""
    o = torch.arange(osize, dtype=torch.float32, device=device)
    if exact:
        o = o + 0.5
    return (o * scale).to(torch.int64).clamp_max(isize - 1)


def kernel_scales(isizes: Sequence[int], osizes: Sequence[int], scales, rule) -> list[float] | None:
    """Per spatial dim, the float32 scale (a float32 value as a Python float) with which
    ``source_map`` is eager's map under ``rule`` (``eager_rules.static_source_indices``; an
    identity dim's scale 1), or None where a dim has none."""
    found = []
    for isize, osize, scale in zip(isizes, osizes, scales):
        s = 1.0 if isize == osize else eager_rules.forward_scale(isize, osize, scale, rule.double)
        s = eager_rules.round_to_float32(s)  # the kernel's float32 arithmetic
        with eager_rules.host_tensors():
            if source_map(isize, osize, s, rule.exact, "cpu").tolist() != eager_rules.static_source_indices(
                isize, osize, scale, rule
            ):
                return None
        found.append(s)
    return found


def _output(input: Tensor, output_size: Sequence) -> Tensor:
    # eager's output layout: contiguous where the input's strides are ambiguous (batch 0)
    return torch.empty(
        [*input.shape[:2], *output_size], dtype=input.dtype, device=input.device,
        memory_format=suggest_memory_format(input),
    )


def _gather_maps(input: Tensor, output_size: Sequence, scales: Sequence[float], exact: bool) -> Tensor:
    h, w = (source_map(i, o, s, exact, input.device) for i, o, s in zip(input.shape[2:], output_size, scales))
    return _output(input, output_size).copy_(input[:, :, h[:, None], w])


def supports(*tensors: Tensor) -> bool:
    """The Triton kernel reads and writes channels-last 4-d tensors in place, in 32 bits."""
    return all(
        t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and t.numel() < 2**31 for t in tensors
    )


def _gather_cuda(input: Tensor, output_size: Sequence, scales: Sequence[float], exact: bool) -> Tensor:
    out = _output(input, output_size)
    if not supports(input, out):
        return _gather_maps(input, output_size, scales, exact)
    from . import triton_channel_rows

    return triton_channel_rows.gather(input, out, scales, exact)


def _gather_fake(input: Tensor, output_size: Sequence, scales: Sequence[float], exact: bool) -> Tensor:
    return _output(input, output_size)


_LIBRARY.impl("gather_channel_rows", _gather_maps, "CompositeExplicitAutograd")
_LIBRARY.impl("gather_channel_rows", _gather_cuda, "CUDA")
torch.library.register_fake("decomps::gather_channel_rows", _gather_fake, lib=_LIBRARY)

gather_channel_rows = torch.ops.decomps.gather_channel_rows.default
