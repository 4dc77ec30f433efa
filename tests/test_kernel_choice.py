"""kernel_choice and aten_kernels: where a call site runs ATen's kernel as an extern call, and
that the result is eager's (values, strides, errors) wherever it does; which call sites become
the repeat ops, and which gathers load index tables."""

from __future__ import annotations

import itertools
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code
from torch.fx.experimental.proxy_tensor import make_fx

from decomps import aten_kernels, kernel_choice
from decomps import backward as backward_decompositions
from decomps.eager_rules import KernelChoice, Rule
from decomps.index_patterns import Pattern
from lowerings import cpu_vectors, size_variants
from perf import cases as perf_cases
from tests.common import TABLE, aten_kernel_nodes, backward_op, forward_op

aten = torch.ops.aten
FORWARD_EXTERN = "decomps.upsample_nearest.default"
BACKWARD_EXTERN = "decomps.upsample_nearest_backward.default"
DTYPES = (torch.uint8, torch.float32, torch.float64, torch.bfloat16)
# (input spatial size, output size, scale): the forward gathers along the innermost dim and (2d,
# 3d) the backward along an outer one: ATen's kernel on CPU for floating-point dtypes
GATHERS = {
    1: [((9,), [11], None), ((13,), [5], 0.4), ((1000,), [1499], None)],
    2: [((5, 7), [9, 13], None), ((6, 8), [9, 14], 1.7), ((50, 40), [27, 26], None)],
    3: [((3, 4, 5), [5, 6, 9], None), ((4, 4, 6), [6, 6, 9], 1.5)],
}


def _random(shape, dtype, memory_format=torch.contiguous_format):
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=gen, dtype=torch.float64) * 100
    x = x.abs().to(dtype) if dtype == torch.uint8 else x.to(dtype)
    return x.contiguous(memory_format=memory_format)


def _same(actual, expected, msg=""):
    assert actual.dtype == expected.dtype, msg
    assert actual.shape == expected.shape, msg
    assert torch.equal(actual, expected), msg
    assert actual.stride() == expected.stride(), msg


def _cases():
    for rank, cases in GATHERS.items():
        for (spatial, osize, scale), exact in itertools.product(cases, (False, True)):
            yield rank, spatial, osize, [scale] * rank, exact


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batch", [2, 0])
def test_forward_is_eager_exactly(dtype, batch):
    for rank, spatial, osize, scales, exact in _cases():
        op = forward_op(rank, exact)
        x = _random((batch, 3, *spatial), dtype)
        graph = make_fx(lambda x: TABLE[op](x, osize, *scales), tracing_mode="symbolic")(x)
        # uint8 keeps the generated gather (faster than eager's uint8 kernel), and so do float32
        # where the C++ backend's vectors are AVX2's or wider and bfloat16 where they are AVX2's
        # (table-driven, the index loaded as whole vectors).
        bits = cpu_vectors.vector_bits()
        generated = dtype == torch.float32 and bits >= 256 or dtype == torch.bfloat16 and bits == 256
        extern = dtype.is_floating_point and not generated
        assert aten_kernel_nodes(graph) == ([FORWARD_EXTERN] if extern else [])
        msg = f"{op} {list(x.shape)} -> {osize} {scales}"
        _same(graph(x), op(x, osize, *scales), msg)
        _same(TABLE[op](x, osize, *scales), op(x, osize, *scales), msg)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("batch", [2, 0])
def test_backward_is_eager_exactly(dtype, batch):
    for rank, spatial, osize, scales, exact in _cases():
        op = backward_op(rank, exact)
        isize = [batch, 3, *spatial]
        g = _random((batch, 3, *osize), dtype)
        graph = make_fx(lambda g: TABLE[op](g, osize, isize, *scales), tracing_mode="symbolic")(g)
        # 1d: no outer dim, the generated window gather; a downsample stores to each input.
        downsample = all(o < i for i, o in zip(spatial, osize))
        assert aten_kernel_nodes(graph) == ([BACKWARD_EXTERN] if rank > 1 and not downsample else [])
        _same(graph(g), op(g, osize, isize, *scales), f"{op} {isize} -> {osize} {scales}")


