"""The vector width of Inductor's C++ backend on this machine, read by ``decomps.kernel_choice``.

The backend loads a gather's elements one by one into a buffer and moves the buffer as one
vector of its ISA (``cpu_vec_isa.pick_vec_isa``: AVX512, AVX2, ...). Which formulation of a CPU
gather is the fastest depends on that width (docs/design.md, "Kernel choice").

The backend finds its ISA by building a probe library and loading it in a child Python that
inherits the parent's ``sys.path``: a script's own ``nt.py`` next to it runs in that child
(``ntpath`` tries ``import nt``, and an editable install's ``.pth`` finder imports ``pathlib`` at
start-up), and where it fails the probe fails and every generated CPU kernel is scalar
(docs/findings.md, finding 3). Where the backend is left without vectors on a machine whose ATen
kernels run AVX2 or AVX512, a warning says so once.
"""

from __future__ import annotations

import functools
import warnings


def vector_bits() -> int:
    """The bit width of the C++ backend's vectors here; 0 where it does not vectorize."""
    from torch._inductor import cpu_vec_isa

    isa = cpu_vec_isa.pick_vec_isa()
    if not isa:
        _warn_no_vectors()
    return isa.bit_width() if isa else 0


@functools.cache
def _warn_no_vectors() -> None:
    """Once per process: the backend found no vector ISA where ATen uses one and nothing asked
    for scalar code (``config.cpp.simdlen``)."""
    import torch
    from torch._inductor import config

    capability = torch.backends.cpu.get_cpu_capability()
    if config.cpp.simdlen is None and capability in ("AVX2", "AVX512"):
        warnings.warn(
            f"Inductor's C++ backend found no vector instructions on this machine, whose ATen "
            f"kernels run {capability}: its check (a probe library loaded by a child Python with "
            "this process's sys.path) failed, and the compiled CPU kernels will be scalar. A module "
            "named nt.py next to the script is a known cause: the child imports it at start-up.",
            stacklevel=3,
        )
