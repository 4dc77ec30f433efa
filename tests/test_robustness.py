"""Robustness of the nearest-upsampling decompositions.

* Bad input raises eager's exception type with a clear message, called directly
  (``decomposition_table()[op](...)``) and through ``torch.compile`` (where Dynamo wraps it);
  what stock ``torch.compile`` does with the same input is recorded next to it.
* Empty tensors, NaN and Inf behave as in eager.
* (Tensors past 2**31 elements: tests/test_large_tensors.py.)
* Dynamic shapes: ``dynamic=True``, ``mark_dynamic``, automatic dynamic; recompile bounds and
  the guards each fast path adds (docs/robustness.md lists them).
* Versions: a torch lacking a hook gets a single RuntimeWarning and stock behaviour; a torch
  newer than the newest tested release, a single UserWarning, and the package installs.
* Installation: idempotent, exactly reversible, thread safe, touches only the nearest family.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import random
import re
import subprocess
import sys
import textwrap
import threading
import types
import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch._ops import OpOverload, OpOverloadPacket

import decomps
import lowerings
from decomps import backward_windows, eager_rules, ops
from tests.common import generated_code

aten = torch.ops.aten
TABLE = decomps.decomposition_table()
NEAREST_OVERLOADS = frozenset(ops.FORWARD_OVERLOADS) | frozenset(ops.BACKWARD_OVERLOADS)


@pytest.fixture(autouse=True, scope="module")
def _quiet_fake_tensor_log():
    # FakeTensor logs a full traceback at ERROR level whenever a meta kernel raises.
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@pytest.fixture(autouse=True)
def _installed():
    """Every test starts and ends with the package installed (the state ``import decomps`` leaves)."""
    assert decomps.install()
    yield
    decomps.install()


def _raised(fn: Callable[[], object]) -> BaseException | None:
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return e
    return None


def _chain(e: BaseException) -> list[BaseException]:
    """``e`` and what it wraps: ``__cause__``, ``__context__`` and Dynamo's ``inner_exception``."""
    out = []
    while e is not None and e not in out:
        out.append(e)
        e = e.__cause__ or getattr(e, "inner_exception", None) or e.__context__
    return out


def _original(e: BaseException) -> BaseException:
    """The innermost exception: the one the failing kernel raised before Dynamo wrapped it."""
    return _chain(e)[-1]


