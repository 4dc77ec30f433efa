"""Property-based fuzzing of the decompositions against eager.

Each example draws a spatial rank (1-3), mode, dtype, batch/channels, input sizes (1..24), an
output given as sizes (1..48), as sizes plus explicit ``scales_*`` (consistent with the sizes or
not), or through ``.vec`` as scale factors or sizes; a memory format and a view (sliced or
transposed strides). Forward must be bit-equal to eager with eager's strides; backward (floating
dtypes) close to eager's with its strides.

* ``test_decompositions_match_eager``: the decomposition traced with ``make_fx`` (real or
  symbolic sizes) and run. Cheap, so most examples go here.
* ``test_compiled_matches_eager``: fewer examples through ``torch.compile(backend="inductor")``
  (forward, and backward through autograd).

``DECOMPS_FUZZ_EXAMPLES`` sets the number of examples (default 25, CI); the compiled test runs
``max(4, N // 40)``. Long run: ``DECOMPS_FUZZ_EXAMPLES=2000 pytest tests/test_fuzz.py``
(docs/robustness.md records the last one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

import decomps
from decomps import ops
from tests.common import generated_code

TABLE = decomps.decomposition_table()

EXAMPLES = int(os.environ.get("DECOMPS_FUZZ_EXAMPLES", "25"))
COMPILE_EXAMPLES = max(4, EXAMPLES // 40)

SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

# Explicit scales: the brief's awkward values, exact ones, and ones eager ignores (<= 0).
SCALES = [0.6, 1.7, 2.0000001, 1 / 3, 2.0, 0.5, 1.5, 3.0, 1.0, 0.25, 4.0, 0.0, -1.0]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.uint8]


@dataclasses.dataclass
class Case:
    rank: int
    exact: bool
    dtype: torch.dtype
    shape: list[int]  # N, C, spatial
    layout: str  # contiguous | channels_last | sliced | transposed
    overload: str  # default | vec
    output_size: list[int] | None
    scales: list[float | None] | None  # .default: scales_*; .vec: scale_factors
    seed: int

    @property
    def forward(self):
        packet = ops.FORWARD[(self.rank, self.exact)]
        return packet.vec if self.overload == "vec" else packet.default

    @property
    def backward(self):
        return ops.BACKWARD[(self.rank, self.exact)].default

    def args(self):
        if self.overload == "vec":
            return (self.output_size, self.scales)
        return (self.output_size, *self.scales)

    def backward_args(self):
        """``(output_size, input_size, *scales)`` of the backward op eager's autograd calls."""
        if self.overload == "vec":
            if self.scales is None:
                return (self.output_size, self.shape, *([None] * self.rank))
            osize = [int(i * s) for i, s in zip(self.shape[2:], self.scales)]  # compute_output_size
            return (osize, self.shape, *self.scales)
        return (self.output_size, self.shape, *self.scales)


@st.composite
def cases(draw) -> Case:
    rank = draw(st.integers(1, 3))
    spatial_max = 24 if rank < 3 else 12
    isizes = [draw(st.integers(1, spatial_max)) for _ in range(rank)]
    shape = [draw(st.integers(1, 3)), draw(st.integers(1, 6)), *isizes]
    how = draw(st.sampled_from(["sizes", "sizes+scales", "vec-scales", "vec-sizes"]))
    output_size, scales, overload = None, None, "default"
    if how == "sizes":
        output_size = [draw(st.integers(1, 48 if rank < 3 else 24)) for _ in range(rank)]
        scales = [None] * rank
    elif how == "sizes+scales":
        scales = [draw(st.sampled_from(SCALES)) for _ in range(rank)]
        consistent = draw(st.booleans())
        output_size = []
        for i, s in zip(isizes, scales):
            derived = int(i * s) if s > 0 else 0
            if consistent and 1 <= derived <= 48:
                output_size.append(derived)  # what F.interpolate passes
            else:
                output_size.append(draw(st.integers(1, 48 if rank < 3 else 24)))
    elif how == "vec-scales":
        overload = "vec"
        scales = []
        for i in isizes:
            usable = [s for s in SCALES if s > 0 and 1 <= int(i * s) <= 48]
            scales.append(draw(st.sampled_from(usable)) if usable else 1.0)
    else:
        overload = "vec"
        output_size = [draw(st.integers(1, 48 if rank < 3 else 24)) for _ in range(rank)]
    layouts = ["contiguous", "sliced", "transposed"] + (["channels_last"] if rank > 1 else [])
    return Case(
        rank=rank,
        exact=draw(st.booleans()),
        dtype=draw(st.sampled_from(DTYPES)),
        shape=shape,
        layout=draw(st.sampled_from(layouts)),
        overload=overload,
        output_size=output_size,
        scales=scales,
        seed=draw(st.integers(0, 2**16)),
    )


def _values(shape, dtype, gen):
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