def test_fake_kernels_match_eager():
    """opcheck: schema, fake kernels against the real ones (strides too), AOT dispatch."""
    cl, cl3 = torch.channels_last, torch.channels_last_3d
    samples = [  # input shape, dtype, layout of input and grad_output, output size, scales, exact
        ((2, 3, 7), torch.float32, torch.contiguous_format, [11], [None], False),
        ((2, 3, 5, 7), torch.bfloat16, torch.contiguous_format, [9, 14], [None, 1.7], True),
        ((2, 4, 5, 7), torch.float32, cl, [9, 14], [None, None], False),
        ((0, 3, 3, 4, 5), torch.uint8, torch.contiguous_format, [5, 6, 9], [None] * 3, True),
        ((1, 2, 3, 4, 5), torch.float64, cl3, [5, 6, 9], [1.5] * 3, False),
    ]
    for shape, dtype, layout, osize, scales, exact in samples:
        x = _random(shape, dtype, layout)
        torch.library.opcheck(aten_kernels.upsample_nearest, (x, osize, scales, exact))
        if dtype.is_floating_point:
            g = _random((*shape[:2], *osize), dtype, layout)
            args = (g, osize, list(shape), scales, exact)
            torch.library.opcheck(aten_kernels.upsample_nearest_backward, args)