def _same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Bit-equal values (NaN where eager has NaN), same dtype, shape and strides."""
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
    assert actual.stride() == expected.stride()


def _fresh_compile(fn, **kwargs):
    torch._dynamo.reset()
    return torch.compile(fn, backend="inductor", **kwargs)


class _Recorder:
    """An Inductor backend that counts graphs it compiled and records the shape guards of each.

    Dynamo may call a backend more than once per graph (TensorifyScalarRestartAnalysis on a
    symbolic float), so only compilations that return are counted.
    """

    def __init__(self):
        self.graphs = 0
        self.guards: list[list[str]] = []

    def __call__(self, gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        compiled = compile_fx(gm, example_inputs)
        self.graphs += 1
        ctx = torch._guards.TracingContext.try_get()
        shape_env = ctx.fake_mode.shape_env if ctx is not None and ctx.fake_mode else None
        self.guards.append([str(g.expr) for g in shape_env.guards] if shape_env else [])
        return compiled


# ---------------------------------------------------------------------------------------------
# 1. Bad input through the decompositions, called directly


def _x(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


@dataclasses.dataclass(frozen=True)
class Bad:
    id: str
    op: OpOverload
    args: Callable[[], tuple]
    exc: type
    # Searched in eager's message and in the decomposition's. An alternative after "|" is a
    # different but equally clear wording the decomposition may use (docs/robustness.md).
    pattern: str
    kwargs: Callable[[], dict] = dict


X4 = functools.partial(_x, 1, 2, 4, 4)

BAD_INPUTS = [
    # wrong rank
    Bad("2d-rank3", aten.upsample_nearest2d.default, lambda: (_x(2, 4, 4), [8, 8]), RuntimeError,
        r"input_size equals to 4, but got size 3|4D data tensor expected"),
    Bad("2d-rank5", aten.upsample_nearest2d.default, lambda: (_x(1, 1, 2, 4, 4), [8, 8]), RuntimeError,
        r"input_size equals to 4, but got size 5|4D data tensor expected"),
    Bad("1d-rank2", aten.upsample_nearest1d.default, lambda: (_x(4, 4), [8]), RuntimeError,
        r"input_size equals to 3, but got size 2|3D data tensor expected"),
    Bad("3d-exact-rank4", aten._upsample_nearest_exact3d.default, lambda: (_x(1, 4, 4, 4), [8, 8, 8]),
        RuntimeError, r"input_size equals to 5, but got size 4|5D data tensor expected"),
    # zero / negative sizes
    Bad("2d-zero-osize", aten.upsample_nearest2d.default, lambda: (X4(), [0, 8]), RuntimeError,
        r"Input and output sizes should be greater than 0"),
    Bad("2d-negative-osize", aten.upsample_nearest2d.default, lambda: (X4(), [-1, 8]), RuntimeError,
        r"Input and output sizes should be greater than 0"),
    Bad("1d-zero-osize", aten._upsample_nearest_exact1d.default, lambda: (_x(1, 2, 4), [0]),
        RuntimeError, r"Input and output sizes should be greater than 0"),
    Bad("3d-negative-osize", aten.upsample_nearest3d.default, lambda: (_x(1, 1, 2, 2, 2), [2, -3, 2]),
        RuntimeError, r"Input and output sizes should be greater than 0"),
    Bad("2d-zero-isize", aten.upsample_nearest2d.default, lambda: (_x(1, 2, 0, 4), [8, 8]), RuntimeError,
        r"Input and output sizes should be greater than 0|Non-empty 4D data tensor expected"),
    Bad("2d-zero-channels", aten.upsample_nearest2d.default, lambda: (_x(1, 0, 4, 4), [8, 8]),
        RuntimeError, r"Non-empty 4D data tensor expected but got a tensor with sizes \[1, 0, 4, 4\]"),
    # wrong number of sizes
    Bad("2d-one-osize", aten.upsample_nearest2d.default, lambda: (X4(), [8]), RuntimeError,
        r"output_size equals to 2, but got size 1"),
    Bad("2d-three-osizes", aten.upsample_nearest2d.default, lambda: (X4(), [8, 8, 8]), RuntimeError,
        r"output_size equals to 2, but got size 3"),
    # .vec: both / neither, count, non-positive and non-finite scale factors
    Bad("vec-both", aten.upsample_nearest2d.vec, lambda: (X4(), [8, 8], [2.0, 2.0]), RuntimeError,
        r"Must specify exactly one of output_size and scale_factors"),
    Bad("vec-neither", aten._upsample_nearest_exact2d.vec, lambda: (X4(), None, None), RuntimeError,
        r"Must specify exactly one of output_size and scale_factors"),
    Bad("vec-one-scale", aten.upsample_nearest2d.vec, lambda: (X4(), None, [2.0]), RuntimeError,
        r"scale_factors"),
    Bad("vec-one-size", aten.upsample_nearest2d.vec, lambda: (X4(), [8], None), RuntimeError,
        r"output_size"),
    Bad("vec-scale-zero", aten.upsample_nearest2d.vec, lambda: (X4(), None, [0.0, 2.0]), RuntimeError,
        r"Input and output sizes should be greater than 0"),
    Bad("vec-scale-negative", aten._upsample_nearest_exact2d.vec, lambda: (X4(), None, [2.0, -1.0]),
        RuntimeError, r"Input and output sizes should be greater than 0"),
    Bad("vec-scale-minus-zero", aten.upsample_nearest1d.vec, lambda: (_x(1, 2, 4), None, [-0.0]),
        RuntimeError, r"Input and output sizes should be greater than 0"),
    Bad("vec-scale-tiny", aten.upsample_nearest3d.vec, lambda: (_x(1, 1, 4, 4, 4), None, [2.0, 1e-9, 2.0]),
        RuntimeError, r"Input and output sizes should be greater than 0"),
    Bad("vec-scale-nan", aten.upsample_nearest2d.vec, lambda: (X4(), None, [float("nan"), 2.0]),
        RuntimeError, r"int64_t|overflow|NaN|nan"),
    Bad("vec-scale-inf", aten.upsample_nearest2d.vec, lambda: (X4(), None, [float("inf"), 2.0]),
        RuntimeError, r"int64_t|overflow|inf"),
    Bad("vec-scale-huge", aten.upsample_nearest2d.vec, lambda: (X4(), None, [1e30, 2.0]),
        RuntimeError, r"int64_t|overflow|too big"),
    # unsupported dtypes
    Bad("2d-int32", aten.upsample_nearest2d.default, lambda: (X4(dtype=torch.int32), [8, 8]),
        NotImplementedError, r"not implemented for"),
    Bad("2d-exact-int64", aten._upsample_nearest_exact2d.default, lambda: (X4(dtype=torch.int64), [8, 8]),
        NotImplementedError, r"not implemented for"),
    Bad("1d-bool", aten.upsample_nearest1d.default, lambda: (_x(1, 2, 4) > 0, [8]),
        NotImplementedError, r"not implemented for"),
    Bad("3d-complex", aten.upsample_nearest3d.default, lambda: (_x(1, 1, 2, 2, 2, dtype=torch.complex64), [4, 4, 4]),
        NotImplementedError, r"not implemented for"),
    Bad("2d-out-dtype", aten.upsample_nearest2d.out,
        lambda: (X4(), [8, 8]), RuntimeError, r"Expected out tensor to have dtype",
        lambda: {"out": torch.empty(1, 2, 8, 8, dtype=torch.float64)}),
    # backward: sizes inconsistent with grad_output, non-floating grad_output
    Bad("bw-grad-width", aten.upsample_nearest2d_backward.default,
        lambda: (_x(1, 2, 8, 7), [8, 8], [1, 2, 4, 4]), RuntimeError,
        r"Expected grad_output to have the same shape as output; output.size\(3\) = 8 but got grad_output.size\(3\) = 7"),
    Bad("bw-grad-channels", aten._upsample_nearest_exact2d_backward.default,
        lambda: (_x(1, 3, 8, 8), [8, 8], [1, 2, 4, 4]), RuntimeError,
        r"output.size\(1\) = 2 but got grad_output.size\(1\) = 3"),
    Bad("bw-grad-batch", aten.upsample_nearest1d_backward.default,
        lambda: (_x(2, 2, 8), [8], [1, 2, 4]), RuntimeError,
        r"tensor.size\[0\] == 1 but got: dimension 3 and tensor.size\[0\] = 2"
        r"|output.size\(0\) = 1 but got grad_output.size\(0\) = 2"),
    Bad("bw-grad-rank", aten.upsample_nearest2d_backward.default,
        lambda: (_x(2, 8, 8), [8, 8], [1, 2, 4, 4]), RuntimeError,
        r"Expected grad_output to be a tensor of dimension 4 but got: dimension 3"),
    Bad("bw-3d-grad-depth", aten.upsample_nearest3d_backward.default,
        lambda: (_x(1, 1, 5, 4, 4), [4, 4, 4], [1, 1, 2, 2, 2]), RuntimeError,
        r"output.size\(2\) = 4 but got grad_output.size\(2\) = 5"),
    Bad("bw-input-size-length", aten.upsample_nearest2d_backward.default,
        lambda: (_x(1, 2, 8, 8), [8, 8], [1, 2, 4]), RuntimeError,
        r"input_size equals to 4, but got size 3"),
    Bad("bw-output-size-length", aten.upsample_nearest2d_backward.default,
        lambda: (_x(1, 2, 8, 8), [8], [1, 2, 4, 4]), RuntimeError,
        r"output_size equals to 2, but got size 1"),
    Bad("bw-zero-isize", aten.upsample_nearest2d_backward.default,
        lambda: (_x(1, 2, 8, 8), [8, 8], [1, 2, 0, 4]), RuntimeError,
        r"Input and output sizes should be greater than 0"),
    Bad("bw-int32", aten.upsample_nearest2d_backward.default,
        lambda: (X4(dtype=torch.int32), [4, 4], [1, 2, 2, 2]), NotImplementedError,
        r"upsample_nearest2d_backward\" not implemented for"),
    Bad("bw-exact-uint8", aten._upsample_nearest_exact1d_backward.default,
        lambda: (_x(1, 2, 8, dtype=torch.uint8), [8], [1, 2, 4]), NotImplementedError,
        r"not implemented for"),
    Bad("bw-grad-input-dtype", aten.upsample_nearest2d_backward.grad_input,
        lambda: (_x(1, 2, 8, 8), [8, 8], [1, 2, 4, 4]), RuntimeError, r"Expected out tensor to have dtype",
        lambda: {"grad_input": torch.empty(1, 2, 4, 4, dtype=torch.float64)}),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=lambda c: c.id)
def test_decomposition_raises_eager_exception(case: Bad):
    args, kwargs = case.args(), case.kwargs()
    eager = _raised(lambda: case.op(*args, **kwargs))
    assert type(eager) is case.exc, f"eager raised {eager!r}"
    assert re.search(case.pattern, str(eager)), f"eager message changed: {eager}"

    ours = _raised(lambda: TABLE[case.op](*args, **kwargs))
    assert type(ours) is case.exc, f"decomposition raised {type(ours).__name__}: {ours}, eager {case.exc.__name__}"
    assert re.search(case.pattern, str(ours)), f"unclear message: {ours!r}; eager: {eager!r}"


def test_non_positive_scales_on_default_overload_are_ignored_like_eager():
    """``.default``'s ``scales_*`` <= 0 (and NaN) mean "derive from the sizes" in eager: no error."""
    x = torch.randn(1, 2, 5, 7)
    for op in (aten.upsample_nearest2d.default, aten._upsample_nearest_exact2d.default):
        for scale in (0.0, -1.0, -0.0, float("nan")):
            _same(TABLE[op](x, [9, 11], scale, scale), op(x, [9, 11], scale, scale))
            _same(TABLE[op](x, [9, 11], scale, scale), op(x, [9, 11]))


