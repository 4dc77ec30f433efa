"""lowerings.cpu_vectors: the C++ backend's vector width, and a warning where its ISA check
failed on a machine whose ATen kernels are vectorized."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch
from torch._inductor import config, cpu_vec_isa

from lowerings import cpu_vectors

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh_warning():
    cpu_vectors._warn_no_vectors.cache_clear()
    yield
    cpu_vectors._warn_no_vectors.cache_clear()


def test_width_is_the_backends(fresh_warning):
    isa = cpu_vec_isa.pick_vec_isa()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cpu_vectors.vector_bits() == (isa.bit_width() if isa else 0)


@pytest.mark.parametrize("capability, simdlen, warns", [("AVX512", None, True), ("AVX2", None, True),
                                                        ("DEFAULT", None, False), ("AVX512", 256, False)])
def test_no_vectors_warns_once_where_aten_has_them(capability, simdlen, warns, fresh_warning):
    with mock.patch.object(cpu_vec_isa, "pick_vec_isa", lambda: cpu_vec_isa.invalid_vec_isa), \
            mock.patch.object(torch.backends.cpu, "get_cpu_capability", lambda: capability), \
            mock.patch.object(config.cpp, "simdlen", simdlen), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cpu_vectors.vector_bits() == 0
        assert cpu_vectors.vector_bits() == 0
    messages = [str(w.message) for w in caught]
    assert len(messages) == (1 if warns else 0), messages
    if warns:
        assert f"run {capability}" in messages[0] and "nt.py" in messages[0]


def test_a_script_next_to_a_failing_nt_module_is_warned(tmp_path):
    """The ISA check's child Python runs the script directory's nt.py; where that fails the
    compiled kernels are scalar (and still eager's), and the package says why on a machine whose
    ATen kernels are vectorized."""
    vectorized_aten = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    (tmp_path / "nt.py").write_text("raise SystemExit(1)\n")
    (tmp_path / "run.py").write_text(textwrap.dedent("""
        import torch, torch.nn.functional as F
        import decomps
        x = torch.randn(1, 3, 40, 50)
        out = torch.compile(lambda x: F.interpolate(x, size=(20, 30)), dynamic=True)(x)
        print("equal", torch.equal(out, F.interpolate(x, size=(20, 30))))
    """))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, str(tmp_path / "run.py")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "equal True" in proc.stdout
    assert ("found no vector instructions" in proc.stderr) == vectorized_aten
    (tmp_path / "nt.py").unlink()
    proc = subprocess.run([sys.executable, str(tmp_path / "run.py")], env={**env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c2")},
                          capture_output=True, text=True, timeout=600)
    assert "equal True" in proc.stdout and "found no vector instructions" not in proc.stderr
