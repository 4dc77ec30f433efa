"""This torch's release, for the hooks installed only on the releases they were checked on."""

from __future__ import annotations

import re

import torch


def torch_release() -> tuple[int, int] | None:
    """``(major, minor)`` of ``torch.__version__`` (``"2.11.0+cu130"``: ``(2, 11)``; a nightly
    ``"2.16.0a0"``: ``(2, 16)``); None for a version that does not start so."""
    match = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(match[1]), int(match[2])) if match else None