def test_f_interpolate_rejects_non_positive_scale_factors_like_eager():
    """F.interpolate(scale_factor <= 0) goes through ``.vec``: output size <= 0, eager's RuntimeError."""
    x = torch.randn(1, 2, 4, 4)
    for scale in (0.0, -1.0, -2.5, 0.1):
        for mode in ("nearest", "nearest-exact"):
            eager = _raised(lambda: F.interpolate(x, scale_factor=scale, mode=mode))
            assert type(eager) is RuntimeError
            assert "Input and output sizes should be greater than 0" in str(eager)
            op = aten.upsample_nearest2d.vec if mode == "nearest" else aten._upsample_nearest_exact2d.vec
            ours = _raised(lambda: TABLE[op](x, None, [scale, scale]))
            assert type(ours) is RuntimeError and "greater than 0" in str(ours), ours


# ---------------------------------------------------------------------------------------------
# 1b. Bad input through torch.compile, package vs stock


@dataclasses.dataclass(frozen=True)
class CompileBad:
    id: str
    fn: Callable
    make: Callable[[], tuple]
    exc: type  # what eager raises
    phrase: str  # in eager's message and in the message of the exception the kernel raised
    # Stock torch.compile (decomps.disabled()), torch 2.11 and 2.13 alike:
    #   "eager": its original exception is eager's type and message
    #   "other": it raises, but something else (docs/robustness.md says what)
    #   "returns": it returns a tensor where eager raises
    stock: str


def _f(**kw):
    return lambda x: F.interpolate(x, **kw)


X = functools.partial(torch.randn, 1, 2, 4, 4)

COMPILE_BAD = [
    CompileBad("F-size-zero", _f(size=(0, 4)), lambda: (X(),), RuntimeError,
               "Input and output sizes should be greater than 0", "other"),
    CompileBad("F-size-negative", _f(size=(-2, 4)), lambda: (X(),), RuntimeError,
               "Input and output sizes should be greater than 0", "other"),
    CompileBad("F-scale-zero", _f(scale_factor=0.0), lambda: (X(),), RuntimeError,
               "Input and output sizes should be greater than 0", "other"),
    CompileBad("F-scale-negative", _f(scale_factor=-1.0, mode="nearest-exact"), lambda: (X(),), RuntimeError,
               "Input and output sizes should be greater than 0", "other"),
    CompileBad("F-scale-to-zero", _f(scale_factor=0.1), lambda: (X(),), RuntimeError,
               "Input and output sizes should be greater than 0", "returns"),
    CompileBad("F-both", _f(size=(8, 8), scale_factor=2.0), lambda: (X(),), ValueError,
               "only one of size or scale_factor should be defined", "eager"),
    CompileBad("F-neither", _f(), lambda: (X(),), ValueError,
               "either size or scale_factor should be defined", "eager"),
    CompileBad("F-int32", _f(scale_factor=2.0), lambda: (X().int(),), NotImplementedError,
               "not implemented for", "returns"),
    CompileBad("F-exact-int16", _f(scale_factor=2.0, mode="nearest-exact"), lambda: (X().to(torch.int16),),
               NotImplementedError, "not implemented for", "returns"),
    CompileBad("aten-rank", lambda x: aten.upsample_nearest2d.default(x[0], [8, 8]), lambda: (X(),),
               RuntimeError, "input_size equals to 4, but got size 3", "other"),
    CompileBad("aten-vec-both", lambda x: aten.upsample_nearest2d.vec(x, [8, 8], [2.0, 2.0]), lambda: (X(),),
               RuntimeError, "Must specify exactly one of output_size and scale_factors", "eager"),
    CompileBad("aten-vec-neither", lambda x: aten._upsample_nearest_exact1d.vec(x[0], None, None), lambda: (X(),),
               RuntimeError, "Must specify exactly one of output_size and scale_factors", "eager"),
    CompileBad("aten-bw-mismatch", lambda g: aten.upsample_nearest2d_backward.default(g, [8, 8], [1, 2, 2, 2]),
               lambda: (X(),), RuntimeError, "Expected grad_output to have the same shape as output", "eager"),
    CompileBad("aten-bw-int32", lambda g: aten.upsample_nearest2d_backward.default(g, [4, 4], [1, 2, 2, 2]),
               lambda: (X().int(),), NotImplementedError, "not implemented for", "returns"),
    CompileBad("aten-zero-channels", lambda x: aten.upsample_nearest2d.default(x, [8, 8]),
               lambda: (torch.randn(1, 0, 4, 4),), RuntimeError, "Non-empty 4D data tensor expected", "returns"),
    CompileBad("F-scale-nan", _f(scale_factor=float("nan")), lambda: (X(),), RuntimeError,
               "int64_t", "other"),
]


def _outcome(fn, args):
    try:
        return _fresh_compile(fn)(*args)
    except Exception as e:  # noqa: BLE001
        return e


