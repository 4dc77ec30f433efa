"""Shared helpers for the tests: the op family, eager references, tolerances, index parity cases."""

from __future__ import annotations

import contextlib
import random
import re
from unittest import mock

import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import decomps
from decomps import kernel_choice
from decomps.ops import BACKWARD, FORWARD
from lowerings import size_variants

aten = torch.ops.aten
TABLE = decomps.decomposition_table()
RANKS = (1, 2, 3)
MODES = (False, True)  # exact?


def mode_name(exact: bool) -> str:
    return "nearest-exact" if exact else "nearest"


def forward_op(rank: int, exact: bool):
    return FORWARD[(rank, exact)].default


def backward_op(rank: int, exact: bool):
    return BACKWARD[(rank, exact)].default


@contextlib.contextmanager
def generated_code():
    """A context in which every call site runs the decompositions' generated code: ATen's
    kernels and the repeat ops (``kernel_choice``) on no device, as on a device without them or
    while exporting; and the backward gathers its windows where it could store to each input
    (``kernel_choice.PLAIN_STORE_LAYOUTS``, tested on its own in tests/test_backward.py).

    The compile caches' keys do not see it: compile under it with fresh caches
    (``torch._inductor.utils.fresh_inductor_cache()``)."""
    with mock.patch.object(kernel_choice, "ATEN_KERNEL_DEVICES", ()), mock.patch.object(
        kernel_choice, "ATEN_SYMBOLIC_BACKWARD_DEVICES", ()
    ), mock.patch.object(kernel_choice, "REPEAT_KERNEL_DEVICES", ()), mock.patch.object(
        kernel_choice, "PLAIN_STORE_LAYOUTS", {}
    ):
        yield


@contextlib.contextmanager
def generated_gathers():
    """A context in which forward gathers run the package's generated kernels on any machine:
    ATen's kernel (``kernel_choice.ATEN_KERNEL_DEVICES``) on no device. Where the C++ backend's
    vectors are narrower than AVX2's the rule gives float32 gathers ATen's kernel, an extern call
    with no generated kernel to read or time. Compile under it with fresh caches, as under
    ``generated_code``."""
    with mock.patch.object(kernel_choice, "ATEN_KERNEL_DEVICES", ()):
        yield


def dynamic_cpp_kernels(fn, *args):
    """``fn``'s result compiled with dynamic shapes at 2 threads, and the C++ source of each of its
    kernels (the package's gathers generated on any machine, ``generated_gathers``)."""
    from torch._inductor import config
    from torch._inductor.utils import fresh_inductor_cache, run_and_get_code

    torch._dynamo.reset()
    with fresh_inductor_cache(), mock.patch.object(config.cpp, "threads", 2), generated_gathers():
        out, codes = run_and_get_code(torch.compile(fn, dynamic=True, fullgraph=True), *args)
    return out, re.findall(r"r'''\n(.*?)'''", "\n".join(codes), re.S)


@contextlib.contextmanager
def runtime_sizes():
    """A context in which call sites choose as for kernels that read symbolic sizes at run time:
    no size variants (``lowerings.size_variants``, installed on some torch versions), under which
    CUDA's backward chooses as for static sizes (``kernel_choice.sizes_at_launch``)."""
    with mock.patch.object(size_variants, "compiling_variants", lambda: False):
        yield


def aten_kernel_nodes(graph) -> list[str]:
    """The targets of the extern calls to ATen's kernels (``decomps.aten_kernels``) in a graph."""
    return [str(n.target) for n in graph.graph.nodes if str(n.target).startswith("decomps.upsample_nearest")]


def decomposed(op):
    return TABLE[op]


def through_decompositions(fn, *args):
    """Runs ``fn`` as a graph traced with this package's decomposition table."""
    return make_fx(fn, decomposition_table=TABLE)(*args)(*args)


def memory_format_of(rank: int, channels_last: bool):
    if not channels_last:
        return torch.contiguous_format
    return {2: torch.channels_last, 3: torch.channels_last_3d}[rank]