def make_input(case: Case) -> torch.Tensor:
    gen = torch.Generator().manual_seed(case.seed)
    shape = case.shape
    if case.layout == "channels_last":
        fmt = torch.channels_last if case.rank == 2 else torch.channels_last_3d
        return _values(shape, case.dtype, gen).contiguous(memory_format=fmt)
    if case.layout == "sliced":  # every other element of each spatial dim, offset 1
        big = _values(shape[:2] + [2 * s + 1 for s in shape[2:]], case.dtype, gen)
        index = (slice(None), slice(None)) + (slice(1, None, 2),) * case.rank
        return big[index]
    if case.layout == "transposed":
        if case.rank == 1:  # N and C swapped in memory
            return _values([shape[1], shape[0], shape[2]], case.dtype, gen).transpose(0, 1)
        swapped = shape[:-2] + [shape[-1], shape[-2]]
        return _values(swapped, case.dtype, gen).transpose(-1, -2)
    return _values(shape, case.dtype, gen)


def assert_same(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert actual.dtype == expected.dtype, what
    assert actual.shape == expected.shape, what
    assert torch.equal(actual, expected), f"{what}: values differ at {(actual != expected).nonzero()[:5].tolist()}"
    assert actual.stride() == expected.stride(), f"{what}: strides {actual.stride()} != {expected.stride()}"


def assert_grad_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert actual.dtype == expected.dtype, what
    assert actual.shape == expected.shape, what
    if actual.dtype == torch.bfloat16:
        tol = dict(rtol=1e-2, atol=1e-2)
    elif actual.dtype == torch.float64:
        tol = dict(rtol=1e-12, atol=1e-12)
    else:
        tol = dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(actual, expected, **tol, msg=lambda m: f"{what}: {m}")
    assert actual.stride() == expected.stride(), f"{what}: strides {actual.stride()} != {expected.stride()}"


def _grad_output(case: Case, out: torch.Tensor) -> torch.Tensor:
    gen = torch.Generator().manual_seed(case.seed + 1)
    return torch.randn(out.shape, generator=gen, dtype=torch.float64).to(case.dtype)


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(case=cases(), tracing_mode=st.sampled_from(["real", "symbolic"]), generated=st.booleans())
def test_decompositions_match_eager(case: Case, tracing_mode: str, generated: bool):
    # generated: the decompositions' own code on CPU too (kernel_choice picks no ATen kernel)
    with generated_code() if generated else contextlib.nullcontext():
        _decompositions_match_eager(case, tracing_mode)


def _decompositions_match_eager(case: Case, tracing_mode: str):
    x = make_input(case)
    op, args = case.forward, case.args()
    expected = op(x, *args)
    traced = make_fx(lambda x: op(x, *args), decomposition_table=TABLE, tracing_mode=tracing_mode)(x)
    assert not any(
        n.op == "call_function" and getattr(n.target, "overloadpacket", None) in ops.FORWARD.values()
        for n in traced.graph.nodes
    ), "the forward op was not decomposed"
    assert_same(traced(x), expected, f"forward {case}")

    if not case.dtype.is_floating_point:
        return
    bwd, bargs = case.backward, case.backward_args()
    g = _grad_output(case, expected)
    expected_grad = bwd(g, *bargs)
    traced_bwd = make_fx(lambda g: bwd(g, *bargs), decomposition_table=TABLE, tracing_mode=tracing_mode)(g)
    assert_grad_close(traced_bwd(g), expected_grad, f"backward {case}")


@settings(max_examples=COMPILE_EXAMPLES, **SETTINGS)
@given(case=cases())
def test_compiled_matches_eager(case: Case):
    op, args = case.forward, case.args()

    def fn(x):
        return op(x, *args)

    floating = case.dtype.is_floating_point
    # Leaves with the drawn strides (a view of a tensor that needs no grad is a leaf).
    x = make_input(case).requires_grad_(floating)
    xe = make_input(case).requires_grad_(floating)
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    y = torch.compile(fn, backend=counter, dynamic=False, fullgraph=True)(x)
    e = fn(xe)
    assert counter.frame_count >= 1, "nothing was compiled"
    assert_same(y.detach(), e.detach(), f"compiled forward {case}")
    if floating:
        # grad_output in the forward output's layout: AOTAutograd traces the backward for that
        # layout and converts other tangents to it, while eager's backward follows the layout
        # it is given (docs/robustness.md, "Gradient layout").
        g = torch.empty_like(e).copy_(_grad_output(case, e))
        (grad,) = torch.autograd.grad(y, x, g)
        (expected_grad,) = torch.autograd.grad(e, xe, g)
        assert_grad_close(grad, expected_grad, f"compiled backward {case}")


def test_fuzz_mode_is_configured():
    """The example counts the two tests run (CI default, or the long mode's env var)."""
    assert test_decompositions_match_eager.hypothesis.inner_test is not None
    assert EXAMPLES == int(os.environ.get("DECOMPS_FUZZ_EXAMPLES", "25")) >= 1
    assert COMPILE_EXAMPLES == max(4, EXAMPLES // 40)
    assert math.isclose(SCALES[2], 2.0000001) and 1 / 3 in SCALES