@pytest.mark.parametrize("case", COMPILE_BAD, ids=lambda c: c.id)
def test_compile_raises_eager_exception(case: CompileBad):
    args = case.make()
    eager = _raised(lambda: case.fn(*args))
    assert type(eager) is case.exc and case.phrase in str(eager), repr(eager)

    ours = _outcome(case.fn, args)
    assert isinstance(ours, Exception), "torch.compile returned where eager raises"
    # Dynamo wraps it (TorchRuntimeError for errors while tracing with fake tensors,
    # BackendCompilerFailed for errors in Inductor); the original is the innermost exception.
    assert isinstance(ours, torch._dynamo.exc.TorchDynamoException) or type(ours) is case.exc
    original = _original(ours)
    assert type(original) is case.exc, [type(e).__name__ for e in _chain(ours)]
    assert case.phrase in str(original) and case.phrase in str(ours)

    with decomps.disabled():
        stock = _outcome(case.fn, args)
    if case.stock == "returns":
        assert isinstance(stock, torch.Tensor), repr(stock)
    else:
        assert isinstance(stock, Exception), "stock torch.compile no longer raises: update docs"
        # Parity of the wrapper: the package raises what stock raises around the error.
        assert type(stock) is type(ours), (type(stock), type(ours))
        stock_original = _original(stock)
        matches_eager = type(stock_original) is case.exc and case.phrase in str(stock_original)
        assert matches_eager == (case.stock == "eager"), repr(stock_original)


# ---------------------------------------------------------------------------------------------
# Empty tensors


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("exact", [False, True], ids=["nearest", "exact"])
def test_empty_batch_through_decompositions(rank, exact):
    fwd = ops.FORWARD[(rank, exact)]
    bwd = ops.BACKWARD[(rank, exact)]
    isize = [5, 4, 3][:rank]
    osize = [7, 8, 2][:rank]
    x = torch.randn(0, 3, *isize)
    _same(TABLE[fwd.default](x, osize), fwd.default(x, osize))
    _same(TABLE[fwd.vec](x, None, [1.5] * rank), fwd.vec(x, None, [1.5] * rank))
    for n, c in ((0, 3), (2, 0), (0, 0)):  # backward allows C == 0 too
        g = torch.randn(n, c, *osize)
        _same(TABLE[bwd.default](g, osize, [n, c, *isize]), bwd.default(g, osize, [n, c, *isize]))


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_empty_batch_through_compile(rank):
    """N == 0 is valid in eager (and stock torch.compile): forward and backward must compile."""
    mode = "nearest-exact" if rank == 2 else "nearest"
    fn = _f(scale_factor=2.0 if rank != 3 else 1.5, mode=mode)
    x = torch.randn(0, 2, *[4, 5, 3][:rank], requires_grad=True)
    xe = x.detach().clone().requires_grad_()
    y = _fresh_compile(fn)(x)
    e = fn(xe)
    _same(y, e)
    y.sum().backward()
    e.sum().backward()
    _same(x.grad, xe.grad)


def test_empty_channels_backward_through_compile():
    g = torch.randn(2, 0, 8, 6)
    fn = lambda g: aten.upsample_nearest2d_backward.default(g, [8, 6], [2, 0, 4, 3])  # noqa: E731
    _same(_fresh_compile(fn)(g), fn(g))


# ---------------------------------------------------------------------------------------------
# NaN and Inf