def assert_same(test, actual: torch.Tensor, expected: torch.Tensor, msg: str = ""):
    """Bit-equal values (NaN where eager has NaN), same dtype, same strides."""
    test.assertEqual(actual.dtype, expected.dtype, msg=msg)
    test.assertEqual(actual.shape, expected.shape, msg=msg)
    test.assertTrue(
        torch.equal(actual, expected)
        or (actual.dtype.is_floating_point and torch.equal(actual.isnan(), expected.isnan())
            and torch.equal(actual.nan_to_num(), expected.nan_to_num())),
        msg=f"values differ {msg}",
    )
    test.assertEqual(actual.stride(), expected.stride(), msg=f"strides {msg}")


def gradient_tolerance(grad_output: torch.Tensor, backward) -> torch.Tensor:
    """Allowed |ours - eager| per grad_input element.

    A window sum's rounding error scales with the sum of |terms|, so the tolerance is
    relative to ``backward(|grad_output|)``: 1e-6 for float32, 1e-12 for float64; float16 and
    bfloat16 must agree to one rounding of eager's result (its ulp).
    """
    dtype = grad_output.dtype
    abs_sum = backward(grad_output.abs().double()).abs()
    if dtype == torch.float32:
        return 1e-6 * abs_sum + 1e-30
    if dtype == torch.float64:
        return 1e-12 * abs_sum + 1e-300
    eager = backward(grad_output).double().abs()
    return torch.finfo(dtype).eps * eager + 1e-6 * abs_sum


def assert_grad_close(test, actual, expected, tolerance, msg=""):
    test.assertEqual(actual.dtype, expected.dtype, msg=msg)
    test.assertEqual(actual.shape, expected.shape, msg=msg)
    err = (actual.double() - expected.double()).abs()
    worst = (err - tolerance).max().item() if err.numel() else -1
    test.assertTrue(worst <= 0, msg=f"gradient error exceeds tolerance by {worst} {msg}")


# Index parity cases: sizes, scales and inputs that select each of eager's kernels.

INDEX_GRID = range(1, 301)
EXPLICIT_SCALES = (0.6, 1.7, 1 / 3, 0.5, 25.0, 2.0000001, 7 / 3, 0.75)


def random_size_pairs(n: int, seed: int = 0):
    rng = random.Random(seed)
    return [(rng.randint(1, 4096), rng.randint(1, 4096)) for _ in range(n)]


def explicit_scale_cases():
    """(isize, osize, scale): osize as .vec derives it, plus one size off that."""
    for scale in EXPLICIT_SCALES:
        for isize in range(1, 301, 7):
            osize = int(isize * scale)
            for o in {osize, osize + 1}:
                if o > 0:
                    yield isize, o, scale


def generic_kernel_input(isize, osize, scale, dtype, device):
    """1d: the generic CPU kernel (float32 or float64 arithmetic by dtype), CUDA's only rule.

    The input holds its own index, so the output shows which input each position read.
    Returns (input, output_size, scales)."""
    x = torch.arange(isize, dtype=dtype, device=device).view(1, 1, isize)
    return x, [osize], [scale]


def channels_last_kernel_input(isize, osize, scale, dtype, device):
    """2d, 4 channels-last channels: CPU's channels-last kernel (the header helpers) and
    CUDA's 2d kernel (identity along equal sizes). As ``generic_kernel_input``."""
    x = torch.arange(isize, dtype=dtype, device=device).view(1, 1, 1, isize)
    x = x.expand(1, 4, 1, isize).contiguous(memory_format=torch.channels_last)
    return x, [1, osize], [None, scale]


def symbolic_sizes(*hints):
    """A shape env and symbolic sizes in it with these example values."""
    env = ShapeEnv()
    sizes = [env.create_symintnode(env.create_symbol(h, source=ConstantSource(f"s{k}")), hint=h)
             for k, h in enumerate(hints)]
    return env, sizes


def exporting():
    """``torch.compiler.is_exporting()`` true, as inside ``torch.export``."""
    return mock.patch("torch.compiler.is_exporting", return_value=True)
