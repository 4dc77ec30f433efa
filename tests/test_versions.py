"""lowerings.versions: this torch's release as the version-gated hooks read it."""

from __future__ import annotations

import pytest
import torch

from lowerings.versions import torch_release


@pytest.mark.parametrize("version, release", [("2.11.0+cu130", (2, 11)), ("2.13.0+cpu", (2, 13)),
                                              ("2.16.0a0+git1234", (2, 16)), ("10.2", (10, 2)), ("local", None)])
def test_torch_release(monkeypatch, version, release):
    monkeypatch.setattr(torch, "__version__", version)
    assert torch_release() == release