def _special_values(shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen).to(dtype)
    flat = x.view(-1)
    idx = torch.randperm(flat.numel(), generator=gen)
    k = max(1, flat.numel() // 8)
    flat[idx[:k]] = float("nan")
    flat[idx[k : 2 * k]] = float("inf")
    flat[idx[2 * k : 3 * k]] = -float("inf")
    return x


NAN_CASES = [
    (aten.upsample_nearest2d.default, (2, 3, 5, 7), [10, 14], ()),  # repeat
    (aten.upsample_nearest2d.default, (2, 3, 5, 7), [9, 4], ()),  # index
    (aten._upsample_nearest_exact2d.default, (1, 5, 6, 6), [3, 2], ()),  # stride
    (aten._upsample_nearest_exact1d.default, (2, 3, 11), [17], (1.7,)),
    (aten.upsample_nearest3d.default, (1, 2, 3, 4, 5), [6, 5, 4], ()),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op,shape,osize,scales", NAN_CASES, ids=lambda v: str(v) if isinstance(v, list) else None)
def test_nan_inf_forward_and_backward_through_decompositions(op, shape, osize, scales, dtype):
    x = _special_values(shape, dtype)
    if len(shape) == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    _same(TABLE[op](x, osize, *scales), op(x, osize, *scales))

    bwd = getattr(aten, op._schema.name.split("::")[1] + "_backward").default
    g = _special_values([shape[0], shape[1], *osize], dtype, seed=1)
    ours = TABLE[bwd](g, osize, list(shape), *scales)
    eager = bwd(g, osize, list(shape), *scales)
    assert torch.equal(ours.isnan(), eager.isnan())
    assert torch.equal(ours.isinf(), eager.isinf())
    assert torch.equal(ours[ours.isinf()], eager[eager.isinf()])
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(ours, eager, rtol=tol, atol=tol, equal_nan=True)
    assert ours.stride() == eager.stride()


def test_nan_inf_through_compile():
    def fn(x):
        return (
            F.interpolate(x, scale_factor=2.0, mode="nearest"),
            F.interpolate(x, size=(7, 5), mode="nearest-exact"),
            F.interpolate(x, scale_factor=0.5, mode="nearest"),
        )

    x0 = _special_values((2, 3, 6, 8))
    x = x0.clone().requires_grad_()
    xe = x0.clone().requires_grad_()
    ys, es = _fresh_compile(fn)(x), fn(xe)
    grads = [_special_values(e.shape, seed=i + 2) for i, e in enumerate(es)]
    for y, e in zip(ys, es):
        _same(y, e)
    torch.autograd.backward(ys, grads)
    torch.autograd.backward(es, grads)
    assert torch.equal(x.grad.isnan(), xe.grad.isnan())
    assert torch.equal(x.grad.isinf(), xe.grad.isinf())
    torch.testing.assert_close(x.grad, xe.grad, rtol=1e-5, atol=1e-5, equal_nan=True)


# ---------------------------------------------------------------------------------------------
# 3. Dynamic shapes


def _run_stream(fn, shapes, *, dynamic=None, grad=False, memory_format=None, mark=()):
    """Runs ``fn`` compiled and eagerly on inputs of ``shapes``; returns the recorder."""
    torch._dynamo.reset()
    rec = _Recorder()
    compiled = torch.compile(fn, backend=rec, dynamic=dynamic)
    for i, shape in enumerate(shapes):
        x0 = torch.randn(shape, generator=torch.Generator().manual_seed(i))
        if memory_format is not None:
            x0 = x0.contiguous(memory_format=memory_format)
        x = x0.clone().requires_grad_(grad)
        xe = x0.clone().requires_grad_(grad)
        for d in mark:
            torch._dynamo.mark_dynamic(x, d)
        y, e = compiled(x), fn(xe)
        _same(y, e)
        if grad:
            g = torch.randn(e.shape, generator=torch.Generator().manual_seed(100 + i))
            y.backward(g)
            e.backward(g)
            torch.testing.assert_close(x.grad, xe.grad, rtol=1e-5, atol=1e-6)
            assert x.grad.stride() == xe.grad.stride()
    return rec


def test_dynamic_true_forward_backward_one_graph():
    fn = _f(scale_factor=2.0, mode="nearest")
    # No size 1 (specialized) and C stays 3: C > 3 is one of the CPU kernel-choice guards.
    shapes = [(2, 3, 6, 7), (3, 3, 9, 5), (2, 3, 12, 10), (4, 3, 5, 11)]
    rec = _run_stream(fn, shapes, dynamic=True, grad=True)
    assert rec.graphs == 1


def test_dynamic_true_index_path_one_graph():
    fn = _f(scale_factor=1.5, mode="nearest-exact")
    shapes = [(2, 3, 6, 7), (2, 3, 9, 5), (2, 3, 13, 10)]
    rec = _run_stream(fn, shapes, dynamic=True, grad=True)
    assert rec.graphs == 1


def test_mark_dynamic_batch_and_spatial_dims():
    """mark_dynamic raises ConstraintViolationError if the decomposition specializes a dim."""
    fn = _f(scale_factor=2.0, mode="nearest-exact")
    shapes = [(2, 3, 6, 7), (3, 3, 7, 9), (4, 3, 9, 12), (5, 3, 12, 6)]
    rec = _run_stream(fn, shapes, grad=True, mark=(0, 2, 3))
    assert rec.graphs == 1


def test_mark_dynamic_channels_last_3d():
    fn = _f(scale_factor=2.0, mode="nearest")
    shapes = [(2, 4, 3, 5, 6), (2, 4, 4, 6, 3), (2, 4, 5, 3, 4)]
    rec = _run_stream(fn, shapes, grad=True, memory_format=torch.channels_last_3d, mark=(2, 3, 4))
    assert rec.graphs == 1


def test_automatic_dynamic_after_shape_change():
    shapes = [(2, 3, 5, 6), (3, 3, 6, 8), (2, 3, 7, 4), (4, 3, 10, 11)]
    rec = _run_stream(_f(scale_factor=1.7, mode="nearest"), shapes, grad=True)
    assert rec.graphs == 2  # static first, then one dynamic graph
    rec = _run_stream(_f(size=(9, 13), mode="nearest-exact"), shapes)  # forward only
    assert rec.graphs == 2


def test_backward_without_scale_guards_on_the_size_ratio():
    """Backward of a fixed output ``size=`` with symbolic input sizes: the window bound guards on
    ``osize * (M + isize) <= r * isize * M`` per dim (``M = ROUNDING_MARGIN``, ``r`` the
    example's ``ceil(osize / isize)``; backward_windows.ceil_ratio_bounds_windows), so only a larger
    ratio than a graph's is a new graph. That is the generated code's window gather; on CPU
    kernel_choice runs ATen's kernel for this backward (an outer dim gathers), which needs no
    window bound: no ratio guard, one dynamic graph for every size (its forward's int32 maps
    guard the sizes below 2**30, which every size meets)."""
    shapes = [(2, 3, 5, 6), (2, 3, 6, 8), (2, 3, 7, 4), (2, 3, 10, 11)]
    with generated_code(), torch._inductor.utils.fresh_inductor_cache():
        rec = _run_stream(_f(size=(9, 13), mode="nearest"), shapes, grad=True)
    # static (5, 6); then r = (2, 2) for (6, 8); (7, 4) needs r = 4 along w; (10, 11) fits (2, 2).
    # Fewer when earlier tests left this code object dynamic (automatic dynamic is per code).
    assert rec.graphs <= 3, rec.guards
    m = backward_windows.ROUNDING_MARGIN
    assert any(_has(g, rf"^13\*s\d+ \+ {13 * m} <= {4 * m}\*s\d+$") for g in rec.guards), rec.guards

    with torch._inductor.utils.fresh_inductor_cache():
        rec = _run_stream(_f(size=(9, 13), mode="nearest"), shapes, grad=True)
    assert rec.graphs <= 2, rec.guards
    assert not any(_has(g, r"^\d+\*s\d+ \+ \d+ <= \d+\*s\d+$") for g in rec.guards), rec.guards


def test_plain_store_recompile_bound():
    """An output size downsampled from symbolic input sizes: the backward's plain store
    guards on ``osize * (M + isize) <= isize * M`` per dim (``ceil_ratio_bounds_windows`` with
    ``r = 1``), which every larger input keeps. An input below the output size is one more
    graph (without the store), and later downsamples reuse the first."""
    shapes = [(2, 3, 41, 50), (2, 3, 45, 37), (2, 3, 8, 9), (2, 3, 61, 70), (2, 3, 7, 8)]
    with torch._inductor.utils.fresh_inductor_cache():
        rec = _run_stream(_f(size=(20, 31), mode="nearest"), shapes, dynamic=True, grad=True)
    assert rec.graphs == 2, rec.guards
    m = backward_windows.ROUNDING_MARGIN  # the output sizes are symbols too (dynamic=True)
    assert _has(rec.guards[0], rf"^s\d+\*\(s\d+ \+ {m}\) <= {m}\*s\d+$"), rec.guards
    assert not _has(rec.guards[1], rf"{m}"), rec.guards


def test_unclamped_map_recompile_bound():
    """A map without the clamp guards on ``osize <= 2**20`` (``eager_rules.unclamped_in_range``);
    a larger output is one more graph, with the clamp and no guard, which serves the smaller
    sizes after it too."""
    limit = eager_rules.UNCLAMPED_OSIZE_LIMIT
    fn = lambda x: F.interpolate(x, size=(x.shape[-1] + 3,), mode="nearest")  # noqa: E731
    shapes = [(1, 2, 40), (1, 2, 57), (1, 2, limit), (1, 2, 33), (1, 2, limit + 5)]
    with torch._inductor.config.patch(force_disable_caches=True):
        rec = _run_stream(fn, shapes, dynamic=True)
    assert rec.graphs == 2, rec.guards
    assert _has(rec.guards[0], rf"^s\d+ \+ 3 <= {limit}$"), rec.guards
    assert not _has(rec.guards[1], rf"<= {limit}$"), rec.guards


# 20 spatial sizes with oh + ow <= 128 (one CPU kernel choice), then across it.
STREAM = [(2, 3, h, h + 3) for h in range(5, 25)]
STREAM_ACROSS_128 = [(2, 3, h, h + 3) for h in range(30, 70, 2)]


@pytest.mark.parametrize("scale", [2.0, 1.5])
def test_recompile_bound_for_a_stream_of_sizes(scale):
    """Measured (torch 2.11 and 2.13): 2 graphs (static, then dynamic) for either scale."""
    rec = _run_stream(_f(scale_factor=scale, mode="nearest"), STREAM)
    assert rec.graphs <= 2, rec.guards


def test_recompile_bound_across_the_cpu_kernel_choice():
    """``oh + ow <= 128`` picks eager's CPU kernel (2d, C <= 3): the decompositions select it at
    run time, so crossing it adds no graph (it added one while the choice was a guard)."""
    rec = _run_stream(_f(scale_factor=1.5, mode="nearest-exact"), STREAM_ACROSS_128)
    assert rec.graphs <= 2, rec.guards
    rec = _run_stream(_f(scale_factor=2.0, mode="nearest"), STREAM, dynamic=True)
    assert rec.graphs == 1, rec.guards


def _has(guards: list[str], pattern: str) -> bool:
    return any(re.search(pattern, g) for g in guards)


# A guard on eager's CPU kernel choice (C > 3, oh + ow <= 128): the decompositions must not add
# one; they select between the two kernels' maps at run time where the maps can differ.
KERNEL_CHOICE_GUARD = r"^s\d+ (<=|>|>=|<) [34]$|128$"


def test_guards_of_the_fast_paths():
    """The guards each path adds (docs/robustness.md, "Guards"). Caches off: a cache hit replays
    the same guards, but in another form (``s > 3`` would come back as ``s >= 4``)."""
    with torch._inductor.config.patch(force_disable_caches=True):
        # power-of-two scale factor, 2d, C = 3 (contiguous): repeat path. The output size is
        # 2 * s (an integral factor), so the factor needs no guard, only float32's range.
        [guards] = _run_stream(_f(scale_factor=2.0), [(2, 3, 6, 7)], dynamic=True).guards
        assert _has(guards, r"^2\*s\d+ <= 16777216$"), guards  # osize <= 2**24
        assert not _has(guards, r"Mod|//|Eq\(s"), guards
        assert not _has(guards, KERNEL_CHOICE_GUARD), guards  # both kernels repeat: no choice
        # channels-last, C > 3: the same
        [guards] = _run_stream(
            _f(scale_factor=2.0), [(2, 8, 6, 7)], dynamic=True, memory_format=torch.channels_last
        ).guards
        assert not _has(guards, KERNEL_CHOICE_GUARD), guards
        assert not _has(guards, r"Mod|//|Eq\(s"), guards
        # an output size from another source: the factor the example shows, under a guard
        [guards] = _run_stream(_f(size=(12, 14)), [(2, 3, 6, 7)], dynamic=True).guards
        assert _has(guards, r"^Eq\(s\d+, 2\*s\d+\)$"), guards  # osize == 2 * isize
        assert _has(guards, r"^Ne\(s\d+, s\d+\)$"), guards  # not the identity
        # factor 1.5 = 3 / 2: the output size is (3*s) // 2 where 3*s < 2**53 (exact in double);
        # not the identity, index path; no factor guard
        [guards] = _run_stream(_f(scale_factor=1.5), [(2, 3, 6, 7)], dynamic=True).guards
        assert _has(guards, r"^3\*s\d+ < 9007199254740992$"), guards
        assert _has(guards, r"^Ne\(\(\(3\*s\d+\)//2\), s\d+\)$"), guards
        assert not _has(guards, r"^Eq\(\(\(3"), guards
        # a factor whose numerator is near 2**53 (1.3): the float form, as eager computes it
        [guards] = _run_stream(_f(scale_factor=1.3), [(2, 3, 6, 7)], dynamic=True).guards
        assert _has(guards, r"^Ne\(TruncToInt\(1\.3\*ToFloat\(s\d+\)\), s\d+\)$"), guards
        assert not _has(guards, r"9007199254740992"), guards
        # the kernels' maps differ (nearest-exact, 2.0000001 where osize == 2 * isize): selected
        # at run time for a contiguous input (where only oh + ow decides) and for a channels-last
        # one of at most 3 channels; more channels in a channels-last example: the channels-last
        # kernel under a guard on the channel count
        for fn, shape, memory_format, guarded in (
            (_f(scale_factor=1.5, mode="nearest-exact"), (2, 8, 6, 7), None, False),
            (_f(scale_factor=2.0000001), (2, 8, 6, 7), None, False),
            (_f(scale_factor=1.5, mode="nearest-exact"), (2, 3, 6, 7), torch.channels_last, False),
            (_f(scale_factor=1.5, mode="nearest-exact"), (2, 8, 6, 7), torch.channels_last, True),
        ):
            [guards] = _run_stream(fn, [shape], dynamic=True, memory_format=memory_format).guards
            assert _has(guards, r"^4 <= s\d+$|^s\d+ > 3$") == guarded, (shape, memory_format, guards)
            assert not _has(guards, r"128$"), guards


# ---------------------------------------------------------------------------------------------
# 6. Installation safety (snapshots); 5. versions use them too


def _materialized_overloads() -> list[OpOverload]:
    """Every OpOverload object created so far (py_kernels live on those objects)."""
    out = []
    for ns in list(torch.ops._dir):
        namespace = getattr(torch.ops, ns)
        for packet in list(vars(namespace).values()):
            if isinstance(packet, OpOverloadPacket):
                out += [v for v in list(vars(packet).values()) if isinstance(v, OpOverload)]
    return out


def _snapshot() -> dict[str, dict]:
    from torch._inductor import decomposition, lowering

    return {
        "inductor decompositions": dict(decomposition.decompositions),
        "inductor lowerings": dict(lowering.lowerings),
        "select_decomp_table()": dict(decomposition.select_decomp_table()),
        "torch._decomp.decomposition_table": dict(torch._decomp.decomposition_table),
        # (overloads materialized later start with no Python kernels: leaving out empty ones
        # keeps snapshots comparable)
        "py_kernels": {op: dict(op.py_kernels) for op in _materialized_overloads() if op.py_kernels},
        "cache_key_tag": {"tag": torch.compiler.config.cache_key_tag},
        "inductor codegen hooks": lowerings.codegen_hooks(),
    }


def _identical(a, b) -> bool:
    if a is b:
        return True
    # install() binds a fresh functools.partial each time: same function, same arguments.
    if isinstance(a, functools.partial) and isinstance(b, functools.partial):
        return (a.func is b.func and len(a.args) == len(b.args)
                and all(x is y for x, y in zip(a.args, b.args)) and a.keywords == b.keywords)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_identical(a[k], b[k]) for k in a)
    return isinstance(a, str) and a == b


def _diff(before: dict, after: dict, *, strict: bool) -> dict[str, list]:
    """Keys whose values differ (``strict``: by identity only)."""
    same = (lambda x, y: x is y or (isinstance(x, str) and x == y)) if strict else _identical
    out = {}
    for name in before:
        b, a = before[name], after[name]
        keys = [k for k in b.keys() | a.keys()
                if k not in b or k not in a
                or (not same(b[k], a[k]) if not isinstance(b[k], dict)
                    else not (b[k].keys() == a[k].keys() and all(same(b[k][i], a[k][i]) for i in b[k])))]
        if keys:
            out[name] = keys
    return out


def test_install_is_idempotent():
    installed = _snapshot()
    assert decomps.install() is True
    assert decomps.install() is True
    assert _diff(installed, _snapshot(), strict=True) == {}
    decomps.uninstall()
    stock = _snapshot()
    decomps.uninstall()
    assert not decomps.is_installed()
    assert _diff(stock, _snapshot(), strict=True) == {}


def test_install_uninstall_cycles_are_exactly_reversible():
    decomps.uninstall()
    stock = _snapshot()
    assert decomps.install()
    installed = _snapshot()
    for _ in range(3):
        decomps.uninstall()
        assert _diff(stock, _snapshot(), strict=True) == {}, "uninstall left something behind"
        assert decomps.install()
        assert _diff(installed, _snapshot(), strict=False) == {}


def test_install_touches_only_the_nearest_family():
    from torch._inductor import decomposition

    decomps.uninstall()
    stock = _snapshot()
    decomps.install()
    changed = _diff(stock, _snapshot(), strict=True)
    assert set(changed) <= {"inductor decompositions", "inductor lowerings", "select_decomp_table()",
                            "py_kernels", "cache_key_tag", "inductor codegen hooks"}
    for table in ("inductor decompositions", "select_decomp_table()", "py_kernels"):
        assert set(changed.get(table, ())) <= NEAREST_OVERLOADS, changed.get(table)
    # Inductor's own nearest lowerings move aside; the package's repeat ops, ATen-kernel ops,
    # channels-last rows op and index-table ops get theirs, and cat one that wraps the stock
    # lowering (lowerings.repeat.cat)
    package_ops = {torch.ops.decomps.upsample_repeat.default, torch.ops.decomps.upsample_repeat_backward.default,
                   torch.ops.decomps.upsample_nearest.default, torch.ops.decomps.upsample_nearest_backward.default,
                   torch.ops.decomps.index_table.default, torch.ops.decomps.index_by_maps.default,
                   torch.ops.decomps.index_put_by_maps.default, torch.ops.decomps.gather_window_starts.default,
                   torch.ops.decomps.gather_channel_rows.default, aten.cat.default}
    assert set(changed["inductor lowerings"]) <= set(lowerings.STOCK_LOWERED) | package_ops
    assert package_ops <= set(changed["inductor lowerings"])
    assert set(changed["inductor decompositions"]) == set(TABLE)
    assert "torch._decomp.decomposition_table" not in changed
    assert decomposition.select_decomp_table()[aten.upsample_nearest2d.vec] is TABLE[aten.upsample_nearest2d.vec]


def test_disabled_restores_on_exception_and_nests():
    installed = _snapshot()
    with pytest.raises(KeyError):
        with decomps.disabled():
            assert not decomps.is_installed()
            with decomps.disabled():
                assert not decomps.is_installed()
            assert not decomps.is_installed()
            raise KeyError("boom")
    assert decomps.is_installed()
    assert _diff(installed, _snapshot(), strict=False) == {}
    decomps.uninstall()
    with decomps.disabled():
        pass
    assert not decomps.is_installed()  # disabled() does not install what was not installed


@contextlib.contextmanager
def _restoring_this_threads_tag():
    """Leaves this thread stock-tagged and installed even when the test fails: a package that
    tags per thread (torch 2.13) can leave this thread's cache_key_tag behind. Writes the tag only
    then: on 2.13 the write itself is a per-thread override that hides the package's tag."""
    decomps.uninstall()
    stock_tag = torch.compiler.config.cache_key_tag
    try:
        yield
    finally:
        decomps.uninstall()
        if torch.compiler.config.cache_key_tag != stock_tag:
            torch.compiler.config.cache_key_tag = stock_tag
        decomps.install()


def test_concurrent_install_uninstall_from_8_threads():
    with _restoring_this_threads_tag():
        stock = _snapshot()
        decomps.install()
        installed = _snapshot()
        errors: list[BaseException] = []
        barrier = threading.Barrier(8)

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            try:
                barrier.wait()
                for _ in range(25):
                    action = rng.choice(("install", "uninstall", "disabled", "query"))
                    if action == "install":
                        assert decomps.install() is True
                    elif action == "uninstall":
                        decomps.uninstall()
                    elif action == "disabled":
                        with decomps.disabled():
                            pass
                    else:
                        decomps.is_installed()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "deadlock"
        assert errors == []
        now = _snapshot()
        if decomps.is_installed():
            assert _diff(installed, now, strict=False) == {}
        else:
            assert _diff(stock, now, strict=True) == {}
        decomps.uninstall()
        assert _diff(stock, _snapshot(), strict=True) == {}
        decomps.install()
        assert _diff(installed, _snapshot(), strict=False) == {}


# ---------------------------------------------------------------------------------------------
# 5. Versions: a torch lacking a hook


def _stock_kernels_in_place() -> bool:
    from torch._C import DispatchKey
    from torch._inductor import decomposition

    return (DispatchKey.CompositeImplicitAutograd in aten.upsample_nearest2d.vec.py_kernels
            and DispatchKey.CompositeImplicitAutograd in aten.upsample_nearest2d.default.py_kernels
            and all(decomposition.decompositions.get(op) is not fn for op, fn in TABLE.items())
            and "+decomps-" not in torch.compiler.config.cache_key_tag)


@pytest.mark.parametrize("missing", ["inductor hook", "cache_key_tag"])
def test_missing_hook_warns_once_and_keeps_stock(monkeypatch, missing):
    decomps.uninstall()
    stock = _snapshot()
    if missing == "inductor hook":
        monkeypatch.setattr(lowerings, "missing_hooks", lambda: ["torch._inductor.lowering.some_hook"])
        name = "torch._inductor.lowering.some_hook"
    else:  # a torch.compiler.config without cache_key_tag
        monkeypatch.setattr(torch.compiler, "config", types.SimpleNamespace())
        name = "cache_key_tag"
    monkeypatch.setattr(decomps._install, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert decomps.install() is False
        assert decomps.install() is False
    ours = [w for w in caught if "decomps" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert ours[0].category is RuntimeWarning
    assert name in str(ours[0].message) and torch.__version__ in str(ours[0].message)
    assert not decomps.is_installed()
    monkeypatch.undo()
    assert _diff(stock, _snapshot(), strict=True) == {}
    assert _stock_kernels_in_place()
    # back on a supported torch, install works again
    assert decomps.install() is True


def test_import_on_a_torch_lacking_a_hook_warns_once_in_a_fresh_process():
    code = textwrap.dedent(
        """
        import json, warnings
        warnings.simplefilter("always")
        import lowerings
        lowerings.missing_hooks = lambda: ["torch._inductor.fake_hook"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import decomps
            again = decomps.install()
        import torch
        import torch.nn.functional as F
        from torch._C import DispatchKey
        x = torch.randn(1, 2, 5, 6)
        fn = lambda x: F.interpolate(x, scale_factor=2.0)
        y = torch.compile(fn, backend="inductor")(x)
        print(json.dumps({
            "warnings": [str(w.message) for w in caught if w.category is RuntimeWarning],
            "installed": decomps.is_installed(),
            "again": again,
            "stock_kernel": DispatchKey.CompositeImplicitAutograd in torch.ops.aten.upsample_nearest2d.vec.py_kernels,
            "tag": torch.compiler.config.cache_key_tag,
            "equal": bool(torch.equal(y, fn(x))),
        }))
        """
    )
    env = dict(os.environ)
    env["PYTHONWARNINGS"] = "default"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(result["warnings"]) == 1 and "torch._inductor.fake_hook" in result["warnings"][0]
    assert result["installed"] is False and result["again"] is False
    assert result["stock_kernel"] is True and "+decomps-" not in result["tag"]
    assert result["equal"] is True


def _version(major: int, minor: int, rest: str = ".0") -> str:
    return f"{major}.{minor}{rest}"


@pytest.mark.parametrize("version, newer", [
    (_version(2, 11), False),
    (_version(*decomps._install.NEWEST_TESTED_TORCH, ".0+cu132"), False),
    (_version(*decomps._install.NEWEST_TESTED_TORCH, ".1"), False),
    (_version(decomps._install.NEWEST_TESTED_TORCH[0], decomps._install.NEWEST_TESTED_TORCH[1] + 1,
              ".0.dev20270101+cpu"), True),
    (_version(decomps._install.NEWEST_TESTED_TORCH[0] + 1, 0), True),
])
def test_newer_than_tested_compares_the_release(monkeypatch, version, newer):
    monkeypatch.setattr(torch, "__version__", torch.torch_version.TorchVersion(version))
    assert decomps._install._newer_than_tested() is newer


def test_ci_runs_the_newest_tested_release():
    """CI's newest-release job (scripts/test_newest.sh) installs the release the warning names."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "scripts", "test_newest.sh")) as f:
        pinned = re.search(r"setup\.sh \.venv-newest (\d+)\.(\d+)\.\d+", f.read())
    assert pinned is not None
    assert tuple(map(int, pinned.groups())) == decomps._install.NEWEST_TESTED_TORCH


def test_import_on_a_newer_torch_warns_once_and_installs():
    """A torch past the newest tested release, with every hook in place: one UserWarning, then
    the package works (compiled training step equal to eager, no scatter in any graph)."""
    major, minor = decomps._install.NEWEST_TESTED_TORCH
    code = textwrap.dedent(
        f"""
        import json, warnings
        import torch
        import torch.nn.functional as F
        from tests.graphs import post_grad_graphs
        torch.__version__ = torch.torch_version.TorchVersion("{major}.{minor + 1}.0a0+git0123456")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import decomps
            decomps.uninstall()
            again = decomps.install()
        fn = lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest")
        x = torch.randn(2, 3, 5, 6, requires_grad=True)
        with post_grad_graphs() as graphs:
            y = torch.compile(fn, backend="inductor")(x)
            (grad,) = torch.autograd.grad(y, x, torch.ones_like(y))
        (expected,) = torch.autograd.grad(fn(x), x, torch.ones_like(y))
        print(json.dumps({{
            "warnings": [f"{{w.category.__name__}}: {{w.message}}" for w in caught if "decomps" in str(w.message)],
            "installed": decomps.is_installed(),
            "again": again,
            "equal": bool(torch.equal(y, fn(x)) and torch.equal(grad, expected)),
            "scatters": [sorted(ops) for ops in graphs.scatters()],
        }}))
        """
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["warnings"] == [
        f"UserWarning: decomps: torch {major}.{minor + 1}.0a0+git0123456 is newer than the newest "
        f"tested release ({major}.{minor}); installing"
    ]
    assert result["installed"] is True and result["again"] is True
    assert result["equal"] is True
    assert result["scatters"] == [[], []]


def test_install_from_another_thread_is_process_wide():
    """What install() changes must be visible to every thread: the dispatcher and Inductor tables
    are process-wide, and so must the cache-key tag be (torch.compiler.config values are per
    thread, ContextVar-backed, from torch 2.13 on)."""

    def in_thread(fn):
        t = threading.Thread(target=fn)
        t.start()
        t.join()

    with _restoring_this_threads_tag():
        stock = _snapshot()
        in_thread(decomps.install)
        assert decomps.is_installed()
        assert "+decomps-" in torch.compiler.config.cache_key_tag, "installed, but this thread's cache key is untagged"
        in_thread(decomps.uninstall)
        assert not decomps.is_installed()
        assert _diff(stock, _snapshot(), strict=True) == {}
