"""The vector width of Inductor's C++ backend on this machine, read by ``decomps.kernel_choice``.

The backend loads a gather's elements one by one into a buffer and moves the buffer as one
vector of its ISA (``cpu_vec_isa.pick_vec_isa``: AVX512, AVX2, ...). Which formulation of a CPU
gather is the fastest depends on that width (docs/design.md, "Kernel choice").
"""

from __future__ import annotations


def vector_bits() -> int:
    """The bit width of the C++ backend's vectors here; 0 where it does not vectorize."""
    from torch._inductor import cpu_vec_isa

    isa = cpu_vec_isa.pick_vec_isa()
    return isa.bit_width() if isa else 0