def _raises(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (the type and message are what is compared)
        return type(e), str(e)
    return None


def test_bad_input_raises_eagers_error():
    """The argument checks run before the choice: a call that would take ATen's kernel raises
    the exception eager raises, with its message, traced or not. A dtype that ATen does not
    dispatch: eager's type and the start of its message (eager names the kernel, which varies
    with the sizes and layout; tests/test_robustness.py, the same)."""
    x = _random((2, 3, 5, 7), torch.float32)
    g = _random((2, 3, 9, 14), torch.float32)
    fwd, bwd = forward_op(2, False), backward_op(2, True)
    calls = [  # op, args, whole message
        (fwd, (x, [9]), True),                                        # output_size of the wrong length
        (fwd, (x, [0, 14]), True),                                    # an empty output
        (fwd, (_random((2, 0, 5, 7), torch.float32), [9, 14]), True),  # an empty channel dim
        (bwd, (g, [9, 14], [2, 3, 5]), True),                         # input_size of the wrong length
        (bwd, (g, [9, 15], [2, 3, 5, 7]), True),                      # grad_output of another shape
        (fwd, (x.to(torch.int32), [9, 14]), False),                   # dtypes ATen does not dispatch
        (bwd, (g.to(torch.uint8), [9, 14], [2, 3, 5, 7]), False),
    ]
    for op, args, whole_message in calls:
        expected = _raises(lambda: op(*args))
        assert expected is not None, op
        for actual in (_raises(lambda: TABLE[op](*args)),
                       _raises(lambda: make_fx(lambda *a: TABLE[op](*a))(*args))):
            if whole_message:
                assert actual == expected, (op, expected, actual)
            else:
                assert actual[0] is expected[0] and "not implemented for" in actual[1], (op, actual)


@pytest.mark.parametrize("layout, size", [(torch.contiguous_format, (9, 13)), (torch.channels_last, (9, 13)),
                                          (torch.channels_last_3d, (6, 9, 13)), (torch.channels_last_3d, (8, 10, 14))],
                         ids=str)
def test_compiled_matches_eager_and_is_deterministic(layout, size):
    """torch.compile on CPU, ATen's kernels (forward where contiguous, backward in every layout;
    channels_last_3d also for an integer repeat): eager's values and strides, bitwise repeatable
    under ``torch.use_deterministic_algorithms(True)``."""
    def fn(x):
        return F.interpolate(x, size=size, mode="nearest-exact")

    spatial = (5, 7) if len(size) == 2 else (4, 5, 7)
    x = _random((2, 3, *spatial), torch.float32, layout).requires_grad_()
    g = _random((2, 3, *size), torch.float32, layout)
    expected = fn(x)
    (expected_grad,) = torch.autograd.grad(expected, x, g)
    torch.use_deterministic_algorithms(True)
    try:
        for dynamic in (False, True):
            torch._dynamo.reset()
            compiled = torch.compile(fn, backend="inductor", dynamic=dynamic, fullgraph=True)
            grads = []
            for _ in range(2):
                out = compiled(x)
                (grad,) = torch.autograd.grad(out, x, g)
                _same(out, expected)
                _same(grad, expected_grad)
                grads.append(grad)
            assert torch.equal(grads[0], grads[1])
    finally:
        torch.use_deterministic_algorithms(False)


def _value_and_grad(fn, x, g):
    # The gradient outside the compiled function: torch 2.15's Dynamo runs a frame that calls
    # torch.autograd.grad in eager, compiling nothing.
    out = fn(x)
    return out, torch.autograd.grad(out, x, g)[0]


def test_compiled_code_holds_the_extern_calls():
    def forward(x):
        return F.interpolate(x, scale_factor=1.5, mode="nearest")

    # float64: its forward takes ATen's kernel with any vector width
    x = _random((1, 2, 6, 10), torch.float64).requires_grad_()
    g = _random((1, 2, 9, 15), torch.float64)
    torch._dynamo.reset()
    compiled = torch.compile(forward, backend="inductor", dynamic=True)
    (out, grad), codes = run_and_get_code(_value_and_grad, compiled, x, g)
    code = "\n".join(codes)
    # ATen's ops themselves (lowerings.aten_kernels), not the package's ops around them
    assert "torch.ops.aten.upsample_nearest2d.default(" in code
    assert "torch.ops.aten.upsample_nearest2d_backward.default(" in code
    assert "torch.ops.decomps.upsample_nearest.default(" not in code
    assert "torch.ops.decomps.upsample_nearest_backward.default(" not in code
    expected, expected_grad = _value_and_grad(forward, x, g)
    _same(out, expected)
    _same(grad, expected_grad)


@pytest.mark.parametrize("rank", [2, 3])
@pytest.mark.parametrize("dynamic", [False, True])
def test_generated_code_calls_atens_ops(rank, dynamic):
    """lowerings.aten_kernels: the generated code calls ATen's op of the rank and mode, except
    the 3d backward with symbolic sizes (ATen's meta there takes concrete sizes only), which
    keeps the package's op; eager's values and strides either way."""
    spatial, osize, scale = GATHERS[rank][0]
    for exact in (False, True):
        def forward(x):
            return forward_op(rank, exact)(x, osize, *[scale] * rank)

        x = _random((2, 3, *spatial), torch.float64).requires_grad_()
        g = _random((2, 3, *osize), torch.float64)
        torch._dynamo.reset()
        compiled = torch.compile(forward, backend="inductor", dynamic=dynamic)
        (out, grad), codes = run_and_get_code(_value_and_grad, compiled, x, g)
        code = "\n".join(codes)
        package_backward = dynamic and rank == 3
        assert f"torch.ops.{forward_op(rank, exact)}(" in code
        assert (f"torch.ops.{backward_op(rank, exact)}(" in code) is not package_backward
        assert "torch.ops.decomps.upsample_nearest.default(" not in code
        assert (f"torch.ops.{BACKWARD_EXTERN}(" in code) is package_backward
        expected, expected_grad = _value_and_grad(forward, x, g)
        _same(out, expected)
        _same(grad, expected_grad)


def test_export_keeps_the_decomposition():
    """While exporting the decompositions stay: no package op in an exported program."""
    class Up(torch.nn.Module):
        def forward(self, x):
            return F.interpolate(x, size=(9, 14), mode="nearest")

    x = _random((2, 3, 5, 7), torch.float32)
    dims = {"x": {2: torch.export.Dim("h", min=2, max=64), 3: torch.export.Dim("w", min=2, max=64)}}
    for dynamic_shapes in (None, dims):
        ep = torch.export.export(Up(), (x,), dynamic_shapes=dynamic_shapes).run_decompositions(TABLE)
        assert aten_kernel_nodes(ep.graph_module) == []
        assert any(n.target == aten._unsafe_index.Tensor for n in ep.graph_module.graph.nodes)
        _same(ep.module()(x), Up()(x))


def _traced_choice(case: perf_cases.Case) -> tuple[bool, bool, bool]:
    """Whether the forward and the backward of a harness row take ATen's kernel, and whether the
    backward stores to each input (an ``index_put``), traced with symbolic sizes as
    ``torch.compile(dynamic=True)`` traces the row (fake tensors: nothing is computed)."""
    x = torch.empty(case.shape, dtype=getattr(torch, case.dtype),
                    memory_format=getattr(torch, case.memory_format))
    if case.backward:
        x.requires_grad_()
    o = torch.empty(case.osize, dtype=torch.uint8)  # its sizes: the symbolic call form's output size

    def fn(x, o):
        if case.scale_factor is not None:
            out = F.interpolate(x, scale_factor=case.scale_factor, mode=case.mode)
        else:
            size = case.osize if case.call_form == "literal" else tuple(o.shape)
            out = F.interpolate(x, size=size, mode=case.mode)
        if case.backward:
            return torch.autograd.grad(out, x, torch.empty_like(out))
        return out

    graph = make_fx(fn, decomposition_table=TABLE, tracing_mode="symbolic")(x, o)
    nodes = aten_kernel_nodes(graph)
    stores = any(n.target in (aten.index_put.default, aten._unsafe_index_put.default,
                              torch.ops.decomps.index_put_by_maps.default) for n in graph.graph.nodes)
    return FORWARD_EXTERN in nodes, BACKWARD_EXTERN in nodes, stores


# The harness's CPU rows (perf.cases, full matrix) that take ATen's kernel where the layout is
# contiguous, and the dtype floating point for the forward: (input spatial size, output size,
# call form) -> (forward, backward). Every other contiguous row keeps generated code: uint8
# forwards, the integer factors, the downsamples' backward (a plain store), and the short period
# 400 -> 700 where the output size is symbolic (a literal one is static while the input's is
# symbolic, and the period's ratio guard would pin the input size); that literal row's backward
# gathers the innermost dim only.
EXTERN_ROWS = {
    ((500, 400), (256, 256), "symbolic"): (True, False),
    ((500, 400), (256, 256), "literal"): (True, False),
    ((1200, 1300), (200, 300), "symbolic"): (True, False),
    ((1200, 1300), (200, 300), "literal"): (True, False),
    ((300, 400), (600, 700), "literal"): (True, False),
    ((64, 64, 64), (96, 96, 96), "symbolic"): (True, True),
}


# The harness's contiguous and channels-last 2d CPU rows whose backward stores to each input.
CPU_DOWNSAMPLES = {((500, 400), (256, 256)), ((1200, 1300), (200, 300))}
# The harness's channels-last 2d CPU rows whose backward gathers windows (some dim): ATen's kernel.
CHANNELS_LAST_WINDOW_GATHERS = {((300, 400), (600, 700))}


def test_choice_for_the_harness_cpu_rows(vector_bits):
    """Contiguous rows whose forward gathers the innermost dim take ATen's kernel forward
    (``EXTERN_ROWS``) but uint8 and float32 ones (every row of the matrix); channels-last rows (3
    channels) keep generated code forward at every vector width (``kernel_choice.aten_forward``)
    and take ATen's kernel backward where a dim gathers windows, and store to each input where
    they downsample; channels_last_3d rows (x2, x1.5) take ATen's kernel backward."""
    seen = set()
    for case in perf_cases.make_cases("cpu", backward=True):
        if case.kind in ("fpn_merge", "unet_skip"):  # their upsample alone, as an interp row
            assert case.scale_factor == 2.0
            case = perf_cases.Case("interp", "cpu", case.shape, case.dtype, case.memory_format,
                                   case.mode, case.osize, case.scale_factor)
        elif case.kind != "interp":
            continue
        key = (case.shape[2:], case.osize, case.call_form)
        seen.add(key)
        forward, backward = EXTERN_ROWS.get(key, (False, False))
        if case.memory_format != perf_cases.CONTIGUOUS:
            forward = False
            backward = (case.memory_format == "channels_last" and key[:2] in CHANNELS_LAST_WINDOW_GATHERS
                        or case.memory_format == "channels_last_3d")
        # contiguous: uint8 and float32 keep the generated gather (float32's loads its index
        # from a table with AVX2's vectors, whole vectors with AVX512's)
        contiguous = case.memory_format == perf_cases.CONTIGUOUS
        forward = forward and not (contiguous and case.dtype in ("uint8", "float32"))
        stores = case.backward and key[:2] in CPU_DOWNSAMPLES and case.memory_format in (perf_cases.CONTIGUOUS,
                                                                                          "channels_last")
        assert _traced_choice(case) == (forward, backward and case.backward, stores), case.name
    assert set(EXTERN_ROWS) <= seen


# The harness's CUDA rows (perf.cases, full matrix) whose backward gathers windows: (input
# spatial size, output size). Contiguous, their backward takes ATen's kernel with dynamic shapes
# where the kernels see runtime sizes; channels-last they keep generated code, as every other row
# (the integer factors, and 2d x1.5, (200, 200) -> (300, 300), whose dims sum slices of their
# periods). The downsample (2345, 2456) -> (1234, 1345) stores to each input instead, in both
# layouts. Where the kernels launch size variants every row keeps the generated gather.
CUDA_WINDOW_GATHERS = {
    ((1234, 1345), (2345, 2456)),
    ((64, 64, 64), (96, 96, 96)),
}
CUDA_DOWNSAMPLES = {((2345, 2456), (1234, 1345))}


@pytest.mark.parametrize("variants", [False, True])
def test_choice_for_the_harness_cuda_rows(variants):
    """CUDA's rule, traced on CPU: the CPU rule off, CUDA's on for CPU tensors; with and without
    size variants (``kernel_choice.sizes_at_launch``)."""
    rules = [mock.patch.object(kernel_choice, "ATEN_KERNEL_DEVICES", ()),
             mock.patch.object(kernel_choice, "SIZE_VARIANT_DEVICES", ("cpu",)),
             mock.patch.object(size_variants, "compiling_variants", lambda: variants),
             mock.patch.object(kernel_choice, "ATEN_SYMBOLIC_BACKWARD_DEVICES", ("cpu",)),
             mock.patch.object(kernel_choice, "REPEAT_KERNEL_DEVICES", ()),
             mock.patch.object(backward_decompositions, "OUTER_PERIOD_DEVICES", ("cpu",)),
             mock.patch.dict(backward_decompositions.PERIOD_MIN_RANK, {"cpu": backward_decompositions.PERIOD_MIN_RANK["cuda"]}),
             mock.patch.object(kernel_choice, "PLAIN_STORE_LAYOUTS", {"cpu": kernel_choice.PLAIN_STORE_LAYOUTS["cuda"]}),
             mock.patch.object(kernel_choice, "PLAIN_STORE_STATIC_DEVICES", ())]
    seen = set()
    for rule in rules:
        rule.start()
    try:
        for case in perf_cases.make_cases("cuda", backward=True):
            if case.kind != "interp" or not case.backward:
                continue
            key = (case.shape[2:], case.osize)
            seen.add(key)
            extern = key in CUDA_WINDOW_GATHERS and case.memory_format == perf_cases.CONTIGUOUS
            stores = key in CUDA_DOWNSAMPLES
            assert _traced_choice(case) == (False, extern and not variants, stores and not variants), case.name
    finally:
        for rule in reversed(rules):
            rule.stop()
    assert CUDA_WINDOW_GATHERS | CUDA_DOWNSAMPLES <= seen


def test_repeat_op_rule():
    """kernel_choice.repeat_op: contiguous (or channels-last 4-d) integer repeats of every moving
    dim, at most MAX_REPEAT_TAPS taps, on the rule's devices, not while exporting."""
    repeat, identity, stride = Pattern("repeat", 2), Pattern("identity"), Pattern("stride", 2, 0)
    x = torch.randn(2, 3, 4, 5)
    cl = x.contiguous(memory_format=torch.channels_last)
    x3 = torch.randn(1, 2, 3, 4, 5)
    cl3 = x3.contiguous(memory_format=torch.channels_last_3d)
    with mock.patch.object(kernel_choice, "REPEAT_KERNEL_DEVICES", ()):
        assert not kernel_choice.repeat_op(x, [repeat, repeat])  # not among the devices
    with mock.patch.object(kernel_choice, "REPEAT_KERNEL_DEVICES", ("cpu",)):
        assert kernel_choice.repeat_op(x, [repeat, repeat])
        assert kernel_choice.repeat_op(x, [identity, repeat])
        assert kernel_choice.repeat_op(x, [Pattern("repeat", 4), Pattern("repeat", 4)])  # 16 taps
        assert not kernel_choice.repeat_op(x3, [Pattern("repeat", 4)] * 3)  # 64 taps
        assert not kernel_choice.repeat_op(x, [identity, identity])  # nothing repeats
        assert not kernel_choice.repeat_op(x, [stride, repeat])
        assert not kernel_choice.repeat_op(x, [None, repeat])  # a gather
        assert kernel_choice.repeat_op(cl, [repeat, repeat])  # channels-last: rows of channels
        assert not kernel_choice.repeat_op(cl3, [repeat, repeat, identity])  # channels-last 3d
        with mock.patch.object(torch.compiler, "is_exporting", lambda: True):
            assert not kernel_choice.repeat_op(x, [repeat, repeat])


def test_repeat_map_rule():
    """kernel_choice.repeat_map: on CPU, a contiguous input whose innermost dim gathers and some
    other dim repeats; not while exporting."""
    repeat, identity = Pattern("repeat", 2), Pattern("identity")
    x = torch.empty(2, 3, 4, 5)
    assert kernel_choice.repeat_map(x, [repeat, None])
    assert kernel_choice.repeat_map(torch.empty(1, 2, 3, 4, 5), [repeat, identity, None])
    assert not kernel_choice.repeat_map(x, [None, None])  # nothing repeats
    assert not kernel_choice.repeat_map(x, [None, repeat])  # the innermost dim is index-free
    assert not kernel_choice.repeat_map(x.contiguous(memory_format=torch.channels_last), [repeat, None])
    assert not kernel_choice.repeat_map(x.to("meta"), [repeat, None])  # not among the devices
    with mock.patch.object(torch.compiler, "is_exporting", lambda: True):
        assert not kernel_choice.repeat_map(x, [repeat, None])


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_repeated_dims_are_indexed_per_row(vector_bits, mode, dynamic, fresh_compiles):
    """A contiguous uint8 gather along W whose H repeats (a literal output size, x2): eager's
    values in both shape modes, and with dynamic shapes no floor division left in the C++ code,
    where the backend would compute ``o // 2`` for every lane of the gather
    (``kernel_choice.repeat_map``)."""
    def f(x):
        return F.interpolate(x, size=(60, 70), mode=mode)

    torch._dynamo.reset()
    compiled = torch.compile(f, dynamic=dynamic)
    x = _random((1, 3, 30, 40), torch.uint8)
    out, code = run_and_get_code(compiled, x)
    _same(out, f(x), mode)
    if dynamic:
        assert "div_floor_integer" not in "\n".join(code)
    for shape in ((2, 3, 30, 40), (1, 2, 30, 57)):  # other batch, channels, widths
        x = _random(shape, torch.uint8)
        _same(compiled(x), f(x), (mode, shape))


def test_window_table_rule():
    """kernel_choice.window_table: on CUDA, a window gather over two or more dims; not over one,
    not on CPU, not while exporting."""
    x = torch.empty(2, 3, 4, 5)
    assert kernel_choice.WINDOW_TABLE_DEVICES == ("cuda",)
    assert not kernel_choice.window_table(x, 2)
    with mock.patch.object(kernel_choice, "WINDOW_TABLE_DEVICES", ("cpu",)):
        assert kernel_choice.window_table(x, 2) and kernel_choice.window_table(x, 3)
        assert not kernel_choice.window_table(x, 1)
        with mock.patch.object(torch.compiler, "is_exporting", lambda: True):
            assert not kernel_choice.window_table(x, 2)


def test_positions_in_gather_rule():
    """kernel_choice.positions_in_gather: on CUDA, a window gather of one tap over one dim; not
    of more taps or dims, not on CPU, not while exporting."""
    x = torch.empty(2, 3, 4, 5)
    assert kernel_choice.POSITIONS_IN_GATHER_DEVICES == ("cuda",)
    assert not kernel_choice.positions_in_gather(x, 1, 1)
    with mock.patch.object(kernel_choice, "POSITIONS_IN_GATHER_DEVICES", ("cpu",)):
        assert kernel_choice.positions_in_gather(x, 1, 1)
        assert not kernel_choice.positions_in_gather(x, 1, 2)
        assert not kernel_choice.positions_in_gather(x, 1, 3)
        assert not kernel_choice.positions_in_gather(x, 2, 1)
        with mock.patch.object(torch.compiler, "is_exporting", lambda: True):
            assert not kernel_choice.positions_in_gather(x, 1, 1)


def test_index_table_rule(vector_bits):
    """kernel_choice.index_table: on CPU, a gathered dim innermost in memory where the vectors
    are wide or, at AVX2's width, float32, uint8 and bfloat16, or an outer one whose map is
    float64 arithmetic (centre shift, float64 input, both kernels' maps); not while exporting.
    And the forward's extern choice beside it: floating-point dtypes without tables at that
    width, and bfloat16 with AVX512's vectors."""
    wide = vector_bits >= kernel_choice.WIDE_VECTOR_BITS
    x = torch.empty(2, 3, 4, 5)
    nearest, exact = Rule(exact=False), Rule(exact=True, centre_shift=True, fma=True)
    both = KernelChoice(torch.tensor(True), Rule(exact=True, header_special=True), exact)
    tables = {torch.float32: True, torch.uint8: True, torch.bfloat16: True, torch.float16: wide, torch.float64: wide}
    externs = {torch.float32: False, torch.uint8: False, torch.bfloat16: wide, torch.float16: True, torch.float64: True}
    for dtype, innermost_table in tables.items():
        y = x.to(dtype)  # the innermost map, else computed per element
        assert kernel_choice.index_table(y, True, nearest) == innermost_table, dtype
        assert kernel_choice.index_table(y, True, exact) == innermost_table, dtype
        assert kernel_choice.aten_forward(y, [None, None]) == externs[dtype], dtype
    with mock.patch.object(cpu_vectors, "vector_bits", lambda: 128):  # narrower than AVX2's
        assert not kernel_choice.index_table(x, True, nearest)
        assert kernel_choice.aten_forward(x, [None, None])
    assert not kernel_choice.index_table(x, False, nearest)  # per row: computing is as cheap
    assert kernel_choice.index_table(x, False, exact)
    assert kernel_choice.index_table(x, False, Rule(exact=False, double=True))
    assert kernel_choice.index_table(x, False, both)
    # Both kernels' nearest maps agree without a scale, and with one where O is neither I nor 2I:
    # the generic float32 one alone.
    both_nearest = KernelChoice(torch.tensor(True), Rule(exact=False, header_special=True), nearest)
    assert not kernel_choice.index_table(x, False, both_nearest.along(4, 6, None))
    assert not kernel_choice.index_table(x, False, both_nearest.along(4, 7, 1.7))
    assert kernel_choice.index_table(x, False, both_nearest.along(4, 4, 1.7))
    assert kernel_choice.index_table(x, False, both_nearest.along(4, 8, 1.7))
    assert not kernel_choice.index_table(x.to("meta"), False, exact)  # not among the devices
    with mock.patch.object(torch.compiler, "is_exporting", lambda: True):
        assert not kernel_choice.index_table(x, False, exact)


def test_few_channels_rule(vector_bits):
    """kernel_choice.channel_rows and aten_forward for channels-last gathers of at most
    FEW_CHANNELS channels on CPU whose innermost spatial dim gathers: rows for uint8, 2-byte
    floats and float32 (from AVX2's width), per pixel for float64; never ATen's kernel."""
    gather, inner_repeat = [Pattern("repeat", 2), None], [None, Pattern("repeat", 2)]

    def cl(c, dtype, rank=2):
        x = torch.empty(2, c, *[4, 5, 6][-rank:], dtype=dtype)
        return x.contiguous(memory_format=torch.channels_last if rank == 2 else torch.channels_last_3d)

    for dtype in (torch.uint8, torch.bfloat16, torch.float16, torch.float32):
        assert kernel_choice.channel_rows(cl(3, dtype), gather)
        assert kernel_choice.channel_rows(cl(2, dtype, rank=3), [None] * 3)
    for dtype in (torch.uint8, torch.bfloat16, torch.float32, torch.float64):
        assert not kernel_choice.aten_forward(cl(3, dtype), gather)
    assert not kernel_choice.channel_rows(cl(3, torch.float64), gather)
    with mock.patch.object(cpu_vectors, "vector_bits", lambda: 128):  # narrower than AVX2's
        assert not kernel_choice.channel_rows(cl(3, torch.float32), gather)
        assert kernel_choice.channel_rows(cl(3, torch.uint8), gather)
        assert not kernel_choice.aten_forward(cl(3, torch.uint8), gather)
    for x in (cl(4, torch.bfloat16), cl(4, torch.uint8)):  # more channels: per pixel
        assert not kernel_choice.channel_rows(x, gather) and not kernel_choice.aten_forward(x, gather)
    x = cl(3, torch.bfloat16)
    assert not kernel_choice.channel_rows(x, inner_repeat)  # the innermost dim is index-free
    assert not kernel_choice.channel_rows(x, [Pattern("stride", 2, 0), None])  # rows not a view
    assert not kernel_choice.channel_rows(x.contiguous(), gather)
    assert not kernel_choice.channel_rows(x.to("meta"), gather)  # not among the devices
    with mock.patch.object(torch.compiler, "is_exporting", lambda: True):
        assert not kernel_choice.channel_rows(x, gather)
        assert not kernel_choice.aten_forward(cl(3, torch.uint8), gather)


def _forward_graph(case: perf_cases.Case):
    """The forward of a harness row, traced with symbolic sizes as ``torch.compile(dynamic=True)``
    traces it (the symbolic call form's output size from a tensor's shape)."""
    x = torch.empty(case.shape, dtype=getattr(torch, case.dtype),
                    memory_format=getattr(torch, case.memory_format))
    o = torch.empty(case.osize, dtype=torch.uint8)

    def fn(x, o):
        if case.scale_factor is not None:
            return F.interpolate(x, scale_factor=case.scale_factor, mode=case.mode)
        size = case.osize if case.call_form == "literal" else tuple(o.shape)
        return F.interpolate(x, size=size, mode=case.mode)

    return make_fx(fn, decomposition_table=TABLE, tracing_mode="symbolic")(x, o).graph


def _index_tables(case: perf_cases.Case) -> int:
    """How many index tables the forward of a harness row loads."""
    return sum(str(n.target) == "decomps.index_table.default" for n in _forward_graph(case).nodes)


# Index tables of harness CPU rows, both call forms: (input spatial size, output size, dtype,
# layout, mode) -> tables with (narrow, wide) vectors. Contiguous uint8 and float32 gathers load
# the innermost dim's map with either width, and in nearest-exact the outer dim's centre shift;
# channels-last uint8 and float32 rows read rows through one table of offsets with either width,
# and uint8 nearest-exact loads the outer dim's centre shift from a second.
INDEX_TABLE_ROWS = {
    ((500, 400), (256, 256), "uint8", "contiguous_format", "nearest"): (1, 1),
    ((500, 400), (256, 256), "uint8", "contiguous_format", "nearest-exact"): (2, 2),
    ((500, 400), (256, 256), "float32", "contiguous_format", "nearest"): (1, 1),
    ((500, 400), (256, 256), "float32", "contiguous_format", "nearest-exact"): (2, 2),
    ((500, 400), (256, 256), "uint8", "channels_last", "nearest"): (1, 1),
    ((500, 400), (256, 256), "uint8", "channels_last", "nearest-exact"): (2, 2),
    ((300, 400), (600, 700), "float32", "channels_last", "nearest"): (1, 1),
    ((300, 400), (600, 700), "float32", "channels_last", "nearest-exact"): (1, 1),  # H repeats
    # x1.5 by scale_factor, 32 channels: the channels-last kernel's maps under a guard on the
    # channel count, computed per pixel (nearest's would be the generic one's anyway: the output
    # size proves O != I, 2I).
    ((64, 64, 64), (96, 96, 96), "float32", "channels_last_3d", "nearest"): (0, 0),
    ((64, 64, 64), (96, 96, 96), "float32", "channels_last_3d", "nearest-exact"): (0, 0),
}


def test_index_tables_for_the_harness_cpu_rows(vector_bits):
    wide = vector_bits >= kernel_choice.WIDE_VECTOR_BITS
    seen = set()
    for case in perf_cases.make_cases("cpu"):
        key = (case.shape[2:], case.osize, case.dtype, case.memory_format, case.mode)
        if case.kind == "interp" and (case.shape[0] == 1 or len(case.shape) == 5) and key in INDEX_TABLE_ROWS:
            seen.add(key)
            assert _index_tables(case) == INDEX_TABLE_ROWS[key][wide], case.name
    assert seen == set(INDEX_TABLE_ROWS)


def _period_slices(case: perf_cases.Case) -> bool:
    """Whether the forward of a harness row cuts a short period into slices (a ``cat``)."""
    return any(n.target == aten.cat.default for n in _forward_graph(case).nodes)


# Harness CPU rows whose forward cuts the innermost period into slices (contiguous, a symbolic
# output size: a literal one is static while the input's is symbolic, and the period's ratio
# guard would pin the input size): (input spatial size, output size, dtype) -> (narrow, wide
# vectors). 1300 -> 300 has a period of 3 outputs, but its H (1200 -> 200) gathers with symbolic
# sizes, so W gathers too. 400 -> 700 under a repeated H: the slices' cat is a buffer the repeat
# copies again, and float32 gathers, loading whole vectors with AVX2's vectors and AVX512's, write
# each output once (kernel_choice.period_slices).
PERIOD_SLICE_ROWS = {
    ((1200, 1300), (200, 300), "uint8"): (False, False),
    ((1200, 1300), (200, 300), "float32"): (False, False),
    ((300, 400), (600, 700), "uint8"): (True, True),
    ((300, 400), (600, 700), "float32"): (False, False),
}


def test_period_slices_for_the_harness_cpu_rows(vector_bits):
    wide = vector_bits >= kernel_choice.WIDE_VECTOR_BITS
    seen = set()
    for case in perf_cases.make_cases("cpu"):
        if case.kind != "interp":
            continue
        key = (case.shape[2:], case.osize, case.dtype)
        expected = key in PERIOD_SLICE_ROWS and case.memory_format == perf_cases.CONTIGUOUS
        expected = expected and case.call_form == "symbolic" and PERIOD_SLICE_ROWS[key][wide]
        seen.add(key)
        assert _period_slices(case) == expected, case.name
    assert set(PERIOD_SLICE_ROWS) <= seen


@pytest.mark.parametrize("rank", [2, 3])
def test_few_channel_gathers_are_eager_exactly(vector_bits, rank, fresh_compiles):
    """Channels-last gathers of 3 channels (rows, per pixel for float64), at both vector widths,
    both modes; 2d with static sizes and a symbolic output size, 3d with a literal one."""
    isize, osize = ((7, 9), (11, 13)) if rank == 2 else ((4, 5, 6), (6, 7, 9))
    layout = torch.channels_last if rank == 2 else torch.channels_last_3d
    forms = [(False, "literal"), (True, "symbolic")] if rank == 2 else [(True, "literal")]
    for dtype, mode, (dynamic, form) in itertools.product(
        (torch.uint8, torch.bfloat16, torch.float32, torch.float64), ("nearest", "nearest-exact"), forms
    ):
        x = _random((2, 3, *isize), dtype, layout)
        if form == "literal":
            fn = eval(f"lambda x: F.interpolate(x, size={osize!r}, mode={mode!r})", {"F": F})
        else:
            fn = lambda x: F.interpolate(x, size=osize, mode=mode)  # noqa: E731
        torch._dynamo.reset()
        out = torch.compile(fn, dynamic=dynamic, fullgraph=True)(x)
        _same(out, fn(x), (dtype, mode, dynamic, form))


class _Graphs:
    """An Inductor backend that counts the graphs it compiles."""

    def __init__(self):
        self.count = 0

    def __call__(self, gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        self.count += 1
        return compile_fx(gm, example_inputs)


@pytest.mark.parametrize("channels", [[3, 8, 2, 16]])
def test_few_channels_compile_at_most_two_graphs(vector_bits, channels, fresh_compiles):
    """The channel guard is taken only where the example has few channels: a call site whose
    channel count changes compiles at most two graphs, each exact."""
    fn = lambda x: F.interpolate(x, size=(9, 13), mode="nearest")  # noqa: E731
    for dtype in (torch.bfloat16, torch.uint8, torch.float32):
        torch._dynamo.reset()
        graphs = _Graphs()
        compiled = torch.compile(fn, backend=graphs, dynamic=True)
        for c in channels:
            x = _random((2, c, 5, 7), dtype, torch.channels_last)
            _same(compiled(x), fn(x), (dtype, c))
        assert graphs.count <= 2, (dtype, channels)
