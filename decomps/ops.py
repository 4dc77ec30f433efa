"""The nearest-upsampling op family, by spatial rank and mode."""

from __future__ import annotations

import torch

aten = torch.ops.aten

# (spatial rank, exact) -> forward / backward op packets
FORWARD = {
    (1, False): aten.upsample_nearest1d,
    (2, False): aten.upsample_nearest2d,
    (3, False): aten.upsample_nearest3d,
    (1, True): aten._upsample_nearest_exact1d,
    (2, True): aten._upsample_nearest_exact2d,
    (3, True): aten._upsample_nearest_exact3d,
}
BACKWARD = {
    (1, False): aten.upsample_nearest1d_backward,
    (2, False): aten.upsample_nearest2d_backward,
    (3, False): aten.upsample_nearest3d_backward,
    (1, True): aten._upsample_nearest_exact1d_backward,
    (2, True): aten._upsample_nearest_exact2d_backward,
    (3, True): aten._upsample_nearest_exact3d_backward,
}

# Overloads that stock PyTorch decomposes above autograd (see _install.py).
FORWARD_ENTRY_OVERLOADS = tuple(
    overload for packet in FORWARD.values() for overload in (packet.default, packet.vec)
)
FORWARD_OVERLOADS = tuple(
    overload
    for packet in FORWARD.values()
    for overload in (packet.default, packet.vec, packet.out)
)
BACKWARD_OVERLOADS = tuple(
    overload for packet in BACKWARD.values() for overload in (packet.default, packet.grad_input)
)
